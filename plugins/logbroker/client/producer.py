"""Producers (`producer/SyncProducer`, `ProducerPool`, `async/ProducerSendThread`).

`Producer` sends at once, from the caller's thread. `AsyncProducer` queues messages in
memory and a background thread sends them in batches of `batch.size` messages or every
`queue.time` ms, whichever comes first.

Per batch, messages are grouped into one message set per (topic, partition), compressed
into one wrapper when the topic is compressed (`compression.codec`, `compressed.topics`),
and all the sets for one broker go in one request: PRODUCE for one set, MULTIPRODUCE for
several (0.7's fire-and-forget: nothing comes back), or the PRODUCE_ACK extension when an
answer is asked for.

Acknowledgements, Kafka 0.8's `request.required.acks`, or 0.7-era `acks` (mapped):

| request.required.acks | acks            | request                       | answered when                   |
|-----------------------|-----------------|-------------------------------|---------------------------------|
| 0                     | "none"          | PRODUCE / MULTIPRODUCE        | never (fire and forget)         |
| 1                     | "ack" / "fsync" | PRODUCE_ACK                   | the leader appended (and fsynced, with "fsync") |
| -1                    | (none)          | PRODUCE_ACK, all-in-sync flag | every in-sync replica has it, or `request.timeout.ms` passed (code 12) |

Both may be given: `request_required_acks` sets the level and `acks="fsync"` adds the fsync.
A 0.7 topic's broker is its partition's whole ISR: -1 is answered there as 1 is.

A 0.8-format topic (`topics create --message-format 0.8`, docs/protocol.md) goes to its
leaders' Kafka 0.8 listeners (leaders.py, listeners.py) in Produce v0 requests of 0.8
message sets (connection08.py): each message keeps its key (a str in UTF-8), the set is
compressed as configured, required_acks is the level above (0, 1 or -1; "fsync" has no 0.8
equivalent and is refused before anything is sent), and a SendResult holds logical offsets
(`offset` the set's first message, `next_offset` = offset + messages). 0.8's error codes
are read back as the project's exceptions (kafka08.errors.error_for_code08), so the retries
below are the same.

Partitions: a message with a key goes to `partitioner(key, n)` of the topic's partitions;
without a key, all of a batch's messages for a topic go to one random partition (fewer,
bigger sets). A 0.7 topic's partitions are `(broker, i)` (brokers.py); a replicated topic's
are 0..N-1 of its assignment (docs/replication.md), each sent to its leader (leaders.py:
needs `zk_connect` or a ZooKeeperBrokers; with a broker list every topic is taken for a 0.7
one).

Retries, as Kafka's producer since KIP-91: a failed set is sent again until it has gone on
failing for `delivery.timeout.ms` (default 120000: a failover waits for the dead leader's
ZooKeeper session to expire, seconds), `retry.backoff.ms` after the first failure, the wait
doubling up to `retry.backoff.max.ms` (KIP-580's names); `message.send.max.retries`, when
set, also bounds the number of retries. What is retried: a broker that cannot be reached,
and for a replicated partition the answers
NotLeaderForPartition (8), LeaderNotAvailable (9), NotEnoughReplicas (10: the ISR may grow
back), NotEnoughReplicasAfterAppend (11) and RequestTimedOut (12). Before a retry the leaders
of the failed sets' topics are read again. Answers 11 and 12, and a connection that broke
after the request went out, mean "not acknowledged", not "not written": the retry may store
the set twice (at least once; the pipeline drops duplicates by their event header). A keyed
set keeps its partition across retries; an unkeyed one moves to a partition on another live
broker (0.7) or to a partition that has a leader (replicated, when its own has none). Other
error codes are not retried. After the last retry ProduceError says how many messages were
not acknowledged (or, with acks 0, not sent) and why. `stats` counts what was sent, retried,
failed, and dropped from a full queue.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kazoo.client import KazooClient

from ..coordination.replication_state import NO_LEADER, REPLICATED
from ..protocol import compression
from ..protocol.errors import (
    LeaderNotAvailableError,
    LogbrokerError,
    error_code,
    error_for_code,
)
from ..protocol.kafka08.errors import error_for_code08
from ..protocol.message_set import build_message_set
from ..protocol.requests import (
    AckedProduceRequest,
    MultiProduceRequest,
    ProduceRequest,
    Request,
    encode_produce_set,
    produce_frame_prefix,
)
from ..protocol.responses import MalformedResponseError, decode_acked_produce_response
from ..protocol.topics import validate_topic
from ..security.client import client_sasl
from ..security.sasl import SaslClientConfig
from ..security.tls import ClientSecurity
from .brokers import BrokerEndpoint, BrokerPartition, BrokerSource, StaticBrokers, ZooKeeperBrokers
from .connection import BrokerConnection, BrokerUnavailableError
from .connection08 import Kafka08Connection
from .leaders import Leaders
from .listeners import tls_listener
from .messages08 import build_set
from .partitioner import Key, Partitioner, default_partitioner

log = logging.getLogger(__name__)

ACK_MODES = ("none", "ack", "fsync")
REQUIRED_ACKS = (0, 1, -1)
_LEVEL_OF_MODE = {"none": 0, "ack": 1, "fsync": 1}
# Answers after which a set is sent again (to the leader read anew): see the module's doc.
RETRIED_CODES = frozenset((8, 9, 10, 11, 12))


class ProduceError(LogbrokerError):
    """Messages could not be sent or were not acknowledged; `lost` says how many, and
    `cause` (also in the message) why the last attempt failed."""

    def __init__(self, message: str, lost: int, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.lost = lost
        self.cause = cause


class SendResult(NamedTuple):
    """Where an acknowledged set landed (`broker_id` REPLICATED, -1, for a replicated topic's
    partition, whichever broker led it)."""

    topic: str
    broker_id: int
    partition: int
    offset: int
    next_offset: int
    messages: int


@dataclass
class ProducerStats:
    """What a producer did; read it any time (counters only grow)."""

    sent_messages: int = 0
    sent_sets: int = 0
    sent_requests: int = 0
    retried_sets: int = 0
    failed_messages: int = 0
    dropped_messages: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def sent(self, messages: int, sets: int) -> None:
        with self._lock:  # the hot path: no keyword unpacking
            self.sent_messages += messages
            self.sent_sets += sets
            self.sent_requests += 1

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


class _Batch(NamedTuple):
    topic: str
    target: BrokerPartition
    payloads: list[bytes]
    pinned: bool  # a key chose the partition: do not move it elsewhere
    keys: list[bytes | None] | None = None  # a 0.8-format topic's: each message's key


class Producer:
    """Send message sets to brokers, synchronously."""

    def __init__(
        self,
        brokers: BrokerSource | None = None,
        *,
        broker_list: str | None = None,
        zk_connect: str | None = None,
        num_partitions: int = 1,
        partitioner: Partitioner = default_partitioner,
        compression_codec: int | str = compression.NONE,
        compressed_topics: Iterable[str] = (),
        acks: str = "none",
        request_required_acks: int | None = None,
        request_timeout_ms: int = 10000,
        retries: int | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        delivery_timeout_ms: int = 120000,
        socket_timeout_ms: int = 30000,
        sasl: SaslClientConfig | None = None,
        leaders: Leaders | None = None,
        sleep: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
        security: ClientSecurity | None = None,
    ) -> None:
        """`acks` / `request_required_acks`: see the module's table. `request_timeout_ms`:
        with -1, how long the leader waits for its ISR. Retries (the module's doc):
        `delivery_timeout_ms` bounds how long a send goes on retrying, `retries`
        (message.send.max.retries; None: no bound but the delivery timeout) how often.
        `leaders`: where replicated topics' leaders are (made from the ZooKeeper client when
        not given). `sleep(seconds)` waits between retries, `clock()` (seconds) measures the
        delivery timeout (tests pass fake ones); by default a wait that `close()` cuts short,
        so that a producer retrying a dead broker stops at close. `security`: Kafka's
        security.protocol and ssl.* settings (security/tls.py); with SSL, brokers found in
        ZooKeeper are reached at their SSL listener (SSL08 for 0.8-format topics), a
        broker.list names the SSL ports itself."""
        if acks not in ACK_MODES:
            raise ValueError(f"acks must be one of {', '.join(ACK_MODES)}, got {acks!r}")
        level = _LEVEL_OF_MODE[acks] if request_required_acks is None else request_required_acks
        if level not in REQUIRED_ACKS or isinstance(level, bool):
            raise ValueError(f"request.required.acks must be 0, 1 or -1, got {level!r}")
        if level == 0 and acks == "fsync":
            raise ValueError("acks=fsync needs an answer: request.required.acks 1 or -1, not 0")
        if min(request_timeout_ms, retry_backoff_ms, delivery_timeout_ms) < 0 or (
            retries is not None and retries < 0
        ):
            raise ValueError(
                "request.timeout.ms, message.send.max.retries, retry.backoff.ms and "
                "delivery.timeout.ms must be >= 0"
            )
        if retry_backoff_max_ms < retry_backoff_ms:
            raise ValueError(
                f"retry.backoff.max.ms ({retry_backoff_max_ms}) must be at least "
                f"retry.backoff.ms ({retry_backoff_ms})"
            )
        self._zk: KazooClient | None = None
        self._tls = tls = security.context() if security is not None else None
        self._closed = threading.Event()
        self._sleep = sleep if sleep is not None else self._closed.wait
        if brokers is None:
            if zk_connect:
                self._zk = KazooClient(hosts=zk_connect, timeout=socket_timeout_ms / 1000)
                try:
                    self._zk.start(timeout=socket_timeout_ms / 1000)
                except BaseException:
                    self._zk.stop()  # or its thread goes on retrying until exit
                    self._zk.close()
                    raise
                # over TLS, each broker at its SSL listener
                brokers = ZooKeeperBrokers(
                    self._zk, listener=tls_listener(sasl is not None) if tls else None
                )
            elif broker_list:
                brokers = StaticBrokers(broker_list, num_partitions)
            else:
                raise ValueError("a producer needs zk_connect, broker_list or a broker source")
        self._own_leaders = leaders is None and isinstance(brokers, ZooKeeperBrokers)
        if self._own_leaders:
            assert isinstance(brokers, ZooKeeperBrokers)
            leaders = Leaders(
                brokers.client, brokers, tls=self._tls is not None, sasl=sasl is not None
            )
        self.brokers = brokers
        self.leaders = leaders
        self.partitioner = partitioner
        self.codec = (
            compression.codec_by_name(compression_codec)
            if isinstance(compression_codec, str)
            else compression_codec
        )
        self.compressed_topics = frozenset(compressed_topics)
        self.required_acks = level
        self.fsync = acks == "fsync"
        self.acks = "none" if level == 0 else "fsync" if self.fsync else "ack"
        self.request_timeout_ms = request_timeout_ms
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.retry_backoff_max_s = retry_backoff_max_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self._clock = clock
        self.timeout_s = socket_timeout_ms / 1000
        self.sasl = sasl  # every connection logs in so (security/sasl.py)
        self.stats = ProducerStats()
        self._connections: dict[BrokerEndpoint, BrokerConnection] = {}
        self._lock = threading.Lock()
        # What the hot path looked up, valid while the broker source's version (and the
        # leaders', added: both only grow) stays.
        self._cache_version = -1
        self._routes: dict[str, tuple[list[BrokerPartition], bytes | None]] = {}
        self._by_id: dict[int, BrokerConnection] = {}
        # 0.8-format topics' leaders, at their 0.8 listeners
        self._connections08: dict[BrokerEndpoint, Kafka08Connection] = {}
        self._by_id08: dict[int, Kafka08Connection] = {}

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **kwargs: object) -> Producer:
        """From producer.properties keys: 0.7's (broker.list, zk.connect, compression.codec,
        compressed.topics, acks, socket.timeout.ms) and 0.8's (request.required.acks,
        request.timeout.ms, message.send.max.retries, retry.backoff.ms), and the newer
        retry.backoff.max.ms and delivery.timeout.ms; Kafka's sasl.mechanism with
        sasl.jaas.config (or sasl.username, sasl.password), security.protocol and ssl.*
        (security/tls.py). A bad value is a ValueError naming the key."""
        settings: dict[str, object] = {
            "broker_list": props.get("broker.list"),
            "zk_connect": props.get("zk.connect"),
            "compression_codec": props.get("compression.codec", "none"),
            "compressed_topics": [t for t in props.get("compressed.topics", "").split(",") if t],
            "acks": props.get("acks", "none"),
            # SASL_* only, as Kafka's clients
            "sasl": client_sasl(props, props.get("security.protocol", "PLAINTEXT").strip().upper()),
        }
        for key, name in (
            ("socket.timeout.ms", "socket_timeout_ms"),
            ("request.required.acks", "request_required_acks"),
            ("request.timeout.ms", "request_timeout_ms"),
            ("message.send.max.retries", "retries"),
            ("retry.backoff.ms", "retry_backoff_ms"),
            ("retry.backoff.max.ms", "retry_backoff_max_ms"),
            ("delivery.timeout.ms", "delivery_timeout_ms"),
        ):
            if props.get(key, "").strip():
                try:
                    settings[name] = int(props[key].strip())
                except ValueError:
                    raise ValueError(f"{key}={props[key]!r} is not an integer") from None
        if any(key in props for key in ClientSecurity.KEYS):
            settings["security"] = ClientSecurity.from_properties(props)
        settings.update(kwargs)
        return cls(**settings)  # type: ignore[arg-type]

    # -- the public API ---------------------------------------------------------------

    def send(
        self, topic: str, payloads: bytes | Iterable[bytes], key: Key = None
    ) -> list[SendResult]:
        """Send one message or a list of them to one partition of `topic`.

        Returns where they landed when an answer is asked for (acks 1 or -1), else [].
        Raises InvalidTopicError for an illegal topic name before anything is sent, and
        ProduceError (after retries) when they could not be sent or were not acknowledged.
        """
        if self.required_acks == 0:  # fire and forget: the hot paths, one prebuilt frame
            if type(payloads) is bytes:
                return self._send_set(topic, [payloads], key)
            if type(payloads) is list:
                return self._send_set(topic, payloads, key) if payloads else []
        batch: list[bytes] = (
            [bytes(payloads)]
            if isinstance(payloads, bytes | bytearray | memoryview)
            else list(payloads)
        )
        return self.send_batch([(topic, key, p) for p in batch]) if batch else []

    def check_topic(self, topic: str) -> None:
        """Refuse, before anything is read or sent, a topic this producer cannot send to:
        an illegal name (InvalidTopicError), or a 0.8-format topic with acks=fsync
        (ProduceError: 0.8's Produce has no fsync)."""
        validate_topic(topic)
        if self.fsync and self._is_format08(topic):
            raise ProduceError(_fsync_refused([topic], 0), 0)

    def _send_set(self, topic: str, payloads: list[bytes], key: Key) -> list[SendResult]:
        """Fire-and-forget messages for one partition (a `send` of one payload or a list):
        one set in one prebuilt PRODUCE frame, without send_batch's grouping per message.
        Where send_batch would put them: one partition, random without a key.

        Everything before the write is on a one-message send's latency, each Python call a
        microsecond or more when the process wakes cold: the cluster's version and the
        connection are looked up inline, and the _Batch a retry needs is made only then."""
        leaders = self.leaders
        version = self.brokers.version
        if leaders is not None:
            version += leaders.version
        if self._cache_version != version:
            self._forget_routes()
        route = self._routes.get(topic)
        if route is None:
            validate_topic(topic)
            partitions = self._partitions(topic)
            # a 0.8-format topic's sets are built by _send_to_broker08: no 0.7 frame prefix
            prefix = None if self._is_format08(topic) else produce_frame_prefix(topic)
            route = self._routes[topic] = (partitions, prefix)
        partitions, prefix = route
        if key is None:
            count = len(partitions)
            target = partitions[random.randrange(count)] if count > 1 else partitions[0]
        else:
            target = partitions[self.partitioner(key, len(partitions))]
        if prefix is None:  # 0.8 format: the keys go with the messages
            keys = [_key_bytes(key)] * len(payloads)
            return self._send_with_retries([_Batch(topic, target, payloads, key is not None, keys)])
        if self._closed.is_set():  # refused and counted there, as any batch after close()
            return self._send_with_retries([_Batch(topic, target, payloads, key is not None)])
        codec = self.codec
        if codec:  # the topic may be one left uncompressed
            codec = self._codec(topic)
        frame = encode_produce_set(prefix, target.partition, payloads, codec)
        broker_id = target.broker_id
        if broker_id == REPLICATED:
            broker_id = self._leader_of(_Batch(topic, target, payloads, key is not None))
        try:
            if broker_id == NO_LEADER:
                raise BrokerUnavailableError(f"{topic}-{target.partition} has no leader now")
            conn = self._by_id.get(broker_id)  # valid: the version was checked above
            if conn is None:
                conn = self._connection(broker_id)
            conn.send(frame)
        except BrokerUnavailableError:  # fail over like any batch
            return self._send_with_retries([_Batch(topic, target, payloads, key is not None)])
        self.stats.sent(len(payloads), 1)
        return []

    def _version(self) -> int:
        if self.leaders is None:
            return self.brokers.version
        return self.brokers.version + self.leaders.version

    def _forget_routes(self) -> None:
        """The cluster changed: partitions and connections are looked up again."""
        self._cache_version = self._version()
        self._routes.clear()
        self._by_id.clear()
        self._by_id08.clear()

    def send_batch(self, messages: Iterable[tuple[str, Key, bytes]]) -> list[SendResult]:
        """Send (topic, key, payload) triples: one set per partition, one request per broker."""
        batches = self._collate(messages)
        return self._send_with_retries(batches)

    def close(self) -> None:
        """Stop retrying (a send in its retry loop fails with ProduceError), close the
        connections and the ZooKeeper session. Idempotent."""
        self._closed.set()
        with self._lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()
            for conn08 in self._connections08.values():
                conn08.close()
            self._connections08.clear()
        if self.leaders is not None and self._own_leaders:
            self.leaders.close()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- partitioning -----------------------------------------------------------------

    def _partitions(self, topic: str) -> list[BrokerPartition]:
        if self.leaders is not None:  # first: a replicated topic must not reach brokers.py,
            replicated = self.leaders.partitions(topic)  # which registers 0.7 topics it watches
            if replicated is not None:
                return replicated
        partitions = self.brokers.partitions(topic)
        if not partitions:
            raise ProduceError(f"no live broker to send {topic!r} to", 0)
        return partitions

    def _is_format08(self, topic: str) -> bool:
        """A 0.8-format topic (its leaders' 0.8 listeners take it); needs the leaders."""
        return self.leaders is not None and self.leaders.is_format08(topic)

    def _leader_of(self, batch: _Batch) -> int:
        """The broker a set goes to: its broker (0.7), or its partition's leader (or -1)."""
        if batch.target.broker_id != REPLICATED:
            return batch.target.broker_id
        assert self.leaders is not None
        return self.leaders.leader(batch.topic, batch.target.partition)

    def _collate(self, messages: Iterable[tuple[str, Key, bytes]]) -> list[_Batch]:
        groups: dict[tuple[str, BrokerPartition, bool], list[bytes]] = defaultdict(list)
        keyed: dict[tuple[str, BrokerPartition, bool], list[bytes | None]] = defaultdict(list)
        sticky: dict[str, BrokerPartition] = {}
        known: dict[str, list[BrokerPartition]] = {}
        format08: dict[str, bool] = {}
        for topic, key, payload in messages:
            partitions = known.get(topic)
            if partitions is None:
                validate_topic(topic)  # every topic of the batch, before any of it is sent
                partitions = known[topic] = self._partitions(topic)
                format08[topic] = self._is_format08(topic)
            if key is None:
                target = sticky.get(topic)
                if target is None:
                    target = sticky[topic] = random.choice(partitions)
            else:
                target = partitions[self.partitioner(key, len(partitions))]
            group = (topic, target, key is not None)
            groups[group].append(payload)
            if format08[topic]:  # 0.8's message keeps its key
                keyed[group].append(_key_bytes(key))
        if self.fsync and any(format08.values()):
            lost = sum(len(p) for p in groups.values())
            self.stats.add(failed_messages=lost)
            raise ProduceError(_fsync_refused([t for t, f in format08.items() if f], lost), lost)
        return [
            _Batch(t, bp, payloads, pinned, keyed.get((t, bp, pinned)))
            for (t, bp, pinned), payloads in groups.items()
        ]

    # -- sending ----------------------------------------------------------------------

    def _send_with_retries(self, batches: list[_Batch]) -> list[SendResult]:
        results: list[SendResult] = []
        attempt = 0
        started = self._clock()
        backoff = self.retry_backoff_s
        while batches:
            if self._closed.is_set():
                lost = sum(len(b.payloads) for b in batches)
                self.stats.add(failed_messages=lost)
                raise ProduceError(f"{lost} messages not sent: the producer is closed", lost)
            failed: list[tuple[_Batch, Exception]] = []
            # one request per broker and port: a 0.8-format topic's sets go to its 0.8 listener
            by_broker: dict[tuple[int, bool], list[_Batch]] = defaultdict(list)
            for batch in batches:
                broker_id = self._leader_of(batch)
                if broker_id == NO_LEADER:
                    failed.append((batch, _no_leader(batch)))
                else:
                    by_broker[(broker_id, batch.keys is not None)].append(batch)
            for (broker_id, format08), group in by_broker.items():
                try:
                    if format08:
                        sent, refused = self._send_to_broker08(broker_id, group)
                    else:
                        sent, refused = self._send_to_broker(broker_id, group)
                    results += sent
                    failed += refused
                except BrokerUnavailableError as exc:
                    failed += [(b, exc) for b in group]
            if not failed:
                break
            lost = sum(len(b.payloads) for b, _ in failed)
            waited = self._clock() - started
            if (self.retries is not None and attempt >= self.retries) or (
                waited + backoff > self.delivery_timeout_s
            ):
                self.stats.add(failed_messages=lost)
                what = "sent" if self.required_acks == 0 else "acknowledged"
                bound = (
                    f"message.send.max.retries={self.retries}"
                    if self.retries is not None and attempt >= self.retries
                    else f"delivery.timeout.ms={round(self.delivery_timeout_s * 1000)}"
                )
                raise ProduceError(
                    f"{lost} messages not {what} after {attempt} retries in {waited:.1f} s "
                    f"({bound}): {failed[0][1]}",
                    lost,
                    failed[0][1],
                )
            attempt += 1
            self._sleep(backoff)
            backoff = min(backoff * 2, self.retry_backoff_max_s)
            self.stats.add(retried_sets=len(failed))
            if self.leaders is not None:
                for topic in {b.topic for b, _ in failed if b.target.broker_id == REPLICATED}:
                    self.leaders.refresh(topic)  # the watch may not have fired yet
            batches = [self._retarget(b) for b, _ in failed]
            log.warning("retrying %d sets (attempt %d): %s", len(batches), attempt, failed[0][1])
        return results

    def _retarget(self, batch: _Batch) -> _Batch:
        """An unkeyed set moves to a partition on another live broker, if there is one (0.7);
        to a partition with a leader when its own has none (replicated)."""
        if batch.pinned:
            return batch
        if batch.target.broker_id == REPLICATED:
            assert self.leaders is not None
            if self.leaders.leader(batch.topic, batch.target.partition) != NO_LEADER:
                return batch
            led = [
                p
                for p in self.leaders.partitions(batch.topic) or []
                if self.leaders.leader(batch.topic, p.partition) != NO_LEADER
            ]
            return batch._replace(target=random.choice(led)) if led else batch
        dead = batch.target.broker_id
        candidates = [p for p in self.brokers.partitions(batch.topic) if p.broker_id != dead]
        if not candidates:
            return batch
        return batch._replace(target=random.choice(candidates))

    def _connection(self, broker_id: int) -> BrokerConnection:
        if self._cache_version == self.brokers.version:
            conn = self._by_id.get(broker_id)
            if conn is not None:
                return conn
        else:
            self._forget_routes()
        broker = self.brokers.brokers().get(broker_id)
        if broker is None:
            raise BrokerUnavailableError(f"broker {broker_id} is not live")
        with self._lock:
            conn = self._connections.get(broker)
            if conn is None:
                for old in [b for b in self._connections if b.id == broker_id]:
                    self._connections.pop(old).close()
                conn = BrokerConnection(
                    broker.host,
                    broker.port,
                    timeout=self.timeout_s,
                    tls=self._tls,
                    sasl=self.sasl,
                )
                self._connections[broker] = conn
            self._by_id[broker_id] = conn
            return conn

    def _codec(self, topic: str) -> int:
        codec = self.codec
        if codec and self.compressed_topics and topic not in self.compressed_topics:
            return compression.NONE
        return codec

    def _encode_set(self, batch: _Batch) -> bytes:
        return build_message_set(batch.payloads, self._codec(batch.topic))

    def _send_to_broker(
        self, broker_id: int, group: list[_Batch]
    ) -> tuple[list[SendResult], list[tuple[_Batch, Exception]]]:
        """Send the sets; (what was acknowledged, the sets refused with a code to retry).
        Raises BrokerUnavailableError, or the first other refusal's error."""
        conn = self._connection(broker_id)
        produces = tuple(
            ProduceRequest(b.topic, b.target.partition, self._encode_set(b)) for b in group
        )
        messages = sum(len(b.payloads) for b in group)
        request: Request
        if self.required_acks == 0:
            request = produces[0] if len(produces) == 1 else MultiProduceRequest(produces)
            conn.send(request)
            self.stats.sent(messages, len(group))
            return [], []
        request = AckedProduceRequest(
            self.fsync,
            produces,
            all_in_sync=self.required_acks == -1,
            timeout_ms=self.request_timeout_ms if self.required_acks == -1 else 0,
        )
        answers = decode_acked_produce_response(conn.request(request))
        results = []
        refused: list[tuple[_Batch, Exception]] = []
        for batch, answer in zip(group, answers, strict=True):
            if answer.error:
                error = error_for_code(
                    answer.error,
                    f"broker {broker_id} refused {len(batch.payloads)} messages for "
                    f"{batch.topic}-{answer.partition}: "
                    f"{type(error_for_code(answer.error)).__name__} (error code {answer.error})",
                )
                if answer.error in RETRIED_CODES:
                    refused.append((batch, error))
                    continue
                self.stats.add(failed_messages=len(batch.payloads))
                raise error
            results.append(
                SendResult(
                    batch.topic,
                    batch.target.broker_id,
                    answer.partition,
                    answer.offset,
                    answer.next_offset,
                    len(batch.payloads),
                )
            )
        done = len(group) - len(refused)
        if done:
            self.stats.sent(messages - sum(len(b.payloads) for b, _ in refused), done)
        return results, refused

    # -- 0.8-format topics: Produce v0 on the leaders' 0.8 listeners -----------------------

    def _connection08(self, broker_id: int) -> Kafka08Connection:
        """A connection to broker `broker_id`'s 0.8 listener."""
        if self._cache_version == self._version():
            conn = self._by_id08.get(broker_id)
            if conn is not None:
                return conn
        else:
            self._forget_routes()
        assert self.leaders is not None
        endpoint = self.leaders.listeners.endpoint(broker_id)
        if endpoint is None:
            raise BrokerUnavailableError(
                f"broker {broker_id} has no live Kafka 0.8 listener (port.08) registered"
            )
        with self._lock:
            conn = self._connections08.get(endpoint)
            if conn is None:
                for old in [e for e in self._connections08 if e.id == broker_id]:
                    self._connections08.pop(old).close()
                conn = Kafka08Connection(
                    endpoint.host,
                    endpoint.port,
                    timeout=self.timeout_s,
                    tls=self._tls,
                    sasl=self.sasl,
                )
                self._connections08[endpoint] = conn
            self._by_id08[broker_id] = conn
            return conn

    def _send_to_broker08(
        self, broker_id: int, group: list[_Batch]
    ) -> tuple[list[SendResult], list[tuple[_Batch, Exception]]]:
        """_send_to_broker for 0.8-format topics: one Produce v0 of 0.8 message sets (keys
        kept, compressed as configured), answered with each set's first logical offset and
        0.8's codes, which mean what the 0.7 port's do (RETRIED_CODES)."""
        conn = self._connection08(broker_id)
        topics: dict[str, list[_Batch]] = {}
        for batch in group:  # each topic's sets together: the answer lists them so
            topics.setdefault(batch.topic, []).append(batch)
        ordered = [b for found in topics.values() for b in found]
        sets = [
            (b.topic, b.target.partition, build_set(b.keys or (), b.payloads, self._codec(b.topic)))
            for b in ordered
        ]
        messages = sum(len(b.payloads) for b in group)
        try:
            answer = conn.produce(self.required_acks, self.request_timeout_ms, sets)
        except MalformedResponseError as exc:  # the connection is closed: sent again
            raise BrokerUnavailableError(f"broker {broker_id}: {exc}") from exc
        if answer is None:  # acks 0: nothing comes back
            self.stats.sent(messages, len(group))
            return [], []
        results = []
        refused: list[tuple[_Batch, Exception]] = []
        for batch, code, first in _answers08(ordered, answer, conn.address):
            if code:
                error = error_for_code08(code)
                error = error_for_code08(
                    code,
                    f"broker {broker_id} refused {len(batch.payloads)} messages for "
                    f"{batch.topic}-{batch.target.partition}: {type(error).__name__} "
                    f"(0.8 error code {code})",
                )
                if error_code(error) in RETRIED_CODES:
                    refused.append((batch, error))
                    continue
                self.stats.add(failed_messages=len(batch.payloads))
                raise error
            results.append(
                SendResult(
                    batch.topic,
                    batch.target.broker_id,
                    batch.target.partition,
                    first,
                    first + len(batch.payloads),
                    len(batch.payloads),
                )
            )
        done = len(group) - len(refused)
        if done:
            self.stats.sent(messages - sum(len(b.payloads) for b, _ in refused), done)
        return results, refused


def _answers08(ordered: list[_Batch], answer: Any, broker: str) -> list[tuple[_Batch, int, int]]:
    """(batch, error code, first offset) per set of a Produce v0 answer, the sets sent in
    the order of `ordered` (each topic's together, as the answer lists them)."""
    found = [(t.topic, p) for t in answer.topics for p in t.partitions]
    if len(found) != len(ordered):
        raise MalformedResponseError(
            f"broker {broker} answered {len(found)} of the {len(ordered)} sets sent"
        )
    out = []
    for batch, (topic, result) in zip(ordered, found, strict=True):
        if (topic, result.partition) != (batch.topic, batch.target.partition):
            raise MalformedResponseError(
                f"broker {broker} answered {topic}-{result.partition} where "
                f"{batch.topic}-{batch.target.partition} was sent"
            )
        out.append((batch, result.error_code, result.offset))
    return out


def _fsync_refused(topics: list[str], lost: int) -> str:
    named = ", ".join(repr(t) for t in topics)
    return (
        f"acks=fsync has no Kafka 0.8 equivalent, and {named} "
        f"{'is a 0.8-format topic' if len(topics) == 1 else 'are 0.8-format topics'}: send "
        "with request.required.acks 1 or -1 (the brokers' flush settings decide when its log "
        f"is fsynced); {lost} messages not sent"
    )


def _key_bytes(key: Key) -> bytes | None:
    """A 0.8 message's key as the caller gave it: bytes as they are, str in UTF-8 (bytes
    decoded with surrogateescape, as the produce command reads lines, come back as they were)."""
    if key is None or isinstance(key, bytes):
        return key
    return key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)


