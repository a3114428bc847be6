"""The fetchers of a group consumer: one thread per broker, for the partitions owned there.

A replicated topic's partitions are fetched from their leaders: one more thread per leader,
for the owned partitions it leads (rebalance.py groups them). When the leader refuses a
partition (NotLeaderForPartition, LeaderNotAvailable) or cannot be reached, the fetcher
pauses it as any failed partition and tells `on_leader_lost`, which reads the leaders again
and moves the partition to the fetcher of its new leader, at the same offset (replicas are
byte-identical).

Fetchers ask their broker with FETCH_WAIT (the broker holds the request up to
`fetch_wait_max_ms` until data comes), parse the whole messages of each answer and put them,
as one chunk per partition, in the bounded queue (`queued_max_chunks`) of the stream that
owns the partition. A chunk whose first message does not fit grows that partition's fetch
size (doubling, up to `max_fetch_size`); a larger message, or a corrupt one, is raised from
the stream's `next()`, and that partition is not fetched again until the next rebalance.
A partition without a start offset, or whose offset the broker answers OffsetOutOfRange for
(logged), starts at the broker's earliest or latest offset (`autooffset_reset`); any other
fetch error pauses that partition for `fetcher_backoff_ms`, and a round that fails as a whole
(the broker cannot be reached) pauses the fetcher as long. With `shallow_iterator` the chunks
hold the top-level messages as stored (a compressed wrapper is one message, not decompressed).

A 0.8-format topic's partitions are fetched from their leaders' Kafka 0.8 listeners
(`format08`: one fetcher per listener, SimpleConsumer08's Fetch v0 and Offsets v0), with the
same pauses, resets and growth. Its messages carry their keys and logical offsets: each
resumes at its own offset + 1, and a fetch that starts inside a compressed wrapper hands out
only the wrapper's messages from the offset asked for on (messages08.py). With the shallow
iterator (a copier's stored sets) its chunks hold the whole 0.8 entries as stored, offsets
and keys included (a wrapper that holds the offset asked for comes whole, the messages
below it too: a copier sends them again, at least once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ...protocol.errors import (
    InvalidMessageError,
    LeaderNotAvailableError,
    LogbrokerError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
)
from ...protocol.kafka08.message_set import first_entry_size as first_entry_size08
from ...protocol.kafka08.message_set import validate as validate08
from ...protocol.message_set import first_entry_size, iter_messages, stored_set_end
from ...protocol.requests import EARLIEST_TIME, LATEST_TIME, FetchRequest
from ...protocol.wire import Buffer
from ...security.sasl import SaslAuthenticationError
from ..brokers import BrokerEndpoint
from ..connection import BrokerUnavailableError
from ..messages08 import keyed_columns
from ..simple_consumer import MessageTooLargeError, SimpleConsumer
from ..simple_consumer08 import SimpleConsumer08
from .context import ConsumerContext
from .stream import Chunk, GroupMessage, OwnedPartition, StoredSet

log = logging.getLogger("logbroker.client.group_consumer")  # one logger for the whole consumer

AUTOOFFSET_RESETS = {"smallest": EARLIEST_TIME, "largest": LATEST_TIME}


class Fetcher:
    """One thread fetching the owned partitions of one broker into their streams."""

    def __init__(
        self,
        context: ConsumerContext,
        broker: BrokerEndpoint,
        infos: list[OwnedPartition],
        on_leader_lost: Callable[[list[OwnedPartition]], None] | None = None,
        format08: bool = False,
    ):
        """`format08`: `broker` is a 0.8 listener, and `infos` 0.8-format partitions."""
        self.context = context
        self.broker = broker
        self.infos = infos
        self.on_leader_lost = on_leader_lost  # replicated partitions its broker stopped leading
        self.format08 = format08
        self.client: SimpleConsumer | SimpleConsumer08 = (
            SimpleConsumer08 if format08 else SimpleConsumer
        )(
            broker.host,
            broker.port,
            fetch_size=context.fetch_size,
            max_fetch_size=context.max_fetch_size,
            timeout=context.socket_timeout_ms / 1000,
            sasl=context.sasl,
            tls=context.tls,
        )
        self.stop_event = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name=f"group-fetcher-{context.consumer_id}-{broker.id}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()

    def join(self) -> None:
        self.thread.join()
        self.client.close()

    def _run(self) -> None:
        backoff = self.context.fetcher_backoff_ms / 1000
        while not self.stop_event.is_set():
            try:
                self._round()
            except BrokerUnavailableError as exc:
                self.context.stats.add(fetch_errors=1)
                log.warning(
                    "fetcher for broker %s: %s; retrying in %g s", self.broker.id, exc, backoff
                )
                self._leader_lost([p for p in self.infos if p.replicated])
                self.stop_event.wait(backoff)
            except SaslAuthenticationError as exc:  # a line, not a traceback, per attempt
                self.context.stats.add(fetch_errors=1)
                log.error(
                    "fetcher for broker %s: %s; retrying in %g s", self.broker.id, exc, backoff
                )
                self.stop_event.wait(backoff)
            except Exception:
                self.context.stats.add(fetch_errors=1)
                log.exception(
                    "fetcher for broker %s failed; retrying in %g s", self.broker.id, backoff
                )
                self.stop_event.wait(backoff)

    def _round(self) -> None:
        now = self.context.clock()
        active = [p for p in self.infos if not p.stalled and p.paused_until <= now]
        if not active:
            waits = [p.paused_until - now for p in self.infos if not p.stalled]
            self.stop_event.wait(min(waits) if waits else 1.0)
            return
        for p in active:
            if p.fetch_offset is None:
                self._reset(p, None)
        requests = [
            FetchRequest(p.topic, p.partition, p.fetch_offset, p.fetch_size)  # type: ignore[arg-type]
            for p in active
        ]
        results = self.client.fetch_wait(requests, self.context.fetch_wait_max_ms)
        lost = []
        for p, result in zip(active, results, strict=True):
            if self.stop_event.is_set():
                return
            if isinstance(result, OffsetOutOfRangeError):
                self._reset(p, result)
                continue
            if isinstance(result, LogbrokerError):
                self.context.stats.add(fetch_errors=1)
                p.paused_until = self.context.clock() + self.context.fetcher_backoff_ms / 1000
                log.warning(
                    "fetching %s/%s from broker %s: %s", p.topic, p.name, self.broker.id, result
                )
                if p.replicated and isinstance(
                    result, NotLeaderForPartitionError | LeaderNotAvailableError
                ):
                    lost.append(p)
                continue
            self._deliver(p, result.data)
        self._leader_lost(lost)

    def _leader_lost(self, infos: list[OwnedPartition]) -> None:
        if infos and self.on_leader_lost is not None and not self.stop_event.is_set():
            self.on_leader_lost(infos)

    def _deliver(self, p: OwnedPartition, data: Buffer) -> None:
        offset = p.fetch_offset
        assert offset is not None
        if self.format08:
            self._deliver08(p, offset, data)
            return
        try:
            if self.context.shallow_iterator:
                # checked whole, cut into messages only if the application iterates them
                data = data if isinstance(data, bytes) else bytes(data)
                end, count = stored_set_end(data, offset)
                chunk = Chunk(
                    p, stored=StoredSet(p.topic, p.name, offset, offset + end, count, data[:end])
                )
                next_offset = offset + end
            else:
                messages = [
                    GroupMessage(p.topic, p.name, m.offset, m.next_offset, m.payload)
                    for m in iter_messages(data, offset)
                ]
                chunk = Chunk(p, messages)
                count = len(messages)
                next_offset = messages[-1].next_offset if messages else offset
        except InvalidMessageError as exc:
            self._stall(p, exc)
            return
        if count:
            if self.stop_event.is_set() or not p.feed.put(chunk, self.stop_event):
                return
            p.fetch_offset = next_offset
            p.fetch_size = self.context.fetch_size
            return
        self._grow(p, offset, data, first_entry_size(data))

    def _deliver08(self, p: OwnedPartition, offset: int, data: Buffer) -> None:
        """_deliver of a 0.8-format partition: keyed messages at logical offsets."""
        if self.context.shallow_iterator:
            self._deliver_stored08(p, offset, data)
            return
        try:
            columns = keyed_columns(data, offset)
        except InvalidMessageError as exc:
            self._stall(p, exc)
            return
        if columns.end:
            topic, name = p.topic, p.name
            messages = [
                GroupMessage(topic, name, o, o + 1, payload, key)
                for o, key, payload in zip(
                    columns.offsets, columns.keys, columns.payloads, strict=True
                )
            ]
            if messages and (
                self.stop_event.is_set() or not p.feed.put(Chunk(p, messages), self.stop_event)
            ):
                return
            p.fetch_offset = max(offset, columns.last_offset + 1)
            p.fetch_size = self.context.fetch_size
            return
        self._grow(p, offset, data, first_entry_size08(data))

    def _deliver_stored08(self, p: OwnedPartition, offset: int, data: Buffer) -> None:
        """The shallow iterator on a 0.8-format partition: its whole entries as stored
        (`offset | size | message`, each CRC checked, wrappers not opened), resuming after the
        last one's offset (a wrapper's is its last inner message's)."""
        data = data if isinstance(data, bytes) else bytes(data)
        checked = validate08(data, inflate=False)
        if checked.error is not None:
            self._stall(p, checked.error)
            return
        if checked.entries:
            next_offset = max(offset, checked.last_offset + 1)
            stored = StoredSet(
                p.topic,
                p.name,
                offset,
                next_offset,
                checked.entries,
                data[: checked.valid_bytes],
                format08=True,
            )
            if self.stop_event.is_set() or not p.feed.put(Chunk(p, stored=stored), self.stop_event):
                return
            p.fetch_offset = next_offset
            p.fetch_size = self.context.fetch_size
            return
        self._grow(p, offset, data, first_entry_size08(data))

    def _grow(self, p: OwnedPartition, offset: int, data: Buffer, needed: int | None) -> None:
        """A fetch that held no whole entry: the next one asks for `needed` bytes at least
        (doubling, up to max_fetch_size); one larger than that stalls the partition."""
        if needed is not None and len(data) < needed and len(data) >= p.fetch_size:
            if needed > self.context.max_fetch_size:
                self._stall(
                    p,
                    MessageTooLargeError(
                        f"the message at offset {offset} of {p.topic}/{p.name} is {needed} bytes, "
                        f"over the largest fetch size {self.context.max_fetch_size}"
                    ),
                )
            else:
                p.fetch_size = max(needed, min(p.fetch_size * 2, self.context.max_fetch_size))

    def _stall(self, p: OwnedPartition, exc: LogbrokerError) -> None:
        log.error(
            "%s/%s cannot be consumed past offset %s: %s", p.topic, p.name, p.fetch_offset, exc
        )
        p.stalled = True
        p.feed.put(exc, self.stop_event)

    def _reset(self, p: OwnedPartition, error: LogbrokerError | None) -> None:
        """Start `p` at the broker's earliest or latest offset (autooffset.reset)."""
        reset = self.context.autooffset_reset
        old = p.fetch_offset
        offsets = self.client.offsets_before(p.topic, p.partition, AUTOOFFSET_RESETS[reset], 1)
        offset = offsets[0] if offsets else 0
        with self.context.deliver_lock:
            p.fetch_offset = offset
            p.consumed_offset = offset
        if error is not None:
            self.context.stats.add(offset_resets=1)
            log.warning(
                "%s/%s: offset %s is out of range on broker %s (%s); autooffset.reset=%s: "
                "resuming at %s",
                p.topic,
                p.name,
                old,
                self.broker.id,
                error,
                reset,
                offset,
            )
        else:
            log.info(
                "%s/%s has no committed offset; autooffset.reset=%s: starting at %s",
                p.topic,
                p.name,
                reset,
                offset,
            )
