"""Reading one partition of a 0.8-format topic from its leader's Kafka 0.8 listener.

    with PartitionReader08.connect("127.0.0.1:2181/live", "orders", 2) as reader:
        for batch in reader.iter_batches(reader.earliest_offset()):
            for offset, key, payload in zip(batch.offsets, batch.keys, batch.payloads): ...
            # batch.next_offset: where to resume
        for message in reader.iter_messages(42):     # KeyedMessage(offset, next_offset, key, payload)
            ...

partition_reader.py's PartitionReader for the other format: a 0.8-format topic's partition is
served by its leader's 0.8 listener only (docs/protocol.md, "Message formats"), with Fetch v0
and Offsets v0 (protocol/kafka08/), over connection08.py. Offsets are logical: the n-th message
of the partition is offset n, and a batch resumes at its last message's offset + 1. A fetch
from an offset inside a compressed wrapper gets the whole wrapper back; the reader hands out
only the messages at or after the offset asked for (messages08.py walks the set).

The leader is found and followed as PartitionReader does: `Leaders` (leaders.py) says who
leads, `Leaders.endpoint08` where its 0.8 listener is; after NotLeaderForPartition,
LeaderNotAvailable or a lost connection the reader reads the leaders again and resumes at the
same offset on the new leader (replicas hold the same offsets; consumers see only what is below
the high watermark, which every in-sync replica has), for up to `leader_timeout_ms` (each try
`retry_backoff_ms` after the last) before it raises the last refusal. A reader made `at` a
known leader (the Spark source's: its plan found the leader's 0.8 listener) reads from it with
no ZooKeeper session, and opens one only once that broker refuses or goes; a session for each
range cost the hourly load more than reading a small range. Fetches are pipelined:
the next is on its way while a batch is handed out, and the fetch size grows (doubling, up to
`max_fetch_size`) while not even one entry fits; a larger entry is a MessageTooLargeError.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from typing import Protocol, TypeVar

from kazoo.client import KazooClient

from ..protocol.errors import LeaderNotAvailableError, LogbrokerError
from ..protocol.kafka08.fetch import FETCH_V0
from ..protocol.kafka08.fetch import FetchRequest as FetchRequest08
from ..protocol.kafka08.message_set import first_entry_size
from ..protocol.kafka08.offsets import EARLIEST, LATEST, OFFSETS_V0
from ..protocol.requests import FetchRequest
from ..protocol.wire import Buffer
from ..security.sasl import SaslClientConfig
from .brokers import BrokerEndpoint
from .connection08 import Kafka08Connection
from .leaders import Leaders
from .messages08 import KeyedBatch, KeyedMessage, batch_of, keyed_columns
from .partition_reader import LEADER_LOST
from .simple_consumer import DEFAULT_FETCH_SIZE, DEFAULT_MAX_FETCH_SIZE, MessageTooLargeError
from .simple_consumer08 import FetchedData08, describe08, fetch_request, offsets_request

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Resumable(Protocol):
    @property
    def next_offset(self) -> int: ...


_Decoded = TypeVar("_Decoded", bound=Resumable)
_Item = TypeVar("_Item", bound=Resumable)
# A fetch's set made into a batch: (it, where its whole entries end, its messages)
Decode = Callable[[Buffer, int], tuple[_Decoded, int, int]]


def _keyed_batch(data: Buffer, offset: int) -> tuple[KeyedBatch, int, int]:
    """iter_batches' decoding: the messages at or after `offset`, as lists."""
    columns = keyed_columns(data, offset)
    return batch_of(columns, offset), columns.end, len(columns.offsets)


