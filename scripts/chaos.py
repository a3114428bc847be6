"""`make chaos`: the whole pipeline while its parts die, and proof that nothing was lost.

    .venv/bin/python -m scripts.chaos [--hours 6] [--seed 1] [--per-kind 2] [--lose N]
                                      [--workdir var/chaos]      (from the repository root)

Runs what `make demo` runs (ZooKeeper, a live and an analysis cluster of two brokers each, the
registry, Airflow's four processes, Spark local) for --hours simulated hours, with `searches`
and `ad_clicks` replicated (replication factor 2, docs/replication.md) and `page_views` and
`_audit` in 0.7's layout. Audited producers send each hour's events at a steady rate with
fsynced produce acknowledged by every in-sync replica (acks=-1), and a seeded plan
(harness.faults) injects each kind of fault --per-kind times at random moments:

    live_broker        kill -9 a live broker, the leader of a replicated partition, while
                       producers send (restarted)
    broker_session     expire a live broker's ZooKeeper session while producers send
    analysis_broker    kill -9 an analysis broker, the leader of a replicated partition, while
                       the mirror copies (restarted)
    mirror             kill -9 the mirror task's process (Airflow retries the task)
    consumer_session   expire the mirror's ZooKeeper session (a group consumer's)
    spark_load         kill -9 a spark-submit of the hourly load during its write (retried)
    scheduler          kill -9 Airflow's scheduler (started again)
    load_leader        kill -9 the analysis leader of a replicated partition while its
                       topic's hourly load reads and writes (restarted; the load reads on
                       from the new leader)

At the end it prints and writes <workdir>/chaos.json (and chaos.png, a timeline of faults and
throughput, when matplotlib is installed: pip install -r bench/requirements.txt): faults by
kind, events produced, events in the warehouse, missing, duplicates in the warehouse, windows
complete, and every loaded hour's rows_sha256 recomputed from its checkpoint's ranges. It
passes (exit 0) only with 0 missing, 0 duplicates, every window complete and every checksum
equal. `--lose N`: in the last hour a producer counts N `searches` events it never sends
(really lost); the run then passes only if the audit finds exactly those N, `lost`, and every
other window complete.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.faults import KINDS, FaultPlan, Faults
from logbroker.stack.pipeline_stack import PipelineStack
from logbroker.stack.traffic import TOPICS
from spark_apps.class_archive import with_archive

ROOT = Path(__file__).resolve().parents[1]

from scripts.demo import LOADED, Progress, demo_hours, hour_name, load_and_audit  # noqa: E402

EVENTS = {"page_views": 1200, "searches": 500, "ad_clicks": 150}
REPLICATED = {"searches": 2, "ad_clicks": 2}  # topic -> replication factor, in both clusters


def produce(
    stack: PipelineStack, hour: datetime, seed: int, faults: Faults, kinds: list[str], lose: int
) -> int:
    """The hour's traffic at a steady rate (~12 s), with the producer-side faults meanwhile."""
    result: dict[str, Any] = {}

    def send() -> None:
        try:
            result["traffic"] = stack.produce_hour(
                int(hour.timestamp() * 1000), EVENTS, seed=seed, acks="fsync", batch=50,
                pause_s=0.3, retries=60, unsent={"searches": lose} if lose else None,
                request_required_acks=-1,
            )  # fmt: skip
        except BaseException as exc:  # reported below, in the main thread
            result["error"] = exc

    sender = threading.Thread(target=send, name="chaos-producer")
    sender.start()
    for kind in kinds:
        time.sleep(faults.rng.uniform(0.5, 3.0))
        if kind == "live_broker":
            faults.kill_broker("live")
        elif kind == "broker_session":
            faults.expire_broker_session("live")
    sender.join()
    if "error" in result:
        raise result["error"]
    return int(result["traffic"].sent)


