"""One broker's Kafka 0.8 listener, several partitions at once: Fetch v0 and Offsets v0.

    consumer = SimpleConsumer08("127.0.0.1", 9192)
    results = consumer.fetch_wait([FetchRequest("orders", 0, 42, 300 * 1024)], max_wait_ms=100)
    for result in results:          # FetchedData08, or the partition's error as a value
        batch = result.messages()   # KeyedBatch: offsets, keys, payloads, next_offset

simple_consumer.py's SimpleConsumer for 0.8-format topics, with the same calls where the
group consumer's fetchers and the cluster view need them (`fetch_wait`, `offsets_before`,
`earliest_offset`, `latest_offset`), over connection08.py. A 0.8 broker answers only for the
partitions it leads (partition_reader08.py follows one partition's leader); offsets are
logical, and a set fetched from inside a compressed wrapper holds the whole wrapper
(`FetchedData08.messages()` skips what is below the offset asked for). Error codes are 0.8's,
raised as the project's exceptions (kafka08.errors.error_for_code08).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import NamedTuple

from ..protocol.errors import LogbrokerError
from ..protocol.kafka08.errors import error_for_code08
from ..protocol.kafka08.fetch import FETCH_V0, FetchPartition, FetchTopic
from ..protocol.kafka08.fetch import FetchRequest as FetchRequest08
from ..protocol.kafka08.offsets import (
    EARLIEST,
    LATEST,
    OFFSETS_V0,
    OffsetsPartition,
    OffsetsRequest,
    OffsetsTopic,
)
from ..protocol.requests import FetchRequest
from ..protocol.wire import Buffer
from ..security.sasl import SaslClientConfig
from .connection08 import Kafka08Connection
from .messages08 import KeyedBatch, batch_of, keyed_columns
from .simple_consumer import DEFAULT_FETCH_SIZE, DEFAULT_MAX_FETCH_SIZE

CLIENT_REPLICA_ID = -1  # a consumer's Fetch and Offsets (a broker's id would be a follower's)


class FetchedData08(NamedTuple):
    """One partition of a Fetch v0 answer: entries from the one that holds `offset` (the last
    may be cut off), and the partition's high watermark when it was read."""

    topic: str
    partition: int
    offset: int
    high_watermark: int
    data: Buffer

    def messages(self) -> KeyedBatch:
        """Its whole messages at or after `offset`."""
        return batch_of(keyed_columns(self.data, self.offset), self.offset)


def describe08(code: int, doing: str, topic: str, partition: int, where: str) -> LogbrokerError:
    """The exception of a 0.8 error code, its message naming what was asked of whom."""
    name = type(error_for_code08(code)).__name__
    return error_for_code08(
        code, f"{name} (0.8 code {code}) {doing} {topic}-{partition} at {where}"
    )


def fetch_request(
    fetches: Sequence[FetchRequest], max_wait_ms: int, min_bytes: int
) -> FetchRequest08:
    """A consumer's Fetch v0 of (topic, partition, offset, max size) fetches, grouped by
    topic in the order they come (the answer lists them so)."""
    topics: dict[str, list[FetchPartition]] = {}
    for f in fetches:
        topics.setdefault(f.topic, []).append(FetchPartition(f.partition, f.offset, f.max_size))
    return FetchRequest08(
        CLIENT_REPLICA_ID,
        max_wait_ms,
        min_bytes,
        tuple(FetchTopic(t, tuple(ps)) for t, ps in topics.items()),
    )


def offsets_request(topic: str, partition: int, time_ms: int, max_offsets: int) -> OffsetsRequest:
    return OffsetsRequest(
        CLIENT_REPLICA_ID,
        (OffsetsTopic(topic, (OffsetsPartition(partition, time_ms, max_offsets),)),),
    )


class SimpleConsumer08:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        fetch_size: int = DEFAULT_FETCH_SIZE,
        max_fetch_size: int = DEFAULT_MAX_FETCH_SIZE,
        timeout: float = 30.0,
        tls: ssl.SSLContext | None = None,
        sasl: SaslClientConfig | None = None,
    ) -> None:
        self.connection = Kafka08Connection(host, port, timeout=timeout, tls=tls, sasl=sasl)
        self.fetch_size = fetch_size
        self.max_fetch_size = max(max_fetch_size, fetch_size)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> SimpleConsumer08:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fetch_wait(
        self, fetches: Sequence[FetchRequest], max_wait_ms: int, min_bytes: int = 1
    ) -> list[FetchedData08 | LogbrokerError]:
        """One Fetch v0 of several partitions, held by the broker up to `max_wait_ms` until
        they have `min_bytes`: one result per fetch, in order; an error code becomes an
        exception value (NotLeaderForPartitionError, OffsetOutOfRangeError, ...)."""
        answer = self.connection.request(FETCH_V0, fetch_request(fetches, max_wait_ms, min_bytes))
        found = {(t.topic, p.partition): p for t in answer.topics for p in t.partitions}
        out: list[FetchedData08 | LogbrokerError] = []
        for f in fetches:
            got = found.get((f.topic, f.partition))
            if got is None:
                out.append(
                    LogbrokerError(
                        f"broker {self.connection.address} left {f.topic}-{f.partition} out of "
                        "its Fetch answer"
                    )
                )
            elif got.error_code:
                out.append(
                    describe08(
                        got.error_code,
                        f"fetching offset {f.offset} of",
                        f.topic,
                        f.partition,
                        self.connection.address,
                    )
                )
            else:
                out.append(
                    FetchedData08(f.topic, f.partition, f.offset, got.high_watermark, got.messages)
                )
        return out

    def offsets_before(
        self, topic: str, partition: int, time_ms: int, max_offsets: int = 1
    ) -> list[int]:
        """Offsets v0: the starts of the segments last written before `time_ms`, newest
        first (LATEST, -1: the high watermark; EARLIEST, -2: the log's start)."""
        answer = self.connection.request(
            OFFSETS_V0, offsets_request(topic, partition, time_ms, max_offsets)
        )
        for t in answer.topics:
            for p in t.partitions:
                if t.topic == topic and p.partition == partition:
                    if p.error_code:
                        raise describe08(
                            p.error_code,
                            f"asking offsets before {time_ms} of",
                            topic,
                            partition,
                            self.connection.address,
                        )
                    return list(p.offsets)
        raise LogbrokerError(
            f"broker {self.connection.address} left {topic}-{partition} out of its Offsets answer"
        )

    def earliest_offset(self, topic: str, partition: int) -> int:
        return self.offsets_before(topic, partition, EARLIEST, 1)[0]

    def latest_offset(self, topic: str, partition: int) -> int:
        """The high watermark: the end of what consumers can read."""
        return self.offsets_before(topic, partition, LATEST, 1)[0]
