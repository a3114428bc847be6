"""The listening socket, the set of connections, and the timeouts that guard them.

A broker has one per listener (security/listeners.py): the 0.7 port (`port`, ClientConnection), the
Kafka 0.8 listener when `port.08` is set (Kafka08Connection), and those of `listeners`. One
event loop serves them all.

An SSL listener puts asyncio's TLS layer (`_TlsProtocol`, what `create_server(ssl=...)` uses)
in front of each connection, and watches its handshake: one that fails (plaintext sent to the
TLS port, a certificate from another CA, none where one is required) is one log line naming
the client and the reason, and the connection is closed; asyncio's own `ssl=` server drops
those without a word. The handshake has `request.timeout.ms` to finish.

One asyncio event loop serves every connection (the handlers only append to page cache and
hand file regions to sendfile, so they do not block). A sweeper closes connections that
trickle a request for longer than `request.timeout.ms`, have not completed their SASL login
`request.timeout.ms` after they connected, or stay idle longer than
`idle.connection.timeout.ms`, so slow or idle clients cannot hold the broker.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import resource
import socket
import ssl
from collections.abc import Callable
from typing import Any

from ..config import BrokerConfig
from .connection import ClientConnection
from .handlers import RequestHandlers
from .log_limiter import RateLimitedLog
from .metrics import BrokerMetrics

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 0.5
# asyncio stops accepting for a second when accept() fails for want of descriptors or
# memory, and reports each failure: one line per this many seconds says how many there were.
ACCEPT_ERROR_LOG_INTERVAL_S = 60.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def descriptor_use() -> str:
    """'N of M descriptors open' for this process (M: the soft RLIMIT_NOFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError as exc:
        if exc.errno in _OUT_OF_RESOURCES:
            return f"every descriptor in use, the limit is {soft}"
        return "descriptors in use unknown"
    limit = "no limit" if soft == resource.RLIM_INFINITY else f"a limit of {soft}"
    return f"{used} descriptors open of {limit}"


class SocketServer:
    def __init__(
        self,
        config: BrokerConfig,
        handlers: RequestHandlers,
        metrics: BrokerMetrics,
        loop: asyncio.AbstractEventLoop,
        warnings: RateLimitedLog | None = None,
        *,
        port: int | None = None,
        connection: Callable[[SocketServer], ClientConnection] = ClientConnection,
        host: str | None = None,
        tls: ssl.SSLContext | None = None,
        name: str = "PLAINTEXT",
    ) -> None:
        """`host`, `port`: the listener's (config.hostname, config.port by default);
        `connection`: what serves each accepted connection (its protocol's framing); `tls`:
        the context of an SSL listener; `name`: the listener's, for log lines."""
        self.config = config
        self.port = config.port if port is None else port
        self.host = config.hostname if host is None else host
        self.tls = tls
        self.name = name
        self._connection = connection
        # What clients can make the broker log (closed connections, refused requests).
        self.warnings = warnings or RateLimitedLog(
            logging.getLogger("logbroker.server.connection"),
            config.connection_log_interval_ms / 1000,
        )
        self.handlers = handlers
        self.metrics = metrics
        self.loop = loop
        self.max_request_bytes = config.max_socket_request_bytes
        self.connections: set[ClientConnection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._stopping = False
        self._accept_errors = 0  # since the last line logged about them
        self._accept_log_after = 0.0

    async def start(self) -> tuple[str, int]:
        self.loop.set_exception_handler(self._loop_error)

        def factory() -> asyncio.BaseProtocol:
            return self._connection(self) if self.tls is None else _TakeOver(self)

        self._server = await self.loop.create_server(
            factory,
            host=self.host,
            port=self.port,
            reuse_address=True,
            backlog=1024,
        )
        self._sweeper = self.loop.create_task(self._sweep())
        listener = self._server.sockets[0]
        # Accepted sockets inherit the listener's buffers (and the window scale it offers
        # in the handshake); connection_made sets them again on each one.
        for sock in self._server.sockets:
            self.apply_buffers(sock)
        host, port = listener.getsockname()[:2]
        log.info(
            "listener %s%s on %s:%d: socket buffers of connections: SO_SNDBUF %d bytes, "
            "SO_RCVBUF %d bytes "
            "(socket.send.buffer=%d, socket.receive.buffer=%d; Linux reports twice the value "
            "asked, for its bookkeeping)",
            self.name,
            " (TLS)" if self.tls is not None else "",
            host,
            port,
            listener.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            listener.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            self.config.socket_send_buffer,
            self.config.socket_receive_buffer,
        )
        return host, port

    def apply_buffers(self, sock: socket.socket) -> None:
        """SO_SNDBUF and SO_RCVBUF from socket.send.buffer and socket.receive.buffer (-1:
        the OS default, which Linux then tunes itself)."""
        if self.config.socket_send_buffer >= 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.socket_send_buffer)
        if self.config.socket_receive_buffer >= 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.socket_receive_buffer)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """accept() out of descriptors: counted, and logged once per interval with a count."""
        exc = context.get("exception")
        if self._stopping and "_start_serving" in repr(context.get("handle")):
            return  # an accept retry asyncio scheduled (one per failed accept) after close
        if not (isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES):
            loop.default_exception_handler(context)
            return
        self.metrics.error("accept")
        self._accept_errors += 1
        now = loop.time()
        if now < self._accept_log_after:
            return
        log.error(
            "cannot accept connections: %s (%s); asyncio retries every second; "
            "%d such errors since the last of these lines, the next in %g s at the earliest",
            exc.strerror or exc,
            descriptor_use(),
            self._accept_errors,
            ACCEPT_ERROR_LOG_INTERVAL_S,
        )
        self._accept_errors = 0
        self._accept_log_after = now + ACCEPT_ERROR_LOG_INTERVAL_S

    def handshake_failed(self, client: str, exc: BaseException) -> None:
        """A TLS connection's handshake failed: one line naming the client and OpenSSL's
        reason (the transport closes the connection)."""
        self.metrics.error("tls_handshake")
        self.warnings.warning(
            "tls_handshake",
            "closing connection from %s on listener %s: TLS handshake failed: %s",
            client,
            self.name,
            _reason(exc),
        )

    def connection_opened(self, conn: ClientConnection) -> None:
        self.connections.add(conn)
        self.metrics.connection_opened()

    def connection_closed(self, conn: ClientConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.metrics.connection_closed()

    def track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep(self) -> None:
        request_timeout = self.config.request_timeout_ms / 1000
        idle_timeout = self.config.idle_connection_timeout_ms / 1000
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            now = self.loop.time()
            for conn in list(self.connections):
                if conn.login_since is not None and now - conn.login_since > request_timeout:
                    self.metrics.error("timeout")
                    conn.close(
                        f"SASL login not complete after {request_timeout:g} s ({conn.login_stage})",
                        "timeout",
                    )
                elif conn.partial_since is not None and now - conn.partial_since > request_timeout:
                    self.metrics.error("timeout")
                    conn.close(f"request not complete after {request_timeout:g} s", "timeout")
                elif conn.idle and now - conn.last_activity > idle_timeout:
                    conn.close(f"idle for {idle_timeout:g} s", "idle")
            self.warnings.flush()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let responses in flight finish, then close every connection."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._tasks:
            _done, pending = await asyncio.wait(list(self._tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                log.warning(
                    "stopping: %d responses still in flight after the %g s grace; cancelled",
                    len(pending),
                    grace_s,
                )
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()


def _reason(exc: BaseException) -> str:
    """A failed handshake in words: OpenSSL's reason (WRONG_VERSION_NUMBER for plaintext,
    certificate verify failed, ...), else the exception."""
    if isinstance(exc, ssl.SSLError) and exc.reason:
        verify = getattr(exc, "verify_message", None)
        return f"{exc.reason}" + (f" ({verify})" if verify else "")
    if isinstance(exc, TimeoutError) or (
        # asyncio's ssl_handshake_timeout aborts the connection so ("SSL handshake is
        # taking longer than N seconds"): said in the broker's own key's terms
        isinstance(exc, ConnectionAbortedError) and "taking longer" in str(exc)
    ):
        return "not complete within request.timeout.ms"
    return str(exc) or type(exc).__name__


class _TakeOver(asyncio.Protocol):
    """What asyncio's accept hands an SSL listener's connection to: a duplicate of the
    accepted socket goes to a _TlsTransport, and asyncio's transport is closed before it has
    read anything (its descriptor only; the connection stays open on the duplicate). So
    accepting, and its errors (_loop_error), stay asyncio's."""

    def __init__(self, server: SocketServer) -> None:
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        try:
            raw = socket.socket(sock.family, sock.type, sock.proto, os.dup(sock.fileno()))
        except OSError as exc:
            self.server.metrics.error("accept")
            self.server.warnings.warning(
                "accept", "cannot take over a TLS connection: %s (%s)", exc, descriptor_use()
            )
            raw = None
        transport.abort()
        if raw is not None:
            _TlsTransport(self.server, raw)

    def connection_lost(self, exc: Exception | None) -> None:
        pass


class _TlsTransport(asyncio.Transport):
    """A TLS connection on a non-blocking ssl.SSLSocket, read and written on the event
    loop's readiness callbacks, with the transport interface ClientConnection uses (write,
    pause/resume_reading, abort, get_extra_info, the protocol's pause/resume_writing).

    asyncio's own TLS layer (sslproto) reads the ciphertext into a buffer of its own, copies
    it into OpenSSL's memory BIO, and decrypts from there, record by record, in Python; and
    encrypts into another memory BIO that it copies out to the socket. Here OpenSSL reads
    from and writes to the socket itself: one copy less each way, and no Python between a
    record and the connection's receive buffer but this class's loop.

    The handshake has request.timeout.ms; a failure is one line naming the client and
    OpenSSL's reason (SocketServer.handshake_failed), after OpenSSL has sent the client its
    alert. Only a completed handshake makes the ClientConnection's connection_made.
    """

    _HIGH_WATER = 64 * 1024  # buffered unsent bytes that pause the protocol's writing
    _LOW_WATER = 16 * 1024  # and resume it

    def __init__(self, server: SocketServer, raw: socket.socket) -> None:
        super().__init__()
        assert server.tls is not None
        self._server = server
        self._loop = loop = server.loop
        try:
            peer = raw.getpeername()
            self.client = f"{peer[0]}:{peer[1]}"
        except OSError:
            peer, self.client = None, "?"
        raw.setblocking(False)
        self._sock = sock = server.tls.wrap_socket(
            raw, server_side=True, do_handshake_on_connect=False
        )
        self._fd = sock.fileno()
        self._extra = {"peername": peer, "socket": sock, "ssl_object": sock}
        # made here, as asyncio's TLS layer made it: a SASL login's time counts from now
        self._protocol = server._connection(server)
        self._made = False  # the handshake completed and the protocol was told
        self._reading = True  # the protocol has not paused reading
        self._closing = False
        self._out: collections.deque[bytes | memoryview] = collections.deque()
        self._buffered = 0  # bytes in _out
        self._writing_paused = False  # the protocol was told pause_writing
        self._timer: asyncio.TimerHandle | None = loop.call_later(
            server.config.request_timeout_ms / 1000,
            self._handshake_failed,
            TimeoutError("TLS handshake timed out"),
        )
        loop.add_reader(self._fd, self._handshake)

    # -- handshake --------------------------------------------------------------------

    def _handshake(self) -> None:
        try:
            self._sock.do_handshake()
        except ssl.SSLWantReadError:
            self._loop.remove_writer(self._fd)
            return
        except ssl.SSLWantWriteError:
            self._loop.add_writer(self._fd, self._handshake)
            return
        except Exception as exc:  # SSLError (OpenSSL has sent its alert), OSError
            self._handshake_failed(exc)
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop.remove_writer(self._fd)
        self._loop.remove_reader(self._fd)
        self._made = True
        self._protocol.connection_made(self)
        if self._reading and not self._closing:
            self._loop.add_reader(self._fd, self._read_ready)
            self._read_ready()  # what came with the handshake's last flight

    def _handshake_failed(self, exc: BaseException) -> None:
        self._timer = None
        if self._closing:
            return
        self._server.handshake_failed(self.client, exc)
        self._force_close(None)

    # -- reading ----------------------------------------------------------------------

    def _read_ready(self) -> None:
        """Decrypt into the protocol's buffer until it is full or the socket has no whole
        record left, then hand it over at once (the protocol handles frames per call)."""
        protocol, sock = self._protocol, self._sock
        buf = protocol.get_buffer(-1)
        wanted, got, eof = len(buf), 0, False
        try:
            while got < wanted:
                n = sock.recv_into(buf[got:] if got else buf)
                if not n:
                    eof = True
                    break
                got += n
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except Exception as exc:  # a TLS alert, a reset: the connection is gone
            if got:
                protocol.buffer_updated(got)
            self._force_close(exc if isinstance(exc, Exception) else None)
            return
        if got:
            protocol.buffer_updated(got)
        if eof:
            if self._closing:
                return
            keep_open = protocol.eof_received()
            if not keep_open:
                self._force_close(None)
        elif got == wanted and self._reading and not self._closing:
            # the buffer filled: OpenSSL may hold the rest of a record, which epoll does
            # not see; read again on the next turn
            self._loop.call_soon(self._read_more)

    def _read_more(self) -> None:
        if self._reading and not self._closing:
            self._read_ready()

    def pause_reading(self) -> None:
        if not self._reading or self._closing:
            return
        self._reading = False
        if self._made:
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if self._reading or self._closing:
            return
        self._reading = True
        if self._made:
            self._loop.add_reader(self._fd, self._read_ready)
            self._loop.call_soon(self._read_more)  # records OpenSSL read already

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    # -- writing ----------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:  # type: ignore[override]
        if self._closing or not data:
            return
        if not self._out:
            # OpenSSL writes one record (16 KiB at most) per call: as many as the socket takes
            sent, size = 0, len(data)
            view = memoryview(data)
            try:
                while sent < size:
                    sent += self._sock.send(view[sent:] if sent else view)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                pass
            except Exception as exc:
                self._force_close(exc)
                return
            if sent == size:
                return
            self._loop.add_writer(self._fd, self._write_ready)
            data = view[sent:]
        rest = bytes(data)  # the caller may reuse its buffer, as asyncio's transports allow
        self._out.append(rest)
        self._buffered += len(rest)
        if self._buffered > self._HIGH_WATER and not self._writing_paused:
            self._writing_paused = True
            self._protocol.pause_writing()

    def _write_ready(self) -> None:
        out = self._out
        while out:
            data = out[0]
            try:
                sent = self._sock.send(data)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                return
            except Exception as exc:
                self._force_close(exc)
                return
            self._buffered -= sent
            if sent == len(data):
                out.popleft()
            else:
                out[0] = memoryview(data)[sent:]
        self._loop.remove_writer(self._fd)
        if self._writing_paused and self._buffered <= self._LOW_WATER:
            self._writing_paused = False
            self._protocol.resume_writing()
        if self._closing:
            self._force_close(None)

    def get_write_buffer_size(self) -> int:
        return self._buffered

    # -- closing ----------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Close once what is buffered has been sent."""
        if self._closing:
            return
        if not self._out:
            self._force_close(None)
            return
        self._closing = True
        self._loop.remove_reader(self._fd)

    def abort(self) -> None:
        self._force_close(None)

    def _force_close(self, exc: Exception | None) -> None:
        if self._fd < 0:
            return
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._fd = -1
        self._out.clear()
        self._buffered = 0
        self._loop.call_soon(self._connection_lost, exc)

    def _connection_lost(self, exc: Exception | None) -> None:
        try:
            if self._made:
                self._protocol.connection_lost(exc)
        finally:
            self._sock.close()

    # -- the rest of asyncio.Transport's interface --------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        raise NotImplementedError("a TLS connection keeps its protocol")

    def can_write_eof(self) -> bool:
        return False
