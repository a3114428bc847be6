"""One load per topic at a time, through Airflow's real scheduler: backfills and killed tasks.

One pipeline stack for the module (ZooKeeper, a live and an analysis cluster of one broker,
Airflow's four processes; Spark local in the tasks), with one event topic: every hour loads
`page_views` and `_audit`, one after the other in one load task (one batch of topics, one
spark-submit). The audit DAG is paused: these tests are about the load.

1. a backfill of two hours with max_active_runs 2: the runs are active together, yet the
   loads of a topic never overlap (`depends_on_past`), commit in hour order, and their
   checkpoints chain; every row is in the warehouse exactly once;
2. a load task killed in the middle of its write (its processes frozen with SIGSTOP once its
   staging files appear, so that the kill lands mid-write whatever the machine's speed, then
   the task instance cleared through the REST API, as the UI's Clear does): every process of
   that spark-submit is gone, and the next try commits the hour once.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import stat
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from logbroker.stack.airflow_stack import AirflowStackError, process_running
from logbroker.stack.pipeline_stack import PipelineStack, nudge_mirror, wait_for
from scripts.demo import Progress, demo_hours, hour_name, mirror

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
DAG = "logbroker_hourly_load"
TOPIC = "page_views"
# one batch (the default topics_per_load): the load task's map index 0 loads both, in turn
LOADED = (TOPIC, "_audit")
BACKFILLED = 2  # hours in the first backfill, both active at once (max_active_runs)
FIRST_EVENTS = 1500  # produced before the backfill of the first hours
KILLED_EVENTS = 3000  # produced before the hour after them, whose load is killed


def checkpoint(stack: PipelineStack, topic: str, hour: str) -> dict[str, Any]:
    path = stack.warehouse / "_checkpoints" / topic / f"{hour}.json"
    return dict(json.loads(path.read_text()))


def hour_rows(stack: PipelineStack, topic: str, hour: str) -> Any:
    """The rows of the hour's current version (the files its checkpoint names)."""
    names = checkpoint(stack, topic, hour)["files"]
    directory = stack.warehouse / topic / f"load_hour={hour}"
    tables = [pq.read_table(directory / name) for name in names]
    return [row for table in tables for row in table.select(["producer_id", "seq"]).to_pylist()]


def load_tis(stack: PipelineStack, run_id: str) -> dict[str, dict[str, Any]]:
    """topic -> the load task instance that loaded it (the batch's, map index 0)."""
    found = stack.airflow.api("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances")
    [batch] = [ti for ti in found["task_instances"] if ti["task_id"] == "load"]
    assert batch["map_index"] == 0
    return dict.fromkeys(LOADED, batch)


def task_logs(stack: PipelineStack) -> str:
    logs = stack.airflow.home / "logs" / f"dag_id={DAG}"
    return "".join(p.read_text(errors="replace") for p in sorted(logs.glob("**/*.log")))


def backfill_and_wait(stack: PipelineStack, first: str, last: str, runs: int) -> list[Any]:
    stack.backfill(DAG, first, last, reprocess=False, max_active_runs=BACKFILLED)

    def finished() -> list[dict[str, Any]] | None:
        found = [r for r in stack.runs(DAG) if first <= r["data_interval_start"][:13] <= last]
        if len(found) == runs and all(r["state"] in ("success", "failed") for r in found):
            return sorted(found, key=lambda r: r["data_interval_start"])
        nudge_mirror(stack.airflow, DAG, found)
        return None

    return stack.wait_dag(DAG, finished, 900, f"the backfill {first}..{last}")


