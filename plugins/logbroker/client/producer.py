"""Producers (`producer/SyncProducer`, `ProducerPool`, `async/ProducerSendThread`).

`Producer` sends at once, from the caller's thread. `AsyncProducer` queues messages in
memory and a background thread sends them in batches of `batch.size` messages or every
`queue.time` ms, whichever comes first.

Per batch, messages are grouped into one message set per (topic, partition), compressed
into one wrapper when the topic is compressed (`compression.codec`, `compressed.topics`),
and all the sets for one broker go in one request: PRODUCE for one set, MULTIPRODUCE for
several (0.7's fire-and-forget: nothing comes back), or the PRODUCE_ACK extension when
`acks` asks for an answer (`"ack"`: the broker appended it; `"fsync"`: and fsynced it).

Partitions: a message with a key goes to `partitioner(key, n)` of the topic's partitions;
without a key, all of a batch's messages for a topic go to one random partition (fewer,
bigger sets). When a broker cannot be reached, unkeyed sets fail over to a partition on
another live broker; keyed sets retry their own partition. `stats` counts what was sent,
retried, failed, and dropped from a full queue.
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
from typing import NamedTuple

from kazoo.client import KazooClient

from ..protocol import compression
from ..protocol.errors import LogbrokerError, error_for_code
from ..protocol.message_set import build_message_set
from ..protocol.requests import (
    AckedProduceRequest,
    MultiProduceRequest,
    ProduceRequest,
    Request,
    encode_produce_frame,
    produce_frame_prefix,
)
from ..protocol.responses import decode_acked_produce_response
from ..protocol.topics import validate_topic
from .brokers import BrokerEndpoint, BrokerPartition, BrokerSource, StaticBrokers, ZooKeeperBrokers
from .connection import BrokerConnection, BrokerUnavailableError
from .partitioner import Key, Partitioner, default_partitioner

log = logging.getLogger(__name__)

ACK_MODES = ("none", "ack", "fsync")


class ProduceError(LogbrokerError):
    """Messages could not be sent; `lost` says how many."""

    def __init__(self, message: str, lost: int) -> None:
        super().__init__(message)
        self.lost = lost


class SendResult(NamedTuple):
    """Where an acknowledged set landed."""

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
        retries: int = 3,
        retry_backoff_ms: int = 100,
        socket_timeout_ms: int = 30000,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        """`sleep(seconds)` waits between retries (tests pass a fake one); by default a wait
        that `close()` cuts short, so that a producer retrying a dead broker stops at close."""
        self._zk: KazooClient | None = None
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
                brokers = ZooKeeperBrokers(self._zk)
            elif broker_list:
                brokers = StaticBrokers(broker_list, num_partitions)
            else:
                raise ValueError("a producer needs zk_connect, broker_list or a broker source")
        if acks not in ACK_MODES:
            raise ValueError(f"acks must be one of {', '.join(ACK_MODES)}, got {acks!r}")
        self.brokers = brokers
        self.partitioner = partitioner
        self.codec = (
            compression.codec_by_name(compression_codec)
            if isinstance(compression_codec, str)
            else compression_codec
        )
        self.compressed_topics = frozenset(compressed_topics)
        self.acks = acks
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.timeout_s = socket_timeout_ms / 1000
        self.stats = ProducerStats()
        self._connections: dict[BrokerEndpoint, BrokerConnection] = {}
        self._lock = threading.Lock()
        # What the hot path looked up, valid while the broker source's version stays.
        self._cache_version = -1
        self._routes: dict[str, tuple[list[BrokerPartition], bytes]] = {}
        self._by_id: dict[int, BrokerConnection] = {}

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **kwargs: object) -> Producer:
        """From 0.7's producer.properties keys (broker.list, zk.connect, compression.codec, ...)."""
        return cls(
            broker_list=props.get("broker.list"),
            zk_connect=props.get("zk.connect"),
            compression_codec=props.get("compression.codec", "none"),
            compressed_topics=[t for t in props.get("compressed.topics", "").split(",") if t],
            acks=props.get("acks", "none"),
            socket_timeout_ms=int(props.get("socket.timeout.ms", 30000)),
            **kwargs,  # type: ignore[arg-type]
        )

    # -- the public API ---------------------------------------------------------------

    def send(
        self, topic: str, payloads: bytes | Iterable[bytes], key: Key = None
    ) -> list[SendResult]:
        """Send one message or a list of them to one partition of `topic`.

        Returns where they landed when `acks` is "ack" or "fsync", else []. Raises
        InvalidTopicError for an illegal topic name before anything is sent, and
        ProduceError (after retries) when they could not be sent.
        """
        if type(payloads) is bytes and self.acks == "none":
            return self._send_one(topic, payloads, key)
        batch: list[bytes] = (
            [bytes(payloads)]
            if isinstance(payloads, bytes | bytearray | memoryview)
            else list(payloads)
        )
        return self.send_batch([(topic, key, p) for p in batch]) if batch else []

    def _send_one(self, topic: str, payload: bytes, key: Key) -> list[SendResult]:
        """One fire-and-forget message: the batch-of-1 hot path, one prebuilt frame."""
        if self._cache_version != self.brokers.version:
            self._forget_routes()
        route = self._routes.get(topic)
        if route is None:
            validate_topic(topic)
            route = self._routes[topic] = (self._partitions(topic), produce_frame_prefix(topic))
        partitions, prefix = route
        if key is None:
            count = len(partitions)
            target = partitions[random.randrange(count)] if count > 1 else partitions[0]
        else:
            target = partitions[self.partitioner(key, len(partitions))]
        batch = _Batch(topic, target, [payload], key is not None)
        frame = encode_produce_frame(prefix, target.partition, self._encode_set(batch))
        try:
            self._connection(target.broker_id).send(frame)
        except BrokerUnavailableError:
            return self._send_with_retries([batch])  # fail over like any batch
        self.stats.sent(1, 1)
        return []

    def _forget_routes(self) -> None:
        """The cluster changed: partitions and connections are looked up again."""
        self._cache_version = self.brokers.version
        self._routes.clear()
        self._by_id.clear()

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
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- partitioning -----------------------------------------------------------------

    def _partitions(self, topic: str) -> list[BrokerPartition]:
        partitions = self.brokers.partitions(topic)
        if not partitions:
            raise ProduceError(f"no live broker to send {topic!r} to", 0)
        return partitions

    def _collate(self, messages: Iterable[tuple[str, Key, bytes]]) -> list[_Batch]:
        groups: dict[tuple[str, BrokerPartition, bool], list[bytes]] = defaultdict(list)
        sticky: dict[str, BrokerPartition] = {}
        known: dict[str, list[BrokerPartition]] = {}
        for topic, key, payload in messages:
            partitions = known.get(topic)
            if partitions is None:
                validate_topic(topic)  # every topic of the batch, before any of it is sent
                partitions = known[topic] = self._partitions(topic)
            if key is None:
                target = sticky.get(topic)
                if target is None:
                    target = sticky[topic] = random.choice(partitions)
            else:
                target = partitions[self.partitioner(key, len(partitions))]
            groups[(topic, target, key is not None)].append(payload)
        return [_Batch(t, bp, payloads, pinned) for (t, bp, pinned), payloads in groups.items()]

    # -- sending ----------------------------------------------------------------------

    def _send_with_retries(self, batches: list[_Batch]) -> list[SendResult]:
        results: list[SendResult] = []
        attempt = 0
        while batches:
            if self._closed.is_set():
                lost = sum(len(b.payloads) for b in batches)
                self.stats.add(failed_messages=lost)
                raise ProduceError(f"{lost} messages not sent: the producer is closed", lost)
            failed: list[tuple[_Batch, Exception]] = []
            by_broker: dict[int, list[_Batch]] = defaultdict(list)
            for batch in batches:
                by_broker[batch.target.broker_id].append(batch)
            for broker_id, group in by_broker.items():
                try:
                    results += self._send_to_broker(broker_id, group)
                except BrokerUnavailableError as exc:
                    failed += [(b, exc) for b in group]
            if not failed:
                break
            attempt += 1
            lost = sum(len(b.payloads) for b, _ in failed)
            if attempt > self.retries:
                self.stats.add(failed_messages=lost)
                raise ProduceError(
                    f"{lost} messages not sent after {self.retries} retries: {failed[0][1]}", lost
                )
            self._sleep(self.retry_backoff_s * attempt)
            self.stats.add(retried_sets=len(failed))
            batches = [self._retarget(b, {b.target.broker_id}) for b, _ in failed]
            log.warning("retrying %d sets (attempt %d): %s", len(batches), attempt, failed[0][1])
        return results

    def _retarget(self, batch: _Batch, dead: set[int]) -> _Batch:
        """An unkeyed set moves to a partition on another live broker, if there is one."""
        if batch.pinned:
            return batch
        candidates = [p for p in self.brokers.partitions(batch.topic) if p.broker_id not in dead]
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
                conn = BrokerConnection(broker.host, broker.port, timeout=self.timeout_s)
                self._connections[broker] = conn
            self._by_id[broker_id] = conn
            return conn

    def _encode_set(self, batch: _Batch) -> bytes:
        codec = self.codec
        if codec and self.compressed_topics and batch.topic not in self.compressed_topics:
            codec = compression.NONE
        return build_message_set(batch.payloads, codec)

    def _send_to_broker(self, broker_id: int, group: list[_Batch]) -> list[SendResult]:
        conn = self._connection(broker_id)
        produces = tuple(
            ProduceRequest(b.topic, b.target.partition, self._encode_set(b)) for b in group
        )
        messages = sum(len(b.payloads) for b in group)
        request: Request
        if self.acks == "none":
            request = produces[0] if len(produces) == 1 else MultiProduceRequest(produces)
            conn.send(request)
            self.stats.sent(messages, len(group))
            return []
        request = AckedProduceRequest(self.acks == "fsync", produces)
        answers = decode_acked_produce_response(conn.request(request))
        results = []
        for batch, answer in zip(group, answers, strict=True):
            if answer.error:
                self.stats.add(failed_messages=len(batch.payloads))
                raise error_for_code(
                    answer.error,
                    f"broker {broker_id} refused {len(batch.payloads)} messages for "
                    f"{batch.topic}-{answer.partition} (error code {answer.error})",
                )
            results.append(
                SendResult(
                    batch.topic,
                    broker_id,
                    answer.partition,
                    answer.offset,
                    answer.next_offset,
                    len(batch.payloads),
                )
            )
        self.stats.sent(messages, len(group))
        return results


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
