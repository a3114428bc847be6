"""`logbroker preferred-replica-election`, run as a user runs it, against three real brokers:
after a failover piled the leaders on two brokers, it gives them back to their first replica."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from three_brokers import three, wait_until

from logbroker.client.cluster import Cluster


def election(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logbroker.cli", "preferred-replica-election", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_leaders_go_back_to_their_preferred_replicas(broker_factory, zk_chroot) -> None:
    running = three(broker_factory, zk_chroot)
    with Cluster(zk_chroot.connect) as cluster:
        created = cluster.create_replicated_topic("orders", 6, 3)
        assert Counter(p.leader for p in created) == {0: 2, 1: 2, 2: 2}
        running[0].kill()
        wait_until("broker 0's leaders to move", lambda: 0 not in _leaders(cluster))
        running[0].start()
        wait_until(
            "broker 0 back in every ISR",
            lambda: all(0 in p.isr for p in cluster.describe_replicated("orders")),
        )
        piled = cluster.describe_replicated("orders")
        assert Counter(p.leader for p in piled) == {1: 3, 2: 3}  # on two brokers

        done = election("--zookeeper", zk_chroot.connect, "--topic", "orders")

        assert done.returncode == 0, done.stderr
        after = cluster.describe_replicated("orders")
        assert all(p.leader == p.replicas[0] for p in after)
        for p in (p.partition for p in created if p.leader == 0):
            epoch = after[p].state.leader_epoch
            assert epoch == created[p].state.leader_epoch + 2  # the failover, then this
            assert (
                f"orders-{p}: leader {piled[p].leader} -> 0 (leader epoch {epoch})" in done.stdout
            )
        assert "moved 2 of 6 partitions" in done.stdout
        assert not cluster.zk.exists("/replication/admin/preferred_replica_election")
    wrong = election("--zookeeper", zk_chroot.connect, "--topic", "nope")
    assert wrong.returncode == 1 and "'nope' is not a replicated topic" in wrong.stderr


def _leaders(cluster: Cluster) -> list[int]:
    return [p.leader for p in cluster.describe_replicated("orders")]
