"""Offset ranges of broker partitions: reading them message by message, and `rows_sha256`.

A range is `[start, end)` of byte offsets in one broker partition, both at message
boundaries (offsets come from the brokers, checkpoints or the OFFSETS request). A reader may
own only part of a range, `[owned_from, owned_to)`: it owns the top-level messages (entries)
whose offset lies there, so that a range split at arbitrary byte positions is read exactly
once. It starts at a known boundary before `owned_from` and walks entry sizes (no CRC, no
decoding) up to the first entry it owns; the entry that straddles `owned_to` is its own last.

`rows_sha256` (DESIGN.md §3.6) is SHA-256 over every message of the ranges, in
(broker_id, partition, offset, index) order, of:

    offset   8 bytes, big-endian    the top-level entry's offset (a compressed wrapper's own)
    index    4 bytes, big-endian    the message's position inside its wrapper (0 if none)
    length   4 bytes, big-endian    the payload's length
    payload  length bytes

Data loss: a range whose start retention deleted is a DataLossError naming topic, partition
and the missing offsets; with `fail_on_data_loss=False` a warning, and reading goes on from
the earliest offset still there.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.protocol.errors import LogbrokerError, OffsetOutOfRangeError
from logbroker.protocol.message_set import (
    Buffer,
    MessageColumns,
    first_entry_size,
    message_columns,
    whole_entries_end,
)

log = logging.getLogger(__name__)

DEFAULT_FETCH_SIZE = 1024 * 1024
MAX_FETCH_SIZE = 64 * 1024 * 1024
_DIGEST_HEADER = struct.Struct(">qii")
_INT32 = struct.Struct(">i")


class RangeError(LogbrokerError):
    """A range cannot be read as asked: its end is past the log, or not a message boundary."""


class DataLossError(RangeError):
    """Retention deleted (part of) a range before it was read."""


class PartitionRange(NamedTuple):
    """`[start, end)` of one broker partition of a topic."""

    topic: str
    broker_id: int
    partition: int
    start: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.broker_id}-{self.partition}"

    def describe(self) -> str:
        return f"topic {self.topic!r} partition {self.name}"


class Chunk(NamedTuple):
    """Messages of one fetch, as columns: top-level offsets, indexes in wrappers, payloads."""

    offsets: list[int]
    indexes: list[int]
    payloads: list[bytes]


def data_loss_message(r: PartitionRange, missing_from: int, earliest: int) -> str:
    return (
        f"{r.describe()}: offsets [{missing_from}, {min(earliest, r.end)}) of the range "
        f"[{r.start}, {r.end}) were deleted by retention before they were read "
        f"(the earliest offset still there is {earliest})"
    )


def _entry_at_or_after(data: memoryview, base: int, limit: int, end: int) -> int:
    """Position in `data` (whole entries up to `end`) of the first entry starting >= `limit`."""
    pos = 0
    unpack = _INT32.unpack_from
    while pos < end and base + pos < limit:
        pos += 4 + unpack(data, pos)[0]
    return min(pos, end)


def read_range(
    consumer: SimpleConsumer,
    r: PartitionRange,
    *,
    read_from: int | None = None,
    owned_from: int | None = None,
    owned_to: int | None = None,
    fetch_size: int = DEFAULT_FETCH_SIZE,
    max_fetch_size: int = MAX_FETCH_SIZE,
    fail_on_data_loss: bool = True,
    warn: Callable[[str], None] = log.warning,
) -> Iterator[Chunk]:
    """The messages of `r` (or of the part of it this reader owns), a fetch at a time.

    `read_from` is a message boundary at or before `owned_from` (default: `r.start`).
    """
    owned_from = r.start if owned_from is None else owned_from
    owned_to = r.end if owned_to is None else owned_to
    offset = r.start if read_from is None else read_from
    size = fetch_size
    while offset < owned_to:
        want = min(size, r.end - offset)
        try:
            data = consumer.fetch(r.topic, r.partition, offset, want).data
        except OffsetOutOfRangeError:
            earliest = consumer.earliest_offset(r.topic, r.partition)
            if offset >= earliest:
                latest = consumer.latest_offset(r.topic, r.partition)
                raise RangeError(
                    f"{r.describe()}: the log ends at offset {latest}, before the range "
                    f"[{r.start}, {r.end}) ends; was the broker's log replaced?"
                ) from None
            if fail_on_data_loss:
                raise DataLossError(data_loss_message(r, offset, earliest)) from None
            warn(
                data_loss_message(r, offset, earliest)
                + "; reading from there (failOnDataLoss=false)"
            )
            offset = max(offset, earliest)
            continue
        if owned_from <= offset and offset + len(data) <= owned_to:
            # The whole fetch is this reader's (nearly every fetch): one walk decodes it.
            columns = _columns(data, offset, r)
            if columns.end:
                yield Chunk(columns.offsets, columns.indexes, columns.payloads)
                offset += columns.end
                size = fetch_size
                continue
        view = memoryview(data)
        whole = whole_entries_end(view)
        if whole == 0:
            needed = first_entry_size(view)
            if needed is None or len(view) == 0:
                raise RangeError(
                    f"{r.describe()}: the log ends at offset {offset}, before the range "
                    f"[{r.start}, {r.end}) ends"
                )
            if needed > r.end - offset:
                raise RangeError(
                    f"{r.describe()}: offset {r.end} (the range's end) is not a message "
                    f"boundary: the message at {offset} is {needed} bytes"
                )
            if needed > max_fetch_size:
                raise RangeError(
                    f"{r.describe()}: the message at offset {offset} is {needed} bytes, over "
                    f"the largest fetch size {max_fetch_size}"
                )
            size = needed
            continue
        size = fetch_size
        first = 0
        if offset < owned_from:  # walking to the first entry this reader owns
            first = _entry_at_or_after(view, offset, owned_from, whole)
        last = whole
        if offset + whole > owned_to:
            last = _entry_at_or_after(view, offset, owned_to, whole)
        if last > first:
            yield _decode(view[first:last], offset + first, r)
        offset += last if last < whole else whole


def _columns(data: Buffer, base: int, r: PartitionRange) -> MessageColumns:
    try:
        return message_columns(data, base)
    except LogbrokerError as exc:
        raise type(exc)(f"{r.describe()}: {exc}") from exc


def _decode(view: memoryview, base: int, r: PartitionRange) -> Chunk:
    columns = _columns(view, base, r)
    return Chunk(columns.offsets, columns.indexes, columns.payloads)


class RowsDigest:
    """rows_sha256 and message counts, fed chunks in (broker_id, partition, offset) order."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.messages = 0

    def update(self, chunk: Chunk) -> None:
        pack = _DIGEST_HEADER.pack
        parts: list[bytes] = []
        add = parts.append
        for offset, index, payload in zip(
            chunk.offsets, chunk.indexes, chunk.payloads, strict=True
        ):
            add(pack(offset, index, len(payload)))
            add(payload)
        self._sha.update(b"".join(parts))
        self.messages += len(chunk.offsets)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


class RangeDigest(NamedTuple):
    rows_sha256: str
    messages: dict[tuple[int, int], int]  # (broker_id, partition) -> messages in its range


def digest_ranges(
    consumer_for: Callable[[int], SimpleConsumer],
    ranges: Iterable[PartitionRange],
    *,
    fetch_size: int = DEFAULT_FETCH_SIZE,
) -> RangeDigest:
    """rows_sha256 of `ranges` (any order given; hashed in contract order) and counts."""
    digest = RowsDigest()
    counts: dict[tuple[int, int], int] = {}
    for r in sorted(ranges, key=lambda x: (x.broker_id, x.partition)):
        before = digest.messages
        if r.end > r.start:
            for chunk in read_range(consumer_for(r.broker_id), r, fetch_size=fetch_size):
                digest.update(chunk)
        counts[(r.broker_id, r.partition)] = digest.messages - before
    return RangeDigest(digest.hexdigest(), counts)
