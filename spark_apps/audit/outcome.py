"""What an audit run is asked (AuditOptions) and what it found (AuditOutcome).

Shared by the run (spark_apps.audit.run) and the parts that read its outcome after it
(quality, report), so that those import this and not the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipeline_warehouse.time_format import HOUR_MS
from pipeline_warehouse.topics import check_topics
from spark_apps.audit.inputs import Plan

if TYPE_CHECKING:
    import pandas as pd


class NothingToAuditError(ValueError):
    """A topic named in AuditOptions.topics has nothing in the hours asked (a typo, most
    likely): refused before anything is written, as its rows would replace the hours' results."""


@dataclass
class AuditOptions:
    warehouse: str
    hours: list[datetime]
    now: datetime
    grace_ms: int = 2 * HOUR_MS
    topics: list[str] | None = None
    reports: str | None = None  # default <warehouse>/_reports
    quality: bool = True  # run the GX checkpoint and build Data Docs and the report pages
    schema_registry: str | None = None
    max_bad_fraction: float = 0.01
    lateness_ms: int = 24 * HOUR_MS  # plausible event times of a load: from its start - this
    skew_ms: int = 600_000  # ... to its end + this

    def __post_init__(self) -> None:
        """The topics' names are checked before the warehouse is touched (topics.py)."""
        if self.topics is not None:
            self.topics = check_topics(self.topics)


@dataclass
class AuditOutcome:
    results: pd.DataFrame  # every audited hour's rows (+ audit_hour, window)
    summaries: dict[str, dict[str, Any]]  # audit hour -> its _summary.json
    profiles: pd.DataFrame  # the loaded topic hours' profiles
    plan: Plan
    quality: Any = None  # quality.QualityOutcome when quality ran
    report_pages: dict[str, str] = field(default_factory=dict)  # audit hour -> page URI
    timings: dict[str, float] = field(default_factory=dict)  # step -> seconds
    loads_counted_from_rows: int = 0  # loads without a current summary (reconcile)
    contested_pairs: int = 0  # (window, producer) pairs whose rows were read to deduplicate

    def status_counts(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.results["status"].value_counts().items()}

    def bad_audit_events(self) -> int:
        return sum(s["bad_audit_events"] for s in self.summaries.values())

    def totals(self, column: str) -> int:
        return int(self.results[column].sum())
