"""Benchmark: the hourly load from a two-broker analysis cluster into Parquet, beside Spark's
own JSON load of the same events (`spark.read.json(...).write.parquet`), in the same run.

    .venv/bin/python bench/spark_load.py                       # 2,000,000 events (the goal)
    .venv/bin/python bench/spark_load.py --events 200000       # a quick run
    .venv/bin/python bench/spark_load.py --events 100000 --standalone   # + a standalone cluster
    .venv/bin/python bench/spark_load.py --read-side-only --reps 5   # the read side alone
    .venv/bin/python bench/spark_load.py --events 200000 --message-format 0.7,0.8   # + 0.8

For each size it measures, on local[2], --reps times in turn (default 3; the median is
reported, and every repetition in the JSON: Spark's JVM warms up over the first jobs):
  logbroker_load   spark_apps.load.run.load_hour into a new warehouse: read (Avro,
                   bulk-decoded in the Python workers) and write once, rows_sha256, the
                   duplicate check, commit; its phases are reported. The tasks that read
                   write the Parquet files with Arrow's writer (--parquet-writer auto on a
                   file:// warehouse; spark_apps/load/parquet_tasks.py)
  logbroker_load_spark_writer
                   the same load with --parquet-writer spark: the source's batches written
                   by Spark's own writer (what a warehouse off file:// gets)
  source_only      spark.read.format("logbroker") ... .write.parquet(): the data source alone
  json_load        spark.read.json(<JSON lines on local disk>).write.parquet(), as the
                   issue wrote it: Spark infers the schema, a second pass over the file
  json_load_schema spark.read.schema(S).json(<the same file>).write.parquet(): the JSON load
                   as an hourly job runs it, given the events' schema (S, inferred once
                   before the timing); the peer at its best, and the one the goal compares
  api_ceiling      a Python data source that yields one prebuilt Arrow batch of the same
                   columns (7,000 rows, a 1 MiB fetch's worth) over and over, .write.parquet():
                   Spark's Python Data Source API with no broker and no decoding, the most
                   any Python source reaches here
  read_side        the load's read side alone, in this process after the load (no Spark):
                   the source's walk of every fetch of the load's ranges (CRC checks, the
                   payloads into Arrow's buffers: ranges.read_range, Chunk.values) and the
                   rows_sha256 thread's read (ranges.digest_ranges, names included); the
                   seconds (and this process's CPU seconds) of each
--message-format 0.7,0.8 adds, for each size, a 0.8-format topic (logical offsets, keys: a
key names the event's user, every third event has none; 4 partitions of replication factor 1
over the two brokers' 0.8 listeners, as the 0.7 topic's 2 x 2) with the same events, and
measures in each repetition, after the 0.7 topic's measures:
  logbroker_load_08, source_only_08   logbroker_load and source_only of the 0.8 topic
reported under "message_formats" in the JSON ({"0.7": ..., "0.8": ..., "ratio_08_vs_07"})
and in the table. The 0.7 topic is always measured: the peers are read from it.
the peak memory of the driver and its JVM (RSS, every 0.1 s) and the Python workers (PSS: a
page shared by the forked workers counted once; every 0.3 s), together and each,
and the CPU seconds each of those (and the brokers) spent: where the time goes.
Two sizes (--events/4 and --events) show whether memory grows with the number of events.
--standalone starts a Spark master and worker (spark-class, 127.0.0.1), runs the same load
there by spark-submit, and stops them by PID. Results: bench/results/spark_load.json and
spark_load.png (the plot needs matplotlib: .venv/bin/pip install -r bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import suite

from logbroker.stack.zookeeper import ZooKeeperServer
from pipeline_warehouse.checkpoint import Warehouse
from spark_apps.hadoop_fs import open_warehouse
from spark_apps.load.event_names import NameKeys
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings
from spark_apps.session import build_session
from spark_apps.source.consumers import ClusterReads
from spark_apps.source.ranges import PartitionRange, digest_ranges, read_range

# the Spark tests' two-broker analysis cluster and their event schema
_helpers = suite.load("tests/spark/helpers.py")
PAGE_VIEW, start_cluster = _helpers.PAGE_VIEW, _helpers.start_cluster

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


EXCLUDED: set[int] = set()  # ZooKeeper and the brokers: not the load's memory


class PeakMemory(threading.Thread):
    """Peak summed memory of this process and its descendants (the JVM, the Python
    workers), ZooKeeper and the brokers excluded; and the peak of each of the three groups.
    The workers' PSS, not RSS: they are forked from one daemon and share its pages, which
    RSS counts once per worker. Idle Python workers of earlier jobs are counted too: Spark
    keeps them for reuse."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.peaks = {"driver": 0, "jvm": 0, "python_workers": 0}
        self.stop = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        workers, tick = 0, 0
        while not self.stop.is_set():
            groups = dict.fromkeys(self.peaks, 0)
            with contextlib.suppress(psutil.Error):
                groups["driver"] = me.memory_info().rss
            # A worker's PSS reads its smaps (~1.4 ms): every third sample, not to load the
            # CPU being measured (the JVM's would cost more, and it shares nothing: RSS).
            count_workers = tick % 3 == 0
            if count_workers:
                workers = 0
            for child in me.children():
                if child.pid in EXCLUDED:
                    continue
                with contextlib.suppress(psutil.Error):
                    groups["jvm"] += child.memory_info().rss
                    for worker in child.children(recursive=True) if count_workers else ():
                        with contextlib.suppress(psutil.Error):
                            workers += worker.memory_full_info().pss
            groups["python_workers"] = workers
            self.peak = max(self.peak, sum(groups.values()))
            for k, v in groups.items():
                self.peaks[k] = max(self.peaks[k], v)
            tick += 1
            time.sleep(0.1)

    def __enter__(self) -> PeakMemory:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


