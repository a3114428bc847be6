"""A cluster seen through ZooKeeper: its brokers, topics, partitions and consumer groups.

What the `logbroker topics`, `lag` and `offsets` commands (and the pipeline's hooks) read.
Brokers come from `/brokers/ids`, 0.7's topics from `/brokers/topics/<topic>/<brokerId>`,
group offsets and owners from `/consumers/<group>/{offsets,owners}/<topic>/<brokerId>-<partId>`
(see coordination/paths.py). Replicated topics come from `/replication/topics` (their
assignment and each partition's leader, epoch and ISR: coordination/replication_state.py); their group
offsets and owners are named `<p>`. Offsets and sizes come from the brokers themselves
(METADATA): a replicated partition's from its leader, whose latest offset is the high
watermark (what consumers can read).

Brokers are reached with the client's credentials (`credentials`: security/client.py, Kafka's
security.protocol, ssl.* and sasl.*): over TLS at each broker's SSL listener (SSL08 for a
0.8-format topic's leader), with a SASL login on every connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ..coordination import paths
from ..coordination import replication_state as replication
from ..coordination.replica_assignment import assign
from ..coordination.replication_state import Assignment, PartitionState
from ..coordination.zk_acl import kazoo_options
from ..protocol.errors import LeaderNotAvailableError, LogbrokerError, error_code, error_for_code
from ..protocol.requests import CreateTopicRequest
from ..protocol.responses import (
    MalformedResponseError,
    PartitionMetadata,
    decode_create_topic_response,
)
from ..protocol.topics import is_legal_topic, validate_topic
from ..security.client import ClientCredentials
from .brokers import BrokerEndpoint, ZooKeeperBrokers
from .leaders import Leaders
from .listeners import tls_listener
from .simple_consumer import SimpleConsumer

log = logging.getLogger(__name__)


class PartitionDescription(NamedTuple):
    """A partition's offsets and size; `broker_id` is REPLICATED (-1) for a replicated
    topic's partition (read from its leader; `latest` is its high watermark)."""

    topic: str
    broker_id: int
    partition: int
    earliest: int
    latest: int
    size: int

    @property
    def name(self) -> str:
        return paths.partition_name(self.broker_id, self.partition)


