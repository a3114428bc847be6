"""A blocking connection to one broker: send request frames, read response frames.

    request  := int32 size | int16 type | body          (protocol/requests.py)
    response := int32 size | int16 error | body         (protocol/responses.py)

0.7 has no correlation ids: a broker answers the requests of one connection in order, and
PRODUCE/MULTIPRODUCE get no answer. So a connection is used by one thread at a time (the
lock), and a failed or timed-out exchange closes the socket rather than leave a response in
flight that the next caller would read as its own. The next call reconnects.

With `tls` (an ssl.SSLContext, security/tls.py's ClientSecurity makes one from Kafka's client
settings) the socket is wrapped after connecting and the handshake is done at once, so that a
refused certificate is a BrokerUnavailableError naming the broker and OpenSSL's reason.

Then, with `sasl` (security/sasl.py: Kafka's sasl.mechanism, user and password), every new socket
(over TLS when `tls` is set too: SASL_SSL)
runs the SASL exchange before its first request; a refused login raises
SaslAuthenticationError, which is not retried.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from types import TracebackType
from typing import Self

from ..protocol.errors import LogbrokerError
from ..protocol.requests import Request, encode_request
from ..security.sasl import SaslAuthenticationError, SaslClientConfig, authenticate

_SIZE = struct.Struct(">i")
_TIMEVAL = struct.Struct("@ll")  # struct timeval: seconds, microseconds
DEFAULT_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 1 << 31
_READ_AHEAD = 8 * 1024  # small answers whole in one read; a large one copies at most this


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
        tls: ssl.SSLContext | None = None,
        sasl: SaslClientConfig | None = None,
    ) -> None:
        self.host = host
        self.tls = tls
        self.sasl = sasl
        self.principal: str | None = None  # "User:<name>" once logged in
        self.port = port
        self.timeout = timeout
        self.buffer_size = buffer_size
        self._sock: socket.socket | None = None
        self.lock = threading.RLock()
        # What was read and not returned yet: bytes [start, end) of this buffer (the start
        # of the next pipelined answers); small answers are read whole into it.
        self._ahead = bytearray(_READ_AHEAD)
        self._ahead_view = memoryview(self._ahead)
        self._ahead_start = self._ahead_end = 0

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
            if self.timeout is not None:
                # The kernel's own timeouts on a blocking socket: Python waits in poll()
                # before every send and recv of a socket that has a timeout, one system call
                # more each, and a waiting consumer is woken in poll() and reads after.
                seconds = max(self.timeout, 0.001)
                timeval = _TIMEVAL.pack(int(seconds), int(seconds % 1 * 1_000_000))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
                sock.settimeout(None)
            if self.tls is not None:
                sock = self._wrap(sock)
            if self.sasl is not None:
                try:
                    self.principal = authenticate(sock, self.sasl, self.address)
                except SaslAuthenticationError:
                    sock.close()
                    raise
            self._sock = sock
        return self._sock

    def _wrap(self, sock: socket.socket) -> socket.socket:
        assert self.tls is not None
        try:
            return self.tls.wrap_socket(sock, server_hostname=self.host)
        except (ssl.SSLError, ssl.CertificateError, OSError) as exc:
            sock.close()
            reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc
            raise BrokerUnavailableError(
                f"TLS handshake with broker {self.address} failed: {reason}"
            ) from exc

    def _failure(self, exc: OSError) -> str:
        """What went wrong, in words: the kernel's timeout surfaces as EAGAIN."""
        if isinstance(exc, BlockingIOError | TimeoutError):
            return f"timed out after {self.timeout:g} s"
        return str(exc)

    def close(self) -> None:
        with self.lock:
            self._ahead_start = self._ahead_end = 0  # read ahead from this socket: dropped
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
            sock = self._sock or self.connect()
            try:
                sock.sendall(frame)
            except OSError as exc:
                self.close()
                raise BrokerUnavailableError(
                    f"sending to broker {self.address} failed: {self._failure(exc)}"
                ) from exc

    def request(self, request: Request | bytes) -> bytes:
        """Send a request and return its response after the int32 size (error code first)."""
        frame = (
            request
            if isinstance(request, bytes | bytearray | memoryview)
            else encode_request(request)
        )
        with self.lock:
            sock = self._sock or self.connect()
            try:
                sock.sendall(frame)
                return self._receive(sock)
            except (OSError, BrokerUnavailableError) as exc:
                self.close()
                if not isinstance(exc, OSError):
                    raise
                raise BrokerUnavailableError(
                    f"request to broker {self.address} failed: {self._failure(exc)}"
                ) from exc

    def receive(self, into: bytearray | None = None) -> bytes:
        """Read the next response of a request sent with `send` (pipelining; in order).

        With `into`, a large response that fits is read into that buffer, and a view of it
        is returned: valid until the buffer is used again. A caller that copies out what it
        needs before its next receive (SimpleConsumer.iter_batches) saves a fresh buffer per
        response, and the page faults of its first writes."""
        with self.lock:
            sock = self._sock or self.connect()
            try:
                return self._receive(sock, into)
            except (OSError, BrokerUnavailableError) as exc:
                self.close()
                if not isinstance(exc, OSError):
                    raise
                raise BrokerUnavailableError(
                    f"reading from broker {self.address} failed: {self._failure(exc)}"
                ) from exc

    def _receive(self, sock: socket.socket, into: bytearray | None = None) -> bytes:
        while self._ahead_end - self._ahead_start < 4:
            self._read_ahead(sock)
        (size,) = _SIZE.unpack_from(self._ahead, self._ahead_start)
        if not 2 <= size < MAX_RESPONSE_BYTES:
            raise BrokerUnavailableError(f"broker {self.address} sent a response size of {size}")
        start = self._ahead_start + 4
        end = start + size
        if end <= self._ahead_end:  # a small response: it came whole with its size
            body = bytes(self._ahead_view[start:end])
            self._ahead_start = end
            return body
        # A large one: what came with the size, then the rest read straight into place.
        have = self._ahead_end - start
        reuse = into is not None and 4096 <= size <= len(into)
        buf = into if into is not None and reuse else bytearray(size)
        view = memoryview(buf)[:size]
        view[:have] = self._ahead_view[start : self._ahead_end]
        self._ahead_start = self._ahead_end = 0
        while have < size:
            got = sock.recv_into(view[have:], size - have)
            if got == 0:
                raise BrokerUnavailableError(
                    f"broker {self.address} closed the connection ({have} of {size} bytes read)"
                )
            have += got
        if reuse:
            return view  # type: ignore[return-value]
        return bytes(buf) if size < 4096 else buf  # type: ignore[return-value]

    def _read_ahead(self, sock: socket.socket) -> None:
        """One read of whatever the socket holds, after what is already here: a small
        response arrives with its size in one system call instead of two."""
        if self._ahead_start == self._ahead_end:
            self._ahead_start = self._ahead_end = 0
        elif self._ahead_end == len(self._ahead):  # full: move what is left to the front
            left = bytes(self._ahead_view[self._ahead_start : self._ahead_end])
            self._ahead[: len(left)] = left
            self._ahead_start, self._ahead_end = 0, len(left)
        got = sock.recv_into(self._ahead_view[self._ahead_end :])
        if got == 0:
            raise BrokerUnavailableError(
                f"broker {self.address} closed the connection (a response was expected)"
            )
        self._ahead_end += got

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
