"""`make demo`: the whole pipeline once, on the embedded defaults, through Airflow's scheduler.

    .venv/bin/python scripts/demo.py [--hours 3] [--workdir var/demo] [--keep]

1. starts ZooKeeper, a live and an analysis cluster (two brokers each, chroots /live and
   /analysis), the schema registry (/registry) with the demo's schemas, and Airflow 3
   (api-server, scheduler, dag-processor, triggerer: separate processes on 127.0.0.1,
   SQLite, LocalExecutor, parallelism 4); Spark runs in local mode in the tasks;
   page_views and searches are 0.7-format topics, ad_clicks a 0.8-format one (logical
   offsets, keys: traffic.MESSAGE_FORMATS) in both clusters;
2. for each of the last few finished hours but two (the lateness grace): produces the hour's
   traffic on page_views, searches and ad_clicks with audited producers (a few events late
   for the hour before, a few payloads that are not events), then drives the DAGs through
   the real scheduler: a triggered `logbroker_mirror` run, a backfill of
   `logbroker_hourly_load` for the hour, and the `logbroker_audit` run that the load's
   assets schedule;
3. backfills the first hour again from its stored offsets and shows `rows_sha256` unchanged;
4. prints a table per hour and topic (its format and its checkpoint's kind of offsets, state,
   rows, produced, missing, duplicates) and where the reports are; stops everything it
   started, by PID; exits 0 only if every window is complete, the backfill was identical and
   each 0.8-format topic's checkpoints hold logical offsets.

`--keep` keeps the data (warehouse, reports, Airflow's logs) under --workdir afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from logbroker.stack.pipeline_stack import PipelineStack, wait_for
from logbroker.stack.traffic import TOPICS

ROOT = Path(__file__).resolve().parents[1]


EVENTS = {"page_views": 3000, "searches": 1200, "ad_clicks": 300}
LATE = {"page_views": 7, "searches": 3}  # sent with the next hour's traffic
BAD_PAYLOADS = 5  # raw bytes on page_views in the second hour: bad records, under 1 %
LOADED = (*TOPICS, "_audit")


@dataclass
class HourRow:
    hour: str
    topic: str
    message_format: str  # the topic's: "0.7" or "0.8"
    offsets: str | None  # its checkpoint's kind: "byte" or "logical" (None: no checkpoint)
    state: str
    rows: int | None  # rows of the hour's load (events that arrived that hour)
    bad_records: int | None
    produced: int
    loaded_unique: int
    missing: int
    duplicates: int
    statuses: dict[str, int]


class Progress:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()

    def __call__(self, line: str) -> None:
        print(f"[{self.clock() - self.started:6.1f} s] {line}", flush=True)


def demo_hours(count: int, now: datetime, grace_hours: int) -> list[datetime]:
    """The `count` hours that ended before the grace, oldest first: the audit can close them."""
    last = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=grace_hours + 1)
    return [last - timedelta(hours=count - 1 - i) for i in range(count)]


def hour_name(hour: datetime) -> str:
    return f"{hour:%Y-%m-%dT%H}"


def run_of_hour(stack: PipelineStack, dag_id: str, hour: datetime) -> dict[str, Any] | None:
    for run in stack.runs(dag_id):
        start = run.get("data_interval_start") or ""
        if start.startswith(hour.strftime("%Y-%m-%dT%H:00:00")):
            return run
    return None


def require_success(stack: PipelineStack, dag_id: str, run: dict[str, Any]) -> None:
    if run["state"] != "success":
        raise SystemExit(f"demo FAILED: {stack.failure_details(dag_id, run['dag_run_id'])}")


def mirror(stack: PipelineStack, progress: Progress) -> None:
    progress("  mirroring live -> analysis: a logbroker_mirror run")
    run = stack.wait_run("logbroker_mirror", stack.trigger("logbroker_mirror"))
    require_success(stack, "logbroker_mirror", run)


def load_and_audit(
    stack: PipelineStack, hour: datetime, progress: Progress, reprocess: bool = False
) -> list[dict[str, Any]]:
    """Backfill the hourly load for `hour`; the audit runs its assets scheduled, finished."""
    audits_before = [r["dag_run_id"] for r in stack.runs("logbroker_audit")]
    old = run_of_hour(stack, "logbroker_hourly_load", hour) if reprocess else None
    progress(f"  loading {hour_name(hour)}: a backfill of logbroker_hourly_load")
    stack.backfill("logbroker_hourly_load", hour_name(hour), hour_name(hour), reprocess)

    def finished() -> dict[str, Any] | None:
        run = run_of_hour(stack, "logbroker_hourly_load", hour)
        if run is None or run["state"] not in ("success", "failed"):
            return None
        if old is not None and run.get("end_date") == old.get("end_date"):
            return None  # still the earlier run
        return run

    run = wait_for(finished, 900, f"the load of {hour_name(hour)}", sleep=2)
    require_success(stack, "logbroker_hourly_load", run)
    progress("  auditing: the logbroker_audit run the load's assets scheduled")
    return stack.wait_runs("logbroker_audit", 1, since=audits_before)


def read_checkpoint(warehouse: Path, topic: str, hour: datetime) -> dict[str, Any] | None:
    path = warehouse / "_checkpoints" / topic / f"{hour_name(hour)}.json"
    return dict(json.loads(path.read_text())) if path.exists() else None


def offsets_kind(checkpoint: dict[str, Any]) -> str:
    """A checkpoint's kind of offsets: "logical" (a 0.8-format topic's) or "byte"."""
    return str(checkpoint.get("offsets", "byte"))  # written before 0.8 topics: byte


def checksums(warehouse: Path, hour: datetime) -> dict[str, str]:
    out = {}
    for topic in LOADED:
        checkpoint = read_checkpoint(warehouse, topic, hour)
        assert checkpoint is not None, f"no checkpoint of {topic} {hour_name(hour)}"
        out[topic] = checkpoint["rows_sha256"]
    return out


def hour_rows(stack: PipelineStack, hours: list[datetime]) -> list[HourRow]:
    """What the warehouse's files say of each hour and topic (states, checkpoints, audit)."""
    import pyarrow.parquet as pq

    from pipeline_warehouse.filesystem import FsspecFS
    from pipeline_warehouse.hour_states import hour_states

    wh = stack.warehouse_uri
    states = {
        (s.hour_name, s.topic): s
        for s in hour_states(
            FsspecFS(), wh, TOPICS, hours, datetime.now(UTC), stack.grace_hours * 3_600_000
        )
    }
    rows = []
    for hour in hours:
        name = hour_name(hour)
        results = stack.warehouse / "_audit_results" / f"audit_hour={name}"
        table = pq.read_table(results).to_pandas() if results.exists() else None
        for topic in TOPICS:
            state = states[(name, topic)]
            mine = table[table["topic"] == topic] if table is not None else None
            sums = (
                {c: int(mine[c].sum()) for c in ("produced", "loaded_unique", "missing")}
                | {"duplicates": int(mine["duplicates"].sum())}
                if mine is not None
                else {"produced": 0, "loaded_unique": 0, "missing": 0, "duplicates": 0}
            )
            label = state.state + (" (reopened)" if state.reopened else "")
            checkpoint = read_checkpoint(stack.warehouse, topic, hour)
            rows.append(
                HourRow(
                    name,
                    topic,
                    stack.message_format(topic),
                    offsets_kind(checkpoint) if checkpoint is not None else None,
                    label,
                    state.rows,
                    checkpoint["bad_records"] if checkpoint is not None else None,
                    statuses=state.statuses,
                    **sums,
                )
            )
    return rows


