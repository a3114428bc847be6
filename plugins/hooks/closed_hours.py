"""Hours that closed since they were last announced: the audit DAG's asset events (docs/design.md §3.7).

    <warehouse>/_audit_results/_announced/<topic>/<YYYY-MM-DDTHH>.json
        {"topic": ..., "load_hour": ..., "fingerprint": "<hex>", "announced_at": "...Z"}

An hour of a topic is announced (an asset event on `logbroker-complete/<topic>`) when its state
is `closed` in the one model of hour states (pipeline_warehouse.hour_states: audited
complete, lateness grace passed, nothing reopened it; the Pipeline page and the audit's report
show the same) and what closed differs from what was announced last: the fingerprint covers
the hour's checkpoint (`committed_at`, `rows_sha256`) and its audit windows' counts, so a
re-audit that changes nothing announces nothing, and late data that reopened and re-closed the
hour announces it again with the new counts. The marker is written after the event is
queued; a task that dies in between announces the hour once more on its next run (at least
once, like the data).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipeline_warehouse import layout
from pipeline_warehouse.overview import HourCell, WarehouseView
from pipeline_warehouse.time_format import format_second


@dataclass(frozen=True)
class ClosedHour:
    topic: str
    hour: str
    fingerprint: str
    counts: dict[str, int]

    @property
    def extra(self) -> dict[str, Any]:
        """What the asset event carries: the hour and its counts."""
        return {"load_hour": self.hour, **self.counts}


def fingerprint(cell: HourCell) -> str:
    checkpoint = cell.checkpoint or {}
    facts = {
        "checkpoint": [checkpoint.get("committed_at"), checkpoint.get("rows_sha256")],
        "windows": [
            [w.window_start.isoformat(), w.produced, w.loaded_unique, w.duplicates, w.missing]
            for w in cell.windows
        ],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def newly_closed(
    view: WarehouseView, topics: Iterable[str], hours: Iterable[str], now: datetime
) -> list[ClosedHour]:
    found = []
    hours, topics = list(hours), list(topics)
    for row in view.grid(topics, hours, now):
        for cell in row:
            if cell.state != "closed":
                continue
            mark = fingerprint(cell)
            previous = view.read_text(layout.announced_file(view.warehouse, cell.topic, cell.hour))
            if previous is not None and json.loads(previous).get("fingerprint") == mark:
                continue
            counts = {
                "rows": cell.rows or 0,
                "produced": cell.produced,
                "loaded_unique": sum(w.loaded_unique for w in cell.windows),
                "duplicates": sum(w.duplicates for w in cell.windows),
                "windows": len(cell.windows),
            }
            found.append(ClosedHour(cell.topic, cell.hour, mark, counts))
    found.sort(key=lambda c: (c.hour, c.topic))
    return found


def mark_announced(view: WarehouseView, closed: Iterable[ClosedHour], now: datetime) -> None:
    for hour in closed:
        record = {
            "topic": hour.topic,
            "load_hour": hour.hour,
            "fingerprint": hour.fingerprint,
            "announced_at": format_second(now),
        }
        view.fs.write_text(
            layout.announced_file(view.warehouse, hour.topic, hour.hour), json.dumps(record)
        )
