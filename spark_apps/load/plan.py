"""What an hour's load reads, and from where: the plan every later step reads from.

Which offsets:
- a committed hour again (a backfill) -> exactly its checkpoint's ranges: the same rows and
  the same rows_sha256;
- otherwise the previous hour must be the topic's last committed one (loads commit in hour
  order), and each partition is read from the previous checkpoint's end (the earliest offset
  still there for a topic's first load; 0 for a partition that appeared since) to the end it
  has now. A partition of the previous checkpoint on no live broker (a replicated one: with
  no leader) is waited for, at most BROKER_WAIT_S, as discovery waits for a replicated
  partition's new leader: a broker restarting (killed and started again, a rolling restart)
  is back within it, and the hour holds its data. One still gone after that is carried
  forward with no messages, and a warning: its data comes in a later hour.

A replicated topic's partitions are `(-1, p)` (broker id REPLICATED) in the ranges and the
checkpoints, wherever their leaders are: an hour planned on one leader is read, and later
backfilled, on whichever replica leads then (docs/replication.md). A 0.8-format topic's are
too, with logical offsets (message numbers): its ranges are `logical`, and so are its
checkpoints (`"offsets": "logical"`); a checkpoint without `offsets` holds byte offsets. A
topic whose offsets are not of the kind its checkpoints hold (deleted and made again in the
other format) is refused, naming both.

How the load's settings reach the reads: here, once. `plan_hour` turns LoadSettings into the
`logbroker` source's options (parsed once), enters discovery once (again only while it
waits for a broker of the previous checkpoint; which partitions, where
each is served, its earliest and latest offsets), checks the ranges against it, cuts them
into the pieces Spark's tasks read (`splits`) and pins the topic's reader schema (`decoder`).
The rows_sha256 thread (digest.py), the tasks that read and write (parquet_tasks.py) and the
reads for Spark's writer and the bad records (frames.py) take all of it from the plan; none
parses options or discovers again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pipeline_warehouse.checkpoint import Checkpoint, Warehouse
from pipeline_warehouse.time_format import next_hour, previous_hour
from spark_apps.load.errors import LoadError, LoadOrderError
from spark_apps.load.settings import LoadSettings
from spark_apps.source.avro_columns import AvroDecoder
from spark_apps.source.discovery import (
    BrokerNotAnsweringError,
    DiscoveryError,
    PartitionState,
    discover,
    segment_starts,
)
from spark_apps.source.options import SourceOptions, parse_options
from spark_apps.source.ranges import PartitionRange
from spark_apps.source.splits import SplitPlan, plan_ranges, plan_splits

log = logging.getLogger("logbroker.hourly_load")
# How long a plan waits for the brokers of the previous checkpoint's partitions: the bound
# discovery gives a replicated partition's new leader (consumers.LEADER_TIMEOUT_MS).
BROKER_WAIT_S = 60.0


@dataclass(frozen=True)
class HourPlan:
    """What one load of `hour` reads, where from, and the checkpoints it is planned against."""

    topic: str
    hour: str
    ranges: list[PartitionRange]  # every partition, in (broker_id, partition) order
    own: Checkpoint | None  # the hour's checkpoint: a backfill re-reads exactly its ranges
    previous: Checkpoint | None  # the previous hour's, if committed
    options: SourceOptions  # the source's options of this load (Avro, PERMISSIVE, sizes)
    splits: list[SplitPlan]  # the readable ranges in the pieces Spark's tasks read
    decoder: AvroDecoder  # the topic's reader schema, pinned: payloads -> rows (its schema)

    @property
    def backfill(self) -> bool:
        return self.own is not None

    @property
    def logical(self) -> bool:
        """Whether the ranges are logical offsets (a 0.8-format topic's message numbers)."""
        return any(r.logical for r in self.ranges)

    @property
    def readable(self) -> list[PartitionRange]:
        """The ranges that hold messages."""
        return [r for r in self.ranges if r.end > r.start]


def source_options(settings: LoadSettings, topic: str, parallelism: int) -> SourceOptions:
    """The `logbroker` source's options for a load of `topic` (Avro, PERMISSIVE), parsed and
    checked as the source checks them; `parallelism`: Spark's default, the fewest splits."""
    return parse_options(
        {
            "zookeeper": settings.zookeeper,
            "subscribe": topic,
            "valueFormat": "avro",
            "schemaRegistry": settings.schema_registry,
            "mode": "PERMISSIVE",
            "failOnDataLoss": "true",
            "fetchSize": str(settings.fetch_size),
            "minPartitions": str(settings.min_partitions or parallelism),
            "maxBytesPerPartition": str(settings.max_bytes_per_partition),
            **settings.client,
        }
    )


def plan_hour(
    wh: Warehouse, settings: LoadSettings, topic: str, hour: str, parallelism: int
) -> HourPlan:
    options = source_options(settings, topic, parallelism)
    own = wh.checkpoint(topic, hour)
    previous = wh.checkpoint(topic, previous_hour(hour))
    if own is not None:
        ranges = [
            PartitionRange(
                topic, p.broker_id, p.partition, p.start_offset, p.end_offset, own.logical
            )
            for p in own.partitions
        ]
        states = discover(options)
    else:
        _check_order(wh, topic, hour)
        states = discover_known(options, previous.ends() if previous is not None else ())
        ranges = _ranges(topic, states, previous)
        if not ranges:
            raise LoadError(
                f"topic {topic!r} has no partitions on any live broker in {settings.zookeeper}"
            )
    return HourPlan(
        topic,
        hour,
        ranges,
        own,
        previous,
        options,
        _splits(options, states, ranges),
        # the ranges' kind is the discovery's (or the checkpoints'): no ZooKeeper session more
        AvroDecoder.pinned(options, logical=any(r.logical for r in ranges)),
    )


def discover_known(
    options: SourceOptions,
    known: Iterable[tuple[int, int]],
    wait_s: float = BROKER_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[PartitionState]:
    """discover(), waiting up to `wait_s` while a partition of `known` ((broker id,
    partition), the previous checkpoint's) is on no live broker: without the wait, a broker
    that is restarting while the plan is made has its hour's data moved to a later hour."""
    known = set(known)
    deadline = clock() + wait_s
    while True:
        try:
            states = discover(options)
        except BrokerNotAnsweringError as exc:
            # Registered while it starts (or stops): asked again within the wait, as one
            # not yet registered is; past the wait the error stands.
            if not known or clock() >= deadline:
                raise
            log.info("waiting up to %.0f s: %s", deadline - clock(), exc)
            sleep(1.0)
            continue
        missing = known - {(s.broker_id, s.partition) for s in states}
        if not missing or clock() >= deadline:
            return states
        log.info(
            "waiting up to %.0f s for the brokers of %s (the previous checkpoint's partitions)",
            deadline - clock(),
            ", ".join(f"{b}-{p}" for b, p in sorted(missing)),
        )
        sleep(1.0)


def _check_order(wh: Warehouse, topic: str, hour: str) -> None:
    """Hours commit in order: `hour` follows the topic's last committed one."""
    hours = wh.committed_hours(topic)
    if hours and hours[-1] > hour:
        raise LoadOrderError(
            f"topic {topic!r}: hour {hour} has no checkpoint, but the later hour {hours[-1]} is "
            f"committed; loads commit in hour order, so {hour} cannot be loaded now (a backfill "
            "re-runs committed hours only)"
        )
    if hours and hours[-1] != previous_hour(hour):
        raise LoadOrderError(
            f"topic {topic!r}: the previous hour {previous_hour(hour)} is not committed (the "
            f"last committed hour is {hours[-1]}); load the hours in order, starting with "
            f"{next_hour(hours[-1])}"
        )


def _ranges(
    topic: str, states: list[PartitionState], previous: Checkpoint | None
) -> list[PartitionRange]:
    """Each partition from the previous checkpoint's end to the end it has now."""
    ends = previous.ends() if previous is not None else {}
    logical = previous is not None and previous.logical
    ranges = []
    for s in states:
        if previous is not None:
            _check_kind(topic, s, previous)
        if previous is None:
            start = s.earliest  # a topic's first load starts at what the brokers still have
        else:
            start = ends.get((s.broker_id, s.partition), 0)  # 0: a partition new since
        ranges.append(PartitionRange(topic, s.broker_id, s.partition, start, s.latest, s.logical))
    seen = {(s.broker_id, s.partition) for s in states}
    for (broker_id, partition), end in sorted(ends.items()):
        if (broker_id, partition) not in seen:
            carried = PartitionRange(topic, broker_id, partition, end, end, logical)
            log.warning(
                "topic %s partition %s of the previous checkpoint is on no live broker (or "
                "has no leader): carried forward with no messages; its data comes in a later "
                "hour",
                topic,
                carried.name,
            )
            ranges.append(carried)
    return sorted(ranges, key=lambda r: (r.broker_id, r.partition))


def _check_kind(topic: str, state: PartitionState, cp: Checkpoint) -> None:
    """The brokers' offsets are of the kind the checkpoint holds (byte or logical)."""
    if state.logical != cp.logical:
        kind = "logical offsets (a 0.8-format topic)" if state.logical else "byte offsets"
        raise LoadError(
            f"topic {topic!r} partition {state.name} has {kind} now, but the checkpoint of "
            f"{cp.load_hour} holds {cp.offsets} offsets: was the topic made again in the other "
            "message format? Its checkpoints do not apply to it"
        )


def _splits(
    options: SourceOptions, states: list[PartitionState], ranges: list[PartitionRange]
) -> list[SplitPlan]:
    """The readable ranges, checked against what their brokers still have, in the pieces
    Spark's tasks read, each from where its partition is served."""
    served = {(s.broker_id, s.partition): s for s in states}
    readable = [r for r in ranges if r.end > r.start]
    for r in readable:
        s = served.get((r.broker_id, r.partition))
        if s is not None and s.logical != r.logical:
            raise LoadError(
                f"{r.describe()}: the range holds {'logical' if r.logical else 'byte'} "
                f"offsets, the brokers serve {'logical' if s.logical else 'byte'} ones (the "
                "topic was made again in the other message format?); nothing read"
            )
    missing = [f"{r.topic} {r.name}" for r in readable if (r.broker_id, r.partition) not in served]
    if missing:
        raise DiscoveryError(
            f"assigned partitions not served by any live broker: {', '.join(missing)}"
        )
    wanted = {(r.broker_id, r.partition): r for r in readable}
    checked = plan_ranges(
        [served[key] for key in sorted(wanted)],
        lambda s: wanted[(s.broker_id, s.partition)].start,
        lambda s: wanted[(s.broker_id, s.partition)].end,
        fail_on_data_loss=options.fail_on_data_loss,
    )
    return plan_splits(
        checked,
        max_bytes=options.max_bytes_per_partition,
        min_partitions=options.min_partitions,
        segment_starts=lambda s: segment_starts(
            s, options.zookeeper, credentials=options.credentials
        ),
    )
