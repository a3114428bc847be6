"""Message sets: a thin view over bytes (`message/MessageSet.scala`, `ByteBufferMessageSet`).

Grammar (produce requests, segment files and fetch responses all carry exactly this):

    MessageSet   := Entry*  [PartialEntry]
    Entry        := int32 N | Message(N bytes)        see message.py for Message
    PartialEntry := the first bytes of an Entry cut off by the end of the buffer

    A compressed set is a single Entry whose message has magic 1 and codec != 0; its payload
    is the compressed bytes of another MessageSet (normally magic 1, codec 0 messages).

Nothing here builds a Python object per message on the hot paths: `validate` walks the
entries with `struct.unpack_from` and `zlib.crc32` over memoryview slices, and
`build_message_set` joins packed headers and payloads into one buffer.

The per-message walks have compiled twins in `_native.pyx` (Cython): `validate` (the
broker's check of every produced set), `iter_messages` (the mirror, the group consumer,
SimpleConsumer.iter_messages), `stored_set_end` (the mirror's copy), `build_message_set`
(the producer), `message_columns` (the batch consumer's and the Spark source's
decoding), and the sizes-only `whole_entries` and `entry_at_or_after` (a follower's append,
a reader walking to the first message it owns). native.py decides which run; the functions
here are the reference, each reachable as `<name>_python` whichever runs.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from . import compression, native
from .errors import (
    CorruptMessageError,
    InflatedSizeTooLargeError,
    InvalidMessageError,
    UnknownCodecError,
    UnknownMagicError,
)
from .message import (
    CODEC_MASK,
    ENTRY_MAGIC0,
    ENTRY_MAGIC1,
    ENTRY_OVERHEAD,
    MAGIC0_HEADER,
    MAGIC1_HEADER,
    MIN_MESSAGE_SIZE,
    Message,
    unused_attribute_bits,
)

Buffer = bytes | bytearray | memoryview

# What stored data may hold (recovery and consumers read with these): an older broker
# accepted compressed sets inside compressed sets, 4 deep, each inflating to 256 MiB.
MAX_NESTING = 4
MAX_INFLATED = 256 * 1024 * 1024
# What a produce may send: 0.7 producers wrapped plain messages once and never nested.
PRODUCE_MAX_NESTING = 1

_ATTR_CRC = struct.Struct(">BI")
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")


class InflateBudget:
    """How far the compressed sets of one request (or one stored buffer) may inflate.

    max_set_bytes   one compressed set inflates to at most this
    remaining       what all the sets validated with this budget may still inflate to
    max_depth       compressed sets allowed inside one another (1: a wrapper holds plain
                    messages only, as every 0.7 producer wrote them)

    Mutable: validating sets one after another with the same budget spends it.
    """

    __slots__ = ("max_depth", "max_set_bytes", "remaining")

    def __init__(self, max_set_bytes: int, max_total_bytes: int, max_depth: int) -> None:
        self.max_set_bytes = max_set_bytes
        self.remaining = max_total_bytes
        self.max_depth = max_depth

    @classmethod
    def stored(cls) -> InflateBudget:
        """The lenient limits for data already stored (recovery, consumers)."""
        return cls(MAX_INFLATED, 1 << 62, MAX_NESTING)


class Validation(NamedTuple):
    """What `validate` found.

    valid_bytes     length of the prefix made of whole, valid entries
    entries         top-level entries in that prefix (a compressed wrapper counts once)
    messages        messages in that prefix, counted through compression
    largest_payload the largest top-level payload, to hold against `max.message.size`
    error           why validation stopped before the end because of damage; None when it
                    reached the end or stopped at a partial trailing entry
    length          bytes looked at
    compressed      compressed wrappers in the prefix; with `inflate=False` they were
                    checked (size, CRC, codec) but not inflated, and their messages are
                    not in `messages`
    """

    valid_bytes: int
    entries: int
    messages: int
    largest_payload: int
    error: InvalidMessageError | None
    length: int
    compressed: int = 0

    @property
    def partial_tail(self) -> bool:
        """Stopped at an entry cut off by the end of the buffer (not damage)."""
        return self.error is None and self.valid_bytes < self.length


def validate_python(
    buffer: Buffer,
    base_offset: int = 0,
    *,
    depth: int = 0,
    budget: InflateBudget | None = None,
    inflate: bool = True,
) -> Validation:
    """Check every size and CRC, through compression; return the valid prefix.

    Stops quietly at a partial trailing entry (its bytes are simply not in `valid_bytes`)
    and stops with `error` set at the first damaged entry: a size under the minimum, an
    unknown magic or codec, a CRC mismatch, or a compressed payload that does not decode
    into a wholly valid set, nests deeper or inflates further than `budget` allows
    (default: `InflateBudget.stored()`). `base_offset` only names places in errors.

    `inflate=False` checks compressed wrappers only as far as their own CRC and codec and
    counts them in `compressed`: the broker's event loop does that much, and hands the sets
    that have wrappers to a worker thread for the whole check.
    """
    view = memoryview(buffer)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    length = len(view)
    unpack_size = _INT32.unpack_from
    unpack_attr_crc = _ATTR_CRC.unpack_from
    unpack_crc = _CRC.unpack_from
    crc32 = zlib.crc32
    unpack_magic1 = ENTRY_MAGIC1.unpack_from
    last_header = length - 10  # a magic-1 entry's header (size, magic, attributes, crc) fits
    pos = entries = messages = largest = compressed = 0
    error: InvalidMessageError | None = None
    while pos + ENTRY_OVERHEAD <= length:
        # The broker's hot loop, once per message produced: whole, plain, intact magic-1
        # entries (nearly every entry) are checked with one header read each; anything else,
        # a damaged entry included, is left to the general path below, which names it.
        while pos <= last_header:
            size, magic, attributes, crc = unpack_magic1(view, pos)
            end = pos + 4 + size
            if magic != 1 or attributes or size < 6 or end > length:
                break
            if crc32(view[pos + 10 : end]) != crc:
                break
            if size - 6 > largest:
                largest = size - 6
            entries += 1
            messages += 1
            pos = end
        if pos + ENTRY_OVERHEAD > length:
            break
        (size,) = unpack_size(view, pos)
        end = pos + ENTRY_OVERHEAD + size
        if size < MIN_MESSAGE_SIZE:
            error = CorruptMessageError(
                f"entry at offset {base_offset + pos} declares {size} bytes, "
                f"under the minimum message size {MIN_MESSAGE_SIZE}"
            )
            break
        if end > length:
            break  # partial trailing entry
        magic = view[pos + ENTRY_OVERHEAD]
        if magic == 1:
            payload_start = pos + ENTRY_OVERHEAD + MAGIC1_HEADER
            if end < payload_start:
                error = CorruptMessageError(
                    f"magic 1 entry at offset {base_offset + pos} is only {size} bytes"
                )
                break
            attributes, crc = unpack_attr_crc(view, pos + 5)
        elif magic == 0:
            attributes = 0
            (crc,) = unpack_crc(view, pos + 5)
            payload_start = pos + ENTRY_OVERHEAD + MAGIC0_HEADER
        else:
            error = UnknownMagicError(
                f"unknown magic byte {magic} in the entry at offset {base_offset + pos}"
            )
            break
        payload = view[payload_start:end]
        if crc32(payload) != crc:
            error = CorruptMessageError(
                f"CRC mismatch in the entry at offset {base_offset + pos}: stored {crc:#010x}, "
                f"computed {crc32(payload):#010x}"
            )
            break
        if attributes & ~CODEC_MASK:  # under no CRC: a flip there shows only as such a bit
            error = unused_attribute_bits(attributes, base_offset + pos)
            break
        codec = attributes & CODEC_MASK
        if codec:
            if not inflate and codec in compression.CODEC_NAMES:
                compressed += 1
            else:
                if budget is None:
                    budget = InflateBudget.stored()
                inner_count = _validate_compressed(
                    codec, payload, base_offset + pos, depth, budget, validate_python
                )
                if isinstance(inner_count, InvalidMessageError):
                    error = inner_count
                    break
                messages += inner_count
                compressed += 1
        else:
            messages += 1
        if end - payload_start > largest:
            largest = end - payload_start
        entries += 1
        pos = end
    return Validation(pos, entries, messages, largest, error, length, compressed)


# What the library calls: the compiled twin when native.py chose it (same signature, same
# results and errors), else the reference above.
validate = validate_python
if native.IN_USE is not None:
    validate = native.IN_USE.validate


def _validate_compressed(
    codec: int,
    payload: memoryview,
    offset: int,
    depth: int,
    budget: InflateBudget,
    walk: Callable[..., Validation],
) -> int | InvalidMessageError:
    """Messages inside a compressed wrapper, or the error that makes the wrapper invalid.

    `walk` validates the inflated set: the caller's own implementation (this function
    serves both validate_python and its compiled twin).
    """
    if codec not in compression.CODEC_NAMES:
        return UnknownCodecError(
            f"unknown compression codec {codec} in the entry at offset {offset}"
        )
    if depth >= budget.max_depth:
        return CorruptMessageError(
            f"compressed set at offset {offset} nests deeper than {budget.max_depth} "
            f"level{'s' if budget.max_depth > 1 else ''} of compression"
        )
    limit = min(budget.max_set_bytes, budget.remaining)
    try:
        inner = compression.decompress(codec, payload, limit)
    except InflatedSizeTooLargeError as exc:
        which = (
            f"the limit of one set ({budget.max_set_bytes} bytes)"
            if limit == budget.max_set_bytes
            else f"what is left of the request's limit ({limit} bytes)"
        )
        return InflatedSizeTooLargeError(
            f"compressed set at offset {offset} inflates past {which}: {exc}"
        )
    except InvalidMessageError as exc:
        return CorruptMessageError(f"compressed set at offset {offset}: {exc}")
    budget.remaining -= len(inner)
    check = walk(inner, depth=depth + 1, budget=budget)
    if check.error is not None:
        kind = type(check.error) if isinstance(check.error, InflatedSizeTooLargeError) else None
        return (kind or CorruptMessageError)(f"compressed set at offset {offset}: {check.error}")
    if check.valid_bytes != len(inner):
        return CorruptMessageError(
            f"compressed set at offset {offset} ends in a partial entry "
            f"({len(inner) - check.valid_bytes} bytes)"
        )
    if check.entries == 0:
        return CorruptMessageError(f"compressed set at offset {offset} is empty")
    return check.messages


def build_message_set_python(
    payloads: Iterable[bytes], codec: int = compression.NONE, magic: int = 1
) -> bytes:
    """One buffer holding a message per payload; compressed into one wrapper if `codec`."""
    crc32 = zlib.crc32
    if magic == 0 and codec == compression.NONE:
        pack0 = ENTRY_MAGIC0.pack
        parts = []
        for p in payloads:
            parts.append(pack0(MAGIC0_HEADER + len(p), 0, crc32(p)))
            parts.append(p)
        return b"".join(parts)
    if magic not in (0, 1):
        raise UnknownMagicError(f"unknown magic byte {magic} (known: 0, 1)")
    pack1 = ENTRY_MAGIC1.pack
    parts = []
    for p in payloads:
        parts.append(pack1(MAGIC1_HEADER + len(p), 1, 0, crc32(p)))
        parts.append(p)
    inner = b"".join(parts)
    if codec == compression.NONE:
        return inner
    return _wrap(codec, inner)


def _wrap(codec: int, inner: bytes) -> bytes:
    """`inner` (plain magic-1 entries) compressed into one wrapper entry; both builders'."""
    if codec not in compression.CODEC_NAMES:
        raise UnknownCodecError(f"unknown compression codec {codec}")
    if not inner:
        return inner  # no messages: an empty set, as 0.7, never an empty wrapper
    wrapped = compression.compress(codec, inner)
    return ENTRY_MAGIC1.pack(MAGIC1_HEADER + len(wrapped), 1, codec, zlib.crc32(wrapped)) + wrapped