def print_table(rows: list[HourRow]) -> None:
    # rows and bad: what the hour's load read (by arrival); produced to dups: the audit of the
    # hour's events (by event time, late events included)
    head = ("hour", "topic", "format", "offsets", "state", "rows", "bad", "produced", "loaded",
            "missing", "dups", "windows")  # fmt: skip
    lines = [head]
    for r in rows:
        windows = ", ".join(f"{n} {s}" for s, n in sorted(r.statuses.items()))
        lines.append(
            (r.hour, r.topic, r.message_format, r.offsets or "-", r.state, str(r.rows if r.rows is not None else "-"),
             str(r.bad_records if r.bad_records is not None else "-"), str(r.produced), str(r.loaded_unique), str(r.missing), str(r.duplicates), windows)
        )  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def run_demo(args: argparse.Namespace) -> int:
    # SIGTERM (a CI timeout, `kill`) stops the stack like Ctrl-C does, through `finally`.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    progress = Progress()
    workdir = Path(args.workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    hours = demo_hours(args.hours, datetime.now(UTC), args.grace_hours)
    progress(
        f"logbroker pipeline demo in {workdir}: hours {hour_name(hours[0])}..{hour_name(hours[-1])}"
    )
    stack = PipelineStack(
        workdir,
        grace_hours=args.grace_hours,
        hours=(hour_name(hours[0]), hour_name(hours[-1])),
        log=lambda s: progress("  " + s),
    )
    ok = False
    try:
        progress("starting the stack")
        stack.start()
        progress(
            f"Airflow UI at {stack.airflow.url} (user admin, password in {stack.airflow.home}/passwords.json)"
        )
        for i, hour in enumerate(hours):
            hour_ms = int(hour.timestamp() * 1000)
            progress(f"hour {i + 1}/{len(hours)} {hour_name(hour)}: producing audited traffic")
            stack.produce_hour(
                hour_ms,
                EVENTS,
                late=LATE if i > 0 else None,
                bad_payloads=BAD_PAYLOADS if i == 1 else 0,
                seed=args.seed,
            )
            mirror(stack, progress)
            for audit in load_and_audit(stack, hour, progress):
                require_success(stack, "logbroker_audit", audit)
        before = checksums(stack.warehouse, hours[0])
        progress(f"backfilling {hour_name(hours[0])} again from its stored offsets")
        for audit in load_and_audit(stack, hours[0], progress, reprocess=True):
            require_success(stack, "logbroker_audit", audit)
        after = checksums(stack.warehouse, hours[0])
        for topic in LOADED:
            same = "unchanged" if before[topic] == after[topic] else "CHANGED"
            print(
                f"  rows_sha256 {hour_name(hours[0])} {topic:<10} "
                f"({stack.message_format(topic)}) {after[topic][:16]}... {same}"
            )
        rows = hour_rows(stack, hours)
        print()
        print("format: the topic's message format; offsets: its checkpoints' (0.8: logical)")
        print("rows, bad: what each hour's load read; produced..dups: the audit of each hour's")
        print("events by event time (late events included), summed over its 10-minute windows")
        print_table(rows)
        print()
        complete = all(set(r.statuses) <= {"complete", "no_data"} and r.statuses for r in rows)
        identical = before == after
        # a 0.8-format topic's hours are checkpointed in logical offsets, a 0.7 one's in bytes
        kinds = all(r.offsets == ("logical" if r.message_format == "0.8" else "byte") for r in rows)
        ok = complete and identical and kinds
        print(f"warehouse: {stack.warehouse}")
        print(f"audit reports (Data Docs and a page per hour): {stack.warehouse / '_reports'}")
        print(f"Airflow's task logs: {stack.airflow.home / 'logs'}")
    finally:
        progress("stopping everything")
        stack.stop()
        if not args.keep and ok:
            # Keep the warehouse and logs of a failed run: they say what went wrong.
            for part in ("live-0", "live-1", "analysis-0", "analysis-1", "zookeeper"):
                shutil.rmtree(workdir / part, ignore_errors=True)
    progress(
        "demo succeeded: every window complete, the backfill identical, 0.8 in logical offsets"
        if ok
        else "demo FAILED: see the table above"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="demo.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=int, default=3, help="simulated hours (default 3)")
    parser.add_argument("--grace-hours", type=int, default=2, help="the audit's lateness grace")
    parser.add_argument("--workdir", default=str(ROOT / "var" / "demo"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--keep", action="store_true", help="keep the brokers' and ZooKeeper's data"
    )
    return run_demo(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
