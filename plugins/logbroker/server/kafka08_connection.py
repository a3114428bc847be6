"""A connection on the Kafka 0.8 listener: 0.8's frames, answered in request order.

    request   := size int32 | api_key int16 | api_version int16 | correlation_id int32
                 | client_id string | body                        (protocol/kafka08/header.py)
    response  := size int32 | correlation_id int32 | body

It is a ClientConnection (connection.py) that frames and decodes 0.8's requests instead of
0.7's: one request is handled at a time, the next only once the answer has gone (0.8's
brokers muted a connection the same way), so answers leave in request order; the sending
(sendfile for fetched sets), the waiting fetches, the timeouts and the closing are the base
class's. Produces with required_acks 0 that arrive in a row (one read of the socket) are
appended together, as a 0.7 connection's are: each set still gets its own offsets, but each
partition's sets go in one write (Kafka08Apis.produce_unanswered, LogicalLog.append_many).

A frame that does not decode (cut off, a bad size, an absurd array count, bytes left over)
closes the connection with one log line naming the client, the API and the field; an api key
or version the listener does not serve closes it with a line naming the client and the key,
as 0.8 did (librdkafka and kafka-python then fall back or give up on their own).
"""

from __future__ import annotations

import inspect
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.errors import InvalidRequestError, LogbrokerError
from ..protocol.kafka08.apis import Request, UnsupportedApiError, decode_request
from ..protocol.kafka08.header import MIN_REQUEST_SIZE, ApiKey
from .connection import ClientConnection

if TYPE_CHECKING:
    from ..security.sasl import ServerAuthenticator
    from .kafka08_apis import Kafka08Apis
    from .socket_server import SocketServer

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class Kafka08Connection(ClientConnection):
    def __init__(
        self,
        server: SocketServer,
        apis: Kafka08Apis,
        sasl: Callable[[], ServerAuthenticator] | None = None,
    ) -> None:
        super().__init__(server, sasl)
        self.apis = apis

    def _handle_frames(self, buf: bytearray, pos: int, end: int) -> int:
        """Handle whole frames of `buf[pos:end]` in order; where unhandled bytes start.
        Produces with required_acks 0 in a row are appended together (`_unanswered`)
        before anything after them is handled, or the connection closed."""
        if self._authenticating is not None:  # SASL first (ClientConnection._authenticate)
            pos = self._authenticate(buf, pos, end)
            if self._authenticating is not None or self.closed:
                return end if self.closed else pos
        view = memoryview(buf)
        max_size = self.server.max_request_bytes
        unanswered: list[Request] = []
        while pos < end and not self.closed:
            if end - pos < 4:
                break
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < MIN_REQUEST_SIZE or size > max_size:
                self._unanswered(unanswered)
                self.server.metrics.error("request_too_large" if size > 0 else "invalid_request")
                self.close(
                    f"0.8 request size {size} is outside {MIN_REQUEST_SIZE}..{max_size} "
                    "(max.socket.request.bytes)",
                    cause="request_size",
                )
                return end
            if end - pos - 4 < size:
                break
            body = view[pos + 4 : pos + 4 + size]
            pos += 4 + size
            self.partial_since = None
            request = self._decode(body, unanswered)
            if request is None:  # closed
                break
            if request.header.api_key == ApiKey.PRODUCE and request.body.required_acks == 0:
                unanswered.append(request)
                continue
            self._unanswered(unanswered)
            if self._handle_request(request):  # the answer is on its way: the next request waits
                return pos
        self._unanswered(unanswered)
        return end if self.closed else pos

    def _decode(self, body: memoryview, unanswered: list[Request]) -> Request | None:
        """The request in `body`; None when it does not decode (the connection is closed,
        after the unanswered produces before it are appended)."""
        try:
            return decode_request(body)
        except UnsupportedApiError as exc:
            self._unanswered(unanswered)
            self.server.metrics.error("unsupported_api")
            self.close(str(exc), cause="unsupported_api")
        except LogbrokerError as exc:
            self._unanswered(unanswered)
            self.server.metrics.error("invalid_request")
            self.close(str(exc), cause="invalid_request")
        except Exception:
            self._unanswered(unanswered)
            self._broker_failed()
        return None

    def _unanswered(self, requests: list[Request]) -> None:
        """Append the produces gathered (and forget them): one alone as any request, more
        in one go (Kafka08Apis.produce_unanswered: one write per partition)."""
        if not requests:
            return
        gathered = requests.copy()
        requests.clear()
        if len(gathered) == 1:
            self._handle_request(gathered[0])
            return
        try:
            self.apis.produce_unanswered(gathered, self.client, self.principal)
        except LogbrokerError as exc:
            self.server.metrics.error("rejected")
            self.close(str(exc), cause="rejected")
        except Exception:
            self._broker_failed()

    def _handle_request(self, request: Request) -> bool:
        try:
            outcome = self.apis.handle(request, self.client, self.principal)
        except LogbrokerError as exc:
            kind = "invalid_request" if isinstance(exc, InvalidRequestError) else "rejected"
            self.server.metrics.error(kind)
            self.close(str(exc), cause=kind)
            return False
        except Exception:
            self._broker_failed()
            return False
        if outcome is None:  # a Produce with acks 0
            return False
        return self._deliver(outcome)

    def _broker_failed(self) -> None:
        server = self.server
        server.warnings.log(
            logging.ERROR, "broker_error", "0.8 request from %s failed", self.client,
            exc_info=True,
        )  # fmt: skip
        server.metrics.error("unknown")
        self.close("the broker failed on this request (see the traceback)", cause="broker_error")

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
                outcome = self.apis.handle(request, self.client, self.principal)
                if inspect.isawaitable(outcome):
                    await outcome
            except LogbrokerError as exc:
                log.warning("dropped the rest of what %s sent before it left: %s", self.client, exc)
                return