def iter_entries(buffer: Buffer, base_offset: int = 0) -> Iterator[tuple[int, memoryview]]:
    """Shallow iteration: (offset, message bytes without the size prefix) of whole entries.

    Stops at a partial trailing entry; does not check CRCs (use `validate` for that).
    """
    view = memoryview(buffer)
    length = len(view)
    pos = 0
    while pos + ENTRY_OVERHEAD <= length:
        (size,) = _INT32.unpack_from(view, pos)
        if size < MIN_MESSAGE_SIZE:
            raise CorruptMessageError(
                f"entry at offset {base_offset + pos} declares {size} bytes, "
                f"under the minimum message size {MIN_MESSAGE_SIZE}"
            )
        end = pos + ENTRY_OVERHEAD + size
        if end > length:
            return
        yield base_offset + pos, view[pos + ENTRY_OVERHEAD : end]
        pos = end


def stored_set_end_python(buffer: Buffer, base_offset: int = 0) -> tuple[int, int]:
    """(bytes, entries) of the whole entries at the start of `buffer`, each one's magic and
    CRC checked: the part of a fetched set that a copier (the mirror) forwards as it is.

    A partial trailing entry is not counted; raises CorruptMessageError or UnknownMagicError
    naming the offset of a damaged entry. No object per message: one loop over the sizes.
    """
    view = memoryview(buffer)
    length = len(view)
    crc32 = zlib.crc32
    unpack_int = _INT32.unpack_from
    unpack_crc = _CRC.unpack_from
    pos = entries = 0
    while pos + ENTRY_OVERHEAD <= length:
        (size,) = unpack_int(view, pos)
        end = pos + ENTRY_OVERHEAD + size
        if size < MIN_MESSAGE_SIZE:
            raise CorruptMessageError(
                f"entry at offset {base_offset + pos} declares {size} bytes, "
                f"under the minimum message size {MIN_MESSAGE_SIZE}"
            )
        if end > length:
            break
        magic = view[pos + ENTRY_OVERHEAD]
        if magic == 1:
            if size < MAGIC1_HEADER:
                raise CorruptMessageError(
                    f"magic 1 entry at offset {base_offset + pos} is only {size} bytes"
                )
            crc_at = pos + ENTRY_OVERHEAD + 2
        elif magic == 0:
            crc_at = pos + ENTRY_OVERHEAD + 1
        else:
            raise UnknownMagicError(
                f"unknown magic byte {magic} in the entry at offset {base_offset + pos}"
            )
        if crc32(view[crc_at + 4 : end]) != unpack_crc(view, crc_at)[0]:
            raise CorruptMessageError(f"CRC mismatch in the entry at offset {base_offset + pos}")
        if magic == 1 and view[pos + ENTRY_OVERHEAD + 1] & ~CODEC_MASK:
            raise unused_attribute_bits(view[pos + ENTRY_OVERHEAD + 1], base_offset + pos)
        pos = end
        entries += 1
    return pos, entries


