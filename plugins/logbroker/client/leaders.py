"""Who leads each partition of a replicated topic, and where that leader listens.

What every client of a replicated topic asks before it sends or fetches (docs/replication.md,
"Clients"). Read from ZooKeeper (coordination/replication_state.py has the layout and the codecs):

    /replication/topics/<topic>                  the assignment: the topic is replicated, with
                                                 partitions 0..N-1 (fixed at creation)
    /replication/topics/<topic>/partitions/<p>   the state: leader, leader epoch, ISR
    /brokers/ids/<id>                            the leader's host and port (ZooKeeperBrokers)
    /replication/endpoints/<id>                  its Kafka 0.8 listener (listeners.py), which
                                                 alone serves a 0.8-format topic

A topic is looked up the first time a client names it; from then on data watches keep its
assignment (a topic created later is seen) and every partition's state current, so the
answers cost a dictionary lookup. A client that was refused (NotLeaderForPartition,
LeaderNotAvailable, a dead connection) calls `refresh(topic)`: the watch may not have fired
yet. Of two reads of one state the newer znode version wins, whichever thread saw it last.
`version` grows with every change (brokers included), for callers that cache routes.

A topic's assignment says its message format: `is_format08(topic)`. A 0.8-format topic's
leader is reached at `endpoint08` (its 0.8 listener, watched from the first call), a 0.7-format
one's at `endpoint` (its 0.7 port).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import DataWatch

from ..coordination import replication_state as replication
from ..coordination.replication_state import Assignment, PartitionState, StateFormatError
from .brokers import BrokerEndpoint, BrokerPartition, ZooKeeperBrokers
from .listeners import Listeners, tls_listener

log = logging.getLogger(__name__)


class Leaders:
    """Replicated topics' partitions and leaders, from ZooKeeper, kept fresh by watches.

    `brokers` gives the leaders' addresses (a ZooKeeperBrokers over the same client; one is
    made if none is given). `on_change()` is called, from kazoo's thread, after a topic's
    assignment, a partition's state or the live brokers changed. Thread-safe.
    """

    def __init__(
        self,
        client: KazooClient,
        brokers: ZooKeeperBrokers | None = None,
        on_change: Callable[[], None] | None = None,
        tls: bool = False,
        sasl: bool = False,
    ) -> None:
        """`tls`: leaders are reached at their TLS listeners (SSL, and SSL08 for 0.8-format
        topics; SASL_SSL and SASL_SSL08 when `sasl`, the client logs in: client/listeners.py)
        instead of the 0.7 port and KAFKA08."""
        self.client = client
        self.listener = tls_listener(sasl, wire08=True) if tls else replication.KAFKA08
        self.on_change = on_change
        self._lock = threading.Lock()
        self._assignments: dict[str, Assignment | None] = {}  # None: not replicated (now)
        self._looked_up: dict[str, threading.Event] = {}  # set once the first read is done
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._watched: set[tuple[str, int]] = set()
        self._changes = 0
        self._closed = False
        self.brokers = (
            brokers
            if brokers is not None
            else ZooKeeperBrokers(client, self._notify, tls_listener(sasl) if tls else None)
        )
        self._listeners: Listeners | None = None  # the 0.8 listeners, watched once asked
        self._listeners_lock = threading.Lock()  # not _lock: making it reads ZooKeeper

    @property
    def version(self) -> int:
        """Changes whenever an answer of this object may have changed."""
        listeners = self._listeners
        return self._changes + self.brokers.version + (listeners.version if listeners else 0)

    @property
    def listeners(self) -> Listeners:
        """Every live broker's Kafka 0.8 listener (read and watched from the first call)."""
        if self._listeners is None:
            with self._listeners_lock:
                if self._listeners is None:
                    self._listeners = Listeners(self.client, self.listener, on_change=self._notify)
        return self._listeners

    # -- what clients ask -------------------------------------------------------------------

    def assignment(self, topic: str) -> Assignment | None:
        """The topic's assignment, or None when it is not a replicated topic."""
        with self._lock:
            done = self._looked_up.get(topic)
            first = done is None
            if first:
                done = self._looked_up[topic] = threading.Event()
        assert done is not None
        if first:
            try:  # its first call reads the node before it returns
                DataWatch(self.client, replication.topic_path(topic), self._topic_watch(topic))
            except BaseException:
                with self._lock:
                    del self._looked_up[topic]  # the next call reads it again
                raise
            finally:
                done.set()
        else:
            done.wait()  # another thread is reading it: never answer "not replicated" before
        with self._lock:
            return self._assignments.get(topic)

    def is_replicated(self, topic: str) -> bool:
        return self.assignment(topic) is not None

    def partitions(self, topic: str) -> list[BrokerPartition] | None:
        """`(REPLICATED, p)` for p in 0..N-1 of a replicated topic; None for any other."""
        assignment = self.assignment(topic)
        if assignment is None:
            return None
        return [BrokerPartition(replication.REPLICATED, p) for p in range(assignment.partitions)]

    def state(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's leader, epoch and ISR as last seen (None: not elected yet)."""
        if topic not in self._looked_up:
            self.assignment(topic)
        with self._lock:
            return self._states.get((topic, partition))

    def leader(self, topic: str, partition: int) -> int:
        """The broker id that leads the partition, or NO_LEADER (-1)."""
        if topic not in self._looked_up:
            self.assignment(topic)  # watched from now on
        with self._lock:
            found = self._states.get((topic, partition))
        return found.leader if found is not None else replication.NO_LEADER

    def endpoint(self, topic: str, partition: int) -> BrokerEndpoint | None:
        """Where the partition's leader listens; None when it has no leader, or its leader
        is not registered (it died: the controller is about to elect another)."""
        leader = self.leader(topic, partition)
        if leader == replication.NO_LEADER:
            return None
        return self.brokers.brokers().get(leader)

    def is_format08(self, topic: str) -> bool:
        """Whether `topic` is a 0.8-format topic (served by the brokers' 0.8 listeners)."""
        assignment = self.assignment(topic)
        return assignment is not None and assignment.message_format == "0.8"

    def endpoint08(self, topic: str, partition: int) -> BrokerEndpoint | None:
        """Where the partition's leader's Kafka 0.8 listener is; None when the partition has
        no leader, or its leader no live 0.8 listener (port.08 unset, or it died)."""
        leader = self.leader(topic, partition)
        if leader == replication.NO_LEADER:
            return None
        return self.listeners.endpoint(leader)

    def refresh(self, topic: str) -> bool:
        """Read the topic's assignment and every partition's state now (after a refusal, the
        watches may lag behind); True if anything changed."""
        path = replication.topic_path(topic)
        try:
            data, _ = self.client.get(path)
            assignment: Assignment | None = Assignment.decode(topic, data)
        except NoNodeError:
            assignment = None
        except (KazooException, StateFormatError) as exc:
            log.warning("could not read the leaders of %s: %s", topic, exc)
            return False
        changed = self._set_assignment(topic, assignment)
        if assignment is None:
            return changed
        for p in range(assignment.partitions):
            state_path = replication.partition_path(topic, p)
            try:
                data, stat = self.client.get(state_path)
            except NoNodeError:
                continue
            except KazooException as exc:
                log.warning("could not read %s: %s", state_path, exc)
                return changed
            changed |= self._set_state(topic, p, data, stat.version, state_path, notify=False)
        if assignment.message_format == "0.8" and self.listeners.refresh():
            changed = True
        if changed:
            self._notify()
        return changed

    def close(self) -> None:
        """Stop the watches (they also end with the client)."""
        self._closed = True
        if self._listeners is not None:
            self._listeners.close()

    # -- the watches ---------------------------------------------------------------------

    def _topic_watch(self, topic: str) -> Callable[..., Any]:
        def changed(data: bytes | None, stat: Any, event: Any = None) -> bool | None:
            if self._closed:
                return False
            assignment = None
            if data is not None:
                try:
                    assignment = Assignment.decode(topic, data)
                except StateFormatError as exc:
                    log.warning("ignoring %s", exc)
            if self._set_assignment(topic, assignment):
                self._notify()
            return None

        return changed

    def _set_assignment(self, topic: str, assignment: Assignment | None) -> bool:
        with self._lock:
            if topic in self._assignments and self._assignments[topic] == assignment:
                return False
            if topic not in self._assignments and assignment is None:
                self._assignments[topic] = None  # the first look: a 0.7 topic, nothing changed
                return False
            self._assignments[topic] = assignment
            self._changes += 1
            new = (
                []
                if assignment is None
                else [
                    (topic, p)
                    for p in range(assignment.partitions)
                    if (topic, p) not in self._watched
                ]
            )
            self._watched.update(new)
        for key in new:  # outside the lock: a DataWatch reads (and calls back) at once
            DataWatch(self.client, replication.partition_path(*key), self._state_watch(*key))
        return True

    def _state_watch(self, topic: str, partition: int) -> Callable[..., Any]:
        path = replication.partition_path(topic, partition)

        def changed(data: bytes | None, stat: Any, event: Any = None) -> bool | None:
            if self._closed:
                return False
            if data is not None and self._set_state(topic, partition, data, stat.version, path):
                self._notify()
            return None

        return changed

    def _set_state(
        self, topic: str, partition: int, data: bytes, version: int, path: str, notify: bool = True
    ) -> bool:
        try:
            state = PartitionState.decode(data, version, path)
        except StateFormatError as exc:
            log.warning("ignoring %s", exc)
            return False
        key = (topic, partition)
        with self._lock:
            known = self._states.get(key)
            if known is not None and known.version >= state.version:
                return False  # seen already, or older than what another read saw
            self._states[key] = state
            self._changes += 1
        if known is None or known.leader != state.leader:
            log.info(
                "%s-%d: leader %s (epoch %d, isr %s)",
                topic,
                partition,
                state.leader if state.online else "none",
                state.leader_epoch,
                list(state.isr),
            )
        return True

    def _notify(self) -> None:
        if self.on_change is not None and not self._closed:
            try:
                self.on_change()
            except Exception:
                log.exception("leader change callback failed")
