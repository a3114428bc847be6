"""The simple consumer (`consumer/SimpleConsumer.scala`): one broker, explicit offsets.

    consumer = SimpleConsumer("127.0.0.1", 9092)
    start = consumer.earliest_offset("clicks", 0)
    for message in consumer.iter_messages("clicks", 0, start):
        handle(message.payload)            # message.next_offset: where to resume after it
    for batch in consumer.iter_batches("clicks", 0, start):   # faster: a fetch at a time
        for payload in batch.payloads: ...  # batch.next_offset: where to resume

A fetch returns raw log bytes, usually ending in a cut-off message, which iteration skips
and the next fetch starts with. A replicated topic's partition is read from its leader
(partition_reader.py finds it, and follows it when it moves); `waiting_fetches=True` sends
every fetch as FETCH_WAIT, whose answers carry replication's codes (NotLeaderForPartition,
LeaderNotAvailable) where 0.7's FETCH says Unknown (-1). When a fetch holds not even one whole message, the fetch
size grows (doubling, as the design doc suggests) up to `max_fetch_size`; a message larger
than that is a MessageTooLargeError naming topic, partition, offset and size.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing
from typing import NamedTuple, TypeVar

from ..protocol.errors import LogbrokerError, error_for_code
from ..protocol.message import Message
from ..protocol.message_set import (
    first_entry_size,
    iter_messages,
    message_columns,
    whole_entries,
)
from ..protocol.requests import (
    EARLIEST_TIME,
    LATEST_TIME,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    OffsetsRequest,
    WaitingFetchRequest,
)
from ..protocol.responses import (
    ONE_SET_HEAD,
    FetchResponse,
    Metadata,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
    decode_offsets_response,
)
from ..security.sasl import SaslClientConfig
from .connection import BrokerConnection, BrokerUnavailableError

_Set = tuple[bytes | memoryview, int]  # whole entries and the offset of the first
_Decoded = TypeVar("_Decoded")

DEFAULT_FETCH_SIZE = 300 * 1024
# A FETCH_WAIT answer's bytes before its set's data: error code, set size, set error code
_FETCH_RESPONSE_HEAD = 8
DEFAULT_MAX_FETCH_SIZE = 64 * 1024 * 1024


class MessageTooLargeError(LogbrokerError):
    """A single message is larger than the largest fetch size allowed."""


class MessageBatch(NamedTuple):
    """The whole messages of one fetch, as columns (SimpleConsumer.iter_batches)."""

    offsets: list[int]  # each message's entry offset (a compressed wrapper's, inside one)
    payloads: list[bytes]
    next_offset: int  # where the next batch starts


class FetchedData(NamedTuple):
    """Raw log bytes of one partition, starting at `offset` (may end in a partial message)."""

    topic: str
    partition: int
    offset: int
    data: bytes | memoryview

    def messages(self) -> Iterator[Message]:
        return iter_messages(self.data, self.offset)


class PipelinedFetches:
    """FETCHes of one partition where the next can be asked for before this one is used:
    `ask` sends it, `get` returns it (reading the answer already on its way when it is for
    the same offset and size; an answer for another is read and dropped first, as 0.7
    answers in order). `close` drops the connection when an answer was asked for and never
    read, so that nobody takes it for theirs. With the consumer's `waiting_fetches` each one
    goes as a FETCH_WAIT that waits for nothing, whose refusals carry replication's codes.

        fetches = consumer.pipelined(topic, partition)
        data = fetches.get(offset, size)
        fetches.ask(offset + used, size)   # on its way while `data` is worked on
    """

    def __init__(self, consumer: SimpleConsumer, topic: str, partition: int) -> None:
        self.consumer = consumer
        self.topic = topic
        self.partition = partition
        self._asked: tuple[int, int] | None = None

    def ask(self, offset: int, size: int) -> None:
        """Send this fetch now. A broker that cannot be reached is not an error yet: `get`
        sends it again (reconnecting) and raises there, after the caller's current work."""
        try:
            self._send(offset, size)
        except BrokerUnavailableError:
            self._asked = None

    def get(self, offset: int, size: int) -> bytes | memoryview:
        """The log's bytes from `offset`, at most `size` (raises as SimpleConsumer.fetch)."""
        if self._asked != (offset, size):
            self._send(offset, size)
        return self._answer(offset, size)

    def _send(self, offset: int, size: int) -> None:
        if self._asked is not None:
            self._answer(*self._asked)  # read, not used
        c = self.consumer
        waiting = c.waiting_fetches
        c.connection.send(c._fetch_request(self.topic, self.partition, offset, size, 0, waiting))
        self._asked = (offset, size)

    def _answer(self, offset: int, size: int) -> bytes | memoryview:
        self._asked = None
        c = self.consumer
        return c._fetch_response(
            c.connection.receive(), self.topic, self.partition, offset, c.waiting_fetches
        )

    def close(self) -> None:
        if self._asked is not None:
            self._asked = None
            self.consumer.connection.close()


