"""A blocking client connection to the broker that never hangs: every read has a deadline.

`Connection.read_frame` returns the next response body, or None at the deadline; it raises
`Closed` when the broker closes the connection (EOF or reset) and `BadResponse` for a
response frame the broker should never send (size under 2 or over 512 MiB). Connections
close with a reset (SO_LINGER 0), so that a long run leaves no TIME_WAIT behind.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterable

_INT32 = struct.Struct(">i")
_MAX_RESPONSE = 512 * 1024 * 1024  # a response larger than this is a broker bug here


class Closed(Exception):
    """The broker closed the connection (EOF or reset)."""


class BadResponse(Exception):
    """A response frame the broker should never send."""


class Connection:
    def __init__(self, address: tuple[str, int], timeout: float) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Close with a reset: no TIME_WAIT left behind by a hundred thousand connections.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.buffer = bytearray()

    def send(self, data: bytes, cuts: Iterable[int] = ()) -> None:
        """Send `data`; with `cuts`, in pieces split there, a short pause between them."""
        try:
            start = 0
            for cut in sorted(cuts):
                self.sock.sendall(data[start:cut])
                time.sleep(0.0005)  # separate reads on the broker's side, most of the time
                start = cut
            self.sock.sendall(data[start:])
        except OSError as exc:
            raise Closed(str(exc)) from None

    def half_close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def read_frame(self, deadline: float) -> bytes | None:
        """The next response body (after its int32 size), or None at the deadline."""
        buf = self.buffer
        while True:
            if len(buf) >= 4:
                (size,) = _INT32.unpack_from(buf, 0)
                if size < 2 or size > _MAX_RESPONSE:
                    raise BadResponse(f"response size {size}")
                if len(buf) >= 4 + size:
                    body = bytes(buf[4 : 4 + size])
                    del buf[: 4 + size]
                    return body
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 18)
            except TimeoutError:
                return None
            except OSError as exc:
                raise Closed(str(exc)) from None
            if not chunk:
                raise Closed("EOF")
            buf += chunk

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