class ReplicatedPartition(NamedTuple):
    """A replicated partition as `topics describe` prints it (kafka-topics' --describe)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    state: PartitionState | None  # None: not elected yet (no controller has seen the topic)

    @property
    def leader(self) -> int:
        return self.state.leader if self.state is not None else replication.NO_LEADER

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    def line(self) -> str:
        leader = str(self.leader) if self.leader != replication.NO_LEADER else "none"
        return (
            f"Topic: {self.topic}\tPartition: {self.partition}\tLeader: {leader}\t"
            f"Replicas: {','.join(map(str, self.replicas))}\tIsr: {','.join(map(str, self.isr))}"
        )


class GroupPartition(NamedTuple):
    topic: str
    broker_id: int
    partition: int
    owner: str | None
    committed: int | None
    latest: int | None

    @property
    def name(self) -> str:
        return paths.partition_name(self.broker_id, self.partition)

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.latest is None:
            return None
        return max(0, self.latest - self.committed)


class Cluster:
    def __init__(
        self,
        zk_connect: str,
        timeout: float = 10.0,
        *,
        credentials: ClientCredentials | None = None,
        zk_auth: str | None = None,
    ) -> None:
        """`credentials`: how the brokers are reached (the module's doc); PLAINTEXT without.
        `zk_auth`: `digest:<user>:<password>`, the brokers' ZooKeeper digest, for a cluster
        with zookeeper.set.acl: the session logs in with it and the znodes it creates (a
        replicated topic's) are the digest's, readable by all (coordination/zk_acl.py)."""
        self.zk_connect = zk_connect
        self.timeout = timeout
        self.credentials = credentials or ClientCredentials()
        self.tls = self.credentials.context()  # made once: unreadable files refused here
        self.zk = KazooClient(hosts=zk_connect, timeout=timeout, **kazoo_options(zk_auth))
        try:
            self.zk.start(timeout=timeout)
        except BaseException:
            self.zk.stop()  # or its thread goes on retrying (and logging) until exit
            self.zk.close()
            raise
        tls, sasl = self.tls is not None, self.credentials.sasl is not None
        self.brokers = ZooKeeperBrokers(self.zk, listener=tls_listener(sasl) if tls else None)
        self.leaders = Leaders(self.zk, self.brokers, tls=tls, sasl=sasl)
        self._consumers: dict[int, SimpleConsumer] = {}

    @classmethod
    def from_properties(
        cls, zk_connect: str, properties: Mapping[str, str], timeout: float = 10.0
    ) -> Cluster:
        """With the credentials of Kafka client `properties` (other keys ignored)."""
        return cls(zk_connect, timeout, credentials=ClientCredentials.from_properties(properties))

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def consumer(self, broker_id: int) -> SimpleConsumer:
        """A simple consumer connected to one live broker."""
        if broker_id not in self._consumers:
            broker = self.live_brokers().get(broker_id)
            if broker is None:
                raise LogbrokerError(f"broker {broker_id} is not registered in {self.zk_connect}")
            self._consumers[broker_id] = SimpleConsumer(
                broker.host,
                broker.port,
                timeout=self.timeout,
                tls=self.tls,
                sasl=self.credentials.sasl,
            )
        return self._consumers[broker_id]

    def partition_consumer(self, topic: str, broker_id: int, partition: int) -> SimpleConsumer:
        """A simple consumer that can read partition `(broker_id, partition)` of `topic`: its
        broker's, or for a replicated partition (broker_id REPLICATED) its leader's."""
        if broker_id != replication.REPLICATED:
            return self.consumer(broker_id)
        leader = self.leaders.leader(topic, partition)
        if leader == replication.NO_LEADER:
            self.leaders.refresh(topic)
            leader = self.leaders.leader(topic, partition)
        if leader == replication.NO_LEADER:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader now")
        return self.consumer(leader)

    def live_brokers(self) -> dict[int, BrokerEndpoint]:
        return self.brokers.brokers()

    def topics(self) -> dict[str, dict[int, int]]:
        """topic -> broker id -> partition count, from /brokers/topics."""
        result: dict[str, dict[int, int]] = {}
        for topic in sorted(self.zk.get_children(paths.BROKER_TOPICS)):
            if not is_legal_topic(topic):  # an old broker's: nothing can read or write it
                log.warning("ignoring %s/%s: not a legal topic name", paths.BROKER_TOPICS, topic)
                continue
            counts = {}
            for child in self._children(paths.broker_topic_path(topic)):
                try:
                    data, _ = self.zk.get(paths.broker_topic_broker_path(topic, int(child)))
                    counts[int(child)] = paths.parse_topic_value(data)
                except (NoNodeError, ValueError):
                    continue
            if counts:
                result[topic] = counts
        return result

    def create_topic(self, topic: str, partitions: int) -> dict[int, int]:
        """Create `partitions` partitions of `topic` on every live broker.

        A broker's refusal is raised as its code's exception, with the broker's reason (the
        limit it names is that broker's own) and the brokers that had already created it."""
        validate_topic(topic)  # before any broker is asked
        brokers = self.live_brokers()
        if not brokers:
            raise LogbrokerError(f"no live brokers in {self.zk_connect}")
        created: dict[int, int] = {}
        for broker_id in sorted(brokers):
            body = self.consumer(broker_id).connection.request(
                CreateTopicRequest(topic, partitions)
            )
            try:
                meta = decode_create_topic_response(body)
            except MalformedResponseError:
                raise
            except LogbrokerError as exc:
                done = f" (already created on {_brokers(created)})" if created else ""
                raise error_for_code(
                    error_code(exc), f"broker {broker_id} refused topic {topic!r}{done}: {exc}"
                ) from None
            created[broker_id] = len(meta.partitions)
        return created

    # -- replicated topics (docs/replication.md) ------------------------------------------

    def replicated_topics(self) -> list[str]:
        return sorted(self._children(replication.TOPICS))

    def default_replication_factor(self) -> int:
        """The controller's `default.replication.factor` (1 when no controller published one)."""
        try:
            data, _ = self.zk.get(replication.CONFIG)
        except NoNodeError:
            return 1
        return replication.ClusterDefaults.decode(data).default_replication_factor

    def assignment(self, topic: str) -> Assignment | None:
        try:
            data, _ = self.zk.get(replication.topic_path(topic))
        except NoNodeError:
            return None
        return Assignment.decode(topic, data)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        path = replication.partition_path(topic, partition)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        return PartitionState.decode(data, stat.version, path)

    def describe_replicated(self, topic: str) -> list[ReplicatedPartition]:
        """Every partition of replicated `topic`: its replicas, leader and ISR ([] if none)."""
        assignment = self.assignment(validate_topic(topic))
        if assignment is None:
            return []
        return [
            ReplicatedPartition(topic, p, replicas, self.partition_state(topic, p))
            for p, replicas in enumerate(assignment.replicas)
        ]

    def create_replicated_topic(
        self,
        topic: str,
        partitions: int,
        replication_factor: int,
        wait: float = 30.0,
        message_format: str = "0.7",
    ) -> list[ReplicatedPartition]:
        """Assign `partitions` partitions of `topic`, `replication_factor` replicas each, over
        the live brokers (replica_assignment.py), in `message_format` ("0.7": byte offsets,
        0.7's messages; "0.8": logical offsets, 0.8's messages with keys, served by the brokers'
        Kafka 0.8 listener), and wait up to `wait` seconds for the controller to give each a
        leader. Raises LogbrokerError naming what is in the way."""
        validate_topic(topic)
        if message_format not in replication.MESSAGE_FORMATS:
            raise LogbrokerError(
                f"message format {message_format!r} is not one of {replication.MESSAGE_FORMATS}"
            )
        if self.zk.exists(paths.broker_topic_path(topic)):
            raise LogbrokerError(
                f"topic {topic!r} exists with 0.7's layout (replication factor 1) on brokers "
                f"{', '.join(self._children(paths.broker_topic_path(topic)))}: its replication "
                "factor cannot change"
            )
        brokers = sorted(self.live_brokers())
        try:
            replicas = assign(brokers, partitions, replication_factor)
        except ValueError as exc:
            raise LogbrokerError(f"topic {topic!r}: {exc}") from None
        assignment = Assignment(
            topic, replication_factor, tuple(tuple(r) for r in replicas), message_format
        )
        try:
            self.zk.create(replication.topic_path(topic), assignment.encode(), makepath=True)
        except NodeExistsError:
            raise LogbrokerError(f"replicated topic {topic!r} exists already") from None
        deadline = time.monotonic() + wait
        while True:
            described = self.describe_replicated(topic)
            if all(p.state is not None and p.state.online for p in described):
                return described
            if time.monotonic() >= deadline:
                waiting = [p.partition for p in described if p.state is None or not p.state.online]
                raise LogbrokerError(
                    f"topic {topic!r} is assigned, but partitions {waiting} have no leader after "
                    f"{wait:g} s: is a controller running (a broker of this version)?"
                )
            time.sleep(0.05)

    def describe(self, topic: str) -> list[PartitionDescription]:
        """Every partition of `topic` on every live broker that has it; of a replicated
        topic, every partition whose leader answers (from the leader)."""
        validate_topic(topic)
        if self.leaders.is_replicated(topic):
            return self._describe_replicated_offsets(topic)
        rows = []
        for broker_id in sorted(self.topics().get(topic, {})):
            if broker_id not in self.live_brokers():
                continue
            meta = self.consumer(broker_id).metadata([topic])
            for t in meta.topics:
                for p in t.partitions:
                    rows.append(
                        PartitionDescription(
                            topic,
                            broker_id,
                            p.partition,
                            p.earliest_offset,
                            p.latest_offset,
                            p.size,
                        )
                    )
        return rows

    def _describe_replicated_offsets(self, topic: str) -> list[PartitionDescription]:
        rows = []
        for p in range(len(self.leaders.partitions(topic) or [])):
            found = self._leader_metadata(topic, p)
            if found is not None:
                rows.append(
                    PartitionDescription(
                        topic,
                        replication.REPLICATED,
                        p,
                        found.earliest_offset,
                        found.latest_offset,
                        found.size,
                    )
                )
        return rows

    def _leader_metadata(self, topic: str, partition: int) -> PartitionMetadata | None:
        """Partition `partition` of replicated `topic` as its leader describes it, or None
        (logged) when it has no leader or the leader does not answer."""
        try:
            meta = self.partition_consumer(topic, replication.REPLICATED, partition).metadata(
                [topic]
            )
        except LogbrokerError as exc:
            log.warning("%s-%d: its leader did not describe it: %s", topic, partition, exc)
            return None
        for t in meta.topics:
            for p in t.partitions:
                if p.partition == partition:
                    return p
        return None

    def group_partitions(self, group: str) -> list[GroupPartition]:
        """Every partition a group has an offset or an owner for, with the broker's latest."""
        rows = []
        offsets_root = f"{paths.consumer_group_path(group)}/offsets"
        owners_root = f"{paths.consumer_group_path(group)}/owners"
        if not self.zk.exists(paths.consumer_group_path(group)):
            raise LogbrokerError(f"no consumer group {group!r} in {self.zk_connect}")
        topics = set(self._children(offsets_root)) | set(self._children(owners_root))
        latest_cache: dict[tuple[str, int], dict[int, int]] = {}
        for topic in sorted(topics):
            names = set(self._children(f"{offsets_root}/{topic}")) | set(
                self._children(f"{owners_root}/{topic}")
            )
            for name in sorted(names):
                broker_id, partition = paths.parse_partition_name(name)
                committed = self._read_int(
                    paths.consumer_offset_path(group, topic, broker_id, partition)
                )
                owner = self._read(paths.consumer_owner_path(group, topic, broker_id, partition))
                key = (topic, broker_id)
                if broker_id == replication.REPLICATED:
                    found = self._leader_metadata(topic, partition)
                    latest_cache[key] = {partition: found.latest_offset} if found else {}
                elif key not in latest_cache:
                    latest_cache[key] = self._latest(topic, broker_id)
                rows.append(
                    GroupPartition(
                        topic,
                        broker_id,
                        partition,
                        owner,
                        committed,
                        latest_cache[key].get(partition),
                    )
                )
        return rows

    def _latest(self, topic: str, broker_id: int) -> dict[int, int]:
        try:
            meta = self.consumer(broker_id).metadata([topic])
        except LogbrokerError:
            return {}
        return {p.partition: p.latest_offset for t in meta.topics for p in t.partitions}

    def _children(self, path: str) -> list[str]:
        try:
            return list(self.zk.get_children(path))
        except NoNodeError:
            return []

    def _read(self, path: str) -> str | None:
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return str(data, "utf-8")

    def _read_int(self, path: str) -> int | None:
        text = self._read(path)
        return int(text) if text and text.strip().lstrip("-").isdigit() else None


def _brokers(ids: dict[int, int]) -> str:
    return ("broker " if len(ids) == 1 else "brokers ") + ", ".join(map(str, ids))