def cpu_seconds() -> dict[str, float]:
    """CPU time (user + system, s) so far of: this process (the driver's Python), the JVM
    (Spark's driver and executors in local mode), the Python workers under it (exited
    ones through their parent's children times), and the brokers + ZooKeeper."""
    me = psutil.Process()
    own = me.cpu_times()
    out = {"driver": own.user + own.system, "jvm": 0.0, "python_workers": 0.0, "brokers": 0.0}
    for child in me.children():
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            if child.pid in EXCLUDED:
                out["brokers"] += times.user + times.system
                continue
            out["jvm"] += times.user + times.system
            for worker in child.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    t = worker.cpu_times()
                    out["python_workers"] += t.user + t.system + t.children_user + t.children_system
    return out


def event_record(seq: int) -> dict[str, Any]:
    """The benchmark's event number `seq` (a PAGE_VIEW)."""
    return {
        "header": {
            "timestamp": 1_795_000_000_000 + seq,
            "server": f"web-{seq % 16:02d}.example.com",
            "producer_id": "8d1b4c7a-9e6f-4a2b-b3c4-d5e6f7a8b9c0",
            "seq": seq,
        },
        "user_id": seq * 7919 % 1_000_003,
        "page": f"/articles/{seq % 5000}/a-readable-slug-for-the-page",
        "referrer": None if seq % 3 else "https://search.example.com/?q=logs",
        "tags": ["news", "tech"][: seq % 3],
    }


def event_key(seq: int) -> str | None:
    """The key of event `seq` in the 0.8-format topic: its user, none for every third."""
    return None if seq % 3 == 0 else f"user-{event_record(seq)['user_id']}"


def produce08(cluster: Any, topic: str, n: int) -> int:
    """The same n events as produce() to a 0.8-format topic, keyed (event_key), in calls of
    500 (a set per partition); acknowledged by the leader, so that a load started right
    after finds them all below the high watermark. Returns payload bytes (keys aside)."""
    writer = cluster.codec().writer(topic)
    total = 0
    from logbroker.client.producer import Producer

    with Producer(zk_connect=cluster.live.connect, request_required_acks=1) as producer:
        batch: list[tuple[str, str | None, bytes]] = []
        for seq in range(n):
            payload = writer.encode(event_record(seq))
            total += len(payload)
            batch.append((topic, event_key(seq), payload))
            if len(batch) == 500:
                producer.send_batch(batch)
                batch = []
        if batch:
            producer.send_batch(batch)
    return total


