"""Encoding and decoding events with a real registry: resolution, bulk, and every bad input."""

from __future__ import annotations

import pytest

from logbroker.serde import framing
from logbroker.serde.codec import EventCodec
from logbroker.serde.errors import DecodeError, EncodeError, FramingError, UnknownSchemaError
from logbroker.serde.registry import SchemaRegistry
from logbroker.serde.schemas import parse_event_schema


def event(*fields: dict) -> dict:
    return {
        "type": "record",
        "name": "PageView",
        "namespace": "demo",
        "fields": [{"name": "header", "type": "logbroker.EventHeader"}, *fields],
    }


V1 = event({"name": "page", "type": "string"}, {"name": "ms", "type": "int"})
V2 = event(
    {"name": "page", "type": "string"},
    {"name": "ms", "type": "long"},  # promoted
    {"name": "referrer", "type": ["null", "string"], "default": None},  # added
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
)
HEADER = {"timestamp": 1_700_000_000_000, "server": "web-1", "producer_id": "p-1", "seq": 0}


def record(seq: int = 0, **fields) -> dict:
    return {"header": {**HEADER, "seq": seq}, "page": "/jobs", "ms": 12, **fields}


@pytest.fixture
def codec(zk_chroot):
    with SchemaRegistry(zk_chroot.connect + "/registry") as registry:
        registry.register("page_views", V1)
        yield EventCodec(registry)


def test_round_trip(codec):
    payload = codec.encode("page_views", record())
    assert framing.schema_id_of(payload) == 1
    assert codec.decode(payload) == record()
    decoded = codec.decode_event(payload)
    assert decoded.schema_id == 1 and decoded.record["header"]["timestamp"] == 1_700_000_000_000


def test_an_old_event_read_with_the_new_reader_schema(codec):
    old_payload = codec.encode("page_views", record())
    new = codec.registry.register("page_views", V2)
    assert codec.decode(old_payload, reader=new.schema) == {
        **record(),
        "referrer": None,
        "tags": [],
    }
    # a new writer (made after the registration) writes the new version
    fresh = EventCodec(codec.registry)
    new_payload = fresh.encode("page_views", record(referrer="/home", tags=["a"]))
    assert framing.schema_id_of(new_payload) == new.id
    assert fresh.decode(new_payload)["referrer"] == "/home"
    # bulk, both versions mixed, all read as the new version
    assert [r["referrer"] for r in fresh.decode_many([old_payload, new_payload], new.schema)] == [
        None,
        "/home",
    ]


def test_a_reader_that_cannot_read_the_writer_is_an_error(codec):
    payload = codec.encode("page_views", record())
    other = parse_event_schema(event({"name": "page", "type": "int"}))
    with pytest.raises(
        DecodeError,
        match=r"at p-0 offset 7: cannot read .* schema id 1 \(demo.PageView\) with reader schema demo.PageView",
    ):
        codec.decode(payload, reader=other, where="at p-0 offset 7")


@pytest.mark.parametrize(
    ("bad", "field", "problem"),
    [
        (record(ms="fast"), "ms", r"field 'ms': expected int, got 'fast' \(str\)"),
        (record(ms=2**40), "ms", r"field 'ms': 1099511627776 is out of the range of an Avro int"),
        (
            {**record(), "header": {**HEADER, "seq": "x"}},
            "header.seq",
            r"field 'header.seq': expected long",
        ),
        (
            {"header": HEADER, "ms": 1},
            "page",
            r"field 'page': missing, and the schema gives no default",
        ),
        (record(colour="red"), "colour", r"field 'colour': not a field of demo.PageView"),
        (
            {**record(), "header": {**HEADER, "server": None}},
            "header.server",
            r"expected string, got None",
        ),
    ],
)
def test_a_record_that_does_not_fit_names_the_field(codec, bad, field, problem):
    with pytest.raises(EncodeError, match=problem) as caught:
        codec.encode("page_views", bad, "line 3", validate=True)
    if field != "ms" or "range" not in problem:  # fastavro alone refuses all but the range
        with pytest.raises(EncodeError, match=problem):
            codec.encode("page_views", bad, "line 3")
    assert caught.value.field == field
    assert str(caught.value).startswith(
        "line 3: record does not fit 'page_views' schema demo.PageView (id 1)"
    )


def test_bad_payloads_say_what_and_where(codec):
    payload = codec.encode("page_views", record())
    with pytest.raises(UnknownSchemaError, match=r"^p-0 offset 5: unknown schema id 99"):
        codec.decode(framing.frame(99, payload[5:]), where="p-0 offset 5")
    with pytest.raises(
        DecodeError,
        match=r"^p-0 offset 5: truncated event: the 21-byte Avro body ends before the record of schema id 1",
    ):
        codec.decode(payload[:-3], where="p-0 offset 5")
    with pytest.raises(DecodeError, match=r"2 bytes left over after the record of schema id 1"):
        codec.decode(payload + b"xx")
    with pytest.raises(FramingError, match=r"not the event magic"):
        codec.decode(b'{"page": "/"}', where="p-0 offset 5")
    with pytest.raises(DecodeError, match=r"truncated event"):
        codec.decode(payload[:5])  # an event without even a header


def test_decode_many_raises_or_keeps_errors_in_place(codec):
    good = codec.encode("page_views", record(seq=1))
    payloads = [
        good,
        b"plain text",
        framing.frame(42, b""),
        good[:-1],
        framing.frame(42, b"x"),
        good,
    ]
    with pytest.raises(FramingError, match=r"^payload 1: "):
        codec.decode_many(payloads)
    kept = codec.decode_many(payloads, errors="keep")
    assert kept[0] == kept[5] == record(seq=1)
    assert isinstance(kept[1], FramingError)
    assert isinstance(kept[2], UnknownSchemaError) and "payload 2: unknown schema id 42" in str(
        kept[2]
    )
    assert isinstance(kept[3], DecodeError) and "payload 3: truncated" in str(kept[3])
    assert isinstance(kept[4], UnknownSchemaError)


def test_ids_are_looked_up_once(codec, zk_client):
    payloads = [codec.encode("page_views", record(seq=i)) for i in range(100)]
    fresh = EventCodec(codec.registry)
    asked = []
    real = codec.registry.schema
    codec.registry.schema = lambda schema_id: asked.append(schema_id) or real(schema_id)  # type: ignore[method-assign]
    try:
        assert len(fresh.decode_many(payloads)) == 100
        assert fresh.decode(payloads[0])["header"]["seq"] == 0
    finally:
        del codec.registry.schema
    assert asked == [1]


def test_decode_batch_keeps_ids_and_errors_by_position(codec):
    good = codec.encode("page_views", record(seq=3))
    payloads = [good, b"{}", framing.frame(42, b""), good[:-2], good]
    batch = codec.decode_batch(payloads, where=lambda i: f"page_views 0-0 offset {i * 100}")
    assert batch.records[0] == batch.records[4] == record(seq=3)
    assert batch.records[1:4] == [None, None, None]
    assert batch.schema_ids == [1, None, 42, 1, 1]
    assert sorted(batch.errors) == [1, 2, 3]
    assert str(batch.errors[1]).startswith(
        "page_views 0-0 offset 100: payload of 2 bytes is too short"
    )
    assert str(batch.errors[2]).startswith("page_views 0-0 offset 200: unknown schema id 42")
    assert str(batch.errors[3]).startswith("page_views 0-0 offset 300: truncated event")
    assert isinstance(batch.errors[2], UnknownSchemaError)
