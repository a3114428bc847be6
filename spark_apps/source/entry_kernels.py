"""The compiled part of entry_scan.py: numba functions over a fetch's bytes (layout there).

Imported on first use only (numba takes ~1.4 s to import): Spark's planning processes, which
import the reader's modules but read no data, never pay for it. Compiled once into the cache
beside this file (`make setup` runs scripts/compile_readers.py); a Spark worker loads it.

The CRC is CRC-32 (IEEE, zlib's), computed eight bytes at a time with eight tables.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from spark_apps.source.entry_scan import ENTRY_HEADER

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


TABLES = _crc_tables()
_jit = numba.njit(cache=True, nogil=True)  # cached on disk: a Spark worker compiles nothing
# The annotations below are for mypy; numba types a function by its arguments. Compiled
# arithmetic makes numpy scalars (np.int64, np.uint32) of Python ints, hence the unions;
# a Python caller gets Python ints back.


@_jit
def _crc32(buf: Any, start: int | np.int64, end: int | np.int64, t: Any) -> np.uint32:
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


@_jit
def walk(
    buf: Any, entries: Any, check_crc: bool, t: Any
) -> tuple[int, int | np.int64, int | np.int64]:
    """(entries found, where the walk stopped, where the first bad CRC's entry is or -1)."""
    n = 0
    pos: int | np.int64 = 0
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


@_jit
def gather(buf: Any, entries: Any, stop: int, out: Any, offsets: Any) -> None:
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


@_jit
def digest_bytes(buf: Any, entries: Any, stop: int, base: int, out: Any) -> None:
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
