"""This broker's replicas of replicated partitions: their logs, and the role each state gives.

The broker watches `/replication/topics` (state.py). For each replicated topic it reads the
assignment once; for each partition whose replica list names this broker it makes the
replica's log (LogManager.create_replica: `<topic>-<p>` with its epoch file) and watches the
partition's state. The role follows the state:

- leader (the state's leader is this broker): the log takes produces (`log.leading`), and the
  epoch it leads in is recorded in its epoch file (epochs.py) before its first append;
- follower (another broker leads): no produce is taken here;
- offline (no leader): nobody takes produces; every request about it says so.

Threads: kazoo calls the watches on its event thread; they only enqueue. One worker thread
reads ZooKeeper, creates logs and changes roles, in order. The event loop reads a replica's
role (`Replica.leading`, `Replica.state`) without a lock: each is one attribute, replaced whole.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import ZnodeStat

from ..protocol.errors import LeaderNotAvailableError, LogbrokerError, NotLeaderForPartitionError
from ..storage.log import Log
from ..storage.log_manager import LogManager
from . import state as zk
from .epochs import LeaderEpochs
from .state import Assignment, PartitionState

log = logging.getLogger(__name__)


class Replica:
    """This broker's replica of one replicated partition."""

    def __init__(
        self, topic: str, partition: int, replicas: tuple[int, ...], part_log: Log, broker_id: int
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.replicas = replicas
        self.log = part_log
        self.broker_id = broker_id
        self.epochs = LeaderEpochs(part_log.directory)
        self.state: PartitionState | None = None
        part_log.replica = self

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def leading(self) -> bool:
        return self.log.leading

    def not_leader(self) -> LogbrokerError:
        """The error for a request that needs the leader, as this replica sees the partition."""
        current = self.state
        if current is None or not current.online:
            return LeaderNotAvailableError(
                f"replicated partition {self.name} has no leader now"
                + ("" if current is None else f" (no live in-sync replica of {list(current.isr)})")
            )
        return NotLeaderForPartitionError(
            f"broker {self.broker_id} does not lead {self.name}: broker {current.leader} does "
            f"(leader epoch {current.leader_epoch})"
        )

    def apply(self, new: PartitionState) -> None:
        """Take the role `new` gives this broker (the worker thread)."""
        old = self.state
        leads = new.leader == self.broker_id
        if leads and (
            old is None or old.leader != self.broker_id or old.leader_epoch != new.leader_epoch
        ):
            # Before the first append of the epoch: its start is the log's end now.
            self.epochs.assign(new.leader_epoch, self.log.end_offset)
        self.state = new
        self.log.leading = leads
        if old is None or (old.leader, old.leader_epoch) != (new.leader, new.leader_epoch):
            role = "leader" if leads else ("follower" if new.online else "offline")
            log.info(
                "replica %s on broker %d: %s (leader %s, epoch %d, ISR %s)",
                self.name,
                self.broker_id,
                role,
                new.leader,
                new.leader_epoch,
                list(new.isr),
            )


class ReplicaManager:
    """Every replica this broker holds, kept in the role ZooKeeper's states give them."""

    def __init__(self, broker_id: int, logs: LogManager) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self._client: KazooClient | None = None
        self._replicas: dict[tuple[str, int], Replica] = {}
        self._topics: set[str] = set(logs.replicated_topics())
        self._tasks: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._stopped = threading.Event()

    # -- what the handlers ask ----------------------------------------------------------

    def is_replicated(self, topic: str) -> bool:
        return topic in self._topics

    def replica(self, topic: str, partition: int) -> Replica | None:
        return self._replicas.get((topic, partition))

    def replicas(self) -> list[Replica]:
        return list(self._replicas.values())

    def refusal(self, topic: str, partition: int) -> LogbrokerError:
        """Why a request about replicated `topic`'s `partition` cannot be served here."""
        found = self._replicas.get((topic, partition))
        if found is not None:
            return found.not_leader()
        return NotLeaderForPartitionError(
            f"broker {self.broker_id} has no replica of {topic}-{partition}: ask its leader"
        )

    # -- life cycle ---------------------------------------------------------------------

    def start(self, client: KazooClient) -> None:
        self._client = client
        client.ensure_path(zk.TOPICS)
        self._worker = threading.Thread(
            target=self._run, name=f"replicas-{self.broker_id}", daemon=True
        )
        self._worker.start()
        client.ChildrenWatch(zk.TOPICS, self._topics_changed)

    def stop(self) -> None:
        self._stopped.set()
        self._tasks.put(None)
        if self._worker is not None:
            self._worker.join(timeout=10)

    # -- kazoo's callbacks: enqueue only --------------------------------------------------

    def _topics_changed(self, children: list[str]) -> bool:
        if self._stopped.is_set():
            return False
        self._tasks.put(("topics", children))
        return True

    def _state_changed(
        self, replica: Replica, data: bytes | None, stat: ZnodeStat | None, event: object = None
    ) -> bool:
        if self._stopped.is_set():
            return False
        if data is not None and stat is not None:
            self._tasks.put(("state", (replica, data, stat.version)))
        return True

    # -- the worker -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None or self._stopped.is_set():
                return
            kind, value = task
            try:
                if kind == "topics":
                    self._adopt_topics(value)
                elif kind == "state":
                    replica, data, version = value
                    replica.apply(
                        PartitionState.decode(
                            data, version, zk.partition_path(replica.topic, replica.partition)
                        )
                    )
            except (KazooException, ValueError, LogbrokerError) as exc:
                log.warning(
                    "replicas of broker %d: %s while handling %s", self.broker_id, exc, kind
                )

    def _adopt_topics(self, topics: list[str]) -> None:
        assert self._client is not None
        for topic in sorted(set(topics) - {t for t, _ in self._replicas}):
            try:
                data, _ = self._client.get(zk.topic_path(topic))
            except NoNodeError:
                continue
            assignment = Assignment.decode(topic, data)
            self._topics.add(topic)
            for partition, replicas in enumerate(assignment.replicas):
                if self.broker_id not in replicas or (topic, partition) in self._replicas:
                    continue
                replica = Replica(
                    topic,
                    partition,
                    replicas,
                    self.logs.create_replica(topic, partition),
                    self.broker_id,
                )
                self._replicas[(topic, partition)] = replica
                self._client.DataWatch(
                    zk.partition_path(topic, partition),
                    functools.partial(self._state_changed, replica),
                )
