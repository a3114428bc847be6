"""The `logbroker` source and the hourly load over a 0.8-format topic (issue 45 item 1).

Three real brokers, each with a Kafka 0.8 listener (port.08), a keyed 0.8-format topic of
replication factor 3 produced with acks=-1 (plain and gzip sets), the shared SparkSession.
What a user relies on:

- the source reads the topic through the leaders' 0.8 listeners: one row per message at its
  logical offset, with its `key` (null where it has none); a 0.7 query keeps its columns;
- the hourly load reads the events' names on the way, as for a 0.7 topic's plain sets (an
  hour without repeats runs no Spark check);
- the hourly load checkpoints logical offsets (message numbers) and says so
  (`"offsets": "logical"`), its rows_sha256 is the documented hash of the messages and keys,
  the next hour starts where it ended, and its backfill is identical;
- an hour after the leader of a partition was killed -9 loads from the new leader, and a
  backfill read there is identical;
- checkpoints written before 0.8-format topics (no `offsets`) read as byte offsets.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logbroker.client.cluster import Cluster
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.producer import Producer
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZooKeeperServer
from pipeline_warehouse.checkpoint import Checkpoint, WarehouseError
from spark_apps.hadoop_fs import open_warehouse
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings
from spark_apps.load.verify import verify
from spark_apps.source import register as register_source

from .helpers import PAGE_VIEW, AnalysisCluster

TOPIC = "clicks08"
H10, H11 = "2026-11-22T10", "2026-11-22T11"


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AnalysisCluster]:
    directory = tmp_path_factory.mktemp("load-format08")
    live = zookeeper.create_chroot("/spark-format08/analysis")
    registry = zookeeper.create_chroot("/spark-format08/registry")
    brokers: list[BrokerProcess] = []
    c = AnalysisCluster(zookeeper, live, registry, brokers)
    try:
        for i in range(3):
            brokers.append(
                BrokerProcess(
                    directory / f"broker-{i}",
                    broker_id=i,
                    zk_connect=live.connect,
                    port_08=0,
                    overrides={"zk.sessiontimeout.ms": "2000", "replica.fetch.wait.max.ms": "100"},
                ).start()
            )
        yield c
    finally:
        c.stop()


def wait_until(what: str, check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def produce08(c: AnalysisCluster, messages: list[tuple[str | None, bytes]], codec: str) -> None:
    with Producer(
        zk_connect=c.live.connect,
        compression_codec=codec,
        request_required_acks=-1,
        retries=40,
        retry_backoff_ms=100,
    ) as producer:
        for i in range(0, len(messages), 20):
            producer.send_batch([(TOPIC, k, v) for k, v in messages[i : i + 20]])


def keyed_events(c: AnalysisCluster, n: int) -> list[tuple[str | None, bytes]]:
    """n events, every third without a key; a key names the event's seq."""
    out = []
    for _ in range(n):
        seq = c.seq
        out.append((None if seq % 3 == 0 else f"user-{seq}", c.event(TOPIC)))
    return out


