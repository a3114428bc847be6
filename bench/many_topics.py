"""Benchmark: one hour of many topics through the real Airflow scheduler, on a Spark standalone
cluster (a master and two workers), from the load run's start to the last load committed.

    .venv/bin/python bench/many_topics.py                          # 10, 25 and 50 topics
    .venv/bin/python bench/many_topics.py --topics 10 --topics-per-load 1   # one JVM a topic

For each number of topics it starts the stack `make up` runs (PipelineStack: ZooKeeper, a live
and an analysis cluster of two brokers, Airflow's four processes on PostgreSQL with
LocalExecutor, the Spark master and two workers, on free loopback ports), with that many
topics (copies of the demo's page_views, searches and ad_clicks: `<demo topic>_<i>`), then:

  produce   --events events a topic for one past hour, by audited producers (and `_audit`)
  mirror    a triggered `logbroker_mirror` run: the analysis cluster holds the hour
  load      a backfill of `logbroker_hourly_load` for the hour (the audit DAG is paused):
            timed from the backfill's creation to the last checkpoint committed, which is
            the measure (the hour ended long before: in production the run starts at the
            hour's end, and the mirror has copied it by then)

and stops the stack by PID. Where the time goes comes from the run's task instances (queued,
start, end) and the loads' own summaries in the task logs (`loaded <topic> <hour>: ...
(lock, plan, read+write, ... seconds)`): per load task, the application's start (spark-submit
to the first topic's load: the JVM, the session, the executor), the topics' loads by phase,
and the rest (the session's stop, the task's own start and end).

Results: bench/results/many_topics/many_topics.json (each run added under its key
`<topics>x<topics_per_load>`, with the run id, the commit and the machine's load average)
and many_topics.png (total time and per-topic cost against the number of topics).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hooks.pipeline import DEFAULT_TOPICS_PER_LOAD
from logbroker.stack.pipeline_stack import PipelineStack, wait_for
from logbroker.stack.spark_standalone import SparkStandalone
from logbroker.stack.traffic import TOPICS
from logbroker.stack.zookeeper import find_free_port, find_free_ports

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "many_topics"
DAG = "logbroker_hourly_load"
SUMMARY = re.compile(
    r"(?:loaded|backfilled) (?P<topic>[\w.-]+) (?P<hour>\d{4}-\d\d-\d\dT\d\d): "
    r"(?P<rows>\d+) rows.*\((?P<laps>[^()]*)\)$"
)


def log(line: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {line}", flush=True)


def topic_names(count: int) -> dict[str, str]:
    """`count` topics, each a copy of one of the demo's (schema and traffic), in turn."""
    return {f"{TOPICS[i % len(TOPICS)]}_{i:02d}": TOPICS[i % len(TOPICS)] for i in range(count)}


def pause(stack: PipelineStack, dag_id: str) -> bool:
    try:
        stack.airflow.api("PATCH", f"/dags/{dag_id}", {"is_paused": True})
    except Exception as exc:  # 404 until the dag-processor parsed it
        if "HTTP 404" in str(exc):
            return False
        raise
    return True


