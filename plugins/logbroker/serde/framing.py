"""The framing of an event payload (docs/design.md §3.4; LinkedIn's and later Confluent's):

    byte 0      format magic, 0
    bytes 1-4   schema id, unsigned 32-bit big-endian (the registry's /ids/<id>)
    bytes 5..   the record, Avro binary encoding, written with that schema

A payload that does not start this way is not an event; the broker does not care (payloads are
opaque to it), the readers of events do. `where` in every function is the caller's name for
the payload (``page_views 0-1 offset 1234``) and goes into the error message.
"""

from __future__ import annotations

import struct

from .errors import FramingError

MAGIC = 0
PREFIX_SIZE = 5  # magic + schema id; the Avro body starts here
MAX_SCHEMA_ID = 0xFFFFFFFF

_PREFIX = struct.Struct(">BI")


def frame(schema_id: int, body: bytes) -> bytes:
    """Magic 0, `schema_id` big-endian, then `body` (the Avro binary record)."""
    return _PREFIX.pack(MAGIC, schema_id) + body


def prefix(schema_id: int) -> bytes:
    """The five bytes every event written with `schema_id` starts with."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"a schema id is an unsigned 32-bit integer, got {schema_id}")
    return _PREFIX.pack(MAGIC, schema_id)


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def schema_id_of(payload: bytes | memoryview, where: str = "") -> int:
    """The schema id of a framed event; FramingError if the payload is not one."""
    if len(payload) < PREFIX_SIZE:
        raise FramingError(
            f"{_at(where)}payload of {len(payload)} bytes is too short for an event "
            f"(magic byte and 4-byte schema id come first: at least {PREFIX_SIZE} bytes)"
        )
    if payload[0] != MAGIC:
        raise FramingError(
            f"{_at(where)}payload starts with byte {payload[0]:#04x}, not the event magic "
            f"{MAGIC:#04x}: it is not a framed Avro event"
        )
    schema_id: int = _PREFIX.unpack_from(payload)[1]
    return schema_id


def unframe(payload: bytes | memoryview, where: str = "") -> tuple[int, memoryview]:
    """(schema id, Avro body) of a framed event; the body is a view, not a copy."""
    schema_id = schema_id_of(payload, where)
    return schema_id, memoryview(payload)[PREFIX_SIZE:]


def is_event(payload: bytes | memoryview) -> bool:
    """Whether `payload` is framed as an event (magic 0 and room for the id); no schema check."""
    return len(payload) >= PREFIX_SIZE and payload[0] == MAGIC
