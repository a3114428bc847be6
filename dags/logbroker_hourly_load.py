"""
### logbroker_hourly_load

Every hour, loads the hour that just ended from the **analysis** cluster into the
warehouse, each topic (the event topics and `_audit`) on its own, in Spark applications that
load up to `topics_per_load` topics each (pipeline.json, default 30):

1. **wait_for_mirror_<live>**: deferrable; waits (in the triggerer, holding no worker slot)
   until the mirror has copied everything each live cluster held when the hour ended.
2. **topics**: the topics to load (the pipeline's topics and `_audit`), in batches of at
   most `topics_per_load`.
3. **load**: mapped per batch (`HourlyLoadOperator`, the Spark provider's operator):
   `spark-submit spark_apps/jobs/hourly_load.py --topics <t1,t2,...> --hour <hour>`, one
   JVM for the batch, whose topics load one after the other. For each topic: reads each
   partition from the previous hour's checkpoint to the end it finds, writes Parquet under
   `<warehouse>/<topic>/load_hour=<hour>/` and then the checkpoint
   `<warehouse>/_checkpoints/<topic>/<hour>.json`: that topic's commit record
   (docs/design.md §3.6), under that topic's lock. A topic that fails fails the task with
   a line naming it, after the batch's other topics committed; the retry loads only the
   topics this run has not committed. Emits the asset `logbroker-warehouse/<topic>` of each
   topic, with the hour in the event's extra.

Runs one at a time and in order: an hour loads only after the previous hour committed
(`depends_on_past`, and the load itself refuses to skip an hour, naming the missing one).
A killed load task stops its spark-submit and everything it started before a retry runs;
any two loads of one topic that still meet (a run triggered by hand, a worker that lost its
scheduler) take turns on the topic's lock in ZooKeeper (docs/airflow.md).

**Backfill** re-runs hours from their stored offsets, with identical rows and
`rows_sha256`: `airflow backfill create --dag-id logbroker_hourly_load --from-date
2026-11-22T10:00:00 --to-date 2026-11-22T12:00:00 --reprocess-behavior completed`
(or the UI's Backfill dialog). The audit re-runs for those hours.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import CronDataIntervalTimetable, dag, task

from hooks.assets import WAREHOUSE_ALIAS
from hooks.operators import HourlyLoadOperator
from hooks.pipeline import load_pipeline
from hooks.sensors import MirrorCaughtUpSensor

PIPELINE = load_pipeline()


@dag(
    dag_id="logbroker_hourly_load",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=PIPELINE.start_date,
    end_date=PIPELINE.end_date,
    catchup=PIPELINE.catchup,  # `make up`: hours missed while it was down (docs/deploy.md)
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=2),
    doc_md=__doc__,
    tags=["logbroker", "warehouse", "spark"],
    default_args={
        "owner": "data-platform",
        "depends_on_past": True,
        "retries": 2,
        "retry_delay": PIPELINE.retry_delay(timedelta(minutes=1)),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=15),
    },
)
def logbroker_hourly_load() -> None:
    waits = [
        MirrorCaughtUpSensor(
            task_id=f"wait_for_mirror_{live.name}",
            live_conn_id=live.conn_id,
            mirror_group=live.mirror_group,
            whitelist=PIPELINE.mirror_whitelist,
            poll_interval=15,
            timeout=timedelta(hours=1).total_seconds(),
        )
        for live in PIPELINE.live_clusters
    ]

    @task
    def topics() -> list[list[str]]:
        return PIPELINE.load_batches

    load = HourlyLoadOperator.partial(
        task_id="load",
        conn_id=PIPELINE.spark_conn_id,
        analysis_conn_id=PIPELINE.analysis_conn_id,
        warehouse=PIPELINE.warehouse,
        warehouse_reader=PIPELINE.warehouse_reader,
        max_bad_fraction=PIPELINE.max_bad_fraction,
        parquet_writer=PIPELINE.parquet_writer,
        outlets=[WAREHOUSE_ALIAS],
        max_active_tis_per_dagrun=2,
        map_index_template="{{ task.topics_label }}",  # page_views,searches,ad_clicks,+1
    )

    waits >> load.expand(topics=topics())


logbroker_hourly_load()
