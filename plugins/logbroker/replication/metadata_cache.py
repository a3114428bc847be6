"""What every broker knows of the whole cluster, for the Kafka 0.8 listener's Metadata answers
(Kafka 0.8's MetadataCache, which the controller kept current with UpdateMetadata requests).

Read from ZooKeeper (coordination/replication_state.py) and kept current by watches:

    /brokers/ids                       the live brokers
    /replication/endpoints/<id>        each one's 0.8 listener, if it has one
    /replication/topics/<topic>        every replicated topic's assignment and message format
    .../partitions/<p>                 each partition's leader and ISR

kazoo calls the watches on its own thread; each replaces one entry of a dict, and the event
loop reads them without a lock (a reader sees a state or the next one, never half of one).
A broker asks for a topic's metadata the moment its first state exists: until then the topic
is answered LeaderNotAvailable, as 0.8 answered a topic being created.
"""

from __future__ import annotations

import functools
import logging
from typing import NamedTuple

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat

from ..coordination import paths
from ..coordination import replication_state as zk
from ..coordination.replication_state import Assignment, PartitionState, StateFormatError

log = logging.getLogger(__name__)


class BrokerEndpoint(NamedTuple):
    broker_id: int
    host: str
    port: int


class TopicView(NamedTuple):
    """One replicated topic: its assignment, and each partition's state (None: not yet)."""

    assignment: Assignment
    states: tuple[PartitionState | None, ...]


class MetadataCache:
    def __init__(self, listener: str = zk.KAFKA08) -> None:
        self.client: KazooClient | None = None  # start() gives it
        self.listener = listener
        self._live: frozenset[int] = frozenset()
        self._endpoints: dict[int, tuple[str, int]] = {}
        self._assignments: dict[str, Assignment] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._watched_endpoints: set[int] = set()
        self._stopped = False

    def start(self, client: KazooClient) -> None:
        self.client = client
        for parent in (zk.TOPICS, zk.ENDPOINTS):
            client.ensure_path(parent)
        client.ChildrenWatch(paths.BROKER_IDS, self._brokers_changed)
        client.ChildrenWatch(zk.ENDPOINTS, self._endpoints_changed)
        client.ChildrenWatch(zk.TOPICS, self._topics_changed)

    def stop(self) -> None:
        self._stopped = True  # the watches end at their next call

    # -- what the listener asks ---------------------------------------------------------

    def brokers(self) -> list[BrokerEndpoint]:
        """Live brokers that have this listener, by id."""
        live, endpoints = self._live, self._endpoints
        return [BrokerEndpoint(b, *endpoints[b]) for b in sorted(live) if b in endpoints]

    def topics(self) -> list[str]:
        return sorted(self._assignments)

    def topic(self, topic: str) -> TopicView | None:
        assignment = self._assignments.get(topic)
        if assignment is None:
            return None
        states = tuple(self._states.get((topic, p)) for p in range(assignment.partitions))
        return TopicView(assignment, states)

    def endpoint(self, broker_id: int) -> BrokerEndpoint | None:
        found = self._endpoints.get(broker_id)
        return None if found is None else BrokerEndpoint(broker_id, *found)

    # -- kazoo's callbacks ----------------------------------------------------------------

    def _client(self) -> KazooClient:
        assert self.client is not None
        return self.client

    def _brokers_changed(self, children: list[str]) -> bool:
        self._live = frozenset(int(c) for c in children if c.isdigit())
        return not self._stopped

    def _endpoints_changed(self, children: list[str]) -> bool:
        for child in children:
            if child.isdigit() and int(child) not in self._watched_endpoints:
                broker = int(child)
                self._watched_endpoints.add(broker)
                self._client().DataWatch(
                    zk.endpoints_path(broker), functools.partial(self._endpoint_changed, broker)
                )
        return not self._stopped

    def _endpoint_changed(
        self, broker: int, data: bytes | None, stat: ZnodeStat | None, event: object = None
    ) -> bool:
        if data is None:  # gone with its broker's session
            self._endpoints.pop(broker, None)
            self._watched_endpoints.discard(broker)
            return False  # watched again when it is back
        try:
            found = zk.decode_endpoints(data, broker).get(self.listener)
        except StateFormatError as exc:
            log.warning("metadata: %s", exc)
            return not self._stopped
        if found is None:
            self._endpoints.pop(broker, None)
        else:
            self._endpoints[broker] = found
        return not self._stopped

    def _topics_changed(self, children: list[str]) -> bool:
        for topic in children:
            if topic not in self._assignments:
                self._client().DataWatch(
                    zk.topic_path(topic), functools.partial(self._assignment_read, topic)
                )
        return not self._stopped

    def _assignment_read(
        self, topic: str, data: bytes | None, stat: ZnodeStat | None, event: object = None
    ) -> bool:
        if data is None or topic in self._assignments:
            return False  # an assignment is written once: one read is all it takes
        try:
            assignment = Assignment.decode(topic, data)
        except (StateFormatError, ValueError) as exc:
            log.warning("metadata: topic %s skipped: %s", topic, exc)
            return False
        for partition in range(assignment.partitions):
            self._client().DataWatch(
                zk.partition_path(topic, partition),
                functools.partial(self._state_changed, topic, partition),
            )
        self._assignments[topic] = assignment
        return False

    def _state_changed(
        self,
        topic: str,
        partition: int,
        data: bytes | None,
        stat: ZnodeStat | None,
        event: object = None,
    ) -> bool:
        if data is not None and stat is not None:
            path = zk.partition_path(topic, partition)
            try:
                self._states[(topic, partition)] = PartitionState.decode(data, stat.version, path)
            except StateFormatError as exc:
                log.warning("metadata: %s", exc)
        return not self._stopped
