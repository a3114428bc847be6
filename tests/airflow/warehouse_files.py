"""A warehouse written file by file in the layout of docs/design.md §3.6, for the UI's tests.

make_warehouse(root)   hours 11-14 of 2026-11-22 for page_views and searches:
                       11 closed (audited complete, grace passed at NOW),
                       12 page_views audited and failed (3 events lost; its grace still
                       lets the unaudited load of 14 hold its events), searches closed,
                       13 open (nothing), 14 page_views loaded (not audited)

An audited hour gets what the audit writes (pipeline_warehouse.layout): its results
(Parquet), its _summary.json, whose inputs are the loads of the hour it read, and the index of
each load it read (all of the load's events are of its own hour).
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


def write_checkpoint(warehouse: Path, topic: str, hour: str, rows: int, broker_id: int = 0) -> None:
    """`broker_id` -1: the partition of a replicated topic."""
    path = warehouse / "_checkpoints" / topic / f"{hour}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "topic": topic, "load_hour": hour,
        "partitions": [{"broker_id": broker_id, "partition": 0, "start_offset": 0,
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
    topics = sorted({topic for topic, *_ in windows})
    statuses: dict[str, dict[str, int]] = {}
    for topic, _, _, status in windows:
        statuses.setdefault(topic, {}).setdefault(status, 0)
        statuses[topic][status] += 1
    inputs = {}
    for topic in topics:
        checkpoint = json.loads((warehouse / "_checkpoints" / topic / f"{hour}.json").read_text())
        inputs[topic] = [
            {"load_hour": hour, "committed_at": checkpoint["committed_at"],
             "rows_sha256": checkpoint["rows_sha256"], "read": True}
        ]  # fmt: skip
        index = warehouse / "_audit_results" / "_index" / topic / f"{hour}.json"
        index.parent.mkdir(parents=True, exist_ok=True)
        index.write_text(json.dumps({
            "topic": topic, "load_hour": hour, "committed_at": checkpoint["committed_at"],
            "rows_sha256": checkpoint["rows_sha256"], "event_hours": {hour: checkpoint["rows"]},
        }))  # fmt: skip
    summary = {
        "audit_hour": hour, "audited_at": "2026-11-22T15:00:00.000Z",
        "now": "2026-11-22T15:00:00.000Z", "grace_ms": 2 * 3_600_000, "window_ms": 600_000,
        "topics": topics, "inputs": inputs, "topic_statuses": statuses,
        "bad_audit_events": 0, "bad_audit_reasons": {}, "bad_audit_examples": [],
        "topic_hours": [],
    }  # fmt: skip
    (directory / "_summary.json").write_text(json.dumps(summary))


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
