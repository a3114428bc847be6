"""Plain entries of fetched log bytes, walked in compiled code: the Spark reader's hot loop.

    entry := int32 size | int8 magic (1) | int8 attributes | uint32 crc32(payload) | payload
             big-endian; size = 6 + len(payload); plain: attributes' codec bits are 0
             (logbroker.protocol.message_set owns the layout; this reads its common case)

Why: a fetch holds ~7,000 events of ~150 bytes, and walking them in Python costs ~1 us each
(a header unpack, a payload slice, a CRC call, list appends: most of a Spark reader's CPU).
Compiled (logbroker.protocol._native, the message-set walks' module), the walk with its CRC
checks costs ~25 ns a message, the copies ~12 ns, and no Python object is made per message.
Only plain magic-1 entries are walked here: where anything else starts (a compressed
wrapper, a magic-0 entry, a damaged size), `plain_run` stops and says where, and the caller
reads the fetch with message_set's general path, which unwraps, checks and names every kind
of entry.

The loops are entry_kernels.py's: compiled, or their pure-Python reference where the
extension is not built or LOGBROKER_PURE_PYTHON=1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from logbroker.protocol.message import MIN_MESSAGE_SIZE
from spark_apps.source.entry_kernels import (
    ENTRY_HEADER,
    digest_entries,
    gather_payloads,
    walk_entries,
)

__all__ = [
    "ENTRY_HEADER",
    "PlainRun",
    "byte_array",
    "ends_with_partial_entry",
    "payload_run",
    "plain_run",
]


class PlainRun(NamedTuple):
    """The plain entries at the start of a buffer: where each starts, where they end."""

    buf: np.ndarray  # the buffer's bytes (uint8, not copied)
    entries: np.ndarray  # int64 positions in `buf`, one per entry
    stop: int  # where the walk stopped: the end of the last plain entry
    crc_mismatch_at: int  # the entry at `stop` when its CRC does not match, else -1

    def payload_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(every payload's bytes, one after another; int32 offsets, one more than entries):
        an Arrow binary column's data and offsets buffers."""
        n = len(self.entries)
        total = self.stop - (int(self.entries[0]) if n else 0) - ENTRY_HEADER * n
        out = np.empty(max(total, 0), np.uint8)
        offsets = np.empty(n + 1, np.int32)
        gather_payloads(self.buf, self.entries, self.stop, out, offsets)
        return out, offsets

    def framed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the buffer, where each payload starts in it, where it ends): the payloads read
        in place, without the copy `payload_arrays` makes."""
        starts = self.entries + ENTRY_HEADER
        ends = np.empty_like(starts)
        ends[:-1] = self.entries[1:]
        if len(ends):
            ends[-1] = self.stop
        return self.buf, starts, ends

    def digest_bytes(self, base: int) -> bytes:
        """rows_sha256's bytes for these entries (ranges.py), `base` the buffer's offset."""
        return digest_entries(self.buf, self.entries, self.stop, base)


def byte_array(data: Any) -> np.ndarray:
    """`data` (any bytes-like object) as a read-only uint8 array, not copied. Always
    read-only: numba (avro_compiled.py, event_names.py) compiles and caches one version per
    argument type, and a writable and a read-only array are two types; one type means one
    version, compiled at setup."""
    buf = np.frombuffer(data, np.uint8)
    if buf.flags.writeable:
        buf = buf.view()
        buf.flags.writeable = False
    return buf


def plain_run(data: Any, *, check_crc: bool = True) -> PlainRun:
    """Walk the plain magic-1 entries at the start of `data` (bytes-like), checking each CRC
    (unless `check_crc` is false) up to the first that does not match."""
    buf = byte_array(data)
    entries = np.empty(len(buf) // ENTRY_HEADER + 1, np.int64)
    n, stop, bad = walk_entries(buf, entries, check_crc)
    return PlainRun(buf, entries[:n], stop, bad)


def payload_run(payloads: Sequence[bytes]) -> PlainRun:
    """Payloads read some other way (decompressed: a 0.7 fetch's compressed sets unwrapped by
    message_set.message_columns, a 0.8-format fetch's by its reader) as a run that the
    readers of plain runs' payloads take (event_names.NameKeys): each after ENTRY_HEADER zero
    bytes. Only the payloads are real: no size, magic or CRC is there to check or digest."""
    if not payloads:
        return PlainRun(byte_array(b""), np.empty(0, np.int64), 0, -1)
    pad = bytes(ENTRY_HEADER)
    buf = byte_array(pad + pad.join(payloads))
    ends = np.cumsum(np.fromiter(map(len, payloads), np.int64, len(payloads)) + ENTRY_HEADER)
    entries = np.empty(len(payloads), np.int64)
    entries[0] = 0
    entries[1:] = ends[:-1]
    return PlainRun(buf, entries, len(buf), -1)


def ends_with_partial_entry(run: PlainRun) -> bool:
    """Whether what follows the run is only a cut-off entry (or nothing): the fetch's end,
    not an entry of another kind that the general path must read."""
    rest = len(run.buf) - run.stop
    if rest < 4 or run.crc_mismatch_at >= 0:
        return rest < 4 and run.crc_mismatch_at < 0
    b = run.buf
    at = run.stop
    size = (int(b[at]) << 24) | (int(b[at + 1]) << 16) | (int(b[at + 2]) << 8) | int(b[at + 3])
    return MIN_MESSAGE_SIZE <= size < 2**31 and rest < 4 + size