def checkpoint(wh: Path, hour: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((wh / "_checkpoints" / TOPIC / f"{hour}.json").read_text())
    return value


def hour_files(wh: Any, hour: str) -> list[str]:
    """The data files of the hour's committed version."""
    cp = wh.checkpoint(TOPIC, hour)
    assert cp is not None
    files: list[str] = wh.data_files(cp)
    return files


def sha256_08(c: AnalysisCluster, cp: dict[str, Any]) -> tuple[str, int]:
    """rows_sha256 of a checkpoint's logical ranges, as spark_apps/source/ranges.py documents
    it, read with the library's PartitionReader08."""
    sha, count = hashlib.sha256(), 0
    for p in sorted(cp["partitions"], key=lambda p: p["partition"]):
        with PartitionReader08.connect(c.live.connect, TOPIC, p["partition"]) as reader:
            for m in reader.iter_messages(p["start_offset"]):
                if m.offset >= p["end_offset"]:
                    break
                key = b"" if m.key is None else m.key
                sha.update(struct.pack(">qii", m.offset, 0, -1 if m.key is None else len(key)))
                sha.update(key + struct.pack(">i", len(m.payload)) + m.payload)
                count += 1
    return sha.hexdigest(), count


def loaded(spark: Any, files: list[str]) -> dict[int, bytes | None]:
    """seq -> key of the rows in `files`."""
    rows = spark.read.parquet(*files).select("seq", "key").collect()
    assert len(rows) == len({r.seq for r in rows})
    return {r.seq: (None if r.key is None else bytes(r.key)) for r in rows}


def expected_keys(events: list[tuple[str | None, bytes]], first_seq: int) -> dict[int, Any]:
    return {first_seq + i: (None if k is None else k.encode()) for i, (k, _) in enumerate(events)}


def test_checkpoints_say_their_kind_of_offsets_and_old_ones_read_as_byte() -> None:
    cp = Checkpoint("t", H10, (), 0, 0, 0, "0" * 64, "2026-11-22T11:00:00Z")
    old = json.loads(cp.to_json())
    assert "offsets" not in old  # byte offsets: written as before 0.8-format topics
    assert Checkpoint.from_json(json.dumps(old)).offsets == "byte"
    logical = Checkpoint.from_json(json.dumps({**old, "offsets": "logical"}))
    assert logical.logical and json.loads(logical.to_json())["offsets"] == "logical"
    assert list(json.loads(logical.to_json()))[:3] == ["topic", "load_hour", "offsets"]
    assert Checkpoint.from_json(json.dumps({**old, "offsets": "byte"})).offsets == "byte"
    with pytest.raises(WarehouseError, match="'offsets' is 'bytes', not one of byte, logical"):
        Checkpoint.from_json(json.dumps({**old, "offsets": "bytes"}))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_hourly_load_of_a_keyed_0_8_topic_in_logical_offsets_across_a_leader_kill(
    spark: Any, cluster: AnalysisCluster, tmp_path: Path
) -> None:
    zk = cluster.live.connect
    cluster.register(TOPIC, PAGE_VIEW)
    with Cluster(zk) as c:
        c.create_replicated_topic(TOPIC, 2, 3, message_format="0.8")
    for p in range(2):  # each leader's 0.8 listener serves the topic
        with PartitionReader08.connect(zk, TOPIC, p) as reader:
            assert reader.latest_offset() == 0

    first_seq = cluster.seq
    first = keyed_events(cluster, 100)
    produce08(cluster, first[:60], "none")
    produce08(cluster, first[60:], "gzip")  # wrappers: each inner message has its own offset

    # the source: rows at logical offsets, with their keys, read from the 0.8 listeners
    register_source(spark)
    raw = (
        spark.read.format("logbroker")
        .option("zookeeper", zk)
        .option("subscribe", TOPIC)
        .option("minPartitions", "5")  # logical ranges cut by message count
        .load()
    )
    assert raw.columns == ["topic", "broker_id", "partition", "offset", "index", "key", "value"]
    assert raw.rdd.getNumPartitions() >= 5  # the Kafka source's rule: shares round up
    rows = raw.collect()
    assert len(rows) == 100 and all(r.broker_id == -1 and r["index"] == 0 for r in rows)
    for p in (0, 1):  # message numbers: 0, 1, 2, ... in each partition
        offsets = sorted(r.offset for r in rows if r.partition == p)
        assert offsets == list(range(len(offsets)))
    sent = {v: (None if k is None else k.encode()) for k, v in first}
    assert {bytes(r.value): (None if r.key is None else bytes(r.key)) for r in rows} == sent

    wh_path = tmp_path / "wh"
    wh = open_warehouse(str(wh_path), spark)
    settings = LoadSettings(zookeeper=zk, schema_registry=cluster.registry.connect)
    report10 = load_hour(spark, wh, settings, TOPIC, H10)
    # its names were read on the way, gzip sets included: proved distinct without Spark
    assert "names" in report10.seconds and "dedup" not in report10.seconds, report10.seconds
    cp10 = checkpoint(wh_path, H10)
    assert cp10["offsets"] == "logical"
    assert [(p["broker_id"], p["partition"]) for p in cp10["partitions"]] == [(-1, 0), (-1, 1)]
    for p in cp10["partitions"]:  # logical: the range's length is its number of messages
        assert p["start_offset"] == 0 and p["end_offset"] == p["messages"] > 0
    assert cp10["rows"] == 100 and cp10["bad_records"] == 0
    assert sha256_08(cluster, cp10) == (cp10["rows_sha256"], 100)
    rows10 = loaded(spark, hour_files(wh, H10))
    assert rows10 == expected_keys(first, first_seq)

    # the leader of partition 0 is killed -9 between the hours: H11 is read from the new one
    with Cluster(zk) as c:
        before = c.describe_replicated(TOPIC)[0]
    dead = cluster.broker(before.leader)
    second_seq = cluster.seq
    second = keyed_events(cluster, 60)
    produce08(cluster, second[:30], "none")
    dead.kill()
    produce08(cluster, second[30:], "none")  # acks=-1, retried to the new leaders

    load_hour(spark, wh, settings, TOPIC, H11)
    with Cluster(zk) as c:
        after = c.describe_replicated(TOPIC)[0]
    assert after.leader != dead.broker_id
    cp11 = checkpoint(wh_path, H11)
    assert cp11["offsets"] == "logical"
    ends = {p["partition"]: p["end_offset"] for p in cp10["partitions"]}
    assert {p["partition"]: p["start_offset"] for p in cp11["partitions"]} == ends
    assert cp11["rows"] == 60  # a set retried across the failover: dropped by its name
    assert sum(p["messages"] for p in cp11["partitions"]) == 60 + cp11["duplicates_dropped"]
    assert loaded(spark, hour_files(wh, H11)) == expected_keys(second, second_seq)

    report = load_hour(spark, wh, settings, TOPIC, H10)  # a backfill, from the new leaders
    assert report.backfill
    again = checkpoint(wh_path, H10)
    assert (again["offsets"], again["partitions"], again["rows_sha256"]) == (
        "logical",
        cp10["partitions"],
        cp10["rows_sha256"],
    )
    assert loaded(spark, hour_files(wh, H10)) == rows10
    for hour in (H10, H11):
        result = verify(wh, TOPIC, hour, zookeeper=zk)
        assert result.ok, result.summary()
