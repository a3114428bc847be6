"""The hourly load of a replicated topic across a leader's kill -9 (docs/replication.md).

Three real brokers, a topic of replication factor 3 produced with acks=-1, the shared
SparkSession for `load_hour` and, for the hour after the kill, the job itself
(`spark-submit spark_apps/jobs/hourly_load.py`, as the DAG runs it). What a user relies on:

- the checkpoints name the partitions `{"broker_id": -1, "partition": p}`, whichever broker
  leads them, and each hour starts where the previous one ended;
- the hour after the leader of a partition died loads from the new leader: every event
  produced with acks=-1 is in the warehouse exactly once;
- a backfill of the hour before the kill, read from the new leaders, has the same rows and
  rows_sha256, and `verify` agrees;
- the checkpoints' offsets mean the same messages on every replica: once the dead broker is
  back in the ISR, each replica's own log files hash to each hour's rows_sha256.
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from logbroker.client.cluster import Cluster
from logbroker.protocol.message_set import iter_messages
from logbroker.stack.broker import BrokerProcess
from spark_apps.hadoop_fs import open_warehouse
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings
from spark_apps.load.verify import verify

from .helpers import PAGE_VIEW, AnalysisCluster, load_command, load_env, start_cluster

TOPIC = "orders"
H10, H11 = "2026-11-22T10", "2026-11-22T11"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> AnalysisCluster:
    c = start_cluster(
        zookeeper,
        tmp_path_factory.mktemp("load-replicated"),
        "load-replicated",
        brokers=3,
        overrides={"replica.fetch.wait.max.ms": "200"},
    )
    yield c
    c.stop()


def checkpoint(wh: Path, hour: str) -> dict[str, Any]:
    return json.loads((wh / "_checkpoints" / TOPIC / f"{hour}.json").read_text())


def keys(spark, path: str) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    rows = spark.read.parquet(path).select("producer_id", "seq").collect()
    return [(r.producer_id, r.seq) for r in rows]


def replica_sha256(broker: BrokerProcess, cp: dict[str, Any]) -> str:
    """rows_sha256 (docs/design.md §3.6) of a checkpoint's ranges, from one replica's own files."""
    sha = hashlib.sha256()
    for p in sorted(cp["partitions"], key=lambda p: p["partition"]):
        directory = Path(broker.log_dir) / f"{cp['topic']}-{p['partition']}"
        segments = sorted(directory.glob("*.kafka"))
        assert segments and int(segments[0].stem) == 0, segments  # the log from offset 0
        log = b"".join(s.read_bytes() for s in segments)
        start, end = p["start_offset"], p["end_offset"]
        assert end <= len(log), f"broker {broker.broker_id} lacks {p} (its log: {len(log)})"
        previous, index = None, 0
        for m in iter_messages(log[start:end], start):
            index = index + 1 if m.offset == previous else 0
            previous = m.offset
            sha.update(struct.pack(">qii", m.offset, index, len(m.payload)) + m.payload)
    return sha.hexdigest()


def submit_load(c: AnalysisCluster, wh: Path, hour: str) -> subprocess.CompletedProcess[str]:
    # (a replicated topic is matched by the pattern too)
    command = load_command(c, wh, hour, "--topic-pattern", "ord.*")
    return subprocess.run(command, env=load_env(), capture_output=True, text=True, timeout=600)


def wait_until(what: str, check, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(900)  # two loads, a spark-submit, a backfill; generous on a loaded machine
def test_an_hour_after_a_leader_kill_loads_from_the_new_leader_and_backfills_identically(
    spark, cluster, tmp_path
):
    zk = cluster.live.connect
    cluster.register(TOPIC, PAGE_VIEW)
    cluster.create_replicated(TOPIC, 3, 3)
    wh_path = tmp_path / "wh"
    wh = open_warehouse(str(wh_path), spark)
    settings = LoadSettings(zookeeper=zk, schema_registry=cluster.registry.connect)

    first = [cluster.event(TOPIC) for _ in range(300)]
    cluster.produce(TOPIC, first, batch=25, acks=-1, keyed=True)
    load_hour(spark, wh, settings, TOPIC, H10)
    cp10 = checkpoint(wh_path, H10)
    assert [(p["broker_id"], p["partition"]) for p in cp10["partitions"]] == [
        (-1, 0),
        (-1, 1),
        (-1, 2),
    ]
    assert all(p["messages"] for p in cp10["partitions"]) and cp10["rows"] == 300

    second = [cluster.event(TOPIC) for _ in range(200)]
    cluster.produce(TOPIC, second[:100], batch=25, acks=-1, keyed=True)
    with Cluster(zk) as c:
        before = c.describe_replicated(TOPIC)[0]
    dead = cluster.broker(before.leader)
    dead.kill()  # kill -9 of partition 0's leader, between the two hours
    cluster.produce(TOPIC, second[100:], batch=25, acks=-1, keyed=True)  # to the new leaders

    done = submit_load(cluster, wh_path, H11)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    with Cluster(zk) as c:
        after = c.describe_replicated(TOPIC)[0]
    assert after.leader != dead.broker_id and dead.broker_id not in after.isr
    cp11 = checkpoint(wh_path, H11)
    assert [(p["broker_id"], p["partition"]) for p in cp11["partitions"]] == [
        (p["broker_id"], p["partition"]) for p in cp10["partitions"]
    ]
    ends = {p["partition"]: p["end_offset"] for p in cp10["partitions"]}
    assert {p["partition"]: p["start_offset"] for p in cp11["partitions"]} == ends
    # acks=-1 retried across the failover may store a set twice: dropped by the event's name
    assert cp11["rows"] == 200 and cp11["bad_records"] == 0
    messages = sum(p["messages"] for p in cp11["partitions"])
    assert messages == cp11["rows"] + cp11["duplicates_dropped"]
    loaded = keys(spark, wh.topic_dir(TOPIC))
    assert len(loaded) == len(set(loaded)) == 500  # every acknowledged event, exactly once
    assert set(loaded) == {("p-1", seq) for seq in range(cluster.seq - 500, cluster.seq)}

    rows10 = sorted(spark.read.parquet(*wh.data_files(wh.checkpoint(TOPIC, H10))).collect())
    report = load_hour(spark, wh, settings, TOPIC, H10)  # a backfill, from the new leaders
    assert report.backfill
    again = checkpoint(wh_path, H10)
    assert again["rows_sha256"] == cp10["rows_sha256"]
    assert again["partitions"] == cp10["partitions"]
    assert sorted(spark.read.parquet(*wh.data_files(wh.checkpoint(TOPIC, H10))).collect()) == (
        rows10
    )
    for hour in (H10, H11):
        result = verify(wh, TOPIC, hour, zookeeper=zk)
        assert result.ok, result.summary()

    dead.start()

    def back_in_isr() -> bool:
        with Cluster(zk) as c:
            return all(dead.broker_id in p.isr for p in c.describe_replicated(TOPIC))

    wait_until("the restarted broker back in every ISR", back_in_isr)
    for broker in cluster.brokers:  # the same offsets, the same messages, on every replica
        for cp in (cp10, cp11):
            assert replica_sha256(broker, cp) == cp["rows_sha256"], (broker.broker_id, cp)
