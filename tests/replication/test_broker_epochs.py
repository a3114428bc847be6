"""A broker that restarts ends its leader epochs, however quick the restart (issue 49, item 3).

The controller runs in process on its own kazoo client, against a real ZooKeeper; the brokers
are their registrations (`/brokers/ids/<id>`, ephemeral, each in a session of its own), which
is all the controller reads of them. A restart is a registration deleted and made again; the
controller's watches are held meanwhile, so that it sees the same three brokers before and
after (a restart quicker than its watch, or one while it was disconnected). A restart is
then known only by the registration's czxid: Kafka's broker epoch (KIP-380).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from three_brokers import hold_watches, wait_until

from logbroker.coordination import paths
from logbroker.coordination import replication_state as zk
from logbroker.coordination.replication_state import Assignment, PartitionState
from logbroker.replication.controller import Controller
from logbroker.stack.zookeeper import ZkTarget

TOPIC = "orders"


def register(zk_chroot: ZkTarget, broker_id: int) -> KazooClient:
    """A broker's registration, in a session of its own (stop the client: the broker is gone)."""
    client = KazooClient(hosts=zk_chroot.connect)
    client.start(10)
    value = paths.broker_value(paths.make_creator_id("127.0.0.1", 0), "127.0.0.1", 9000 + broker_id)
    client.create(paths.broker_id_path(broker_id), value.encode(), ephemeral=True, makepath=True)
    return client


def state(client: KazooClient) -> PartitionState:
    data, stat = client.get(zk.partition_path(TOPIC, 0))
    return PartitionState.decode(data, stat.version)


@pytest.fixture
def brokers(zk_chroot: ZkTarget) -> Iterator[dict[int, KazooClient]]:
    sessions = {i: register(zk_chroot, i) for i in range(3)}
    yield sessions
    for client in sessions.values():
        client.stop()
        client.close()


def start_controller(zk_chroot: ZkTarget) -> tuple[Controller, KazooClient]:
    client = KazooClient(hosts=zk_chroot.connect)
    client.start(10)
    controller = Controller(client, broker_id=0)
    controller.start()
    wait_until("a controller", lambda: controller.active)
    return controller, client


def stop_controller(controller: Controller, client: KazooClient) -> None:
    controller.stop()
    client.stop()
    client.close()


def test_a_leader_restarted_quicker_than_the_controllers_watch_loses_its_epoch(
    zk_chroot: ZkTarget, zk_client: KazooClient, brokers: dict[int, KazooClient]
) -> None:
    zk_client.create(
        zk.topic_path(TOPIC), Assignment(TOPIC, 3, ((1, 0, 2),)).encode(), makepath=True
    )
    controller, client = start_controller(zk_chroot)
    try:
        wait_until("the first state", lambda: zk_client.exists(zk.partition_path(TOPIC, 0)))
        before = state(zk_client)
        assert (before.leader, before.leader_epoch, before.isr) == (1, 0, (1, 0, 2))

        release = hold_watches(client)  # the controller's view lags from here
        try:
            brokers[1].stop()  # broker 1 stops (its registration goes) ...
            brokers[1].close()
            brokers[1] = register(zk_chroot, 1)  # ... and is back, as quick as a restart
        finally:
            release()  # the controller reads /brokers/ids again: the same three brokers

        wait_until("a new leader epoch", lambda: state(zk_client).leader_epoch > 0)
        after = state(zk_client)
        assert after.leader in (0, 2), after  # another in-sync replica leads now
        assert 1 not in after.isr, after  # the restarted broker rejoins once caught up
    finally:
        stop_controller(controller, client)


def test_a_new_controller_ends_the_epoch_of_a_leader_registered_after_its_state(
    zk_chroot: ZkTarget, zk_client: KazooClient, brokers: dict[int, KazooClient]
) -> None:
    """A controller that starts knows no earlier registration: a leader registered after its
    partition's state was written (czxid above the state's mzxid) has restarted since."""
    zk_client.create(zk.topic_path(TOPIC), Assignment(TOPIC, 2, ((1, 2),)).encode(), makepath=True)
    controller, client = start_controller(zk_chroot)
    wait_until("the first state", lambda: zk_client.exists(zk.partition_path(TOPIC, 0)))
    stop_controller(controller, client)
    assert (state(zk_client).leader, state(zk_client).leader_epoch) == (1, 0)

    brokers[1].stop()  # restarted while no controller ran
    brokers[1].close()
    brokers[1] = register(zk_chroot, 1)
    brokers[2].stop()  # and the only other replica is gone: broker 1 leads on, in epoch 1
    brokers[2].close()

    controller, client = start_controller(zk_chroot)
    try:
        wait_until("a new leader epoch", lambda: state(zk_client).leader_epoch > 0)
        after = state(zk_client)
        assert (after.leader, after.leader_epoch) == (1, 1), after
    finally:
        stop_controller(controller, client)
