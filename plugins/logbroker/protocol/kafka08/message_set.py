"""Kafka 0.8 message sets: logical offsets, and compressed wrappers with their inner offsets
(`message/ByteBufferMessageSet.scala` of 0.8.2).

Grammar (a Produce request's set, a segment of a 0.8-format log and a Fetch answer all carry
exactly this; not count-prefixed):

    MessageSet   := Entry* [PartialEntry]
    Entry        := int64 offset | int32 N | Message (N bytes; message.py)
    PartialEntry := the first bytes of an Entry cut off by the end of the buffer (a Fetch
                    answer may end in one: the reader drops it)

    offset  size  field
    0       8     offset: the message's logical offset, the n-th message of the partition
    8       4     N, the message's size (at least 14)
    12      N     the message

A compressed wrapper is one Entry whose message has codec 1 (gzip) or 2 (snappy) and whose
value is the compressed bytes of an inner MessageSet of plain messages (one level deep: an
inner message that is itself compressed is invalid). Offsets, as 0.8 assigns them:

    a producer sends any offsets (Java's 0.8 producer 0..n-1, librdkafka 0 on top level and
    0..n-1 inside a wrapper); the leader rewrites them on append (`assign_offsets`): each
    top-level plain entry gets the next offset of the partition; a wrapper's inner messages
    get the next consecutive offsets, so the inner set is re-encoded (decompressed, offsets
    rewritten, compressed again with the wrapper's codec, snappy in snappy-java's framing)
    and the wrapper takes the offset of its last inner message.

So in a stored set the offsets increase by one message at a time, through wrappers, and a
fetch from an offset inside a wrapper is answered with the whole wrapper: the client skips
the inner messages below the offset it asked for. 0.8.2 itself merged every message of a
produced set that held any compressed message into one new wrapper; here each wrapper stays
a wrapper of its own messages (the producers of the clients this serves send either one
wrapper or plain messages per partition, so the stored bytes are the same for them).

snappy: snappy-java's stream framing (what the Java client writes; `compression.py`) or one
raw snappy block, both read (librdkafka writes a raw block). gzip: one or more members.
lz4 (codec 3, which 0.8.2 added with a framing later Kafkas called broken) is refused.

No Python object per message on the checking path: `validate` walks the entries with
struct reads and zlib.crc32 over views of the buffer.

The walks every message crosses have compiled twins in `_native08.pyx` (Cython): `validate`,
`assign_offsets`, `entry_headers`, `whole_entries` and `index_points` (the offset index's
walk of a segment's entry headers). native.py decides which run, as for 0.7's walks
(LOGBROKER_PURE_PYTHON=1 keeps these); the functions here are the reference, each reachable
as `<name>_python` whichever runs.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from .. import compression, native
from ..errors import (
    CorruptMessageError,
    InflatedSizeTooLargeError,
    InvalidMessageError,
    UnknownCodecError,
)
from ..message_set import MAX_INFLATED, InflateBudget
from ..wire import Buffer, byte_view
from .message import CODEC_MASK, KNOWN_CODECS, LZ4, MAGIC, MESSAGE_HEADER, decode_message

ENTRY_OVERHEAD = 12  # offset int64, size int32: 0.8's LogOverhead
MIN_ENTRY = ENTRY_OVERHEAD + MESSAGE_HEADER

_CRC_MAGIC_ATTRIBUTES_KEY = struct.Struct(">IbBi")
_LENGTH = struct.Struct(">i")
_OFFSET = struct.Struct(">q")
_OFFSET_SIZE = struct.Struct(">qi")
_ENTRY_PREFIX = struct.Struct(">qiI")  # offset, size, crc: what a builder packs in front
_BODY_HEAD = struct.Struct(">bBi")  # magic, attributes, key length


class Record(NamedTuple):
    """A message met while iterating a set."""

    offset: int
    "Its logical offset (inside a wrapper, the inner message's own)."
    key: bytes | None
    value: bytes | None
    codec: int = 0
    "The codec of the wrapper it came out of (0: it was a plain top-level entry)."
    wrapper_offset: int | None = None
    "The offset of that wrapper (its last inner message's), None for a plain entry."


class Validation(NamedTuple):
    """What `validate` found.

    valid_bytes     length of the prefix made of whole, valid entries
    entries         top-level entries in it (a wrapper counts once)
    messages        messages in it, counted through wrappers (with `inflate=False`,
                    a wrapper's messages are not counted: see `compressed`)
    largest_entry   the largest top-level entry, offset and size included (what 0.8 holds
                    against max.message.bytes: `MessageSet.entrySize`)
    error           why the walk stopped at a damaged entry; None when it reached the end
                    or stopped at a partial trailing entry
    length          bytes looked at
    compressed      compressed wrappers in the prefix
    codec           the codec of the last wrapper (0 if none)
    first_offset    the first top-level entry's offset as stored (-1 if none)
    last_offset     the last message's offset as stored (-1 if none)
    inflated        each wrapper's inner set as inflated, in order (empty with
                    `inflate=False`): `assign_offsets` takes them instead of inflating again
    """

    valid_bytes: int
    entries: int
    messages: int
    largest_entry: int
    error: InvalidMessageError | None
    length: int
    compressed: int = 0
    codec: int = 0
    first_offset: int = -1
    last_offset: int = -1
    inflated: tuple[bytes, ...] = ()

    @property
    def partial_tail(self) -> bool:
        """Stopped at an entry cut off by the end of the buffer (not damage)."""
        return self.error is None and self.valid_bytes < self.length


def entry(
    offset: int, value: Buffer | None, key: Buffer | None = None, attributes: int = 0
) -> bytes:
    """One set entry: offset | size | message (message.py's layout)."""
    key_bytes = b"" if key is None else bytes(key)
    value_bytes = b"" if value is None else bytes(value)
    body = b"".join(
        (
            _BODY_HEAD.pack(MAGIC, attributes, -1 if key is None else len(key_bytes)),
            key_bytes,
            _LENGTH.pack(-1 if value is None else len(value_bytes)),
            value_bytes,
        )
    )
    return _ENTRY_PREFIX.pack(offset, 4 + len(body), zlib.crc32(body)) + body


def build_message_set(
    messages: Iterable[tuple[Buffer | None, Buffer | None]],
    codec: int = compression.NONE,
    base_offset: int = 0,
) -> bytes:
    """A set of (key, value) messages with offsets base_offset, base_offset + 1, ...

    With a codec, they are the inner set of one wrapper whose offset is the last inner
    message's (as the leader stores it; a producer may start at 0, as Java's did). No
    messages: an empty set, never an empty wrapper.
    """
    parts = [entry(base_offset + i, value, key) for i, (key, value) in enumerate(messages)]
    inner = b"".join(parts)
    if codec == compression.NONE or not parts:
        return inner
    return _wrap(codec, inner, base_offset + len(parts) - 1)


def _wrap(codec: int, inner: bytes, offset: int) -> bytes:
    if codec not in KNOWN_CODECS or codec == compression.NONE:
        raise UnknownCodecError(f"cannot wrap a set with codec {codec} (known: 1 gzip, 2 snappy)")
    return entry(offset, compression.compress(codec, inner), None, codec)


def validate_python(
    buffer: Buffer,
    *,
    budget: InflateBudget | None = None,
    inflate: bool = True,
    stored: bool = False,
) -> Validation:
    """Check every entry's size, CRC, magic, codec and lengths, and every wrapper's inner set
    (inflated within `budget`, default InflateBudget.stored()); return the valid prefix.

    Stops quietly at a partial trailing entry and with `error` set at the first damaged one.
    `stored=True` also checks the offsets as the leader assigned them (see the module's
    doc): each top-level entry's offset is above the previous message's, and a wrapper's
    inner offsets run consecutively up to the wrapper's own. A producer's offsets are not
    checked: the leader rewrites them. `inflate=False` checks a wrapper only as far as its
    own CRC and codec (its messages are then not counted, nor its inner set kept).
    """
    view = byte_view(buffer)  # any buffer's bytes (a strided view's copied)
    length = len(view)
    offset_size = _OFFSET_SIZE.unpack_from
    crc_magic_attributes_key = _CRC_MAGIC_ATTRIBUTES_KEY.unpack_from
    length_at = _LENGTH.unpack_from
    crc32 = zlib.crc32
    pos = entries = messages = largest = compressed = last_codec = 0
    first_offset = last_offset = -1
    error: InvalidMessageError | None = None
    inflated: list[bytes] = []
    while length - pos >= ENTRY_OVERHEAD:
        offset, size = offset_size(view, pos)
        end = pos + ENTRY_OVERHEAD + size
        if size < MESSAGE_HEADER:
            error = CorruptMessageError(
                f"entry at byte {pos} (offset {offset}) declares {size} bytes, under the 0.8 "
                f"minimum message size {MESSAGE_HEADER}"
            )
            break
        if end > length:
            break  # a partial trailing entry
        crc, magic, attributes, key_length = crc_magic_attributes_key(view, pos + ENTRY_OVERHEAD)
        codec = attributes & CODEC_MASK
        # The hot path, once per message: an intact plain message whose key and value
        # lengths fill it exactly. Anything else goes to decode_message, which names it.
        value_at = pos + 22 + (key_length if key_length > 0 else 0)
        if (
            magic != MAGIC
            or attributes
            or key_length < -1
            or value_at + 4 > end
            or crc32(view[pos + 16 : end]) != crc
        ):
            where = f"the entry at byte {pos} (offset {offset})"
            try:
                decode_message(view[pos + ENTRY_OVERHEAD : end], where)
            except InvalidMessageError as exc:
                error = exc
                break
        else:
            value_length = length_at(view, value_at)[0]
            if value_at + 4 + (value_length if value_length > 0 else 0) != end or value_length < -1:
                try:
                    decode_message(
                        view[pos + ENTRY_OVERHEAD : end],
                        f"the entry at byte {pos} (offset {offset})",
                    )
                except InvalidMessageError as exc:
                    error = exc
                    break
        if stored or codec:
            where = f"the entry at byte {pos} (offset {offset})"
        if stored and last_offset >= 0 and offset <= last_offset:
            error = CorruptMessageError(
                f"{where} does not follow offset {last_offset}: stored offsets increase"
            )
            break
        if codec:
            first_inner = None
            inner = b""
            if inflate:
                if budget is None:
                    budget = InflateBudget.stored()
                try:
                    inner = _inflate(view[pos + ENTRY_OVERHEAD : end], codec, where, budget)
                    inner_count, first_inner = _check_inner(
                        inner, where, offset if stored else None, validate_python
                    )
                except InvalidMessageError as exc:
                    error = exc
                    break
                messages += inner_count
            if (
                stored
                and first_inner is not None
                and last_offset >= 0
                and first_inner <= last_offset
            ):
                error = CorruptMessageError(
                    f"{where}: its first inner offset {first_inner} does not follow {last_offset}"
                )
                break
            if inflate:
                inflated.append(inner)
            compressed += 1
            last_codec = codec
        else:
            messages += 1
        if first_offset < 0:
            first_offset = offset
        last_offset = offset
        if end - pos > largest:
            largest = end - pos
        entries += 1
        pos = end
    return Validation(
        pos,
        entries,
        messages,
        largest,
        error,
        length,
        compressed,
        last_codec,
        first_offset,
        last_offset,
        tuple(inflated),
    )


def _inflate(message: memoryview, codec: int, where: str, budget: InflateBudget) -> bytes:
    """The inner set of the wrapper `message` (checked by decode_message already)."""
    _, _key, value = decode_message(message, where)
    if value is None:
        raise CorruptMessageError(f"{where} is a compressed wrapper with a null value")
    if budget.max_depth < 1:
        raise CorruptMessageError(f"{where} is compressed, which this set may not be")
    limit = min(budget.max_set_bytes, budget.remaining)
    try:
        inner = compression.decompress(codec, value, limit)
    except InflatedSizeTooLargeError as exc:
        raise InflatedSizeTooLargeError(
            f"{where}: compressed set inflates past {limit} bytes: {exc}"
        ) from None
    except InvalidMessageError as exc:
        raise CorruptMessageError(f"{where}: compressed set does not decode: {exc}") from None
    budget.remaining -= len(inner)
    return inner


def _check_inner(
    inner: bytes, where: str, wrapper_offset: int | None, walk: Callable[..., Validation]
) -> tuple[int, int | None]:
    """(messages, first inner offset) of a wrapper's inflated set, each inner message
    checked by `walk` (a `validate`): whole, plain (one level deep), magic 0. With
    `wrapper_offset`, the inner offsets must run consecutively up to it (a stored wrapper)."""
    check = walk(inner, budget=InflateBudget(0, 0, 0))
    if check.error is not None:
        raise type(check.error)(f"{where}, inside its compressed set: {check.error}")
    if check.valid_bytes != len(inner):
        raise CorruptMessageError(
            f"{where}: its compressed set ends in a partial entry ({len(inner) - check.valid_bytes} bytes)"
        )
    if check.entries == 0:
        raise CorruptMessageError(f"{where}: its compressed set is empty")
    if wrapper_offset is not None:
        expected = wrapper_offset - check.entries + 1
        for i, (offset, _) in enumerate(_entry_offsets(inner)):
            if offset != expected + i:
                raise CorruptMessageError(
                    f"{where}: inner message {i} has offset {offset}, not {expected + i} "
                    f"(inner offsets run consecutively up to the wrapper's)"
                )
    return check.messages, check.first_offset


def _entry_offsets(buffer: Buffer) -> Iterator[tuple[int, int]]:
    """(offset, start) of each whole entry, sizes only (the buffer was validated)."""
    view = byte_view(buffer)
    pos, length = 0, len(view)
    unpack = _OFFSET_SIZE.unpack_from
    while length - pos >= ENTRY_OVERHEAD:
        offset, size = unpack(view, pos)
        if size < MESSAGE_HEADER or pos + ENTRY_OVERHEAD + size > length:
            return
        yield offset, pos
        pos += ENTRY_OVERHEAD + size


def entry_headers_python(buffer: Buffer, position: int = 0) -> Iterator[tuple[int, int, int]]:
    """(offset as stored, position, size) of each whole top-level entry, from the headers
    alone (no CRC, no inflating). `position` is where `buffer` starts in its segment; the
    size counts the offset and size fields too."""
    view = byte_view(buffer)
    for offset, start in _entry_offsets(view):
        size = ENTRY_OVERHEAD + int(_LENGTH.unpack_from(view, start + 8)[0])
        yield offset, position + start, size


def whole_entries_python(buffer: Buffer) -> tuple[int, int]:
    """(where the whole top-level entries at the start of `buffer` end, how many there are),
    from the headers alone: the part of a leader's answer a follower copies."""
    view = byte_view(buffer)
    end = count = 0
    for _offset, start in _entry_offsets(view):
        end = start + ENTRY_OVERHEAD + int(_LENGTH.unpack_from(view, start + 8)[0])
        count += 1
    return end, count


IndexPoint = tuple[int, int, int]  # (offset as stored, position, entry size): offset_index.py


def index_points_python(
    buffer: Buffer, position: int, last_indexed: int, interval: int, limit: int | None = None
) -> tuple[list[IndexPoint], int, int]:
    """Walk the entry headers of `buffer` (at byte `position` of its segment): the entries
    the offset index takes (OffsetIndex's rule: more than `interval` bytes since
    `last_indexed`), the last entry's offset as stored (-1 if none), and where the walk
    stopped in `buffer`.

    An entry counts when its header is in `buffer` and it ends within `limit` bytes of its
    start (default: within `buffer`); the walk may stop past `buffer`'s end, at the next
    header. Sizes only: no CRC, no inflating (the bytes were validated, or are being read).
    """
    view = byte_view(buffer)
    n = len(view)
    limit = n if limit is None else limit
    unpack = _OFFSET_SIZE.unpack_from
    points: list[IndexPoint] = []
    pos, last = 0, -1
    while pos + ENTRY_OVERHEAD <= n:
        offset, size = unpack(view, pos)
        end = pos + ENTRY_OVERHEAD + size
        if size < MESSAGE_HEADER or end > limit:
            break
        at = position + pos
        if at - last_indexed > interval:
            points.append((offset, at, end - pos))
            last_indexed = at
        last = offset
        pos = end
    return points, last, pos


def iter_messages(buffer: Buffer) -> Iterator[Record]:
    """Deep iteration through wrappers: every message, with its offset as stored.

    Checks each entry as `validate` does (a wrapper's whole inner set before any of it is
    yielded) and raises the first damage it meets (InvalidMessageError and kinds), naming
    it; stops quietly at a partial trailing entry.
    """
    data = bytes(buffer)
    view = memoryview(data)
    pos, length = 0, len(data)
    while length - pos >= ENTRY_OVERHEAD:
        offset, size = _OFFSET_SIZE.unpack_from(data, pos)
        end = pos + ENTRY_OVERHEAD + size
        where = f"the entry at byte {pos} (offset {offset})"
        if size < MESSAGE_HEADER:
            raise CorruptMessageError(
                f"{where} declares {size} bytes, under the 0.8 minimum message size {MESSAGE_HEADER}"
            )
        if end > length:
            return
        attributes, key, value = decode_message(view[pos + ENTRY_OVERHEAD : end], where)
        codec = attributes & CODEC_MASK
        if not codec:
            yield Record(offset, _b(key), _b(value))
        else:
            inner = _inflate(
                view[pos + ENTRY_OVERHEAD : end],
                codec,
                where,
                InflateBudget(MAX_INFLATED, MAX_INFLATED, 1),
            )
            _check_inner(inner, where, None, validate)
            for record in iter_messages(inner):
                yield record._replace(codec=codec, wrapper_offset=offset)
        pos = end


def _b(view: memoryview | None) -> bytes | None:
    return None if view is None else view.tobytes()


class Assigned(NamedTuple):
    """A producer's set with the partition's offsets in it (`assign_offsets`)."""

    data: bytes
    "The set to append: the producer's entries with their offsets rewritten."
    first_offset: int
    "The offset of its first message (what a Produce v0 answer reports)."
    next_offset: int
    "The offset after its last message: the log's new end."
    messages: int
    "Messages in it, through wrappers."
    entries: int
    "Top-level entries."
    reencoded: int
    "Wrappers that were compressed again (their inner offsets changed)."


def assign_offsets_python(
    buffer: Buffer,
    next_offset: int,
    *,
    budget: InflateBudget | None = None,
    validation: Validation | None = None,
) -> Assigned:
    """The leader's append: `buffer`'s whole entries with offsets from `next_offset` on.

    Each plain top-level entry gets the next offset in place (its CRC covers the message
    only, so it stays valid). A wrapper whose inner offsets are not already the next ones
    is re-encoded: inflated (within `budget`, default InflateBudget.stored()), each inner
    entry's offset rewritten, compressed again with its codec, given a new CRC; it takes
    the offset of its last inner message. Every entry is checked as `validate` checks it,
    and the first damage raises its error (nothing is returned for a damaged set); a
    partial trailing entry is left out. `validation`: `validate`'s answer for these exact
    bytes, when the caller has it (the log's append): they are not walked again for it,
    and the wrappers' inner sets it inflated (`Validation.inflated`) are not inflated again.
    """
    check = validate_python(buffer, inflate=False) if validation is None else validation
    if check.error is not None:
        raise check.error
    if budget is None:
        budget = InflateBudget.stored()
    view = byte_view(buffer)  # any buffer's bytes (a strided view's copied)
    out = bytearray(view[: check.valid_bytes])
    pack_offset = _OFFSET.pack_into
    parts: list[bytes | bytearray] = []
    start = reencoded = messages = wrappers = 0
    first = next_offset
    for offset, pos in list(_entry_offsets(out)):
        (size,) = _LENGTH.unpack_from(out, pos + 8)
        end = pos + ENTRY_OVERHEAD + size
        codec = out[pos + 17] & CODEC_MASK
        if not codec:
            pack_offset(out, pos, next_offset)
            next_offset += 1
            messages += 1
            continue
        if wrappers < len(check.inflated):  # inflated and checked by the validation
            inner = bytearray(check.inflated[wrappers])
        else:
            where = f"the entry at byte {pos} (offset {offset})"
            inner = bytearray(
                _inflate(memoryview(out)[pos + ENTRY_OVERHEAD : end], codec, where, budget)
            )
            _check_inner(bytes(inner), where, None, validate_python)
        wrappers += 1
        changed = False
        for inner_offset, inner_start in list(_entry_offsets(inner)):
            messages += 1  # a checked inner set: plain entries only
            if inner_offset != next_offset:
                pack_offset(inner, inner_start, next_offset)
                changed = True
            next_offset += 1
        last = next_offset - 1
        if changed:
            parts.append(out[start:pos])
            parts.append(_wrap(codec, bytes(inner), last))
            start = end
            reencoded += 1
        else:
            pack_offset(out, pos, last)
    if parts:
        parts.append(out[start:])
        data = b"".join(parts)
    else:
        data = bytes(out)
    return Assigned(data, first, next_offset, messages, check.entries, reencoded)


# What the library calls: the compiled twins (_native08.pyx) when native.py chose them (same
# signatures, same answers and errors), else the references above.
validate = validate_python
assign_offsets = assign_offsets_python
entry_headers = entry_headers_python
whole_entries = whole_entries_python
index_points = index_points_python
if native.IN_USE08 is not None:
    validate = native.IN_USE08.validate
    assign_offsets = native.IN_USE08.assign_offsets
    entry_headers = native.IN_USE08.entry_headers
    whole_entries = native.IN_USE08.whole_entries
    index_points = native.IN_USE08.index_points


def first_entry_size(buffer: Buffer) -> int | None:
    """Bytes the first entry needs (offset and size included), None when under 12 bytes:
    how a reader whose fetch held no whole entry knows how far to grow its fetch size."""
    if len(buffer) < ENTRY_OVERHEAD:
        return None
    return ENTRY_OVERHEAD + int(_OFFSET_SIZE.unpack_from(buffer, 0)[1])


__all__ = [
    "ENTRY_OVERHEAD",
    "LZ4",
    "MIN_ENTRY",
    "Assigned",
    "IndexPoint",
    "Record",
    "Validation",
    "assign_offsets",
    "assign_offsets_python",
    "build_message_set",
    "entry",
    "entry_headers",
    "entry_headers_python",
    "first_entry_size",
    "index_points",
    "index_points_python",
    "iter_messages",
    "validate",
    "validate_python",
    "whole_entries",
    "whole_entries_python",
]
