"""Reading one partition of a replicated topic from its leader, wherever the leader is.

    with PartitionReader.connect("127.0.0.1:2181/live", "orders", 2) as reader:
        for batch in reader.iter_batches(reader.earliest_offset()):
            for payload in batch.payloads: ...     # batch.next_offset: where to resume

SimpleConsumer (simple_consumer.py) talks to one broker; a replicated partition is served by
its leader only (docs/replication.md), and the leader moves when a broker dies. (A
0.8-format topic is its sibling's, partition_reader08.py: refused here.) The reader
asks `Leaders` (leaders.py) who leads, fetches from it as SimpleConsumer does (the same
iteration, pipelining and fetch-size growth, with FETCH_WAIT so that refusals come back with
their own codes), and when the leader refuses (NotLeaderForPartition, LeaderNotAvailable) or
its connection dies, reads the leaders again and resumes at the same offset on the new one:
replicas are byte-identical, so an offset means the same on every replica, and a consumer
sees only what is below the high watermark, which every in-sync replica holds. It goes on
looking for a leader that answers for `leader_timeout_ms` (each try `retry_backoff_ms` after
the last) before it raises the last refusal.

`pipelined()` is SimpleConsumer.pipelined's fetch loop (the Spark source's ranges) from the
leader, followed the same way. A reader that knows an offset is committed (a range planned
below an earlier high watermark) calls `wait_visible(offset)` when the leader shows less: a
new leader learns the high watermark from its followers' first fetches, so for a moment it
may show consumers less than the leader before it did.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from typing import TypeVar

from kazoo.client import KazooClient

from ..protocol.errors import (
    LeaderNotAvailableError,
    LogbrokerError,
    NotLeaderForPartitionError,
)
from ..protocol.message import Message
from ..security.sasl import SaslClientConfig
from .brokers import BrokerEndpoint
from .connection import BrokerUnavailableError
from .leaders import Leaders
from .simple_consumer import (
    DEFAULT_FETCH_SIZE,
    DEFAULT_MAX_FETCH_SIZE,
    FetchedData,
    MessageBatch,
    PipelinedFetches,
    SimpleConsumer,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Item = TypeVar("_Item", MessageBatch, Message)
# What says "ask the leader again": a refusal, or a broker that is gone (a non-leader also
# closes the connection of an OFFSETS request, as 0.7 answers any OFFSETS it cannot serve).
LEADER_LOST = (NotLeaderForPartitionError, LeaderNotAvailableError, BrokerUnavailableError)


class PartitionReader:
    """SimpleConsumer's reads of one replicated partition, following its leader."""

    def __init__(
        self,
        leaders: Leaders,
        topic: str,
        partition: int,
        *,
        fetch_size: int = DEFAULT_FETCH_SIZE,
        max_fetch_size: int = DEFAULT_MAX_FETCH_SIZE,
        timeout: float = 30.0,
        leader_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        sleep: Callable[[float], object] = time.sleep,
        sasl: SaslClientConfig | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`sasl`: log in so to each leader (security/sasl.py); `tls`: over TLS (the leaders
        then are `Leaders(..., tls=True)`'s, at their SSL listeners)."""
        if leaders.assignment(topic) is None:
            raise LogbrokerError(
                f"{topic!r} is not a replicated topic (no /replication/topics/{topic}): "
                "read a 0.7 topic's partitions with SimpleConsumer, from their brokers"
            )
        if leaders.is_format08(topic):
            raise LogbrokerError(
                f"{topic!r} is a 0.8-format topic: read it with PartitionReader08 "
                "(partition_reader08.py), from its leaders' Kafka 0.8 listeners"
            )
        partitions = leaders.assignment(topic).partitions  # type: ignore[union-attr]
        if not 0 <= partition < partitions:
            raise LogbrokerError(f"{topic} has partitions 0 to {partitions - 1}, not {partition}")
        self.leaders = leaders
        self.topic = topic
        self.partition = partition
        self.fetch_size = fetch_size
        self.max_fetch_size = max_fetch_size
        self.timeout = timeout
        self.leader_timeout_s = leader_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.sleep = sleep
        self.sasl = sasl
        self.tls = tls
        self._consumer: SimpleConsumer | None = None
        self._endpoint: BrokerEndpoint | None = None
        self._zk: KazooClient | None = None  # set by connect(): closed with the reader

    @classmethod
    def connect(
        cls, zk_connect: str, topic: str, partition: int, **kwargs: object
    ) -> PartitionReader:
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

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def leader(self) -> BrokerEndpoint | None:
        """The broker this reader reads from now (None before the first read)."""
        return self._endpoint

    # -- reads ------------------------------------------------------------------------------

    def earliest_offset(self) -> int:
        return self._retried(lambda c: c.earliest_offset(self.topic, self.partition))

    def latest_offset(self) -> int:
        """The high watermark: the end of what consumers can read."""
        return self._retried(lambda c: c.latest_offset(self.topic, self.partition))

    def offsets_before(self, time_ms: int, max_offsets: int = 1) -> list[int]:
        """OFFSETS from the leader (none past the high watermark)."""
        return self._retried(
            lambda c: c.offsets_before(self.topic, self.partition, time_ms, max_offsets)
        )

    def fetch(self, offset: int, max_size: int | None = None) -> FetchedData:
        return self._retried(lambda c: c.fetch(self.topic, self.partition, offset, max_size))

    def pipelined(self) -> LeaderFetches:
        """SimpleConsumer.pipelined of this partition, from its leader (see LeaderFetches)."""
        return LeaderFetches(self)

    def wait_visible(self, offset: int) -> bool:
        """Wait until the leader's high watermark reaches `offset` (consumers see everything
        before it); False when no leader shows it within leader_timeout_ms."""
        deadline = time.monotonic() + self.leader_timeout_s
        while True:
            latest = self.latest_offset()
            if latest >= offset:
                return True
            if time.monotonic() >= deadline:
                return False
            log.info(
                "%s-%d: the leader shows offsets up to %d, waiting for %d",
                self.topic,
                self.partition,
                latest,
                offset,
            )
            self.sleep(self.retry_backoff_s)
            self.leaders.refresh(self.topic)

    def iter_batches(
        self, offset: int, *, stop_at_end: bool = True, max_wait_ms: int = 1000
    ) -> Iterator[MessageBatch]:
        """SimpleConsumer.iter_batches from the leader, resumed on the next leader."""
        return self._follow(
            offset,
            lambda c, at: c.iter_batches(
                self.topic, self.partition, at, stop_at_end=stop_at_end, max_wait_ms=max_wait_ms
            ),
        )

    def iter_messages(
        self, offset: int, *, stop_at_end: bool = True, max_wait_ms: int = 1000
    ) -> Iterator[Message]:
        """SimpleConsumer.iter_messages from the leader, resumed on the next leader."""
        return self._follow(
            offset,
            lambda c, at: c.iter_messages(
                self.topic, self.partition, at, stop_at_end=stop_at_end, max_wait_ms=max_wait_ms
            ),
        )

    def _follow(
        self, offset: int, read: Callable[[SimpleConsumer, int], Iterator[_Item]]
    ) -> Iterator[_Item]:
        """Items of `read(consumer, offset)` from the leader; after a loss, from the next
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

    # -- following the leader -------------------------------------------------------------

    def _retried(self, read: Callable[[SimpleConsumer], _T]) -> _T:
        deadline: float | None = None
        while True:
            try:
                return read(self._current())
            except LEADER_LOST as exc:
                deadline = self._lost(exc, deadline, None)

    def _current(self) -> SimpleConsumer:
        """A consumer of the leader as last seen (a new one when the leader moved)."""
        endpoint = self.leaders.endpoint(self.topic, self.partition)
        if endpoint is None:
            raise LeaderNotAvailableError(f"{self.topic}-{self.partition} has no live leader now")
        if endpoint != self._endpoint or self._consumer is None:
            if self._consumer is not None:
                self._consumer.close()
            self._consumer = SimpleConsumer(
                endpoint.host,
                endpoint.port,
                fetch_size=self.fetch_size,
                max_fetch_size=self.max_fetch_size,
                timeout=self.timeout,
                waiting_fetches=True,
                sasl=self.sasl,
                tls=self.tls,
            )
            self._endpoint = endpoint
        return self._consumer

    def _lost(self, exc: LogbrokerError, deadline: float | None, offset: int | None) -> float:
        """The leader refused or went: read the leaders again after a back-off; raise `exc`
        once the partition has gone without a leader that answers for leader_timeout_ms."""
        now = time.monotonic()
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
        if self._consumer is not None:
            self._consumer.close()  # a broken or refusing connection: never reused
        self.sleep(self.retry_backoff_s)
        self.leaders.refresh(self.topic)
        return deadline


class LeaderFetches:
    """PipelinedFetches of one replicated partition from its leader: `ask` sends a fetch to
    the leader as last seen, `get` returns the answer, and after NotLeaderForPartition,
    LeaderNotAvailable or a lost connection asks the next leader for the same offset and
    size (PartitionReader's rules: up to its leader_timeout_ms)."""

    def __init__(self, reader: PartitionReader) -> None:
        self.reader = reader
        self._fetches: PipelinedFetches | None = None

    def _current(self) -> PipelinedFetches:
        consumer = self.reader._current()
        if self._fetches is None or self._fetches.consumer is not consumer:
            if self._fetches is not None:
                self._fetches.close()
            self._fetches = consumer.pipelined(self.reader.topic, self.reader.partition)
        return self._fetches

    def ask(self, offset: int, size: int) -> None:
        with suppress(*LEADER_LOST):  # `get` asks again, of whoever leads then
            self._current().ask(offset, size)

    def get(self, offset: int, size: int) -> bytes | memoryview:
        deadline: float | None = None
        while True:
            try:
                return self._current().get(offset, size)
            except LEADER_LOST as exc:
                deadline = self.reader._lost(exc, deadline, offset)

    def close(self) -> None:
        if self._fetches is not None:
            self._fetches.close()
            self._fetches = None
