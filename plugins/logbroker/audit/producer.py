"""The audited event producer: records in, framed Avro events out, every one counted.

`AuditedProducer` wraps a plain `Producer` (client/producer.py). Per batch of records for one
topic it fills each record's header (fields the record gives are kept):

    timestamp    the record's event time if given (int UTC ms, or a datetime), else now
    server       this host, unless given
    producer_id  this instance's id, and seq the next of its counter across every topic;
    seq          a record may give both (replaying events keeps their identity), not one

then encodes the whole batch with the subject's latest schema (subject = topic unless given)
and only then sends it: a record that does not fit fails the batch before anything is sent,
and takes no seq. The batch's events are summed per window while it is prepared; after each
send those sums go to an AuditPublisher (tier "producer") that publishes AuditCount deltas to `_audit` when a window closes (grace after its
end), on `flush()` and on `close()`.

`prepare` + `send_prepared` split the two halves: encode once, send (and resend after a
failure: the same events, the same headers) as often as needed. A prepared batch is counted
each time a send succeeds.

A producer killed before `close()` never publishes the counts of its open windows: the audit
shows those windows with more loaded than produced (`unaccounted`), which says "a producer
died", not "data was lost".
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..client.partitioner import Key
from ..client.producer import Producer, SendResult
from ..serde.codec import EventCodec
from ..serde.errors import EncodeError
from ..serde.header import HeaderMaker
from ..serde.registry import SchemaRegistry
from .counter import WindowCounter
from .publisher import AUDIT_TOPIC, DEFAULT_GRACE_MS, AuditPublisher
from .windows import WINDOW_MS


class PreparedBatch(NamedTuple):
    """Encoded events for one topic, ready to send.

    `timestamps` are their event times; `windows` the same summed per audit window,
    ((window start, count), ...), worked out once here so that a send counts in O(windows).
    """

    topic: str
    payloads: list[bytes]
    timestamps: list[int]
    schema_id: int
    windows: tuple[tuple[int, int], ...]


class AuditedProducer:
    """Send records as Avro events and count them for the audit (see the module doc)."""

    def __init__(
        self,
        producer: Producer,
        registry: SchemaRegistry,
        *,
        producer_id: str | None = None,
        server: str | None = None,
        clock: Callable[[], float] = time.time,
        audit: bool = True,
        window_ms: int = WINDOW_MS,
        grace_ms: int = DEFAULT_GRACE_MS,
        audit_topic: str = AUDIT_TOPIC,
        validate: bool = False,
        close_producer: bool = True,
    ) -> None:
        self.producer = producer
        self.registry = registry
        self.codec = EventCodec(registry)
        self.headers = HeaderMaker(producer_id, server, clock)
        self.validate = validate
        self.window_ms = window_ms
        self.close_producer = close_producer
        self.publisher: AuditPublisher | None = (
            AuditPublisher(
                producer,
                registry,
                tier="producer",
                headers=self.headers,
                window_ms=window_ms,
                grace_ms=grace_ms,
                clock=clock,
                audit_topic=audit_topic,
            )
            if audit
            else None
        )
        self.sent_events = 0

    @property
    def producer_id(self) -> str:
        return self.headers.producer_id

    def prepare(
        self,
        topic: str,
        records: Iterable[Mapping[str, Any]],
        *,
        subject: str | None = None,
        names: Sequence[str] | None = None,
    ) -> PreparedBatch:
        """Fill the headers and encode every record; EncodeError before any seq is taken.

        `names` are the records' names in errors (e.g. "line 17"), by default "record <i>".
        """
        writer = self.codec.writer(subject or topic, validate=self.validate)
        headers = self.headers
        producer_id, server = headers.producer_id, headers.server
        payloads: list[bytes] = []
        timestamps: list[int] = []
        with headers.lock:  # seqs are taken only when the whole batch encoded
            seq = headers.next_seq
            now_ms: int | None = None
            for i, record in enumerate(records):
                where = names[i] if names is not None else f"record {i}"
                given = record.get("header")
                if given is None:
                    if now_ms is None:
                        now_ms = headers.now_ms()
                    header: dict[str, Any] = {
                        "timestamp": now_ms,
                        "server": server,
                        "producer_id": producer_id,
                        "seq": seq,
                    }
                    seq += 1
                else:
                    header, seq = self._fill(given, seq, where)
                timestamps.append(header["timestamp"])
                payloads.append(writer.encode({**record, "header": header}, where))
            headers.reserve(seq - headers.next_seq)
        return PreparedBatch(
            topic, payloads, timestamps, writer.schema_id, self._windows(timestamps)
        )

    def send_prepared(self, batch: PreparedBatch, key: Key = None) -> list[SendResult]:
        """Send a prepared batch to one partition of its topic, then count it."""
        results = self.producer.send(batch.topic, batch.payloads, key)
        self.sent_events += len(batch.payloads)
        if self.publisher is not None:
            self.publisher.count_windows(batch.topic, batch.windows)
        return results

    def send(
        self,
        topic: str,
        records: Iterable[Mapping[str, Any]],
        key: Key = None,
        *,
        subject: str | None = None,
    ) -> list[SendResult]:
        """prepare + send_prepared: the records as events on `topic`, counted."""
        return self.send_prepared(self.prepare(topic, records, subject=subject), key)

    def flush(self) -> int:
        """Publish every count now; returns how many AuditCount events went."""
        return self.publisher.flush() if self.publisher is not None else 0

    def close(self) -> None:
        """Publish the counts, then close the producer (unless close_producer=False)."""
        try:
            if self.publisher is not None:
                self.publisher.close()
        finally:
            if self.close_producer:
                self.producer.close()

    def __enter__(self) -> AuditedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _windows(self, timestamps: list[int]) -> tuple[tuple[int, int], ...]:
        if not timestamps:
            return ()
        counter = WindowCounter(self.window_ms)
        counter.add("", timestamps)
        return tuple(sorted((start, n) for (_, start), n in counter.take().items()))

    def _fill(self, given: Any, seq: int, where: str) -> tuple[dict[str, Any], int]:
        if not isinstance(given, Mapping):
            raise EncodeError(
                f"{where}: field 'header': expected a record, got {given!r}", "header"
            )
        header = dict(given)
        timestamp = header.get("timestamp")
        if timestamp is None:
            header["timestamp"] = self.headers.now_ms()
        elif isinstance(timestamp, datetime.datetime):
            if timestamp.tzinfo is None:
                timestamp = timestamp.replace(tzinfo=datetime.UTC)
            header["timestamp"] = int(timestamp.timestamp() * 1000)
        elif not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise EncodeError(
                f"{where}: field 'header.timestamp': expected UTC ms (long) or a datetime, "
                f"got {timestamp!r}",
                "header.timestamp",
            )
        header.setdefault("server", self.headers.server)
        has_id, has_seq = "producer_id" in header, "seq" in header
        if has_id != has_seq:
            missing = "seq" if has_id else "producer_id"
            raise EncodeError(
                f"{where}: field 'header.{missing}': a record that gives "
                f"{'producer_id' if has_id else 'seq'} must give {missing} too "
                "(together they name the event)",
                f"header.{missing}",
            )
        if not has_id:
            header["producer_id"] = self.headers.producer_id
            header["seq"] = seq
            seq += 1
        return header, seq
