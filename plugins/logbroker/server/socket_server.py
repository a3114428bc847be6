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
import contextlib
import errno
import logging
import math
import os
import resource
import socket
import ssl
from asyncio import sslproto
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
_TLS_READ_MAX = 1 << 20  # the most a TLS connection reads from its socket at once
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
            return self._connection(self) if self.tls is None else _TlsProtocol(self)

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

    def handshake_done(self, protocol: _TlsProtocol, done: asyncio.Future[None]) -> None:
        """A TLS connection's handshake ended: a failure is one line naming the client and
        OpenSSL's reason (asyncio has closed the connection already)."""
        exc = None if done.cancelled() else done.exception()
        if exc is None:
            return
        self.metrics.error("tls_handshake")
        self.warnings.warning(
            "tls_handshake",
            "closing connection from %s on listener %s: TLS handshake failed: %s",
            protocol.client,
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


class _TlsProtocol(sslproto.SSLProtocol):
    """What asyncio's own `create_server(ssl=...)` makes for each connection (its TLS layer,
    which hands the ClientConnection the decrypted transport before any data), plus the
    client's address and a line for a handshake that fails (SocketServer.handshake_done)."""

    # What one read from the socket takes. asyncio's is 256 KiB, allocated (and zeroed) for
    # every connection. Here a connection starts with 64 KiB (an idle one holds no more),
    # and a read that fills it makes it 4 times larger, up to _TLS_READ_MAX: as much as a
    # receive buffer holds (socket.receive.buffer, 1 MiB in the bench), so that a burst
    # of produces is read, decrypted and handled in one loop turn, not four.
    max_size = 64 * 1024

    def buffer_updated(self, nbytes: int) -> None:
        if nbytes >= self.max_size and self.max_size < _TLS_READ_MAX:
            # this connection's own (typeshed has asyncio's as a ClassVar); get_buffer
            # allocates the larger buffer on the next read
            self.max_size = min(self.max_size * 4, _TLS_READ_MAX)  # type: ignore[misc]
        super().buffer_updated(nbytes)

    def __init__(self, server: SocketServer) -> None:
        assert server.tls is not None
        waiter: asyncio.Future[None] = server.loop.create_future()
        super().__init__(
            server.loop,
            server._connection(server),
            server.tls,
            waiter,
            server_side=True,
            ssl_handshake_timeout=math.ceil(server.config.request_timeout_ms / 1000),
        )
        self.client = "?"
        waiter.add_done_callback(lambda done: server.handshake_done(self, done))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.client = f"{peer[0]}:{peer[1]}" if peer else "?"
        super().connection_made(transport)

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        # asyncio closes a failed handshake's connection without sending the TLS alert
        # OpenSSL wrote (unknown CA, expired certificate, ...): sent first, so that the client
        # is told why, not only that the connection closed.
        if handshake_exc is not None:
            with contextlib.suppress(Exception):
                self._process_outgoing()  # type: ignore[attr-defined]
        super()._on_handshake_complete(handshake_exc)