class PartitionReader08:
    """Reads of one partition of a 0.8-format topic, following its leader."""

    def __init__(
        self,
        leaders: Leaders | str,
        topic: str,
        partition: int,
        *,
        leader: BrokerEndpoint | None = None,
        fetch_size: int = DEFAULT_FETCH_SIZE,
        max_fetch_size: int = DEFAULT_MAX_FETCH_SIZE,
        timeout: float = 30.0,
        leader_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        sasl: SaslClientConfig | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`sasl`: log in so to each leader's 0.8 listener (security/sasl.py); `tls`: over
        TLS, at the leaders' SSL08 listeners (Leaders(..., tls=True))."""
        self.topic = topic
        self.sasl = sasl
        self.tls = tls
        self.partition = partition
        self.fetch_size = fetch_size
        self.max_fetch_size = max(max_fetch_size, fetch_size)
        self.timeout = timeout
        self.leader_timeout_s = leader_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.sleep = sleep
        self.clock = clock
        self._connection: Kafka08Connection | None = None
        self._endpoint: BrokerEndpoint | None = None
        self._zk: KazooClient | None = None  # set by connect() or _opened(): closed with us
        self._leaders: Leaders | None = None
        self._zk_connect: str | None = None
        # The plan's leader: read until it refuses or goes; only then is ZooKeeper asked
        self._planned = leader
        if isinstance(leaders, str):
            if leader is None:
                raise ValueError("a ZooKeeper connect string for the leaders needs `leader`")
            self._zk_connect = leaders
        else:
            self._leaders = self._checked(leaders)

    @classmethod
    def connect(
        cls, zk_connect: str, topic: str, partition: int, **kwargs: object
    ) -> PartitionReader08:
        """A reader with its own ZooKeeper session (closed by `close()`)."""
        zk = KazooClient(hosts=zk_connect, timeout=10)
        try:
            zk.start(timeout=10)
            # over TLS, the leaders at their SSL listeners
            leaders = Leaders(
                zk, tls=kwargs.get("tls") is not None, sasl=kwargs.get("sasl") is not None
            )
            reader = cls(leaders, topic, partition, **kwargs)  # type: ignore[arg-type]
        except BaseException:
            zk.stop()
            zk.close()
            raise
        reader._zk = zk
        return reader

    @classmethod
    def at(
        cls, zk_connect: str, topic: str, partition: int, leader: BrokerEndpoint, **kwargs: object
    ) -> PartitionReader08:
        """A reader that starts at `leader` (the 0.8 listener a plan found leading the
        partition) with no ZooKeeper session: it opens one, as `connect` does, only once that
        broker refuses (not the leader any more) or goes, and then follows the leader."""
        return cls(zk_connect, topic, partition, leader=leader, **kwargs)  # type: ignore[arg-type]

    @property
    def leaders(self) -> Leaders:
        """Who leads, from ZooKeeper (a reader made by `at` opens its session now)."""
        if self._leaders is None:
            self._leaders = self._opened()
        return self._leaders

    def _opened(self) -> Leaders:
        assert self._zk_connect is not None
        zk = KazooClient(hosts=self._zk_connect, timeout=10)
        try:
            try:
                zk.start(timeout=10)
            except Exception as exc:  # kazoo's timeout is no KazooException
                raise LogbrokerError(
                    f"cannot reach ZooKeeper at {self._zk_connect} to find the leader of "
                    f"{self.topic}-{self.partition}: {exc}"
                ) from exc
            leaders = self._checked(
                Leaders(zk, tls=self.tls is not None, sasl=self.sasl is not None)
            )
        except BaseException:
            zk.stop()
            zk.close()
            raise
        self._zk = zk
        return leaders

    def _checked(self, leaders: Leaders) -> Leaders:
        """`leaders`, once they say the topic is a 0.8-format one with our partition."""
        topic, partition = self.topic, self.partition
        assignment = leaders.assignment(topic)
        if assignment is None or assignment.message_format != "0.8":
            what = "a 0.7-format topic" if assignment is not None else "not a replicated topic"
            raise LogbrokerError(
                f"{topic!r} is {what}: PartitionReader08 reads 0.8-format topics (created with "
                "--message-format 0.8); read this one with PartitionReader or SimpleConsumer"
            )
        if not 0 <= partition < assignment.partitions:
            raise LogbrokerError(
                f"{topic} has partitions 0 to {assignment.partitions - 1}, not {partition}"
            )
        return leaders

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    def __enter__(self) -> PartitionReader08:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def leader(self) -> BrokerEndpoint | None:
        """The 0.8 listener this reader reads from now (None before the first read)."""
        return self._endpoint

    # -- reads ------------------------------------------------------------------------------

    def earliest_offset(self) -> int:
        """The first offset the leader keeps (Offsets v0, time -2)."""
        return self.offsets_before(EARLIEST)[0]

    def latest_offset(self) -> int:
        """The high watermark: the end of what consumers can read (Offsets v0, time -1)."""
        return self.offsets_before(LATEST)[0]

    def offsets_before(self, time_ms: int, max_offsets: int = 1) -> list[int]:
        """Offsets v0: the starts of the segments last written before `time_ms`, newest
        first (-1: the high watermark; -2: the log's start)."""
        request = offsets_request(self.topic, self.partition, time_ms, max_offsets)

        def ask(conn: Kafka08Connection) -> list[int]:
            [topic] = conn.request(OFFSETS_V0, request).topics
            [answer] = topic.partitions
            if answer.error_code:
                raise self._error(answer.error_code, f"asking offsets before {time_ms} of")
            return list(answer.offsets)

        return self._retried(ask)

    def fetch(
        self, offset: int, max_size: int | None = None, *, max_wait_ms: int = 0
    ) -> FetchedData08:
        """One Fetch v0 from `offset`, at most `max_size` bytes (default: fetch_size); held
        up to `max_wait_ms` by the leader while there is nothing. Raises OffsetOutOfRangeError,
        ... on an error code (after following the leader)."""
        size = self.fetch_size if max_size is None else max_size
        return self._retried(
            lambda conn: self._fetched(
                conn, conn.ask(FETCH_V0, self._request(offset, size, max_wait_ms)), offset
            )
        )

    def iter_batches(
        self, offset: int, *, stop_at_end: bool = True, max_wait_ms: int = 1000
    ) -> Iterator[KeyedBatch]:
        """Every message from `offset` on, a fetch at a time, as columns; stops at the high
        watermark unless told to wait (then each fetch waits up to `max_wait_ms` for data).
        Resume after a batch at its `next_offset`."""
        return self.iter_decoded(
            offset, _keyed_batch, stop_at_end=stop_at_end, max_wait_ms=max_wait_ms
        )

    def iter_decoded(
        self,
        offset: int,
        decode: Decode[_Decoded],
        *,
        stop_at_end: bool = True,
        max_wait_ms: int = 1000,
    ) -> Iterator[_Decoded]:
        """iter_batches with each fetch's set made into something else by `decode(data,
        offset)`: (it, where its whole entries end in `data`, 0 for none; it has a
        `next_offset`, and a length: its messages). `data` is a view of a buffer the next
        fetch is read into: `decode` copies what it keeps. The Spark source's columns over
        a fetch's bytes (spark_apps/source/keyed_scan.py) come this way."""
        return self._follow(
            offset, lambda conn, at: self._batches(conn, at, stop_at_end, max_wait_ms, decode)
        )

    def iter_messages(
        self, offset: int, *, stop_at_end: bool = True, max_wait_ms: int = 1000
    ) -> Iterator[KeyedMessage]:
        """iter_batches one message at a time."""

        def messages(conn: Kafka08Connection, at: int) -> Iterator[KeyedMessage]:
            batches = self._batches(conn, at, stop_at_end, max_wait_ms, _keyed_batch)
            with closing(batches):
                for batch in batches:
                    for o, k, p in zip(batch.offsets, batch.keys, batch.payloads, strict=True):
                        yield KeyedMessage(o, o + 1, k, p)

        return self._follow(offset, messages)

    # -- fetching -----------------------------------------------------------------------------

    def _request(self, offset: int, size: int, max_wait_ms: int) -> FetchRequest08:
        return fetch_request(
            (FetchRequest(self.topic, self.partition, offset, size),), max_wait_ms, 1
        )

    def _fetched(
        self,
        conn: Kafka08Connection,
        correlation_id: int,
        offset: int,
        into: bytearray | None = None,
    ) -> FetchedData08:
        [topic] = conn.answer(correlation_id, into).topics
        [answer] = topic.partitions
        if answer.error_code:
            raise self._error(answer.error_code, f"fetching offset {offset} of")
        return FetchedData08(
            self.topic, self.partition, offset, answer.high_watermark, answer.messages
        )

    def _batches(
        self,
        conn: Kafka08Connection,
        offset: int,
        stop_at_end: bool,
        max_wait_ms: int,
        decode: Decode[_Decoded],
    ) -> Generator[_Decoded, None, None]:
        """The batches from `offset`, the next fetch sent before a batch is handed out."""
        wait = 0 if stop_at_end else max_wait_ms
        size = self.fetch_size
        into = bytearray(self.fetch_size + 1024)  # each answer read into it: copied out below
        asked: int | None = None
        try:
            while True:
                if asked is None:
                    asked = conn.ask(FETCH_V0, self._request(offset, size, wait))
                fetched = self._fetched(conn, asked, offset, into)
                asked = None
                batch, end, messages = decode(fetched.data, offset)
                if end:
                    offset, size = batch.next_offset, self.fetch_size
                    if not stop_at_end or offset < fetched.high_watermark:
                        asked = conn.ask(FETCH_V0, self._request(offset, size, wait))
                    if messages:
                        yield batch
                    if asked is None and stop_at_end:
                        return  # at the high watermark
                    continue
                grown = self._grown(offset, fetched.data, size)
                if grown is not None:
                    size = grown
                    into = bytearray(size + 1024)
                elif stop_at_end:
                    return
        finally:
            if asked is not None:  # an answer nobody will read: drop the connection
                conn.close()

    def _grown(self, offset: int, data: Buffer, size: int) -> int | None:
        """The next fetch size when `data` holds no whole entry, or None if it is empty."""
        needed = first_entry_size(data)
        if needed is None or len(data) >= needed:
            return None
        if needed > self.max_fetch_size:
            raise MessageTooLargeError(
                f"the entry at offset {offset} of {self.topic}-{self.partition} is {needed} "
                f"bytes, over the largest fetch size {self.max_fetch_size}"
            )
        return max(needed, min(size * 2, self.max_fetch_size))

    def _error(self, code: int, doing: str) -> LogbrokerError:
        where = self._endpoint.address if self._endpoint is not None else "?"
        return describe08(code, doing, self.topic, self.partition, where)

    # -- following the leader -------------------------------------------------------------

    def _follow(
        self, offset: int, read: Callable[[Kafka08Connection, int], Iterator[_Item]]
    ) -> Iterator[_Item]:
        """Items of `read(connection, offset)` from the leader; after a loss, from the next
        leader at the offset after the last item handed out."""
        deadline: float | None = None
        while True:
            try:
                items = read(self._current(), offset)
                with closing(items):  # type: ignore[type-var]
                    for item in items:
                        deadline = None  # the leader answers: a later loss starts a new wait
                        offset = item.next_offset
                        yield item
                return
            except LEADER_LOST as exc:
                deadline = self._lost(exc, deadline, offset)

    def _retried(self, read: Callable[[Kafka08Connection], _T]) -> _T:
        deadline: float | None = None
        while True:
            try:
                return read(self._current())
            except LEADER_LOST as exc:
                deadline = self._lost(exc, deadline, None)

    def _current(self) -> Kafka08Connection:
        """A connection to the leader's 0.8 listener as last seen (a new one when it moved)."""
        endpoint = self._planned
        if endpoint is None:
            endpoint = self.leaders.endpoint08(self.topic, self.partition)
        if endpoint is None:
            raise LeaderNotAvailableError(
                f"{self.topic}-{self.partition} has no live leader with a 0.8 listener now"
            )
        if endpoint != self._endpoint or self._connection is None:
            if self._connection is not None:
                self._connection.close()
            self._connection = Kafka08Connection(
                endpoint.host, endpoint.port, timeout=self.timeout, sasl=self.sasl, tls=self.tls
            )
            self._endpoint = endpoint
        return self._connection

    def _lost(self, exc: LogbrokerError, deadline: float | None, offset: int | None) -> float:
        """The leader refused or went: read the leaders again after a back-off; raise `exc`
        once the partition has gone without a leader that answers for leader_timeout_ms."""
        now = self.clock()
        if deadline is None:
            deadline = now + self.leader_timeout_s
            log.info(
                "%s-%d: %s; looking for its leader%s",
                self.topic,
                self.partition,
                exc,
                f" (resuming at offset {offset})" if offset is not None else "",
            )
        elif now >= deadline:
            raise exc
        if self._connection is not None:
            self._connection.close()  # a broken or refusing connection: never reused
        self.sleep(self.retry_backoff_s)
        self._planned = None  # the plan's leader refused or went: ZooKeeper says who leads
        self.leaders.refresh(self.topic)
        return deadline
