"""A blocking connection to one broker's Kafka 0.8 listener: requests and their answers,
matched by correlation id.

    request  := int32 size | int16 api_key | int16 api_version | int32 correlation_id
                | client_id string | body                       (protocol/kafka08/header.py)
    response := int32 size | int32 correlation_id | body

The frames ride on connection.py's BrokerConnection (its socket, timeouts, read-ahead and
reconnect on the next call). A 0.8 broker answers a connection's requests in order, and a
Produce with required_acks 0 not at all, so an answer must carry the correlation id of the
oldest request still waiting for one. One that does not (the connection is out of step) closes
the connection and raises BrokerUnavailableError, as a broken one does: the caller's retry
reconnects. `ask`/`answer` pipeline requests (a reader's next fetch on its way while it
decodes this one); `request` is the two at once.

Bodies are the codec's NamedTuples (protocol/kafka08/*.py); an error code inside an answer is
the caller's to raise (kafka08.errors.error_for_code08).
"""

from __future__ import annotations

import itertools
import ssl
import struct
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from ..protocol.kafka08.apis import decode_response, encode_request
from ..protocol.kafka08.header import Api
from ..protocol.kafka08.produce import PRODUCE_V0
from ..protocol.responses import MalformedResponseError
from ..security.sasl import SaslClientConfig
from .connection import DEFAULT_TIMEOUT_S, BrokerConnection, BrokerUnavailableError

CLIENT_ID = "logbroker"
_MAX_CORRELATION = 0x7FFFFFFF
# size, api key, api version, correlation id, client id length; then required acks, timeout,
# topic count: Produce v0's head (protocol/kafka08/produce.py has the schema)
_PRODUCE_HEAD = struct.Struct(">ihhih")
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")
_NAME_LENGTH = struct.Struct(">h")
_COUNT = struct.Struct(">i")
_PARTITION_SIZE = struct.Struct(">ii")


def produce_frame(
    correlation_id: int,
    client_id: str,
    required_acks: int,
    timeout_ms: int,
    sets: Sequence[tuple[str, int, bytes]],
) -> bytes:
    """The whole Produce v0 frame of (topic, partition, message set) sets, each topic's sets
    together in the order the topic comes first: apis.encode_request's bytes for the same
    request (the reference), built in one pass for the producers' hot path."""
    topics: dict[str, list[tuple[int, bytes]]] = {}
    for topic, partition, data in sets:
        topics.setdefault(topic, []).append((partition, data))
    body = [_ACKS_TIMEOUT_COUNT.pack(required_acks, timeout_ms, len(topics))]
    for topic, found in topics.items():
        name = topic.encode("utf-8")
        body += (_NAME_LENGTH.pack(len(name)), name, _COUNT.pack(len(found)))
        for partition, data in found:
            body += (_PARTITION_SIZE.pack(partition, len(data)), data)
    client = client_id.encode("utf-8")
    size = 10 + len(client) + sum(map(len, body))
    return b"".join((_PRODUCE_HEAD.pack(size, 0, 0, correlation_id, len(client)), client, *body))


class Kafka08Connection:
    """One socket to a 0.8 listener. Thread-safe (one exchange at a time, `lock`)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        client_id: str = CLIENT_ID,
        buffer_size: int = 1 << 20,
        tls: ssl.SSLContext | None = None,
        sasl: SaslClientConfig | None = None,
    ) -> None:
        self.connection = BrokerConnection(
            host, port, timeout=timeout, buffer_size=buffer_size, tls=tls, sasl=sasl
        )
        self.client_id = client_id
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self._waiting: deque[tuple[int, Api]] = deque()  # asked, answer not read yet

    @property
    def address(self) -> str:
        return self.connection.address

    def next_id(self) -> int:
        return next(self._ids) & _MAX_CORRELATION

    def close(self) -> None:
        with self.lock:
            self._waiting.clear()
            self.connection.close()

    def request(self, api: Api, body: Any) -> Any:
        """Send a request and return the body of its answer."""
        with self.lock:
            return self.answer(self.ask(api, body))

    def send(self, api: Api, body: Any) -> None:
        """Send a request that gets no answer (Produce with required_acks 0)."""
        self.send_frame(encode_request(api, body, self.next_id(), self.client_id))

    def send_frame(self, frame: bytes) -> None:
        """Send a whole request frame that gets no answer (built by the caller)."""
        with self.lock:
            if (
                self._waiting
            ):  # answers due on this socket: a fresh one is simpler than reading them
                self.close()
            self.connection.send(frame)

    def ask(self, api: Api, body: Any) -> int:
        """Send a request whose answer `answer(correlation id)` reads; its correlation id."""
        correlation_id = self.next_id()
        self.ask_frame(
            api, encode_request(api, body, correlation_id, self.client_id), correlation_id
        )
        return correlation_id

    def ask_frame(self, api: Api, frame: bytes, correlation_id: int) -> None:
        """`ask` with the whole frame built by the caller, carrying `correlation_id` (one of
        next_id's)."""
        with self.lock:
            try:
                self.connection.send(frame)
            except BrokerUnavailableError:
                self._waiting.clear()  # the socket is gone, with whatever it owed
                raise
            self._waiting.append((correlation_id, api))

    def answer(self, correlation_id: int, into: bytearray | None = None) -> Any:
        """The body of the answer to request `correlation_id` (answers before it, asked and
        never read, are read and dropped). `into`: BrokerConnection.receive's buffer."""
        with self.lock:
            if not any(cid == correlation_id for cid, _ in self._waiting):
                raise BrokerUnavailableError(
                    f"no request {correlation_id} is waiting for an answer from {self.address}"
                )
            while True:
                expected, api = self._waiting[0]
                try:
                    frame = self.connection.receive(into if expected == correlation_id else None)
                except BrokerUnavailableError:
                    self._waiting.clear()
                    raise
                self._waiting.popleft()
                try:
                    got, body = decode_response(api, frame)
                except MalformedResponseError:
                    self.close()  # what follows on this socket cannot be trusted either
                    raise
                if got != expected:
                    self.close()
                    raise BrokerUnavailableError(
                        f"broker {self.address} answered correlation id {got} where "
                        f"{expected} ({api.label}) was due: the connection is closed"
                    )
                if expected == correlation_id:
                    return body

    def produce(
        self, required_acks: int, timeout_ms: int, sets: Sequence[tuple[str, int, bytes]]
    ) -> Any:
        """A Produce v0 of (topic, partition, message set) sets, topics in the order they
        come first: its answer's body (a ProduceResponse), None with required_acks 0."""
        correlation_id = self.next_id()
        frame = produce_frame(correlation_id, self.client_id, required_acks, timeout_ms, sets)
        if required_acks == 0:
            self.send_frame(frame)
            return None
        with self.lock:
            self.ask_frame(PRODUCE_V0, frame, correlation_id)
            return self.answer(correlation_id)

    @property
    def waiting(self) -> int:
        """Requests sent whose answers were not read yet."""
        return len(self._waiting)

    def __enter__(self) -> Kafka08Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Kafka08Connection({self.address})"