def load_processes(stack: PipelineStack, hour: str) -> list[int]:
    """The spark-submit of the load of LOADED for `hour`, and everything under it."""
    import psutil

    home = f"AIRFLOW_HOME={stack.airflow.home}".encode()
    name = f"hourly_load {','.join(LOADED)} {hour}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit():
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if name in command and home in (entry / "environ").read_bytes().split(b"\0"):
                root = psutil.Process(int(entry.name))
                return [root.pid, *(p.pid for p in root.children(recursive=True))]
        except (OSError, psutil.Error):
            continue
    return []


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    hours = [hour_name(h) for h in demo_hours(BACKFILLED + 1, datetime.now(UTC), grace_hours=2)]
    stack = PipelineStack(
        tmp_path_factory.mktemp("load-runs"),
        brokers_per_cluster=1,
        topics=(TOPIC,),
        hours=(hours[0], hours[-1]),
        # the killed load's retry after 5 s, not the DAG's minute or two: the same retry
        pipeline_settings={"task_retry_delay": 5},
        log=lambda _: None,
    )
    progress = Progress()
    started = time.monotonic()
    stack.start()
    try:
        wait_for(
            lambda: pause(stack, "logbroker_audit"), 120, "the audit DAG to be paused", sleep=2
        )
        found: dict[str, Any] = {"stack": stack, "hours": hours, "timings": {}}
        stack.produce_hour(_ms(hours[0]), {TOPIC: FIRST_EVENTS})
        mirror(stack, progress)
        mark = time.monotonic()
        found["backfill_runs"] = backfill_and_wait(
            stack, hours[0], hours[BACKFILLED - 1], runs=BACKFILLED
        )
        found["timings"][f"backfill of {BACKFILLED} hours"] = time.monotonic() - mark
        found["backfill_tis"] = {
            r["data_interval_start"][:13]: load_tis(stack, r["dag_run_id"])
            for r in found["backfill_runs"]
        }
        killed = kill_mid_write(stack, hours[BACKFILLED], progress)
        found["killed"] = killed["killed"]
        found["timings"].update(killed["timings"], module=time.monotonic() - started)
        print(f"\ntest_load_runs timings (s): {found['timings']}")
        yield found
    finally:
        stack.stop()


def pause(stack: PipelineStack, dag_id: str) -> bool:
    """Pause a DAG; False while the dag-processor has not parsed it yet."""
    try:
        stack.airflow.api("PATCH", f"/dags/{dag_id}", {"is_paused": True})
    except AirflowStackError as exc:
        if "HTTP 404" in str(exc):
            return False
        raise
    return True


def kill_mid_write(stack: PipelineStack, hour: str, progress: Progress) -> dict[str, Any]:
    """Load `hour` with a backfill; freeze its page_views load once its write began, clear the
    task instance (Airflow kills the running try), and let the next try run."""
    stack.produce_hour(_ms(hour), {TOPIC: KILLED_EVENTS})
    mirror(stack, progress)
    stack.backfill(DAG, hour, hour, reprocess=False, max_active_runs=BACKFILLED)
    staging = stack.warehouse / "_staging" / TOPIC

    nudged = [time.monotonic()]

    def writing() -> list[Path] | None:
        found = [d for d in staging.glob(f"{hour}.*") if (d / "rows").exists()]
        if not found and time.monotonic() - nudged[0] > 5:  # a deferred sensor: see nudge_mirror
            nudged[0] = time.monotonic()
            nudge_mirror(stack.airflow, DAG, stack.runs(DAG))
        return found or None

    [attempt] = stack.wait_dag(
        DAG, writing, 600, f"the load of {TOPIC} {hour} to start writing", sleep=0.02
    )
    frozen = load_processes(stack, hour)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    decided = (attempt / "_COMMIT").exists()
    committed = (stack.warehouse / "_checkpoints" / TOPIC / f"{hour}.json").exists()
    [run] = [r for r in stack.runs(DAG) if r["data_interval_start"][:13] == hour]
    stack.airflow.api(
        "POST",
        f"/dags/{DAG}/clearTaskInstances",
        {
            "dry_run": False,
            "dag_run_id": run["dag_run_id"],
            "task_ids": [["load", 0]],
            "only_failed": False,
            "reset_dag_runs": False,
        },
    )
    mark = time.monotonic()
    wait_for(
        lambda: not any(process_running(pid) for pid in frozen) or None,
        120,
        "the killed load's processes to end",
    )
    gone_after = time.monotonic() - mark
    final = stack.wait_dag(
        DAG,
        lambda: next(
            (
                r
                for r in stack.runs(DAG)
                if r["dag_run_id"] == run["dag_run_id"] and r["state"] in ("success", "failed")
            ),
            None,
        ),
        600,
        f"the run of {hour} after the kill",
    )
    return {
        "killed": {
            "hour": hour,
            "attempt": attempt.name.split(".", 1)[1],  # <hour>.<the load's run id>
            "frozen": frozen,
            "decided_before_kill": decided,
            "committed_before_kill": committed,
            "run": final,
            "tis": load_tis(stack, run["dag_run_id"]),
        },
        "timings": {"kill to no process left": gone_after},
    }


