"""One client connection: framing, one request at a time, responses in order.

    request  := int32 size | size bytes (int16 type | body)      see protocol/requests.py

The size is checked before any of the body is kept: a size under 2 or over
`max.socket.request.bytes` closes the connection. The socket is read straight into the
connection's receive buffer (`_Received`, sized for the frame being read), and requests are
handled from views of it: no frame is copied out, whether one read holds many frames or a
frame takes many reads. Requests on a connection are handled strictly one after
another, as 0.7 did: while a response is still being sent (sendfile) or waited for
(FETCH_WAIT, fsync), the bytes received wait their turn. Reading pauses while a response is
sent; while one is only waited for, reading goes on (up to `_MAX_BUFFERED_WHILE_WAITING`
bytes) so that a client that goes away is noticed: its EOF or reset closes the connection
and cancels the wait, instead of holding the socket until `max_wait_ms` (up to 24 days) ends.

Whatever a client sends, the broker answers with an error code or closes this connection,
logs one line with the client's address, and goes on serving everyone else. A produce that
gets no answer and could not be written (a full disk) closes its connection too: that is the
only way a 0.7 producer learns of it.

On a listener with SASL (`sasl.enabled.mechanisms`), the frames before the first request are
the SASL exchange's (security/sasl.py: a SaslHandshake, then the mechanism's tokens), handed
to the connection's authenticator; `principal` is `User:<name>` once it succeeds. Anything
else first, a malformed or oversized SASL frame, a failed login, or one not complete within
`request.timeout.ms` of the connection's start closes the connection with one line naming
the client.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.errors import (
    InvalidRequestError,
    LogbrokerError,
    NotLeaderForPartitionError,
    StorageError,
)
from ..protocol.replication import OffsetsForLeaderEpochRequest, ReplicaFetchRequest
from ..protocol.requests import (
    REQUEST_TYPE_BYTES,
    AckedProduceRequest,
    MultiProduceRequest,
    ProduceRequest,
    decode_produce_fast,
    decode_request,
    produce_run,
)
from ..security.acls import ANONYMOUS
from ..security.sasl import MAX_FRAME, ServerAuthenticator
from ..security.scram import SaslError
from ..security.tls import principal_of
from ..storage.segment import FileRegion
from .handlers import Response
from .waiters import WaitingFetch

# Produces that get no answer and could not be appended: the connection is closed to say so.
_LOST_PRODUCES = (StorageError, NotLeaderForPartitionError)

if TYPE_CHECKING:
    from .socket_server import SocketServer

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_PRODUCES = (ProduceRequest, MultiProduceRequest, AckedProduceRequest)
# Requests only brokers may make, when the broker asks them to authenticate (security/listeners.py).
_REPLICATION = (ReplicaFetchRequest, OffsetsForLeaderEpochRequest)
_MAX_BUFFERED_WHILE_WAITING = 1 << 20  # then reading pauses until the response is out
_COPY_MAX = 16 * 1024  # file regions up to this size are copied into one write (_send_now)
_RECV_FIRST = 64 * 1024  # a connection's first receive buffer
_RECV_MAX = 1 << 20  # it doubles up to this while reads fill it (then frames need more)
_MIN_READ = 16 * 1024  # less free space than this: move what is unhandled to the front
_GROWTH = 8  # a frame's buffer is at most this many times what has arrived of it


def _in_use(buf: bytearray) -> bool:
    """True while a memoryview of `buf` is alive (a request being answered, a set not yet
    written): a bytearray with views refuses to change its size, and so does this probe."""
    try:
        last = buf.pop()
    except BufferError:
        return True
    buf.append(last)
    return False


class _Received:
    """The connection's receive buffer: `buf[start:end]` arrived and is not handled yet, and
    the socket reads straight into `buf[end:]` (asyncio.BufferedProtocol).

    Requests are handled from memoryviews of `buf`, so a frame is never copied out of it.
    The space is sized for the frame being read (its size field): a 5 MB produce arrives
    into one buffer and is handled and written from there. So that a size field alone
    cannot make the broker reserve `max.socket.request.bytes`, that buffer grows to at most
    `_GROWTH` times what has arrived of the frame. Bytes that were handled are only written
    over once no view of them is left (`_in_use`); otherwise the unhandled rest moves to a
    new buffer, and the old one lives as long as the request holding it.
    """

    __slots__ = ("buf", "capacity", "end", "offered", "start")

    def __init__(self) -> None:
        self.buf = bytearray(_RECV_FIRST)
        self.start = self.end = 0
        self.capacity = _RECV_FIRST  # the size of a new buffer for frames that fit in one
        self.offered: memoryview | None = None  # the space the last read was given

    def __len__(self) -> int:
        return self.end - self.start

    def reserve(self, max_size: int) -> memoryview:
        """Free space for the next read: at least _MIN_READ bytes or the rest of the first
        frame. Once the buffer is full, what is unhandled moves to the front of one with
        room for all of the first frame (within the growth limit)."""
        # Called when the socket is readable, before the read: on a request's way, so
        # _release_offered is inlined and an empty buffer's first frame is not looked for.
        offered = self.offered
        if offered is not None:
            offered.release()
            self.offered = None
        buf, start, end = self.buf, self.start, self.end
        if start == end and start and not _in_use(buf):  # all handled: from the front
            self.start = self.end = start = end = 0
        left = end - start
        frame = self._first_frame(max_size) if left >= 4 else 4
        # The end of a frame may be read into less than _MIN_READ: not worth moving it.
        room = min(_MIN_READ, frame - left) if frame > max(left, 4) else _MIN_READ
        if len(buf) - end < room:
            grown = min(frame, left * _GROWTH + self.capacity)
            # Room for as much again as is waiting (up to _RECV_MAX more): complete frames
            # wait here while a response is waited for, and a buffer sized to them plus one
            # read would move them all again at every read.
            again = left + min(left, _RECV_MAX) + _MIN_READ
            self._move(max(self.capacity, again, grown), frame)
        self.offered = memoryview(self.buf)[self.end :]
        return self.offered

    def filled(self, nbytes: int) -> None:
        """The last read put `nbytes` into the space `reserve` gave."""
        offered = self.offered
        if (
            offered is not None
            and nbytes == len(offered) >= self.capacity // 2
            and self.capacity < _RECV_MAX
        ):
            self.capacity *= 2  # reads fill the buffer: fewer, larger ones
        if offered is not None:  # _release_offered, inlined: on every read's way
            offered.release()
            self.offered = None
        self.end += nbytes

    def take_all(self) -> bytes:
        data = bytes(self.buf[self.start : self.end])
        self.clear()
        return data

    def clear(self) -> None:
        self._release_offered()
        self.buf, self.start, self.end = bytearray(_RECV_FIRST), 0, 0

    def _first_frame(self, max_size: int) -> int:
        """The first frame's length with its size field; 4 while that field is incomplete
        or out of range (handling then closes the connection)."""
        if self.end - self.start < 4:
            return 4
        (size,) = _SIZE.unpack_from(self.buf, self.start)
        return 4 + size if REQUEST_TYPE_BYTES <= size <= max_size else 4

    def _move(self, size: int, frame: int) -> None:
        """Put the unhandled bytes at the front of a buffer of at least `size` bytes: this
        one if it is no larger than the first frame (`frame` bytes) or _RECV_MAX, and
        nothing holds a view of it. Frames of 5 MB one after another reuse one buffer; a
        large buffer is given up when it fills with smaller frames."""
        buf, start, end = self.buf, self.start, self.end
        left = end - start
        if size <= len(buf) <= max(size, frame, _RECV_MAX) and not _in_use(buf):
            if start:
                buf[:left] = buf[start:end]  # a partial frame: copied once more, at most
        else:
            new = bytearray(size)
            new[:left] = memoryview(buf)[start:end]
            self.buf = new
        self.start, self.end = 0, left

    def _release_offered(self) -> None:
        # asyncio keeps its reference to the view until its next read: released here, so
        # that the view does not count as a request holding the buffer.
        if self.offered is not None:
            self.offered.release()
            self.offered = None


def _one_buffer(parts: Response) -> bytes | bytearray:
    """A response as the one buffer a TLS transport takes: its bytes and its file regions
    read straight into place (os.preadv). Reading each region into bytes of its own and
    joining them copied every fetched byte once more; writing the parts one by one made TLS
    records (and TCP segments) of a 12-byte header each."""
    if len(parts) == 1 and not isinstance(parts[0], FileRegion):
        return parts[0]
    total = sum(p.length if isinstance(p, FileRegion) else len(p) for p in parts)
    buf = bytearray(total)
    pos = 0
    with memoryview(buf) as view:
        for part in parts:
            if not isinstance(part, FileRegion):
                view[pos : pos + len(part)] = part
                pos += len(part)
                continue
            if not part.length or part.segment is None:
                continue
            end, position = pos + part.length, part.position
            last = part.segment.last_append
            if last is not None and last[0] == position and len(last[1]) == part.length:
                view[pos:end] = last[1]  # exactly the last append, still in memory
                pos = end
                continue
            file = part.file()  # held: its descriptor stays open while it is read
            while pos < end:
                got = os.preadv(file.fileno(), [view[pos:end]], position)
                if got <= 0:  # the segment ends before the region: cut, as read() is
                    break
                pos += got
                position += got
            if pos < end:
                return b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)
    return buf


class ClientConnection(asyncio.BufferedProtocol):
    def __init__(
        self, server: SocketServer, sasl: Callable[[], ServerAuthenticator] | None = None
    ) -> None:
        """`sasl`: makes each connection's authenticator on a SASL listener."""
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self._fd = -1  # the socket, for os.sendfile (never over TLS)
        self._tls = False  # the transport encrypts: file regions are read and written
        self.client = "?"
        self._received = _Received()  # bytes of frames not handled yet
        self._busy = False  # a response is being sent or waited for
        self._write_paused = False
        self.closed = False
        self.last_activity = self.loop.time()
        self.partial_since: float | None = None  # when the unfinished frame began
        self._waiting: WaitingFetch[Response] | None = None  # a FETCH_WAIT not answered yet
        self._drain_pending = False  # the client left with whole produces not handled yet
        self._sending: asyncio.Task[None] | None = None  # the last response's task
        # Until the SASL exchange completes, frames go to it (`_authenticate`); it has
        # request.timeout.ms from the connection's start (SocketServer._sweep), as a TLS
        # handshake has, so that a client that never logs in does not hold its connection
        # for idle.connection.timeout.ms.
        self._authenticating = sasl() if sasl is not None else None
        self.login_since: float | None = self.loop.time() if sasl is not None else None
        # Who the client is, for the authorizer and the broker-only replica requests:
        # Kafka's name for a client that proved nothing, "User:CN=<cn>" from a TLS client
        # certificate (connection_made), then "User:<name>" once SASL logs it in (SASL_SSL:
        # the login counts, as in Kafka).
        self.principal = ANONYMOUS

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:  # the raw socket below TLS: never written to directly
            self._tls = True
            self.principal = principal_of(ssl_object.getpeercert())
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.server.apply_buffers(sock)
            if not self._tls:
                self._fd = sock.fileno()
        self.server.connection_opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        # A client that goes away while a response is on its way may have sent whole
        # produces after that request: they are appended once it is done (`_drain`), or now
        # if its task already ended (it stops early when it sees the transport closing,
        # which asyncio marks at EOF, before this callback runs).
        drain = not self.closed and self._busy and bool(self._received)
        self.closed = True
        if not drain:
            self._received.clear()
        elif self._sending is not None and not self._sending.done():
            self._drain_pending = True
        else:
            self.server.track(self.loop.create_task(self._drain()))
        if self._waiting is not None:
            self._waiting.cancel()  # the client is gone: stop waiting for its answer
            self._waiting = None
        self.server.connection_closed(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._received.reserve(self.server.max_request_bytes)

    def buffer_updated(self, nbytes: int) -> None:
        # A one-message produce's way to its consumer starts here: every call before the
        # answer costs a microsecond or more when the broker wakes cold, so _process_pending
        # is inlined and the activity is dated after the requests are handled.
        received = self._received
        received.filled(nbytes)
        if self._busy or self._write_paused:
            self.last_activity = self.loop.time()
            if self._busy and len(received) > _MAX_BUFFERED_WHILE_WAITING:
                assert self.transport is not None
                self.transport.pause_reading()
            return
        if received.end > received.start and not self.closed:
            received.start = self._handle_frames(received.buf, received.start, received.end)
        self._mark_partial()
        self.last_activity = self.loop.time()

    def data_received(self, data: bytes) -> None:
        """Bytes handed over instead of read into the buffer (tests drive a connection so)."""
        view = memoryview(data)
        while view and not self.closed:
            space = self.get_buffer(len(view))
            n = min(len(space), len(view))
            space[:n] = view[:n]
            self.buffer_updated(n)
            view = view[n:]

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._busy and self.transport is not None and not self.closed:
            self.transport.resume_reading()
            self._process_pending()

    # -- framing ----------------------------------------------------------------------

    def _process_pending(self) -> None:
        received = self._received
        if received and not self._busy and not self.closed:
            received.start = self._handle_frames(received.buf, received.start, received.end)
        self._mark_partial()

    def _mark_partial(self) -> None:
        if self._received and not self._busy and self.partial_since is None:
            self.partial_since = self.loop.time()

    def _handle_frames(self, buf: bytearray, pos: int, end: int) -> int:
        """Handle whole frames of `buf[pos:end]`; returns where unhandled bytes start."""
        if self._authenticating is not None:
            pos = self._authenticate(buf, pos, end)
            if self._authenticating is not None or self.closed:
                return end if self.closed else pos
        try:
            if end - pos >= 4:
                (size,) = _SIZE.unpack_from(buf, pos)
                if size == end - pos - 4:
                    # One request and nothing after it (a one-message produce, a fetch): its
                    # appends cannot be batched with anything, so none are deferred; a size
                    # within limits goes straight to _handle (one call less on its way).
                    if REQUEST_TYPE_BYTES <= size <= self.server.max_request_bytes:
                        self.partial_since = None
                        self._handle(memoryview(buf)[pos + 4 : end])
                        return end
                    return self._handle_frames_in(buf, pos, end)
            # The deferred appends are written when this block ends, before `buf` can be
            # read into again (its views are released then: _Received reuses it).
            with self.server.handlers.batched_appends():
                return self._handle_frames_in(buf, pos, end, runs=True)
        except _LOST_PRODUCES as exc:
            self._lost_produces(exc)
            return end

    def _authenticate(self, buf: bytearray, pos: int, end: int) -> int:
        """SASL frames of `buf[pos:end]` until the exchange completes; where unhandled
        bytes start (the requests after it, if it completed)."""
        auth = self._authenticating
        while auth is not None and not self.closed and end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if not 0 <= size <= MAX_FRAME:
                self.server.metrics.error("sasl_invalid")
                self.close(
                    f"SASL frame size {size} is outside 0..{MAX_FRAME} ({auth.stage})",
                    cause="sasl_invalid",
                )
                return end
            if end - pos - 4 < size:
                return pos
            body = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            self.partial_since = None
            try:
                step = auth.receive(body)
            except SaslError as exc:
                self.server.metrics.error("sasl_invalid")
                self.close(f"SASL {auth.stage}: {exc}", cause="sasl_invalid")
                return end
            if step.reply and self.transport is not None:
                self.transport.write(step.reply)
            if step.failure is not None:
                self.server.metrics.error("sasl_authentication_failed")
                self.close(f"SASL authentication failed: {step.failure}", cause="sasl_failed")
                return end
            if auth.complete:
                assert auth.principal is not None
                self.principal = auth.principal
                self._authenticating = auth = None
                self.login_since = None
                log.info("connection from %s authenticated as %s", self.client, self.principal)
        return pos

    def _handle_frames_in(self, buf: bytearray, pos: int, end: int, runs: bool = False) -> int:
        """With `runs` (in a batched_appends block): PRODUCE frames in a row to one partition
        are decoded and checked together (requests.produce_run, compiled) and deferred in one
        step; any other frame, and the frame that ends a run, is handled on its own."""
        view = memoryview(buf)
        server = self.server
        max_size = server.max_request_bytes
        handlers = server.handlers
        max_message = handlers.config.max_message_size
        one_by_one = pos  # up to here, frames go to _handle (a run the handlers gave back)
        while pos < end and not self.closed:
            if end - pos < 4:
                return pos
            if runs and pos >= one_by_one:
                run = produce_run(view, pos, end, max_size, max_message)
                if run is not None:
                    if handlers.produce_run(run, self.client, self.principal):
                        pos = run.end
                        self.partial_since = None
                        continue
                    one_by_one = run.end
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < REQUEST_TYPE_BYTES or size > max_size:
                self.server.metrics.error("request_too_large" if size > 0 else "invalid_request")
                self.close(
                    f"request size {size} is outside 2..{max_size} (max.socket.request.bytes)",
                    cause="request_size",
                )
                return end
            if end - pos - 4 < size:
                return pos
            body = view[pos + 4 : pos + 4 + size]
            pos += 4 + size
            self.partial_since = None
            if self._handle(body):  # the response is asynchronous: stop here for now
                return pos
        return end if self.closed else pos

    def _handle(self, body: memoryview) -> bool:
        """Handle one request; True if its response is still on its way."""
        server = self.server
        try:
            request = decode_produce_fast(body) or decode_request(body, validate_topics=False)
            if isinstance(request, _REPLICATION):
                outcome = server.handlers.replication(request, self.client, self.principal)
            else:
                outcome = server.handlers.handle(request, self.client, self.principal)
        except _LOST_PRODUCES as exc:  # earlier produces of this connection were not written
            self._lost_produces(exc)
            return False
        except LogbrokerError as exc:
            kind = "invalid_request" if isinstance(exc, InvalidRequestError) else "rejected"
            server.metrics.error(kind)
            self.close(str(exc), cause=kind)
            return False
        except Exception:
            server.warnings.log(
                logging.ERROR, "broker_error", "request from %s failed", self.client, exc_info=True
            )
            server.metrics.error("unknown")
            self.close(
                "the broker failed on this request (see the traceback)", cause="broker_error"
            )
            return False
        if outcome is None:
            return False
        return self._deliver(outcome)

    def _deliver(self, outcome: object) -> bool:
        """Send a request's outcome (parts, an awaitable of parts, a WaitingFetch); True if
        it is still on its way (this connection reads on once it has gone)."""
        server = self.server
        assert self.transport is not None
        if isinstance(outcome, WaitingFetch):
            # Only a waiting fetch is given up when its client goes: a produce whose sets
            # are being inflated was received whole, and is appended as any other would be.
            self._busy = True
            self._waiting = outcome
            outcome.deliver_to(self._answer_waiting)
            return self._busy
        waits = inspect.isawaitable(outcome)
        if not waits:
            rest = self._send_now(outcome)  # type: ignore[arg-type]
            if rest is None:
                return False
            outcome = rest  # the socket is full: the rest goes out in the background
            self.transport.pause_reading()
        self._busy = True
        task = self._sending = self.loop.create_task(self._send_async(outcome))
        server.track(task)
        return True

    def _answer_waiting(self, response: Response | None, error: BaseException | None) -> None:
        """A waiting fetch's answer, sent from inside the append (or timer) that made it:
        no event-loop turn between the data and its first byte to the client. Reading this
        connection's next requests resumes on the loop's next turn, never from inside
        someone else's append."""
        self._waiting = None
        if error is not None or response is None:
            if not isinstance(error, asyncio.CancelledError):
                self._failed(error)
            return
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        rest = self._send_now(response)
        if rest is not None:  # the socket is full: the rest goes out in the background
            self.transport.pause_reading()
            task = self._sending = self.loop.create_task(self._send_async(rest))
            self.server.track(task)
            return
        if not self.closed:
            self._answered()
            # Nothing arrived meanwhile and reading goes on: the next bytes are handled as
            # they come, and the loop turn (an epoll_wait) is spared.
            if self._received or not self.transport.is_reading():
                self.loop.call_soon(self._read_on)

    def _send_now(self, parts: Response) -> Response | None:
        """Send what the socket takes now; the unsent rest, or None when all went out.

        A small file region (up to `_COPY_MAX` bytes) is read and sent in one write with the
        header before it: one TCP segment, so the client wakes once (a 12-byte header sent
        alone wakes it for nothing). Larger regions go straight from the page cache to the
        socket with os.sendfile, once every byte queued before them has left (asyncio's own
        buffer is empty), so a fetch costs no coroutine and no copy. What does not fit goes
        to loop.sendfile later. Over TLS the whole response is one buffer with every region
        read into place (`_one_buffer`), written at once (the transport encrypts), as Kafka did
        before kTLS: os.sendfile would put clear text on the wire, and loop.sendfile's
        fallback, which swaps the transport's protocol while it writes, stalled a fetch of
        200 kB on asyncio's TLS transport (test_tls).
        """
        transport = self.transport
        assert transport is not None
        if self._tls:
            try:
                data = _one_buffer(parts)
            except OSError as exc:
                self.close(f"sending the response failed: {exc}", cause="send_failed")
                return None
            if data:
                transport.write(data)
            return None
        pending: list[bytes] = []  # bytes to write together, before the next large region
        try:
            for i, part in enumerate(parts):
                if not isinstance(part, FileRegion):
                    pending.append(part)
                    continue
                if not part.length or part.segment is None:
                    continue
                if part.length <= _COPY_MAX:
                    pending.append(part.read())
                    continue
                if pending:
                    transport.write(b"".join(pending))
                    pending = []
                if transport.get_write_buffer_size() or self._fd < 0:
                    return parts[i:]
                try:
                    file = part.file()  # held: its descriptor stays open during the call
                    sent = os.sendfile(self._fd, file.fileno(), part.position, part.length)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                if sent < part.length:
                    rest = part._replace(
                        position=part.position + sent,
                        length=part.length - sent,
                        offset=part.offset + sent,
                    )
                    return [rest, *parts[i + 1 :]]
        except OSError as exc:
            self.close(f"sending the response failed: {exc}", cause="send_failed")
            return None
        if pending:
            transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        return None

    async def _send_async(self, outcome: object) -> None:
        try:
            await self._send_outcome(outcome)
        finally:
            if self._drain_pending:
                self._drain_pending = False
                self.server.track(self.loop.create_task(self._drain()))

    async def _drain(self) -> None:
        """Append the whole produces a departed client sent after its last answered request,
        as they would have been had it stayed; nothing else of what it sent is handled."""
        data = self._received.take_all()
        view, pos, handlers = memoryview(data), 0, self.server.handlers
        while len(data) - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if not REQUEST_TYPE_BYTES <= size <= self.server.max_request_bytes:
                return
            if len(data) - pos - 4 < size:
                return
            body = view[pos + 4 : pos + 4 + size]
            pos += 4 + size
            try:
                request = decode_request(body, validate_topics=False)
                if not isinstance(request, _PRODUCES):
                    continue
                outcome = handlers.handle(request, self.client, self.principal)
                if inspect.isawaitable(outcome):
                    await outcome
                handlers.flush_appends()
            except LogbrokerError as exc:
                log.warning("dropped the rest of what %s sent before it left: %s", self.client, exc)
                return

    async def _send_outcome(self, outcome: object) -> None:
        try:
            response: Response
            if inspect.isawaitable(outcome):
                response = await outcome
                if self.closed or self.transport is None or self.transport.is_closing():
                    return
                # Straight out, as an immediate answer goes (os.sendfile): loop.sendfile
                # would cost several more loop turns before a woken fetch's first byte.
                response = self._send_now(response) or []
            else:
                response = outcome  # type: ignore[assignment]
            transport = self.transport
            for part in response:
                # A transport asyncio is closing (the client went away; connection_lost is
                # on its way) makes loop.sendfile raise RuntimeError: just stop.
                if self.closed or transport is None or transport.is_closing():
                    return
                if isinstance(part, FileRegion):
                    if not part.length or part.segment is None:
                        continue
                    if self._tls:  # see _send_now: never loop.sendfile under TLS
                        transport.write(part.read())
                    else:
                        await self.loop.sendfile(transport, part.file(), part.position, part.length)
                else:
                    transport.write(part)
        except asyncio.CancelledError:
            self.close("broker shutting down", cause="shutdown")
            raise
        except Exception as exc:
            self._failed(exc)
            return
        self._answered()
        self._read_on()

    def _failed(self, exc: BaseException | None) -> None:
        """A response that could not be made or sent: say why, and close."""
        if isinstance(exc, (ConnectionError, OSError)):
            self.close(f"sending the response failed: {exc}", cause="send_failed")
        elif isinstance(exc, _LOST_PRODUCES):  # a produce without an answer, after inflating
            self._lost_produces(exc)
        elif isinstance(exc, LogbrokerError):  # a produce without an answer, refused so
            self.server.metrics.error("rejected")
            self.close(str(exc), cause="rejected")
        else:
            self.server.warnings.log(
                logging.ERROR,
                "broker_error",
                "response to %s failed",
                self.client,
                exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None,
            )
            self.close(
                "the broker failed on this request (see the traceback)", cause="broker_error"
            )

    def _answered(self) -> None:
        self._busy = False
        self.last_activity = self.loop.time()

    def _read_on(self) -> None:
        """After an answer: read and handle what this client sent meanwhile."""
        if self._busy or self.closed or self.transport is None or self._write_paused:
            return
        self.transport.resume_reading()
        self._process_pending()

    # -- closing ----------------------------------------------------------------------

    def _lost_produces(self, exc: LogbrokerError) -> None:
        """Produces that get no answer could not be written (counted where it happened):
        closing the connection is the only way a 0.7 producer can learn of it."""
        self.close(
            f"{exc}; a produce without an answer failed, so the connection is closed",
            cause="storage" if isinstance(exc, StorageError) else "not_leader",
        )

    def close(self, reason: str | None = None, cause: str = "other") -> None:
        """Close now; with a `reason`, log it (at most one line per `cause` per
        connection.log.interval.ms, see log_limiter.py)."""
        self._drain_pending = False  # the broker closes: what is pending is refused
        if self.closed:
            return
        self.closed = True
        if reason:
            self.server.warnings.warning(
                cause, "closing connection from %s: %s", self.client, reason
            )
        if self.transport is not None:
            self.transport.abort()

    @property
    def login_stage(self) -> str:
        """Where an unfinished SASL login is, for the line that closes it."""
        return self._authenticating.stage if self._authenticating is not None else "done"

    @property
    def idle(self) -> bool:
        return not self._busy and not self._received
