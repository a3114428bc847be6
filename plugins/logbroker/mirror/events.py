"""Counting the events the mirror forwards, for the audit (tier "mirror", docs/design.md §3.5).

For each partition's batch (its entries as stored) the mirror reads every payload's event time
with `serde.header.read_timestamp` (the header's first varint, no schema needed); a
compressed wrapper is decompressed into a copy for that (what is forwarded stays the
wrapper). A 0.8-format topic's set (0.8's entries, keyed) is read the same way, through
`client.messages08.keyed_columns`. After the target acknowledged the batch, its timestamps go to an
`audit.AuditPublisher(tier="mirror")`, which publishes AuditCount deltas to `_audit` on the
target when a window closes, and on close. Payloads that are not framed events (or whose
header cannot be read) are counted as undecodable: forwarded all the same. `_audit` itself
is never counted (its events are counts).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

from ..audit import AUDIT_TOPIC, AuditPublisher
from ..client.messages08 import keyed_columns
from ..protocol import compression
from ..protocol.errors import InvalidMessageError, LogbrokerError
from ..protocol.message import CODEC_MASK, ENTRY_OVERHEAD
from ..protocol.message_set import iter_messages
from ..serde.errors import SerdeError
from ..serde.header import read_timestamp, timestamp_at
from .metrics import MirrorMetrics
from .mirror_maker import EventCounter

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")


def payloads_of(stored: bytes) -> list[bytes]:
    """The payloads a stored message carries: itself, or a compressed set's inner ones."""
    magic = stored[0]
    if magic == 1:
        codec = stored[1] & CODEC_MASK
        payload = stored[6:]
    else:
        codec, payload = 0, stored[5:]
    if not codec:
        return [payload]
    inner = compression.decompress(codec, payload)
    return [m.payload for m in iter_messages(inner)]


def _count08(topic: str, stored_set: bytes, timestamps: list[int]) -> int:
    """Append the event times of a 0.8 stored set's payloads (through its wrappers) to
    `timestamps`; the payloads that are not events."""
    try:
        payloads = keyed_columns(stored_set).payloads
    except InvalidMessageError as exc:  # the target will refuse it too, and say so
        log.warning("%s: a stored set cannot be opened for counting: %s", topic, exc)
        return 1
    undecodable = 0
    for payload in payloads:
        try:
            timestamps.append(read_timestamp(payload))
        except SerdeError:
            undecodable += 1
    return undecodable


class AuditedEvents(EventCounter):
    """Counts forwarded events for an AuditPublisher (None: counts only the metrics)."""

    def __init__(
        self,
        publisher: AuditPublisher | None,
        metrics: MirrorMetrics,
        closers: list[Callable[[], object]] | None = None,
    ) -> None:
        """`closers` run after the last publish (the publisher's producer and registry)."""
        self.publisher = publisher
        self.metrics = metrics
        self.closers = closers or []

    def count(self, topic: str, stored_set: bytes, format08: bool = False) -> tuple[object, int]:
        timestamps: list[int] = []
        undecodable = 0
        if topic == AUDIT_TOPIC:
            return (topic, timestamps), 0
        if format08:
            return (topic, timestamps), _count08(topic, stored_set, timestamps)
        unpack_size = _SIZE.unpack_from
        pos, length = 0, len(stored_set)
        while pos < length:  # the entries were checked whole by the consumer
            (size,) = unpack_size(stored_set, pos)
            start, pos = pos + ENTRY_OVERHEAD, pos + ENTRY_OVERHEAD + size
            magic = stored_set[start]
            if magic == 0 or not stored_set[start + 1] & CODEC_MASK:
                # a plain message: its payload follows magic (+ attributes) and the CRC
                timestamp = timestamp_at(stored_set, start + 5 + magic, pos)
                if timestamp is None:
                    undecodable += 1
                else:
                    timestamps.append(timestamp)
                continue
            try:
                payloads = payloads_of(stored_set[start:pos])
            except InvalidMessageError as exc:  # the target will refuse it too, and say so
                log.warning("%s: a stored message cannot be opened for counting: %s", topic, exc)
                undecodable += 1
                continue
            for payload in payloads:
                try:
                    timestamps.append(read_timestamp(payload))
                except SerdeError:
                    undecodable += 1
        return (topic, timestamps), undecodable

    def add(self, counted: object) -> None:
        assert isinstance(counted, tuple)
        topic: str = counted[0]
        timestamps: list[int] = counted[1]
        if not timestamps:
            return
        self.metrics.events.labels(topic).inc(len(timestamps))
        if self.publisher is not None:
            try:
                self.publisher.count(topic, timestamps)
            except LogbrokerError as exc:  # the counts stay and go with the next publish
                log.warning("publishing the mirror's audit counts failed: %s", exc)

    def tick(self) -> None:
        if self.publisher is not None:
            try:
                self.publisher.publish_closed()
            except LogbrokerError as exc:
                log.warning("publishing the mirror's audit counts failed: %s", exc)

    def close(self) -> None:
        try:
            if self.publisher is not None:
                self.publisher.close()
        except LogbrokerError as exc:
            log.error("the mirror's last audit counts were not published: %s", exc)
        finally:
            for close in self.closers:
                close()
