"""
### logbroker_mirror

Every 5 minutes, copies each **live** cluster into the **analysis** cluster with
`logbroker mirror --until-caught-up`: the task copies what the live cluster held when it
started, then exits. One run at a time; a run that overlaps the next slot makes it wait.

Nothing is lost when a run fails or is killed: the mirror commits a live partition's offset
only after the analysis cluster acknowledged every message before it, so the next run
resumes there (the only duplicates are an uncommitted tail, which the hourly load drops).

Topics: the pipeline's event topics and `_audit` (the producers' counts), from
`include/pipeline/pipeline.json`. Connections: one `logbroker` connection per live cluster
and `logbroker_analysis`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import CronTriggerTimetable, dag

from hooks.operators import MirrorOperator
from hooks.pipeline import load_pipeline

PIPELINE = load_pipeline()


@dag(
    dag_id="logbroker_mirror",
    schedule=CronTriggerTimetable("*/5 * * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    doc_md=__doc__,
    tags=["logbroker", "mirror"],
    default_args={
        "owner": "data-platform",
        "retries": 3,
        "retry_delay": PIPELINE.retry_delay(timedelta(seconds=30)),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=5),
    },
)
def logbroker_mirror() -> None:
    for live in PIPELINE.live_clusters:
        MirrorOperator(
            task_id=f"mirror_{live.name}",
            source_conn_id=live.conn_id,
            target_conn_id=PIPELINE.mirror_target_conn_id,
            mirror_group=live.mirror_group,
            whitelist=PIPELINE.mirror_whitelist,
            execution_timeout=timedelta(minutes=25),
        )


logbroker_mirror()
