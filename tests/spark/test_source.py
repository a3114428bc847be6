"""The `logbroker` data source: raw rows, splits, offsets, data loss, and a resumed stream."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from logbroker.client.simple_consumer import SimpleConsumer
from spark_apps.source.options import SourceOptionError, parse_options

from .helpers import AnalysisCluster, start_cluster


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> AnalysisCluster:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("source-cluster"), "source")
    yield c
    c.stop()


def reader(spark, c: AnalysisCluster, **options: str):
    r = spark.read.format("logbroker").option("zookeeper", c.live.connect)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def test_raw_rows_every_message_once_through_splits_and_compression(spark, cluster):
    payloads = [f"m{i}".encode() for i in range(600)]
    cluster.produce("raw", payloads[:400])
    cluster.produce("raw", payloads[400:], codec="gzip", batch=100)
    df = reader(spark, cluster, subscribe="raw", maxBytesPerPartition="1500").load()
    assert df.columns == ["topic", "broker_id", "partition", "offset", "index", "value"]
    assert df.rdd.getNumPartitions() > 4  # 4 broker partitions, split further
    rows = df.collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(payloads)
    positions = Counter((r.broker_id, r.partition, r.offset, r["index"]) for r in rows)
    assert max(positions.values()) == 1
    inner = [r for r in rows if r["index"] > 0]  # messages inside compressed wrappers
    assert inner and all(r.value.startswith(b"m") for r in inner)

    # JSON offsets: from the middle of one partition (a message boundary) to the latest. The
    # producer picks partitions at random, so any one may be empty: the fullest is used.
    fullest = Counter((r.broker_id, r.partition) for r in rows).most_common(1)[0][0]
    name = f"{fullest[0]}-{fullest[1]}"
    offsets = sorted({r.offset for r in rows if (r.broker_id, r.partition) == fullest})
    start = offsets[len(offsets) // 2]
    part = reader(
        spark,
        cluster,
        assign=json.dumps({"raw": [name]}),
        startingOffsets=json.dumps({"raw": {name: start}}),
        endingOffsets=json.dumps({"raw": {name: -1}}),
    ).load()
    expected = sorted(
        r.offset for r in rows if (r.broker_id, r.partition) == fullest and r.offset >= start
    )
    assert expected and sorted(r.offset for r in part.collect()) == expected


def test_option_errors_name_the_option():
    with pytest.raises(SourceOptionError, match="zookeeper"):
        parse_options({"subscribe": "t"})
    with pytest.raises(SourceOptionError, match="startingOffsets is not JSON"):
        parse_options({"brokers": "127.0.0.1:1", "subscribe": "t", "startingOffsets": "{bad"})
    with pytest.raises(SourceOptionError, match="schemaRegistry"):
        parse_options({"brokers": "127.0.0.1:1", "subscribe": "t", "valueFormat": "avro"})


def test_retention_deleted_range_is_named_or_skipped(spark, zookeeper, zk_chroot, broker_factory):
    broker = broker_factory(0, zk=zk_chroot, log_file_size=400)
    c = AnalysisCluster(zookeeper, zk_chroot, zk_chroot, [broker])
    segments: list = []
    for _ in range(40):  # one append per producer: the segment rolls every other append
        c.produce("old", [b"x" * 60 for _ in range(3)])
        segments = sorted((broker.log_dir / "old-0").glob("*.kafka"))
        if len(segments) > 3:
            break
    assert len(segments) > 3
    assert broker.stop() == 0  # retention deletes whole segments from the front
    for segment in segments[:2]:
        segment.unlink()
    broker.start()
    with SimpleConsumer(*broker.address) as consumer:
        earliest = consumer.earliest_offset("old", 0)
    assert earliest == int(segments[2].name.split(".")[0])
    with pytest.raises(
        Exception, match=rf"'old' partition 0-0: offsets \[0, {earliest}\) .*deleted by retention"
    ):
        reader(
            spark, c, subscribe="old", startingOffsets=json.dumps({"old": {"0-0": 0}})
        ).load().collect()
    rows = (
        reader(
            spark,
            c,
            subscribe="old",
            failOnDataLoss="false",
            startingOffsets=json.dumps({"old": {"0-0": 0}}),
        )
        .load()
        .collect()
    )
    assert rows and min(r.offset for r in rows) == earliest


def test_streaming_query_resumes_without_loss_or_duplicates(spark, cluster, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run_once() -> None:
        stream = (
            spark.readStream.format("logbroker")
            .option("zookeeper", cluster.live.connect)
            .option("subscribe", "clicks")
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            stream.writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    cluster.produce("clicks", [f"a{i}".encode() for i in range(150)])
    run_once()
    cluster.produce("clicks", [f"b{i}".encode() for i in range(120)], codec="snappy")
    run_once()  # resumed from the checkpointed offsets
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        values = [bytes(r.value) for r in spark.read.parquet(out).collect()]
        if len(values) >= 270:
            break
        time.sleep(0.5)
    expected = [f"a{i}".encode() for i in range(150)] + [f"b{i}".encode() for i in range(120)]
    assert sorted(values) == sorted(expected)
