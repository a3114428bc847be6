"""The warehouse at a glance: each topic's hours as people and downstream DAGs see them, from
the warehouse's files (docs/design.md §3.6).

What the Pipeline page shows (a grid of topics and hours, one HourCell each) and what the
audit DAG announces as complete (hooks.closed_hours).

An hour's state is the one model of pipeline_warehouse.hour_states (open, loaded, audited,
closed; reopened, with its reasons), the same the audit's reports and the completeness assets
use. Beside it the page shows what the files say of the hour: its checkpoint (ranges, counts,
rows_sha256) and its audit's windows (`_audit_results/audit_hour=H/`, Parquet). An audited
hour with a `lost` or `unaccounted` window is marked `failed` on top of its state; windows that
wait within the grace (`incomplete`, `pending`) are not failures.

The api-server and Airflow tasks run this, so it reads through fsspec (filesystem.FsspecFS:
`file://`, WebHDFS for an `hdfs://` warehouse, `s3://`, ...), never a SparkSession; `now` is a
parameter so tests decide when the grace has passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline_warehouse import layout
from pipeline_warehouse.filesystem import FsspecFS, WarehouseFS
from pipeline_warehouse.hour_states import HourState, hour_states
from pipeline_warehouse.layout import FAILED_STATUSES
from pipeline_warehouse.time_format import parse_hour


@dataclass
class WindowAudit:
    window_start: datetime
    window_end: datetime
    produced: int
    mirrored: int
    loaded_rows: int
    loaded_unique: int
    duplicates: int
    missing: int
    unaccounted: int
    status: str


@dataclass
class HourCell:
    topic: str
    hour: str
    state: str  # hour_states' state: open, loaded, audited, closed
    checkpoint: dict[str, Any] | None = None
    windows: list[WindowAudit] = field(default_factory=list)
    reopened: bool = False
    reasons: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """Audited with a window lost or unaccounted (the audit DAG's run is red)."""
        return any(w.status in FAILED_STATUSES for w in self.windows)

    @property
    def badge(self) -> str:
        """What the page's badge says: the state, or `failed` for a failed audited hour."""
        return "failed" if self.state == "audited" and self.failed else self.state

    @property
    def rows(self) -> int | None:
        return None if self.checkpoint is None else int(self.checkpoint.get("rows", 0))

    @property
    def produced(self) -> int:
        return sum(w.produced for w in self.windows)

    @property
    def missing(self) -> int:
        return sum(w.missing for w in self.windows)

    @property
    def duplicates(self) -> int:
        return sum(w.duplicates for w in self.windows)


class WarehouseView:
    """`warehouse`: the URI Python reads the warehouse at (hooks.pipeline: `warehouse_reader`)."""

    def __init__(self, warehouse: str, grace: timedelta, fs: WarehouseFS | None = None) -> None:
        self.warehouse = warehouse.rstrip("/")
        self.fs: WarehouseFS = fs or FsspecFS()
        self.grace = grace

    def read_text(self, uri: str) -> str | None:
        try:
            return self.fs.read_text(uri)
        except (FileNotFoundError, OSError):
            return None

    def checkpoint(self, topic: str, hour: str) -> dict[str, Any] | None:
        text = self.read_text(layout.checkpoint_file(self.warehouse, topic, hour))
        if text is None:
            return None
        try:
            loaded: dict[str, Any] = json.loads(text)
        except ValueError:
            return None  # a torn checkpoint is no commit
        return loaded

    def audit(self, hour: str) -> dict[str, list[WindowAudit]]:
        """topic -> its windows in the audit of `hour` (empty when the hour is not audited)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        directory = layout.results_dir(self.warehouse, hour)
        tables = []
        for entry in self.fs.list(directory):
            if entry.is_dir or not entry.name.endswith(".parquet") or entry.name[0] in "._":
                continue
            # an hour's audit is a few KB: read whole, through whatever filesystem
            tables.append(pq.read_table(pa.BufferReader(self.fs.read_bytes(entry.uri))))
        result: dict[str, list[WindowAudit]] = {}
        for table in tables:
            for row in table.to_pylist():
                result.setdefault(str(row["topic"]), []).append(
                    WindowAudit(
                        window_start=_as_datetime(row["window_start"]),
                        window_end=_as_datetime(row["window_end"]),
                        produced=int(row["produced"] or 0),
                        mirrored=int(row["mirrored"] or 0),
                        loaded_rows=int(row["loaded_rows"] or 0),
                        loaded_unique=int(row["loaded_unique"] or 0),
                        duplicates=int(row["duplicates"] or 0),
                        missing=int(row["missing"] or 0),
                        unaccounted=int(row["unaccounted"] or 0),
                        status=str(row["status"]),
                    )
                )
        for windows in result.values():
            windows.sort(key=lambda w: w.window_start)
        return result

    def states(
        self, topics: Iterable[str], hours: Iterable[str], now: datetime
    ) -> dict[tuple[str, str], HourState]:
        """(topic, hour) -> the hour's state (pipeline_warehouse.hour_states)."""
        grace_ms = int(self.grace.total_seconds() * 1000)
        found = hour_states(
            self.fs, self.warehouse, list(topics), [parse_hour(h) for h in hours], now, grace_ms
        )
        return {(s.topic, s.hour_name): s for s in found}

    def grid(self, topics: Iterable[str], hours: list[str], now: datetime) -> list[list[HourCell]]:
        """One row per topic, one cell per hour (in the order given)."""
        topics = list(topics)
        states = self.states(topics, hours, now)
        audits = {hour: self.audit(hour) for hour in hours}
        return [
            [self._cell(states[(topic, hour)], audits[hour]) for hour in hours] for topic in topics
        ]

    def cell(self, topic: str, hour: str, now: datetime) -> HourCell:
        state = self.states([topic], [hour], now)[(topic, hour)]
        return self._cell(state, self.audit(hour))

    def _cell(self, state: HourState, audit: dict[str, list[WindowAudit]]) -> HourCell:
        hour = state.hour_name
        return HourCell(
            state.topic,
            hour,
            state.state,
            self.checkpoint(state.topic, hour) if state.state != "open" else None,
            audit.get(state.topic, []) if state.state in ("audited", "closed") else [],
            state.reopened,
            state.reasons,
        )


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)  # epoch milliseconds