def iter_stored_messages(buffer: Buffer, base_offset: int = 0) -> Iterator[tuple[int, int, bytes]]:
    """Shallow iteration with CRC checks: (offset, next offset, the message as stored).

    The message is the entry without its size prefix (magic, attributes, CRC, payload); a
    compressed wrapper is one message, its payload not decompressed, so that a copier can
    write it into another set unchanged. Stops quietly at a partial trailing entry; raises
    CorruptMessageError or UnknownMagicError naming the offset of a damaged one (before
    yielding anything: the whole buffer is checked first).
    """
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    whole, _ = stored_set_end(data, base_offset)
    for offset, view in iter_entries(memoryview(data)[:whole], base_offset):
        yield offset, offset + ENTRY_OVERHEAD + len(view), view.tobytes()


def iter_messages_python(buffer: Buffer, base_offset: int = 0) -> Iterator[Message]:
    """Deep iteration through compressed wrappers, recursively, checking every CRC.

    Offsets are absolute (`base_offset` is where `buffer` starts in the partition). Inside a
    wrapper, each message resumes at the wrapper except the last, which resumes after it.
    Stops quietly at a partial trailing entry. Raises CorruptMessageError (or
    UnknownMagicError, UnknownCodecError) naming the offset of the first damaged entry.
    """
    # The consumer's hot loop: one pass over an immutable copy, payloads sliced out of it,
    # headers read inline (this runs once per message a consumer sees). Literals instead of
    # the module's constants and locals for everything: each global lookup is a dict lookup
    # per message.
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    length = len(data)
    unpack_int = _INT32.unpack_from
    unpack_crc = _CRC.unpack_from
    unpack_magic1 = ENTRY_MAGIC1.unpack_from
    crc32 = zlib.crc32
    make = tuple.__new__
    message = Message
    last_header = length - 10  # a magic-1 entry's header (size, magic, attributes, crc) fits
    pos = 0
    while pos + ENTRY_OVERHEAD <= length:
        # Fast path: whole, uncompressed magic-1 entries (what nearly every entry is), each
        # header read in one call; anything else drops to the general path below.
        while pos <= last_header:
            size, magic, attributes, crc = unpack_magic1(data, pos)
            end = pos + 4 + size
            if magic != 1 or attributes or size < 6 or end > length:
                break
            payload = data[pos + 10 : end]
            if crc32(payload) != crc:
                raise CorruptMessageError(
                    f"CRC mismatch in the entry at offset {base_offset + pos}"
                )
            yield make(message, (base_offset + pos, base_offset + end, payload, 1, attributes))
            pos = end
        if pos + ENTRY_OVERHEAD > length:
            return
        (size,) = unpack_int(data, pos)
        offset = base_offset + pos
        if size < MIN_MESSAGE_SIZE:
            raise CorruptMessageError(
                f"entry at offset {offset} declares {size} bytes, "
                f"under the minimum message size {MIN_MESSAGE_SIZE}"
            )
        end = pos + ENTRY_OVERHEAD + size
        if end > length:
            return
        magic = data[pos + 4]
        if magic == 1:
            if size < MAGIC1_HEADER:
                raise CorruptMessageError(f"magic 1 entry at offset {offset} is only {size} bytes")
            attributes = data[pos + 5]
            (crc,) = unpack_crc(data, pos + 6)
            payload = data[pos + 10 : end]
        elif magic == 0:
            attributes = 0
            (crc,) = unpack_crc(data, pos + 5)
            payload = data[pos + 9 : end]
        else:
            raise UnknownMagicError(f"unknown magic byte {magic} in the entry at offset {offset}")
        if crc32(payload) != crc:
            raise CorruptMessageError(f"CRC mismatch in the entry at offset {offset}")
        if attributes & ~CODEC_MASK:
            raise unused_attribute_bits(attributes, offset)
        next_offset = base_offset + end
        pos = end
        codec = attributes & CODEC_MASK
        if not codec:
            yield make(Message, (offset, next_offset, payload, magic, attributes))
            continue
        yield from _unwrapped(
            codec, payload, offset, next_offset, validate_python, iter_messages_python
        )


