"""The controller and the replicas' roles, with real brokers and a real ZooKeeper.

Three brokers; a replicated topic is created through ZooKeeper as `topics create
--replication-factor` does; the controller gives every partition a leader, spread over the
brokers. When a broker dies, the partitions it led get new leaders from their ISR, in a new
leader epoch, and the dead broker leaves every ISR; when the controller dies, another broker
takes over in a new controller epoch. With no live ISR member a partition is offline, never
led by a replica outside its ISR (unless unclean.leader.election.enable).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
from kazoo.exceptions import NoNodeError

from logbroker.client.cluster import Cluster, ReplicatedPartition
from logbroker.client.connection import BrokerConnection
from logbroker.coordination import replication_state as replication
from logbroker.protocol.errors import (
    LeaderNotAvailableError,
    NotLeaderForPartitionError,
    error_for_code,
)
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import AckedProduceRequest, FetchRequest, ProduceRequest
from logbroker.protocol.responses import decode_acked_produce_response, decode_fetch_response
from logbroker.stack.broker import BrokerProcess

SESSION_MS = 2000  # brokers' zk.sessiontimeout.ms: a killed broker's node goes within ~2 s


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def brokers(broker_factory, zk_chroot, count: int = 3, **overrides) -> dict[int, BrokerProcess]:
    return {
        i: broker_factory(broker_id=i, zk=zk_chroot, zk_sessiontimeout_ms=SESSION_MS, **overrides)
        for i in range(count)
    }


def produce(broker: BrokerProcess, topic: str, partition: int, payloads: list[bytes]) -> int:
    """An acked produce to one broker; its offset, or the error it answered, raised."""
    with BrokerConnection(*broker.address) as conn:
        body = conn.request(
            AckedProduceRequest(
                False, (ProduceRequest(topic, partition, build_message_set(payloads)),)
            )
        )
    [result] = decode_acked_produce_response(body)
    if result.error:
        raise error_for_code(result.error)
    return result.offset


def described(cluster: Cluster, topic: str) -> list[ReplicatedPartition]:
    return cluster.describe_replicated(topic)


def test_leaders_spread_then_move_when_a_broker_dies(broker_factory, zk_chroot) -> None:
    running = brokers(broker_factory, zk_chroot)
    with Cluster(zk_chroot.connect) as cluster:
        created = cluster.create_replicated_topic("orders", 6, 3)
        assert Counter(p.leader for p in created) == {0: 2, 1: 2, 2: 2}  # leaders spread
        assert all(p.leader == p.replicas[0] and set(p.isr) == {0, 1, 2} for p in created)
        assert created[0].line() == (
            f"Topic: orders\tPartition: 0\tLeader: {created[0].leader}\t"
            f"Replicas: {','.join(map(str, created[0].replicas))}\tIsr: "
            f"{','.join(map(str, created[0].isr))}"
        )
        # 0.7's view: not a per-broker topic
        assert "orders" not in cluster.topics()

        # the leader takes produces (its roles arrive by watch: wait for them), a follower says
        # who leads
        p0 = created[0]
        follower = next(b for b in p0.replicas if b != p0.leader)
        wait_until(
            "the leader to take produces", lambda: _accepts(running[p0.leader], p0.partition)
        )
        assert produce(running[p0.leader], "orders", 0, [b"a", b"b"]) >= 0
        wait_until(
            "the follower to know its role", lambda: _refusal(running[follower], 0) is not None
        )
        assert _refusal(running[follower], 0) is NotLeaderForPartitionError
        # a 0.7 FETCH to a follower: code Unknown (-1), the only refusal a 0.7 client knows
        with BrokerConnection(*running[follower].address) as conn:
            answer = decode_fetch_response(conn.request(FetchRequest("orders", 0, 0, 1024)))
        assert answer.error == -1

        victim = p0.leader
        led = {p.partition for p in created if p.leader == victim}
        epochs = {p.partition: p.state.leader_epoch for p in created}
        running[victim].kill()

        def moved() -> bool:
            return all(
                p.leader not in (victim, replication.NO_LEADER)
                for p in described(cluster, "orders")
                if p.partition in led
            )

        wait_until("new leaders for the dead broker's partitions", moved)
        # (the controller settles the partitions one after another: the others' ISRs follow)
        wait_until(
            "the dead broker out of every ISR",
            lambda: all(victim not in p.isr for p in described(cluster, "orders")),
        )
        after = described(cluster, "orders")
        for p in after:
            assert victim not in p.isr and p.under_replicated  # it left every ISR
            if p.partition in led:
                assert p.leader in created[p.partition].isr  # from the ISR
                assert p.state.leader_epoch == epochs[p.partition] + 1
            else:  # followers died: leader and epoch stay
                assert (p.leader, p.state.leader_epoch) == (
                    created[p.partition].leader,
                    epochs[p.partition],
                )
        new_leader = after[0].leader
        wait_until("the new leader to take produces", lambda: _accepts(running[new_leader], 0))


def _refusal(broker: BrokerProcess, partition: int) -> type | None:
    """What a follower answers a produce with, once it knows who leads (None: not yet)."""
    try:
        produce(broker, "orders", partition, [b"c"])
    except NotLeaderForPartitionError:
        return NotLeaderForPartitionError
    except LeaderNotAvailableError:
        return None  # its state has not arrived yet
    raise AssertionError("a follower took a produce")


def _accepts(broker: BrokerProcess, partition: int) -> bool:
    try:
        produce(broker, "orders", partition, [b"probe"])
        return True
    except (NotLeaderForPartitionError, LeaderNotAvailableError):
        return False


def test_the_controller_fails_over_in_a_new_epoch(broker_factory, zk_chroot, zk_client) -> None:
    running = brokers(broker_factory, zk_chroot)

    def controller() -> replication.ControllerInfo | None:
        try:  # the node may go between an exists() and a get(): read it once
            data, _ = zk_client.get(replication.CONTROLLER)
        except NoNodeError:
            return None
        return replication.ControllerInfo.decode(data)

    wait_until("a controller", lambda: controller() is not None)
    first = controller()
    assert first is not None and first.broker in running
    assert int(zk_client.get(replication.CONTROLLER_EPOCH)[0]) == first.epoch
    running[first.broker].kill()
    wait_until(
        "another controller", lambda: (c := controller()) is not None and c.broker != first.broker
    )
    second = controller()
    assert second is not None and second.epoch == first.epoch + 1
    # the new controller does the work: a topic created now gets leaders on the live brokers
    with Cluster(zk_chroot.connect) as cluster:
        created = cluster.create_replicated_topic("later", 4, 2)
    assert {p.leader for p in created} <= set(running) - {first.broker}


def test_no_live_isr_member_means_offline_not_unclean(broker_factory, zk_chroot) -> None:
    running = brokers(broker_factory, zk_chroot)
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic("ledger", 1, 2)
        first, second = p.replicas
        outsider = ({0, 1, 2} - {first, second}).pop()
        running[second].kill()
        wait_until("the ISR to shrink", lambda: described(cluster, "ledger")[0].isr == (first,))
        running[first].kill()  # the last ISR member
        wait_until(
            "the partition to go offline",
            lambda: described(cluster, "ledger")[0].leader == replication.NO_LEADER,
        )
        offline = described(cluster, "ledger")[0]
        assert offline.isr == (first,)  # kept: only it may lead again
        assert "Leader: none" in offline.line()
        # the replica outside the ISR comes back: it does not lead (that would lose data)
        running[second].start()
        time.sleep(SESSION_MS / 1000)
        assert described(cluster, "ledger")[0].leader == replication.NO_LEADER
        with pytest.raises(LeaderNotAvailableError):
            produce(running[second], "ledger", 0, [b"x"])
        with pytest.raises(NotLeaderForPartitionError):  # it has no replica of ledger-0
            produce(running[outsider], "ledger", 0, [b"x"])
        # the last ISR member comes back: it leads again
        running[first].start()
        wait_until(
            "the ISR member to lead", lambda: described(cluster, "ledger")[0].leader == first
        )


def test_unclean_election_when_asked_for(broker_factory, zk_chroot) -> None:
    running = brokers(broker_factory, zk_chroot, unclean_leader_election_enable="true")
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic("lossy", 1, 2)
        first, second = p.replicas
        running[second].kill()
        wait_until("the ISR to shrink", lambda: described(cluster, "lossy")[0].isr == (first,))
        running[first].kill()
        wait_until(
            "offline", lambda: described(cluster, "lossy")[0].leader == replication.NO_LEADER
        )
        running[second].start()
        wait_until("the unclean leader", lambda: described(cluster, "lossy")[0].leader == second)
        assert described(cluster, "lossy")[0].isr == (second,)
