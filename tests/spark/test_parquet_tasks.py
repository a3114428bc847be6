"""The load's two Parquet writers (parquet_tasks.py): Arrow's, in the tasks that read, and Spark's.

The same hour of a topic with every column type the source makes, and bad records among the
events, loaded once by each into its own warehouse: the checkpoints, the rows, the schema
Spark reads back (nullability included), the timestamps' Parquet type and the errors must
be the same; the Arrow writer's files are named, and carry the schema, as Spark's do.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from pipeline_warehouse.checkpoint import Warehouse
from spark_apps.hadoop_fs import open_warehouse
from spark_apps.load.parquet_tasks import (
    SPARK_SCHEMA_KEY,
    ParquetWriterChoiceError,
    TaskWrite,
    column_encodings,
    plan_write,
    use_arrow_writer,
    write_rows,
    write_split,
    written_schema,
)
from spark_apps.load.plan import plan_hour
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings
from spark_apps.source.ranges import RangeError

from .helpers import HEADER, PAGE_VIEW, AnalysisCluster, start_cluster

HOUR = "2026-11-22T10"
POINT = {
    "type": "record",
    "name": "Point",
    "fields": [{"name": "x", "type": "long"}, {"name": "label", "type": ["null", "string"]}],
}
RICH = {
    "type": "record",
    "name": "Rich",
    "namespace": "test",
    "fields": [
        {"name": "header", "type": HEADER},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "exact", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "point", "type": ["null", POINT]},
        {"name": "points", "type": {"type": "array", "items": "Point"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> AnalysisCluster:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("writers-cluster"), "writers")
    yield c
    c.stop()


def rich_event(seq: int, rng: random.Random) -> dict[str, Any]:
    def point() -> dict[str, Any]:
        return {"x": rng.randint(-(2**40), 2**40), "label": rng.choice([None, "", "é→"])}

    return {
        "header": {
            "timestamp": 1_795_000_000_000 + seq,
            "server": f"web-{seq % 3}",
            "producer_id": "p-rich",
            "seq": seq,
        },
        "flag": rng.random() < 0.5,
        "small": rng.randint(-(2**31), 2**31 - 1),
        "ratio": rng.random(),
        "exact": rng.uniform(-1e300, 1e300),
        "blob": rng.randbytes(rng.randint(0, 9)),
        "color": rng.choice(["RED", "GREEN"]),
        "digest": rng.randbytes(4),
        "seen": datetime(2026, 11, 22, 10, tzinfo=UTC) + timedelta(microseconds=seq * 977),
        "day": date(1969, 12, 25) + timedelta(days=seq),
        "price": Decimal(rng.randint(-(10**9), 10**9)) / 100,
        "point": rng.choice([None, point()]),
        "points": [point() for _ in range(rng.randint(0, 3))],
        "counts": {f"k{i}": rng.randint(0, 99) for i in range(rng.randint(0, 3))},
        "note": rng.choice([None, "a note", ""]),
    }


def ordered_rows(spark: Any, path: str) -> list[Any]:
    return spark.read.parquet(path).orderBy("broker_id", "partition", "offset", "index").collect()


def test_arrow_and_spark_writers_write_the_same_hour(spark, cluster, tmp_path):
    topic = "rich_events"
    cluster.register(topic, RICH)
    rng = random.Random(11)
    events = [cluster.codec().encode(topic, rich_event(seq, rng)) for seq in range(600)]
    cluster.produce(topic, [*events[:300], b"not an event", *events[300:], b"\x00garbage"])
    loaded = {}
    for writer in ("arrow", "spark"):
        wh = open_warehouse(str(tmp_path / writer), spark)
        settings = LoadSettings(
            zookeeper=cluster.live.connect,
            schema_registry=cluster.registry.connect,
            parquet_writer=writer,
        )
        loaded[writer] = (wh, load_hour(spark, wh, settings, topic, HOUR).checkpoint)
    (arrow_wh, arrow_cp), (spark_wh, spark_cp) = loaded["arrow"], loaded["spark"]
    assert (arrow_cp.rows, arrow_cp.bad_records) == (600, 2)
    assert arrow_cp.rows_sha256 == spark_cp.rows_sha256
    assert arrow_cp.partitions == spark_cp.partitions

    arrow_dir, spark_dir = arrow_wh.hour_dir(topic, HOUR), spark_wh.hour_dir(topic, HOUR)
    assert spark.read.parquet(arrow_dir).schema == spark.read.parquet(spark_dir).schema
    arrow_rows, spark_rows = ordered_rows(spark, arrow_dir), ordered_rows(spark, spark_dir)
    assert len(arrow_rows) == 600
    assert arrow_rows == spark_rows  # every value, maps and decimals and dates included
    assert {r.load_hour for r in arrow_rows} == {HOUR}
    seen = {r.seq: r.seen for r in arrow_rows}  # microseconds kept (TIMESTAMP(MICROS))
    assert all(seen[q] - seen[0] == timedelta(microseconds=977 * q) for q in seen)
    errors = [
        sorted(r.reason for r in spark.read.parquet(wh.errors_dir(topic, HOUR)).collect())
        for wh in (arrow_wh, spark_wh)
    ]
    assert errors[0] == errors[1] and len(errors[0]) == 2

    local = tmp_path / "arrow" / topic / f"load_hour={HOUR}"
    names = sorted(p.name for p in local.iterdir())
    data = [n for n in names if not n.startswith(("_", "."))]
    assert data and all(
        re.fullmatch(r"part-\d{5}-[0-9a-f]{32}-c000\.snappy\.parquet", n) for n in data
    )
    assert not [n for n in names if n.endswith(".inprogress")]  # no task's file left over
    footer = pq.read_metadata(local / data[0])
    stored = json.loads(footer.metadata[SPARK_SCHEMA_KEY])
    assert [f["name"] for f in stored["fields"]] == spark.read.parquet(arrow_dir).columns
    spark_file = next(
        p
        for p in (tmp_path / "spark" / topic / f"load_hour={HOUR}").iterdir()
        if p.name.endswith(".parquet")
    )
    for path in (local / data[0], spark_file):  # Parquet's standard timestamp in both
        event_time = pq.read_metadata(path).schema.column(5)
        assert event_time.name == "event_time"
        assert event_time.physical_type == "INT64"
        assert "isAdjustedToUTC=true" in str(event_time.logical_type)
        assert "microseconds" in str(event_time.logical_type)
    # The ascending header columns as deltas, the others with dictionaries (what Spark read
    # back above, row for row, from both writers' files)
    row_group = pq.read_metadata(local / data[0]).row_group(0)
    encodings = {
        row_group.column(i).path_in_schema: set(row_group.column(i).encodings)
        for i in range(row_group.num_columns)
    }
    for name in ("offset", "event_time", "seq"):
        assert "DELTA_BINARY_PACKED" in encodings[name], (name, encodings[name])
    for name in ("topic", "server", "color", "points.list.element.x", "counts.key_value.key"):
        assert "RLE_DICTIONARY" in encodings[name], (name, encodings[name])


def test_writer_choice():
    assert use_arrow_writer("auto", "file:///data/wh", "snappy")
    assert use_arrow_writer("auto", "file:///data/wh", "ZSTD")
    assert not use_arrow_writer("auto", "viewfs://cluster/wh", "snappy")
    assert not use_arrow_writer("auto", "file:///data/wh", "lzo")  # Arrow has no LZO
    assert not use_arrow_writer("spark", "file:///data/wh", "snappy")
    with pytest.raises(ParquetWriterChoiceError, match=r"hdfs://nn/wh .*--parquet-writer spark"):
        use_arrow_writer("arrow", "hdfs://nn/wh", "snappy")
    with pytest.raises(ParquetWriterChoiceError, match="the codec 'lzo'"):
        use_arrow_writer("arrow", "file:///data/wh", "lzo")
    with pytest.raises(ParquetWriterChoiceError, match="one of auto, arrow, spark"):
        use_arrow_writer("pyarrow", "file:///data/wh", "snappy")


def test_a_failed_task_leaves_no_file_and_leftovers_are_removed(spark, cluster, tmp_path):
    topic = "writer_failures"
    cluster.register(topic, PAGE_VIEW)
    cluster.produce(topic, [cluster.event(topic) for _ in range(120)])
    out = tmp_path / "rows"
    out.mkdir()
    (out / ".part-00007-0123-c000.snappy.parquet.inprogress").write_bytes(b"PAR1 cut")
    settings = LoadSettings(
        zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect
    )
    wh = Warehouse.open(str(tmp_path / "wh"))
    written = write_rows(spark, plan_hour(wh, settings, topic, HOUR, 2), out.as_uri())
    assert sum(w.rows for w in written) == 120 and not any(w.bad for w in written)
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.endswith(".inprogress")]  # the dead attempt's, removed
    assert pq.read_table(out).num_rows == 120

    # a task that fails after writing row groups (its range runs past the log's end): an
    # error naming the range, and no file, finished or in progress
    failing = plan_hour(wh, replace(settings, fetch_size=2048), topic, HOUR, 1)
    split = failing.splits[0]
    past_end = split.range._replace(end=split.range.end + 10_000)
    split = split._replace(range=past_end, owned_to=past_end.end)
    arrow_schema = to_arrow_schema(written_schema(failing.decoder.schema), timezone="UTC")
    task = TaskWrite(
        options=failing.options,
        decoder=failing.decoder,
        arrow_schema=arrow_schema,
        directory=(tmp_path / "failed").as_uri(),
        write_id="f" * 32,
        load_hour=HOUR,
        codec="snappy",
        suffix=".snappy",
        row_group_bytes=1,  # a row group per fetch: the file is open when the read fails
        encodings=column_encodings(arrow_schema),
    )
    (tmp_path / "failed").mkdir()
    with pytest.raises(RangeError, match="the log ends at offset"):
        write_split(task, 0, split)
    assert not list((tmp_path / "failed").iterdir())


def test_a_second_attempt_of_a_split_leaves_the_first_complete_file_alone(spark, cluster, tmp_path):
    """Speculation, or a retry beside a zombie: two attempts write one split. Each writes its
    own hidden `.<name>.<attempt>.inprogress`; the first complete one becomes the file and the
    other leaves nothing (it never replaces a file a reader may already have opened)."""
    topic = "writer_attempts"
    cluster.register(topic, PAGE_VIEW)
    cluster.produce(topic, [cluster.event(topic) for _ in range(90)])
    out = tmp_path / "rows"
    out.mkdir()
    settings = LoadSettings(
        zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect
    )
    plan = plan_hour(Warehouse.open(str(tmp_path / "wh")), settings, topic, HOUR, 2)
    task, splits = plan_write(spark, plan, out.as_uri())
    first = write_split(task, 0, splits[0])
    [final] = [p for p in out.iterdir() if p.name.startswith("part-00000-")]
    identity = (final.stat().st_ino, final.stat().st_mtime_ns)
    second = write_split(task, 0, splits[0])  # the speculative (or zombie) attempt
    assert second == first and first.rows > 0
    assert (final.stat().st_ino, final.stat().st_mtime_ns) == identity  # not replaced
    assert sorted(p.name for p in out.iterdir()) == [final.name]  # nothing else left behind
    assert pq.read_table(final).num_rows == first.rows


def test_max_bytes_per_partition_sets_how_many_tasks_read_and_write_a_range(
    spark, cluster, tmp_path
):
    """The load reads a range in one task (one file) up to max_bytes_per_partition, in
    pieces of equal bytes beyond: the same rows, rows_sha256 and checkpoint either way."""
    topic = "piece_sizes"
    cluster.register(topic, PAGE_VIEW)
    cluster.produce(topic, [cluster.event(topic) for _ in range(240)])
    loaded = {}
    for limit in (1024 * 1024 * 1024, 3000):
        wh = open_warehouse(str(tmp_path / str(limit)), spark)
        settings = LoadSettings(
            zookeeper=cluster.live.connect,
            schema_registry=cluster.registry.connect,
            min_partitions=1,
            max_bytes_per_partition=limit,
        )
        checkpoint = load_hour(spark, wh, settings, topic, HOUR).checkpoint
        hour_dir = tmp_path / str(limit) / topic / f"load_hour={HOUR}"
        files = [p for p in hour_dir.iterdir() if p.name.startswith("part-")]
        loaded[limit] = (checkpoint, files, ordered_rows(spark, wh.hour_dir(topic, HOUR)))
    (whole, whole_files, whole_rows), (pieces, piece_files, piece_rows) = loaded.values()
    ranges = [
        p.end_offset - p.start_offset for p in whole.partitions if p.end_offset > p.start_offset
    ]
    assert len(whole_files) == len(ranges)  # one task and file per range
    assert len(piece_files) == sum(-(-size // 3000) for size in ranges) > len(ranges)
    assert (pieces.rows, pieces.rows_sha256, pieces.partitions) == (
        whole.rows,
        whole.rows_sha256,
        whole.partitions,
    )
    assert piece_rows == whole_rows and len(whole_rows) == 240


def test_a_small_hour_is_written_by_the_driver_with_no_spark_job(spark, cluster, tmp_path):
    """Under driver_write_bytes the driver writes the files Spark's tasks write (the same
    names, rows, checkpoint and rows_sha256) and the load starts no Spark job at all: a
    job's own cost is most of a small topic's load (docs/performance.md, many topics)."""
    topic = "small_hour"
    cluster.register(topic, PAGE_VIEW)
    cluster.produce(topic, [cluster.event(topic) for _ in range(300)])
    sc = spark.sparkContext
    loaded = {}
    for limit in (0, 16 * 1024 * 1024):  # 0: Spark's tasks, always
        wh = open_warehouse(str(tmp_path / str(limit)), spark)
        settings = LoadSettings(
            zookeeper=cluster.live.connect,
            schema_registry=cluster.registry.connect,
            driver_write_bytes=limit,
        )
        group = f"small-hour-{limit}"
        sc.setJobGroup(group, "the load's jobs")
        try:
            checkpoint = load_hour(spark, wh, settings, topic, HOUR).checkpoint
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        jobs = len(sc.statusTracker().getJobIdsForGroup(group))
        hour_dir = tmp_path / str(limit) / topic / f"load_hour={HOUR}"
        files = sorted(
            p.name.split("-")[1] for p in hour_dir.iterdir() if p.name.startswith("part-")
        )
        loaded[limit] = (checkpoint, jobs, files, ordered_rows(spark, wh.hour_dir(topic, HOUR)))
    (tasks_cp, tasks_jobs, tasks_files, tasks_rows), (here_cp, here_jobs, here_files, here_rows) = (
        loaded.values()
    )
    assert tasks_jobs >= 1 and here_jobs == 0
    assert here_files == tasks_files and len(here_files) >= 2  # a file per split, as the tasks
    assert (here_cp.rows, here_cp.rows_sha256, here_cp.partitions) == (
        tasks_cp.rows,
        tasks_cp.rows_sha256,
        tasks_cp.partitions,
    )
    assert here_rows == tasks_rows and len(here_rows) == 300
