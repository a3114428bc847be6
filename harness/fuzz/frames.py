"""Where things are in request bytes: the fields of a valid frame, and the frames of a stream.

`frame_fields(frame)` lists the fields of a frame made by `encode_request` (size prefix,
type, then per request type: topic length and topic, partition, offset, max size, counts,
message set size and, inside a produce's set, every top-level entry's size, magic,
attributes, CRC and payload), for the field-aware mutators. `split_frames(stream)` cuts a
byte stream into frames the way the broker will, and says how the stream ends.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from logbroker.protocol.requests import DEFAULT_MAX_SOCKET_REQUEST_BYTES, RequestType

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# ---------------------------------------------------------------------------------------
# Where the fields of a valid frame are


@dataclass(frozen=True)
class Field:
    """One field of a frame: `size` bytes at `pos`, of a kind such as 'topic_length'."""

    pos: int
    size: int
    kind: str


NUMERIC_SIZES = (1, 2, 4, 8)
LENGTH_KINDS = {"frame_size", "topic_length", "count", "set_size", "entry_size"}


def frame_fields(frame: bytes) -> list[Field]:
    """The fields of a frame made by `encode_request` (size prefix included), in order."""
    fields = [Field(0, 4, "frame_size"), Field(4, 2, "type")]
    pos = 6

    def number(size: int, kind: str) -> int:
        nonlocal pos
        fields.append(Field(pos, size, kind))
        value = int.from_bytes(frame[pos : pos + size], "big", signed=True)
        pos += size
        return value

    def topic() -> None:
        nonlocal pos
        n = number(2, "topic_length")
        fields.append(Field(pos, n, "topic"))
        pos += n

    def produce() -> None:
        nonlocal pos
        topic()
        number(4, "partition")
        n = number(4, "set_size")
        fields.append(Field(pos, n, "message_set"))
        fields.extend(_entry_fields(frame, pos, n))
        pos += n

    def fetch() -> None:
        topic()
        number(4, "partition")
        number(8, "offset")
        number(4, "max_size")

    kind = RequestType(_INT16.unpack_from(frame, 4)[0])
    if kind is RequestType.PRODUCE:
        produce()
    elif kind is RequestType.FETCH:
        fetch()
    elif kind is RequestType.MULTIFETCH:
        for _ in range(number(2, "count")):
            fetch()
    elif kind is RequestType.MULTIPRODUCE:
        for _ in range(number(2, "count")):
            produce()
    elif kind is RequestType.OFFSETS:
        topic()
        number(4, "partition")
        number(8, "time")
        number(4, "max_offsets")
    elif kind is RequestType.PRODUCE_ACK:
        number(1, "flags")
        for _ in range(number(2, "count")):
            produce()
    elif kind is RequestType.FETCH_WAIT:
        number(4, "max_wait")
        number(4, "min_bytes")
        for _ in range(number(2, "count")):
            fetch()
    elif kind is RequestType.METADATA:
        for _ in range(number(2, "count")):
            topic()
    return fields  # other types: only the size and the type are known


def _entry_fields(frame: bytes, start: int, length: int) -> list[Field]:
    """Fields of the top-level entries of a (valid) message set at frame[start:start+length]."""
    fields = []
    pos, end = start, start + length
    while pos + 4 <= end:
        (size,) = _INT32.unpack_from(frame, pos)
        fields.append(Field(pos, 4, "entry_size"))
        magic = frame[pos + 4]
        fields.append(Field(pos + 4, 1, "magic"))
        if magic == 1:
            fields.append(Field(pos + 5, 1, "attributes"))
            fields.append(Field(pos + 6, 4, "crc"))
            fields.append(Field(pos + 10, size - 6, "payload"))
        else:
            fields.append(Field(pos + 5, 4, "crc"))
            fields.append(Field(pos + 9, size - 5, "payload"))
        pos += 4 + size
    return fields


def interesting_values(size: int, current: int) -> list[int]:
    """Edge values for a signed big-endian field of `size` bytes holding `current`."""
    bits = 8 * size
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    values = [0, 1, 2, -1, -2, low, high, low + 1, high - 1, current + 1, current - 1]
    if size >= 2:
        values += [0x7F, 0x80, 0xFF, 0x100, current + 4, current - 4, current * 2]
    if size >= 4:
        values += [0x7FFF, 0x8000, 0xFFFF, 0x10000, DEFAULT_MAX_SOCKET_REQUEST_BYTES + 1]
    if size >= 8:
        values += [2**31, 2**32, -(2**31) - 1]
    return [v for v in values if low <= v <= high]


# ---------------------------------------------------------------------------------------
# How the broker will cut a byte stream into frames


def split_frames(
    stream: bytes, max_request_bytes: int = DEFAULT_MAX_SOCKET_REQUEST_BYTES
) -> tuple[list[tuple[int, int]], str]:
    """The frames (start, end) the broker cuts out of `stream`, and how the stream ends:

    'complete' (ends exactly after a frame), 'bad_size' (a size prefix the broker refuses:
    it closes there) or 'incomplete' (the broker waits for more bytes).
    """
    frames: list[tuple[int, int]] = []
    pos = 0
    while pos < len(stream):
        if len(stream) - pos < 4:
            return frames, "incomplete"
        (size,) = _INT32.unpack_from(stream, pos)
        if size < 2 or size > max_request_bytes:
            return frames, "bad_size"
        if len(stream) - pos - 4 < size:
            return frames, "incomplete"
        frames.append((pos, pos + 4 + size))
        pos += 4 + size
    return frames, "complete"
