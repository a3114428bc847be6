"""A blocking connection to one broker: send request frames, read response frames.

    request  := int32 size | int16 type | body          (protocol/requests.py)
    response := int32 size | int16 error | body         (protocol/responses.py)

0.7 has no correlation ids: a broker answers the requests of one connection in order, and
PRODUCE/MULTIPRODUCE get no answer. So a connection is used by one thread at a time (the
lock), and a failed or timed-out exchange closes the socket rather than leave a response in
flight that the next caller would read as its own. The next call reconnects.
"""

from __future__ import annotations

import socket
import struct
import threading
from types import TracebackType
from typing import Self

from ..protocol.errors import LogbrokerError
from ..protocol.requests import Request, encode_request

_SIZE = struct.Struct(">i")
DEFAULT_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 1 << 31
_READ_AHEAD = 64 * 1024


class BrokerUnavailableError(LogbrokerError):
    """The broker cannot be reached, or the connection broke during a request."""


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        buffer_size: int = 1 << 20,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.buffer_size = buffer_size
        self._sock: socket.socket | None = None
        self.lock = threading.RLock()
        # bytes read past the last response (pipelined answers), and the buffer reads go to
        self._ahead = bytearray()
        self._scratch = bytearray(_READ_AHEAD)
        self._scratch_view = memoryview(self._scratch)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self) -> socket.socket:
        if self._sock is None:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            except OSError as exc:
                raise BrokerUnavailableError(
                    f"cannot connect to broker {self.address}: {exc}"
                ) from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.buffer_size)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.buffer_size)
            self._sock = sock
        return self._sock

    def close(self) -> None:
        with self.lock:
            self._ahead.clear()  # what was read ahead belongs to this socket's requests
            if self._sock is not None:
                try:
                    self._sock.close()
                finally:
                    self._sock = None

    # -- sending and receiving --------------------------------------------------------

    def send(self, request: Request | bytes) -> None:
        """Send a request that gets no response (PRODUCE, MULTIPRODUCE), or a prebuilt frame."""
        frame = (
            request
            if isinstance(request, bytes | bytearray | memoryview)
            else encode_request(request)
        )
        with self.lock:
            sock = self.connect()
            try:
                sock.sendall(frame)
            except OSError as exc:
                self.close()
                raise BrokerUnavailableError(
                    f"sending to broker {self.address} failed: {exc}"
                ) from exc

    def request(self, request: Request | bytes) -> bytes:
        """Send a request and return its response after the int32 size (error code first)."""
        frame = (
            request
            if isinstance(request, bytes | bytearray | memoryview)
            else encode_request(request)
        )
        with self.lock:
            sock = self.connect()
            try:
                sock.sendall(frame)
                return self._receive(sock)
            except (OSError, BrokerUnavailableError) as exc:
                self.close()
                if isinstance(exc, BrokerUnavailableError):
                    raise
                raise BrokerUnavailableError(
                    f"request to broker {self.address} failed: {exc}"
                ) from exc

    def receive(self) -> bytes:
        """Read the next response of a request sent with `send` (pipelining; in order)."""
        with self.lock:
            sock = self.connect()
            try:
                return self._receive(sock)
            except (OSError, BrokerUnavailableError) as exc:
                self.close()
                if isinstance(exc, BrokerUnavailableError):
                    raise
                raise BrokerUnavailableError(
                    f"reading from broker {self.address} failed: {exc}"
                ) from exc

    def _receive(self, sock: socket.socket) -> bytes:
        ahead = self._ahead
        while len(ahead) < 4:
            self._read_ahead(sock)
        (size,) = _SIZE.unpack_from(ahead, 0)
        if not 2 <= size < MAX_RESPONSE_BYTES:
            raise BrokerUnavailableError(f"broker {self.address} sent a response size of {size}")
        end = 4 + size
        if len(ahead) >= end:  # a small response: it came whole with its size
            body = bytes(ahead[4:end])
            del ahead[:end]
            return body
        have = len(ahead) - 4
        buf = bytearray(size)
        buf[:have] = ahead[4:]
        ahead.clear()
        view = memoryview(buf)
        while have < size:
            got = sock.recv_into(view[have:], size - have)
            if got == 0:
                raise BrokerUnavailableError(
                    f"broker {self.address} closed the connection ({have} of {size} bytes read)"
                )
            have += got
        return bytes(buf) if size < 4096 else buf  # type: ignore[return-value]

    def _read_ahead(self, sock: socket.socket) -> None:
        """One read of whatever the socket holds (up to 64 KiB): a small response arrives
        with its size in one system call instead of two."""
        got = sock.recv_into(self._scratch)
        if got == 0:
            raise BrokerUnavailableError(
                f"broker {self.address} closed the connection (a response was expected)"
            )
        self._ahead += self._scratch_view[:got]

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address})"
