"""Where everything lives in the warehouse: the one place that names its paths (docs/design.md §3.6).

Written by the hourly load (an hour without its checkpoint is not committed, never read):

    <wh>/<topic>/load_hour=<YYYY-MM-DDTHH>/            the hour's rows (Parquet), one per event,
        part-*.parquet, _load_summary.json             and what they hold (load_summary)
    <wh>/_checkpoints/<topic>/<YYYY-MM-DDTHH>.json     the commit record of one load: its ranges,
                                                       counts, rows_sha256, and the data files
                                                       of the hour's current version
    <wh>/_errors/<topic>/load_hour=<YYYY-MM-DDTHH>/    its bad records (position and reason)
    <wh>/_staging/<topic>/<YYYY-MM-DDTHH>.<run id>/    a load in progress; never read
    <wh>/_audit/load_hour=.../                         the `_audit` topic: AuditCount events

Written by the audit:

    <wh>/_audit_results/audit_hour=<YYYY-MM-DDTHH>/  one directory per audited hour, replaced
        part-*.parquet                               whole on re-audit: one row per topic and
                                                     10-minute window (RESULT_COLUMNS)
        _summary.json                                the run's facts about that hour (below)
    <wh>/_audit_results/_index/<topic>/<YYYY-MM-DDTHH>.json
                                                     which event hours a load holds (below)
    <wh>/_audit_results/_load_summaries/<topic>/<YYYY-MM-DDTHH>.json
                                                     a load's summary (load_summary), for a
                                                     load whose directory has none current:
                                                     counted from its rows by an audit
    <wh>/_audit_results/_announced/<topic>/<YYYY-MM-DDTHH>.json
                                                     the last closed state of an hour that the
                                                     audit DAG announced as an asset event
    <wh>/_reports/                                   default --reports: Data Docs, the GX
                                                     project, one page per audited hour

Topic names are checked before they become paths (topics.py): no name can be '.', '..',
contain '/', or start with '_' (but `_audit`), so no topic's directory is one of these.

_summary.json (one per audited hour; the hour states are derived from these, never stored):

    {"audit_hour": "2026-11-22T10", "audited_at": "...Z", "now": "...Z", "grace_ms": 7200000,
     "window_ms": 600000, "topics": ["page_views", ...],
     "inputs": {"page_views": [{"load_hour": "2026-11-22T10", "committed_at": "...Z",
                                "rows_sha256": "...", "read": true}, ...], "_audit": [...]},
     "topic_statuses": {"page_views": {"complete": 6}, ...},
     "uncounted_producers": [{"topic": "page_views", "window_start": "2026-11-22T10:10:00Z",
                              "status": "unaccounted", "unaccounted": 8,
                              "producer_ids": ["web-7", ...], "more": 0}, ...],
     "bad_audit_events": 0, "bad_audit_reasons": {"negative count": 1, ...},
     "bad_audit_examples": [{"load_hour": ..., "broker_id": ..., "partition": ...,
                             "offset": ..., "index": ..., "reason": ...}, ...],
     "topic_hours": [{"topic": ..., "load_hour": ..., "rows": ..., ...}, ...]}

`uncounted_producers` names, for each `unaccounted` or `pending` window, the producers whose
events it holds and that published no `producer` count for it (at most 10, the most events
first; `more`: how many others): spark_apps.audit.results.uncounted_producers.

`inputs` lists every committed load the audit considered for the hour, read or skipped because
its index showed none of the hour's events: a later change of any of them (a backfill, a new
load holding events of the hour) reopens the hour.

_index/<topic>/<hour>.json (one per load the audit has read; current while its checkpoint's
`committed_at` and `rows_sha256` are the ones it names):

    {"topic": "page_views", "load_hour": "2026-11-22T11", "committed_at": "...Z",
     "rows_sha256": "...", "event_hours": {"2026-11-22T10": 3, "2026-11-22T11": 388},
     "rows_without_time": 0}

For `_audit`, `event_hours` counts AuditCount events by the hour of their `window_start` (the
load's own hour for an event without a plausible window: spark_apps.audit.audit_counts), and
`by_topic` the same per audited topic ({"page_views": {"2026-11-22T10": 2}}; only names the
pipeline takes as topics), so that a late count reopens only its own topic's hour.
"""

from __future__ import annotations

from datetime import datetime

from logbroker.protocol.topics import AUDIT_TOPIC as AUDIT_TOPIC
from pipeline_warehouse.filesystem import join
from pipeline_warehouse.time_format import hour_name

CHECKPOINTS = "_checkpoints"
ERRORS = "_errors"
STAGING = "_staging"
AUDIT_RESULTS = "_audit_results"
INDEX = "_index"
LOAD_SUMMARIES = "_load_summaries"
ANNOUNCED = "_announced"
REPORTS = "_reports"
SUMMARY_FILE = "_summary.json"
HOUR_DIR_PREFIX = "load_hour="

# The result table, in this order (issue 12); windows as UTC timestamps.
RESULT_COLUMNS = (
    "topic",
    "window_start",
    "window_end",
    "produced",
    "mirrored",
    "loaded_rows",
    "loaded_unique",
    "duplicates",
    "missing",
    "unaccounted",
    "status",
    "audited_at",
)
STATUSES = ("complete", "incomplete", "pending", "lost", "unaccounted", "no_data")
# What fails an hour (the Pipeline page's `failed`, the audit DAG's --fail-on, the report), and
# what only waits within the lateness grace: events (incomplete) or counts (pending) may come.
FAILED_STATUSES = ("lost", "unaccounted")
WAITING_STATUSES = ("incomplete", "pending")


def checkpoints_dir(wh: str, topic: str) -> str:
    return join(wh, CHECKPOINTS, topic)


def checkpoint_file(wh: str, topic: str, hour: datetime | str) -> str:
    return join(wh, CHECKPOINTS, topic, f"{hour_name(hour)}.json")


def load_dir(wh: str, topic: str, hour: datetime | str) -> str:
    return join(wh, topic, HOUR_DIR_PREFIX + hour_name(hour))


def errors_dir(wh: str, topic: str, hour: datetime | str) -> str:
    return join(wh, ERRORS, topic, HOUR_DIR_PREFIX + hour_name(hour))


def staging_root(wh: str, topic: str) -> str:
    return join(wh, STAGING, topic)


def announced_file(wh: str, topic: str, hour: datetime | str) -> str:
    return join(wh, AUDIT_RESULTS, ANNOUNCED, topic, f"{hour_name(hour)}.json")


def results_root(wh: str) -> str:
    return join(wh, AUDIT_RESULTS)


def results_dir(wh: str, hour: datetime | str) -> str:
    return join(wh, AUDIT_RESULTS, f"audit_hour={hour_name(hour)}")


def summary_file(wh: str, hour: datetime | str) -> str:
    return join(results_dir(wh, hour), SUMMARY_FILE)


def index_file(wh: str, topic: str, hour: datetime | str) -> str:
    return join(wh, AUDIT_RESULTS, INDEX, topic, f"{hour_name(hour)}.json")


def load_summary_file(wh: str, topic: str, hour: datetime | str) -> str:
    return join(wh, AUDIT_RESULTS, LOAD_SUMMARIES, topic, f"{hour_name(hour)}.json")


def default_reports(wh: str) -> str:
    return join(wh, REPORTS)


def is_event_topic(topic: str) -> bool:
    """Topics of events the audit reconciles: not `_audit`, not the warehouse's own dirs."""
    return not topic.startswith(("_", "."))