def instant(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def task_attempts(stack: PipelineStack, run_id: str) -> list[dict[str, Any]]:
    """Every try of every load task, from its log: when it began and ended (its first and
    last lines), and the topic loads it logged (topic, rows, laps, when logged) or skipped."""
    base = stack.airflow.home / "logs" / f"dag_id={DAG}" / f"run_id={run_id}" / "task_id=load"
    attempts = []
    for path in sorted(base.glob("map_index=*/attempt=*.log")):
        loads, skipped, times = [], 0, []
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
                text, when = str(entry.get("event", "")), entry.get("timestamp")
            except ValueError:
                continue
            if isinstance(when, str):
                times.append(instant(when))
            skipped += text.startswith("skipped ")
            match = SUMMARY.search(text.strip())
            if match is None:
                continue
            laps = {}
            for lap in match["laps"].split(", "):
                name, _, secs = lap.rpartition(" ")
                laps[name] = float(secs.rstrip("s"))
            loads.append(
                {
                    "topic": match["topic"],
                    "rows": int(match["rows"]),
                    "laps": laps,
                    "seconds": round(sum(laps.values()), 2),
                    "logged": instant(when) if isinstance(when, str) else None,
                }
            )
        if times:
            attempts.append(
                {
                    "map_index": int(path.parent.name.split("=")[1]),
                    "attempt": int(path.stem.split("=")[1]),
                    "start": min(t for t in times if t is not None),
                    "end": max(t for t in times if t is not None),
                    "loads": loads,
                    "skipped": skipped,
                }
            )
    return attempts


def where_the_time_goes(attempts: list[dict[str, Any]], t0: float) -> dict[str, Any]:
    """Per try of a load task: when it began after t0, the application's start (to the first
    topic's load), the topics' loads, and the rest (the session's stop, the task's end)."""
    tasks = []
    phases: dict[str, float] = {}
    for a in attempts:
        start, end, mine = a["start"], a["end"], a["loads"]
        seconds = sum(x["seconds"] for x in mine)
        for x in mine:
            for name, secs in x["laps"].items():
                phases[name] = phases.get(name, 0.0) + secs
        first = min(
            (x["logged"] - x["seconds"] for x in mine if x["logged"] is not None), default=None
        )
        task: dict[str, Any] = {
            "map_index": a["map_index"],
            "attempt": a["attempt"],
            "topics": [x["topic"] for x in mine],
            "skipped": a["skipped"],
            "start_after_t0_s": round(start - t0, 1),
            "duration_s": round(end - start, 1),
            "app_start_s": round(first - start, 1) if first is not None else None,
            "topic_loads_s": round(seconds, 1),
        }
        if first is not None:
            task["rest_s"] = round(end - first - seconds, 1)
        tasks.append(task)
    known = [t for t in tasks if t["app_start_s"] is not None]
    return {
        "load_tasks": tasks,
        "sum_task_s": round(sum(t["duration_s"] for t in tasks), 1),
        "sum_app_start_s": round(sum(t["app_start_s"] for t in known), 1),
        "sum_topic_loads_s": round(sum(t["topic_loads_s"] for t in tasks), 1),
        "sum_rest_s": round(sum(t.get("rest_s", 0.0) for t in known), 1),
        "topic_load_phases_s": {k: round(v, 1) for k, v in phases.items()},
    }


def run_one(
    count: int, events: int, topics_per_load: int | None, workdir: Path, hour: datetime
) -> dict[str, Any]:
    name = f"{hour:%Y-%m-%dT%H}"
    if workdir.exists():
        shutil.rmtree(workdir)
    topics = topic_names(count)
    ui = find_free_ports(3)
    spark = SparkStandalone(workdir / "spark", master_port=find_free_port(), ui_port=ui)
    settings = {} if topics_per_load is None else {"topics_per_load": topics_per_load}
    stack = PipelineStack(
        workdir,
        topics=tuple(topics),
        traffic_of=topics,
        spark_cluster=spark,
        postgres=True,
        hours=(name, name),
        pipeline_settings=settings,
        log=lambda s: log("  " + s),
    )
    result: dict[str, Any] = {
        "topics": count,
        "loaded_topics": count + 1,  # and _audit
        "events_per_topic": events,
        "topics_per_load": topics_per_load,
        "hour": name,
        "loadavg_before": loadavg(),
    }
    try:
        mark = time.monotonic()
        stack.start()
        result["stack_start_s"] = round(time.monotonic() - mark, 1)
        wait_for(lambda: pause(stack, "logbroker_audit"), 180, "the audit DAG", sleep=2)
        log(f"{count} topics: producing {events:,} events each for {name}")
        mark = time.monotonic()
        traffic = stack.produce_hour(int(hour.timestamp() * 1000), dict.fromkeys(topics, events))
        result["produce_s"] = round(time.monotonic() - mark, 1)
        result["events_sent"] = traffic.sent
        log(f"  produced in {result['produce_s']} s; mirroring")
        mark = time.monotonic()
        mirror = stack.wait_run("logbroker_mirror", stack.trigger("logbroker_mirror"), 1800)
        if mirror["state"] != "success":
            raise SystemExit(stack.failure_details("logbroker_mirror", mirror["dag_run_id"]))
        result["mirror_s"] = round(time.monotonic() - mark, 1)
        log(f"  mirrored in {result['mirror_s']} s; loading: a backfill of {DAG}")
        result["loadavg_at_load"] = loadavg()
        t0 = time.time()
        stack.backfill(DAG, name, name, reprocess=False)

        def finished() -> dict[str, Any] | None:
            for run in stack.runs(DAG):
                if (run.get("data_interval_start") or "").startswith(f"{name}:00:00"):
                    return run if run["state"] in ("success", "failed") else None
            return None

        run = wait_for(finished, 3600, f"the load of {name}", sleep=2)
        wall = time.time() - t0
        run_id = run["dag_run_id"]
        result["run_id"] = run_id
        result["state"] = run["state"]
        result["loadavg_after"] = loadavg()
        committed = {}
        for topic in (*topics, "_audit"):
            path = stack.warehouse / "_checkpoints" / topic / f"{name}.json"
            if path.exists():
                cp = json.loads(path.read_text())
                committed[topic] = {"rows": cp["rows"], "committed_at": cp["committed_at"]}
        result["committed_topics"] = len(committed)
        result["rows"] = sum(c["rows"] for c in committed.values())
        last = max((instant(c["committed_at"]) or 0.0 for c in committed.values()), default=None)
        # committed_at has whole seconds: the last commit is within a second after it
        result["to_last_commit_s"] = round(last + 1 - t0, 1) if last else None
        result["run_wall_s"] = round(wall, 1)
        result["run_start_after_t0_s"] = round((instant(run["start_date"]) or t0) - t0, 1)
        found = stack.airflow.api("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=500")
        tis = found["task_instances"]
        others = {
            t["task_id"]: round((instant(t["end_date"]) or 0) - (instant(t["start_date"]) or 0), 1)
            for t in tis
            if t["task_id"] != "load" and t["start_date"]
        }
        result["other_tasks_s"] = others
        load_tis = [t for t in tis if t["task_id"] == "load"]
        result["load_tasks"] = len(load_tis)
        result["load_tries"] = {str(t["map_index"]): t["try_number"] for t in load_tis}
        result.update(where_the_time_goes(task_attempts(stack, run_id), t0))
        total = result["to_last_commit_s"] or wall
        result["per_topic_s"] = round(total / (count + 1), 2)
        if run["state"] != "success" or len(committed) != count + 1:
            result["failure"] = stack.failure_details(DAG, run_id)
        log(
            f"  {count} topics ({len(load_tis)} load tasks): {run['state']}, last commit "
            f"{result['to_last_commit_s']} s after the run's creation, "
            f"{result['per_topic_s']} s a topic"
        )
    finally:
        stack.stop()
    return result


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[dict[str, Any]]] = {}
    for entry in results.values():
        per = entry.get("topics_per_load") or DEFAULT_TOPICS_PER_LOAD
        label = "one load task a topic" if per == 1 else f"topics_per_load {per}"
        series.setdefault(label, []).append(entry)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, entries in sorted(series.items()):
        entries.sort(key=lambda e: e["topics"])
        xs = [e["topics"] for e in entries]
        left.plot(xs, [e["to_last_commit_s"] for e in entries], "o-", label=label)
        right.plot(xs, [e["per_topic_s"] for e in entries], "o-", label=label)
    left.axhline(600, color="grey", linestyle=":", label="10 minutes (the goal at 50)")
    left.set(xlabel="topics in the hour", ylabel="seconds", title="run start to last commit")
    right.set(
        xlabel="topics in the hour", ylabel="seconds a topic", title="cost a topic (+ _audit)"
    )
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle("one hour, ~20,000 events a topic, Airflow + Spark standalone (2 cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="many_topics.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--topics", default="10,25,50", help="numbers of topics (default 10,25,50)")
    parser.add_argument("--events", type=int, default=20_000, help="events a topic (20,000)")
    parser.add_argument(
        "--topics-per-load",
        type=int,
        default=None,
        help="pipeline.json's topics_per_load (default: the pipeline's default; 1: one load "
        "task, one JVM, a topic)",
    )
    parser.add_argument("--workdir", default=str(ROOT / "var" / "bench-many-topics"))
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--keep", action="store_true", help="keep the last run's workdir")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from the JSON")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the stacks on kill
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "many_topics.json"
    if args.plot_only:
        plot(json.loads(results_file.read_text()), out / "many_topics.png")
        return 0
    # an hour that ended hours ago: the DAG's schedule creates no run of it by itself
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    hour = datetime.fromtimestamp(now.timestamp() - 4 * 3600, UTC)
    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    states = []
    for count in [int(x) for x in args.topics.split(",")]:
        workdir = Path(args.workdir) / f"topics-{count}"
        result = run_one(count, args.events, args.topics_per_load, workdir, hour)
        result.update(bench_run=run_id, commit=git_commit(), cpus=os.cpu_count())
        result["topics_per_load"] = args.topics_per_load or DEFAULT_TOPICS_PER_LOAD
        key = f"{count}x{result['topics_per_load']}"
        # read again: another invocation may have added its runs meanwhile
        results = json.loads(results_file.read_text()) if results_file.exists() else {}
        results[key] = result
        states.append(result.get("state"))
        results_file.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(json.dumps(result, indent=1))
        if not args.keep and result.get("state") == "success":  # a failure's logs stay
            shutil.rmtree(workdir, ignore_errors=True)
    results = json.loads(results_file.read_text())
    plot(results, out / "many_topics.png")
    log(f"results: {results_file}, {out / 'many_topics.png'}")
    return 0 if all(state == "success" for state in states) else 1


if __name__ == "__main__":
    sys.exit(main())
