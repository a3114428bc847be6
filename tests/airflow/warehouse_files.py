"""A warehouse written file by file in the layout of DESIGN.md §3.6, for the UI's tests.

make_warehouse(root)   hours 11-14 of 2026-11-22 for page_views and searches:
                       11 closed (audited complete, grace passed at NOW),
                       12 page_views failed (3 events lost), searches closed,
                       13 open (nothing), 14 page_views loaded (not audited)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

NOW = datetime(2026, 11, 22, 15, 30, tzinfo=UTC)
TOPICS = ("page_views", "searches")


def pipeline_settings(
    warehouse: Path, live_conn: str = "lb_live", analysis_conn: str = "lb_analysis"
):  # type: ignore[no-untyped-def]
    from hooks.pipeline import LiveCluster, Pipeline

    return Pipeline(
        live_clusters=(LiveCluster("live", live_conn),),
        analysis_conn_id=analysis_conn,
        spark_conn_id="logbroker_spark_default",
        topics=TOPICS,
        warehouse=warehouse.as_uri(),
        reports=(warehouse / "_reports").as_uri(),
        grace_hours=2,
        max_bad_fraction=0.01,
    )


def write_checkpoint(warehouse: Path, topic: str, hour: str, rows: int) -> None:
    path = warehouse / "_checkpoints" / topic / f"{hour}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "topic": topic, "load_hour": hour,
        "partitions": [{"broker_id": 0, "partition": 0, "start_offset": 0,
                        "end_offset": 41230, "messages": rows}],
        "rows": rows, "duplicates_dropped": 1, "bad_records": 0,
        "rows_sha256": "ab" * 32, "committed_at": f"{hour}:59:00Z",
    }  # fmt: skip
    path.write_text(json.dumps(checkpoint))


def write_audit(warehouse: Path, hour: str, windows: list[tuple[str, int, int, str]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    start = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    rows = []
    for i, (topic, produced, loaded, status) in enumerate(windows):
        window_start = start + timedelta(minutes=10 * (i % 6))
        rows.append({
            "topic": topic, "window_start": window_start,
            "window_end": window_start + timedelta(minutes=10), "produced": produced,
            "mirrored": produced, "loaded_rows": loaded, "loaded_unique": loaded,
            "duplicates": 0, "missing": max(0, produced - loaded),
            "unaccounted": max(0, loaded - produced), "status": status,
            "audited_at": NOW,
        })  # fmt: skip
    directory = warehouse / "_audit_results" / f"audit_hour={hour}"
    directory.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), directory / "part-0.parquet")


def make_warehouse(root: Path) -> Path:
    for topic in TOPICS:
        write_checkpoint(root, topic, "2026-11-22T11", 120)
    write_audit(
        root,
        "2026-11-22T11",
        [("page_views", 60, 60, "complete"), ("searches", 60, 60, "complete")],
    )
    for topic in TOPICS:
        write_checkpoint(root, topic, "2026-11-22T12", 100)
    write_audit(
        root, "2026-11-22T12", [("page_views", 50, 47, "lost"), ("searches", 50, 50, "complete")]
    )
    write_checkpoint(root, "page_views", "2026-11-22T14", 80)
    return root
