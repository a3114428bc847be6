"""A follower joining the ISR counts for the high watermark from the moment its addition is
written, not from the moment the leader's own watch brings the new state back.

Found while reading the code behind the fault runs (docs/chaos.md, "Replication under
faults"): the leader writes the expanded ISR to ZooKeeper from its replica manager's worker and
learns it back through its data watch. In between, ZooKeeper (and so the controller) has the
follower in the ISR while the leader's high watermark still ignored it: an acks=-1 write that
the follower lacked could be acknowledged, and lost when the leader died and the controller
elected that follower.

The leader here is a real ReplicaManager on a real ZooKeeper behind the broker's request
handlers, in process; its worker's steps are called one by one (the worker is not started), so
that the state the watch brings back waits in the worker's queue, as it does while the worker
is busy, for as long as the test needs.
"""

from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient

from logbroker.config import BrokerConfig
from logbroker.coordination import paths
from logbroker.coordination import replication_state as zk
from logbroker.coordination.replication_state import Assignment, PartitionState
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.replication import ReplicaFetch, ReplicaFetchRequest
from logbroker.protocol.requests import AckedProduceRequest, ProduceRequest
from logbroker.replication.epochs import FILE_NAME as EPOCH_FILE
from logbroker.replication.replicas import ReplicaManager
from logbroker.server.handlers import RequestHandlers
from logbroker.server.metrics import BrokerMetrics
from logbroker.server.waiters import AppendWaiters
from logbroker.storage.log_manager import LogManager

TOPIC = "t"
ENTRY = build_message_set([b"one message"])


def _fetch(h: RequestHandlers, follower: int, offset: int) -> None:
    h.replica_fetch(
        ReplicaFetchRequest(follower, 0, 1, (ReplicaFetch(TOPIC, 0, offset, 65536, 0),)),
        f"broker {follower}",
    )


def _produce(h: RequestHandlers) -> None:
    h.acked_produce(
        AckedProduceRequest(False, (ProduceRequest(TOPIC, 0, ENTRY),), False, 0), "producer"
    )


def _state(client: KazooClient) -> PartitionState:
    data, stat = client.get(zk.partition_path(TOPIC, 0))
    return PartitionState.decode(data, stat.version)


def test_a_joining_follower_holds_the_high_watermark_before_the_leader_sees_it_joined(
    tmp_path: Path, zk_client: KazooClient
) -> None:
    zk_client.create(
        zk.topic_path(TOPIC), Assignment(TOPIC, 3, ((0, 1, 2),)).encode(), makepath=True
    )
    zk_client.create(
        zk.partition_path(TOPIC, 0), PartitionState(0, 0, (0, 1), 1).encode(), makepath=True
    )
    # broker 2 is alive (a dead one is never added to an ISR)
    zk_client.create(paths.broker_id_path(2), b"", ephemeral=True, makepath=True)
    config = BrokerConfig(log_dir=str(tmp_path))
    logs = LogManager(config, replica_marker=EPOCH_FILE)
    manager = ReplicaManager(0, logs, lag_time_max_ms=600_000, checkpoint_interval_ms=600_000)
    manager._client = zk_client  # what start() sets; the worker stays unstarted (module doc)
    try:
        manager._adopt_topics([TOPIC])
        replica = manager.replica(TOPIC, 0)
        assert replica is not None
        manager._apply(replica, _state(zk_client))  # broker 0 leads, ISR 0 and 1
        h = RequestHandlers(logs, config, BrokerMetrics(0), AppendWaiters(), replicas=manager)

        _produce(h)
        one = replica.log.end_offset
        _fetch(h, 1, one)
        assert replica.high_watermark == one
        _fetch(h, 2, one)  # broker 2 caught up: the leader asks for it to join the ISR
        manager._change_isr(replica, add=2)  # the worker's write of that request
        assert _state(zk_client).isr == (0, 1, 2)  # the controller may elect broker 2 now
        assert replica.isr == (0, 1)  # the watch's state waits in the worker's queue

        _produce(h)
        _fetch(h, 1, replica.log.end_offset)  # broker 1 has it, broker 2 does not
        assert replica.high_watermark == one  # so it is not acknowledged

        manager._apply(replica, _state(zk_client))  # the state comes back: nothing changes
        assert replica.isr == (0, 1, 2) and replica.joining == {}
        assert replica.high_watermark == one
        _fetch(h, 2, replica.log.end_offset)
        assert replica.high_watermark == replica.log.end_offset
    finally:
        manager.stop()