def produce(cluster: Any, topic: str, n: int, json_path: Path) -> int:
    """n events to the topic (batches of 500) and as JSON lines; returns payload bytes."""
    writer = cluster.codec().writer(topic)  # logbroker.serde: the subject's latest schema
    total = 0
    from logbroker.client.producer import Producer

    with Producer(zk_connect=cluster.live.connect) as producer, json_path.open("w") as out:
        batch: list[bytes] = []
        for seq in range(n):
            record = event_record(seq)
            payload = writer.encode(record)
            total += len(payload)
            batch.append(payload)
            out.write(json.dumps(record) + "\n")
            if len(batch) == 500:
                producer.send(topic, batch)
                batch = []
        if batch:
            producer.send(topic, batch)
    return total


# -- the Python Data Source API's ceiling ---------------------------------------------

CEILING_DDL = (
    "topic string, broker_id int, partition int, offset bigint, index int, "
    "event_time timestamp, server string, producer_id string, seq bigint, schema_id bigint, "
    "user_id bigint, page string, referrer string, tags array<string>"
)  # the columns the logbroker source reads the events to (load_hour aside)
CEILING_BATCH_ROWS = 7_000


def ceiling_batch(rows: int) -> Any:
    """An Arrow batch of CEILING_DDL's columns with the benchmark events' values."""
    import numpy as np
    import pyarrow as pa

    records = [event_record(seq) for seq in range(rows)]
    headers = [r["header"] for r in records]
    offsets = np.arange(rows, dtype=np.int64) * 150
    columns = [
        pa.array(["events"] * rows),
        pa.array(np.zeros(rows, np.int32)),
        pa.array(np.zeros(rows, np.int32)),
        pa.array(offsets),
        pa.array(np.zeros(rows, np.int32)),
        pa.array([h["timestamp"] * 1000 for h in headers], pa.timestamp("us", tz="UTC")),
        pa.array([h["server"] for h in headers]),
        pa.array([h["producer_id"] for h in headers]),
        pa.array([h["seq"] for h in headers], pa.int64()),
        pa.array(np.ones(rows, np.int64)),
        *(pa.array([r[f] for r in records]) for f in ("user_id", "page", "referrer")),
        pa.array([r["tags"] for r in records], pa.list_(pa.string())),
    ]
    names = [c.split()[0] for c in CEILING_DDL.split(", ")]
    return pa.RecordBatch.from_arrays(columns, names=names)


