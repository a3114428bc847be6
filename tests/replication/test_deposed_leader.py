"""A leader that cannot know it still leads takes no writes, at any acks (issue 49, item 5).

Kafka 0.8 lost acks=1 writes this way (Jepsen, 2013): a leader cut off from ZooKeeper, or
paused until its replacement took over, went on acknowledging writes that the new leader
never had. Here a leader whose ZooKeeper session is suspended or lost, or whose process was
paused for longer than kazoo allows a silent connection, answers NotLeaderForPartition
until ZooKeeper has confirmed its registration and its partitions' states again.

Real brokers and real ZooKeeper servers: the cut is the ZooKeeper server paused (SIGSTOP) on
a server of this test's own, the pause is the leader's process stopped.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from three_brokers import three as three_brokers
from three_brokers import wait_until

from logbroker.client.cluster import Cluster
from logbroker.client.connection import BrokerConnection
from logbroker.protocol.errors import NotLeaderForPartitionError
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import AckedProduceRequest, ProduceRequest
from logbroker.protocol.responses import decode_acked_produce_response
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZooKeeperServer


def acks_1(topic: str, payload: bytes) -> AckedProduceRequest:
    return AckedProduceRequest(False, (ProduceRequest(topic, 0, build_message_set([payload])),))


def log_bytes(broker: BrokerProcess, topic: str) -> bytes:
    directory = Path(broker.log_dir) / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.kafka")))


def answer_code(conn: BrokerConnection) -> int:
    [result] = decode_acked_produce_response(conn.receive())
    return result.error


def test_a_leader_paused_past_its_replacement_acknowledges_nothing_after(
    broker_factory, zk_chroot
) -> None:
    three = three_brokers(broker_factory, zk_chroot, replica_fetch_wait_max_ms=200)
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic("paused", 1, 3)
        old = p.leader
        wait_until(
            "every replica in sync", lambda: len(cluster.describe_replicated("paused")[0].isr) == 3
        )
        with BrokerConnection(*three[old].address) as conn:
            conn.send(acks_1("paused", b"before"))
            assert answer_code(conn) == 0
            os.kill(three[old].pid, signal.SIGSTOP)
            try:
                wait_until(
                    "a new leader",
                    lambda: cluster.describe_replicated("paused")[0].leader not in (old, -1),
                )
                # written while it sleeps: read by the old leader the moment it wakes, before
                # its ZooKeeper client can hear that it was replaced
                conn.send(acks_1("paused", b"after the failover"))
            finally:
                os.kill(three[old].pid, signal.SIGCONT)
            assert answer_code(conn) == NotLeaderForPartitionError.code
        assert cluster.describe_replicated("paused")[0].leader != old
    # the refused write was appended nowhere
    for broker in three.values():
        assert b"after the failover" not in log_bytes(broker, "paused")


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        yield server


def test_a_leader_cut_from_zookeeper_holds_back_until_it_is_confirmed(
    own_zookeeper: ZooKeeperServer, broker_factory
) -> None:  # the broker stops before its ZooKeeper does
    target = own_zookeeper.create_chroot("/cut")
    broker: BrokerProcess = broker_factory(0, zk=target, zk_sessiontimeout_ms=4000)
    with Cluster(target.connect) as cluster:
        cluster.create_replicated_topic("cut", 1, 1)
        wait_until("a leader", lambda: cluster.describe_replicated("cut")[0].leader == 0)
    with BrokerConnection(*broker.address) as conn:
        wait_until("the leader taking writes", lambda: _produced(conn, b"before") == 0)
        end = len(log_bytes(broker, "cut"))
        os.kill(own_zookeeper.pid, signal.SIGSTOP)  # type: ignore[arg-type]
        try:
            deadline = time.monotonic() + 30
            while (code := _produced(conn, b"during the cut")) == 0:
                assert time.monotonic() < deadline, "the leader took writes all through the cut"
                end = len(log_bytes(broker, "cut"))
                time.sleep(0.1)
            assert code == NotLeaderForPartitionError.code
            held = len(log_bytes(broker, "cut"))
            assert _produced(conn, b"still during the cut") == NotLeaderForPartitionError.code
            assert len(log_bytes(broker, "cut")) == held == end  # refused: nothing appended
        finally:
            os.kill(own_zookeeper.pid, signal.SIGCONT)  # type: ignore[arg-type]
        wait_until("writes taken again", lambda: _produced(conn, b"after") == 0, timeout=60)
    assert "holds back its leaderships" in broker.log_since()


def _produced(conn: BrokerConnection, payload: bytes) -> int:
    conn.send(acks_1("cut", payload))
    return answer_code(conn)
