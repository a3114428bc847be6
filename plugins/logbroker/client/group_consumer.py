"""The group consumer: Kafka 0.7's `ZookeeperConsumerConnector`, with 0.7's znodes and values.

    consumer = GroupConsumer(group_id="loaders", zk_connect="127.0.0.1:2181/live")
    stream = consumer.create_message_streams({"page-views": 1})["page-views"][0]
    for message in stream:                 # blocks; see consumer_timeout_ms
        handle(message.topic, message.partition, message.offset, message.payload)
    consumer.close()                       # commits, releases its partitions, leaves the group

The members of a group share the partitions of the topics they subscribe to: each partition
is consumed by exactly one member thread (stream), and the members agree on who owns what
through ZooKeeper alone (docs/design.md §3.3; the 0.7 design doc's consumer
registration and rebalancing algorithms; the paper's §3.2-3.3), in 0.7's layout
(`/consumers/<group>/{ids,owners,offsets}`: the table heads `group/membership.py`). Tools
written for 0.7 read these nodes as they are.

Registration: `create_message_streams` (static topics) or `create_message_streams_by_filter`
(a Whitelist/Blacklist regex: every matching topic under `/brokers/topics`, new ones
included) writes the ids node, then rebalances; every change of the group, of the brokers or
of a subscribed topic rebalances again. A rebalance stops the fetchers, commits (with
autocommit), releases the partitions, computes 0.7's range assignment and claims its part,
retrying with a backoff while another member still owns one of them; then one fetcher thread
per broker fills the streams. This module is the connector (configuration, public API, lifecycle); its parts live
in `logbroker.client.group`:

    group/stream.py       MessageStream, GroupMessage, the state of an owned partition
    group/fetcher.py      the fetcher threads (FETCH_WAIT, fetch sizes, autooffset.reset)
    group/membership.py   the ZooKeeper layout; ids node, owner claims, offsets, cluster reads
    group/rebalance.py    one rebalance attempt (§7.1) and the generation it leaves running
    group/coordinator.py  the rebalance thread: watches, retries, session expiry, autocommit

Replicated topics (docs/replication.md, "Clients"): their partitions are `0`..`N-1` of the
topic, named `"<p>"` in the owners and offsets nodes and in `GroupMessage.partition` (0.7
topics keep `"<brokerId>-<partId>"`), shared out by the same assignment and fetched from
their leaders, following a leader that moves without a rebalance (`group/rebalance.py`).
A 0.8-format topic (docs/protocol.md, "logbroker's own clients on 0.8-format topics") is
fetched from its leaders' Kafka 0.8 listeners; its messages carry their `key`, and its
offsets are logical (each message resumes at its offset + 1), committed in the same nodes,
where the 0.8 listener's OffsetCommit and OffsetFetch keep a group's offsets: a Kafka 0.8
client of the same group id (kafka-python, librdkafka) reads what this consumer committed,
and this consumer starts where such a client committed.

Offsets: when a stream hands a message to the application, that message's `next_offset`
becomes its partition's consumed offset; a commit writes the consumed offsets that changed
(and the start offset of a partition that had no offsets node). Inside a compressed wrapper
every message but the last resumes at the wrapper (0.7's rule), so a crash in the middle of
a wrapper re-delivers it. Commits happen every `autocommit_interval_ms` (with autocommit),
on `commit_offsets()`, and (with autocommit, as 0.7) at every rebalance and at `close()`.
Delivery is at-least-once: after a crash, the messages delivered since the last commit are
delivered again to whoever takes the partition over. A message counts as consumed once
`next()` returned it; to commit only after processing, turn autocommit off and call
`commit_offsets()` yourself.

Session expiry: when the kazoo session is LOST and a new one is established, the consumer
stops its fetchers, commits (only for partitions nobody else has taken meanwhile), writes
its ids node again and rebalances, resuming from the committed offsets.

Streams: `next(stream)` blocks until a message comes. With `consumer_timeout_ms` >= 0 a
stream that got nothing for that long stops the iteration (StopIteration, so a `for` loop
simply ends) instead of 0.7's ConsumerTimeoutException; the stream stays usable, and the
next `next()` or `for` waits again. After `close()` every stream stops for good.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError

from ..coordination import paths
from ..coordination.errors import ZooKeeperUnavailableError
from ..coordination.rebalance import (
    Blacklist,
    StaticSubscription,
    TopicFilter,
    Whitelist,
    WildcardSubscription,
    make_consumer_id,
    thread_ids,
)
from ..protocol.topics import validate_topic
from ..security.client import client_sasl
from ..security.sasl import SaslClientConfig
from ..security.tls import ClientSecurity
from .group.context import ConsumerContext, GroupConsumerStats
from .group.coordinator import Coordinator
from .group.fetcher import AUTOOFFSET_RESETS
from .group.membership import ConsumerIdTakenError, GroupMembership
from .group.stream import ChunkQueue, GroupMessage, MessageStream, StoredSet
from .simple_consumer import DEFAULT_MAX_FETCH_SIZE

__all__ = [
    "Blacklist",
    "ConsumerIdTakenError",
    "GroupConsumer",
    "GroupConsumerStats",
    "GroupMessage",
    "MessageStream",
    "StoredSet",
    "Whitelist",
    "ZooKeeperUnavailableError",
]

log = logging.getLogger(__name__)


class GroupConsumer:
    """0.7's ZooKeeper consumer connector (`ZookeeperConsumerConnector`).

    Keyword arguments carry 0.7's consumer.properties names (see `from_properties`):
    `group_id` (groupid), `zk_connect` (zk.connect, may end in a chroot), `consumer_id`
    (consumerid: the id becomes `<group>_<consumer_id>`; default `<group>_<host>-<ms>-<uuid8>`),
    `autocommit_enable`, `autocommit_interval_ms`, `autooffset_reset` ("smallest" or
    "largest"), `consumer_timeout_ms` (-1: streams block forever), `fetch_size`,
    `max_fetch_size`, `queued_max_chunks` (queuedchunks.max, per stream),
    `rebalance_retries_max`, `rebalance_backoff_ms` (0.7 used zk.synctime.ms),
    `fetcher_backoff_ms`, `zk_session_timeout_ms`, `zk_connection_timeout_ms`,
    `socket_timeout_ms`, and `fetch_wait_max_ms` (how long a FETCH_WAIT may wait for data).
    `shallow_iterator_enable` (shallow.iterator.enable, Kafka 0.8's key for its mirror maker):
    streams hand out top-level entries without decompressing them; a message's `payload` is
    then the whole stored message (magic, attributes, CRC, payload: a compressed wrapper
    stays one message), ready to be written into another message set unchanged. A 0.8-format
    topic's stored sets (`MessageStream.next_set`) hold 0.8's entries, offsets and keys
    included (`StoredSet.format08`); `next()` hands its messages out deep, with their keys.
    `clock` (monotonic seconds) and `sleep` are what every deadline and back-off of the
    consumer goes through: tests pass fake ones.

    Connects to ZooKeeper at once (ZooKeeperUnavailableError if it cannot); joins the group
    at `create_message_streams*` (once per consumer). Thread-safe: streams may be read from
    different threads, and `commit_offsets()`/`close()` called from any thread.
    """

    def __init__(
        self,
        group_id: str,
        zk_connect: str,
        *,
        consumer_id: str | None = None,
        autocommit_enable: bool = True,
        autocommit_interval_ms: int = 10000,
        autooffset_reset: str = "smallest",
        consumer_timeout_ms: int = -1,
        fetch_size: int = 300 * 1024,
        max_fetch_size: int | None = None,
        queued_max_chunks: int = 10,
        rebalance_retries_max: int = 4,
        rebalance_backoff_ms: int = 2000,
        fetcher_backoff_ms: int = 1000,
        zk_session_timeout_ms: int = 6000,
        zk_connection_timeout_ms: int = 6000,
        socket_timeout_ms: int = 30000,
        fetch_wait_max_ms: int = 100,
        shallow_iterator_enable: bool = False,
        sasl: SaslClientConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
        security: ClientSecurity | None = None,
    ) -> None:
        paths.consumer_group_path(group_id)  # a usable group name, or ValueError
        if autooffset_reset not in AUTOOFFSET_RESETS:
            raise ValueError(
                f"autooffset_reset must be 'smallest' or 'largest', got {autooffset_reset!r}"
            )
        if fetch_size < 1 or queued_max_chunks < 1 or rebalance_retries_max < 1:
            raise ValueError("fetch_size, queued_max_chunks and rebalance_retries_max must be >= 1")
        if autocommit_interval_ms < 1 or fetch_wait_max_ms < 0 or rebalance_backoff_ms < 0:
            raise ValueError("autocommit_interval_ms must be >= 1, the other times >= 0")
        self.group_id = group_id
        self.zk_connect = zk_connect
        self.consumer_id = make_consumer_id(group_id, consumer_id)
        paths.consumer_id_path(group_id, self.consumer_id)  # ValueError for a bad id
        self.autocommit_enable = autocommit_enable
        self.autocommit_interval_ms = autocommit_interval_ms
        self.autooffset_reset = autooffset_reset
        self.consumer_timeout_ms = consumer_timeout_ms
        self.fetch_size = fetch_size
        self.max_fetch_size = max(fetch_size, max_fetch_size or DEFAULT_MAX_FETCH_SIZE)
        self.queued_max_chunks = queued_max_chunks
        self.rebalance_retries_max = rebalance_retries_max
        self.rebalance_backoff_ms = rebalance_backoff_ms
        self.fetcher_backoff_ms = fetcher_backoff_ms
        self.zk_session_timeout_ms = zk_session_timeout_ms
        self.socket_timeout_ms = socket_timeout_ms
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.stats = GroupConsumerStats()
        # all that the parts (group/*) know of this consumer
        self._context = ConsumerContext(
            group_id=group_id,
            consumer_id=self.consumer_id,
            autocommit_enable=autocommit_enable,
            autocommit_interval_ms=autocommit_interval_ms,
            autooffset_reset=autooffset_reset,
            consumer_timeout_ms=consumer_timeout_ms,
            fetch_size=fetch_size,
            max_fetch_size=self.max_fetch_size,
            queued_max_chunks=queued_max_chunks,
            rebalance_retries_max=rebalance_retries_max,
            rebalance_backoff_ms=rebalance_backoff_ms,
            fetcher_backoff_ms=fetcher_backoff_ms,
            zk_session_timeout_ms=zk_session_timeout_ms,
            socket_timeout_ms=socket_timeout_ms,
            fetch_wait_max_ms=fetch_wait_max_ms,
            shallow_iterator=shallow_iterator_enable,
            sasl=sasl,
            tls=security.context() if security is not None else None,
            stats=self.stats,
            clock=clock,
            sleep=sleep,
        )

        self._client = KazooClient(hosts=zk_connect, timeout=zk_session_timeout_ms / 1000)
        self._membership = GroupMembership(self._context, self._client)
        self._coordinator = Coordinator(self._context, self._membership)
        self._client.add_listener(self._coordinator.on_state)
        try:
            self._client.start(timeout=zk_connection_timeout_ms / 1000)
        except (KazooTimeoutError, KazooException) as exc:
            self._client.stop()
            self._client.close()
            raise ZooKeeperUnavailableError(
                f"cannot connect to ZooKeeper at {zk_connect} within {zk_connection_timeout_ms} ms: {exc}"
            ) from exc
        self._membership.remember_session()

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **overrides: Any) -> GroupConsumer:
        """From 0.7's consumer.properties keys (groupid, zk.connect, autooffset.reset, ...),
        and Kafka's sasl.mechanism with sasl.jaas.config (or sasl.username, sasl.password),
        security.protocol and ssl.* (security/tls.py)."""
        ints = {
            "autocommit.interval.ms": "autocommit_interval_ms",
            "consumer.timeout.ms": "consumer_timeout_ms",
            "fetch.size": "fetch_size",
            "queuedchunks.max": "queued_max_chunks",
            "rebalance.retries.max": "rebalance_retries_max",
            "zk.synctime.ms": "rebalance_backoff_ms",
            "rebalance.backoff.ms": "rebalance_backoff_ms",
            "fetcher.backoff.ms": "fetcher_backoff_ms",
            "zk.sessiontimeout.ms": "zk_session_timeout_ms",
            "zk.connectiontimeout.ms": "zk_connection_timeout_ms",
            "socket.timeout.ms": "socket_timeout_ms",
        }
        kwargs: dict[str, Any] = {k: int(props[p]) for p, k in ints.items() if p in props}
        if "autocommit.enable" in props:
            kwargs["autocommit_enable"] = props["autocommit.enable"].strip().lower() == "true"
        if "shallow.iterator.enable" in props:
            kwargs["shallow_iterator_enable"] = (
                props["shallow.iterator.enable"].strip().lower() == "true"
            )
        if "autooffset.reset" in props:
            kwargs["autooffset_reset"] = props["autooffset.reset"].strip()
        if props.get("consumerid"):
            kwargs["consumer_id"] = props["consumerid"]
        if any(key in props for key in ClientSecurity.KEYS):
            kwargs["security"] = ClientSecurity.from_properties(props)
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        kwargs["sasl"] = client_sasl(props, protocol)  # SASL_* only, as Kafka's clients
        kwargs.update(overrides)
        return cls(props["groupid"], props["zk.connect"], **kwargs)

    # -- the public API ---------------------------------------------------------------

    @property
    def zk_client(self) -> KazooClient:
        """The consumer's kazoo client (its session holds the ids and owner nodes)."""
        return self._client

    def create_message_streams(
        self, topic_streams: Mapping[str, int]
    ) -> dict[str, list[MessageStream]]:
        """Join the group for these topics: topic -> number of streams; returns topic -> streams.

        Returns after the first rebalance (successful or not: a failed one is retried in the
        background). Stream i of a topic is the consumer's thread `<consumerId>-<i>`.
        """
        subscription = StaticSubscription(dict(topic_streams))
        subscription.value()  # stream counts >= 1, or ValueError
        for topic in topic_streams:
            validate_topic(topic)  # before anything is written to ZooKeeper
        streams: dict[str, list[MessageStream]] = {}
        feeds: list[ChunkQueue] = []
        feed_of: dict[tuple[str | None, str], ChunkQueue] = {}
        for topic, n in topic_streams.items():
            streams[topic] = []
            for i, tid in enumerate(thread_ids(self.consumer_id, n)):
                feed = ChunkQueue(self.queued_max_chunks)
                streams[topic].append(MessageStream(self._context, i, topic, feed))
                feeds.append(feed)
                feed_of[(topic, tid)] = feed
        self._coordinator.start(subscription, feeds, feed_of)
        return streams

    def create_message_streams_by_filter(
        self, topic_filter: TopicFilter, n_streams: int = 1
    ) -> list[MessageStream]:
        """Join the group for every topic the filter allows, now and later; `n_streams`
        streams shared by all those topics (stream i is thread `<consumerId>-<i>` of each)."""
        subscription = WildcardSubscription(topic_filter, n_streams)
        subscription.value()
        feeds = [ChunkQueue(self.queued_max_chunks) for _ in range(n_streams)]
        feed_of: dict[tuple[str | None, str], ChunkQueue] = dict(
            zip(
                ((None, tid) for tid in thread_ids(self.consumer_id, n_streams)), feeds, strict=True
            )
        )
        self._coordinator.start(subscription, feeds, feed_of)
        return [MessageStream(self._context, i, None, feed) for i, feed in enumerate(feeds)]

    def commit_offsets(self, offsets: Mapping[tuple[str, str], int] | None = None) -> None:
        """Write the consumed offset of every owned partition that changed since the last commit.

        With `offsets` ((topic, partition name) -> offset), write those offsets instead, for
        the partitions among them that this consumer still owns: for an application that
        commits only what it has finished with (the mirror: what the target acknowledged),
        not everything the streams handed out.
        """
        self._coordinator.commit_offsets(offsets)

    def owned_partitions(self) -> dict[str, list[str]]:
        """topic -> the partitions this consumer owns now (sorted names)."""
        return self._coordinator.owned_partitions()

    def close(self) -> None:
        """Leave cleanly: stop the fetchers, commit (with autocommit), delete the owner and
        ids nodes, end the streams and the ZooKeeper session. Idempotent."""
        if not self._coordinator.close():
            return
        try:
            self._client.stop()
        finally:
            self._client.close()
        log.info("consumer %s closed: %s", self.consumer_id, self.stats.as_dict())

    def delete_group(self) -> None:
        """Delete `/consumers/<group>` with everything under it (offsets too): for a private
        group that nobody will use again. Works before or after `close()`."""
        client = self._client
        temporary = None
        if not client.connected:
            temporary = client = KazooClient(hosts=self.zk_connect, timeout=10)
            client.start(timeout=10)
        try:
            with contextlib.suppress(NoNodeError, NotEmptyError):
                client.delete(paths.consumer_group_path(self.group_id), recursive=True)
        finally:
            if temporary is not None:
                temporary.stop()
                temporary.close()

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GroupConsumer({self.consumer_id!r}, {self.zk_connect!r})"
