"""What the Pipeline page shows, read from the warehouse's files (DESIGN.md §3.6) only.

    <warehouse>/_checkpoints/<topic>/<YYYY-MM-DDTHH>.json     the commit record of a load
    <warehouse>/_audit_results/audit_hour=<YYYY-MM-DDTHH>/     the audit of an hour (Parquet)

An hour's state is derived from those files, never stored (§3.6):

    open      no checkpoint: not loaded (or a load that never committed)
    loaded    a checkpoint, no audit result yet
    audited   an audit result, not every window complete yet, or the grace not yet passed
    closed    every window complete (or without data) and the lateness grace has passed
    failed    an audit result with a window lost or unaccounted

The api-server runs this, so it uses pyarrow's filesystems (file://, hdfs://, s3://), never a
SparkSession; `now` is a parameter so tests decide when the grace has passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

HOUR_FORMAT = "%Y-%m-%dT%H"
FAILED_STATUSES = ("lost", "unaccounted")


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
    state: str
    checkpoint: dict[str, Any] | None = None
    windows: list[WindowAudit] = field(default_factory=list)

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


def parse_hour(hour: str) -> datetime:
    return datetime.strptime(hour, HOUR_FORMAT).replace(tzinfo=UTC)


def recent_hours(now: datetime, count: int) -> list[str]:
    """The `count` whole hours before `now`, newest first."""
    last = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    return [(last - timedelta(hours=i)).strftime(HOUR_FORMAT) for i in range(count)]


def derive_state(
    checkpoint: dict[str, Any] | None,
    windows: list[WindowAudit],
    hour: str,
    now: datetime,
    grace: timedelta,
) -> str:
    if checkpoint is None:
        return "open"
    if not windows:
        return "loaded"
    if any(w.status in FAILED_STATUSES for w in windows):
        return "failed"
    complete = all(w.status in ("complete", "no_data") for w in windows)
    if complete and now >= parse_hour(hour) + timedelta(hours=1) + grace:
        return "closed"
    return "audited"


class WarehouseView:
    def __init__(self, warehouse: str, grace: timedelta) -> None:
        from pyarrow import fs

        self.warehouse = warehouse.rstrip("/")
        self.fs, self.root = fs.FileSystem.from_uri(self.warehouse)
        self.grace = grace

    def read_text(self, path: str) -> str | None:
        try:
            with self.fs.open_input_stream(path) as stream:
                return bytes(stream.read()).decode("utf-8")
        except (FileNotFoundError, OSError):
            return None

    def checkpoint(self, topic: str, hour: str) -> dict[str, Any] | None:
        text = self.read_text(f"{self.root}/_checkpoints/{topic}/{hour}.json")
        if text is None:
            return None
        try:
            loaded: dict[str, Any] = json.loads(text)
        except ValueError:
            return None  # a torn checkpoint is no commit
        return loaded

    def audit(self, hour: str) -> dict[str, list[WindowAudit]]:
        """topic -> its windows in the audit of `hour` (empty when the hour is not audited)."""
        import pyarrow.parquet as pq
        from pyarrow import fs

        directory = f"{self.root}/_audit_results/audit_hour={hour}"
        if self.fs.get_file_info(directory).type != fs.FileType.Directory:
            return {}
        table = pq.read_table(directory, filesystem=self.fs)
        result: dict[str, list[WindowAudit]] = {}
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

    def cell(
        self,
        topic: str,
        hour: str,
        now: datetime,
        audit: dict[str, list[WindowAudit]] | None = None,
    ) -> HourCell:
        checkpoint = self.checkpoint(topic, hour)
        windows = (self.audit(hour) if audit is None else audit).get(topic, [])
        return HourCell(
            topic,
            hour,
            derive_state(checkpoint, windows, hour, now, self.grace),
            checkpoint,
            windows,
        )

    def grid(self, topics: Iterable[str], hours: list[str], now: datetime) -> list[list[HourCell]]:
        """One row per topic, one cell per hour (in the order given)."""
        audits = {hour: self.audit(hour) for hour in hours}
        return [[self.cell(topic, hour, now, audits[hour]) for hour in hours] for topic in topics]


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)  # epoch milliseconds
