"""The loops of keyed_scan.py: a 0.8-format fetch's plain entries walked into arrays.

    entry := int64 offset | int32 size | uint32 crc | int8 magic (0) | int8 attributes (0)
             | int32 K | K bytes key (-1: null) | int32 V | V bytes value (-1: null)
             big-endian (logbroker.protocol.kafka08 owns the layout; this reads its common
             case, messages08.keyed_columns every case)

Three loops, each per message: `keyed_entries` (each plain entry's offset, and where its key
and value are, each CRC checked), `gather_spans` (spans of a buffer copied one after another:
an Arrow binary column's buffers) and `digest_keyed` (rows_sha256's bytes for a logical range,
ranges.py). Their compiled twins are in logbroker.protocol._native08; they run unless
LOGBROKER_PURE_PYTHON=1 or the extension is not built (protocol/native.py decides, once per
process). The functions here are the reference and the fallback, each reachable as
`<name>_python` whichever runs; tests/spark/test_keyed_kernels.py requires both to give the
same answers for the same input, damaged input included.

A buffer is a uint8 array or any bytes-like object; positions are int64 arrays, key lengths
int32 (-1: a null key); `keyed_entries` needs room for len(buf) // 26 + 1 messages (an entry
is at least 26 bytes).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

from logbroker.protocol import native

MIN_ENTRY = 26  # offset, size, crc, magic, attributes, two lengths of -1
_ENTRY_OVERHEAD = 12  # offset, size
_MESSAGE_HEADER = 14  # the smallest message (a size under it is damage)
_HEAD = struct.Struct(">qiIbBi")  # offset, size, crc, magic, attributes, key length
_INT32 = struct.Struct(">i")
_DIGEST_HEAD = struct.Struct(">qii")  # offset, index (0), key length (-1: null)

END, OTHER, DAMAGED = 0, 1, 2  # keyed_entries' status: where and why the walk stopped


def _view(buf: Any) -> memoryview:
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def keyed_entries_python(
    buf: Any,
    from_offset: int,
    check_crc: bool,
    offsets: Any,
    value_starts: Any,
    value_ends: Any,
    key_starts: Any,
    key_lengths: Any,
) -> tuple[int, int, int, int]:
    """(messages found, where the walk stopped, the offset of the last entry walked or -1,
    status): the plain entries at the start of `buf`, those at or after `from_offset` into the
    arrays. Status END: the rest is a partial entry or nothing; OTHER: an entry that is not
    plain (a compressed wrapper, another magic) starts at the stop; DAMAGED: the entry there
    is damaged (a size, a length, its CRC). Entries below `from_offset` are walked, not
    CRC-checked (as messages08.keyed_columns)."""
    data = _view(buf)
    length = len(data)
    cap = len(offsets)
    if min(len(value_starts), len(value_ends), len(key_starts), len(key_lengths)) < cap:
        raise ValueError("the columns' arrays differ in length")
    if cap < length // MIN_ENTRY + 1:
        raise ValueError(
            f"room for {cap} messages, a {length}-byte buffer may hold {length // MIN_ENTRY + 1}"
        )
    head = _HEAD.unpack_from
    n = pos = 0
    last = -1
    status = END
    while pos + MIN_ENTRY <= length:
        offset, size, crc, magic, attributes, key_length = head(data, pos)
        end = pos + _ENTRY_OVERHEAD + size
        if size < _MESSAGE_HEADER or end > length:
            break
        if magic or attributes:
            status = OTHER
            break
        key_at = pos + 22
        if key_length == -1:
            value_at = pos + 26
            (value_length,) = _INT32.unpack_from(data, pos + 22)
        else:
            value_at = pos + 22 + key_length
            if key_length < -1 or value_at + 4 > end:
                status = DAMAGED
                break
            (value_length,) = _INT32.unpack_from(data, value_at)
            value_at += 4
        if value_length < -1 or value_at + max(value_length, 0) != end:
            status = DAMAGED
            break
        if offset >= from_offset:
            if check_crc and zlib.crc32(data[pos + 16 : end]) != crc:
                status = DAMAGED
                break
            offsets[n] = offset
            value_starts[n] = value_at
            value_ends[n] = end
            key_starts[n] = key_at
            key_lengths[n] = key_length
            n += 1
        last = offset
        pos = end
    if (
        status == END
        and length - pos >= _ENTRY_OVERHEAD
        and _INT32.unpack_from(data, pos + 8)[0] < _MESSAGE_HEADER
    ):
        status = DAMAGED
    return n, pos, last, status


def gather_spans_python(
    buf: Any, starts: Any, ends: Any, pad: int, out: Any, out_offsets: Any
) -> None:
    """Each span [starts[i], ends[i]) of `buf` copied into `out` after `pad` zero bytes;
    out_offsets[i] where span i starts there (and out_offsets[n] where the last ends)."""
    data = _view(buf)
    n = len(starts)
    if len(ends) != n or len(out_offsets) != n + 1 or pad < 0:
        raise ValueError(f"{n} starts, {len(ends)} ends, {len(out_offsets)} offsets, pad {pad}")
    total = 0
    for i in range(n):
        if starts[i] < 0 or starts[i] > ends[i] or ends[i] > len(data):
            raise ValueError(
                f"span {i} [{starts[i]}, {ends[i]}) is outside the {len(data)}-byte buffer"
            )
        total += pad + int(ends[i]) - int(starts[i])
    if len(out) < total or total >= 2**31:
        raise ValueError(f"{len(out)} bytes of room for {total}")
    target = _view(out)
    at = 0
    for i in range(n):
        target[at : at + pad] = bytes(pad)
        at += pad
        start, end = int(starts[i]), int(ends[i])
        out_offsets[i] = at
        target[at : at + end - start] = data[start:end]
        at += end - start
    out_offsets[n] = at


def digest_keyed_python(
    buf: Any,
    offsets: Any,
    value_starts: Any,
    value_ends: Any,
    key_starts: Any,
    key_lengths: Any,
) -> bytes:
    """rows_sha256's bytes for a logical range's messages (ranges.py): offset (int64) | index
    (int32, 0) | key length (int32, -1 null) | key | value length (int32) | value each."""
    data = _view(buf)
    n = len(offsets)
    if not len(value_starts) == len(value_ends) == len(key_starts) == len(key_lengths) == n:
        raise ValueError("the columns' arrays differ in length")
    parts: list[bytes] = []
    for i in range(n):
        key_length = int(key_lengths[i])
        key_at, start, end = int(key_starts[i]), int(value_starts[i]), int(value_ends[i])
        k = max(key_length, 0)
        if (
            key_length < -1
            or key_at < 0
            or key_at + k > len(data)
            or not 0 <= start <= end <= len(data)
        ):
            raise ValueError(f"message {i}'s key or value is outside the {len(data)}-byte buffer")
        parts.append(_DIGEST_HEAD.pack(int(offsets[i]), 0, key_length))
        parts.append(data[key_at : key_at + k].tobytes())
        parts.append(_INT32.pack(end - start))
        parts.append(data[start:end].tobytes())
    return b"".join(parts)


_compiled = native.IN_USE08
keyed_entries: Callable[..., tuple[int, int, int, int]] = (
    keyed_entries_python if _compiled is None else _compiled.keyed_entries
)
gather_spans: Callable[[Any, Any, Any, int, Any, Any], None] = (
    gather_spans_python if _compiled is None else _compiled.gather_spans
)
digest_keyed: Callable[[Any, Any, Any, Any, Any, Any], bytes] = (
    digest_keyed_python if _compiled is None else _compiled.digest_keyed
)