def register_ceiling(spark: Any) -> None:
    """format("ceiling"), option "rows": the API's ceiling source (two input partitions)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Share(InputPartition):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class Reader(DataSourceReader):
        def __init__(self, rows: int) -> None:
            self.rows = rows

        def partitions(self) -> list[Any]:
            return [Share(self.rows // 2), Share(self.rows - self.rows // 2)]

        def read(self, share: Any) -> Any:
            batch = ceiling_batch(CEILING_BATCH_ROWS)
            for start in range(0, share.rows, CEILING_BATCH_ROWS):
                yield batch.slice(0, min(CEILING_BATCH_ROWS, share.rows - start))

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ceiling"

        def schema(self) -> str:
            return CEILING_DDL

        def reader(self, schema: Any) -> Any:
            return Reader(int(self.options["rows"]))

    spark.dataSource.register(Ceiling)


def timed(fn: Any) -> tuple[float, int, Any, dict[str, float]]:
    """(seconds, peak memory, fn's result, CPU seconds per process group during it); the peak
    of each process group is in LAST_PEAKS."""
    with PeakMemory() as mem:
        before = cpu_seconds()
        t = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - t
        after = cpu_seconds()
    LAST_PEAKS.clear()
    LAST_PEAKS.update(mem.peaks)
    return elapsed, mem.peak, result, {k: round(after[k] - before[k], 2) for k in after}


LAST_PEAKS: dict[str, int] = {}


def read_side(zookeeper: str, checkpoint: Any) -> dict[str, Any]:
    """The load's read side over a checkpoint's ranges, in this process: the source's walk
    (fetches, CRC checks, payloads into Arrow's buffers) and the rows_sha256 read (fetches,
    the digest's bytes, SHA-256, the names); wall and CPU seconds of each."""
    ranges = [
        PartitionRange(checkpoint.topic, p.broker_id, p.partition, p.start_offset, p.end_offset)
        for p in checkpoint.partitions
    ]
    out = read_ranges(zookeeper, ranges)
    assert out["messages"] == checkpoint.messages, (out["messages"], checkpoint.messages)
    assert out["rows_sha256"] == checkpoint.rows_sha256
    return out


def read_ranges(zookeeper: str, ranges: list[PartitionRange]) -> dict[str, Any]:
    """read_side's measure of `ranges`, and the messages and rows_sha256 it read."""
    from logbroker.client.cluster import Cluster

    ranges = [r for r in ranges if r.end > r.start]
    out: dict[str, Any] = {}
    with Cluster(zookeeper) as cluster, ClusterReads(cluster) as reads_for:
        t, cpu, rows = time.perf_counter(), time.process_time(), 0
        for r in ranges:
            for chunk in read_range(reads_for(r), r):
                rows += len(chunk.values)
        out["source_walk_s"] = time.perf_counter() - t
        out["source_walk_cpu_s"] = time.process_time() - cpu
        t, cpu = time.perf_counter(), time.process_time()
        digest = digest_ranges(reads_for, ranges, names=NameKeys())
        out["rows_sha256_s"] = time.perf_counter() - t
        out["rows_sha256_cpu_s"] = time.process_time() - cpu
        out["messages"] = rows
        out["rows_sha256"] = digest.rows_sha256
        assert sum(digest.messages.values()) == rows, (digest.messages, rows)
    out["seconds"] = out["source_walk_s"] + out["rows_sha256_s"]
    return out


FORMATS = ("0.7", "0.8")


def message_formats(text: str) -> tuple[str, ...]:
    """--message-format's value: formats from FORMATS, comma-separated; 0.7 always first
    (the peers are read from its topic)."""
    asked = [f.strip() for f in text.split(",") if f.strip()]
    wrong = [f for f in asked if f not in FORMATS]
    if wrong or not asked:
        raise argparse.ArgumentTypeError(
            f"{text!r}: message formats are one or more of {', '.join(FORMATS)}, comma-separated"
        )
    return tuple(f for f in FORMATS if f == "0.7" or f in asked)


def run_size(
    spark: Any,
    cluster: Any,
    n: int,
    work: Path,
    hour: str,
    reps: int = 1,
    formats: tuple[str, ...] = ("0.7",),
) -> dict[str, Any]:
    """The three measures `reps` times, in turn (load, source, JSON); medians reported.
    With "0.8" in `formats`, the load and the source of a 0.8-format topic of the same
    events too, after them in each repetition.

    Spark's JVM compiles its hot paths over the first few jobs (a 2,000,000-event write ran
    in 18.5, 12.0 and then 7.5 s on one session): repetitions in turn give each system the
    same warm-up, and the median is what a long-running session sees.
    """
    topic = f"events_{n}"
    cluster.register(topic, PAGE_VIEW)
    json_path = work / f"{topic}.jsonl"
    t = time.perf_counter()
    payload_bytes = produce(cluster, topic, n, json_path)
    print(
        f"  produced {n:,} events ({payload_bytes / n:.0f} bytes each) in {time.perf_counter() - t:.1f}s",
        flush=True,
    )
    topic08 = f"events08_{n}"
    if "0.8" in formats:
        from logbroker.client.cluster import Cluster

        cluster.register(topic08, PAGE_VIEW)
        with Cluster(cluster.live.connect) as admin:  # as many partitions as the 0.7 topic
            admin.create_replicated_topic(
                topic08, 2 * len(cluster.brokers), 1, message_format="0.8"
            )
        t = time.perf_counter()
        produce08(cluster, topic08, n)
        print(
            f"  produced the same {n:,} events to 0.8-format {topic08} in {time.perf_counter() - t:.1f}s",
            flush=True,
        )
    settings = LoadSettings(
        zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect
    )

    def source_only(topic: str = topic, suffix: str = "") -> None:
        (
            spark.read.format("logbroker")
            .option("zookeeper", cluster.live.connect)
            .option("subscribe", topic)
            .option("valueFormat", "avro")
            .option("schemaRegistry", cluster.registry.connect)
            .option("minPartitions", "2")
            .load()
            .write.mode("overwrite")
            .parquet(str(work / f"source{suffix}-{n}"))
        )

    def json_load() -> None:
        spark.read.json(json_path.as_uri()).write.mode("overwrite").parquet(str(work / f"json-{n}"))

    # What an hourly JSON job is given, as a user writes it once for the topic; inferring it
    # reads the whole file an extra time (1.5x the schema'd load's time at 2,000,000 events).
    json_schema = spark.read.json(json_path.as_uri()).schema

    def json_load_schema() -> None:
        (
            spark.read.schema(json_schema)
            .json(json_path.as_uri())
            .write.mode("overwrite")
            .parquet(str(work / f"json-schema-{n}"))
        )

    def api_ceiling() -> None:
        (
            spark.read.format("ceiling")
            .option("rows", str(n))
            .load()
            .write.mode("overwrite")
            .parquet(str(work / f"ceiling-{n}"))
        )

    spark_writer = LoadSettings(
        zookeeper=cluster.live.connect,
        schema_registry=cluster.registry.connect,
        parquet_writer="spark",
    )
    runs: dict[str, list[dict[str, Any]]] = {
        "logbroker_load": [],
        "logbroker_load_spark_writer": [],
        "source_only": [],
        "json_load": [],
        "json_load_schema": [],
        "api_ceiling": [],
        "read_side": [],
    }
    if "0.8" in formats:
        runs.update(logbroker_load_08=[], source_only_08=[])
    for rep in range(reps):
        wh = open_warehouse(str(work / f"wh-{n}-{rep}"), spark)  # a first load each time
        secs, peak, report, cpu = timed(lambda wh=wh: load_hour(spark, wh, settings, topic, hour))
        assert report.checkpoint.rows == n, report.summary()
        runs["logbroker_load"].append(
            {
                "seconds": secs,
                "peak": peak,
                "peaks": dict(LAST_PEAKS),
                "phases": report.seconds,
                "cpu": cpu,
            }
        )
        side = read_side(cluster.live.connect, report.checkpoint)
        runs["read_side"].append(
            {"seconds": side["seconds"], "peak": 0, "peaks": {}, "cpu": {}, "phases": side}
        )
        wh = open_warehouse(str(work / f"wh-spark-{n}-{rep}"), spark)
        secs, peak, report, cpu = timed(
            lambda wh=wh: load_hour(spark, wh, spark_writer, topic, hour)
        )
        assert report.checkpoint.rows == n, report.summary()
        runs["logbroker_load_spark_writer"].append(
            {
                "seconds": secs,
                "peak": peak,
                "peaks": dict(LAST_PEAKS),
                "phases": report.seconds,
                "cpu": cpu,
            }
        )
        for kind, fn in (
            ("source_only", source_only),
            ("json_load", json_load),
            ("json_load_schema", json_load_schema),
            ("api_ceiling", api_ceiling),
        ):
            secs, peak, _, cpu = timed(fn)
            runs[kind].append(
                {"seconds": secs, "peak": peak, "peaks": dict(LAST_PEAKS), "cpu": cpu}
            )
        if "0.8" in formats:
            wh = open_warehouse(str(work / f"wh08-{n}-{rep}"), spark)
            secs, peak, report, cpu = timed(
                lambda wh=wh: load_hour(spark, wh, settings, topic08, hour)
            )
            assert report.checkpoint.rows == n and report.checkpoint.logical, report.summary()
            runs["logbroker_load_08"].append(
                {
                    "seconds": secs,
                    "peak": peak,
                    "peaks": dict(LAST_PEAKS),
                    "phases": report.seconds,
                    "cpu": cpu,
                }
            )
            secs, peak, _, cpu = timed(lambda: source_only(topic08, "08"))
            runs["source_only_08"].append(
                {"seconds": secs, "peak": peak, "peaks": dict(LAST_PEAKS), "cpu": cpu}
            )
        print(
            f"  rep {rep + 1}: "
            + ", ".join(f"{k} {n / v[-1]['seconds']:,.0f} rows/s" for k, v in runs.items()),
            flush=True,
        )
    out: dict[str, Any] = {"events": n, "payload_bytes_avg": payload_bytes / n, "reps": reps}
    for kind, measured in runs.items():
        ordered = sorted(measured, key=lambda m: m["seconds"])
        median = ordered[len(ordered) // 2]
        out[kind] = {
            "seconds": median["seconds"],
            "rows_per_s": n / median["seconds"],
            "rows_per_s_each": [n / m["seconds"] for m in measured],
            "peak_pss_mb": max(m["peak"] for m in measured) / 2**20,
            "peak_pss_mb_by_process": {
                k: max(m["peaks"][k] for m in measured) / 2**20 for k in measured[0]["peaks"]
            },
            "cpu_seconds": median["cpu"],
            "cpu_seconds_each": [m["cpu"] for m in measured],
        }
        if "phases" in median:
            out[kind]["phases"] = median["phases"]
        print(
            f"  {kind:15} {n / median['seconds']:>10,.0f} rows/s (median of {reps})  peak "
            f"{out[kind]['peak_pss_mb']:,.0f} MB "
            f"{ {k: round(v) for k, v in out[kind]['peak_pss_mb_by_process'].items()} }  cpu {median['cpu']}  {median.get('phases', '')}",
            flush=True,
        )
    if "0.8" in formats:
        out["message_formats"] = by_format(out, topic, topic08)
        ratios = out["message_formats"]["ratio_08_vs_07"]
        print(
            "  0.8 / 0.7 (rows/s): "
            + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
            + f"  (seconds: {out['logbroker_load_08']['seconds']:.2f} vs "
            f"{out['logbroker_load']['seconds']:.2f})",
            flush=True,
        )
    load = out["logbroker_load"]["rows_per_s"]
    out["ratio_vs_json_inferred"] = load / out["json_load"]["rows_per_s"]
    out["ratio_vs_json_schema"] = load / out["json_load_schema"]["rows_per_s"]
    # the goal's ratio: against the JSON load at its best (the faster of the two)
    out["ratio_vs_json"] = load / max(
        out["json_load"]["rows_per_s"], out["json_load_schema"]["rows_per_s"]
    )
    return out


def by_format(out: dict[str, Any], topic: str, topic08: str) -> dict[str, Any]:
    """run_size's medians of the load and the source by message format, and 0.8's rows/s
    over 0.7's (under 1: the 0.8 topic is the slower)."""
    kinds = ("logbroker_load", "source_only")
    return {
        "0.7": {"topic": topic, **{k: out[k] for k in kinds}},
        "0.8": {"topic": topic08, **{k: out[f"{k}_08"] for k in kinds}},
        "ratio_08_vs_07": {k: out[f"{k}_08"]["rows_per_s"] / out[k]["rows_per_s"] for k in kinds},
    }


def read_side_only(cluster: Any, n: int, work: Path, reps: int) -> dict[str, Any]:
    """`n` events produced, then the read side of their ranges (what a first load of the
    hour reads) `reps` times, no Spark: the medians, and each repetition."""
    from spark_apps.load.plan import plan_hour

    topic = f"read_side_{n}"
    cluster.register(topic, PAGE_VIEW)
    produce(cluster, topic, n, work / f"{topic}.jsonl")
    settings = LoadSettings(
        zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect
    )
    wh = Warehouse.open(str(work / "wh-read-side"))
    ranges = plan_hour(wh, settings, topic, "2026-11-22T10", parallelism=2).ranges
    read_ranges(cluster.live.connect, ranges)  # warm-up: connections, page cache, imports
    each = []
    for rep in range(reps):
        each.append(read_ranges(cluster.live.connect, ranges))
        assert each[-1]["messages"] == n and each[-1]["rows_sha256"] == each[0]["rows_sha256"]
        print(f"  rep {rep + 1}: {each[-1]}", flush=True)
    keys = ("source_walk_s", "source_walk_cpu_s", "rows_sha256_s", "rows_sha256_cpu_s")
    out: dict[str, Any] = {"command": " ".join(sys.argv), "events": n, "reps": reps}
    out.update({k: statistics.median(e[k] for e in each) for k in keys})
    out["seconds"] = out["source_walk_s"] + out["rows_sha256_s"]
    out["ns_per_event"] = {k: out[k] / n * 1e9 for k in keys}
    out["each"] = each
    return out


def hour_of_topics(
    spark: Any, cluster: Any, topics: int, events: int, work: Path, reps: int
) -> dict[str, Any]:
    """One hour as the hourly DAG loads it: `events` spread over `topics` topics, each topic
    its own load_hour (plan, read and write, duplicate check, summary, commit), one after
    the other; timed `reps` times into fresh warehouses (median). What bench/audit_bench.py
    compares the audit of one hour with: its day has 20 topics and 416,660 events an hour."""
    names = [f"hour_{topics}_{i:02d}" for i in range(topics)]
    for name in names:
        cluster.register(name, PAGE_VIEW)
        produce(cluster, name, events // topics, work / f"{name}.jsonl")
    settings = LoadSettings(
        zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect
    )
    each = []
    # each topic's phases (load_hour's laps), the first rep's first topic left out: it pays
    # the session's first jobs (the Python workers' start, the readers' imports)
    laps: list[dict[str, float]] = []
    for rep in range(reps):
        wh = open_warehouse(str(work / f"wh-hour-{topics}-{rep}"), spark)
        started = time.perf_counter()
        for i, name in enumerate(names):
            report = load_hour(spark, wh, settings, name, "2026-11-22T10")
            print(f"    {report.summary()}", flush=True)
            if rep or i:
                laps.append(report.seconds)
        each.append(time.perf_counter() - started)
        print(
            f"  rep {rep + 1}: {topics} topics' loads of one hour in {each[-1]:.1f} s", flush=True
        )
    seconds = statistics.median(each)
    rows = (events // topics) * topics
    phases = sorted({k for lap in laps for k in lap})
    phase_s = {k: statistics.median(lap.get(k, 0.0) for lap in laps) for k in phases}
    print(f"  a topic's phases (median, s): {phase_s}", flush=True)
    return {
        "topics": topics,
        "events": rows,
        "seconds": seconds,
        "seconds_each": each,
        "rows_per_s": rows / seconds,
        "per_topic_s": seconds / topics,
        "per_topic_phases_s": phase_s,
        "per_topic_load_s": statistics.median(sum(lap.values()) for lap in laps),
    }


def standalone_load(cluster: Any, n: int, work: Path) -> dict[str, Any]:
    """Start a master and a worker from the installed pyspark; spark-submit the load there."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    spark_class = spark_home / "bin" / "spark-class"
    env = dict(
        os.environ,
        SPARK_HOME=str(spark_home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
    )
    master_port, ui = str(_free_port()), str(_free_port())
    procs = []
    try:
        master = subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", master_port, "--webui-port", ui],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        procs.append(master)
        url = f"spark://127.0.0.1:{master_port}"
        worker = subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port", str(_free_port()), "--work-dir", str(work / "spark-work"), url],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        procs.append(worker)
        topic = f"events_{n}"
        t = time.perf_counter()
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "spark-submit"), "--master", url,
                "--conf", "spark.ui.enabled=false", "--conf", f"spark.pyspark.python={sys.executable}",
                str(ROOT / "spark_apps" / "jobs" / "hourly_load.py"),
                "--zookeeper", cluster.live.connect, "--schema-registry", cluster.registry.connect,
                "--topics", topic, "--hour", "2026-11-22T10", "--warehouse", (work / "wh-standalone").as_uri(),
            ],
            env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        secs = time.perf_counter() - t
        print(done.stdout[-2000:])
        if done.returncode:
            print(done.stderr[-4000:])
        return {
            "events": n,
            "seconds_with_startup": secs,
            "exit": done.returncode,
            "summary": done.stdout.strip().splitlines()[-1:],
        }
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)


def _free_port() -> int:
    from logbroker.stack.zookeeper import find_free_port

    return find_free_port()


def plot(results: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot (.venv/bin/pip install -r bench/requirements.txt)")
        return
    sizes = results["sizes"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    kinds = [
        "logbroker_load",
        "logbroker_load_spark_writer",
        "source_only",
        "json_load",
        "json_load_schema",
        "api_ceiling",
    ]
    kinds = [k for k in kinds if all(k in s for s in sizes)]
    width = 0.8 / len(kinds)
    for i, kind in enumerate(kinds):
        xs = [j + i * width for j in range(len(sizes))]
        left.bar(xs, [s[kind]["rows_per_s"] for s in sizes], width, label=kind)
        right.bar(xs, [s[kind]["peak_pss_mb"] for s in sizes], width, label=kind)
    for ax, title in (
        (left, "rows/s (local[2])"),
        (right, "peak memory, MB (driver + JVM + workers' PSS)"),
    ):
        ax.set_xticks(
            [j + (len(kinds) - 1) * width / 2 for j in range(len(sizes))],
            [f"{s['events']:,} events" for s in sizes],
        )
        ax.set_title(title)
    left.legend(fontsize=8)  # the same colours on the right: its bars reach the top
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument(
        "--standalone", action="store_true", help="also run the load on a standalone cluster"
    )
    parser.add_argument(
        "--reps", type=int, default=3, help="repetitions of each measure, in turn (median)"
    )
    parser.add_argument(
        "--hour-topics",
        type=int,
        default=20,
        help="also load one hour of this many topics, one load each (0: not)",
    )
    parser.add_argument(
        "--hour-events", type=int, default=416_660, help="events in that hour, all topics"
    )
    parser.add_argument(
        "--only-hour",
        action="store_true",
        help="measure only the hour of topics; keep the sizes of the last spark_load.json",
    )
    parser.add_argument(
        "--read-side-only",
        action="store_true",
        help="no Spark: produce --events and time only the read side, --reps times "
        "(writes spark_load_read_side.json)",
    )
    parser.add_argument(
        "--message-format",
        type=message_formats,
        default=("0.7",),
        help="the topics' message formats to load, comma-separated: 0.7 (default), 0.7,0.8 "
        "(0.7 is always measured: the peers read its topic)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spark-load-bench-"))
    zk = ZooKeeperServer(work / "zk").start()
    formats: tuple[str, ...] = args.message_format
    port_08 = 0 if "0.8" in formats else None  # the brokers' 0.8 listeners, only if asked
    cluster = start_cluster(zk, work / "cluster", "bench", port_08=port_08)
    EXCLUDED.update(p for p in [zk.pid, *(b.pid for b in cluster.brokers)] if p)
    try:
        if args.read_side_only:
            side = read_side_only(cluster, args.events, work, args.reps)
            args.out.mkdir(parents=True, exist_ok=True)
            path = args.out / "spark_load_read_side.json"
            path.write_text(json.dumps(side, indent=1) + "\n")
            print(json.dumps({k: v for k, v in side.items() if k != "each"}))
            return 0
        spark = build_session(
            "bench spark_load", master="local[2]", conf={"spark.driver.memory": "2g"}
        )
        spark.sparkContext.setLogLevel("ERROR")
        register_ceiling(spark)
        results: dict[str, Any] = {"command": " ".join(sys.argv), "sizes": []}
        print("warm-up (JVM, Python workers; not reported):", flush=True)
        run_size(spark, cluster, 2000, work, "2026-11-22T09", formats=formats)
        if args.only_hour and (args.out / "spark_load.json").exists():
            results = json.loads((args.out / "spark_load.json").read_text())
        else:
            for n in (max(1, args.events // 4), args.events):
                print(f"{n:,} events:", flush=True)
                results["sizes"].append(
                    run_size(spark, cluster, n, work, "2026-11-22T10", args.reps, formats)
                )
        if args.hour_topics:
            print(
                f"one hour, {args.hour_events:,} events in {args.hour_topics} topics:", flush=True
            )
            results["hour_of_topics"] = hour_of_topics(
                spark, cluster, args.hour_topics, args.hour_events, work, args.reps
            )
        spark.stop()
        if args.standalone:
            results["standalone"] = standalone_load(cluster, max(1, args.events // 4), work)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "spark_load.json").write_text(json.dumps(results, indent=1) + "\n")
        plot(results, args.out / "spark_load.png")
        print(json.dumps({s["events"]: round(s["ratio_vs_json"], 2) for s in results["sizes"]}))
        if "0.8" in formats:
            print(
                json.dumps(
                    {
                        s["events"]: {
                            k: round(v, 3)
                            for k, v in s["message_formats"]["ratio_08_vs_07"].items()
                        }
                        for s in results["sizes"]
                        if "message_formats" in s
                    }
                )
            )
        if "hour_of_topics" in results:
            print(json.dumps({"hour_of_topics": results["hour_of_topics"]}))
    finally:
        cluster.stop()
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