def _unwrapped(
    codec: int,
    payload: bytes,
    offset: int,
    next_offset: int,
    walk: Callable[..., Validation],
    iterate: Callable[[bytes], Iterator[Message]],
) -> Iterator[Message]:
    """The messages of the compressed entry at `offset`: all resume at the wrapper but the
    last, which resumes at `next_offset`. The whole inner set is checked (with `walk`)
    before any is yielded; `iterate` walks it: the caller's own implementation (this serves
    both iter_messages_python and its compiled twin).
    """
    if codec not in compression.CODEC_NAMES:
        raise UnknownCodecError(
            f"unknown compression codec {codec} in the entry at offset {offset}"
        )
    try:
        inner = compression.decompress(codec, payload, MAX_INFLATED)
    except InvalidMessageError as exc:
        kind = type(exc) if isinstance(exc, InflatedSizeTooLargeError) else CorruptMessageError
        raise kind(f"compressed set at offset {offset}: {exc}") from exc
    check = walk(inner, depth=1)  # the wrapper was level 0: stored data's limits
    if check.error is not None or check.valid_bytes != len(inner) or check.entries == 0:
        reason = check.error or ("partial inner entry" if inner else "empty")
        raise CorruptMessageError(f"compressed set at offset {offset}: {reason}")
    previous: Message | None = None
    for m in iterate(inner):
        if previous is not None:
            yield previous
        previous = m._replace(offset=offset, next_offset=offset)
    if previous is not None:
        yield previous._replace(next_offset=next_offset)


