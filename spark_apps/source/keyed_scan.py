"""A 0.8-format fetch's messages as columns over its bytes: the Spark reader's and the load's
digest's hot path for logical ranges (ranges.py), as entry_scan.py is for 0.7 ones.

    KeyedRun := buf            the fetch's bytes (uint8, read-only, not copied again)
                offsets        int64, each message's logical offset
                value_starts   int64 positions in buf: where each payload starts...
                value_ends     ...and ends (a null value: an empty span)
                key_starts     int64 positions in buf: where each key starts
                key_lengths    int32, each key's length, -1 for a null key
                next_offset    where the partition resumes after these messages

Why: read one message at a time in Python (messages08.keyed_columns: a struct read, two
slices, list appends) a 0.8-format range cost 0.6x a 0.7 one's load (docs/performance.md).
`keyed_run` walks a fetch of plain entries in compiled code (keyed_kernels.py), every CRC
checked, without a Python object per message; the Avro reader reads the payloads in place
(`framed`), the key column and the values are copied out by compiled code only when asked
for, and rows_sha256's bytes come from the same columns (`digest_bytes`). A fetch holding
anything else (a compressed wrapper, another magic, damage) is read by keyed_columns, the
reference, which inflates wrappers and names damage, and its lists are put in this form.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from logbroker.client.messages08 import keyed_columns
from logbroker.protocol.wire import Buffer
from spark_apps.source.entry_scan import ENTRY_HEADER, PlainRun, byte_array
from spark_apps.source.keyed_kernels import (
    END,
    MIN_ENTRY,
    digest_keyed,
    gather_spans,
    keyed_entries,
)


class KeyedRun:
    """Messages of a 0.8-format fetch, as columns over its bytes (the layout at the top)."""

    __slots__ = (
        "buf",
        "key_lengths",
        "key_starts",
        "next_offset",
        "offsets",
        "value_ends",
        "value_starts",
    )

    def __init__(
        self,
        buf: np.ndarray,
        offsets: np.ndarray,
        value_starts: np.ndarray,
        value_ends: np.ndarray,
        key_starts: np.ndarray,
        key_lengths: np.ndarray,
        next_offset: int,
    ) -> None:
        self.buf = buf
        self.offsets = offsets
        self.value_starts = value_starts
        self.value_ends = value_ends
        self.key_starts = key_starts
        self.key_lengths = key_lengths
        self.next_offset = next_offset

    def __len__(self) -> int:
        return len(self.offsets)

    def head(self, n: int, next_offset: int) -> KeyedRun:
        """The first `n` messages (views, not copies), resuming at `next_offset`."""
        return KeyedRun(
            self.buf,
            self.offsets[:n],
            self.value_starts[:n],
            self.value_ends[:n],
            self.key_starts[:n],
            self.key_lengths[:n],
            next_offset,
        )

    def framed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the buffer, where each payload starts in it, where it ends): read in place."""
        return self.buf, self.value_starts, self.value_ends

    def payload_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(every payload's bytes, one after another; int32 offsets, one more than messages):
        an Arrow binary column's data and offsets buffers."""
        return self._gather(self.value_starts, self.value_ends, 0)

    def key_array(self) -> pa.BinaryArray:
        """The `key` column: each message's key, null where the key is null."""
        n = len(self)
        ends = self.key_starts + np.maximum(self.key_lengths, 0)
        data, offsets = self._gather(self.key_starts, ends, 0)
        null = self.key_lengths < 0
        nulls = int(np.count_nonzero(null))
        validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if nulls else None
        return pa.Array.from_buffers(
            pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], nulls
        )

    def keys(self) -> list[bytes | None]:
        return self.key_array().to_pylist()  # type: ignore[no-any-return]

    def payloads(self) -> list[bytes]:
        data, offsets = self.payload_arrays()
        blob = data.tobytes()
        bounds = offsets.tolist()
        return [blob[a:b] for a, b in itertools.pairwise(bounds)]

    def digest_bytes(self) -> bytes:
        """rows_sha256's bytes for these messages (ranges.py's layout for logical ranges)."""
        return digest_keyed(
            self.buf,
            self.offsets,
            self.value_starts,
            self.value_ends,
            self.key_starts,
            self.key_lengths,
        )

    def payload_run(self) -> PlainRun:
        """The payloads as entry_scan.payload_run frames them (each after ENTRY_HEADER zero
        bytes): what the readers of plain runs' payloads take (event_names.NameKeys)."""
        data, offsets = self._gather(self.value_starts, self.value_ends, ENTRY_HEADER)
        entries = offsets[:-1].astype(np.int64) - ENTRY_HEADER
        return PlainRun(byte_array(data), entries, len(data), -1)

    def _gather(
        self, starts: np.ndarray, ends: np.ndarray, pad: int
    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(starts)
        out = np.empty(int((ends - starts).sum()) + pad * n, np.uint8)
        offsets = np.empty(n + 1, np.int32)
        gather_spans(self.buf, starts, ends, pad, out, offsets)
        return out, offsets


def keyed_run(data: Buffer, from_offset: int) -> tuple[KeyedRun, int, int]:
    """The messages at or after `from_offset` of the whole entries of `data` (a 0.8 Fetch
    answer's set, copied here: it may be a view of a buffer the reader reuses), where those
    entries end (0: not one whole entry), and how many messages: PartitionReader08's
    iter_decoded's form. Damage raises as keyed_columns raises it."""
    raw = bytes(data)
    buf = byte_array(raw)
    cap = len(buf) // MIN_ENTRY + 1
    offsets = np.empty(cap, np.int64)
    value_starts = np.empty(cap, np.int64)
    value_ends = np.empty(cap, np.int64)
    key_starts = np.empty(cap, np.int64)
    key_lengths = np.empty(cap, np.int32)
    n, stop, last, status = keyed_entries(
        buf, from_offset, True, offsets, value_starts, value_ends, key_starts, key_lengths
    )
    if status == END:
        run = KeyedRun(
            buf,
            offsets[:n],
            value_starts[:n],
            value_ends[:n],
            key_starts[:n],
            key_lengths[:n],
            max(from_offset, last + 1),
        )
        return run, stop, n
    # a wrapper (inflated and checked whole there) or damage (named there): the reference
    columns = keyed_columns(raw, from_offset)
    run = from_lists(
        columns.offsets, columns.keys, columns.payloads, max(from_offset, columns.last_offset + 1)
    )
    return run, columns.end, len(run)


def from_lists(
    offsets: Sequence[int],
    keys: Sequence[bytes | None],
    payloads: Sequence[bytes],
    next_offset: int,
) -> KeyedRun:
    """Messages read some other way (lists), as a run over one buffer of their keys and
    payloads (each message's key, then its payload)."""
    n = len(offsets)
    key_lengths = np.fromiter((-1 if k is None else len(k) for k in keys), np.int32, n)
    value_lengths = np.fromiter(map(len, payloads), np.int64, n)
    sizes = np.maximum(key_lengths, 0).astype(np.int64) + value_lengths
    ends = np.cumsum(sizes)
    starts = ends - sizes
    parts: list[bytes] = []
    for key, payload in zip(keys, payloads, strict=True):
        if key:
            parts.append(key)
        parts.append(payload)
    return KeyedRun(
        byte_array(b"".join(parts)),
        np.fromiter(offsets, np.int64, n),
        ends - value_lengths,
        ends,
        starts,
        key_lengths,
        next_offset,
    )
