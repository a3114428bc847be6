"""The ZooKeeper side of a group consumer: its nodes in the group, and what it reads there.

    /consumers/<group>/ids/<consumerId>             ephemeral   the subscription, `{ "t": 2 }` /
                                                                `*<n>*<regex>` / `!<n>!<regex>`
    /consumers/<group>/owners/<topic>/<b>-<p>       ephemeral   the owning thread id `<consumerId>-<i>`
    /consumers/<group>/offsets/<topic>/<b>-<p>      persistent  next byte offset to consume, decimal
    /brokers/ids/<b>                                (read)      `creatorId:host:port`
    /brokers/topics/<topic>/<b>                     (read)      the topic's partition count on <b>
    /replication/topics/<topic>                     (read)      a replicated topic's assignment:
                                                                its partitions are `0`..`N-1`,
                                                                named `<p>` in owners and offsets

(paths and codecs: `logbroker.coordination.paths`; assignment and subscription values:
`logbroker.coordination.rebalance`). Tools written for 0.7 read these nodes as they are.

The ids and owner nodes live as long as the consumer's kazoo session. The ids node is written
when the consumer joins and again after a new session (waiting out a node of an old session
with the same id); owner nodes are created all in one transaction, so a claim takes all of its
partitions or none, and deleted only while they still name our thread and belong to one of
our sessions. A commit writes the consumed offsets that changed, creating the offsets node
where there is none. The reads of the group and of the cluster set the watches that the
caller passes (a child watch, or an exists watch on a node that is missing).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ...coordination import paths
from ...coordination import replication_state as replication
from ...coordination.rebalance import (
    Subscription,
    consumers_per_topic,
    parse_subscription,
    replicated_partitions,
    topic_partitions,
)
from ...coordination.replication_state import Assignment, StateFormatError
from ...protocol.errors import LogbrokerError
from ..brokers import BrokerEndpoint
from ..listeners import tls_listener
from .context import ConsumerContext
from .stream import OwnedPartition

log = logging.getLogger("logbroker.client.group_consumer")  # one logger for the whole consumer


class ConsumerIdTakenError(LogbrokerError):
    """Another live consumer of the group registered the same consumer id."""


class GroupMembership:
    """One consumer's nodes under `/consumers/<group>`, over the consumer's kazoo client.

    Not thread-safe by itself: the consumer's coordinator calls it under its ZooKeeper lock.
    """

    def __init__(self, context: ConsumerContext, client: KazooClient) -> None:
        self.context = context
        self.client = client
        self.group_id = context.group_id
        self.consumer_id = context.consumer_id
        self.subscription: Subscription | None = None  # set when the consumer joins
        self.session_lost = False  # from a LOST session until the new one has taken over
        self._owned: dict[str, str] = {}  # owner node path -> our thread id
        self._sessions: set[int] = set()

    def remember_session(self) -> None:
        if self.client.client_id is not None:
            self._sessions.add(self.client.client_id[0])

    # -- ZooKeeper reads ---------------------------------------------------------------

    def children(self, path: str, watch: Any) -> list[str]:
        """Children of `path` with a child watch; a watch on its creation if it is missing."""
        while True:
            try:
                return list(self.client.get_children(path, watch=watch))
            except NoNodeError:
                if self.client.exists(path, watch=watch) is None:
                    return []

    def read_brokers(self, watch: Any) -> dict[int, BrokerEndpoint]:
        """Live brokers at their 0.7 port, or at their SSL listener over TLS (one that has
        not registered it yet counts as not live until the next rebalance)."""
        brokers = {}
        for child in self.children(paths.BROKER_IDS, watch):
            try:
                data, _ = self.client.get(f"{paths.BROKER_IDS}/{child}")
                host, port = paths.parse_broker_value(data)
                if self.context.tls is not None:
                    data, _ = self.client.get(replication.endpoints_path(int(child)))
                    found = replication.decode_endpoints(data, int(child)).get(
                        tls_listener(self.context.sasl is not None)
                    )
                    if found is None:
                        continue
                    host, port = found
                brokers[int(child)] = BrokerEndpoint(int(child), host, port)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("ignoring broker registration %s: %s", child, exc)
        return brokers

    def all_topics(self, watch: Any) -> list[str]:
        """Every topic of the cluster, 0.7's and replicated (what a topic filter matches)."""
        return sorted(
            set(self.children(paths.BROKER_TOPICS, watch))
            | set(self.children(replication.TOPICS, watch))
        )

    def read_partitions(self, topic: str, watch: Any) -> list[str]:
        """The topic's partition names: `<p>` of a replicated topic (watching its assignment:
        created later, it is seen), else `<b>-<i>` of the brokers that registered it."""
        assignment_path = replication.topic_path(topic)
        try:
            data, _ = self.client.get(assignment_path, watch=watch)
        except NoNodeError:
            data = None
            if self.client.exists(assignment_path, watch=watch) is not None:
                return self.read_partitions(topic, watch)  # created meanwhile
        if data is not None:
            try:
                return replicated_partitions(Assignment.decode(topic, data).partitions)
            except StateFormatError as exc:
                log.warning("ignoring %s", exc)
                return []
        counts = {}
        path = paths.broker_topic_path(topic)
        for child in self.children(path, watch):
            try:
                data, _ = self.client.get(f"{path}/{child}")
                counts[int(child)] = paths.parse_topic_value(data)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("ignoring %s/%s: %s", path, child, exc)
        return topic_partitions(counts)

    def read_members(self, all_topics: list[str], watch: Any) -> dict[str, list[str]]:
        """topic -> sorted thread ids of the whole group (0.7's getConsumersPerTopic)."""
        assert self.subscription is not None
        ids_path = paths.consumer_ids_path(self.group_id)
        members = self.children(ids_path, watch)
        if self.consumer_id not in members:
            log.warning("consumer %s: our ids node is gone; registering again", self.consumer_id)
            self.register()
            members.append(self.consumer_id)
        subscriptions: dict[str, Subscription] = {}
        for member in members:
            if member == self.consumer_id:
                subscriptions[member] = self.subscription
                continue
            try:
                data, _ = self.client.get(f"{ids_path}/{member}")
                subscriptions[member] = parse_subscription(data)
            except NoNodeError:
                continue  # gone meanwhile; its watch event brings another rebalance
            except ValueError as exc:
                log.warning("ignoring group member %s: %s", member, exc)
        return consumers_per_topic(subscriptions, all_topics)

    def read_offset(self, topic: str, name: str) -> int | None:
        broker_id, partition = paths.parse_partition_name(name)
        path = paths.consumer_offset_path(self.group_id, topic, broker_id, partition)
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return None
        text = data.decode("utf-8", "replace").strip()
        if text.isascii() and text.isdigit():
            return int(text)
        if text:
            log.warning("ignoring offsets node %s holding %r", path, text)
        return None

    # -- ZooKeeper writes --------------------------------------------------------------

    def register(self) -> None:
        """Create our ephemeral ids node (waiting out an old session's node with our id)."""
        assert self.subscription is not None
        path = paths.consumer_id_path(self.group_id, self.consumer_id)
        value = self.subscription.value().encode()
        deadline = self.context.clock() + self.context.zk_session_timeout_ms / 1000 + 2
        while True:
            try:
                self.client.create(path, value, ephemeral=True, makepath=True)
                log.info("consumer %s registered: %s", self.consumer_id, value.decode())
                return
            except NodeExistsError:
                pass
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                continue
            session = self.client.client_id[0] if self.client.client_id else None
            if stat.ephemeralOwner == session:
                if data != value:
                    self.client.set(path, value)
                return
            if self.context.clock() > deadline:
                raise ConsumerIdTakenError(
                    f"consumer id {self.consumer_id} is registered by another live session "
                    f"(0x{stat.ephemeralOwner:x}) in group {self.group_id}"
                )
            self.context.sleep(0.2)  # an old session of ours, or a clash: wait for it to expire

    def unregister(self) -> None:
        """Delete our ids node, if we registered one (leaving the group at close)."""
        if self.subscription is not None:
            self.delete_own(paths.consumer_id_path(self.group_id, self.consumer_id), None)

    def _write_offset(self, path: str, value: bytes) -> None:
        try:
            self.client.set(path, value)
        except NoNodeError:
            try:
                self.client.create(path, value, makepath=True)
            except NodeExistsError:
                self.client.set(path, value)

    def commit(
        self,
        infos: list[OwnedPartition],
        *,
        check_owner: bool,
        offsets: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        """Write the consumed offsets that changed (0.7's commitOffsets), or the given
        `offsets` ((topic, partition name) -> offset) of the partitions among `infos`."""
        with self.context.deliver_lock:
            chosen = (
                [(info, info.consumed_offset) for info in infos]
                if offsets is None
                else [(info, offsets.get((info.topic, info.name))) for info in infos]
            )
            pending = [
                (info, offset)
                for info, offset in chosen
                if offset is not None and offset != info.committed_offset
            ]
        written = 0
        for info, offset in pending:
            if check_owner and not self._still_ours(info):
                log.info("not committing %s/%s: another member owns it now", info.topic, info.name)
                continue
            path = paths.consumer_offset_path(
                self.group_id, info.topic, info.broker_id, info.partition
            )
            self._write_offset(path, str(offset).encode())
            info.committed_offset = offset
            written += 1
        self.context.stats.add(commits=1, offsets_written=written)
        if written:
            log.debug("consumer %s committed %d offsets", self.consumer_id, written)

    def _still_ours(self, info: OwnedPartition) -> bool:
        owner = paths.consumer_owner_path(self.group_id, info.topic, info.broker_id, info.partition)
        try:
            data, _ = self.client.get(owner)
        except NoNodeError:
            return True
        return bool(data.decode("utf-8", "replace") == info.thread_id)

    def delete_own(self, path: str, thread_id: str | None) -> None:
        """Delete an ephemeral node of ours (an owner node only while it names `thread_id`)."""
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            return
        session = self.client.client_id[0] if self.client.client_id else None
        if thread_id is not None and data.decode("utf-8", "replace") != thread_id:
            return
        if stat.ephemeralOwner != session and stat.ephemeralOwner not in self._sessions:
            return
        with contextlib.suppress(NoNodeError, BadVersionError):
            self.client.delete(path, version=stat.version)

    def release(self) -> None:
        """Delete the owner nodes we hold (0.7's releasePartitionOwnership)."""
        for path, thread_id in list(self._owned.items()):
            self.delete_own(path, thread_id)
            del self._owned[path]

    def claim(self, decisions: dict[tuple[str, str], str]) -> bool:
        """Create all our owner nodes in one transaction; False if one is owned by another."""
        if not decisions:
            return True
        nodes = {}
        for (topic, name), thread_id in sorted(decisions.items()):
            broker_id, partition = paths.parse_partition_name(name)
            nodes[paths.consumer_owner_path(self.group_id, topic, broker_id, partition)] = thread_id
        for topic in {topic for topic, _ in decisions}:
            self.client.ensure_path(paths.consumer_owners_path(self.group_id, topic))
        transaction = self.client.transaction()
        for path, thread_id in nodes.items():
            transaction.create(path, thread_id.encode(), ephemeral=True)
        results = transaction.commit()
        failed = [
            path
            for path, result in zip(nodes, results, strict=True)
            if isinstance(result, NodeExistsError)
        ]
        errors = [r for r in results if isinstance(r, Exception)]
        if not errors:
            self._owned.update(nodes)
            return True
        if not failed:
            raise errors[0]
        for path in failed:
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                continue
            log.info(
                "consumer %s: %s is still owned by %s; backing off",
                self.consumer_id,
                path,
                data.decode("utf-8", "replace"),
            )
            session = self.client.client_id[0] if self.client.client_id else None
            if stat.ephemeralOwner == session:  # a leftover of ours: clear it for the retry
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self.client.delete(path, version=stat.version)
        return False
