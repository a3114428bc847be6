"""The `logbroker` source on replicated topics (docs/replication.md), beside a 0.7 topic.

Three real brokers, a topic of replication factor 3, the shared SparkSession. What a user
relies on:

- each replicated partition is read once, from its leader (not once per replica), named `p`
  with broker id -1 in rows, `assign` and offsets JSON, and found with `zookeeper`;
- its latest offset is the leader's high watermark: what every in-sync replica holds, never
  the leader's own end beyond it;
- the option `brokers` cannot say who leads: a replicated topic is an error saying to use
  `zookeeper`, also when only its leader is listed; 0.7 topics read as before;
- a range is read on across a leader's kill -9, from the next leader at the same offset, and
  its rows_sha256 is the same on the old leader and the new.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from logbroker.client.cluster import Cluster
from logbroker.client.partition_reader import PartitionReader
from logbroker.stack.broker import BrokerProcess
from spark_apps.source.consumers import ClusterReads
from spark_apps.source.discovery import DiscoveryError, discover
from spark_apps.source.options import parse_options
from spark_apps.source.ranges import PartitionRange, digest_ranges, read_range

from .helpers import AnalysisCluster, start_cluster

REP = [b"rep %04d " % i + b"x" * (i % 17) for i in range(600)]
REP_GZIP = [b"gzip %04d" % i for i in range(90)]
PLAIN = [b"plain %04d" % i for i in range(100)]
ONE = [b"one %03d" % i for i in range(40)]


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> AnalysisCluster:
    c = start_cluster(
        zookeeper,
        tmp_path_factory.mktemp("source-replicated"),
        "source-replicated",
        brokers=3,
        # a paused follower stays in the ISR (a dead one leaves it with its ZooKeeper session)
        overrides={"replica.lag.time.max.ms": "30000", "replica.fetch.wait.max.ms": "200"},
    )
    try:
        c.create_replicated("rep", 3, 3)
        c.create_replicated("one", 1, 3)
        c.produce("rep", REP, batch=50, acks=-1, keyed=True)
        c.produce("rep", REP_GZIP, codec="gzip", batch=30, acks=-1, keyed=True)
        c.produce("one", ONE, acks=-1)
        c.produce("plain", PLAIN)
        yield c
    finally:
        c.stop()


def log_size(broker: BrokerProcess, topic: str, partition: int) -> int:
    directory = Path(broker.log_dir) / f"{topic}-{partition}"
    return sum(p.stat().st_size for p in directory.glob("*.kafka"))


def leader_of(c: AnalysisCluster, topic: str, partition: int) -> int:
    with Cluster(c.live.connect) as cluster:
        return cluster.leaders.leader(topic, partition)


def wait_until(what: str, check, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_each_replicated_partition_is_read_once_from_its_leader_named_p(spark, cluster):
    zk = cluster.live.connect
    states = discover(parse_options({"zookeeper": zk, "subscribePattern": "rep|plain"}))
    rep = [s for s in states if s.topic == "rep"]
    assert [(s.broker_id, s.partition, s.name) for s in rep] == [(-1, p, str(p)) for p in range(3)]
    for s in rep:  # the leader's offsets: after acks=-1, its whole log is below the watermark
        leader = cluster.broker(leader_of(cluster, "rep", s.partition))
        assert (s.host, s.port) == leader.address
        assert (s.earliest, s.latest) == (0, log_size(leader, "rep", s.partition)) and s.latest
    assert {s.topic for s in states} == {"rep", "plain"}
    assert all(s.broker_id >= 0 for s in states if s.topic == "plain")

    rows = (
        spark.read.format("logbroker")
        .option("zookeeper", zk)
        .option("subscribePattern", "rep|plain")
        .option("maxBytesPerPartition", "1500")  # split: segment starts from the leader
        .load()
        .collect()
    )
    rep_rows = [r for r in rows if r.topic == "rep"]
    assert sorted(bytes(r.value) for r in rep_rows) == sorted(REP + REP_GZIP)  # once each
    assert {(r.broker_id, r.partition) for r in rep_rows} == {(-1, 0), (-1, 1), (-1, 2)}
    assert max(Counter((r.partition, r.offset, r["index"]) for r in rep_rows).values()) == 1
    plain_rows = [r for r in rows if r.topic == "plain"]
    assert sorted(bytes(r.value) for r in plain_rows) == sorted(PLAIN)
    assert all(r.broker_id >= 0 for r in plain_rows)

    # assign and offsets JSON name a replicated partition by its number
    offsets = sorted({r.offset for r in rep_rows if r.partition == 1})
    start = offsets[len(offsets) // 2]
    part = (
        spark.read.format("logbroker")
        .option("zookeeper", zk)
        .option("assign", json.dumps({"rep": ["1"]}))
        .option("startingOffsets", json.dumps({"rep": {"1": start}}))
        .option("endingOffsets", json.dumps({"rep": {"1": -1}}))
        .load()
        .collect()
    )
    assert sorted(bytes(r.value) for r in part) == sorted(
        bytes(r.value) for r in rep_rows if r.partition == 1 and r.offset >= start
    )
    with pytest.raises(Exception, match=r"assigned partitions not served.*rep 1-1"):
        spark.read.format("logbroker").option("zookeeper", zk).option(
            "assign", json.dumps({"rep": ["1-1"]})
        ).load().collect()


def test_latest_is_the_high_watermark_never_the_leaders_end_beyond_it(cluster):
    zk = cluster.live.connect
    options = parse_options({"zookeeper": zk, "subscribe": "one"})
    leader_id = leader_of(cluster, "one", 0)
    leader = cluster.broker(leader_id)
    [before] = discover(options)
    assert before.latest == log_size(leader, "one", 0)
    followers = [b for b in cluster.brokers if b.broker_id != leader_id]
    for f in followers:  # they stop fetching: the leader's end grows, its watermark cannot
        os.kill(f.pid, signal.SIGSTOP)
    try:
        cluster.produce("one", [b"unreplicated %02d" % i for i in range(20)], acks=1)
        grown = log_size(leader, "one", 0)
        [paused] = discover(options)
    finally:
        for f in followers:
            os.kill(f.pid, signal.SIGCONT)
    assert grown > before.latest
    assert paused.latest == before.latest  # the high watermark, not the leader's end
    wait_until("the followers' catching up", lambda: discover(options)[0].latest == grown)


def test_the_brokers_option_refuses_a_replicated_topic_saying_to_use_zookeeper(cluster):
    every = ",".join(f"127.0.0.1:{b.port}" for b in cluster.brokers)
    with pytest.raises(DiscoveryError, match=r"'rep'.* replicated.*'zookeeper'"):
        discover(parse_options({"brokers": every, "subscribe": "rep"}))
    # Listed alone, the leader of a one-partition topic serves it as a 0.7 broker would;
    # it is found all the same (it says where its leader epochs end).
    leader = cluster.broker(leader_of(cluster, "one", 0))
    with pytest.raises(DiscoveryError, match=r"'one'.* replicated.*'zookeeper'"):
        discover(parse_options({"brokers": f"127.0.0.1:{leader.port}", "subscribe": "one"}))
    plain = discover(parse_options({"brokers": every, "subscribe": "plain"}))
    assert plain and all(s.broker_id >= 0 for s in plain)


def test_a_range_is_read_on_across_a_leader_kill_at_the_same_offset(cluster):
    zk = cluster.live.connect
    state = discover(parse_options({"zookeeper": zk, "subscribe": "rep"}))[0]
    r = PartitionRange("rep", -1, state.partition, 0, state.latest)
    with Cluster(zk) as c, ClusterReads(c) as reads_for:
        before = digest_ranges(reads_for, [r])
        expected = [
            (o, i, p)
            for chunk in read_range(reads_for(r), r)
            for o, i, p in zip(chunk.offsets, chunk.indexes, chunk.payloads, strict=True)
        ]
    dead = cluster.broker(leader_of(cluster, "rep", r.partition))
    got = []
    with PartitionReader.connect(zk, "rep", r.partition, leader_timeout_ms=60000) as reader:
        chunks = read_range(reader, r, fetch_size=512)
        first = next(chunks)
        assert reader.leader is not None and reader.leader.id == dead.broker_id
        dead.kill()  # kill -9, with a fetch on its way
        try:
            for chunk in [first, *chunks]:
                got += zip(chunk.offsets, chunk.indexes, chunk.payloads, strict=True)
            assert reader.leader.id != dead.broker_id
        finally:
            dead.start()
    assert [(int(o), int(i), bytes(p)) for o, i, p in got] == [
        (int(o), int(i), bytes(p)) for o, i, p in expected
    ]  # every message once, in order, none lost at the switch
    with Cluster(zk) as c, ClusterReads(c) as reads_for:
        assert digest_ranges(reads_for, [r]) == before  # the same bytes on the new leader

    def back_in_isr() -> bool:
        with Cluster(zk) as c:
            return all(dead.broker_id in p.isr for p in c.describe_replicated("rep"))

    wait_until("the restarted broker back in the ISR", back_in_isr)