# What the library calls: each compiled twin when native.py chose them (same signatures,
# same results and errors), else the references above.
iter_messages = iter_messages_python
stored_set_end = stored_set_end_python
build_message_set = build_message_set_python
if native.IN_USE is not None:
    iter_messages = native.IN_USE.iter_messages
    stored_set_end = native.IN_USE.stored_set_end
    build_message_set = native.IN_USE.build_message_set


class MessageColumns(NamedTuple):
    """The messages of a buffer as columns (what a columnar reader wants, e.g. Spark's)."""

    offsets: list[int]  # the top-level entry's offset (a compressed wrapper's own)
    indexes: list[int]  # the message's position inside its wrapper (0 if none)
    payloads: list[bytes]
    end: int  # where the whole entries end in the buffer (a partial trailing one is left)


PlainRun = Callable[[bytes, int, int, list[int], list[bytes]], int]


def message_columns_python(buffer: Buffer, base_offset: int = 0) -> MessageColumns:
    """Deep iteration as columns, with iter_messages' checks and errors.

    The readers' hot loop (SimpleConsumer.iter_batches, the Spark source): a run of plain
    magic-1 entries is walked by `plain_run_python`, and any other entry (compressed, magic
    0, damaged) goes through iter_messages alone, which unwraps it or raises naming its
    offset. The compiled twin reads the region in place instead of copying it to bytes.
    """
    return message_columns_using(plain_run_python, buffer, base_offset, iter_messages_python)


