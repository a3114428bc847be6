"""
### logbroker_audit

Runs when every topic of an hour is loaded (scheduled on the hourly load's assets):
reconciles what producers said they sent (the `_audit` topic) with what the mirror
forwarded and what the warehouse holds, per topic and 10-minute window, and runs the
Great Expectations checkpoint for those hours (`spark_apps/jobs/audit.py`).

Hours audited: the hours just loaded and the hours before them within the lateness grace,
because events can arrive in later loads: a late event changes an earlier hour's result,
and an hour **closes** once its audit is complete and its grace has passed.

The **audit** task turns red when a window is `lost` (missing events after the grace) or
`unaccounted` (events no producer counted, after the grace); its failure callback logs a
one-line summary, and the hour's Data Docs page (Pipeline page -> the hour) says which windows
and by how much. Within the grace a window waiting for its events (`incomplete`) or its
producers' counts (`pending`: the hour's last window's are published after it ends and land
in the next hour's `_audit` load) is not a failure; an audit after the grace settles it.

**announce_closed** emits the asset `logbroker-complete/<topic>` for every hour of a topic
that closed (complete, grace passed) since it was last announced, with the hour and its
counts in the event's extra: a downstream DAG schedules on complete data, not on the clock.
After a red audit it does not run (the run stays red); topics that did close are announced
by the next audit that covers their hour.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import AssetAll, dag, task

from hooks.assets import COMPLETE_ALIAS, complete_asset, warehouse_asset
from hooks.pipeline import load_pipeline
from hooks.spark_submit import SparkAppOperator

PIPELINE = load_pipeline()
log = logging.getLogger(__name__)


def summarize_failure(context: Any) -> None:
    """One line in the task log: which hours failed and what the audit found."""
    hours = context["ti"].xcom_pull(task_ids="hours_to_audit")
    log.error("audit of %s failed: %s", hours, context.get("exception"))


@dag(
    dag_id="logbroker_audit",
    schedule=AssetAll(*(warehouse_asset(PIPELINE, t) for t in PIPELINE.loaded_topics)),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["logbroker", "audit", "data-quality"],
    default_args={
        "owner": "data-platform",
        "retries": 1,
        "retry_delay": PIPELINE.retry_delay(timedelta(minutes=1)),
        "retry_exponential_backoff": True,
    },
)
def logbroker_audit() -> None:
    @task
    def hours_to_audit(triggering_asset_events: Any = None) -> str:
        """FROM..TO: the loaded hours, and the hours before them within the grace."""
        from pipeline_warehouse.time_format import format_hour, parse_hour

        loaded = sorted(
            event.extra["load_hour"]
            for events in triggering_asset_events.values()
            for event in events
            if "load_hour" in (event.extra or {})
        )
        if not loaded:
            raise ValueError("no load_hour in the triggering asset events")
        first = parse_hour(loaded[0]) - timedelta(hours=PIPELINE.grace_hours)
        return f"{format_hour(first)}..{loaded[-1]}"

    hours = hours_to_audit()
    audit = SparkAppOperator(
        task_id="audit",
        application=str(PIPELINE.spark_jobs / "audit.py"),
        application_args=[
            "--warehouse",
            PIPELINE.warehouse,
            "--hours",
            "{{ ti.xcom_pull(task_ids='hours_to_audit') }}",
            "--grace",
            f"{PIPELINE.grace_hours}h",
            "--reports",
            PIPELINE.reports,
            "--fail-on",
            "lost,unaccounted",
        ],
        conn_id=PIPELINE.spark_conn_id,
        name="audit",
        retries=0,  # a red audit is a finding, not a flake
        on_failure_callback=summarize_failure,
    )

    @task(outlets=[COMPLETE_ALIAS])
    def announce_closed(hours: str, outlet_events: Any = None) -> list[dict[str, Any]]:
        from hooks.closed_hours import mark_announced, newly_closed
        from pipeline_warehouse.overview import WarehouseView
        from pipeline_warehouse.time_format import format_hour, parse_hour_range

        names = [format_hour(h) for h in parse_hour_range(hours)]
        view = WarehouseView(PIPELINE.warehouse_reader, timedelta(hours=PIPELINE.grace_hours))
        now = datetime.now(UTC)
        closed = newly_closed(view, PIPELINE.topics, names, now)
        for hour in closed:
            outlet_events[COMPLETE_ALIAS].add(
                complete_asset(PIPELINE, hour.topic), extra=hour.extra
            )
        mark_announced(view, closed, now)
        return [{"topic": h.topic, **h.extra} for h in closed]

    # Airflow passes hours_to_audit's str when the task runs; its typing of a task call takes
    # the function's own parameter types and knows nothing of XComArgs.
    hours >> audit >> announce_closed(hours)  # type: ignore[arg-type]


logbroker_audit()
