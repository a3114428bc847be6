"""Plain entries of fetched log bytes, walked in compiled code: the Spark reader's hot loop.

    entry := int32 size | int8 magic (1) | int8 attributes | uint32 crc32(payload) | payload
             big-endian; size = 6 + len(payload); plain: attributes' codec bits are 0
             (logbroker.protocol.message_set owns the layout; this reads its common case)

Why: a fetch holds ~7,000 events of ~150 bytes, and walking them in Python costs ~1 us each
(a header unpack, a payload slice, a CRC call, list appends: most of a Spark reader's CPU).
Compiled with numba, the walk, the CRC check and the copies cost ~0.1-0.2 us per message
and build no Python object per message. Only plain magic-1 entries are walked here: where
anything else starts (a compressed wrapper, a magic-0 entry, a damaged size), `plain_run`
stops and says where, and the caller reads the fetch with message_set's general path,
which unwraps, checks and names every kind of entry.

The CRC is CRC-32 (IEEE, zlib's), computed eight bytes at a time with eight tables.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numba
import numpy as np

from logbroker.protocol.message import MIN_MESSAGE_SIZE

ENTRY_HEADER = 10  # size (4), magic, attributes, crc (4): where a magic-1 payload starts
_MIN_SIZE = 6  # a magic-1 message with an empty payload


def _crc_tables() -> np.ndarray:
    tables = np.zeros((8, 256), np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        tables[0, i] = c
    for i in range(256):
        c = int(tables[0, i])
        for k in range(1, 8):
            c = int(tables[0, c & 0xFF]) ^ (c >> 8)
            tables[k, i] = c
    return tables


_TABLES = _crc_tables()
_jit = numba.njit(cache=True, nogil=True)  # cached on disk: a Spark worker compiles nothing


@_jit  # type: ignore[misc]
def _crc32(buf: Any, start: int, end: int, t: Any) -> int:
    c = np.uint32(0xFFFFFFFF)
    i = start
    while i + 8 <= end:
        one = c ^ (
            np.uint32(buf[i])
            | (np.uint32(buf[i + 1]) << 8)
            | (np.uint32(buf[i + 2]) << 16)
            | (np.uint32(buf[i + 3]) << 24)
        )
        two = (
            np.uint32(buf[i + 4])
            | (np.uint32(buf[i + 5]) << 8)
            | (np.uint32(buf[i + 6]) << 16)
            | (np.uint32(buf[i + 7]) << 24)
        )
        c = (
            t[7, one & 0xFF]
            ^ t[6, (one >> 8) & 0xFF]
            ^ t[5, (one >> 16) & 0xFF]
            ^ t[4, one >> 24]
            ^ t[3, two & 0xFF]
            ^ t[2, (two >> 8) & 0xFF]
            ^ t[1, (two >> 16) & 0xFF]
            ^ t[0, two >> 24]
        )
        i += 8
    while i < end:
        c = t[0, (c ^ buf[i]) & 0xFF] ^ (c >> 8)
        i += 1
    return c ^ np.uint32(0xFFFFFFFF)


@_jit  # type: ignore[misc]
def _walk(buf: Any, entries: Any, check_crc: bool, t: Any) -> tuple[int, int, int]:
    """(entries found, where the walk stopped, where the first bad CRC's entry is or -1)."""
    n = 0
    pos = 0
    length = buf.shape[0]
    while pos + ENTRY_HEADER <= length:
        size = (
            (np.int64(buf[pos]) << 24)
            | (np.int64(buf[pos + 1]) << 16)
            | (np.int64(buf[pos + 2]) << 8)
            | np.int64(buf[pos + 3])
        )
        if size >= 2**31:
            break  # a negative size: damaged, the general path names it
        end = pos + 4 + size
        if buf[pos + 4] != 1 or (buf[pos + 5] & 3) != 0 or size < _MIN_SIZE or end > length:
            break
        if check_crc:
            crc = (
                (np.uint32(buf[pos + 6]) << 24)
                | (np.uint32(buf[pos + 7]) << 16)
                | (np.uint32(buf[pos + 8]) << 8)
                | np.uint32(buf[pos + 9])
            )
            if _crc32(buf, pos + ENTRY_HEADER, end, t) != crc:
                return n, pos, pos
        entries[n] = pos
        n += 1
        pos = end
    return n, pos, -1


@_jit  # type: ignore[misc]
def _gather(buf: Any, entries: Any, stop: int, out: Any, offsets: Any) -> None:
    """The payloads, one after another in `out`; offsets[i] where payload i starts."""
    n = entries.shape[0]
    at = 0
    for i in range(n):
        start = entries[i] + ENTRY_HEADER
        end = entries[i + 1] if i + 1 < n else stop
        offsets[i] = at
        out[at : at + end - start] = buf[start:end]
        at += end - start
    offsets[n] = at


@_jit  # type: ignore[misc]
def _digest_bytes(buf: Any, entries: Any, stop: int, base: int, out: Any) -> None:
    """offset (int64) | index (int32, 0) | length (int32) | payload, per entry, big-endian."""
    n = entries.shape[0]
    at = 0
    for i in range(n):
        start = entries[i] + ENTRY_HEADER
        end = entries[i + 1] if i + 1 < n else stop
        offset = base + entries[i]
        for k in range(8):
            out[at + k] = (offset >> (56 - 8 * k)) & 0xFF
        for k in range(4):
            out[at + 8 + k] = 0
        length = end - start
        for k in range(4):
            out[at + 12 + k] = (length >> (24 - 8 * k)) & 0xFF
        out[at + 16 : at + 16 + length] = buf[start:end]
        at += 16 + length


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
        _gather(self.buf, self.entries, self.stop, out, offsets)
        return out, offsets

    def digest_bytes(self, base: int) -> bytes:
        """rows_sha256's bytes for these entries (ranges.py), `base` the buffer's offset."""
        n = len(self.entries)
        total = self.stop - (int(self.entries[0]) if n else 0) + (16 - ENTRY_HEADER) * n
        out = np.empty(max(total, 0), np.uint8)
        _digest_bytes(self.buf, self.entries, self.stop, base, out)
        return out.tobytes()


def plain_run(data: Any, *, check_crc: bool = True) -> PlainRun:
    """Walk the plain magic-1 entries at the start of `data` (bytes-like), checking each CRC
    (unless `check_crc` is false) up to the first that does not match."""
    buf = np.frombuffer(data, np.uint8)
    entries = np.empty(len(buf) // ENTRY_HEADER + 1, np.int64)
    n, stop, bad = _walk(buf, entries, check_crc, _TABLES)
    return PlainRun(buf, entries[:n], int(stop), int(bad))


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
