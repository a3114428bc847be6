"""One rebalance of a group consumer, and the partitions and fetchers that it leaves running.

A rebalance, exactly as 0.7.2's `rebalance` (`ZookeeperConsumerConnector.scala`): read the group and
the cluster; stop the fetchers and clear the stream queues; commit the offsets (when
autocommit is on); release (delete) the owner nodes this consumer holds; compute the range
assignment of every topic (`logbroker.coordination.rebalance.assign`); create the owner nodes
of the partitions it assigns to our threads (in one transaction, so all or none). If one of
them is still owned by another member (NodeExists), the attempt fails and the coordinator
retries it. Then read the start offsets from the offsets nodes (after the claim, so the
previous owner's final commit is seen), start one fetcher thread per broker, and go. Where
there is no offsets node, the start is the broker's earliest offset
(`autooffset_reset="smallest"`, OFFSETS -2) or latest one (`"largest"`, OFFSETS -1), asked
here or, when the broker does not answer, by the fetcher.

A replicated topic's partitions (named `<p>`) are claimed the same way and fetched from their
leaders (`Leaders`, client/leaders.py): one fetcher per leader. When leaders move (a watch on
the partitions' states, or a fetcher that was refused), `regroup` moves each partition to the
fetcher of its leader now, without a rebalance: ownership and offsets stay, the partition
resumes at its fetch offset on the new leader, and fetchers whose partitions did not move go
on. A commit covers only what was handed out, and consumers fetch only what is below the
high watermark: a committed offset is always on every in-sync replica. A 0.8-format topic's
partitions go the same way to fetchers of their leaders' Kafka 0.8 listeners
(`Leaders.endpoint08`), their start offsets asked with Offsets v0; their offsets are logical
and committed in the same nodes, `/consumers/<group>/offsets/<topic>/<p>`, where the 0.8
listener's OffsetCommit writes and its OffsetFetch reads: a Kafka 0.8 client of the same group
(kafka-python, librdkafka) and this consumer see each other's commits.

Between rebalances the owned partitions (the registry) and the fetchers stay as they are; the
coordinator reads and resets them under its ZooKeeper lock.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable

from kazoo.protocol.states import WatchedEvent

from ...coordination.rebalance import StaticSubscription, WildcardSubscription, assign
from ...protocol.errors import LogbrokerError
from ..brokers import BrokerEndpoint
from ..leaders import Leaders
from ..simple_consumer import SimpleConsumer
from ..simple_consumer08 import SimpleConsumer08
from .context import ConsumerContext
from .fetcher import AUTOOFFSET_RESETS, Fetcher
from .membership import GroupMembership
from .stream import ChunkQueue, OwnedPartition

log = logging.getLogger("logbroker.client.group_consumer")  # one logger for the whole consumer

Watch = Callable[[WatchedEvent], None]


class Rebalancer:
    """The current generation of one consumer (its owned partitions, their streams and
    fetchers) and the rebalance attempt that replaces it.

    `on_change` is the watch set on the group's ids, on `/brokers/ids` and on every subscribed
    topic; `on_topics_change` the one on `/brokers/topics` and `/replication/topics` (topic
    filters only); `on_leaders_change()` is called when a replicated partition's leader may
    have moved (the coordinator then calls `regroup`).
    """

    def __init__(
        self,
        context: ConsumerContext,
        membership: GroupMembership,
        on_change: Watch,
        on_topics_change: Watch,
        on_leaders_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.context = context
        self.membership = membership
        self.on_change = on_change
        self.on_topics_change = on_topics_change
        self.on_leaders_change = on_leaders_change
        self.leaders: Leaders | None = None  # made when a replicated partition is first owned
        self._leader_fetchers: dict[tuple[BrokerEndpoint, bool], Fetcher] = {}  # (, format08)
        self.feeds: list[ChunkQueue] = []  # the queue of every stream
        self.feed_of: dict[tuple[str | None, str], ChunkQueue] = {}  # (topic|None, thread id)
        self.registry: dict[tuple[str, str], OwnedPartition] = {}  # (topic, "b-p") -> info
        self.known_topics: set[str] = set()
        self.offset_clients: dict[BrokerEndpoint, SimpleConsumer | SimpleConsumer08] = {}
        self._fetchers: list[Fetcher] = []

    def stop_consuming(self) -> list[OwnedPartition]:
        """Stop and join the fetchers, end delivery from the owned partitions, clear queues."""
        fetchers = self._fetchers + list(self._leader_fetchers.values())
        self._fetchers, self._leader_fetchers = [], {}
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            fetcher.join()
        infos = list(self.registry.values())
        with self.context.deliver_lock:
            for info in infos:
                info.released = True
        for feed in self.feeds:
            feed.clear()
        return infos

    def rebalance(self) -> bool:
        """One attempt of 0.7.2's rebalance; False when a partition is owned by another."""
        context, membership = self.context, self.membership
        subscription = membership.subscription
        assert subscription is not None
        all_topics: list[str] = []
        if isinstance(subscription, WildcardSubscription):
            all_topics = membership.all_topics(self.on_topics_change)
            self.known_topics = set(subscription.topics(all_topics))
        my_threads = subscription.thread_ids_per_topic(context.consumer_id, all_topics)
        group_threads = membership.read_members(all_topics, self.on_change)
        brokers = membership.read_brokers(self.on_change)
        partitions = {
            topic: membership.read_partitions(topic, self.on_change) for topic in my_threads
        }

        infos = self.stop_consuming()
        if context.autocommit_enable:  # (if this fails, the failed attempt commits them)
            membership.commit(infos, check_owner=membership.session_lost)
        self.registry = {}
        membership.release()

        decisions: dict[tuple[str, str], str] = {}
        for topic, threads in my_threads.items():
            assignment = assign(partitions[topic], group_threads.get(topic, []))
            for thread_id in threads:
                for name in assignment.get(thread_id, []):
                    decisions[(topic, name)] = thread_id
        if not membership.claim(decisions):
            return False

        registry = {}
        for (topic, name), thread_id in sorted(decisions.items()):
            feed = self.feed_of[
                (topic if isinstance(subscription, StaticSubscription) else None, thread_id)
            ]
            offset = membership.read_offset(topic, name)
            info = registry[(topic, name)] = OwnedPartition(
                topic, name, thread_id, feed, offset, context.fetch_size
            )
            info.format08 = info.replicated and self._leaders().is_format08(topic)
        self.registry = registry
        self._resolve_offsets(brokers)
        self._start_fetchers(brokers)
        summary = {t: [n for (tt, n) in registry if tt == t] for t in my_threads}
        log.info(
            "consumer %s owns %s",
            context.consumer_id,
            "; ".join(f"{t}: {', '.join(ns) or '-'}" for t, ns in summary.items()) or "nothing",
        )
        return True

    def _resolve_offsets(self, brokers: dict[int, BrokerEndpoint]) -> None:
        """Ask the brokers where partitions without a committed offset start
        (autooffset.reset), as 0.7 did during the rebalance; a broker that does not answer
        leaves it to the fetcher."""
        context = self.context
        when = AUTOOFFSET_RESETS[context.autooffset_reset]
        for info in self.registry.values():
            if info.fetch_offset is not None:
                continue
            broker = self._leader_endpoint(info) if info.replicated else brokers.get(info.broker_id)
            if broker is None:
                continue
            client = self.offset_clients.get(broker)
            if client is None:
                client = self.offset_clients[broker] = (
                    SimpleConsumer08 if info.format08 else SimpleConsumer
                )(
                    broker.host,
                    broker.port,
                    timeout=context.socket_timeout_ms / 1000,
                    sasl=context.sasl,
                    tls=context.tls,
                )
            try:
                offsets = client.offsets_before(info.topic, info.partition, when, 1)
            except LogbrokerError as exc:
                log.warning("OFFSETS for %s/%s failed: %s", info.topic, info.name, exc)
                continue
            info.fetch_offset = info.consumed_offset = offsets[0] if offsets else 0
            log.info(
                "%s/%s has no committed offset; autooffset.reset=%s: starting at %s",
                info.topic,
                info.name,
                context.autooffset_reset,
                info.fetch_offset,
            )

    def _start_fetchers(self, brokers: dict[int, BrokerEndpoint]) -> None:
        by_broker: dict[int, list[OwnedPartition]] = defaultdict(list)
        for info in self.registry.values():
            if not info.replicated:
                by_broker[info.broker_id].append(info)
        for broker_id, infos in sorted(by_broker.items()):
            broker = brokers.get(broker_id)
            if broker is None:
                log.warning(
                    "broker %s is not registered; its partitions %s wait for the next rebalance",
                    broker_id,
                    ", ".join(f"{i.topic}/{i.name}" for i in infos),
                )
                continue
            fetcher = Fetcher(self.context, broker, infos)
            self._fetchers.append(fetcher)
            fetcher.start()
        self.regroup()

    # -- replicated partitions: one fetcher per leader ------------------------------------

    def _leaders(self) -> Leaders:
        if self.leaders is None:
            self.leaders = Leaders(
                self.membership.client,
                on_change=self.on_leaders_change,
                tls=self.context.tls is not None,
                sasl=self.context.sasl is not None,
            )
        return self.leaders

    def _leader_endpoint(self, info: OwnedPartition) -> BrokerEndpoint | None:
        """Where the partition's leader serves it: its 0.8 listener for a 0.8-format topic."""
        leaders = self._leaders()
        if info.format08:
            return leaders.endpoint08(info.topic, info.partition)
        return leaders.endpoint(info.topic, info.partition)

    def regroup(self) -> None:
        """Each owned replicated partition to the fetcher of its leader now: fetchers whose
        partitions are the same go on, the others stop (joined: a partition is never fetched
        twice at once) and new ones start. A partition without a live leader waits for the
        next call (the leaders' watch brings it)."""
        replicated = [info for info in self.registry.values() if info.replicated]
        if not replicated and not self._leader_fetchers:
            return
        wanted: dict[tuple[BrokerEndpoint, bool], list[OwnedPartition]] = defaultdict(list)
        waiting = []
        for info in replicated:
            endpoint = self._leader_endpoint(info)
            if endpoint is None:
                waiting.append(info)
            else:
                wanted[(endpoint, info.format08)].append(info)
        stale = [
            (key, fetcher)
            for key, fetcher in self._leader_fetchers.items()
            if {id(i) for i in fetcher.infos} != {id(i) for i in wanted.get(key, [])}
        ]
        for _, fetcher in stale:
            fetcher.stop()
        for key, fetcher in stale:
            fetcher.join()
            del self._leader_fetchers[key]
        for key, infos in sorted(wanted.items()):
            if key not in self._leader_fetchers:
                endpoint, format08 = key
                fetcher = Fetcher(self.context, endpoint, infos, self._leader_lost, format08)
                self._leader_fetchers[key] = fetcher
                fetcher.start()
        if waiting:
            log.info(
                "no live leader for %s: waiting for the controller to elect one",
                ", ".join(f"{i.topic}/{i.name}" for i in waiting),
            )

    def _leader_lost(self, infos: list[OwnedPartition]) -> None:
        """A fetcher's leader refused partitions or went away (the fetcher's thread): read
        their leaders now, and have the coordinator regroup."""
        leaders = self._leaders()
        for topic in sorted({info.topic for info in infos}):
            leaders.refresh(topic)
        self.on_leaders_change()
