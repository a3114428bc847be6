"""The group consumer: Kafka 0.7's `ZookeeperConsumerConnector`, with 0.7's znodes and values.

    consumer = GroupConsumer(group_id="loaders", zk_connect="127.0.0.1:2181/live")
    stream = consumer.create_message_streams({"page-views": 1})["page-views"][0]
    for message in stream:                 # blocks; see consumer_timeout_ms
        handle(message.topic, message.partition, message.offset, message.payload)
    consumer.close()                       # commits, releases its partitions, leaves the group

The members of a group share the partitions of the topics they subscribe to: each partition
is consumed by exactly one member thread (stream), and the members agree on who owns what
through ZooKeeper alone (KAFKA07_PROTOCOL.md §7, §7.1; the 0.7 design doc's consumer
registration and rebalancing algorithms; the paper's §3.2-3.3):

    /consumers/<group>/ids/<consumerId>             ephemeral   the subscription, `{ "t": 2 }` /
                                                                `*<n>*<regex>` / `!<n>!<regex>`
    /consumers/<group>/owners/<topic>/<b>-<p>       ephemeral   the owning thread id `<consumerId>-<i>`
    /consumers/<group>/offsets/<topic>/<b>-<p>      persistent  next byte offset to consume, decimal

(paths and codecs: `logbroker.coordination.paths`; assignment and subscription values:
`logbroker.coordination.rebalance`). Tools written for 0.7 read these nodes as they are.

Registration: `create_message_streams` (static topics) or `create_message_streams_by_filter`
(a Whitelist/Blacklist regex: every matching topic under `/brokers/topics`, new ones
included) writes the ids node, then rebalances. Watches on the group's ids, on `/brokers/ids`,
on `/brokers/topics/<t>` of every subscribed topic (and on `/brokers/topics` itself for a
filter) signal the rebalance thread; kazoo's callbacks never do ZooKeeper work themselves.

A rebalance, exactly as 0.7.2's `syncedRebalance`: read the group and the cluster; stop the
fetchers and clear the stream queues; commit the offsets (when autocommit is on); release
(delete) the owner nodes this consumer holds; compute the range assignment of every topic;
create the owner nodes of the partitions it assigns to our threads (in one transaction, so
all or none). If one of them is still owned by another member (NodeExists), give everything
up, wait `rebalance_backoff_ms` and start over, at most `rebalance_retries_max` times. Then
read the start offsets from the offsets nodes (after the claim, so the previous owner's final
commit is seen), start one fetcher thread per broker, and go. Where there is no offsets node
(or on a fetch error OffsetOutOfRange, which is logged), the start is the broker's earliest
offset (`autooffset_reset="smallest"`, OFFSETS -2) or latest one (`"largest"`, OFFSETS -1).
One deviation from 0.7: after `rebalance_retries_max` failed attempts, 0.7 threw and stayed
idle until the next watch fired; here the failure is logged (`stats.rebalance_failures`)
and the rebalance tried again after `rebalance_backoff_ms`.

Fetchers ask their broker with FETCH_WAIT (the broker holds the request up to
`fetch_wait_max_ms` until data comes), parse the whole messages of each answer and put them,
as one chunk per partition, in the bounded queue (`queued_max_chunks`) of the stream that
owns the partition. A chunk whose first message does not fit grows that partition's fetch
size (doubling, up to `max_fetch_size`); a larger message, or a corrupt one, is raised from
the stream's `next()`, and that partition is not fetched again until the next rebalance.

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
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent

from ..coordination import paths
from ..coordination.rebalance import (
    Blacklist,
    StaticSubscription,
    Subscription,
    TopicFilter,
    Whitelist,
    WildcardSubscription,
    assign,
    consumers_per_topic,
    make_consumer_id,
    parse_subscription,
    thread_ids,
    topic_partitions,
)
from ..protocol.errors import InvalidMessageError, LogbrokerError, OffsetOutOfRangeError
from ..protocol.message_set import first_entry_size, iter_messages
from ..protocol.requests import EARLIEST_TIME, LATEST_TIME, FetchRequest
from .brokers import Broker
from .connection import BrokerUnavailableError
from .simple_consumer import DEFAULT_MAX_FETCH_SIZE, MessageTooLargeError, SimpleConsumer

__all__ = [
    "Blacklist",
    "ConsumerIdTakenError",
    "GroupConsumer",
    "GroupConsumerStats",
    "GroupMessage",
    "MessageStream",
    "Whitelist",
    "ZooKeeperUnavailableError",
]

log = logging.getLogger(__name__)

AUTOOFFSET_RESETS = {"smallest": EARLIEST_TIME, "largest": LATEST_TIME}


class ZooKeeperUnavailableError(LogbrokerError):
    """ZooKeeper could not be reached (at start, or for an explicit commit)."""


class ConsumerIdTakenError(LogbrokerError):
    """Another live consumer of the group registered the same consumer id."""


class GroupMessage(NamedTuple):
    """A message handed out by a stream.

    `partition` is the cluster-wide name `"<brokerId>-<partId>"`; `offset` is where to fetch
    to get this message again and `next_offset` where its partition resumes after it (both
    at wrapper boundaries for a message inside a compressed set, 0.7's rule).
    """

    topic: str
    partition: str
    offset: int
    next_offset: int
    payload: bytes


@dataclass
class GroupConsumerStats:
    """What a group consumer did; read it any time (counters only grow)."""

    messages_delivered: int = 0
    rebalances: int = 0
    rebalance_attempts: int = 0
    rebalance_failures: int = 0
    commits: int = 0
    offsets_written: int = 0
    offset_resets: int = 0
    fetch_errors: int = 0
    sessions_reestablished: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


class _PartitionInfo:
    """One owned partition during one rebalance generation (0.7's PartitionTopicInfo)."""

    __slots__ = (
        "broker_id",
        "committed_offset",
        "consumed_offset",
        "fetch_offset",
        "fetch_size",
        "name",
        "partition",
        "paused_until",
        "released",
        "stalled",
        "stream",
        "thread_id",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        name: str,
        thread_id: str,
        stream: MessageStream,
        offset: int | None,
        fetch_size: int,
    ) -> None:
        self.topic = topic
        self.name = name
        self.broker_id, self.partition = paths.parse_partition_name(name)
        self.thread_id = thread_id
        self.stream = stream
        self.fetch_offset = offset  # None: ask the broker (autooffset.reset)
        self.consumed_offset = offset  # next offset after the last message handed out
        self.committed_offset = offset  # what the offsets node holds (None: no node)
        self.fetch_size = fetch_size
        self.released = False  # set when a rebalance or close took the partition away
        self.stalled = False  # a message that cannot be delivered: no more fetches
        self.paused_until = 0.0  # back off after a fetch error

    def __repr__(self) -> str:
        return f"<{self.topic}/{self.name} {self.thread_id} at {self.fetch_offset}>"


class _Chunk(NamedTuple):
    info: _PartitionInfo
    messages: list[GroupMessage]


_CLOSED = object()


class MessageStream:
    """A blocking iterator of GroupMessage, fed by the fetchers through a bounded queue.

    `next()` waits for a message. With the consumer's `consumer_timeout_ms` >= 0 it raises
    StopIteration after waiting that long without a message (so a `for` loop ends); calling
    `next()` or iterating again waits anew. After the consumer's `close()` it always raises
    StopIteration. A stream is meant to be read by one thread at a time.
    """

    def __init__(self, consumer: GroupConsumer, index: int, topic: str | None, capacity: int):
        self.consumer = consumer
        self.index = index
        self.topic = topic  # None for a stream of a topic filter
        self._queue: queue.Queue[Any] = queue.Queue(capacity)
        self._chunk: _Chunk | None = None
        self._position = 0
        self._closed = False

    def __iter__(self) -> MessageStream:
        return self

    def __next__(self) -> GroupMessage:
        consumer = self.consumer
        timeout_ms = consumer.consumer_timeout_ms
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        lock = consumer._deliver_lock
        while True:
            chunk = self._chunk
            if chunk is not None:
                with lock:
                    info = chunk.info
                    if not info.released and self._position < len(chunk.messages):
                        message = chunk.messages[self._position]
                        self._position += 1
                        info.consumed_offset = message.next_offset
                        consumer.stats.messages_delivered += 1
                        return message
                self._chunk = None
            if self._closed:
                raise StopIteration
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            try:
                item = self._queue.get(timeout=max(0.0, wait))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise StopIteration from None
                continue
            if item is _CLOSED:
                self._closed = True
                raise StopIteration
            if isinstance(item, BaseException):
                raise item
            self._chunk = item
            self._position = 0

    # -- used by the consumer ----------------------------------------------------------

    def _put(self, item: Any, stop: threading.Event) -> bool:
        """Queue a chunk, waiting while the queue is full; False if told to stop first."""
        while not stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _clear(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is _CLOSED:  # never lose the end marker
                self._queue.put_nowait(item)
                return

    def _close(self) -> None:
        self._clear()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_CLOSED)

    def __repr__(self) -> str:
        what = self.topic if self.topic is not None else "filter"
        return f"MessageStream({what}#{self.index})"


class _Fetcher:
    """One thread fetching the owned partitions of one broker into their streams."""

    def __init__(self, consumer: GroupConsumer, broker: Broker, infos: list[_PartitionInfo]):
        self.consumer = consumer
        self.broker = broker
        self.infos = infos
        self.client = SimpleConsumer(
            broker.host,
            broker.port,
            fetch_size=consumer.fetch_size,
            max_fetch_size=consumer.max_fetch_size,
            timeout=consumer.socket_timeout_ms / 1000,
        )
        self.stop_event = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name=f"group-fetcher-{consumer.consumer_id}-{broker.id}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()

    def join(self) -> None:
        self.thread.join()
        self.client.close()

    def _run(self) -> None:
        backoff = self.consumer.fetcher_backoff_ms / 1000
        while not self.stop_event.is_set():
            try:
                self._round()
            except BrokerUnavailableError as exc:
                self.consumer.stats.add(fetch_errors=1)
                log.warning(
                    "fetcher for broker %s: %s; retrying in %g s", self.broker.id, exc, backoff
                )
                self.stop_event.wait(backoff)
            except Exception:
                self.consumer.stats.add(fetch_errors=1)
                log.exception(
                    "fetcher for broker %s failed; retrying in %g s", self.broker.id, backoff
                )
                self.stop_event.wait(backoff)

    def _round(self) -> None:
        now = time.monotonic()
        active = [p for p in self.infos if not p.stalled and p.paused_until <= now]
        if not active:
            waits = [p.paused_until - now for p in self.infos if not p.stalled]
            self.stop_event.wait(min(waits) if waits else 1.0)
            return
        for p in active:
            if p.fetch_offset is None:
                self._reset(p, None)
        requests = [
            FetchRequest(p.topic, p.partition, p.fetch_offset, p.fetch_size) for p in active
        ]  # type: ignore[arg-type]
        results = self.client.fetch_wait(requests, self.consumer.fetch_wait_max_ms)
        for p, result in zip(active, results, strict=True):
            if self.stop_event.is_set():
                return
            if isinstance(result, OffsetOutOfRangeError):
                self._reset(p, result)
                continue
            if isinstance(result, LogbrokerError):
                self.consumer.stats.add(fetch_errors=1)
                p.paused_until = time.monotonic() + self.consumer.fetcher_backoff_ms / 1000
                log.warning(
                    "fetching %s/%s from broker %s: %s", p.topic, p.name, self.broker.id, result
                )
                continue
            self._deliver(p, result.data)

    def _deliver(self, p: _PartitionInfo, data: bytes | memoryview) -> None:
        offset = p.fetch_offset
        assert offset is not None
        try:
            messages = [
                GroupMessage(p.topic, p.name, m.offset, m.next_offset, m.payload)
                for m in iter_messages(data, offset)
            ]
        except InvalidMessageError as exc:
            self._stall(p, exc)
            return
        if messages:
            if self.stop_event.is_set() or not p.stream._put(_Chunk(p, messages), self.stop_event):
                return
            p.fetch_offset = messages[-1].next_offset
            p.fetch_size = self.consumer.fetch_size
            return
        needed = first_entry_size(data)
        if needed is not None and len(data) < needed and len(data) >= p.fetch_size:
            if needed > self.consumer.max_fetch_size:
                self._stall(
                    p,
                    MessageTooLargeError(
                        f"the message at offset {offset} of {p.topic}/{p.name} is {needed} bytes, "
                        f"over the largest fetch size {self.consumer.max_fetch_size}"
                    ),
                )
            else:
                p.fetch_size = max(needed, min(p.fetch_size * 2, self.consumer.max_fetch_size))

    def _stall(self, p: _PartitionInfo, exc: LogbrokerError) -> None:
        log.error(
            "%s/%s cannot be consumed past offset %s: %s", p.topic, p.name, p.fetch_offset, exc
        )
        p.stalled = True
        p.stream._put(exc, self.stop_event)

    def _reset(self, p: _PartitionInfo, error: LogbrokerError | None) -> None:
        """Start `p` at the broker's earliest or latest offset (autooffset.reset)."""
        reset = self.consumer.autooffset_reset
        old = p.fetch_offset
        offsets = self.client.offsets_before(p.topic, p.partition, AUTOOFFSET_RESETS[reset], 1)
        offset = offsets[0] if offsets else 0
        with self.consumer._deliver_lock:
            p.fetch_offset = offset
            p.consumed_offset = offset
        if error is not None:
            self.consumer.stats.add(offset_resets=1)
            log.warning(
                "%s/%s: offset %s is out of range on broker %s (%s); autooffset.reset=%s: "
                "resuming at %s",
                p.topic,
                p.name,
                old,
                self.broker.id,
                error,
                reset,
                offset,
            )
        else:
            log.info(
                "%s/%s has no committed offset; autooffset.reset=%s: starting at %s",
                p.topic,
                p.name,
                reset,
                offset,
            )


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

        self._deliver_lock = threading.Lock()  # streams handing out vs. commits and releases
        self._zk_lock = threading.RLock()  # rebalances, commits, close: one at a time
        self._cond = threading.Condition()  # wakes the rebalance thread
        self._rebalance_requested = False
        self._topics_changed = False
        self._new_session = False
        self._session_lost = False
        self._closing = False
        self._closed = False
        self._first_rebalance = threading.Event()
        self._thread: threading.Thread | None = None

        self._subscription: Subscription | None = None
        self._streams: list[MessageStream] = []
        self._stream_of: dict[tuple[str | None, str], MessageStream] = {}  # (topic|None, thread id)
        self._registry: dict[tuple[str, str], _PartitionInfo] = {}  # (topic, "b-p") -> info
        self._owned: dict[str, str] = {}  # owner node path -> our thread id
        self._fetchers: list[_Fetcher] = []
        self._known_topics: set[str] = set()
        self._sessions: set[int] = set()
        self._offset_clients: dict[Broker, SimpleConsumer] = {}

        self._client = KazooClient(hosts=zk_connect, timeout=zk_session_timeout_ms / 1000)
        self._client.add_listener(self._on_state)
        try:
            self._client.start(timeout=zk_connection_timeout_ms / 1000)
        except (KazooTimeoutError, KazooException) as exc:
            self._client.stop()
            self._client.close()
            raise ZooKeeperUnavailableError(
                f"cannot connect to ZooKeeper at {zk_connect} within {zk_connection_timeout_ms} ms: {exc}"
            ) from exc
        self._remember_session()

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **overrides: Any) -> GroupConsumer:
        """From 0.7's consumer.properties keys (groupid, zk.connect, autooffset.reset, ...)."""
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
        if "autooffset.reset" in props:
            kwargs["autooffset_reset"] = props["autooffset.reset"].strip()
        if props.get("consumerid"):
            kwargs["consumer_id"] = props["consumerid"]
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
            paths.broker_topic_path(topic)  # a usable topic name, or ValueError
        streams: dict[str, list[MessageStream]] = {}
        for topic, n in topic_streams.items():
            streams[topic] = [
                MessageStream(self, i, topic, self.queued_max_chunks) for i in range(n)
            ]
            for tid, stream in zip(thread_ids(self.consumer_id, n), streams[topic], strict=True):
                self._stream_of[(topic, tid)] = stream
        self._start(subscription, [s for group in streams.values() for s in group])
        return streams

    def create_message_streams_by_filter(
        self, topic_filter: TopicFilter, n_streams: int = 1
    ) -> list[MessageStream]:
        """Join the group for every topic the filter allows, now and later; `n_streams`
        streams shared by all those topics (stream i is thread `<consumerId>-<i>` of each)."""
        subscription = WildcardSubscription(topic_filter, n_streams)
        subscription.value()
        streams = [MessageStream(self, i, None, self.queued_max_chunks) for i in range(n_streams)]
        for tid, stream in zip(thread_ids(self.consumer_id, n_streams), streams, strict=True):
            self._stream_of[(None, tid)] = stream
        self._start(subscription, streams)
        return streams

    def commit_offsets(self) -> None:
        """Write the consumed offset of every owned partition that changed since the last commit."""
        with self._zk_lock:
            if self._closed:
                return
            try:
                self._commit(list(self._registry.values()), check_owner=self._session_lost)
            except KazooException as exc:
                raise ZooKeeperUnavailableError(f"committing offsets failed: {exc!r}") from exc

    def owned_partitions(self) -> dict[str, list[str]]:
        """topic -> the partitions this consumer owns now (sorted names)."""
        with self._zk_lock:
            owned: dict[str, list[str]] = defaultdict(list)
            for topic, name in sorted(self._registry):
                owned[topic].append(name)
            return dict(owned)

    def close(self) -> None:
        """Leave cleanly: stop the fetchers, commit (with autocommit), delete the owner and
        ids nodes, end the streams and the ZooKeeper session. Idempotent."""
        with self._cond:
            if self._closing:
                already = True
            else:
                already = False
                self._closing = True
                self._cond.notify_all()
        if already:
            return
        if self._thread is not None and self._thread is not threading.current_thread():
            # a ZooKeeper call can hang while the server is unreachable: do not wait forever
            self._thread.join(self.zk_session_timeout_ms / 1000 + 5)
        with self._zk_lock:
            infos = self._stop_consuming()
            if self.autocommit_enable and self._client.connected:
                try:
                    self._commit(infos, check_owner=self._session_lost)
                except Exception:
                    log.exception("committing offsets at close failed")
            self._registry = {}
            if self._client.connected:
                try:
                    self._release()
                    if self._subscription is not None:
                        self._delete_own(
                            paths.consumer_id_path(self.group_id, self.consumer_id), None
                        )
                except Exception:
                    log.exception("releasing partitions at close failed")
            for stream in self._streams:
                stream._close()
            for client in self._offset_clients.values():
                client.close()
            self._closed = True
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

    # -- start, watches and the rebalance thread ---------------------------------------

    def _start(self, subscription: Subscription, streams: list[MessageStream]) -> None:
        with self._cond:
            if self._closing:
                raise RuntimeError("the consumer is closed")
            if self._subscription is not None:
                raise RuntimeError("a consumer creates its message streams once")
            self._subscription = subscription
            self._streams = streams
        with self._zk_lock:
            self._register()
        self._thread = threading.Thread(
            target=self._coordinate, name=f"group-rebalance-{self.consumer_id}", daemon=True
        )
        with self._cond:
            self._rebalance_requested = True
        self._thread.start()
        while not self._first_rebalance.wait(0.5):
            if not self._thread.is_alive():
                break

    def _remember_session(self) -> None:
        if self._client.client_id is not None:
            self._sessions.add(self._client.client_id[0])

    def _on_state(self, state: str) -> None:
        """kazoo's state listener: only flags (runs on kazoo's connection thread)."""
        if self._closing:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("consumer %s: ZooKeeper session lost", self.consumer_id)
        elif state == KazooState.CONNECTED and self._session_lost:
            with self._cond:
                self._new_session = True
                self._cond.notify_all()

    def _on_watch(self, event: WatchedEvent) -> None:
        """A group, broker or topic change: ask the rebalance thread for a rebalance."""
        if event.type == EventType.NONE:
            return  # a session event; a new session brings its own rebalance
        with self._cond:
            self._rebalance_requested = True
            self._cond.notify_all()

    def _on_topics_watch(self, event: WatchedEvent) -> None:
        """A topic came or went under /brokers/topics (topic filters only)."""
        if event.type == EventType.NONE:
            return
        with self._cond:
            self._topics_changed = True
            self._cond.notify_all()

    def _coordinate(self) -> None:
        """The rebalance thread: rebalances, session changes and autocommits, one at a time."""
        interval = self.autocommit_interval_ms / 1000
        next_commit = time.monotonic() + interval
        retry_at: float | None = None
        while True:
            with self._cond:
                while not (
                    self._closing
                    or self._rebalance_requested
                    or self._new_session
                    or self._topics_changed
                ):
                    now = time.monotonic()
                    wake = [
                        t for t in (retry_at, next_commit if self.autocommit_enable else None) if t
                    ]
                    timeout = min(wake) - now if wake else None
                    if timeout is not None and timeout <= 0:
                        break
                    self._cond.wait(timeout)
                if self._closing:
                    return
                new_session, self._new_session = self._new_session, False
                topics_changed, self._topics_changed = self._topics_changed, False
                rebalance = self._rebalance_requested or new_session
            if retry_at is not None and time.monotonic() >= retry_at:
                rebalance, retry_at = True, None
            try:
                if new_session:
                    self._on_new_session()
                if topics_changed and not rebalance:
                    rebalance = self._topics_differ()
                if rebalance:
                    retry_at = None
                    if not self._synced_rebalance():
                        retry_at = time.monotonic() + self.rebalance_backoff_ms / 1000
            except Exception:
                if self._closing:
                    return
                log.exception("consumer %s: rebalance failed", self.consumer_id)
                self.stats.add(rebalance_failures=1)
                retry_at = time.monotonic() + self.rebalance_backoff_ms / 1000
            finally:
                self._first_rebalance.set()
            if self.autocommit_enable and time.monotonic() >= next_commit:
                next_commit = time.monotonic() + interval
                if not self._session_lost:
                    try:
                        with self._zk_lock:
                            self._commit(list(self._registry.values()), check_owner=False)
                    except Exception as exc:
                        log.warning("consumer %s: autocommit failed: %r", self.consumer_id, exc)

    def _synced_rebalance(self) -> bool:
        """0.7's syncedRebalance: up to rebalance_retries_max attempts; True when one worked."""
        for attempt in range(1, self.rebalance_retries_max + 1):
            with self._cond:
                if self._closing:
                    return True
                self._rebalance_requested = False
            self.stats.add(rebalance_attempts=1)
            try:
                with self._zk_lock:
                    if self._rebalance():
                        self.stats.add(rebalances=1)
                        return True
            except Exception as exc:
                expected = isinstance(exc, KazooException | LogbrokerError)
                log.warning(
                    "consumer %s: rebalance attempt %d failed: %r",
                    self.consumer_id,
                    attempt,
                    exc,
                    exc_info=not expected,
                )
            with self._zk_lock:  # consume nothing while the others catch up
                infos = self._stop_consuming()
                self._registry = {}
                try:
                    if self.autocommit_enable and infos:
                        self._commit(infos, check_owner=True)
                    self._release()
                except Exception as exc:
                    log.warning("consumer %s: commit or release failed: %r", self.consumer_id, exc)
            with self._cond:
                if self._cond.wait_for(lambda: self._closing, self.rebalance_backoff_ms / 1000):
                    return True
        self.stats.add(rebalance_failures=1)
        log.error(
            "consumer %s could not rebalance after %d attempts; trying again in %d ms",
            self.consumer_id,
            self.rebalance_retries_max,
            self.rebalance_backoff_ms,
        )
        return False

    # -- ZooKeeper reads ---------------------------------------------------------------

    def _children(self, path: str, watch: Any) -> list[str]:
        """Children of `path` with a child watch; a watch on its creation if it is missing."""
        while True:
            try:
                return list(self._client.get_children(path, watch=watch))
            except NoNodeError:
                if self._client.exists(path, watch=watch) is None:
                    return []

    def _read_brokers(self) -> dict[int, Broker]:
        brokers = {}
        for child in self._children(paths.BROKER_IDS, self._on_watch):
            try:
                data, _ = self._client.get(f"{paths.BROKER_IDS}/{child}")
                host, port = paths.parse_broker_value(data)
                brokers[int(child)] = Broker(int(child), host, port)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("ignoring broker registration %s: %s", child, exc)
        return brokers

    def _read_partitions(self, topic: str) -> list[str]:
        counts = {}
        path = paths.broker_topic_path(topic)
        for child in self._children(path, self._on_watch):
            try:
                data, _ = self._client.get(f"{path}/{child}")
                counts[int(child)] = paths.parse_topic_value(data)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("ignoring %s/%s: %s", path, child, exc)
        return topic_partitions(counts)

    def _read_members(self, all_topics: list[str]) -> dict[str, list[str]]:
        """topic -> sorted thread ids of the whole group (0.7's getConsumersPerTopic)."""
        assert self._subscription is not None
        ids_path = paths.consumer_ids_path(self.group_id)
        members = self._children(ids_path, self._on_watch)
        if self.consumer_id not in members:
            log.warning("consumer %s: our ids node is gone; registering again", self.consumer_id)
            self._register()
            members.append(self.consumer_id)
        subscriptions: dict[str, Subscription] = {}
        for member in members:
            if member == self.consumer_id:
                subscriptions[member] = self._subscription
                continue
            try:
                data, _ = self._client.get(f"{ids_path}/{member}")
                subscriptions[member] = parse_subscription(data)
            except NoNodeError:
                continue  # gone meanwhile; its watch event brings another rebalance
            except ValueError as exc:
                log.warning("ignoring group member %s: %s", member, exc)
        return consumers_per_topic(subscriptions, all_topics)

    def _read_offset(self, topic: str, name: str) -> int | None:
        broker_id, partition = paths.parse_partition_name(name)
        path = paths.consumer_offset_path(self.group_id, topic, broker_id, partition)
        try:
            data, _ = self._client.get(path)
        except NoNodeError:
            return None
        text = data.decode("utf-8", "replace").strip()
        if text.isascii() and text.isdigit():
            return int(text)
        if text:
            log.warning("ignoring offsets node %s holding %r", path, text)
        return None

    def _topics_differ(self) -> bool:
        if not isinstance(self._subscription, WildcardSubscription):
            return False
        with self._zk_lock:
            topics = set(
                self._subscription.topics(
                    self._children(paths.BROKER_TOPICS, self._on_topics_watch)
                )
            )
        return topics != self._known_topics

    # -- ZooKeeper writes --------------------------------------------------------------

    def _register(self) -> None:
        """Create our ephemeral ids node (waiting out an old session's node with our id)."""
        assert self._subscription is not None
        path = paths.consumer_id_path(self.group_id, self.consumer_id)
        value = self._subscription.value().encode()
        deadline = time.monotonic() + self.zk_session_timeout_ms / 1000 + 2
        while True:
            try:
                self._client.create(path, value, ephemeral=True, makepath=True)
                log.info("consumer %s registered: %s", self.consumer_id, value.decode())
                return
            except NodeExistsError:
                pass
            try:
                data, stat = self._client.get(path)
            except NoNodeError:
                continue
            session = self._client.client_id[0] if self._client.client_id else None
            if stat.ephemeralOwner == session:
                if data != value:
                    self._client.set(path, value)
                return
            if time.monotonic() > deadline:
                raise ConsumerIdTakenError(
                    f"consumer id {self.consumer_id} is registered by another live session "
                    f"(0x{stat.ephemeralOwner:x}) in group {self.group_id}"
                )
            time.sleep(0.2)  # an old session of ours, or a clash: wait for it to expire

    def _write_offset(self, path: str, value: bytes) -> None:
        try:
            self._client.set(path, value)
        except NoNodeError:
            try:
                self._client.create(path, value, makepath=True)
            except NodeExistsError:
                self._client.set(path, value)

    def _commit(self, infos: list[_PartitionInfo], *, check_owner: bool) -> None:
        """Write the consumed offsets that changed (0.7's commitOffsets)."""
        with self._deliver_lock:
            pending = [
                (info, info.consumed_offset)
                for info in infos
                if info.consumed_offset is not None
                and info.consumed_offset != info.committed_offset
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
        self.stats.add(commits=1, offsets_written=written)
        if written:
            log.debug("consumer %s committed %d offsets", self.consumer_id, written)

    def _still_ours(self, info: _PartitionInfo) -> bool:
        owner = paths.consumer_owner_path(self.group_id, info.topic, info.broker_id, info.partition)
        try:
            data, _ = self._client.get(owner)
        except NoNodeError:
            return True
        return bool(data.decode("utf-8", "replace") == info.thread_id)

    def _delete_own(self, path: str, thread_id: str | None) -> None:
        """Delete an ephemeral node of ours (an owner node only while it names `thread_id`)."""
        try:
            data, stat = self._client.get(path)
        except NoNodeError:
            return
        session = self._client.client_id[0] if self._client.client_id else None
        if thread_id is not None and data.decode("utf-8", "replace") != thread_id:
            return
        if stat.ephemeralOwner != session and stat.ephemeralOwner not in self._sessions:
            return
        with contextlib.suppress(NoNodeError, BadVersionError):
            self._client.delete(path, version=stat.version)

    def _release(self) -> None:
        """Delete the owner nodes we hold (0.7's releasePartitionOwnership)."""
        for path, thread_id in list(self._owned.items()):
            self._delete_own(path, thread_id)
            del self._owned[path]

    def _claim(self, decisions: dict[tuple[str, str], str]) -> bool:
        """Create all our owner nodes in one transaction; False if one is owned by another."""
        if not decisions:
            return True
        nodes = {}
        for (topic, name), thread_id in sorted(decisions.items()):
            broker_id, partition = paths.parse_partition_name(name)
            nodes[paths.consumer_owner_path(self.group_id, topic, broker_id, partition)] = thread_id
        for topic in {topic for topic, _ in decisions}:
            self._client.ensure_path(paths.consumer_owners_path(self.group_id, topic))
        transaction = self._client.transaction()
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
                data, stat = self._client.get(path)
            except NoNodeError:
                continue
            log.info(
                "consumer %s: %s is still owned by %s; backing off",
                self.consumer_id,
                path,
                data.decode("utf-8", "replace"),
            )
            session = self._client.client_id[0] if self._client.client_id else None
            if stat.ephemeralOwner == session:  # a leftover of ours: clear it for the retry
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._client.delete(path, version=stat.version)
        return False

    # -- the rebalance -----------------------------------------------------------------

    def _stop_consuming(self) -> list[_PartitionInfo]:
        """Stop and join the fetchers, end delivery from the owned partitions, clear queues."""
        fetchers, self._fetchers = self._fetchers, []
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            fetcher.join()
        infos = list(self._registry.values())
        with self._deliver_lock:
            for info in infos:
                info.released = True
        for stream in self._streams:
            stream._clear()
        return infos

    def _rebalance(self) -> bool:
        """One attempt of 0.7.2's rebalance; False when a partition is owned by another."""
        subscription = self._subscription
        assert subscription is not None
        all_topics: list[str] = []
        if isinstance(subscription, WildcardSubscription):
            all_topics = self._children(paths.BROKER_TOPICS, self._on_topics_watch)
            self._known_topics = set(subscription.topics(all_topics))
        my_threads = subscription.thread_ids_per_topic(self.consumer_id, all_topics)
        group_threads = self._read_members(all_topics)
        brokers = self._read_brokers()
        partitions = {topic: self._read_partitions(topic) for topic in my_threads}

        infos = self._stop_consuming()
        if self.autocommit_enable:  # (if this fails, the failed attempt commits them)
            self._commit(infos, check_owner=self._session_lost)
        self._registry = {}
        self._release()

        decisions: dict[tuple[str, str], str] = {}
        for topic, threads in my_threads.items():
            assignment = assign(partitions[topic], group_threads.get(topic, []))
            for thread_id in threads:
                for name in assignment.get(thread_id, []):
                    decisions[(topic, name)] = thread_id
        if not self._claim(decisions):
            return False

        registry = {}
        for (topic, name), thread_id in sorted(decisions.items()):
            stream = self._stream_of[
                (topic if isinstance(subscription, StaticSubscription) else None, thread_id)
            ]
            offset = self._read_offset(topic, name)
            registry[(topic, name)] = _PartitionInfo(
                topic, name, thread_id, stream, offset, self.fetch_size
            )
        self._registry = registry
        self._resolve_offsets(brokers)
        self._start_fetchers(brokers)
        summary = {t: [n for (tt, n) in registry if tt == t] for t in my_threads}
        log.info(
            "consumer %s owns %s",
            self.consumer_id,
            "; ".join(f"{t}: {', '.join(ns) or '-'}" for t, ns in summary.items()) or "nothing",
        )
        return True

    def _resolve_offsets(self, brokers: dict[int, Broker]) -> None:
        """Ask the brokers where partitions without a committed offset start
        (autooffset.reset), as 0.7 did during the rebalance; a broker that does not answer
        leaves it to the fetcher."""
        when = AUTOOFFSET_RESETS[self.autooffset_reset]
        for info in self._registry.values():
            broker = brokers.get(info.broker_id)
            if info.fetch_offset is not None or broker is None:
                continue
            client = self._offset_clients.get(broker)
            if client is None:
                client = self._offset_clients[broker] = SimpleConsumer(
                    broker.host, broker.port, timeout=self.socket_timeout_ms / 1000
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
                self.autooffset_reset,
                info.fetch_offset,
            )

    def _start_fetchers(self, brokers: dict[int, Broker]) -> None:
        by_broker: dict[int, list[_PartitionInfo]] = defaultdict(list)
        for info in self._registry.values():
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
            fetcher = _Fetcher(self, broker, infos)
            self._fetchers.append(fetcher)
            fetcher.start()

    def _on_new_session(self) -> None:
        """After a LOST session: commit what is still ours, register again (then rebalance)."""
        with self._zk_lock:
            self._remember_session()
            log.warning("consumer %s: new ZooKeeper session; registering again", self.consumer_id)
            infos = self._stop_consuming()
            self._registry = {}
            try:
                if self.autocommit_enable:
                    self._commit(infos, check_owner=True)
                self._release()
            except KazooException as exc:
                log.warning(
                    "consumer %s: commit after the session loss failed: %r", self.consumer_id, exc
                )
            self._session_lost = False
            self._register()
            self.stats.add(sessions_reestablished=1)