def mirror(stack: PipelineStack, faults: Faults, kinds: list[str], progress: Progress) -> None:
    progress("  mirroring (logbroker_mirror)")
    run_id = stack.trigger("logbroker_mirror")
    # The faults that need the mirror's process first: it may be done in a few seconds.
    order = ("mirror", "consumer_session", "analysis_broker")
    for kind in sorted((k for k in kinds if k in order), key=order.index):
        if kind == "analysis_broker":
            time.sleep(faults.rng.uniform(0.5, 4.0))
            faults.kill_broker("analysis")
        elif kind == "mirror":
            faults.kill_task_process(
                "mirror", "logbroker.cli mirror", 60, faults.rng.uniform(0, 0.5)
            )
        elif kind == "consumer_session":
            faults.expire_consumer_session("logbroker.cli mirror", 60)
    run = stack.wait_run("logbroker_mirror", run_id, timeout=1200)
    if run["state"] != "success":
        raise SystemExit(f"chaos: {stack.failure_details('logbroker_mirror', run_id)}")


def load(
    stack: PipelineStack, hour: datetime, faults: Faults, kinds: list[str], progress: Progress
) -> None:
    injectors = []
    if "spark_load" in kinds:
        injectors.append(lambda: faults.kill_task_process(
            "spark_load", "hourly_load.py", 300, faults.rng.uniform(2.0, 8.0)))  # fmt: skip
    if "scheduler" in kinds:
        injectors.append(
            lambda: (time.sleep(faults.rng.uniform(3.0, 15.0)), faults.kill_scheduler())
        )
    if "load_leader" in kinds:
        injectors.append(lambda: faults.kill_loading_leader(sorted(REPLICATED), 300))
    threads = [threading.Thread(target=f, daemon=True) for f in injectors]
    for t in threads:
        t.start()
    audits = load_and_audit(stack, hour, progress)
    for t in threads:
        t.join()
    failed = [a for a in audits if a["state"] != "success"]
    if failed:
        progress(f"  the audit was red for {hour_name(hour)} (see the report below)")


