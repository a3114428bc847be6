"""A healthy follower stays in the ISR: under steady produces, and right after it rejoins.

Found by reading the leader's follower bookkeeping (docs/replication.md, "Leaders and
followers"): a follower counted as caught up only when a fetch reached the leader's end at that
moment, so one that fetched promptly but always one batch behind a steady producer was dropped
after `replica.lag.time.max.ms`; and one that rejoined the ISR short of the leader's end kept
its old caught-up time, so the next lag check could drop it at once.

The leader is a real ReplicaManager on a real ZooKeeper behind the broker's request handlers,
in process, with its clock injected and its worker's steps called one by one (the worker is not
started, as in test_isr_expansion.py): the clock moves only when the test moves it, so what the
lag check decides does not depend on how fast this machine is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from logbroker.config import BrokerConfig
from logbroker.coordination import paths
from logbroker.coordination import replication_state as zk
from logbroker.coordination.replication_state import Assignment, PartitionState
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.replication import ReplicaFetch, ReplicaFetchRequest
from logbroker.protocol.requests import AckedProduceRequest, ProduceRequest
from logbroker.replication.epochs import FILE_NAME as EPOCH_FILE
from logbroker.replication.replicas import Replica, ReplicaManager
from logbroker.server.handlers import RequestHandlers
from logbroker.server.metrics import BrokerMetrics
from logbroker.server.waiters import AppendWaiters
from logbroker.storage.log_manager import LogManager

TOPIC = "t"
ENTRY = build_message_set([b"one batch"])
LAG_MS = 1000


class Clock:
    """Milliseconds that move only when told."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Leader:
    """Broker 0 leading partition 0 of TOPIC, replicas 0, 1 and 2."""

    def __init__(self, manager: ReplicaManager, handlers: RequestHandlers, client: KazooClient):
        self.manager = manager
        self.h = handlers
        self.client = client
        replica = manager.replica(TOPIC, 0)
        assert replica is not None
        self.replica: Replica = replica

    def produce(self) -> int:
        self.h.acked_produce(
            AckedProduceRequest(False, (ProduceRequest(TOPIC, 0, ENTRY),), False, 0), "producer"
        )
        return self.replica.log.end_offset

    def fetch(self, follower: int, offset: int) -> None:
        self.h.replica_fetch(
            ReplicaFetchRequest(follower, 0, 1, (ReplicaFetch(TOPIC, 0, offset, 65536, 0),)),
            f"broker {follower}",
        )

    def zk_isr(self) -> tuple[int, ...]:
        data, stat = self.client.get(zk.partition_path(TOPIC, 0))
        return PartitionState.decode(data, stat.version).isr

    def apply_state(self) -> None:
        """What the worker does when the leader's watch brings the state back."""
        data, stat = self.client.get(zk.partition_path(TOPIC, 0))
        self.manager._apply(self.replica, PartitionState.decode(data, stat.version))

    def check_lag(self) -> tuple[int, ...]:
        """The worker's periodic lag check, then the state it wrote applied: the ISR."""
        self.manager._shrink_laggards()
        self.apply_state()
        return self.replica.isr


@pytest.fixture
def leader(tmp_path: Path, zk_client: KazooClient) -> Iterator[tuple[Leader, Clock]]:
    zk_client.create(
        zk.topic_path(TOPIC), Assignment(TOPIC, 3, ((0, 1, 2),)).encode(), makepath=True
    )
    zk_client.create(
        zk.partition_path(TOPIC, 0), PartitionState(0, 0, (0, 1, 2), 1).encode(), makepath=True
    )
    for follower in (1, 2):  # alive: a dead broker is never added to an ISR
        zk_client.create(paths.broker_id_path(follower), b"", ephemeral=True, makepath=True)
    config = BrokerConfig(log_dir=str(tmp_path))
    logs = LogManager(config, replica_marker=EPOCH_FILE)
    clock = Clock()
    manager = ReplicaManager(
        0, logs, lag_time_max_ms=LAG_MS, checkpoint_interval_ms=600_000, clock_ms=clock
    )
    manager._client = zk_client  # what start() sets; the worker stays unstarted (module doc)
    try:
        manager._adopt_topics([TOPIC])
        h = RequestHandlers(logs, config, BrokerMetrics(0), AppendWaiters(), replicas=manager)
        lead = Leader(manager, h, zk_client)
        lead.apply_state()  # broker 0 leads, ISR 0, 1 and 2
        yield lead, clock
    finally:
        manager.stop()


def test_a_follower_always_one_batch_behind_a_steady_producer_stays_in_the_isr(
    leader: tuple[Leader, Clock],
) -> None:
    lead, clock = leader
    behind = lead.produce()
    for _ in range(10):  # three times the lag limit: each fetch one batch short of the end
        end = lead.produce()
        lead.fetch(1, behind)  # all the leader had at broker 1's previous fetch
        lead.fetch(2, end)  # broker 2 keeps up fully
        behind = end
        # caught up as of its previous fetch: two fetch intervals stay within the limit
        clock.now += LAG_MS * 3 // 10
        assert lead.check_lag() == (0, 1, 2)
        assert lead.zk_isr() == (0, 1, 2)
    assert lead.replica.high_watermark == behind - len(ENTRY)  # broker 1 holds it up, as it must

    # the check is live: a follower that stops fetching is dropped after the lag limit
    for _ in range(5):
        end = lead.produce()
        lead.fetch(2, end)
        clock.now += LAG_MS * 3 // 10
        lead.check_lag()
    assert lead.zk_isr() == (0, 2)
    assert lead.replica.high_watermark == lead.replica.log.end_offset


def test_a_follower_that_rejoins_short_of_the_end_is_not_dropped_at_once(
    leader: tuple[Leader, Clock],
) -> None:
    lead, clock = leader
    first = lead.produce()
    lead.fetch(1, first)
    clock.now += 2 * LAG_MS  # broker 2 has not fetched at all: it leaves the ISR
    lead.fetch(1, first)
    assert lead.check_lag() == (0, 1)

    end = lead.produce()  # broker 1 has not fetched it yet: the high watermark stays at first
    assert lead.replica.high_watermark == first
    lead.fetch(2, first)  # broker 2 is back: it has the high watermark, not the end
    assert (TOPIC, 0, 2) in lead.manager._asked_in  # so the leader asks for it to rejoin
    lead.manager._change_isr(lead.replica, add=2)  # the worker's write of that request
    lead.apply_state()
    assert lead.replica.isr == (0, 1, 2)

    # the next lag check, with no time passed: broker 2 has just rejoined and stays in
    assert lead.check_lag() == (0, 1, 2)
    assert lead.zk_isr() == (0, 1, 2)
    lead.fetch(1, end)
    lead.fetch(2, end)
    assert lead.replica.high_watermark == end
