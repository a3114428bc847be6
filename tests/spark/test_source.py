"""The `logbroker` data source: raw rows, splits, offsets, data loss, a resumed stream, and
a stream's cap on each micro-batch (maxOffsetsPerTrigger)."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from logbroker.client.cluster import Cluster
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from spark_apps.source.admission import shares
from spark_apps.source.discovery import DiscoveryError
from spark_apps.source.options import SourceOptionError, parse_options
from spark_apps.source.ranges import PartitionRange, entries_end
from spark_apps.source.source import LogbrokerStreamReader

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


def stream(spark, c: AnalysisCluster, topic: str, **options: str):
    r = (
        spark.readStream.format("logbroker")
        .option("zookeeper", c.live.connect)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


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
    base = {"brokers": "127.0.0.1:1", "subscribe": "t"}
    for bad, line in [
        ("0", "maxOffsetsPerTrigger must be >= 1, got 0"),
        ("-5", "maxOffsetsPerTrigger must be >= 1, got -5"),
        ("ten", "maxOffsetsPerTrigger must be an integer, got 'ten'"),
        ("1.5", "maxOffsetsPerTrigger must be an integer, got '1.5'"),
    ]:
        with pytest.raises(SourceOptionError) as caught:
            parse_options({**base, "maxOffsetsPerTrigger": bad}, streaming=True)
        assert str(caught.value) == line
    assert parse_options({**base, "maxoffsetspertrigger": "500"}).max_offsets_per_trigger == 500
    with pytest.raises(SourceOptionError, match=r"unknown option\(s\) maxbytespertrigger"):
        parse_options({**base, "maxBytesPerTrigger": "1000"})  # never did anything: refused


def test_bad_cap_fails_the_stream_with_the_option_named(spark, cluster):
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be >= 1, got 0"):
        stream(spark, cluster, "clicks", maxOffsetsPerTrigger="0")


def test_cap_is_split_in_proportion_to_backlog_and_at_least_one_each():
    assert shares({"a": 600, "b": 300, "c": 100}, 10) == {"a": 6, "b": 3, "c": 1}
    assert shares({"a": 999, "b": 1, "c": 0}, 10) == {"a": 9, "b": 1}  # c has nothing
    assert shares({"a": 5, "b": 5, "c": 5}, 1) == {"a": 1, "b": 1, "c": 1}
    assert shares({"a": 0}, 10) == {}
    split = shares({i: 17 + 13 * i for i in range(9)}, 1000)
    assert 1000 - 9 < sum(split.values()) <= 1000


def test_entries_end_walks_to_a_message_boundary(zookeeper, zk_chroot, broker_factory):
    broker = broker_factory(0, zk=zk_chroot)
    c = AnalysisCluster(zookeeper, zk_chroot, zk_chroot, [broker])
    c.produce("walk", [b"s" * (i % 7) + b"x" * (i * 37 % 300) for i in range(40)], batch=1)
    c.produce("walk", [f"z{i}".encode() for i in range(25)], codec="gzip", batch=25)
    c.produce("walk", [b"big" * 200, b"", b"tail"], batch=1)
    with SimpleConsumer(*broker.address) as consumer:
        latest = consumer.latest_offset("walk", 0)
        ends = sorted({m.next_offset for m in consumer.iter_messages("walk", 0, 0)})
        assert len(ends) == 40 + 1 + 3 and ends[-1] == latest  # the wrapper: one entry
        r = PartitionRange("walk", 0, 0, 0, latest)
        for count in (1, 2, 39, 40, 41, 42, 44):
            # a fetch smaller than most entries: the walk grows it, entry by entry
            assert entries_end(consumer, r, count, fetch_size=64) == ends[count - 1]
        assert entries_end(consumer, r, 45) == latest
        assert entries_end(consumer, r, 0) == 0
        middle = r._replace(start=ends[9])
        assert entries_end(consumer, middle, 5, fetch_size=200) == ends[14]


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


def test_stream_far_behind_reads_in_micro_batches_within_the_cap(spark, cluster, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run_once() -> list[int]:
        """Rows of each micro-batch of one Trigger.AvailableNow run, whose first ends before
        the latest offsets it reports (reportLatestOffset: how far behind the stream is)."""
        query = (
            stream(spark, cluster, "backlog", maxOffsetsPerTrigger="60")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None
        source = query.recentProgress[0].sources[0]
        end, latest = json.loads(source.endOffset), json.loads(source.latestOffset)
        assert sum(end["backlog"].values()) < sum(latest["backlog"].values())
        return [p.numInputRows for p in query.recentProgress if p.numInputRows]

    first = [f"a{i:04d}".encode() for i in range(400)]  # alike in size: the split is exact
    cluster.produce("backlog", first, batch=10)
    rows = run_once()
    assert sum(rows) == 400
    assert max(rows) <= 60 and len(rows) >= 7  # 400 rows, 60 at most per micro-batch

    second = [f"b{i:04d}".encode() for i in range(150)]
    cluster.produce("backlog", second, batch=10)
    rows = run_once()  # resumed from the checkpointed offsets, capped again
    assert sum(rows) == 150
    assert max(rows) <= 60 and len(rows) >= 3
    values = [bytes(r.value) for r in spark.read.parquet(out).collect()]
    assert sorted(values) == sorted(first + second)  # every message exactly once


def test_cap_below_one_message_per_partition_advances_each_by_one(spark, cluster, tmp_path):
    plain = [f"p{i}".encode() for i in range(12)]
    wrapped = [f"w{i}".encode() for i in range(20)]
    cluster.produce("trickle", plain, batch=1)
    cluster.produce("trickle", wrapped, codec="gzip", batch=20)  # one entry of 20 messages
    batches: dict[int, list] = {}

    def keep(df, batch_id: int) -> None:
        batches[batch_id] = [
            (r.broker_id, r.partition, r.offset, bytes(r.value)) for r in df.collect()
        ]

    query = (
        stream(spark, cluster, "trickle", maxOffsetsPerTrigger="1")
        .writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    rows = [row for b in batches.values() for row in b]
    assert sorted(v for *_, v in rows) == sorted(plain + wrapped)
    entries = Counter((b, p) for b, p, _ in {r[:3] for r in rows})  # per partition
    nonempty = [batches[i] for i in sorted(batches) if batches[i]]
    assert len(nonempty) == max(entries.values())
    for k, batch in enumerate(nonempty):
        taken = Counter((b, p) for b, p, _ in {r[:3] for r in batch})
        # one entry from each partition with data left, whatever its share of the cap
        assert taken == {part: 1 for part, n in entries.items() if n > k}
    wrapped_in = [i for i, b in batches.items() if any(v.startswith(b"w") for *_, v in b)]
    assert len(wrapped_in) == 1  # the compressed set is one entry: never split


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


def test_stream_resumes_a_partition_whose_broker_was_down(
    spark, zookeeper, zk_chroot, broker_factory, tmp_path
):
    brokers = [broker_factory(i, zk=zk_chroot) for i in range(2)]
    c = AnalysisCluster(zookeeper, zk_chroot, zk_chroot, brokers)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def send(broker, payloads: list[bytes]) -> None:
        host, port = broker.address
        with Producer(broker_list=f"{broker.broker_id}:{host}:{port}", acks="ack") as p:
            p.send("down", payloads)

    def live(ids: set[int]) -> None:
        cluster = Cluster(c.live.connect)
        try:
            deadline = time.monotonic() + 30
            while set(cluster.live_brokers()) != ids:
                assert time.monotonic() < deadline, f"brokers {ids} not live in 30 s"
                time.sleep(0.1)
        finally:
            cluster.close()

    def run_once() -> None:
        query = (
            stream(spark, c, "down")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    a, b = [f"a{i}".encode() for i in range(30)], [f"b{i}".encode() for i in range(30)]
    send(brokers[0], a[:10])
    send(brokers[1], b[:10])
    live({0, 1})
    planner = LogbrokerStreamReader(
        parse_options({"zookeeper": c.live.connect, "subscribe": "down"}, streaming=True), None
    )
    start = {"down": {"0-0": 0, "1-0": 0}}
    end = planner.latestOffset(start, ReadAllAvailable())
    run_once()

    assert brokers[1].stop() == 0
    live({0})
    # planned while broker 1 was up, its range cannot be read now: stop, never skip it
    with pytest.raises(DiscoveryError, match=r"'down' partition 1-0 \[0, \d+\)"):
        planner.partitions(start, end)
    send(brokers[0], a[10:20])
    run_once()  # broker 1's offset is carried to the next micro-batch's end

    brokers[1].start()
    live({0, 1})
    send(brokers[1], b[10:20])
    run_once()  # broker 1 resumes where it was, not from 0
    values = [bytes(r.value) for r in spark.read.parquet(out).collect()]
    assert sorted(values) == sorted(a[:20] + b[:20])
