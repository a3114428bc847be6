"""logbroker replicated: the clients of bench/replication.py (three brokers, one ZooKeeper).

Not one of run.py's systems (systems.NAMES): bench/replication.py starts the cluster itself
(a ZooKeeper per repetition, three `logbroker broker` processes per workload) and its
workers call this module's Client through bench/worker.py, as run.py's do theirs.

The endpoint names the cluster (`zk`) and the workload's settings the engine chose:
`acks` (request.required.acks), `replicated` (False: a 0.7 topic, replication factor 1).

Client: the library's own clients, as a user would call them.
  produce  Producer(zk_connect=..., request_required_acks=acks): one `send` of a list of
           `batch` payloads per request, unkeyed (each set to a random partition of the six,
           sent to its leader); the clock stops when the last send was acknowledged. Then,
           untimed, it waits until every partition it wrote is below the high watermark on
           its leader (every in-sync follower has it), so that the engine's CPU interval
           covers the followers' copying too.
  load     the same producer, keyed sets of 1000 spread evenly (not timed).
  consume  one consumer reading the six partitions one after another, each from the start
           to its end (the high watermark) with iter_batches (pipelined fetches of ~1000
           messages): PartitionReader (from the leader) for a replicated topic,
           SimpleConsumer of each partition's broker for a 0.7 topic.
  latency  one way, partition 0: a PartitionReader waiting at the high watermark
           (iter_messages, FETCH_WAIT), a Producer sending one message at a time with the
           workload's acks (common.one_way_*).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from common import BenchError, batches, cycled, one_way_consumer, one_way_producer, payloads

ENTRY_OVERHEAD = 10  # int32 size, magic 1, attributes, CRC32
PARTITION_0_KEY = "0"  # Java's String.hashCode("0") = 48; 48 % 6 = 0
LOAD_BATCH = 1000
BATCHING = {100: "Producer.send(topic, [100 payloads]): one message set, one request, acked"}
CONSUMING = "iter_batches of each partition in turn, fetches of 1000 messages' worth"


def available() -> tuple[bool, str]:
    from systems import logbroker

    return logbroker.available()


def versions() -> dict[str, str]:
    from systems import logbroker

    return logbroker.versions()


class Client:
    def __init__(self, endpoint: dict[str, Any]) -> None:
        from kazoo.client import KazooClient

        from logbroker.client.brokers import ZooKeeperBrokers
        from logbroker.client.leaders import Leaders

        self.ep = endpoint
        self.acks = int(endpoint.get("acks", 1))
        self.replicated = bool(endpoint.get("replicated", True))
        self.zk = KazooClient(hosts=endpoint["zk"], timeout=30)
        self.zk.start(timeout=30)
        self.brokers = ZooKeeperBrokers(self.zk)
        self.leaders = Leaders(self.zk, self.brokers)
        self._closers: list[Callable[[], None]] = []

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self.leaders.close()
        self.brokers.close()
        self.zk.stop()
        self.zk.close()

    def _producer(self, acks: int | None = None) -> Any:
        from logbroker.client.producer import Producer

        producer = Producer(
            self.brokers,
            leaders=self.leaders,
            request_required_acks=self.acks if acks is None else acks,
            request_timeout_ms=30_000,
            retries=3,
        )
        self._closers.append(producer.close)
        return producer

    # -- where the partitions are and how far they are committed ----------------------------

    def partitions(self, topic: str) -> list[tuple[int, int]]:
        """(broker id, partition) of the topic's six: broker -1 (REPLICATED) for a replicated
        topic's, whose leader serves them."""
        found = self.leaders.partitions(topic) if self.replicated else None
        if found is None:
            found = self.brokers.partitions(topic)
        return [(p.broker_id, p.partition) for p in found]

    def _reader(self, broker_id: int, partition: int, topic: str) -> Any:
        """A reader of one partition: `latest_offset()` (the high watermark of a replicated
        one), `iter_batches(offset)`, `iter_messages(offset, ...)`."""
        from logbroker.client.partition_reader import PartitionReader
        from logbroker.client.simple_consumer import SimpleConsumer

        fetch = 1000 * (100 + ENTRY_OVERHEAD)
        if self.replicated:
            reader = PartitionReader(self.leaders, topic, partition, fetch_size=fetch)
            self._closers.append(reader.close)
            return reader
        broker = self.brokers.brokers()[broker_id]
        consumer = SimpleConsumer(broker.host, broker.port, fetch_size=fetch)
        self._closers.append(consumer.close)
        return _OnePartition(consumer, topic, partition)

    def _wait_committed(
        self, topic: str, ends: dict[tuple[int, int], int], timeout: float = 600
    ) -> None:
        """Until each partition's latest offset (a replicated one's high watermark) reaches
        its end in `ends`."""
        deadline = time.monotonic() + timeout
        for (broker_id, partition), want in ends.items():
            reader = self._reader(broker_id, partition, topic)
            while reader.latest_offset() < want:
                if time.monotonic() > deadline:
                    raise BenchError(f"{topic}: partition {partition} not committed to {want}")
                time.sleep(0.002)

    @staticmethod
    def _ends(results: list[Any]) -> dict[tuple[int, int], int]:
        """The log end each (broker id, partition) reached, from the producer's answers."""
        ends: dict[tuple[int, int], int] = {}
        for r in results:
            key = (r.broker_id, r.partition)
            ends[key] = max(ends.get(key, 0), r.next_offset)
        return ends

    # -- workloads ------------------------------------------------------------------------

    def produce(
        self, topic: str, n: int, size: int, batch: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        producer = self._producer()
        sets = batches(payloads(size), batch)
        rounds = n // batch
        results = list(producer.send(topic, sets[0]))  # connections made, leaders read
        send = producer.send
        ready()
        t0 = time.monotonic()
        for messages in cycled(sets, rounds):
            results += send(topic, messages)
        t1 = time.monotonic()
        self._wait_committed(topic, self._ends(results))
        t2 = time.monotonic()
        if len(results) != rounds + 1:
            raise BenchError(f"{len(results)} sets acknowledged of {rounds + 1}")
        return {
            "messages": rounds * batch,
            "seconds": t1 - t0,
            "started_at": t0,
            "acked_at": t1,
            "committed_at": t2,
            "stored_bytes": rounds * batch * (size + ENTRY_OVERHEAD),
            "retried_sets": producer.stats.retried_sets,
        }

    def load(self, topic: str, n: int, size: int) -> dict[str, Any]:
        producer = self._producer(acks=1)
        sets = batches(payloads(size), LOAD_BATCH)
        count = len(self.partitions(topic))
        rounds = n // LOAD_BATCH
        results = []
        for i, messages in enumerate(cycled(sets, rounds)):
            # keys "0".."5": Java's hash of a one-digit string is 48 + digit, so they cover
            # the six partitions evenly (the 0.7 topic's sorted (broker, i) list too)
            results += producer.send(topic, messages, key=str(i % count))
        self._wait_committed(topic, self._ends(results))
        return {"messages": rounds * LOAD_BATCH}

    def consume(
        self, topic: str, n: int, batch_bytes: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        readers = [self._reader(b, p, topic) for b, p in self.partitions(topic)]
        starts = [r.earliest_offset() for r in readers]
        ready()
        count = nbytes = 0
        t0 = time.monotonic()
        for reader, offset in zip(readers, starts, strict=True):
            for got in reader.iter_batches(offset):
                for data in got.payloads:
                    count += 1
                    nbytes += len(data)
        t1 = time.monotonic()
        if count < n:
            raise BenchError(f"consumed {count} messages of {n}")
        return {"messages": count, "seconds": t1 - t0, "payload_bytes": nbytes}

    def latency_consume(
        self, topic: str, total: int, warmup: int, ack_path: str, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """Reads partition 0, where the producer's key sends every message: checked with a
        first message, sent and committed before the reader starts after it."""
        first = self.partitions(topic)[0]
        [where] = self._producer().send(topic, b"warm-up", key=PARTITION_0_KEY)
        if (where.broker_id, where.partition) != first:
            raise BenchError(f"key {PARTITION_0_KEY!r} went to {where}, not to {first}")
        self._wait_committed(topic, self._ends([where]))
        reader = self._reader(*first, topic)
        start = reader.latest_offset()
        messages = reader.iter_messages(start, stop_at_end=False, max_wait_ms=10_000)
        return one_way_consumer(total, warmup, lambda: next(messages).payload, ack_path, ready)

    def latency_produce(self, topic: str, total: int, size: int, ack_path: str) -> dict[str, Any]:
        send = self._producer().send
        key = PARTITION_0_KEY
        return one_way_producer(total, size, lambda data: send(topic, data, key=key), ack_path)


class _OnePartition:
    """SimpleConsumer's reads of one 0.7 partition, with PartitionReader's signatures."""

    def __init__(self, consumer: Any, topic: str, partition: int) -> None:
        self.consumer = consumer
        self.topic = topic
        self.partition = partition

    def earliest_offset(self) -> int:
        return int(self.consumer.earliest_offset(self.topic, self.partition))

    def latest_offset(self) -> int:
        return int(self.consumer.latest_offset(self.topic, self.partition))

    def iter_batches(self, offset: int) -> Iterator[Any]:
        return self.consumer.iter_batches(self.topic, self.partition, offset)  # type: ignore[no-any-return]

    def iter_messages(self, offset: int, **kwargs: Any) -> Iterator[Any]:
        return self.consumer.iter_messages(self.topic, self.partition, offset, **kwargs)  # type: ignore[no-any-return]
