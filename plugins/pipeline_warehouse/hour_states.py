"""The state of each topic's hour, derived from the warehouse's files, never stored (docs/design.md §3.6).

    open       no checkpoint: the hour is not loaded (or not committed)
    loaded     a checkpoint, no audit of the hour that covers the topic
    audited    an audit result, but not (yet) closed: some window is not complete (within
               the grace: `incomplete`, events missing, or `pending`, counts missing; after
               it: `lost` or `unaccounted`), the grace has not passed, a load that can hold
               the hour's events has not been read yet, or the hour was reopened
    closed     audited, every window complete (or without data), the lateness grace passed,
               and nothing arrived since

Reopened (an audited or closed hour goes back to `audited`, with `reopened` and the reasons):
a load the audit read was committed again (a backfill), or a load committed after the audit
holds events of the hour (late data; known from that load's index, layout). The next
audit of the hour reads it and the hour can close again.

Reads only JSON files (checkpoints, summaries, indexes), so a web page can call it without Spark
through `filesystem.FsspecFS` (or any object with `list`, `exists` and `read_text`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pipeline_warehouse import layout
from pipeline_warehouse.checkpoint import Warehouse
from pipeline_warehouse.filesystem import WarehouseFS
from pipeline_warehouse.load_index import TopicLoads, can_hold, scan_topic
from pipeline_warehouse.time_format import HOUR_MS, format_hour

STATES = ("open", "loaded", "audited", "closed")
DONE = {"complete", "no_data"}


@dataclass(frozen=True)
class HourState:
    topic: str
    hour: datetime
    state: str
    reopened: bool = False
    reasons: tuple[str, ...] = ()
    statuses: dict[str, int] = field(default_factory=dict)  # windows per status, last audit
    audited_at: str | None = None
    rows: int | None = None  # from the checkpoint

    @property
    def hour_name(self) -> str:
        return format_hour(self.hour)

    def needs_audit(self, now: datetime, grace_ms: int) -> bool:
        """Whether an audit run now would change what this hour's files say."""
        if self.state == "loaded" or self.reopened:
            return True
        if self.state != "audited":
            return False
        past_grace = now >= self.hour + timedelta(milliseconds=HOUR_MS + grace_ms)
        pending = any(r.startswith("pending") for r in self.reasons)
        # windows that wait for late events or counts are settled once the grace has passed
        waiting = self.statuses.get("incomplete", 0) + self.statuses.get("pending", 0)
        return (past_grace and waiting > 0) or pending


def read_summary(fs: WarehouseFS, wh: str, hour: datetime) -> dict[str, Any] | None:
    uri = layout.summary_file(wh, hour)
    if not fs.exists(uri):
        return None
    summary: dict[str, Any] = json.loads(fs.read_text(uri))
    return summary


def hour_states(
    fs: WarehouseFS,
    wh: str,
    topics: Iterable[str],
    hours: Iterable[datetime],
    now: datetime,
    grace_ms: int = 2 * HOUR_MS,
) -> list[HourState]:
    """The state of every (topic, hour); `grace_ms` only for hours never audited."""
    hours = sorted(hours)
    topics = sorted(topics)
    if not hours:
        return []
    since = hours[0] - timedelta(hours=1)
    warehouse = Warehouse(wh, fs)
    scans = {t: scan_topic(warehouse, t, since) for t in [*topics, layout.AUDIT_TOPIC]}
    out = []
    for hour in hours:
        summary = read_summary(fs, wh, hour)
        for topic in topics:
            out.append(_state(topic, hour, summary, scans, now, grace_ms))
    return out


def _state(
    topic: str,
    hour: datetime,
    summary: dict[str, Any] | None,
    scans: dict[str, TopicLoads],
    now: datetime,
    default_grace_ms: int,
) -> HourState:
    load = scans[topic].loads.get(hour)
    if load is None:
        return HourState(topic, hour, "open")
    if summary is None or topic not in summary.get("topics", []):
        return HourState(topic, hour, "loaded", rows=load.rows)
    grace_ms = int(summary.get("grace_ms", default_grace_ms))
    statuses = {k: int(v) for k, v in summary.get("topic_statuses", {}).get(topic, {}).items()}
    reopened: list[str] = []
    pending: list[str] = []
    name = format_hour(hour)
    for source in (topic, layout.AUDIT_TOPIC):
        recorded = {i["load_hour"]: i for i in summary.get("inputs", {}).get(source, [])}
        loads = scans[source]
        for load_name, was in recorded.items():
            current = next(
                (ld for lh, ld in loads.loads.items() if format_hour(lh) == load_name), None
            )
            if current is None:
                reopened.append(
                    f"load {source} {load_name} that the audit read is no longer committed"
                )
            elif (current.committed_at, current.rows_sha256) != (
                was["committed_at"],
                was["rows_sha256"],
            ):
                reopened.append(
                    f"load {source} {load_name} was committed again at {current.committed_at}"
                )
        for load_hour, committed in sorted(loads.loads.items()):
            if format_hour(load_hour) in recorded:
                continue
            index = loads.current_index(load_hour)
            held = index.holds(name, topic) if index is not None else 0
            if held:
                what = "audit counts" if source == layout.AUDIT_TOPIC else "events"
                reopened.append(
                    f"load {source} {format_hour(load_hour)} (committed {committed.committed_at}) holds {held} late {what} of this hour"
                )
            elif index is None and can_hold(load_hour, hour, grace_ms):
                pending.append(
                    f"pending: load {source} {format_hour(load_hour)} may hold events of this hour and is not audited yet"
                )
    past_grace = now >= hour + timedelta(milliseconds=HOUR_MS + grace_ms)
    done = bool(statuses) and set(statuses) <= DONE
    closed = not reopened and not pending and done and past_grace
    return HourState(
        topic,
        hour,
        "closed" if closed else "audited",
        reopened=bool(reopened),
        reasons=tuple(reopened + pending),
        statuses=statuses,
        audited_at=summary.get("audited_at"),
        rows=load.rows,
    )
