"""The §3.4 framing byte by byte, and the header read without the event's schema."""

from __future__ import annotations

import io

import pytest
from fastavro import schemaless_reader
from hypothesis import given
from hypothesis import strategies as st

from logbroker.serde import framing
from logbroker.serde.codec import EventWriter
from logbroker.serde.errors import DecodeError, FramingError
from logbroker.serde.header import (
    EventHeader,
    HeaderMaker,
    read_header,
    read_timestamp,
    read_timestamps,
)
from logbroker.serde.schemas import event_header_schema, parse_event_schema

SCHEMA = parse_event_schema(
    {
        "type": "record",
        "name": "PageView",
        "fields": [
            {"name": "header", "type": "logbroker.EventHeader"},
            {"name": "page", "type": "string"},
        ],
    }
)
WRITER = EventWriter(7, SCHEMA, "page_views", 1)


def record(ts: int = 1_700_000_000_000, seq: int = 5) -> dict:
    header = {"timestamp": ts, "server": "web-1", "producer_id": "p", "seq": seq}
    return {"header": header, "page": "/jobs"}


def test_frame_layout_byte_by_byte():
    payload = WRITER.encode(record())
    expected = (
        b"\x00"  # magic 0
        + b"\x00\x00\x00\x07"  # schema id 7, unsigned 32-bit big-endian
        + b"\x80\xa0\xab\xfe\xf9\x62"  # timestamp 1700000000000: zig-zag varint
        + b"\x0aweb-1"  # server: length 5 (zig-zag 10), UTF-8
        + b"\x02p"  # producer_id
        + b"\x0a"  # seq 5
        + b"\x0a/jobs"  # the event's own field
    )
    assert payload == expected
    assert framing.frame(7, expected[5:]) == expected
    schema_id, body = framing.unframe(payload)
    assert schema_id == 7 and bytes(body) == expected[5:]
    assert framing.schema_id_of(b"\x00\xff\xff\xff\xfe") == 0xFFFFFFFE
    assert (
        framing.is_event(payload) and not framing.is_event(b"{}") and not framing.is_event(b"\x00")
    )


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"", r"page_views 0-1 offset 42: payload of 0 bytes is too short for an event"),
        (b"\x00\x00\x07", r"payload of 3 bytes is too short"),
        (b'{"page": "/"}', r"starts with byte 0x7b, not the event magic 0x00"),
    ],
)
def test_not_a_frame_says_what_and_where(payload, problem):
    with pytest.raises(FramingError, match=problem):
        framing.unframe(payload, "page_views 0-1 offset 42")
    with pytest.raises(FramingError):
        read_header(payload)
    with pytest.raises(FramingError):
        read_timestamp(payload)


def test_header_without_the_schema():
    payload = WRITER.encode(record(seq=12345))
    assert read_header(payload) == EventHeader(1_700_000_000_000, "web-1", "p", 12345)
    assert read_timestamp(payload) == 1_700_000_000_000
    assert read_timestamps([payload, WRITER.encode(record(ts=5))]) == [1_700_000_000_000, 5]


def test_truncated_header_is_an_error_with_where():
    payload = WRITER.encode(record())
    with pytest.raises(DecodeError, match=r"p-0 offset 9: event has no readable header"):
        read_header(payload[:9], "p-0 offset 9")
    with pytest.raises(DecodeError, match=r"timestamp varint at byte 5 does not end"):
        read_timestamp(payload[:8])
    with pytest.raises(DecodeError, match=r"payload 1: event is truncated"):
        read_timestamps([payload, payload[:5]])


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_read_timestamp_agrees_with_fastavro(ts):
    payload = WRITER.encode(record(ts=ts))
    stream = io.BytesIO(payload[5:])
    expected = schemaless_reader(stream, event_header_schema().reader, None)["timestamp"]
    assert read_timestamp(payload) == expected == ts


def test_header_maker_counts_across_topics_from_zero():
    clock = iter([1.5, 2.0]).__next__
    maker = HeaderMaker(server="web-9", clock=clock)
    other = HeaderMaker()
    assert maker.producer_id != other.producer_id
    first = maker.header()
    assert first == {
        "timestamp": 1500,
        "server": "web-9",
        "producer_id": maker.producer_id,
        "seq": 0,
    }
    assert maker.header(timestamp_ms=7)["seq"] == 1
    assert maker.reserve(10) == 2 and maker.next_seq == 12
