"""The whole pipeline through Airflow's real scheduler, as `make demo` runs it, in one module.

ZooKeeper, a live and an analysis cluster (two brokers each), the schema registry and Airflow
(api-server, scheduler, dag-processor, triggerer) as processes; Spark in local mode inside the
tasks. Two simulated hours: the first clean, the second with events a producer counted but never
sent. The DAGs run as a user runs them: a triggered mirror run, backfills of the hourly load,
and the audit runs that the load's assets schedule. As in `make demo`, ad_clicks is a
0.8-format topic (logical offsets, keys) beside the 0.7-format page_views and searches.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow.parquet as pq
import pytest

from logbroker.client.cluster import Cluster
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.stack.pipeline_stack import PipelineStack
from scripts.demo import EVENTS, LOADED, Progress, demo_hours, hour_name, load_and_audit, mirror

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # the module fixture runs ~10 min
LOST = {"searches": 4}  # counted by the producer of the second hour, never sent
FORMAT08 = "ad_clicks"  # the demo's 0.8-format topic (traffic.MESSAGE_FORMATS)


def audit_results(stack: PipelineStack, hour: datetime) -> Any:
    return pq.read_table(
        stack.warehouse / "_audit_results" / f"audit_hour={hour_name(hour)}"
    ).to_pandas()


def checkpoint(stack: PipelineStack, topic: str, hour: datetime) -> dict[str, Any]:
    path = stack.warehouse / "_checkpoints" / topic / f"{hour_name(hour)}.json"
    return dict(json.loads(path.read_text()))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    hours = demo_hours(2, datetime.now(UTC), grace_hours=2)
    stack = PipelineStack(
        tmp_path_factory.mktemp("pipeline"),
        hours=(hour_name(hours[0]), hour_name(hours[-1])),
        all_admins=True,
    )
    progress = Progress()
    stack.start()
    try:
        audits = []
        for i, hour in enumerate(hours):
            stack.produce_hour(
                int(hour.timestamp() * 1000),
                EVENTS,
                late={"page_views": 5} if i else None,
                unsent=LOST if i else None,
            )
            mirror(stack, progress)
            audits.append(load_and_audit(stack, hour, progress))
        before = {t: checkpoint(stack, t, hours[0]) for t in LOADED}
        backfill_audits = load_and_audit(stack, hours[0], progress, reprocess=True)
        yield {
            "stack": stack,
            "hours": hours,
            "audits": audits,
            "before": before,
            "backfill_audits": backfill_audits,
        }
    finally:
        stack.stop()


def test_first_hour_every_window_complete(pipeline: dict[str, Any]) -> None:
    stack, hours = pipeline["stack"], pipeline["hours"]
    assert [a["state"] for a in pipeline["audits"][0]] == ["success"]
    results = audit_results(stack, hours[0])
    assert set(results["status"]) == {"complete"}
    per_topic = results.groupby("topic")["loaded_unique"].sum().to_dict()
    # The late page views of the second hour's traffic belong to the first hour's windows.
    assert per_topic == {**EVENTS, "page_views": EVENTS["page_views"] + 5}
    assert results["duplicates"].sum() == 0


def test_lost_events_turn_the_audit_task_red_with_the_exact_count(
    pipeline: dict[str, Any],
) -> None:
    stack, hours = pipeline["stack"], pipeline["hours"]
    [audit] = pipeline["audits"][1]
    assert audit["state"] == "failed"
    assert stack.task_states("logbroker_audit", audit["dag_run_id"])["audit"] == "failed"
    results = audit_results(stack, hours[1])
    lost = results[results["status"] == "lost"]
    assert set(lost["topic"]) == {"searches"}
    assert int(lost["missing"].sum()) == LOST["searches"]
    others = results[results["topic"] != "searches"]
    assert set(others["status"]) == {"complete"}
    # The failure callback's one-line summary is in the task's log.
    log_dir = stack.airflow.home / "logs" / "dag_id=logbroker_audit"
    logs = "".join(p.read_text() for p in log_dir.glob(f"run_id={audit['dag_run_id']}/**/*.log"))
    assert f"..{hour_name(hours[1])} failed:" in logs
    assert "lost" in logs


def test_backfill_of_the_first_hour_is_identical(pipeline: dict[str, Any]) -> None:
    stack, hours = pipeline["stack"], pipeline["hours"]
    for topic, before in pipeline["before"].items():
        after = checkpoint(stack, topic, hours[0])
        assert after["committed_at"] >= before["committed_at"]
        for key in (
            "offsets",
            "partitions",
            "rows",
            "rows_sha256",
            "duplicates_dropped",
            "bad_records",
        ):
            # (a 0.7 topic's checkpoint has no "offsets": byte offsets, as before 0.8)
            assert after.get(key) == before.get(key), (topic, key)
    # The audit ran again for the backfilled hour, and it is still complete.
    assert [a["state"] for a in pipeline["backfill_audits"]] == ["success"]
    assert set(audit_results(stack, hours[0])["status"]) == {"complete"}


def test_the_0_8_format_topic_is_mirrored_loaded_in_logical_offsets_and_audited(
    pipeline: dict[str, Any],
) -> None:
    """ad_clicks, a 0.8-format topic in both clusters: mirrored whole, every hour loaded and
    checkpointed in logical offsets (the 0.7 topics' in bytes), and audited complete, the
    producers' and the mirror's counts in _audit reconciling with the rows loaded."""
    stack, hours = pipeline["stack"], pipeline["hours"]
    assert stack.message_format(FORMAT08) == "0.8"
    with Cluster(stack.analysis) as cluster:  # the mirror's target: the same format
        assignment = cluster.assignment(FORMAT08)
        assert assignment is not None and assignment.message_format == "0.8"
        mirrored = 0
        for p in range(len(assignment.replicas)):
            with PartitionReader08.connect(stack.analysis, FORMAT08, p) as reader:
                mirrored += reader.latest_offset()  # logical: its messages
    assert mirrored == 2 * EVENTS[FORMAT08]  # both hours, nothing missing or repeated
    loaded = 0
    for hour in hours:
        cp = checkpoint(stack, FORMAT08, hour)
        assert cp["offsets"] == "logical", hour
        assert {p["broker_id"] for p in cp["partitions"]} == {-1}  # a replicated topic's
        for p in cp["partitions"]:  # logical: a range's length is its number of messages
            assert p["end_offset"] - p["start_offset"] == p["messages"]
        assert cp["rows"] == EVENTS[FORMAT08] and cp["duplicates_dropped"] == 0
        loaded += cp["rows"]
        assert "offsets" not in checkpoint(stack, "page_views", hour)  # 0.7: byte offsets
    assert loaded == mirrored
    # the first hour's audit: every window complete, the counts the producers published to
    # _audit (produced) are the rows the load holds (loaded_unique), window by window
    results = audit_results(stack, hours[0])
    mine = results[results["topic"] == FORMAT08]
    assert len(mine) == 6 and set(mine["status"]) == {"complete"}
    assert (mine["produced"] == mine["loaded_unique"]).all()
    assert (mine["mirrored"] == mine["produced"]).all()  # the mirror tier counted 0.8's sets
    assert (
        int(mine["produced"].sum())
        == EVENTS[FORMAT08]
        == checkpoint(stack, FORMAT08, hours[0])["rows"]
    )
    # the backfilled first hour read the same logical ranges (test_backfill_..._identical)
    assert pipeline["before"][FORMAT08]["offsets"] == "logical"


def test_hour_runs_carry_their_data_intervals(pipeline: dict[str, Any]) -> None:
    stack, hours = pipeline["stack"], pipeline["hours"]
    loads = {r["data_interval_start"][:13]: r for r in stack.runs("logbroker_hourly_load")}
    assert sorted(loads) == [hour_name(h) for h in hours]
    assert all(r["state"] == "success" for r in loads.values())
    # Only the simulated hours ran: the pipeline's end_date keeps the clock's hour out.
    assert all(r["run_type"] == "backfill" for r in loads.values())


def test_closed_hours_are_announced_as_assets(pipeline: dict[str, Any]) -> None:
    stack, hours = pipeline["stack"], pipeline["hours"]
    found = stack.airflow.api(
        "GET", "/assets/events?source_dag_id=logbroker_audit&source_task_id=announce_closed"
    )["asset_events"]
    announced = sorted((e["name"], e["extra"]["load_hour"]) for e in found)
    # The first hour closed at its first audit, and closed again after the backfill reopened
    # it (a new commit; and for page_views, the late events of the second hour's load). The
    # second hour never closed: searches lost events, and a red audit announces nothing.
    assert announced == sorted(
        (f"logbroker-complete/{topic}", hour_name(hours[0])) for topic in EVENTS for _ in "12"
    )
    page_views = [e for e in found if e["name"] == "logbroker-complete/page_views"]
    produced = [e["extra"]["produced"] for e in sorted(page_views, key=lambda e: e["id"])]
    assert produced == [EVENTS["page_views"], EVENTS["page_views"] + 5]


def test_pipeline_page_in_all_admins_mode_shows_the_hours(pipeline: dict[str, Any]) -> None:
    """`make demo`'s UI (all-admins mode): the token login link lands on the Pipeline page,
    served by the api-server, with the first hour closed and the lost hour failed."""
    stack, hours = pipeline["stack"], pipeline["hours"]
    first, second = (hour_name(h) for h in hours)
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    path = urllib.parse.quote(f"/logbroker/pipeline?until={second}&hours=2", safe="/")
    with opener.open(f"{stack.airflow.url}/auth/token/login?next={path}", timeout=60) as page:
        html = page.read().decode()
    cells = {
        (topic, hour): (state, failed == "true")
        for topic, hour, state, failed in re.findall(
            r'data-topic="(\w+)" data-hour="([\dT-]+)" data-state="(\w+)"\s+data-failed="(\w+)"',
            html,
        )
    }
    assert cells[("page_views", first)] == ("closed", False), cells
    assert cells[("searches", second)] == ("audited", True), cells