def message_columns_using(
    plain_run: PlainRun,
    buffer: Buffer,
    base_offset: int = 0,
    iterate: Callable[[bytes, int], Iterator[Message]] | None = None,
) -> MessageColumns:
    """message_columns_python with given walks of the plain runs and of the other entries
    (`iterate`, by default the library's iter_messages)."""
    iterate = iter_messages if iterate is None else iterate
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    length = len(data)
    unpack_int = _INT32.unpack_from
    offsets: list[int] = []
    payloads: list[bytes] = []
    indexes: list[int] = []  # filled only up to the last unwrapped entry; zeros after
    add_offset, add_payload = offsets.append, payloads.append
    pos = 0
    while pos + ENTRY_OVERHEAD <= length:
        pos = plain_run(data, pos, base_offset, offsets, payloads)
        if pos + ENTRY_OVERHEAD > length:
            break
        (size,) = unpack_int(data, pos)
        end = pos + ENTRY_OVERHEAD + size
        if size >= MIN_MESSAGE_SIZE and end > length:
            break  # a partial trailing entry
        indexes.extend([0] * (len(payloads) - len(indexes)))  # the plain run's
        for index, m in enumerate(iterate(data[pos : max(end, pos + 4)], base_offset + pos)):
            add_offset(m.offset)
            indexes.append(index)
            add_payload(m.payload)
        pos = end
    indexes.extend([0] * (len(payloads) - len(indexes)))
    return MessageColumns(offsets, indexes, payloads, pos)


def plain_run_python(
    data: bytes, pos: int, base_offset: int, offsets: list[int], payloads: list[bytes]
) -> int:
    """The run of whole, plain magic-1 entries from `pos`: appends each one's absolute offset
    and payload and returns where the run stops (at the first entry that is anything else).

    One struct call and one slice per message; the run's CRCs are checked together at its end
    (the first mismatch raises, naming its offset, before anything after it is looked at).
    """
    length = len(data)
    unpack_magic1 = ENTRY_MAGIC1.unpack_from
    add_offset, add_payload = offsets.append, payloads.append
    last_header = length - 10  # a magic-1 entry's header (size, magic, attributes, crc) fits
    run_start = len(payloads)
    crcs: list[int] = []
    add_crc = crcs.append
    while pos <= last_header:
        size, magic, attributes, crc = unpack_magic1(data, pos)
        end = pos + 4 + size
        if magic != 1 or attributes or size < 6 or end > length:
            break
        add_payload(data[pos + 10 : end])
        add_crc(crc)
        add_offset(base_offset + pos)
        pos = end
    if crcs:
        _check_crcs(payloads, run_start, crcs, offsets)
    return pos


