"""Valid requests of all 8 types, at random: `RequestGenerator` over `TOPICS` x `PARTITIONS`.

    gen = RequestGenerator(random.Random(1))
    frame = encode_request(gen.request())                 # a valid frame of one of the 8 types

Fetch offsets come from the entry offsets the caller feeds in (`add_boundary`), so that
fetched data starts on a message boundary.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable

from logbroker.protocol import compression
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import (
    EARLIEST_TIME,
    LATEST_TIME,
    RANDOM_PARTITION,
    AckedProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    Request,
    WaitingFetchRequest,
)

TOPICS = ("fuzz-a", "fuzz-b")
PARTITIONS = 2

Rng = random.Random


class RequestGenerator:
    """Valid requests of all 8 types over `topics` x `partitions`.

    Fetch offsets come from `boundaries` (known entry offsets per partition, fed by the
    caller from acked produces) so that fetched data starts on a message boundary; a fetch
    past every known offset asks for an out-of-range offset on purpose.
    """

    def __init__(
        self, rng: Rng, topics: Iterable[str] = TOPICS, partitions: int = PARTITIONS
    ) -> None:
        self.rng = rng
        self.topics = tuple(topics)
        self.partitions = partitions
        self.boundaries: dict[tuple[str, int], list[int]] = {}
        self._kinds: list[Callable[[], Request]] = [
            self.produce,
            self.produce,
            self.multiproduce,
            self.fetch,
            self.multifetch,
            self.offsets,
            self.acked_produce,
            self.waiting_fetch,
            self.metadata,
        ]

    def add_boundary(self, topic: str, partition: int, offset: int) -> None:
        self.boundaries.setdefault((topic, partition), []).append(offset)

    def request(self) -> Request:
        return self.rng.choice(self._kinds)()

    # -- pieces -----------------------------------------------------------------------

    def message_set(self) -> bytes:
        rng = self.rng
        payloads = [self._payload() for _ in range(rng.randint(1, 4))]
        kind = rng.randrange(4)
        if kind == 0:
            return build_message_set(payloads, magic=0)
        if kind == 1:
            return build_message_set(payloads, magic=1)
        return build_message_set(payloads, compression.GZIP if kind == 2 else compression.SNAPPY)

    def _payload(self) -> bytes:
        rng = self.rng
        n = rng.choice((0, 1, 5, 17, 40, 90))
        if rng.random() < 0.5:
            return rng.randbytes(n)
        return (b"fuzz payload %d " % rng.randrange(1000) * 8)[:n]

    def _topic(self) -> str:
        return self.rng.choice(self.topics)

    def _partition(self, allow_random: bool = False) -> int:
        if allow_random and self.rng.random() < 0.15:
            return RANDOM_PARTITION
        return self.rng.randrange(self.partitions)

    def _produce(self) -> ProduceRequest:
        return ProduceRequest(self._topic(), self._partition(True), self.message_set())

    def _fetch(self) -> FetchRequest:
        topic, partition = self._topic(), self._partition()
        known = self.boundaries.get((topic, partition), [0])
        roll = self.rng.random()
        if roll < 0.8:
            offset = self.rng.choice(known)
        elif roll < 0.9:
            offset = max(known)
        else:
            offset = max(known) + 10**9  # out of range
        return FetchRequest(topic, partition, offset, self.rng.choice((0, 10, 64, 300, 4096)))

    # -- the 8 types ------------------------------------------------------------------

    def produce(self) -> ProduceRequest:
        return self._produce()

    def multiproduce(self) -> MultiProduceRequest:
        return MultiProduceRequest(tuple(self._produce() for _ in range(self.rng.randint(1, 3))))

    def fetch(self) -> FetchRequest:
        return self._fetch()

    def multifetch(self) -> MultiFetchRequest:
        return MultiFetchRequest(tuple(self._fetch() for _ in range(self.rng.randint(1, 3))))

    def offsets(self) -> OffsetsRequest:
        time_ms = self.rng.choice((LATEST_TIME, EARLIEST_TIME, 0, int(time.time() * 1000)))
        return OffsetsRequest(self._topic(), self._partition(), time_ms, self.rng.randint(1, 5))

    def acked_produce(self) -> AckedProduceRequest:
        produces = tuple(self._produce() for _ in range(self.rng.randint(1, 3)))
        return AckedProduceRequest(self.rng.random() < 0.1, produces)

    def waiting_fetch(self) -> WaitingFetchRequest:
        fetches = tuple(self._fetch() for _ in range(self.rng.randint(1, 2)))
        return WaitingFetchRequest(
            self.rng.choice((0, 1, 5, 20)), self.rng.choice((0, 1, 64)), fetches
        )

    def metadata(self) -> MetadataRequest:
        rng = self.rng
        if rng.random() < 0.2:
            return MetadataRequest(())
        return MetadataRequest(tuple(rng.sample(self.topics, rng.randint(1, len(self.topics)))))
