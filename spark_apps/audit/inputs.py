"""Which committed loads the audit of an hour reads (the layout in pipeline_warehouse.layout).

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

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pipeline_warehouse import layout
from pipeline_warehouse.checkpoint import Checkpoint, Warehouse
from pipeline_warehouse.filesystem import WarehouseFS
from pipeline_warehouse.load_index import TopicLoads, can_hold, scan_topic
from pipeline_warehouse.time_format import format_hour


@dataclass
class Plan:
    """What one audit run reads: per topic the loads, and per audited hour its inputs."""

    hours: list[datetime]
    grace_ms: int
    topics: list[str]  # the event topics audited (results have one row per topic and window)
    scanned: dict[str, TopicLoads]  # every topic read, `_audit` included
    to_read: dict[str, list[Checkpoint]] = field(default_factory=dict)
    # inputs[hour][topic] -> {load hour: read?} (layout: _summary.json "inputs")
    inputs: dict[datetime, dict[str, dict[datetime, bool]]] = field(default_factory=dict)

    def loads_read(self, topic: str) -> list[Checkpoint]:
        return self.to_read.get(topic, [])


def make_plan(
    fs: WarehouseFS,
    wh: str,
    hours: list[datetime],
    grace_ms: int,
    topics: list[str] | None = None,
) -> Plan:
    """Decide which loads to read for auditing `hours` (see the module doc)."""
    warehouse = Warehouse(wh, fs)
    present = warehouse.topics()
    event_topics = [t for t in present if layout.is_event_topic(t)]
    audited = sorted(set(topics)) if topics else event_topics
    since = min(hours) - timedelta(hours=1)  # a clock ahead puts events in the load before
    scanned = {
        t: scan_topic(warehouse, t, since) for t in [*audited, layout.AUDIT_TOPIC] if t in present
    }
    plan = Plan(hours=sorted(hours), grace_ms=grace_ms, topics=audited, scanned=scanned)
    for topic, tl in scanned.items():
        read: dict[datetime, Checkpoint] = {}
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


def topics_without_data(
    plan: Plan, named: list[str], counted: dict[str, dict[str, dict[str, int]]]
) -> list[str]:
    """The topics of `named` with nothing in the hours asked: no committed load that can
    hold their events, and no count in the `_audit` loads read (`counted`:
    AuditEvents.index_by_topic, load hour -> topic -> audit hour -> events, bad ones too).
    A topic whose producers counted events that never loaded is a finding, not in here."""
    hours = {format_hour(h) for h in plan.hours}
    out = []
    for topic in named:
        loaded = any(plan.inputs.get(h, {}).get(topic) for h in plan.hours)
        counts = any(
            n
            for per_topic in counted.values()
            for h, n in per_topic.get(topic, {}).items()
            if h in hours
        )
        if not loaded and not counts:
            out.append(topic)
    return out


def add_found_inputs(
    plan: Plan, topic: str, load_hour: datetime, event_hours: dict[str, int]
) -> None:
    """A load read for one hour held events of another audited hour: it is that hour's input too."""
    for hour in plan.hours:
        if event_hours.get(format_hour(hour), 0) > 0:
            plan.inputs.setdefault(hour, {}).setdefault(topic, {})[load_hour] = True