def _ms(hour: str) -> int:
    return int(datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC).timestamp() * 1000)


def test_backfill_runs_together_but_loads_of_a_topic_never_overlap(
    pipeline: dict[str, Any],
) -> None:
    runs = pipeline["backfill_runs"]
    assert [r["state"] for r in runs] == ["success"] * BACKFILLED
    # max_active_runs was honoured: the runs were active at the same time ...
    assert max(r["start_date"] for r in runs) < min(r["end_date"] for r in runs)
    # ... and every topic's loads ran one after the other, in hour order, each once.
    tis = pipeline["backfill_tis"]
    for topic in LOADED:
        ordered = [tis[h][topic] for h in sorted(tis)]
        assert [ti["try_number"] for ti in ordered] == [1] * BACKFILLED, topic
        for before, after in itertools.pairwise(ordered):
            assert before["end_date"] <= after["start_date"], (topic, before, after)


def test_backfilled_hours_commit_once_in_order_and_chain(pipeline: dict[str, Any]) -> None:
    stack, hours = pipeline["stack"], pipeline["hours"][:BACKFILLED]
    logs = task_logs(stack)
    for topic in LOADED:
        checkpoints = [checkpoint(stack, topic, h) for h in hours]
        assert [c["committed_at"] for c in checkpoints] == sorted(
            c["committed_at"] for c in checkpoints
        )
        for before, after in itertools.pairwise(checkpoints):
            ends = {(p["broker_id"], p["partition"]): p["end_offset"] for p in before["partitions"]}
            starts = {
                (p["broker_id"], p["partition"]): p["start_offset"] for p in after["partitions"]
            }
            assert starts == ends, (topic, after["load_hour"])
        for h in hours:
            assert logs.count(f"loaded {topic} {h}:") == 1, (topic, h)
    assert "backfilled" not in logs  # no hour was loaded twice
    # Every produced event is in the warehouse once (the hours' ranges hold each message once).
    rows = [row for h in hours for row in hour_rows(stack, TOPIC, h)]
    assert len(rows) == len({(r["producer_id"], r["seq"]) for r in rows}) == FIRST_EVENTS
    assert sum(checkpoint(stack, TOPIC, h)["rows"] for h in hours) == FIRST_EVENTS


def test_killed_load_leaves_no_process_and_the_retry_commits_once(
    pipeline: dict[str, Any],
) -> None:
    stack, killed = pipeline["stack"], pipeline["killed"]
    hour = killed["hour"]
    assert killed["frozen"], "the load's processes were not found"
    assert not killed["decided_before_kill"] and not killed["committed_before_kill"]
    left = [pid for pid in killed["frozen"] if process_running(pid)]
    assert left == [], "processes of the killed spark-submit outlived its task"
    assert killed["run"]["state"] == "success"
    assert killed["tis"][TOPIC]["try_number"] == 2  # the killed try, then the one that loaded
    got = checkpoint(stack, TOPIC, hour)
    assert got["version"] != killed["attempt"]  # the killed attempt committed nothing
    assert got["rows"] == KILLED_EVENTS
    rows = hour_rows(stack, TOPIC, hour)
    assert len({(r["producer_id"], r["seq"]) for r in rows}) == len(rows) == KILLED_EVENTS
    previous = checkpoint(stack, TOPIC, pipeline["hours"][BACKFILLED - 1])
    assert {p["partition"]: p["start_offset"] for p in got["partitions"]} == {
        p["partition"]: p["end_offset"] for p in previous["partitions"]
    }
    assert task_logs(stack).count(f"loaded {TOPIC} {hour}:") == 1
    assert not list((stack.warehouse / "_staging" / TOPIC).glob(f"{hour}.*"))


def test_airflow_home_is_private(pipeline: dict[str, Any]) -> None:
    home = pipeline["stack"].airflow.home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in home.iterdir() if p.is_file()}
    assert {"airflow.db", "passwords.json", "env.sh"} <= set(files)
    assert {name: mode for name, mode in files.items() if mode & 0o077} == {}
    logs = [p for p in (home / "logs").rglob("*") if p.stat().st_mode & 0o077]
    assert logs == [], "task logs readable by others"
