"""A replicated live topic mirrored into a replicated analysis topic loses nothing.

Two clusters of two brokers each in one ZooKeeper (chroots .../live and .../analysis); the
analysis brokers' default.replication.factor is 2, so the mirror creates the target topic
replicated, with the source's partition count. Each source partition p is read from its
leader and goes into target partition p (mirror/partition_map.py), written to that
partition's leader with acks=-1; a source leader killed mid-copy changes nothing of that.
"""

from __future__ import annotations

import signal
import uuid

from conftest import TwoClusters, wait_until

from logbroker.client.cluster import Cluster
from logbroker.client.producer import Producer

FAST_FAILOVER = {"zk_sessiontimeout_ms": 2000, "replica_fetch_wait_max_ms": 200}


def test_replicated_into_replicated_across_a_source_leader_failover(
    zookeeper, broker_factory, tmp_path
) -> None:
    root = f"/t/mirror-replicated-{uuid.uuid4().hex[:8]}"
    live = zookeeper.create_chroot(f"{root}/live")
    analysis = zookeeper.create_chroot(f"{root}/analysis")
    sources = {
        i: broker_factory(i, zk=live, replica_lag_time_max_ms=1500, **FAST_FAILOVER) for i in (0, 1)
    }
    targets = [
        broker_factory(i, zk=analysis, default_replication_factor=2, **FAST_FAILOVER)
        for i in (0, 1)
    ]
    c = TwoClusters(live, analysis, sources[0], targets[0], tmp_path, [])
    first = [f"order {i:04d}".encode() for i in range(600)]
    second = [f"order {i:04d}".encode() for i in range(600, 1200)]
    mirror = None
    try:
        with (
            Cluster(live.connect) as source,
            Producer(zk_connect=live.connect, request_required_acks=-1, retries=30) as producer,
        ):
            source.create_replicated_topic("orders", 3, 2)
            producer.send_batch([("orders", str(i), m) for i, m in enumerate(first)])
            mirror = c.start_mirror("--whitelist", "orders")
            wait_until(lambda: c.target_count("orders") >= len(first), what="the first half")
            sources[source.describe_replicated("orders")[0].leader].kill()
            producer.send_batch([("orders", str(i), m) for i, m in enumerate(second, 600)])
        everything = set(first + second)
        wait_until(lambda: everything <= set(c.target_payloads("orders")), what="everything copied")
        mirror.signal(signal.SIGTERM)
        assert mirror.wait() == 0, mirror.output()
    finally:
        if mirror is not None and mirror.running:
            mirror.kill()

    with Cluster(analysis.connect) as target:
        assert [len(p.replicas) for p in target.describe_replicated("orders")] == [2, 2, 2]
        assert "orders" not in target.topics()  # nothing under /brokers/topics: replicated only
    # source partition p went into target partition p, in its order (a message a rebalance
    # sent again appears twice, after its first copy)
    copied = c.target_partitions("orders")
    originals = c.target_partitions("orders", live.connect)
    assert sorted(copied) == sorted(originals) == ["0", "1", "2"]
    for name, payloads in copied.items():
        assert list(dict.fromkeys(payloads)) == list(dict.fromkeys(originals[name])), name
    # the mirror's offsets are named "<p>" and at the source's ends
    assert c.committed("orders") == c.source_ends("orders")
