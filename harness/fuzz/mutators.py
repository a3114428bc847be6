"""Mutators: a valid frame in, a damaged frame out; `mutate` applies 1-3 of them.

    mutated, names = mutate(rng, frame)                   # the same frame, damaged 1-3 times

Mutators (`MUTATORS`; every one takes and returns a whole frame, size prefix included):

    flip_bits          flip 1-4 random bits anywhere in the frame
    interesting_bytes  overwrite 1-4 bytes with 0x00, 0xFF, 0x7F or 0x80
    truncate           cut the frame at a random point
    extend             append 1-64 bytes of garbage
    duplicate_slice    copy a slice of the frame and insert it somewhere
    size_prefix        set the int32 size prefix to an interesting value (0, -1, len+1, 100 MiB...)
    type_id            change the int16 request type (another type, 8, -1, 0x7FFF...)
    field              set a length, count or number field (topic length, counts, message set
                       size, entry size, partition, offset, max size...) to an edge value
    payload_recrc      change a payload byte and fix its CRC: for a plain message the set stays
                       valid (a legitimate append), for a compressed wrapper the payload no
                       longer decompresses although its CRC matches
    damaged_inner_set  replace a produce's set by a gzip/snappy wrapper with a correct outer CRC
                       around a damaged inner set (bad inner CRC, cut inner entry, bad magic)

After mutators that do not set the size prefix themselves, the prefix is recomputed most of
the time (so the damage is seen inside a well-framed request) and left stale otherwise (so
the broker's framing is exercised). A mutated produce can stay valid (payload and CRC changed
consistently, a partition or topic changed to another legal one): the broker may append it.
What must never happen is damaged bytes stored or bytes already stored changed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from logbroker.protocol import compression
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import DEFAULT_MAX_SOCKET_REQUEST_BYTES

from .frames import LENGTH_KINDS, NUMERIC_SIZES, Field, frame_fields, interesting_values
from .requests import Rng

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")

# ---------------------------------------------------------------------------------------
# Mutators: frame (bytes, size prefix included), fields of the original frame -> new frame


def _fix_size(frame: bytearray) -> None:
    if len(frame) >= 4:
        frame[0:4] = _INT32.pack(min(len(frame) - 4, 2**31 - 1))


def flip_bits(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    for _ in range(rng.randint(1, 4)):
        if frame:
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    return frame


def interesting_bytes(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    for _ in range(rng.randint(1, 4)):
        if frame:
            frame[rng.randrange(len(frame))] = rng.choice((0x00, 0xFF, 0x7F, 0x80))
    return frame


def truncate(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    if rng.random() < 0.3:
        del frame[max(0, len(frame) - rng.randint(1, 4)) :]  # a few bytes off the end
    else:
        del frame[rng.randrange(len(frame) + 1) :]
    return frame


def extend(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    n = rng.randint(1, 64)
    if rng.random() < 0.5:
        frame += rng.randbytes(n)
    else:
        frame += bytes([rng.choice((0x00, 0xFF, 0x7F, 0x80))]) * n
    return frame


def duplicate_slice(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    if not frame:
        return frame
    start = rng.randrange(len(frame))
    piece = frame[start : start + rng.randint(1, 32)]
    at = start + len(piece) if rng.random() < 0.5 else rng.randrange(len(frame) + 1)
    frame[at:at] = piece
    return frame


def size_prefix(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    body = len(frame) - 4
    value = rng.choice(
        (
            0,
            1,
            2,
            -1,
            -(2**31),
            2**31 - 1,
            body - 1,
            body + 1,
            body - rng.randint(2, 16),
            body + rng.randint(2, 16),
            DEFAULT_MAX_SOCKET_REQUEST_BYTES,
            DEFAULT_MAX_SOCKET_REQUEST_BYTES + 1,
            rng.randrange(-(2**31), 2**31),
        )
    )
    if len(frame) < 4:
        frame += bytes(4 - len(frame))
    frame[0:4] = _INT32.pack(max(-(2**31), min(2**31 - 1, value)))
    return frame


def type_id(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    if len(frame) >= 6:
        value = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1, 0x7FFF, -(2**15), 0x100))
        frame[4:6] = _INT16.pack(value)
    return frame


def field_value(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    numeric = [f for f in fields if f.size in NUMERIC_SIZES and f.kind not in ("topic", "payload")]
    numeric = [f for f in numeric if f.pos + f.size <= len(frame)]
    if not numeric:
        return frame
    lengths = [f for f in numeric if f.kind in LENGTH_KINDS]
    chosen = rng.choice(lengths if lengths and rng.random() < 0.6 else numeric)
    current = int.from_bytes(frame[chosen.pos : chosen.pos + chosen.size], "big", signed=True)
    value = rng.choice(interesting_values(chosen.size, current))
    frame[chosen.pos : chosen.pos + chosen.size] = value.to_bytes(chosen.size, "big", signed=True)
    return frame


def payload_recrc(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    crcs = [f for f in fields if f.kind == "crc"]
    payloads = [f for f in fields if f.kind == "payload"]
    pairs = [
        (c, p)
        for c, p in zip(crcs, payloads, strict=True)
        if p.size and p.pos + p.size <= len(frame)
    ]
    if not pairs:
        return frame
    crc, payload = rng.choice(pairs)
    frame[payload.pos + rng.randrange(payload.size)] ^= 1 << rng.randrange(8)
    new_crc = zlib.crc32(frame[payload.pos : payload.pos + payload.size])
    frame[crc.pos : crc.pos + 4] = _UINT32.pack(new_crc)
    return frame


def damaged_inner_set(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    sets = [f for f in fields if f.kind == "message_set" and f.pos + f.size <= len(frame)]
    if not sets:
        return frame
    target = rng.choice(sets)
    inner = bytearray(build_message_set([rng.randbytes(rng.randint(0, 30)) for _ in range(3)]))
    damage = rng.randrange(4)
    if damage == 0:
        inner[-1] ^= 0x01  # last payload byte: inner CRC mismatch
    elif damage == 1:
        del inner[-rng.randint(1, 5) :]  # last inner entry cut off
    elif damage == 2:
        inner[4] = 7  # first inner entry: unknown magic
    else:
        inner[0:4] = _INT32.pack(3)  # first inner entry under the minimum size
    codec = rng.choice((compression.GZIP, compression.SNAPPY))
    wrapped = compression.compress(codec, bytes(inner))
    wrapper = struct.pack(">iBBI", 6 + len(wrapped), 1, codec, zlib.crc32(wrapped)) + wrapped
    if rng.random() < 0.5:  # after a valid entry, so that the damage is not the first entry
        wrapper = build_message_set([b"ok"]) + wrapper
    frame[target.pos : target.pos + target.size] = wrapper
    frame[target.pos - 4 : target.pos] = _INT32.pack(len(wrapper))  # the set size field
    return frame


Mutator = Callable[[Rng, bytearray, list[Field]], bytearray]

MUTATORS: dict[str, Mutator] = {
    "flip_bits": flip_bits,
    "interesting_bytes": interesting_bytes,
    "truncate": truncate,
    "extend": extend,
    "duplicate_slice": duplicate_slice,
    "size_prefix": size_prefix,
    "type_id": type_id,
    "field": field_value,
    "payload_recrc": payload_recrc,
    "damaged_inner_set": damaged_inner_set,
}
_WEIGHTS = {"field": 3, "flip_bits": 2, "interesting_bytes": 2}


def mutate(
    rng: Rng, frame: bytes, *, fix_size_probability: float = 0.75
) -> tuple[bytes, list[str]]:
    """`frame` (a valid frame) damaged by 1-3 mutators; returns it and the mutators' names."""
    fields = frame_fields(frame)
    names = list(MUTATORS)
    weights = [_WEIGHTS.get(n, 1) for n in names]
    out = bytearray(frame)
    applied = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        name = rng.choices(names, weights)[0]
        out = MUTATORS[name](rng, out, fields)
        applied.append(name)
    if "size_prefix" not in applied and rng.random() < fix_size_probability:
        _fix_size(out)
    return bytes(out), applied
