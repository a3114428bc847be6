"""A topic's committed loads as the warehouse's files record them (DESIGN: docs/design.md §3.6).

    <wh>/_checkpoints/<topic>/<YYYY-MM-DDTHH>.json            a load's checkpoint (CommittedLoad)
    <wh>/_audit_results/_index/<topic>/<YYYY-MM-DDTHH>.json   what the audit learned of it:
                                                              the event hours it holds (LoadIndex)

Windows are by event time, so hour H's events can be in any load: mostly in H's own, late ones
in the loads after it (within the lateness grace: `can_hold`), and (a producer's clock ahead)
in the one before. The audit (spark_apps.audit.inputs) and the hour states
(pipeline_warehouse.hour_states) both read the loads through `scan_topic`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pipeline_warehouse import layout
from pipeline_warehouse.checkpoint import Checkpoint
from pipeline_warehouse.filesystem import WarehouseFS, join
from pipeline_warehouse.hours import HOUR_MS, format_hour, parse_hour


@dataclass(frozen=True)
class CommittedLoad:
    """One committed load: a topic's hour with its checkpoint (the fields the audit uses)."""

    topic: str
    load_hour: datetime
    rows: int
    bad_records: int
    duplicates_dropped: int
    committed_at: str
    rows_sha256: str
    version: str | None = None  # None: a checkpoint from before versions (checkpoint.py)
    files: tuple[str, ...] | None = None  # the current version's data files
    error_files: tuple[str, ...] | None = None

    @property
    def hour_name(self) -> str:
        return format_hour(self.load_hour)

    def data_dir(self, wh: str) -> str:
        return layout.load_dir(wh, self.topic, self.load_hour)

    def data_uris(self, wh: str) -> list[str]:
        """What to read for the load's rows: its version's files (or its whole directory)."""
        if self.files is None:
            return [self.data_dir(wh)]
        return [join(self.data_dir(wh), name) for name in self.files]

    def errors_uris(self, wh: str) -> list[str]:
        """What to read for its bad records ([] when it has none on record)."""
        where = layout.errors_dir(wh, self.topic, self.load_hour)
        if self.error_files is None:
            return [where] if self.bad_records else []
        return [join(where, name) for name in self.error_files]


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

    def is_current(self, load: CommittedLoad) -> bool:
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


def parse_checkpoint(text: str | bytes, where: str) -> CommittedLoad:
    """A checkpoint file's JSON -> CommittedLoad; ValueError names the file and the field."""
    cp = Checkpoint.from_json(text, where)
    return CommittedLoad(
        topic=cp.topic,
        load_hour=parse_hour(cp.load_hour),
        rows=cp.rows,
        bad_records=cp.bad_records,
        duplicates_dropped=cp.duplicates_dropped,
        committed_at=cp.committed_at,
        rows_sha256=cp.rows_sha256,
        version=cp.version,
        files=cp.files,
        error_files=cp.error_files,
    )


def warehouse_topics(fs: WarehouseFS, wh: str) -> list[str]:
    """Every topic with at least one committed load (a directory under _checkpoints/)."""
    return [e.name for e in fs.list(join(wh, layout.CHECKPOINTS)) if e.is_dir]


def committed_hours(fs: WarehouseFS, wh: str, topic: str) -> list[datetime]:
    """The hours of `topic` that have a checkpoint, in order (no file is read)."""
    hours = []
    for entry in fs.list(layout.checkpoints_dir(wh, topic)):
        stem, dot, ext = entry.name.rpartition(".")
        if dot and ext == "json" and not entry.is_dir:
            try:
                hours.append(parse_hour(stem))
            except ValueError:
                continue  # not a checkpoint (an editor's backup, a temporary file)
    return sorted(hours)


def read_checkpoint(fs: WarehouseFS, wh: str, topic: str, hour: datetime) -> CommittedLoad:
    uri = layout.checkpoint_file(wh, topic, hour)
    return parse_checkpoint(fs.read_text(uri), uri)


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
    loads: dict[datetime, CommittedLoad]
    indexes: dict[datetime, LoadIndex]

    def current_index(self, hour: datetime) -> LoadIndex | None:
        index = self.indexes.get(hour)
        load = self.loads.get(hour)
        return index if index is not None and load is not None and index.is_current(load) else None


def scan_topic(fs: WarehouseFS, wh: str, topic: str, since: datetime) -> TopicLoads:
    """The committed loads of `topic` from `since` on, with their indexes."""
    loads: dict[datetime, CommittedLoad] = {}
    indexes: dict[datetime, LoadIndex] = {}
    for hour in committed_hours(fs, wh, topic):
        if hour < since:
            continue
        loads[hour] = read_checkpoint(fs, wh, topic, hour)
        index = read_index(fs, wh, topic, hour)
        if index is not None:
            indexes[hour] = index
    return TopicLoads(topic, loads, indexes)
