"""Publishing counts: `AuditCount` deltas on the topic `_audit` (docs/design.md §3.5).

An `AuditPublisher` owns a WindowCounter. Whoever forwards events (a producer: tier
"producer"; the mirror: tier "mirror") calls `count(topic, timestamps)` after each batch it
sent. Counts leave as `logbroker.AuditCount` events, one per (topic, window), each a delta:

- when a window closes: `grace_ms` after its end, checked on every `count` (one clock read
  per batch) and by `publish_closed()`;
- on `flush()` and on `close()`: every window, open or not.

A window can therefore get several counts (late events, flushes); the audit sums them after
deduplicating the AuditCount events by their header. The audit events take their header
(producer_id, seq) from the same HeaderMaker as the events they count, so (producer_id, seq)
stays unique per producer across every topic, `_audit` included. Events sent to `_audit`
itself are never counted. A publish that fails keeps its encoded events and sends the same
bytes (same headers) on the next publish: a retry never counts twice.

A process killed before it published its counts leaves those windows short in `_audit`: the
audit then shows more loaded than produced for them (`unaccounted`), never less.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..client.producer import Producer
from ..protocol.topics import AUDIT_TOPIC as AUDIT_TOPIC
from ..serde.codec import EventWriter
from ..serde.header import HeaderMaker
from ..serde.registry import SchemaRegistry
from ..serde.schemas import audit_count_schema
from .counter import WindowCounter
from .windows import WINDOW_MS

log = logging.getLogger(__name__)

AUDIT_SUBJECT = "_audit"
DEFAULT_GRACE_MS = 60_000


class AuditPublisher:
    """Counts events per (topic, window) and publishes the counts as AuditCount deltas."""

    def __init__(
        self,
        producer: Producer,
        registry: SchemaRegistry,
        *,
        tier: str = "producer",
        headers: HeaderMaker | None = None,
        window_ms: int = WINDOW_MS,
        grace_ms: int = DEFAULT_GRACE_MS,
        clock: Callable[[], float] = time.time,
        audit_topic: str = AUDIT_TOPIC,
        subject: str = AUDIT_SUBJECT,
    ) -> None:
        self.producer = producer
        self.tier = tier
        self.headers = headers or HeaderMaker(clock=clock)
        self.counter = WindowCounter(window_ms)
        self.window_ms = window_ms
        self.grace_ms = grace_ms
        self.clock = clock
        self.audit_topic = audit_topic
        self.registry = registry
        self.subject = subject
        self._writer: EventWriter | None = None  # registered with the first count published
        self.published_events = 0  # AuditCount events sent
        self.published_count = 0  # the sum of their counts
        self._unsent: list[bytes] = []
        self._unsent_total = 0
        self._lock = threading.Lock()
        self._close_after_ms = window_ms + grace_ms  # from a window's start

    def count(self, topic: str, timestamps: Sequence[int]) -> None:
        """Count one event per timestamp (UTC ms) sent to `topic`; publish closed windows."""
        if topic == self.audit_topic or not timestamps:
            return
        self.counter.add(topic, timestamps)
        self._publish_if_due()

    def count_windows(self, topic: str, counts: Iterable[tuple[int, int]]) -> None:
        """Count events of `topic` already summed per window: (window start, count) pairs."""
        if topic == self.audit_topic:
            return
        add = self.counter.add_window
        for start, count in counts:
            add(topic, start, count)
        self._publish_if_due()

    def _publish_if_due(self) -> None:
        earliest = self.counter.earliest_start
        if earliest is not None and self.clock() * 1000 >= earliest + self._close_after_ms:
            self.publish_closed()

    def publish_closed(self) -> int:
        """Publish the windows that closed (end + grace <= now); returns how many counts went."""
        now_ms = int(self.clock() * 1000)
        return self._publish(lambda: self.counter.take(ending_by=now_ms - self.grace_ms))

    def flush(self) -> int:
        """Publish every count, open windows too; returns how many counts went."""
        return self._publish(self.counter.take)

    def close(self) -> None:
        """Publish what is left (the producer is the caller's to close)."""
        self.flush()

    def pending(self) -> dict[tuple[str, int], int]:
        """Counted and not yet published (topic, window start) -> count."""
        return self.counter.pending()

    def writer(self) -> EventWriter:
        """The AuditCount schema's writer, registered when the first count is published, not
        before: a mirror or producer that never counts an event leaves the registry alone (a
        fresh registry's first schema of its own then gets id 1). Registering is idempotent."""
        if self._writer is None:
            version = self.registry.register(self.subject, audit_count_schema())
            self._writer = EventWriter.for_version(version)
        return self._writer

    def _publish(self, take: Callable[[], dict[tuple[str, int], int]]) -> int:
        with self._lock:
            counts = take()
            if counts:
                try:
                    writer = self.writer()
                except BaseException:  # the registry failed: the counts go with the next publish
                    for (topic, start), count in counts.items():
                        self.counter.add_window(topic, start, count)
                    raise
            for (topic, start), count in sorted(
                counts.items(), key=lambda kv: (kv[0][1], kv[0][0])
            ):
                record: dict[str, Any] = {
                    "header": self.headers.header(),
                    "topic": topic,
                    "tier": self.tier,
                    "window_start": start,
                    "window_ms": self.window_ms,
                    "count": count,
                }
                self._unsent.append(writer.encode(record, f"audit count for {topic}"))
                self._unsent_total += count
            if not self._unsent:
                return 0
            events, total = self._unsent, self._unsent_total
            self.producer.send(self.audit_topic, events)  # raises: kept for the next publish
            self._unsent, self._unsent_total = [], 0
            self.published_events += len(events)
            self.published_count += total
            log.debug(
                "published %d audit counts (%d events) to %s", len(events), total, self.audit_topic
            )
            return len(events)