def _no_leader(batch: _Batch) -> LeaderNotAvailableError:
    return LeaderNotAvailableError(
        f"{batch.topic}-{batch.target.partition} has no leader now (or its leader is not "
        "registered): the controller elects one from the in-sync replicas"
    )


class AsyncProducer:
    """Queue messages and send them in batches from a background thread.

    When the queue (`queue_size` messages) is full, `send` blocks for up to
    `enqueue_timeout_ms` (-1: forever, the default, so nothing is lost silently; 0: not at
    all) and then drops the message and counts it in `stats.dropped_messages`.
    """

    def __init__(
        self,
        producer: Producer,
        *,
        batch_size: int = 200,
        queue_time_ms: int = 5000,
        queue_size: int = 10000,
        enqueue_timeout_ms: int = -1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.producer = producer
        self.clock = clock  # when a batch's queue_time_ms is up
        self.stats = producer.stats
        self.batch_size = batch_size
        self.queue_time_s = queue_time_ms / 1000
        self.enqueue_timeout_ms = enqueue_timeout_ms
        self._queue: queue.Queue[tuple[str, Key, bytes] | None] = queue.Queue(queue_size)
        self.errors: list[Exception] = []
        self._legal_topics: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="async-producer", daemon=True)
        self._thread.start()

    def send(self, topic: str, payload: bytes, key: Key = None) -> bool:
        """Queue one message; False if it was dropped because the queue stayed full.

        Raises InvalidTopicError at once for an illegal topic name: in the queue it would
        fail the whole batch it landed in, good messages too.
        """
        if topic not in self._legal_topics:
            validate_topic(topic)
            self._legal_topics.add(topic)
        item = (topic, key, payload)
        try:
            if self.enqueue_timeout_ms < 0:
                self._queue.put(item)
            elif self.enqueue_timeout_ms == 0:
                self._queue.put_nowait(item)
            else:
                self._queue.put(item, timeout=self.enqueue_timeout_ms / 1000)
        except queue.Full:
            self.stats.add(dropped_messages=1)
            return False
        return True

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                self._queue.task_done()
                return
            batch = [first]
            deadline = self.clock() + self.queue_time_s
            stop = False
            while len(batch) < self.batch_size:
                remaining = deadline - self.clock()
                try:
                    item = (
                        self._queue.get(timeout=max(0.0, remaining))
                        if remaining > 0
                        else self._queue.get_nowait()
                    )
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            try:
                self.producer.send_batch(batch)
            except LogbrokerError as exc:
                self.errors.append(exc)
                log.error("async producer lost a batch of %d messages: %s", len(batch), exc)
            finally:
                for _ in range(len(batch) + (1 if stop else 0)):
                    self._queue.task_done()
            if stop:
                return

    @property
    def running(self) -> bool:
        """Whether the sending thread is still alive (it ends at `close()`)."""
        return self._thread.is_alive()

    def flush(self) -> None:
        """Wait until everything queued so far has been sent (or counted as failed)."""
        self._queue.join()

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is queued, stop the thread, close the producer.

        With `timeout_s`, what is not sent by then is not retried any more: it is counted
        in `stats.failed_messages` and in `errors`, and the thread ends all the same.
        """
        if self._thread.is_alive():
            with contextlib.suppress(queue.Full):  # full: the thread is stuck in retries
                self._queue.put(None, timeout=timeout_s)
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.producer.close()  # the retries end: the rest of the queue fails at once
            self._queue.put(None)
            self._thread.join()
        self.producer.close()

    def __enter__(self) -> AsyncProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
