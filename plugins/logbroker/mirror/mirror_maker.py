"""The mirror: copies topics of a source cluster into a target cluster, losing nothing.

    source group consumer (shallow: sets as stored) --> stream threads --> acked writes
          ^                                                                        |
          +---- commit: only offsets whose every message before was acknowledged <-+

Each of `num.streams` threads takes what its stream has fetched (stored sets, one source
partition each, up to `max.request.size` bytes), writes them unchanged (the fetched bytes
themselves, never cut into messages) as one message set per source partition, marks them `sent` (progress.py), sends them in one
PRODUCE_ACK request per target broker (target.py; a 0.8-format topic's 0.8 entries, keys
included, in one Produce v0 per leader's 0.8 listener) and, once acknowledged, records each
partition's next offset as acknowledged. The main thread commits the acknowledged offsets
every `autocommit.interval.ms` (never the consumer's own consumed offsets: autocommit is
off), updates the lag gauges, and watches for the end:

- stop() (SIGTERM, SIGINT): the stream threads finish the batch in hand; the acknowledged
  offsets are committed; the consumer releases its partitions and leaves; exit code 0;
- `until_caught_up`: the same, once every partition has been copied up to the end offset it
  had when the mirror started (partitions without a committed offset under
  autooffset.reset=largest have nothing to copy);
- a write that fails beyond `delivery.timeout.ms`: the same, with exit code 1 and the error.

`_audit` is always mirrored (the warehouse audit reads the producers' counts from the
target's `_audit`), whatever the whitelist or blacklist; its events are not counted as
mirrored events. The events of the other topics are counted by `events` (tier "mirror").
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..client.cluster import Cluster
from ..client.group_consumer import GroupConsumer, MessageStream, StoredSet
from ..coordination import paths
from ..coordination.rebalance import Blacklist, TopicFilter, Whitelist
from ..protocol.errors import LogbrokerError
from ..protocol.topics import AUDIT_TOPIC
from .metrics import MirrorMetrics
from .progress import PartitionKey, SentMarks, resume_tail
from .settings import TargetSettings
from .target import OutgoingSet, TargetCluster, TargetUnavailableError, TargetWriter

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_POLL_S = 0.2  # a stream thread looks at the stop flag at least this often
LAG_INTERVAL_S = 5.0


def mirror_filter(whitelist: str | None, blacklist: str | None) -> TopicFilter:
    """The consumer's topic filter: the user's, with `_audit` always included."""
    if (whitelist is None) == (blacklist is None):
        raise ValueError("give exactly one of --whitelist and --blacklist")
    if whitelist is not None:
        Whitelist(whitelist)  # the user's regex alone must be valid
        return Whitelist(f"(?:{whitelist})|{AUDIT_TOPIC}")
    assert blacklist is not None
    Blacklist(blacklist)
    return Blacklist(f"(?!{AUDIT_TOPIC}$)(?:{blacklist})")


class EventCounter:
    """What the mirror needs from the audit side; the default counts nothing."""

    def count(self, topic: str, stored_set: bytes, format08: bool = False) -> tuple[object, int]:
        """(what `add` takes later, payloads that are not events) for one partition's batch:
        `stored_set` is its entries as stored (`int32 size | message`, CRCs checked; with
        `format08`, 0.8's `int64 offset | int32 size | message`)."""
        return None, 0

    def add(self, counted: object) -> None:
        """The batch was acknowledged: its events count as mirrored."""

    def tick(self) -> None:
        """Called every commit interval: publish the windows that closed."""

    def close(self) -> None:
        """Publish what is counted and not yet published."""


@dataclass
class MirrorResult:
    exit_code: int
    error: str | None = None
    forwarded: dict[str, int] = field(default_factory=dict)


class MirrorMaker:
    def __init__(
        self,
        consumer_props: Mapping[str, str],
        target: TargetSettings,
        topic_filter: TopicFilter,
        *,
        num_streams: int = 1,
        until_caught_up: bool = False,
        metrics: MirrorMetrics | None = None,
        events: EventCounter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if num_streams < 1:
            raise ValueError(f"--num.streams must be >= 1, got {num_streams}")
        self.consumer_props = dict(consumer_props)
        self.group = self.consumer_props["groupid"]
        self.target_settings = target
        self.topic_filter = topic_filter
        self.num_streams = num_streams
        self.until_caught_up = until_caught_up
        self.metrics = metrics or MirrorMetrics()
        self.events = events or EventCounter()
        self.clock = clock
        self.commit_interval_s = (
            int(self.consumer_props.get("autocommit.interval.ms", "1000")) / 1000
        )
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._acked: dict[PartitionKey, int] = {}
        self._failure: BaseException | None = None
        self._forwarded: dict[str, int] = {}

    def stop(self) -> None:
        """Ask the mirror to finish the batches in hand, commit and exit (signal-safe)."""
        self._stop.set()

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> MirrorResult:
        source = Cluster.from_properties(self.consumer_props["zk.connect"], self.consumer_props)
        target = None
        consumer = None
        try:
            tail = resume_tail(source, self.group)
            log.info(
                "mirror group %s: resuming from the committed offsets; %d messages (%d bytes) "
                "in %d partitions past them may have reached the target already and are sent "
                "again (at most: the marks are written ahead)",
                self.group,
                tail.messages,
                tail.bytes,
                tail.partitions,
            )
            ends = self._source_ends(source) if self.until_caught_up else {}
            target = TargetCluster(self.target_settings)
            consumer = GroupConsumer.from_properties(
                self.consumer_props, autocommit_enable=False, shallow_iterator_enable=True
            )
            marks = SentMarks(consumer.zk_client, self.group)
            streams = consumer.create_message_streams_by_filter(self.topic_filter, self.num_streams)
            starts = self._committed(source, ends) if self.until_caught_up else {}
            threads = [
                threading.Thread(
                    target=self._stream_loop,
                    args=(
                        stream,
                        TargetWriter(
                            target,
                            partitions_per_topic=lambda t: _partitions_per_broker(source, t),
                            partitions_in_all=lambda t: _partitions_in_all(source, t),
                            on_retry=lambda t: self.metrics.retries.labels(t).inc(),
                            stop=self._stop,
                            clock=self.clock,
                        ),
                        marks,
                    ),
                    name=f"mirror-stream-{i}",
                    daemon=True,
                )
                for i, stream in enumerate(streams)
            ]
            for t in threads:
                t.start()
            self._supervise(consumer, source, ends, starts, threads)
            for t in threads:
                t.join()
            self._commit(consumer)
        finally:
            if consumer is not None:
                consumer.close()  # autocommit is off: releases, commits nothing more
            self.events.close()
            if target is not None:
                target.close()
            source.close()
        if self._failure is not None:
            return MirrorResult(1, str(self._failure), dict(self._forwarded))
        log.info("mirror stopped: forwarded %s", self._forwarded or "nothing")
        return MirrorResult(0, None, dict(self._forwarded))

    def _supervise(
        self,
        consumer: GroupConsumer,
        source: Cluster,
        ends: dict[PartitionKey, int],
        starts: dict[PartitionKey, int],
        threads: list[threading.Thread],
    ) -> None:
        next_lag = self.clock()
        while not self._stop.wait(min(self.commit_interval_s, 0.5)):
            self._commit(consumer)
            self.events.tick()
            if self.until_caught_up and self._caught_up(ends, starts):
                log.info("caught up with the %d source partitions' ends at start", len(ends))
                self._stop.set()
            if self.clock() >= next_lag:
                next_lag = self.clock() + LAG_INTERVAL_S
                self._update_lag(consumer, source)
            if not any(t.is_alive() for t in threads):
                self._stop.set()

    # -- a stream thread ----------------------------------------------------------------

    def _stream_loop(self, stream: MessageStream, writer: TargetWriter, marks: SentMarks) -> None:
        max_bytes = self.target_settings.max_request_size
        try:
            while not self._stop.is_set():
                try:
                    fetched = stream.next_set(_POLL_S)
                except LogbrokerError as exc:  # a partition that cannot be read: logged, stalled
                    log.error("mirror: %s", exc)
                    continue
                if fetched is None:
                    if stream.ended:
                        return
                    continue
                batch = [fetched]
                size = len(fetched.data)
                while size < max_bytes:
                    try:
                        more = stream.next_set(0)
                    except LogbrokerError as exc:
                        log.error("mirror: %s", exc)
                        break
                    if more is None:
                        break
                    batch.append(more)
                    size += len(more.data)
                self._forward(batch, writer, marks)
        except BaseException as exc:  # the run ends with this error
            if not isinstance(exc, TargetUnavailableError):
                log.exception("mirror stream failed")
            with self._lock:
                if self._failure is None:
                    self._failure = exc
            self._stop.set()
        finally:
            writer.close()

    def _forward(self, batch: list[StoredSet], writer: TargetWriter, marks: SentMarks) -> None:
        """Write the fetched sets, one per source partition, as they are stored: no message
        is cut out or framed again (the target checks every CRC once more)."""
        by_partition: dict[PartitionKey, list[StoredSet]] = {}
        for fetched in batch:
            by_partition.setdefault((fetched.topic, fetched.partition), []).append(fetched)
        sets = []
        ends = {}
        counted = []
        for (topic, name), fetched_sets in by_partition.items():
            if len(fetched_sets) == 1:
                data = fetched_sets[0].data
            else:
                data = b"".join(f.data for f in fetched_sets)
            format08 = fetched_sets[0].format08  # a topic's format is kept for its life
            sets.append(
                OutgoingSet(topic, name, data, sum(f.entries for f in fetched_sets), format08)
            )
            ends[(topic, name)] = fetched_sets[-1].next_offset
            if topic != AUDIT_TOPIC:
                events, undecodable = self.events.count(topic, data, format08)
                counted.append(events)
                if undecodable:
                    self.metrics.undecodable.labels(topic).inc(undecodable)
        pending = marks.mark(ends)
        writer.write(sets)
        marks.wait(pending)
        with self._lock:
            self._acked.update(ends)
            for s in sets:
                self._forwarded[s.topic] = self._forwarded.get(s.topic, 0) + s.messages
        for s in sets:
            self.metrics.messages.labels(s.topic).inc(s.messages)
            self.metrics.bytes.labels(s.topic).inc(len(s.data))
        for events in counted:
            self.events.add(events)

    # -- offsets ---------------------------------------------------------------------------

    def _commit(self, consumer: GroupConsumer) -> None:
        with self._lock:
            acked = dict(self._acked)
        if not acked:
            return
        try:
            consumer.commit_offsets(acked)
        except LogbrokerError as exc:
            log.warning("committing the acknowledged offsets failed (retried): %s", exc)
            return
        self.metrics.commits.inc()

    def _source_ends(self, source: Cluster) -> dict[PartitionKey, int]:
        """Every allowed partition's end offset now: what --until-caught-up copies."""
        ends = {}
        for topic in [*source.topics(), *source.replicated_topics()]:
            if not self.topic_filter.allows(topic):
                continue
            for row in source.describe(topic):
                ends[(topic, row.name)] = row.latest
        log.info("copying until caught up with %d partitions' current ends", len(ends))
        return ends

    def _committed(self, source: Cluster, ends: dict[PartitionKey, int]) -> dict[PartitionKey, int]:
        """Where each partition starts: its committed offset; without one, 0 (smallest) or
        its end (largest: nothing that is there now will be copied)."""
        largest = self.consumer_props.get("autooffset.reset", "smallest").strip() == "largest"
        starts = {}
        for (topic, name), end in ends.items():
            broker_id, partition = paths.parse_partition_name(name)
            path = paths.consumer_offset_path(self.group, topic, broker_id, partition)
            node = source.zk.exists(path)
            if node is not None:
                data, _ = source.zk.get(path)
                starts[(topic, name)] = int(data.decode().strip() or 0)
            else:
                starts[(topic, name)] = end if largest else 0
        return starts

    def _caught_up(self, ends: dict[PartitionKey, int], starts: dict[PartitionKey, int]) -> bool:
        with self._lock:
            acked = dict(self._acked)
        return all(max(acked.get(k, 0), starts.get(k, 0)) >= end for k, end in ends.items())

    def _update_lag(self, consumer: GroupConsumer, source: Cluster) -> None:
        with self._lock:
            acked = dict(self._acked)
        try:
            for topic, names in consumer.owned_partitions().items():
                latest = {row.name: row.latest for row in source.describe(topic)}
                for name in names:
                    if name in latest and (topic, name) in acked:
                        self.metrics.lag.labels(topic, name).set(
                            max(0, latest[name] - acked[(topic, name)])
                        )
        except LogbrokerError as exc:
            log.debug("lag not updated: %s", exc)


def _partitions_per_broker(source: Cluster, topic: str) -> int:
    """What a 0.7 target topic is created with: the source's count per broker (a replicated
    source topic's partition count)."""
    try:
        assignment = source.assignment(topic)
        if assignment is not None:
            return assignment.partitions
        counts = source.topics().get(topic, {})
    except Exception:  # ZooKeeper trouble: the target's default
        return 1
    return max(counts.values(), default=1)


def _partitions_in_all(source: Cluster, topic: str) -> int:
    """What a replicated target topic is created with: the source's partitions in all."""
    try:
        assignment = source.assignment(topic)
        if assignment is not None:
            return assignment.partitions
        return max(1, sum(source.topics().get(topic, {}).values()))
    except Exception:
        return 1
