"""Which offsets an hour's load reads: the ranges, from the checkpoints and the brokers.

- a committed hour again (a backfill) -> exactly its checkpoint's ranges: the same rows and
  the same rows_sha256;
- otherwise the previous hour must be the topic's last committed one (loads commit in hour
  order), and each partition is read from the previous checkpoint's end (the earliest offset
  still there for a topic's first load; 0 for a partition that appeared since) to the end it
  has now. A partition of the previous checkpoint on no live broker (a replicated one: with
  no leader) is carried forward with no messages: its data comes in a later hour.

A replicated topic's partitions are `(-1, p)` (broker id REPLICATED) in the ranges and the
checkpoints, wherever their leaders are: an hour planned on one leader is read, and later
backfilled, on whichever replica leads then (docs/replication.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pipeline_warehouse.checkpoint import Checkpoint, Warehouse
from pipeline_warehouse.time_format import next_hour, previous_hour
from spark_apps.load.errors import LoadError, LoadOrderError
from spark_apps.source.discovery import PartitionState, discover
from spark_apps.source.options import parse_options
from spark_apps.source.ranges import PartitionRange

log = logging.getLogger("logbroker.hourly_load")


@dataclass(frozen=True)
class HourPlan:
    """What one load of `hour` reads, and the checkpoints it is planned against."""

    topic: str
    hour: str
    ranges: list[PartitionRange]  # every partition, in (broker_id, partition) order
    own: Checkpoint | None  # the hour's checkpoint: a backfill re-reads exactly its ranges
    previous: Checkpoint | None  # the previous hour's, if committed

    @property
    def backfill(self) -> bool:
        return self.own is not None

    @property
    def readable(self) -> list[PartitionRange]:
        """The ranges that hold messages."""
        return [r for r in self.ranges if r.end > r.start]


def plan_hour(wh: Warehouse, zookeeper: str, topic: str, hour: str) -> HourPlan:
    own = wh.checkpoint(topic, hour)
    previous = wh.checkpoint(topic, previous_hour(hour))
    if own is not None:
        ranges = [
            PartitionRange(topic, p.broker_id, p.partition, p.start_offset, p.end_offset)
            for p in own.partitions
        ]
        return HourPlan(topic, hour, ranges, own, previous)
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
    ends = previous.ends() if previous is not None else {}
    states = _discover(zookeeper, topic)
    ranges = []
    for s in states:
        if previous is None:
            start = s.earliest  # a topic's first load starts at what the brokers still have
        else:
            start = ends.get((s.broker_id, s.partition), 0)  # 0: a partition new since
        ranges.append(PartitionRange(topic, s.broker_id, s.partition, start, s.latest))
    seen = {(s.broker_id, s.partition) for s in states}
    for (broker_id, partition), end in sorted(ends.items()):
        if (broker_id, partition) not in seen:
            carried = PartitionRange(topic, broker_id, partition, end, end)
            log.warning(
                "topic %s partition %s of the previous checkpoint is on no live broker (or "
                "has no leader): carried forward with no messages; its data comes in a later "
                "hour",
                topic,
                carried.name,
            )
            ranges.append(carried)
    if not ranges:
        raise LoadError(f"topic {topic!r} has no partitions on any live broker in {zookeeper}")
    ranges.sort(key=lambda r: (r.broker_id, r.partition))
    return HourPlan(topic, hour, ranges, None, previous)


def _discover(zookeeper: str, topic: str) -> list[PartitionState]:
    return discover(parse_options({"zookeeper": zookeeper, "subscribe": topic}))
