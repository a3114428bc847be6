"""The pipeline the DAGs run: which live clusters, the analysis cluster, topics, warehouse.

One JSON file (default include/pipeline/pipeline.json; `LOGBROKER_PIPELINE=<file>` picks
another), read when a DAG file is parsed: it is small and has no imports, so parsing stays
cheap. Clusters and Spark are named by Airflow connection ids, so credentials and hosts live
where Airflow users keep them. The demo and `make up` write their own file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = REPO_ROOT / "include" / "pipeline" / "pipeline.json"
AUDIT_TOPIC = "_audit"


@dataclass(frozen=True)
class LiveCluster:
    name: str
    conn_id: str

    @property
    def mirror_group(self) -> str:
        """The mirror's consumer group on this live cluster (its committed offsets say what
        the analysis cluster already holds)."""
        return f"mirror-{self.name}"


@dataclass(frozen=True)
class Pipeline:
    live_clusters: tuple[LiveCluster, ...]
    analysis_conn_id: str
    spark_conn_id: str
    topics: tuple[str, ...]
    warehouse: str  # a Hadoop filesystem URI
    reports: str  # where the audit's Data Docs go
    grace_hours: int
    max_bad_fraction: float
    # hourly_load.py --parquet-writer: auto (Arrow's writer on file://), arrow or spark
    parquet_writer: str = "auto"
    # The hours the hourly load schedules: from start_date; until end_date when one is set
    # (the demo simulates finished hours and must not load the clock's current one).
    start_date: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    end_date: datetime | None = None

    @property
    def loaded_topics(self) -> tuple[str, ...]:
        """What every hour loads: the event topics and the producers' counts."""
        return (*self.topics, AUDIT_TOPIC)

    @property
    def mirror_whitelist(self) -> str:
        return "|".join(re.escape(t) for t in self.loaded_topics)

    @property
    def spark_jobs(self) -> Path:
        """The Spark applications' entry points (spark_apps/jobs/)."""
        return REPO_ROOT / "spark_apps" / "jobs"


def as_uri(location: str, root: Path = REPO_ROOT) -> str:
    """A warehouse location as a URI: URIs pass, paths become file:// URIs (relative to root)."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location):
        return location
    path = Path(location)
    return (path if path.is_absolute() else root / path).resolve().as_uri()


def load_pipeline(path: str | os.PathLike[str] | None = None) -> Pipeline:
    source = Path(path or os.environ.get("LOGBROKER_PIPELINE") or DEFAULT_FILE)
    try:
        raw: dict[str, Any] = json.loads(source.read_text())
        warehouse = as_uri(raw["warehouse"])
        return Pipeline(
            live_clusters=tuple(LiveCluster(c["name"], c["conn_id"]) for c in raw["live_clusters"]),
            analysis_conn_id=raw["analysis_conn_id"],
            spark_conn_id=raw.get("spark_conn_id", "logbroker_spark_default"),
            topics=tuple(raw["topics"]),
            warehouse=warehouse,
            reports=as_uri(raw["reports"]) if raw.get("reports") else f"{warehouse}/_reports",
            grace_hours=int(raw.get("grace_hours", 2)),
            max_bad_fraction=float(raw.get("max_bad_fraction", 0.01)),
            parquet_writer=_choice(raw.get("parquet_writer", "auto"), ("auto", "arrow", "spark")),
            start_date=_instant(raw.get("start_date") or "2026-01-01T00:00:00Z"),
            end_date=_instant(raw["end_date"]) if raw.get("end_date") else None,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"pipeline settings {source}: {type(exc).__name__}: {exc}") from exc


def _choice(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"parquet_writer {value!r}: one of {', '.join(allowed)}")
    return value


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
