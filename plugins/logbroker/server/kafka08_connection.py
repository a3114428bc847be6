"""A connection on the Kafka 0.8 listener: 0.8's frames, answered in request order.

    request   := size int32 | api_key int16 | api_version int16 | correlation_id int32
                 | client_id string | body                        (protocol/kafka08/header.py)
    response  := size int32 | correlation_id int32 | body

It is a ClientConnection (connection.py) that frames and decodes 0.8's requests instead of
0.7's: one request is handled at a time, the next only once the answer has gone (0.8's
brokers muted a connection the same way), so answers leave in request order; the sending
(sendfile for fetched sets), the waiting fetches, the timeouts and the closing are the base
class's. Unlike a 0.7 connection it batches no produces: 0.8 assigns offsets per set.

A frame that does not decode (cut off, a bad size, an absurd array count, bytes left over)
closes the connection with one log line naming the client, the API and the field; an api key
or version the listener does not serve closes it with a line naming the client and the key,
as 0.8 did (librdkafka and kafka-python then fall back or give up on their own).
"""

from __future__ import annotations

import inspect
import logging
import struct
from typing import TYPE_CHECKING

from ..protocol.errors import InvalidRequestError, LogbrokerError
from ..protocol.kafka08.apis import UnsupportedApiError, decode_request
from ..protocol.kafka08.header import MIN_REQUEST_SIZE
from .connection import ClientConnection

if TYPE_CHECKING:
    from .kafka08_apis import Kafka08Apis
    from .socket_server import SocketServer

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class Kafka08Connection(ClientConnection):
    def __init__(self, server: SocketServer, apis: Kafka08Apis) -> None:
        super().__init__(server)
        self.apis = apis

    def _handle_frames(self, buf: bytearray, pos: int, end: int) -> int:
        """Handle whole frames of `buf[pos:end]`, one at a time; where unhandled bytes start."""
        view = memoryview(buf)
        max_size = self.server.max_request_bytes
        while pos < end and not self.closed:
            if end - pos < 4:
                return pos
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < MIN_REQUEST_SIZE or size > max_size:
                self.server.metrics.error("request_too_large" if size > 0 else "invalid_request")
                self.close(
                    f"0.8 request size {size} is outside {MIN_REQUEST_SIZE}..{max_size} "
                    "(max.socket.request.bytes)",
                    cause="request_size",
                )
                return end
            if end - pos - 4 < size:
                return pos
            body = view[pos + 4 : pos + 4 + size]
            pos += 4 + size
            self.partial_since = None
            if self._handle(body):  # the answer is on its way: the next request waits
                return pos
        return end if self.closed else pos

    def _handle(self, body: memoryview) -> bool:
        server = self.server
        try:
            request = decode_request(body)
            outcome = self.apis.handle(request, self.client)
        except UnsupportedApiError as exc:
            server.metrics.error("unsupported_api")
            self.close(str(exc), cause="unsupported_api")
            return False
        except LogbrokerError as exc:
            kind = "invalid_request" if isinstance(exc, InvalidRequestError) else "rejected"
            server.metrics.error(kind)
            self.close(str(exc), cause=kind)
            return False
        except Exception:
            server.warnings.log(
                logging.ERROR, "broker_error", "0.8 request from %s failed", self.client,
                exc_info=True,
            )  # fmt: skip
            server.metrics.error("unknown")
            self.close(
                "the broker failed on this request (see the traceback)", cause="broker_error"
            )
            return False
        if outcome is None:  # a Produce with acks 0
            return False
        return self._deliver(outcome)

    async def _drain(self) -> None:
        """Append the acks=0 Produces a departed client sent after its last answered
        request, as they would have been had it stayed; nothing else of it is handled."""
        data = self._received.take_all()
        view, pos = memoryview(data), 0
        while len(data) - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if not MIN_REQUEST_SIZE <= size <= self.server.max_request_bytes:
                return
            if len(data) - pos - 4 < size:
                return
            body = view[pos + 4 : pos + 4 + size]
            pos += 4 + size
            try:
                request = decode_request(body)
                if request.header.api_key != 0 or request.body.required_acks != 0:
                    continue
                outcome = self.apis.handle(request, self.client)
                if inspect.isawaitable(outcome):
                    await outcome
            except LogbrokerError as exc:
                log.warning("dropped the rest of what %s sent before it left: %s", self.client, exc)
                return
