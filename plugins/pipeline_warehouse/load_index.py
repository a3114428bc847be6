"""Which event hours each committed load holds: the audit's index of it (docs/design.md §3.6).

    <wh>/_checkpoints/<topic>/<YYYY-MM-DDTHH>.json            a load's checkpoint (checkpoint.py)
    <wh>/_audit_results/_index/<topic>/<YYYY-MM-DDTHH>.json   what the audit learned of it:
                                                              the event hours it holds (LoadIndex)

Windows are by event time, so hour H's events can be in any load: mostly in H's own, late ones
in the loads after it (within the lateness grace: `can_hold`), and (a producer's clock ahead)
in the one before. The audit (spark_apps.audit.inputs) and the hour states
(pipeline_warehouse.hour_states) both read a topic's loads, each with its index, through
`scan_topic`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pipeline_warehouse import layout
from pipeline_warehouse.checkpoint import Checkpoint, Warehouse
from pipeline_warehouse.filesystem import WarehouseFS
from pipeline_warehouse.time_format import HOUR_MS, format_hour, parse_hour


@dataclass(frozen=True)
class LoadIndex:
    """What the audit learned of a load when it read it: the event hours it holds."""

    topic: str
    load_hour: datetime
    committed_at: str
    rows_sha256: str
    event_hours: dict[str, int]
    rows_without_time: int = 0
    # `_audit` only: audited topic -> hour of window_start -> AuditCount events
    by_topic: dict[str, dict[str, int]] = field(default_factory=dict)

    def holds(self, hour_name: str, topic: str | None = None) -> int:
        """Events of `hour_name` in the load (for `_audit`: counts of `topic`, when given)."""
        if topic is not None and self.by_topic:
            return self.by_topic.get(topic, {}).get(hour_name, 0)
        return self.event_hours.get(hour_name, 0)

    def is_current(self, load: Checkpoint) -> bool:
        return (self.committed_at, self.rows_sha256) == (load.committed_at, load.rows_sha256)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "load_hour": format_hour(self.load_hour),
            "committed_at": self.committed_at,
            "rows_sha256": self.rows_sha256,
            "event_hours": dict(sorted(self.event_hours.items())),
            "rows_without_time": self.rows_without_time,
            **({"by_topic": self.by_topic} if self.by_topic else {}),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LoadIndex:
        return cls(
            topic=doc["topic"],
            load_hour=parse_hour(doc["load_hour"]),
            committed_at=doc["committed_at"],
            rows_sha256=doc["rows_sha256"],
            event_hours={str(k): int(v) for k, v in doc["event_hours"].items()},
            rows_without_time=int(doc.get("rows_without_time", 0)),
            by_topic={
                str(t): {str(k): int(v) for k, v in h.items()}
                for t, h in doc.get("by_topic", {}).items()
            },
        )


def read_index(fs: WarehouseFS, wh: str, topic: str, hour: datetime) -> LoadIndex | None:
    uri = layout.index_file(wh, topic, hour)
    if not fs.exists(uri):
        return None
    try:
        return LoadIndex.from_json(json.loads(fs.read_text(uri)))
    except (ValueError, KeyError, TypeError):
        return None  # a damaged index is rebuilt by reading the load again


def can_hold(load_hour: datetime, hour: datetime, grace_ms: int) -> bool:
    """Whether a load of `load_hour` can hold events of `hour` that arrived within the grace."""
    return hour <= load_hour < hour + timedelta(milliseconds=HOUR_MS + grace_ms)


@dataclass
class TopicLoads:
    """A topic's committed loads from some hour on, with their indexes."""

    topic: str
    loads: dict[datetime, Checkpoint]
    indexes: dict[datetime, LoadIndex]

    def current_index(self, hour: datetime) -> LoadIndex | None:
        index = self.indexes.get(hour)
        load = self.loads.get(hour)
        return index if index is not None and load is not None and index.is_current(load) else None


def scan_topic(wh: Warehouse, topic: str, since: datetime) -> TopicLoads:
    """The committed loads of `topic` from `since` on, with their indexes."""
    loads: dict[datetime, Checkpoint] = {}
    indexes: dict[datetime, LoadIndex] = {}
    for name in wh.committed_hours(topic):
        hour = parse_hour(name)
        if hour < since:
            continue
        checkpoint = wh.checkpoint(topic, name)
        if checkpoint is None:
            continue  # deleted since it was listed
        loads[hour] = checkpoint
        index = read_index(wh.fs, wh.uri, topic, hour)
        if index is not None:
            indexes[hour] = index
    return TopicLoads(topic, loads, indexes)