class SimpleConsumer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        fetch_size: int = DEFAULT_FETCH_SIZE,
        max_fetch_size: int = DEFAULT_MAX_FETCH_SIZE,
        timeout: float = 30.0,
        waiting_fetches: bool = False,
        tls: ssl.SSLContext | None = None,
        sasl: SaslClientConfig | None = None,
    ) -> None:
        """`tls`: connect over TLS (security/tls.py's ClientSecurity.context()); `sasl`: then
        log in so on every new socket (security/sasl.py)."""
        self.connection = BrokerConnection(host, port, timeout=timeout, tls=tls, sasl=sasl)
        self.fetch_size = fetch_size
        self.max_fetch_size = max(max_fetch_size, fetch_size)
        self.waiting_fetches = waiting_fetches  # FETCH_WAIT even when not waiting: exact codes

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------

    def fetch(
        self, topic: str, partition: int, offset: int, max_size: int | None = None
    ) -> FetchedData:
        """FETCH: raises OffsetOutOfRangeError, WrongPartitionError, ... on an error code."""
        size = self.fetch_size if max_size is None else max_size
        if self.waiting_fetches:
            return _raised(self.fetch_wait([FetchRequest(topic, partition, offset, size)], 0)[0])
        response = decode_fetch_response(
            self.connection.request(FetchRequest(topic, partition, offset, size))
        )
        if response.error:
            raise error_for_code(
                response.error, _describe(response.error, topic, partition, offset)
            )
        return FetchedData(topic, partition, offset, response.messages)

    def multifetch(self, fetches: Sequence[FetchRequest]) -> list[FetchedData | LogbrokerError]:
        """MULTIFETCH: one result per fetch, in order; an error code becomes an exception value."""
        body = self.connection.request(MultiFetchRequest(tuple(fetches)))
        return self._sets(fetches, decode_multifetch_response(body, len(fetches)))

    def pipelined(self, topic: str, partition: int) -> PipelinedFetches:
        """FETCHes of one partition with the next on its way while this one is used."""
        return PipelinedFetches(self, topic, partition)

    def fetch_wait(
        self, fetches: Sequence[FetchRequest], max_wait_ms: int, min_bytes: int = 1
    ) -> list[FetchedData | LogbrokerError]:
        """FETCH_WAIT (extension): answered once `min_bytes` are there or after `max_wait_ms`."""
        body = self.connection.request(WaitingFetchRequest(max_wait_ms, min_bytes, tuple(fetches)))
        return self._sets(fetches, decode_multifetch_response(body, len(fetches)))

    @staticmethod
    def _sets(
        fetches: Sequence[FetchRequest], responses: list[FetchResponse]
    ) -> list[FetchedData | LogbrokerError]:
        out: list[FetchedData | LogbrokerError] = []
        for f, r in zip(fetches, responses, strict=True):
            if r.error:
                out.append(
                    error_for_code(r.error, _describe(r.error, f.topic, f.partition, f.offset))
                )
            else:
                out.append(FetchedData(f.topic, f.partition, f.offset, r.messages))
        return out

    def offsets_before(
        self, topic: str, partition: int, time_ms: int, max_offsets: int = 1
    ) -> list[int]:
        """OFFSETS: segment starts (and the end) before `time_ms`, newest first."""
        return decode_offsets_response(
            self.connection.request(OffsetsRequest(topic, partition, time_ms, max_offsets))
        )

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.offsets_before(topic, partition, EARLIEST_TIME, 1)[0]

    def latest_offset(self, topic: str, partition: int) -> int:
        return self.offsets_before(topic, partition, LATEST_TIME, 1)[0]

    def metadata(self, topics: Sequence[str] = ()) -> Metadata:
        """METADATA (extension): topics, partitions, earliest and latest offsets, sizes."""
        return decode_metadata_response(self.connection.request(MetadataRequest(tuple(topics))))

    # -- iteration --------------------------------------------------------------------

    def _fetch_data(
        self, topic: str, partition: int, offset: int, size: int, max_wait_ms: int
    ) -> bytes | memoryview:
        if not max_wait_ms:
            return self.fetch(topic, partition, offset, size).data
        return _raised(
            self.fetch_wait([FetchRequest(topic, partition, offset, size)], max_wait_ms)[0]
        ).data

    def _grown(
        self, topic: str, partition: int, offset: int, data: bytes | memoryview, size: int
    ) -> int | None:
        """The next fetch size when `data` holds no whole message, or None if it is empty."""
        needed = first_entry_size(data)
        if needed is None or len(data) >= needed:
            return None  # nothing there yet (or only part of a header)
        if needed > self.max_fetch_size:
            raise MessageTooLargeError(
                f"the message at offset {offset} of {topic}-{partition} is {needed} bytes, "
                f"over the largest fetch size {self.max_fetch_size}"
            )
        return max(needed, min(size * 2, self.max_fetch_size))

    def fetch_messages(
        self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0
    ) -> tuple[list[Message], int]:
        """One round: the whole messages from `offset` and the offset to fetch next.

        Grows the fetch size while not even one message fits; an empty list means the
        partition has nothing past `offset` (after waiting up to `max_wait_ms`).
        """
        size = self.fetch_size
        while True:
            data = self._fetch_data(topic, partition, offset, size, max_wait_ms)
            messages = list(iter_messages(data, offset))
            if messages:
                return messages, messages[-1].next_offset
            grown = self._grown(topic, partition, offset, data, size)
            if grown is None:
                return [], offset
            size = grown

    def iter_messages(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        stop_at_end: bool = True,
        max_wait_ms: int = 1000,
    ) -> Iterator[Message]:
        """Every message from `offset` on; stops at the end of the log unless told to wait.

        Fetches are pipelined: the next one is on its way while this one is decoded, except
        when a waiting fetch (stop_at_end=False) brought back less than half its size: caught
        up with the producer, the messages are handed over first (lower latency).
        """
        sets = self._fetched(topic, partition, offset, stop_at_end, max_wait_ms, _whole_entries)
        with closing(sets):
            for data, base in sets:
                yield from iter_messages(data, base)

    def iter_batches(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        stop_at_end: bool = True,
        max_wait_ms: int = 1000,
    ) -> Iterator[MessageBatch]:
        """The messages of iter_messages, a fetch at a time, as columns (a MessageBatch).

        The faster way to read a lot: one walk per fetch appends each payload to a list (the
        same CRC checks, compressed sets unwrapped) instead of building a Message per message,
        and the next fetch is on its way while the application works through the batch.
        Resume after a batch at its `next_offset`.
        """
        # Every batch is copied out of its fetch (payloads are bytes of their own): each
        # fetch is read into the same buffer.
        into = bytearray(self.fetch_size + _FETCH_RESPONSE_HEAD)
        batches = self._fetched(topic, partition, offset, stop_at_end, max_wait_ms, _batch, into)
        with closing(batches):
            yield from batches

    def _fetched(
        self,
        topic: str,
        partition: int,
        offset: int,
        stop_at_end: bool,
        max_wait_ms: int,
        decode: Callable[[bytes | memoryview, int], tuple[_Decoded, int]],
        into: bytearray | None = None,
    ) -> Generator[_Decoded, None, None]:
        """Each fetch's whole entries as `decode(data, offset)` makes them (it returns them
        and where they end), the next fetch pipelined: sent once this one is decoded (that
        walk finds where it ends), before it is handed over. With `into`, fetches are read
        into that buffer (BrokerConnection.receive): `decode` must keep nothing of `data`."""
        size = self.fetch_size
        wait = 0 if stop_at_end else max_wait_ms
        waiting = bool(wait) or self.waiting_fetches
        conn = self.connection
        in_flight = False
        try:
            while True:
                if not in_flight:
                    conn.send(self._fetch_request(topic, partition, offset, size, wait, waiting))
                data = self._fetch_response(conn.receive(into), topic, partition, offset, waiting)
                in_flight = False
                decoded, end = decode(data, offset)
                if end and (not wait or end * 2 >= size):
                    conn.send(
                        self._fetch_request(
                            topic, partition, offset + end, self.fetch_size, wait, waiting
                        )
                    )
                    in_flight = True
                    yield decoded
                    offset, size = offset + end, self.fetch_size
                    continue
                if end:
                    # Caught up with a waiting fetch (a small answer): the messages go to the
                    # application first and the next fetch after them, so that its send is
                    # not in the way of the message (the broker waits for new data anyway).
                    yield decoded
                    offset, size = offset + end, self.fetch_size
                    continue
                grown = self._grown(topic, partition, offset, data, size)
                if grown is not None:
                    size = grown
                elif stop_at_end:
                    return
        finally:
            if in_flight:  # a response nobody will read: drop the connection
                conn.close()

    @staticmethod
    def _fetch_request(
        topic: str, partition: int, offset: int, size: int, max_wait_ms: int, waiting: bool
    ) -> FetchRequest | WaitingFetchRequest:
        fetch = FetchRequest(topic, partition, offset, size)
        return WaitingFetchRequest(max_wait_ms, 1, (fetch,)) if waiting else fetch

    @staticmethod
    def _fetch_response(
        body: bytes, topic: str, partition: int, offset: int, waiting: bool
    ) -> bytes | memoryview:
        if waiting:
            # A caught-up consumer's answer, a well-formed set with no error, read here in one
            # step: each call on the way to the message costs a microsecond or more when the
            # process wakes cold. Anything else is decoded (and checked) in full.
            if len(body) >= ONE_SET_HEAD.size:
                outer, size, error = ONE_SET_HEAD.unpack_from(body, 0)
                if not outer and not error and size == len(body) - 6 and size >= 2:
                    return memoryview(body)[ONE_SET_HEAD.size :]
            response = decode_multifetch_response(body, 1)[0]
        else:
            response = decode_fetch_response(body)
        if response.error:
            raise error_for_code(
                response.error, _describe(response.error, topic, partition, offset)
            )
        return response.messages


def _raised(result: FetchedData | LogbrokerError) -> FetchedData:
    if isinstance(result, LogbrokerError):
        raise result
    return result


def _whole_entries(data: bytes | memoryview, base: int) -> tuple[_Set, int]:
    """iter_messages' decoding: the whole entries only (sizes walked, no CRC checked yet)."""
    end = whole_entries(data)[0]  # whole_entries_end's answer, one Python call less
    return (data[:end] if end < len(data) else data, base), end


def _batch(data: bytes | memoryview, base: int) -> tuple[MessageBatch, int]:
    """iter_batches' decoding: every whole message, CRC checked, as columns."""
    columns = message_columns(data, base)
    return MessageBatch(columns.offsets, columns.payloads, base + columns.end), columns.end


def _describe(code: int, topic: str, partition: int, offset: int) -> str:
    name = type(error_for_code(code)).__name__
    return f"{name} (code {code}) fetching {topic}-{partition} at offset {offset}"
