"""What logbroker's clients send to and hand out of a 0.8-format topic: messages with a key
and a logical offset, the producers' build of a 0.8 message set (`build_set`), and the
consumers' walk of a fetched one (`keyed_columns`).

    Entry := int64 offset | int32 N | crc uint32 | magic 0 | attributes int8
             | int32 K | K bytes key (-1: null) | int32 V | V bytes value (-1: null)
    (protocol/kafka08/message.py and message_set.py have the layout and the codec)

A Fetch v0 answer holds whole entries from the one that holds the offset asked for, and may
end in a partial one (dropped, fetched again next time). From an offset inside a compressed
wrapper the whole wrapper comes back, as 0.8 answered: the walk skips the messages below the
offset asked for (`from_offset`). Each message resumes at its own offset plus one, inside a
wrapper too: logical offsets name every message, so a consumer never sees one twice for
having stopped in the middle of a wrapper (0.7's byte offsets resumed at the wrapper).

Every plain entry's CRC, magic, attributes and lengths are checked on the way (the hot
loop, one struct read per entry); a wrapper is inflated and checked whole by
kafka08.message_set.iter_messages before any of it is handed out. Damage raises
CorruptMessageError (or UnknownMagicError, UnknownCodecError) naming the entry's offset. A
null value is handed out as b"" (payloads are bytes everywhere in the clients); a null key
stays None.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from ..protocol import compression, native
from ..protocol.errors import CorruptMessageError
from ..protocol.kafka08.message import MESSAGE_HEADER, decode_message
from ..protocol.kafka08.message_set import ENTRY_OVERHEAD, entry, iter_messages
from ..protocol.wire import Buffer

# offset, size, crc, magic, attributes, key length and, when the key is null, the value's
# length: one read per plain entry (the smallest entry, null key and value, is 26 bytes)
_HEAD = struct.Struct(">qiIbBii")
_LENGTH = struct.Struct(">i")
_OFFSET_SIZE = struct.Struct(">qi")
_ENTRY_HEAD = struct.Struct(">qiI")  # offset, size, crc: what a builder packs in front
_NULL_KEY = struct.Struct(">bBii")  # magic 0, attributes 0, key length -1, value length
_KEY = struct.Struct(">bBi")  # magic 0, attributes 0, key length
MIN_ENTRY = 26


class KeyedMessage(NamedTuple):
    """One message of a 0.8-format partition."""

    offset: int
    "Its logical offset: the n-th message of the partition is offset n."
    next_offset: int
    "Where its partition resumes after it: offset + 1."
    key: bytes | None
    payload: bytes


class KeyedBatch(NamedTuple):
    """The messages of one fetch, as columns (PartitionReader08.iter_batches)."""

    offsets: list[int]
    keys: list[bytes | None]
    payloads: list[bytes]
    next_offset: int
    "Where the next batch starts (the last message's offset + 1)."


class KeyedColumns(NamedTuple):
    """What `keyed_columns` found in a fetched set."""

    offsets: list[int]
    keys: list[bytes | None]
    payloads: list[bytes]
    end: int
    "Where the whole entries end in the buffer (a partial trailing one is left out)."
    last_offset: int
    "The offset of the last whole entry's last message, -1 when there is none."


def keyed_columns_compiled(buffer: Buffer, from_offset: int = 0) -> KeyedColumns:
    """keyed_columns_python's answer, its plain entries walked in C (_native08.keyed_lists:
    every CRC checked, one bytes object per key and payload). A set with anything else in
    it (a compressed wrapper, another magic, damage) is read whole by the reference, which
    inflates wrappers and names the damage as it always has."""
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    walk = native.COMPILED08.keyed_lists  # type: ignore[union-attr]
    offsets, keys, payloads, pos, last, status = walk(data, from_offset)
    if status:
        return keyed_columns_python(data, from_offset)
    return KeyedColumns(offsets, keys, payloads, pos, last)


def keyed_columns_python(buffer: Buffer, from_offset: int = 0) -> KeyedColumns:
    """The messages of a fetched 0.8 set at or after `from_offset`, as columns (the
    reference; keyed_columns_compiled runs when _native08 is in use, protocol/native.py).

    The consumers' hot loop: one struct read and two slices per plain entry; the CRCs of
    the plain entries are computed together at the end (zlib over each message's head, then
    its payload), and the first mismatch raises naming its entry before anything is returned.
    """
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    length = len(data)
    head = _HEAD.unpack_from
    length_at = _LENGTH.unpack_from
    offsets: list[int] = []
    keys: list[bytes | None] = []
    payloads: list[bytes] = []
    # the plain entries handed out, checked together: stored CRC, what it covers before the
    # payload, where the entry starts
    crcs: list[int] = []
    heads: list[bytes] = []
    starts: list[int] = []
    add_offset, add_key, add_payload = offsets.append, keys.append, payloads.append
    add_crc, add_head, add_start = crcs.append, heads.append, starts.append
    pos = 0
    last = -1
    last_head = length - MIN_ENTRY
    while pos <= last_head:
        offset, size, crc, magic, attributes, key_length, value_length = head(data, pos)
        end = pos + ENTRY_OVERHEAD + size
        if size < MESSAGE_HEADER or end > length:
            break  # damage (named below) or a partial trailing entry
        if magic or attributes:  # a compressed wrapper, or damage: checked whole, at once
            _check(data, payloads, offsets, crcs, heads, starts)
            last = _wrapper(memoryview(data)[pos:end], offset, from_offset, offsets, keys, payloads)
            pos = end
            continue
        if key_length == -1:
            value_at = pos + 26
            key = None
        else:
            value_at = pos + 22 + key_length
            if key_length < -1 or value_at + 4 > end:
                _damaged(data, pos, end, offset)
            key = data[pos + 22 : value_at]
            value_length = length_at(data, value_at)[0]
            value_at += 4
        if value_at + (value_length if value_length > 0 else 0) != end or value_length < -1:
            _damaged(data, pos, end, offset)
        if offset >= from_offset:
            add_start(pos)
            add_offset(offset)
            add_key(key)
            add_payload(data[value_at:end])
            add_crc(crc)
            add_head(data[pos + 16 : value_at])
        last = offset
        pos = end
    if length - pos >= ENTRY_OVERHEAD:
        size = _OFFSET_SIZE.unpack_from(data, pos)[1]
        if size < MESSAGE_HEADER:
            raise CorruptMessageError(
                f"the entry at byte {pos} (offset {_OFFSET_SIZE.unpack_from(data, pos)[0]}) "
                f"declares {size} bytes, under the 0.8 minimum message size {MESSAGE_HEADER}"
            )
    _check(data, payloads, offsets, crcs, heads, starts)
    return KeyedColumns(offsets, keys, payloads, pos, last)


def _check(
    data: bytes,
    payloads: list[bytes],
    offsets: list[int],
    crcs: list[int],
    heads: list[bytes],
    starts: list[int],
) -> None:
    """Check the CRCs of the plain entries collected since the last call (the last
    len(crcs) payloads; `heads` what each CRC covers before the payload, `starts` where each
    entry starts) and forget them; the first mismatch raises, naming its entry."""
    if not crcs:
        return
    first = len(payloads) - len(crcs)
    crc32 = zlib.crc32
    computed = list(map(crc32, payloads[first:] if first else payloads, map(crc32, heads)))
    if computed != crcs:
        bad = next(i for i, (a, b) in enumerate(zip(computed, crcs, strict=True)) if a != b)
        pos = starts[bad]
        size = _OFFSET_SIZE.unpack_from(data, pos)[1]
        _damaged(data, pos, pos + ENTRY_OVERHEAD + size, offsets[first + bad])
    crcs.clear()
    heads.clear()
    starts.clear()


def _wrapper(
    entry: memoryview,
    offset: int,
    from_offset: int,
    offsets: list[int],
    keys: list[bytes | None],
    payloads: list[bytes],
) -> int:
    """A compressed wrapper's messages at or after `from_offset` added to the columns, the
    whole inner set checked before any of them is (damage raises, naming the entry); the
    offset of its last message."""
    records = list(iter_messages(entry))
    for record in records:
        if record.offset >= from_offset:
            offsets.append(record.offset)
            keys.append(record.key)
            payloads.append(record.value if record.value is not None else b"")
    return records[-1].offset if records else offset


def _damaged(data: bytes, pos: int, end: int, offset: int) -> None:
    """Raise what is wrong with the plain entry at `pos` (decode_message names it)."""
    where = f"the entry at byte {pos} (offset {offset})"
    decode_message(memoryview(data)[pos + ENTRY_OVERHEAD : end], where)
    raise CorruptMessageError(f"{where} is damaged")


def build_set_compiled(
    keys: Sequence[bytes | None], payloads: Sequence[bytes], codec: int = compression.NONE
) -> bytes:
    """build_set_python's bytes, the plain set written in C (_native08.build_plain_set) and
    compressed here; keys or payloads of other types (str, bytearray, ...) go to the
    reference, which packs or refuses them as it always has."""
    inner = native.COMPILED08.build_plain_set(keys, payloads)  # type: ignore[union-attr]
    if inner is None:
        return build_set_python(keys, payloads, codec)
    if codec == compression.NONE or not payloads:
        return inner  # type: ignore[no-any-return]
    return entry(len(payloads) - 1, compression.compress(codec, inner), None, codec)


def build_set_python(
    keys: Sequence[bytes | None], payloads: Sequence[bytes], codec: int = compression.NONE
) -> bytes:
    """A producer's 0.8 message set of (key, payload) messages, offsets 0 to n-1 (the leader
    gives them the partition's), in one compressed wrapper with a codec: the bytes of
    kafka08.message_set.build_message_set (the reference), built the producers' hot way. A
    message's CRC covers its head (magic, attributes, key length, key, value length) and its
    payload: the head of a null key depends on the payload's length only, so its CRC is
    computed once per length, and each payload's continues from it."""
    parts: list[bytes] = []
    append = parts.append
    pack_entry = _ENTRY_HEAD.pack
    crc32 = zlib.crc32
    null_heads: dict[int, tuple[bytes, int]] = {}  # payload length -> (head, its CRC)
    for offset, (key, value) in enumerate(zip(keys, payloads, strict=True)):
        n = len(value)
        if key is None:
            found = null_heads.get(n)
            if found is None:
                found_head = _NULL_KEY.pack(0, 0, -1, n)
                found = null_heads[n] = (found_head, crc32(found_head))
            head, head_crc = found
        else:
            head = b"".join((_KEY.pack(0, 0, len(key)), key, _LENGTH.pack(n)))
            head_crc = crc32(head)
        append(pack_entry(offset, 4 + len(head) + n, crc32(value, head_crc)))
        append(head)
        append(value)
    inner = b"".join(parts)
    if codec == compression.NONE or not parts:
        return inner
    return entry(len(payloads) - 1, compression.compress(codec, inner), None, codec)


def batch_of(columns: KeyedColumns, from_offset: int) -> KeyedBatch:
    """The KeyedBatch of `keyed_columns(..., from_offset)`'s answer."""
    next_offset = max(from_offset, columns.last_offset + 1)
    return KeyedBatch(columns.offsets, columns.keys, columns.payloads, next_offset)


# What the clients call: the compiled walk and build when native.py chose _native08 (the same columns,
# the same errors), else the reference.
keyed_columns = keyed_columns_python if native.IN_USE08 is None else keyed_columns_compiled
build_set = build_set_python if native.IN_USE08 is None else build_set_compiled