# What the library calls: the compiled twin when native.py chose it, else the reference.
message_columns = message_columns_python
if native.IN_USE is not None:
    message_columns = native.IN_USE.message_columns


def _check_crcs(payloads: list[bytes], start: int, crcs: list[int], offsets: list[int]) -> None:
    """The CRCs of payloads[start:] are `crcs`, or the first that is not raises."""
    computed = list(map(zlib.crc32, payloads[start:] if start else payloads))
    if computed != crcs:
        bad = next(i for i, (a, b) in enumerate(zip(computed, crcs, strict=True)) if a != b)
        raise CorruptMessageError(f"CRC mismatch in the entry at offset {offsets[start + bad]}")


def whole_entries_python(buffer: Buffer) -> tuple[int, int]:
    """(where the whole entries at the start of `buffer` end, how many there are): sizes
    only, no CRC checks. What a follower appends of a fetched region, and where a consumer
    asks for its next fetch from before it has decoded this one."""
    length = len(buffer)
    unpack_int = _INT32.unpack_from
    pos = count = 0
    while pos + ENTRY_OVERHEAD <= length:
        (size,) = unpack_int(buffer, pos)
        if size < MIN_MESSAGE_SIZE or pos + ENTRY_OVERHEAD + size > length:
            break
        pos += ENTRY_OVERHEAD + size
        count += 1
    return pos, count


def entry_at_or_after_python(buffer: Buffer, position: int, end: int) -> int:
    """Where the first entry starting at or after `position` is, walking sizes only over the
    whole entries before `end` (which whole_entries found); `end` if none starts before it.
    A reader of part of a range walks this way to the first message it owns."""
    length = len(buffer)
    unpack_int = _INT32.unpack_from
    pos = 0
    while pos < end and pos < position:
        size = unpack_int(buffer, pos)[0] if pos + ENTRY_OVERHEAD <= length else -1
        if size < MIN_MESSAGE_SIZE or pos + ENTRY_OVERHEAD + size > length:
            raise ValueError(f"no whole entry at {pos}: {end} is past the whole entries")
        pos += ENTRY_OVERHEAD + size
    return min(pos, end)


# What the library calls: the compiled twins when native.py chose them, else the reference.
whole_entries = whole_entries_python
entry_at_or_after = entry_at_or_after_python
if native.IN_USE is not None:
    whole_entries = native.IN_USE.whole_entries
    entry_at_or_after = native.IN_USE.entry_at_or_after


def whole_entries_end(buffer: Buffer) -> int:
    """Where the whole entries at the start of `buffer` end (whole_entries' first answer)."""
    return whole_entries(buffer)[0]


def first_entry_size(buffer: Buffer) -> int | None:
    """Bytes the first entry needs (size prefix included), or None when fewer than 4 bytes.

    A consumer whose fetch returned no whole entry uses this to grow its fetch size.
    """
    if len(buffer) < ENTRY_OVERHEAD:
        return None
    size: int = _INT32.unpack_from(buffer, 0)[0]
    return ENTRY_OVERHEAD + size


class MessageSet:
    """A thin view over the bytes of a message set, with its position in the partition."""

    __slots__ = ("base_offset", "buffer")

    def __init__(self, buffer: Buffer, base_offset: int = 0) -> None:
        self.buffer = buffer
        self.base_offset = base_offset

    @classmethod
    def of(
        cls, payloads: Iterable[bytes], codec: int = compression.NONE, magic: int = 1
    ) -> MessageSet:
        return cls(build_message_set(payloads, codec, magic))

    def __len__(self) -> int:
        return len(self.buffer)

    def __bytes__(self) -> bytes:
        return bytes(self.buffer)

    def __iter__(self) -> Iterator[Message]:
        return iter_messages(self.buffer, self.base_offset)

    def entries(self) -> Iterator[tuple[int, memoryview]]:
        return iter_entries(self.buffer, self.base_offset)

    def validate(self) -> Validation:
        return validate(self.buffer, self.base_offset)

    def __repr__(self) -> str:
        return f"MessageSet({len(self.buffer)} bytes at offset {self.base_offset})"
