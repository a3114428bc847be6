"""The event header: its fields, reading it from a payload without the event's schema, making it.

Every event's record starts with its `header` (`logbroker.EventHeader`, schemas.py), and a
record's Avro binary encoding is its fields' encodings one after the other, so the header's
bytes sit right after the 5-byte frame prefix, whatever the rest of the schema is:

    byte 5..   timestamp    long (zig-zag varint), event time, UTC ms
               server       string (varint length, UTF-8)
               producer_id  string
               seq          long
               ... the event's own fields

`read_header` reads those four fields with fastavro and EventHeader's schema alone: no registry,
no event schema. `read_timestamp` reads only the first varint, for counting events per window on
a hot path (the mirror's); it is the one place that decodes Avro without fastavro, a single
zig-zag varint, checked against fastavro in the tests.

`HeaderMaker` is the producer side: one `producer_id` per instance (unique: host, pid and 48
random bits) and `seq` 0, 1, 2, ... across every topic it produces to, so (producer_id, seq)
names one event and consumers can deduplicate by it.
"""

from __future__ import annotations

import io
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from fastavro import schemaless_reader

from .errors import DecodeError
from .framing import MAGIC, PREFIX_SIZE, schema_id_of
from .schemas import event_header_schema

_HEADER_READER = event_header_schema().reader  # timestamps as ints


class EventHeader(NamedTuple):
    """The first field of every event (docs/design.md §3.4)."""

    timestamp: int  # event time, UTC epoch ms
    server: str  # the host that made the event
    producer_id: str  # unique per producer instance
    seq: int  # that producer's counter: 0, 1, 2, ... across topics


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def read_header(payload: bytes | memoryview, where: str = "") -> EventHeader:
    """The header of a framed event, without its schema; FramingError/DecodeError if not one."""
    schema_id_of(payload, where)
    stream = io.BytesIO(payload)
    stream.seek(PREFIX_SIZE)
    try:
        fields = schemaless_reader(stream, _HEADER_READER, None)
    except (EOFError, IndexError, ValueError, UnicodeDecodeError, OverflowError) as exc:
        raise DecodeError(
            f"{_at(where)}event has no readable header: its first {len(payload) - PREFIX_SIZE} "
            f"body bytes are not a logbroker.EventHeader ({type(exc).__name__}: {exc or 'truncated'})"
        ) from None
    assert isinstance(fields, dict)
    return EventHeader(fields["timestamp"], fields["server"], fields["producer_id"], fields["seq"])


def read_timestamp(payload: bytes | memoryview, where: str = "") -> int:
    """The header's timestamp (event time, UTC ms) of a framed event, fast.

    FramingError if the payload is not framed as an event, DecodeError if the varint runs
    past its end or over 10 bytes.
    """
    timestamp = timestamp_at(payload, 0)
    if timestamp is not None:
        return timestamp
    schema_id_of(payload, where)  # raises the precise FramingError, if that is what is wrong
    raise DecodeError(
        f"{_at(where)}event is truncated or has no header: the timestamp varint at byte "
        f"{PREFIX_SIZE} does not end within the payload's {len(payload)} bytes"
    )


def timestamp_at(data: bytes | memoryview, start: int, end: int | None = None) -> int | None:
    """`read_timestamp` of the event framed at `data[start:end]`, or None when there is none.

    For counting many payloads (the mirror): no slice is copied and a payload that is not an
    event costs a comparison, not an exception with its message.
    """
    i = start + PREFIX_SIZE
    end = len(data) if end is None else end
    if i >= end or data[start] != MAGIC:
        return None
    stop = min(end, i + 10)
    value = shift = 0
    while i < stop:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1)  # zig-zag
        shift += 7
        i += 1
    return None


def read_timestamps(payloads: Iterable[bytes | memoryview]) -> list[int]:
    """`read_timestamp` of each payload; the first bad one raises (its index in the message)."""
    out = []
    for i, payload in enumerate(payloads):
        out.append(read_timestamp(payload, f"payload {i}"))
    return out


def default_producer_id() -> str:
    """`<host>-<pid>-<12 hex digits>`: unique per producer instance, readable in logs."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


class HeaderMaker:
    """Headers for one producer instance: its producer_id and a seq shared by every topic.

    `clock` returns seconds since the epoch (time.time); it stamps events that bring no event
    time of their own. Thread-safe.
    """

    def __init__(
        self,
        producer_id: str | None = None,
        server: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.producer_id = producer_id or default_producer_id()
        self.server = server or socket.gethostname()
        self.clock = clock
        self._next_seq = 0
        # held by whoever must take seqs only after encoding succeeded (AuditedProducer.prepare)
        self.lock = threading.RLock()

    @property
    def next_seq(self) -> int:
        """The seq the next event will get."""
        return self._next_seq

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def reserve(self, count: int) -> int:
        """Take `count` consecutive seqs; returns the first."""
        with self.lock:
            first = self._next_seq
            self._next_seq += count
            return first

    def header(self, timestamp_ms: int | None = None) -> dict[str, Any]:
        """A complete header for one new event (takes one seq)."""
        return {
            "timestamp": self.now_ms() if timestamp_ms is None else timestamp_ms,
            "server": self.server,
            "producer_id": self.producer_id,
            "seq": self.reserve(1),
        }
