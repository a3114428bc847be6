"""Which committed loads the audit of an hour reads (DESIGN §3.6; the layout in audit_layout).

Windows are by event time, so hour H's events can be in any load: mostly in H's own, late ones
in the loads after it, and (a producer's clock ahead) in the one before. The loads that *can*
hold H's events are those that started before H's end plus the lateness grace; each load's
index (written by the audit that first read it) says which event hours it does hold. So the
audit of H considers:

- every committed load L with H <= L and L's start < H's end + grace, and
- every committed load, earlier or later, whose current index names H,

and reads those of them whose index is missing or stale (not read yet, or re-committed since) or
names H. A load that committed after the grace, with late events of H, is found through its
index once the audit of its own hour has read it: H's summary does not list it among its
inputs, so H is reopened (hour_states) and its next audit reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from spark_apps.warehouse import layout
from spark_apps.warehouse.filesystem import WarehouseFS
from spark_apps.warehouse.hours import HOUR_MS, format_hour, parse_hour


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

    @property
    def hour_name(self) -> str:
        return format_hour(self.load_hour)

    def data_uri(self, wh: str) -> str:
        return layout.load_dir(wh, self.topic, self.load_hour)

    def errors_uri(self, wh: str) -> str:
        return layout.errors_dir(wh, self.topic, self.load_hour)


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


def parse_checkpoint(text: str, where: str) -> CommittedLoad:
    """A checkpoint file's JSON -> CommittedLoad; ValueError names the file and the field."""
    try:
        doc = json.loads(text)
        return CommittedLoad(
            topic=str(doc["topic"]),
            load_hour=parse_hour(str(doc["load_hour"])),
            rows=int(doc["rows"]),
            bad_records=int(doc.get("bad_records", 0)),
            duplicates_dropped=int(doc.get("duplicates_dropped", 0)),
            committed_at=str(doc["committed_at"]),
            rows_sha256=str(doc["rows_sha256"]),
        )
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"checkpoint {where} is not a valid checkpoint: {err!r}") from err


def warehouse_topics(fs: WarehouseFS, wh: str) -> list[str]:
    """Every topic with at least one committed load (a directory under _checkpoints/)."""
    return [e.name for e in fs.list(layout.join(wh, layout.CHECKPOINTS)) if e.is_dir]


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


@dataclass
class Plan:
    """What one audit run reads: per topic the loads, and per audited hour its inputs."""

    hours: list[datetime]
    grace_ms: int
    topics: list[str]  # the event topics audited (results have one row per topic and window)
    scanned: dict[str, TopicLoads]  # every topic read, `_audit` included
    to_read: dict[str, list[CommittedLoad]] = field(default_factory=dict)
    # inputs[hour][topic] -> {load hour: read?} (audit_layout: _summary.json "inputs")
    inputs: dict[datetime, dict[str, dict[datetime, bool]]] = field(default_factory=dict)

    def loads_read(self, topic: str) -> list[CommittedLoad]:
        return self.to_read.get(topic, [])


def make_plan(
    fs: WarehouseFS,
    wh: str,
    hours: list[datetime],
    grace_ms: int,
    topics: list[str] | None = None,
) -> Plan:
    """Decide which loads to read for auditing `hours` (see the module doc)."""
    present = warehouse_topics(fs, wh)
    event_topics = [t for t in present if layout.is_event_topic(t)]
    audited = sorted(set(topics)) if topics else event_topics
    since = min(hours) - timedelta(hours=1)  # a clock ahead puts events in the load before
    scanned = {
        t: scan_topic(fs, wh, t, since) for t in [*audited, layout.AUDIT_TOPIC] if t in present
    }
    plan = Plan(hours=sorted(hours), grace_ms=grace_ms, topics=audited, scanned=scanned)
    for topic, tl in scanned.items():
        read: dict[datetime, CommittedLoad] = {}
        for hour in plan.hours:
            considered: dict[datetime, bool] = {}
            name = format_hour(hour)
            for load_hour, load in tl.loads.items():
                index = tl.current_index(load_hour)
                named = index is not None and index.event_hours.get(name, 0) > 0
                if not (can_hold(load_hour, hour, grace_ms) or named):
                    continue
                must_read = index is None or named or load_hour == hour  # its own: profiled
                considered[load_hour] = must_read
                if must_read:
                    read[load_hour] = load
            plan.inputs.setdefault(hour, {})[topic] = considered
        plan.to_read[topic] = [read[h] for h in sorted(read)]
    return plan


def add_found_inputs(
    plan: Plan, topic: str, load_hour: datetime, event_hours: dict[str, int]
) -> None:
    """A load read for one hour held events of another audited hour: it is that hour's input too."""
    for hour in plan.hours:
        if event_hours.get(format_hour(hour), 0) > 0:
            plan.inputs.setdefault(hour, {}).setdefault(topic, {})[load_hour] = True