def warehouse_counts(stack: PipelineStack) -> dict[str, dict[str, int]]:
    """Per topic: rows in the warehouse, unique (producer_id, seq), and duplicates."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    out = {}
    for topic in TOPICS:
        table = ds.dataset(stack.warehouse / topic, format="parquet", partitioning="hive").to_table(
            columns=["producer_id", "seq"]
        )
        keys = pc.binary_join_element_wise(
            table["producer_id"], pc.cast(table["seq"], "string"), ":"
        )
        unique = len(pc.unique(keys))
        out[topic] = {
            "rows": table.num_rows,
            "unique": unique,
            "duplicates": table.num_rows - unique,
        }
    return out


def audit_statuses(stack: PipelineStack, hours: list[datetime]) -> tuple[Counter[str], int]:
    """Windows by status over the hours, and the events the audit found missing."""
    import pyarrow.parquet as pq

    found: Counter[str] = Counter()
    missing = 0
    for hour in hours:
        table = pq.read_table(stack.warehouse / "_audit_results" / f"audit_hour={hour_name(hour)}")
        found.update(table.column("status").to_pylist())
        missing += sum(table.column("missing").to_pylist())
    return found, missing


def verify_checksums(stack: PipelineStack, hours: list[datetime]) -> dict[str, bool]:
    """`hourly_load.py verify` of every hour in one application: rows_sha256 recomputed from
    each checkpoint's ranges. An hour is equal when each loaded topic's line says OK."""
    names = [hour_name(hour) for hour in hours]
    done = subprocess.run(
        [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]",
         "--conf", f"spark.driver.extraJavaOptions={with_archive('-XX:TieredStopAtLevel=1')}",
         str(ROOT / "spark_apps" / "jobs" / "hourly_load.py"), "verify",
         "--zookeeper", stack.analysis, "--topics", ",".join(LOADED),
         *(arg for name in names for arg in ("--hour", name)),
         "--warehouse", stack.warehouse_uri],
        capture_output=True, text=True, check=False,
        env={**stack.airflow.env(), "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    for line in done.stdout.splitlines():
        print(f"    {line}")
    heads = {tuple(line.split()[:3]) for line in done.stdout.splitlines() if line[:1] != " "}
    return {name: all((topic, f"{name}:", "OK") in heads for topic in LOADED) for name in names}


def plot(path: Path, report: dict[str, Any]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(11, 4))
    kinds = list(KINDS)
    for t, kind, _ in report["timeline"]:
        ax.scatter(t, kinds.index(kind), color="tab:red", marker="x")
    ax.set_yticks(range(len(kinds)), kinds)
    twin = ax.twinx()
    twin.step([s["t"] for s in report["hours"]], [s["events_per_s"] for s in report["hours"]],
              where="post", color="tab:blue")  # fmt: skip
    twin.set_ylabel("events/s produced (per simulated hour)")
    ax.set_xlabel("seconds into the run")
    ax.set_title(f"chaos run, seed {report['seed']}: faults (x) and produce throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    progress = Progress()
    workdir = Path(args.workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    hours = demo_hours(args.hours, datetime.now(UTC), grace_hours=2)
    plan = FaultPlan.seeded(args.seed, args.hours, args.per_kind)
    stack = PipelineStack(
        workdir,
        hours=(hour_name(hours[0]), hour_name(hours[-1])),
        replicated=REPLICATED,
        log=lambda s: progress("  " + s),
        # The faults make tasks retry: a retry after seconds, not the DAGs' minute, tests the
        # same recovery (the next try runs after the killed one ended, docs/airflow.md).
        pipeline_settings={"task_retry_delay": 5},
        extra_airflow_env={
            # A task whose process died is noticed in seconds, not Airflow's 5 minutes; the
            # tasks a killed scheduler had started are reset by the next one (orphan check).
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
        },
    )
    faults = Faults(stack, random.Random(args.seed), log=progress)
    report: dict[str, Any] = {"seed": args.seed, "hours": [], "plan": plan.by_hour}
    ok = False
    try:
        stack.start()
        produced = 0
        for i, hour in enumerate(hours):
            kinds = plan.by_hour[i]
            progress(f"hour {i + 1}/{len(hours)} {hour_name(hour)}: faults {kinds or 'none'}")
            started = time.monotonic()
            lose = args.lose if i == len(hours) - 1 else 0
            sent = produce(stack, hour, args.seed + i, faults, kinds, lose)
            produced += sent
            report["hours"].append({"hour": hour_name(hour), "t": started - faults.started,
                                    "events": sent,
                                    "events_per_s": sent / max(time.monotonic() - started, 1e-9)})  # fmt: skip
            mirror(stack, faults, kinds, progress)
            load(stack, hour, faults, kinds, progress)
        progress("checking: the warehouse, the audit, every hour's rows_sha256")
        counts = warehouse_counts(stack)
        statuses, audit_missing = audit_statuses(stack, hours)
        checksums = verify_checksums(stack, hours)
        in_warehouse = sum(c["unique"] for c in counts.values())
        report.update({
            "faults": dict(faults.injected),
            "timeline": faults.timeline,
            "events_produced": produced,
            "events_in_warehouse": in_warehouse,
            "missing": produced - in_warehouse,
            "duplicates_in_warehouse": sum(c["duplicates"] for c in counts.values()),
            "per_topic": counts,
            "windows": dict(statuses),
            "windows_complete": statuses.get("complete", 0),
            "lost_on_purpose": args.lose,
            "audit_missing": audit_missing,
            "checksums_equal": checksums,
        })  # fmt: skip
        # Nothing acknowledged is lost or doubled; the audit finds exactly what was lost on
        # purpose, and nothing else.
        ok = (
            report["missing"] == 0
            and report["duplicates_in_warehouse"] == 0
            and set(statuses) <= ({"complete", "lost"} if args.lose else {"complete"})
            and audit_missing == args.lose
            and all(checksums.values())
        )
        report["passed"] = ok
    finally:
        progress("stopping everything")
        stack.stop()
    (workdir / "chaos.json").write_text(json.dumps(report, indent=1) + "\n")
    drew = plot(workdir / "chaos.png", report)
    print(json.dumps({k: report[k] for k in ("faults", "events_produced", "events_in_warehouse",
                                             "missing", "duplicates_in_warehouse", "windows",
                                             "lost_on_purpose", "audit_missing",
                                             "checksums_equal", "passed")}, indent=1))  # fmt: skip
    print(f"report: {workdir / 'chaos.json'}" + (f", {workdir / 'chaos.png'}" if drew else ""))
    progress("chaos run PASSED" if ok else "chaos run FAILED")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="chaos.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-kind", type=int, default=2, help="faults of each kind (default 2)")
    parser.add_argument("--lose", type=int, default=0, help="events counted, never sent")
    parser.add_argument("--workdir", default=str(ROOT / "var" / "chaos"))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
