"""The loops of entry_scan.py (layout there): a fetch's plain entries walked into arrays.

Three loops, each per message: `walk_entries` (where each plain magic-1 entry starts, each
CRC checked or not), `gather_payloads` (the payloads copied into one Arrow binary column's
buffers) and `digest_entries` (rows_sha256's bytes, ranges.py). Their compiled twins are in
logbroker.protocol._native (Cython, with the message-set walks: one native walk); they run
unless LOGBROKER_PURE_PYTHON=1 or the extension is not built (protocol/native.py decides,
once per process). The functions here are the reference and the fallback, each reachable as
`<name>_python` whichever runs; tests/spark/test_entry_kernels.py requires both to give the
same bytes for the same input, damaged input included.

A buffer is a uint8 array or any bytes-like object; `entries` holds int64 positions in it
(room for len(buf) // 10 + 1: an entry is at least 10 bytes).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

from logbroker.protocol import native

ENTRY_HEADER = 10  # size (4), magic, attributes, crc (4): where a magic-1 payload starts

_ENTRY = struct.Struct(">iBBI")  # size, magic, attributes, crc
_DIGEST_HEADER = struct.Struct(">qii")  # offset, index (0), length


def _view(buf: Any) -> memoryview:
    """`buf` (a uint8 array or bytes-like) as a flat memoryview of bytes, not copied."""
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _checked(buf: Any, entries: Any, stop: int) -> tuple[memoryview, int]:
    """`buf` as bytes and the number of entries, after the checks the compiled twins make
    (a walk's entries: ascending, each a header long, the last ending at `stop`)."""
    data = _view(buf)
    n = len(entries)
    if not 0 <= stop <= len(data):
        raise ValueError(f"stop {stop} is outside the {len(data)}-byte buffer")
    for i in range(n):
        following = int(entries[i + 1]) if i + 1 < n else stop
        if entries[i] < 0 or int(entries[i]) + ENTRY_HEADER > following:
            raise ValueError(f"entry {i} at {entries[i]} is not a walk's entry")
    return data, n


def walk_entries_python(buf: Any, entries: Any, check_crc: bool) -> tuple[int, int, int]:
    """(entries found, where the walk stopped, where the first entry whose CRC does not match
    is, or -1): the plain magic-1 entries at the start of `buf`, positions into `entries`."""
    data = _view(buf)
    length = len(data)
    if length == 0:
        return 0, 0, -1
    if len(entries) < length // ENTRY_HEADER + 1:
        raise ValueError(
            f"room for {len(entries)} entries, a {length}-byte buffer may hold "
            f"{length // ENTRY_HEADER + 1}"
        )
    unpack = _ENTRY.unpack_from
    n = pos = 0
    while pos + ENTRY_HEADER <= length:
        size, magic, attributes, crc = unpack(data, pos)
        end = pos + 4 + size
        # size < 6 also stops a negative (damaged) size: the general path names it
        if size < 6 or magic != 1 or attributes or end > length:
            break
        if check_crc and zlib.crc32(data[pos + ENTRY_HEADER : end]) != crc:
            return n, pos, pos
        entries[n] = pos
        n += 1
        pos = end
    return n, pos, -1


def gather_payloads_python(buf: Any, entries: Any, stop: int, out: Any, offsets: Any) -> None:
    """The payloads, one after another in `out`; offsets[i] where payload i starts (and
    offsets[n] where the last ends)."""
    data, n = _checked(buf, entries, stop)
    if len(offsets) != n + 1:
        raise ValueError(f"{len(offsets)} offsets for {n} entries")
    if n and len(out) < stop - int(entries[0]) - ENTRY_HEADER * n:
        raise ValueError(f"{len(out)} bytes of room for {stop - int(entries[0]) - 10 * n}")
    at = 0
    for i in range(n):
        start = int(entries[i]) + ENTRY_HEADER
        end = int(entries[i + 1]) if i + 1 < n else stop
        offsets[i] = at
        out[at : at + end - start] = data[start:end]
        at += end - start
    offsets[n] = at


def digest_entries_python(buf: Any, entries: Any, stop: int, base: int) -> bytes:
    """rows_sha256's bytes for the entries: offset (int64) | index (int32, 0) | length
    (int32) | payload per entry, big-endian; `base` the buffer's offset in its partition."""
    data, n = _checked(buf, entries, stop)
    pack = _DIGEST_HEADER.pack
    parts: list[bytes] = []
    for i in range(n):
        start = int(entries[i]) + ENTRY_HEADER
        end = int(entries[i + 1]) if i + 1 < n else stop
        parts.append(pack(base + int(entries[i]), 0, end - start))
        parts.append(data[start:end].tobytes())
    return b"".join(parts)


_compiled = native.IN_USE
walk_entries: Callable[[Any, Any, bool], tuple[int, int, int]] = (
    walk_entries_python if _compiled is None else _compiled.walk_entries
)
gather_payloads: Callable[[Any, Any, int, Any, Any], None] = (
    gather_payloads_python if _compiled is None else _compiled.gather_payloads
)
digest_entries: Callable[[Any, Any, int, int], bytes] = (
    digest_entries_python if _compiled is None else _compiled.digest_entries
)
