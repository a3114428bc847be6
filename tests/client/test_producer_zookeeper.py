"""A producer that finds brokers through ZooKeeper, while brokers die and come back."""

from __future__ import annotations

import time

from logbroker.client.cluster import Cluster
from logbroker.client.producer import Producer


def wait_until(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_new_topic_goes_to_partition_0_of_every_live_broker(zk_chroot, broker_factory):
    broker_factory(0, zk=zk_chroot, num_partitions=3)
    broker_factory(1, zk=zk_chroot, num_partitions=3)
    with Producer(zk_connect=zk_chroot.connect, acks="ack") as p:
        wait_until(lambda: len(p.brokers.brokers()) == 2, what="two live brokers")
        # 0.7: a topic nobody has yet goes to partition 0 of every live broker
        assert p.brokers.partitions("fresh") == [(0, 0), (1, 0)]
        [first] = p.send("fresh", b"first")
        assert first.partition == 0
        # the broker that got it registers the topic with its 3 partitions; from then on
        # those are the topic's partitions (the other broker does not have the topic)
        owner = first.broker_id
        wait_until(
            lambda: p.brokers.partitions("fresh") == [(owner, 0), (owner, 1), (owner, 2)],
            what="topic registration",
        )
        targets = {(r.broker_id, r.partition) for _ in range(200) for r in p.send("fresh", b"m")}
        assert targets == {(owner, q) for q in range(3)}


def test_sending_goes_on_when_a_broker_dies_and_uses_it_again_after_restart(
    zk_chroot, broker_factory
):
    b0 = broker_factory(0, zk=zk_chroot, num_partitions=2)
    b1 = broker_factory(1, zk=zk_chroot, num_partitions=2)
    with Cluster(zk_chroot.connect) as cluster:
        cluster.create_topic("clicks", 2)
    with Producer(zk_connect=zk_chroot.connect, acks="ack", retry_backoff_ms=50) as p:
        wait_until(lambda: len(p.brokers.partitions("clicks")) == 4, what="4 partitions")
        b1.kill()
        sent_to = [r.broker_id for _ in range(100) for r in p.send("clicks", b"while one is down")]
        assert sent_to.count(0) == 100  # every message landed, all on the live broker
        assert p.stats.sent_messages == 100 and p.stats.failed_messages == 0
        # ZooKeeper notices the dead broker (session timeout) and the producer stops trying it
        wait_until(lambda: set(p.brokers.brokers()) == {0}, what="broker 1 to leave ZooKeeper")
        b1.start()
        wait_until(lambda: set(p.brokers.brokers()) == {0, 1}, what="broker 1 to come back")
        wait_until(lambda: len(p.brokers.partitions("clicks")) == 4, what="its partitions")
        sent_to = {r.broker_id for _ in range(100) for r in p.send("clicks", b"both up")}
        assert sent_to == {0, 1}
    assert b0.stop() == 0


def test_a_watch_that_loses_zookeeper_mid_read_keeps_its_view_quietly(zk_chroot, broker_factory):
    """A producer closing (or a session moving) while a watch reads its nodes: the watch
    keeps the last view instead of raising in kazoo's thread (a traceback on the console)."""
    from kazoo.client import KazooClient

    from logbroker.client.brokers import ZooKeeperBrokers

    broker_factory(0, zk=zk_chroot, num_partitions=2)
    client = KazooClient(hosts=zk_chroot.connect)
    client.start()
    brokers = ZooKeeperBrokers(client)
    wait_until(lambda: set(brokers.brokers()) == {0}, what="the live broker")
    assert brokers.partitions("clicks") == [(0, 0)]
    before = brokers.version
    client.stop()  # every read from here on raises a KazooException
    brokers._brokers_changed(["0", "1"])
    brokers._topic_changed("clicks", ["0"])
    assert set(brokers.brokers()) == {0}
    assert brokers.version == before
    client.close()
