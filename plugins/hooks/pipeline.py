"""The pipeline the DAGs run: which live clusters, the analysis cluster, topics, warehouse.

One JSON file (`LOGBROKER_PIPELINE=<file>`; in a checkout, include/pipeline/pipeline.json by
default), read when a DAG file is parsed: it is small and has no imports, so parsing stays
cheap. Clusters and Spark are named by Airflow connection ids, so credentials and hosts live
where Airflow users keep them. Which file runs where (include/pipeline/README.md):

    include/pipeline/pipeline.json   a checkout's default, and the example: the warehouse in
                                     the checkout's var/warehouse
    include/compose/pipeline.json    docker-compose.yaml's (its LOGBROKER_PIPELINE): the same
                                     keys, the warehouse on HDFS, read through WebHDFS
    var/up/, var/demo/pipeline.json  written by `make up` and `make demo` for their stacks

An installed wheel has none (include/pipeline/ is a checkout's), so a deployment names its
own. A relative `warehouse` or `reports` path is taken from the file's directory; a key the
loader does not read (each file's `_comment`) is ignored.

Every topic is checked as the load and the audit check it (pipeline_warehouse.topics) when
the file is read: a bad name fails the DAG file's import with one line naming the file.
`warehouse` is the URI Spark writes (any Hadoop filesystem); `warehouse_reader` (optional)
the URI the Airflow pages and hooks read the same files at, with fsspec: by default the same,
with `hdfs://` read through WebHDFS (pipeline_warehouse.filesystem.python_uri).
`topics_per_load` (optional, default 30): how many topics one load task loads, one after the
other in one Spark application (one JVM); an hour's topics are split into that many or fewer
a task, in batches of even size (docs/airflow.md, "Many topics").
`task_retry_delay` (optional, seconds, as Airflow's `[core] default_task_retry_delay`): the
first retry's delay of every task of the three DAGs (doubling after, with Airflow's jitter);
unset, each DAG keeps its own (the mirror 30 s, the load and the audit 60 s). The chaos run
sets a few seconds: its faults make tasks retry, and a minute's wait tests nothing.
`mirror_target_conn_id` and `audit_conn_id` (optional, default `analysis_conn_id`): the
`logbroker` connections the mirror writes into the analysis cluster with, and the audit
DAG's reads of it: the same cluster under other users, each with only its own ACLs
(docs/security.md, "Credentials in the pipeline"). The loads read with `analysis_conn_id`;
the mirror's source and the closed-hour sensor with each live cluster's `conn_id`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import Any

from logbroker.include_files import include_path
from logbroker.protocol.topics import AUDIT_TOPIC
from pipeline_warehouse.filesystem import as_uri, python_uri
from pipeline_warehouse.topics import check_topics

# A JVM, a Spark session and an executor's first job cost far more than one topic's load
# of an hour (docs/performance.md, "Many topics an hour"): an hour's topics share
# applications. 30: 50 topics and _audit in two tasks, one on each of the two workers.
DEFAULT_TOPICS_PER_LOAD = 30
DEFAULT_FILE = include_path("pipeline", "pipeline.json")  # a checkout's only


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
    # Whether the scheduler creates a run for every hour since the hourly load's last one
    # (a stack that was down catches up: `make up` sets it, with start_date its first hour).
    # Off by default: with an old start_date it would create every hour since (docs/design.md
    # §7 P5); history then comes through backfills.
    catchup: bool = False
    # The URIs Python reads the warehouse and the reports at (None: derived, see the doc).
    warehouse_python: str | None = None
    reports_python: str | None = None
    topics_per_load: int = DEFAULT_TOPICS_PER_LOAD
    task_retry_delay_s: int | None = None
    # The analysis cluster under other users ("": analysis_conn_id, filled in below)
    mirror_target_conn_id: str = ""
    audit_conn_id: str = ""

    def __post_init__(self) -> None:
        for name in ("mirror_target_conn_id", "audit_conn_id"):
            if not getattr(self, name):
                object.__setattr__(self, name, self.analysis_conn_id)  # frozen

    def retry_delay(self, default: timedelta) -> timedelta:
        """A DAG's first retry delay: `task_retry_delay` when the file sets one."""
        if self.task_retry_delay_s is None:
            return default
        return timedelta(seconds=self.task_retry_delay_s)

    @property
    def warehouse_reader(self) -> str:
        return self.warehouse_python or python_uri(self.warehouse)

    @property
    def reports_reader(self) -> str:
        return self.reports_python or python_uri(self.reports)

    @property
    def loaded_topics(self) -> tuple[str, ...]:
        """What every hour loads: the event topics and the producers' counts."""
        return (*self.topics, AUDIT_TOPIC)

    @property
    def load_batches(self) -> list[list[str]]:
        """The loaded topics split into the fewest batches of at most `topics_per_load`,
        of sizes that differ by one at most (51 topics by 25: 17, 17, 17), in order."""
        topics = self.loaded_topics
        count = -(-len(topics) // self.topics_per_load)
        size, extra = divmod(len(topics), count)
        batches, start = [], 0
        for i in range(count):
            end = start + size + (i < extra)
            batches.append(list(topics[start:end]))
            start = end
        return batches

    @property
    def mirror_whitelist(self) -> str:
        return "|".join(re.escape(t) for t in self.loaded_topics)

    @property
    def spark_jobs(self) -> Path:
        """The Spark applications' entry points (installed_jobs())."""
        return installed_jobs()


def installed_jobs() -> Path:
    """spark_apps/jobs/ of the installed project, the files spark-submit runs (hourly_load.py,
    audit.py): the checkout's with `pip install -e .`, site-packages' from a wheel."""
    # files() of a regular package on disk is its directory (a pathlib.Path)
    return Path(str(files("spark_apps.jobs")))


def load_pipeline(path: str | os.PathLike[str] | None = None) -> Pipeline:
    source = Path(path or os.environ.get("LOGBROKER_PIPELINE") or DEFAULT_FILE)
    if source == DEFAULT_FILE and not source.exists():
        raise ValueError(
            f"pipeline settings: no LOGBROKER_PIPELINE, and this installation has no {source}"
            " (a checkout's): set LOGBROKER_PIPELINE to the pipeline's settings file"
        )
    try:
        raw: dict[str, Any] = json.loads(source.read_text())
        warehouse = as_uri(raw["warehouse"], source.parent.absolute())
        return Pipeline(
            live_clusters=tuple(LiveCluster(c["name"], c["conn_id"]) for c in raw["live_clusters"]),
            analysis_conn_id=raw["analysis_conn_id"],
            spark_conn_id=raw.get("spark_conn_id", "logbroker_spark_default"),
            topics=tuple(check_topics(raw["topics"])),
            warehouse=warehouse,
            reports=as_uri(raw["reports"], source.parent.absolute())
            if raw.get("reports")
            else f"{warehouse}/_reports",
            grace_hours=int(raw.get("grace_hours", 2)),
            max_bad_fraction=float(raw.get("max_bad_fraction", 0.01)),
            parquet_writer=_choice(raw.get("parquet_writer", "auto"), ("auto", "arrow", "spark")),
            start_date=_instant(raw.get("start_date") or "2026-01-01T00:00:00Z"),
            end_date=_instant(raw["end_date"]) if raw.get("end_date") else None,
            catchup=_flag(raw.get("catchup", False), "catchup"),
            warehouse_python=raw.get("warehouse_reader"),
            reports_python=raw.get("reports_reader"),
            topics_per_load=_positive(raw.get("topics_per_load", DEFAULT_TOPICS_PER_LOAD)),
            task_retry_delay_s=_positive(raw["task_retry_delay"], "task_retry_delay", "seconds")
            if raw.get("task_retry_delay") is not None
            else None,
            mirror_target_conn_id=_conn_id(raw, "mirror_target_conn_id"),
            audit_conn_id=_conn_id(raw, "audit_conn_id"),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"pipeline settings {source}: {type(exc).__name__}: {exc}") from exc


def _conn_id(raw: dict[str, Any], key: str) -> str:
    """An optional connection id ("" when absent: analysis_conn_id's)."""
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key} {value!r}: an Airflow connection id")
    return value


def _choice(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"parquet_writer {value!r}: one of {', '.join(allowed)}")
    return value


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key} {value!r}: true or false")
    return value


def _positive(value: object, key: str = "topics_per_load", unit: str = "topics") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} {value!r}: a whole number of {unit}, at least 1")
    return value


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
