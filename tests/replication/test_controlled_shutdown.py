"""Controlled shutdown: a broker stopped with SIGTERM hands its leaderships over first.

Three real brokers. The proof that the moves came before the exit is ZooKeeper's own order
of changes: each moved partition's state was last written (its mzxid) before the stopping
broker's registration left /brokers/ids (the pzxid of /brokers/ids, its last child change).
"""

from __future__ import annotations

from three_brokers import leads, produce, three, wait_until

from logbroker.client.cluster import Cluster
from logbroker.coordination import paths
from logbroker.coordination import replication_state as replication
from logbroker.coordination.replication_state import Assignment, PartitionState


def test_sigterm_moves_leaderships_before_the_broker_exits(
    broker_factory, zk_chroot, zk_client
) -> None:
    # a timeout longer than BrokerProcess.stop waits: an exit code of 0 says it was not needed
    running = three(broker_factory, zk_chroot, controlled_shutdown_timeout_ms=60000)
    with Cluster(zk_chroot.connect) as cluster:
        created = cluster.create_replicated_topic("orders", 3, 3)
        victim = created[0].leader
        other = next(b for b in running if b != victim)
        # a partition whose ISR will be the victim alone: it cannot be handed over
        solo = Assignment("solo", 2, ((victim, other),))
        zk_client.create(replication.topic_path("solo"), solo.encode(), makepath=True)
        wait_until("solo's leader", lambda: cluster.partition_state("solo", 0) is not None)
        running[other].kill()
        wait_until(
            "solo's ISR to shrink", lambda: cluster.partition_state("solo", 0).isr == (victim,)
        )
        led = [p for p in created if p.leader == victim]
        for p in [*led, *cluster.describe_replicated("solo")]:
            wait_until(
                "the victim to lead", lambda p=p: leads(running[victim], p.topic, p.partition)
            )

        # acks=1 writes the victim takes last, as its SIGTERM comes: it holds back its
        # leaderships and waits for their followers to have all of it, so none is lost
        last = {
            p.partition: produce(running[victim], "orders", p.partition, [b"last"]) for p in led
        }

        assert running[victim].stop() == 0

        left = zk_client.exists(paths.BROKER_IDS).pzxid
        for p in cluster.describe_replicated("orders"):
            data, stat = zk_client.get(replication.partition_path("orders", p.partition))
            now = PartitionState.decode(data)
            assert victim not in now.isr and now.leader not in (victim, replication.NO_LEADER)
            assert stat.mzxid < left, f"orders-{p.partition} changed after the broker left"
            if p.partition in {q.partition for q in led}:
                assert now.leader_epoch == created[p.partition].state.leader_epoch + 1
        for partition, end in last.items():  # on the new leader, below its high watermark
            consumer = cluster.partition_consumer("orders", -1, partition)
            fetched = consumer.fetch("orders", partition, 0, 1 << 20)
            messages = list(fetched.messages())
            assert messages[-1].next_offset >= end and messages[-1].payload == b"last"
        wait_until("solo to go offline", lambda: not cluster.partition_state("solo", 0).online)
    log = running[victim].log_path.read_text()
    assert "leaderships handed over" in log and "still leading ['solo-0']" in log
