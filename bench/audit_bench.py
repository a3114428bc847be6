"""Benchmark: the audit of one day of 10-minute windows (docs/design.md §3.5), and where its time goes.

    .venv/bin/python bench/audit_bench.py                                  # 20 topics, 10M events
    .venv/bin/python bench/audit_bench.py --events 1000000 --topics 20      # a quick run

The warehouse is generated directly in the §3.6 layout (Parquet rows with the header columns
and two event fields, checkpoints, and the `_audit` topic's AuditCount deltas of 8 audited
producers): this measures the audit, not the load. On local[2] it measures, in one run:

  summaries        the loads' _load_summary.json files counted from their rows (what the hourly
                   load writes as it commits; here, once, as for a warehouse from before them)
  audit_day        spark_apps.audit.run.run_audit over the 24 hours (results, indexes, GX
                   checkpoints, Data Docs, report pages), with its steps timed
  audit_hour       the same for one hour of the day (what the hourly DAG runs), steps timed;
                   --reps runs (default 3), the median reported
  copy_hour        spark.read.parquet(<one hour of every topic>).write.parquet(): a floor of
                   any load of that hour (a load also reads brokers, decodes Avro, dedups)

and compares the audit's cost per hour with the hourly load from bench/results/
spark_load.json (bench/spark_load.py) when it is there: with one hour of the same number of
topics loaded as the DAG does (one load per topic, `hour_of_topics`), and with the hour as
one load at the largest size's rows/s (a floor no real hour reaches); and with copy_hour.
Results: bench/results/audit.json and audit.png (the plot needs matplotlib:
.venv/bin/pip install -r bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import suite

from pipeline_warehouse.checkpoint import Warehouse
from pipeline_warehouse.filesystem import as_uri
from pipeline_warehouse.layout import AUDIT_RESULTS, AUDIT_TOPIC, LOAD_SUMMARIES
from pipeline_warehouse.load_index import scan_topic
from pipeline_warehouse.time_format import HOUR_MS, WINDOW_MS, hour_ms, parse_hour
from spark_apps.audit.reconcile import summarize
from spark_apps.audit.run import AuditOptions, run_audit
from spark_apps.hadoop_fs import HadoopFS

# the audit tests' warehouse writer: the §3.6 layout without a broker or a load
_synthetic = suite.load("tests/support/synthetic_warehouse.py")
AUDIT_SCHEMA, EVENT_SCHEMA = _synthetic.AUDIT_SCHEMA, _synthetic.EVENT_SCHEMA
write_load = _synthetic.write_load

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DAY = parse_hour("2026-11-22T00")
PRODUCERS = [f"web-{i:02d}-2f0c9e1a-7b7d-4c55-9a3e-{i:012d}" for i in range(8)]


def generate(root: Path, topics: int, events: int, seed: int = 7) -> dict[str, Any]:
    """One day of `events` events over `topics` topics, every one loaded and counted."""
    rng = np.random.default_rng(seed)
    per_load = events // (topics * 24)
    seq_next = np.zeros(len(PRODUCERS), dtype=np.int64)
    audit_rows: dict[int, list[dict[str, Any]]] = {h: [] for h in range(25)}
    started = time.perf_counter()
    for h in range(24):
        hour = DAY + timedelta(hours=h)
        start = hour_ms(hour)
        for t in range(topics):
            topic = f"topic_{t:02d}"
            times = start + np.sort(rng.integers(0, HOUR_MS, per_load))
            producer = rng.integers(0, len(PRODUCERS), per_load)
            seq = np.empty(per_load, dtype=np.int64)
            for p in range(len(PRODUCERS)):
                mask = producer == p
                n = int(mask.sum())
                seq[mask] = seq_next[p] + np.arange(n)
                seq_next[p] += n
            table = pa.table(
                {
                    "topic": pa.array(np.full(per_load, topic)),
                    "broker_id": pa.array(np.zeros(per_load, dtype=np.int32)),
                    "partition": pa.array((np.arange(per_load) % 8).astype(np.int32)),
                    "offset": pa.array(np.arange(per_load, dtype=np.int64) * 160),
                    "index": pa.array(np.zeros(per_load, dtype=np.int32)),
                    "event_time": pa.array(
                        times.astype("datetime64[ms]"), pa.timestamp("ms", tz="UTC")
                    ),
                    "server": pa.array(np.full(per_load, "web-1")),
                    "producer_id": pa.array(np.array(PRODUCERS)[producer]),
                    "seq": pa.array(seq),
                    "schema_id": pa.array(np.ones(per_load, dtype=np.int64)),
                    "load_hour": pa.array(np.full(per_load, hour.strftime("%Y-%m-%dT%H"))),
                    "page": pa.array(np.full(per_load, "/jobs")),
                    "user_id": pa.array(rng.integers(0, 1_000_000, per_load)),
                },
                schema=EVENT_SCHEMA,
            )
            write_load(root, topic, hour, table, committed_at=hour + timedelta(hours=1, minutes=5))
            windows = (times - times % WINDOW_MS).astype(np.int64)
            keys, counts = np.unique(np.stack([producer, windows]), axis=1, return_counts=True)
            for (p, w), n in zip(keys.T, counts, strict=True):
                arrival = int((w + WINDOW_MS + 5_000 - hour_ms(DAY)) // HOUR_MS)
                audit_rows[arrival].append(
                    {"p": int(p), "topic": topic, "window": int(w), "count": int(n)}
                )
    # A producer's AuditCount events take the seqs after its last event, one each, across
    # hours: the audit drops repeated (producer_id, seq) as duplicates, as it must.
    audit_seq = seq_next.copy()
    for h, rows in audit_rows.items():
        hour = DAY + timedelta(hours=h)
        records = []
        for i, r in enumerate(rows):
            seq = int(audit_seq[r["p"]])
            audit_seq[r["p"]] += 1
            records.append(
                {
                    "topic": AUDIT_TOPIC, "broker_id": 0, "partition": 0, "offset": i * 90, "index": 0,
                    "event_time": r["window"] + WINDOW_MS, "server": "web-1", "producer_id": PRODUCERS[r["p"]],
                    "seq": seq, "schema_id": 100, "load_hour": hour.strftime("%Y-%m-%dT%H"),
                    "event_topic": r["topic"], "tier": "producer", "window_start": r["window"],
                    "window_ms": WINDOW_MS, "count": r["count"],
                }
            )  # fmt: skip
        table = pa.Table.from_pylist(records, schema=AUDIT_SCHEMA)
        write_load(
            root, AUDIT_TOPIC, hour, table, committed_at=hour + timedelta(hours=1, minutes=5)
        )
    return {
        "events": per_load * topics * 24,
        "per_load": per_load,
        "seconds": time.perf_counter() - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--reps", type=int, default=3, help="runs of the hourly audit (the median is reported)"
    )
    args = parser.parse_args()

    from spark_apps.session import build_session

    work = Path(tempfile.mkdtemp(prefix="audit-bench-"))
    try:
        wh_path = work / "wh"
        print(f"generating {args.events:,} events, {args.topics} topics, 24 hours ...", flush=True)
        made = generate(wh_path, args.topics, args.events)
        wh = as_uri(str(wh_path))
        spark = build_session("audit bench", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        hours = [DAY + timedelta(hours=h) for h in range(24)]
        now = DAY + timedelta(days=1, hours=3)
        # The hourly load writes each hour's _load_summary.json as it commits; a warehouse
        # generated here (or loaded before summaries existed) has none: the first audit that
        # reads a load counts it from its rows once and writes it. Timed on its own.
        fs = HadoopFS(spark)
        warehouse = Warehouse(wh, fs)
        loads = [
            load
            for topic in warehouse.topics()
            if topic != AUDIT_TOPIC
            for load in scan_topic(warehouse, topic, DAY).loads.values()
        ]
        t = time.perf_counter()
        summarize(spark, fs, wh, loads)
        summaries_s = time.perf_counter() - t
        print(f"summaries   {summaries_s:8.1f} s  (once, from the rows of {len(loads)} loads)")
        # warm the JVM (first query compiles) on one hour, audit results discarded
        run_audit(spark, AuditOptions(warehouse=wh, hours=hours[:1], now=now, quality=False))
        # its results go; the summaries counted above, kept under _audit_results since
        # cce6b9b, stay (deleting them too made the day's audit count 480 loads from rows)
        results = wh_path / AUDIT_RESULTS
        for child in results.iterdir() if results.exists() else []:
            if child.name != LOAD_SUMMARIES:
                shutil.rmtree(child) if child.is_dir() else child.unlink()

        gc.collect()  # no measurement pays for collecting what the one before left
        t = time.perf_counter()
        day = run_audit(spark, AuditOptions(warehouse=wh, hours=hours, now=now))
        day_s = time.perf_counter() - t
        print(
            f"audit_day   {day_s:8.1f} s  {made['events'] / day_s:>12,.0f} rows/s  {day.timings}",
            flush=True,
        )
        # The hourly audit, --reps times (a re-audit of the hour each time, as the DAG's
        # retry or --also-reopened would run it); the median is reported. A spark-submit
        # starts with no other run's objects: each run starts after a full collection (the
        # day's audit left 0.4 s of GX's objects to collect, charged to the next run).
        hour_runs = []
        for _ in range(args.reps):
            # every run reads its loads, as the first audit of the hour does
            shutil.rmtree(wh_path / "_audit_results" / "_index", ignore_errors=True)
            gc.collect()
            t = time.perf_counter()
            hour = run_audit(spark, AuditOptions(warehouse=wh, hours=[hours[12]], now=now))
            hour_runs.append((time.perf_counter() - t, hour))
        hour_s, hour = sorted(hour_runs, key=lambda run: run[0])[len(hour_runs) // 2]
        rows_hour = made["per_load"] * args.topics
        print(
            f"audit_hour  {hour_s:8.2f} s  {rows_hour / hour_s:>12,.0f} rows/s  {hour.timings}"
            f"  (median of {[round(s, 3) for s, _ in hour_runs]})",
            flush=True,
        )

        dirs = [
            str(wh_path / f"topic_{i:02d}" / "load_hour=2026-11-22T12") for i in range(args.topics)
        ]
        gc.collect()
        t = time.perf_counter()
        spark.read.parquet(*dirs).write.mode("overwrite").parquet(str(work / "copy"))
        copy_s = time.perf_counter() - t
        print(f"copy_hour   {copy_s:8.1f} s  {rows_hour / copy_s:>12,.0f} rows/s", flush=True)
        spark.stop()

        reconcile_day = sum(
            v
            for k, v in day.timings.items()
            if k not in ("expectations and data docs", "report pages")
        )
        result: dict[str, Any] = {
            "command": " ".join(sys.argv),
            "events": made["events"],
            "topics": args.topics,
            "windows": len(day.results),
            "generate_s": made["seconds"],
            "summaries_from_rows_s": summaries_s,
            "audit_day": {
                "seconds": day_s,
                "rows_per_s": made["events"] / day_s,
                "steps_s": day.timings,
                "loads_counted_from_rows": day.loads_counted_from_rows,
                "contested_pairs": day.contested_pairs,
            },
            "audit_day_reconcile_per_hour_s": reconcile_day / 24,
            "audit_hour": {
                "seconds": hour_s,
                "seconds_each": [seconds for seconds, _ in hour_runs],
                "rows": rows_hour,
                "rows_per_s": rows_hour / hour_s,
                "steps_s": hour.timings,
                "loads_counted_from_rows": hour.loads_counted_from_rows,
                "contested_pairs": hour.contested_pairs,
            },
            "copy_hour": {"seconds": copy_s, "rows_per_s": rows_hour / copy_s},
            "statuses": day.status_counts(),
        }
        load = RESULTS / "spark_load.json"
        if load.exists():
            loaded = json.loads(load.read_text())
            rate = _load_rate(loaded)
            if rate:  # as if the hour were one load at the largest size's rate (a floor)
                load_hour_s = rows_hour / rate
                result["load_rows_per_s"] = rate
                result["audit_hour_vs_load_hour"] = (day_s / 24) / load_hour_s
                result["hourly_audit_vs_load_hour"] = hour_s / load_hour_s
            hour_load = loaded.get("hour_of_topics")
            if hour_load and hour_load.get("topics") == args.topics:
                # the hour as the DAG loads it: one load per topic (bench/spark_load.py)
                scale = rows_hour / hour_load["events"]
                result["load_hour_of_topics_s"] = hour_load["seconds"] * scale
                result["audit_hour_vs_topic_loads"] = (day_s / 24) / result["load_hour_of_topics_s"]
                result["hourly_audit_vs_topic_loads"] = hour_s / result["load_hour_of_topics_s"]
        result["audit_hour_vs_copy_hour"] = (day_s / 24) / copy_s
        statuses = result["statuses"]
        if set(statuses) != {"complete"}:  # every generated event was loaded and counted
            print(f"ERROR: the generated day does not reconcile: {statuses}", file=sys.stderr)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "audit.json").write_text(json.dumps(result, indent=1) + "\n")
        plot(result, args.out / "audit.png")
        print(
            json.dumps({k: v for k, v in result.items() if "vs" in k or k == "statuses"}),
            flush=True,
        )
        return 0 if set(statuses) == {"complete"} else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _load_rate(loaded: dict[str, Any]) -> float | None:
    """The hourly load's rows/s in spark_load.json: of its largest size (`sizes`, one entry
    per number of events loaded), or of its only one."""
    sizes = loaded.get("sizes")
    runs = sorted(sizes, key=lambda r: r.get("events", 0)) if isinstance(sizes, list) else [loaded]
    for run in reversed(runs):
        rate = run.get("logbroker_load", {}).get("rows_per_s") if isinstance(run, dict) else None
        if rate:
            return float(rate)
    return None


def plot(result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: pip install -r bench/requirements.txt)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in (
        (axes[0], "audit_day", "audit of one day"),
        (axes[1], "audit_hour", "audit of one hour"),
    ):
        steps = result[key]["steps_s"]
        ax.barh(list(steps), list(steps.values()), color="#4c78a8")
        ax.set_title(f"{title}: {result[key]['seconds']:.1f} s")
        ax.set_xlabel("seconds")
        ax.invert_yaxis()
    fig.suptitle(f"{result['events']:,} events, {result['topics']} topics, local[2]")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
