"""The columnar Avro readers against fastavro's per-event reading (no Spark session, no broker).

Both readers, numpy's (avro_vector.read_columns) and the compiled one (avro_compiled), run
every test. Whatever they read must be what serde's path reads; whatever they are not sure
of must raise NotColumnar (the caller then decodes the batch event by event).
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from logbroker.protocol.message_set import build_message_set
from spark_apps.source.avro_compiled import CompiledReader
from spark_apps.source.avro_vector import Node, NotColumnar, compile_schema, read_columns
from spark_apps.source.entry_scan import plain_run

Read = Callable[[list[bytes], int, Node], dict[str, pa.Array]]


def _compiled(payloads: list[bytes], schema_id: int, plan: Node) -> dict[str, pa.Array]:
    return CompiledReader(plan).read(pa.array(payloads, pa.binary()), schema_id)


def _compiled_in_place(payloads: list[bytes], schema_id: int, plan: Node) -> dict[str, pa.Array]:
    """The compiled reader on the payloads where a fetch holds them (the Spark reader's way):
    between the entries' headers, not copied out first."""
    run = plain_run(build_message_set(payloads))
    return CompiledReader(plan).read_framed(*run.framed(), schema_id)


@pytest.fixture(params=["numpy", "compiled", "compiled in place"])
def read(request: pytest.FixtureRequest) -> Read:
    return {"numpy": read_columns, "compiled": _compiled}.get(request.param, _compiled_in_place)


SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Everything",
    "namespace": "test",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "exact", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "text", "type": "string"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {
            "name": "point",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Point",
                    "fields": [
                        {"name": "x", "type": "long"},
                        {"name": "label", "type": ["string", "null"]},
                    ],
                },
            ],
        },
        {"name": "points", "type": {"type": "array", "items": "Point"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "again", "type": ["null", "Color"]},
    ],
}
PARSED = parse_schema(SCHEMA)
SCHEMA_ID = 7


def _record(rng: random.Random) -> dict[str, Any]:
    def point() -> dict[str, Any]:
        return {"x": rng.randint(-(2**62), 2**62), "label": rng.choice([None, "", "é→", "p"])}

    return {
        "flag": rng.random() < 0.5,
        "small": rng.randint(-(2**31), 2**31 - 1),
        "big": rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-1000, 1000)]),
        "ratio": rng.random(),
        "exact": rng.uniform(-1e300, 1e300),
        "blob": rng.randbytes(rng.randint(0, 20)),
        "text": "".join(rng.choice("aé漢\x00z") for _ in range(rng.randint(0, 12))),
        "color": rng.choice(["RED", "GREEN"]),
        "digest": rng.randbytes(4),
        "point": rng.choice([None, point()]),
        "points": [point() for _ in range(rng.randint(0, 3))],
        "tags": [str(i) for i in range(rng.randint(0, 4))],
        "again": rng.choice([None, "RED", "GREEN"]),
    }


def _frame(record: dict[str, Any], schema_id: int = SCHEMA_ID) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    schemaless_writer(out, PARSED, record)
    return out.getvalue()


def _by_fastavro(payloads: list[bytes]) -> dict[str, pa.Array]:
    plan = compile_schema(SCHEMA)
    records = []
    for p in payloads:
        stream = io.BytesIO(p)
        stream.seek(5)
        records.append(schemaless_reader(stream, PARSED, None))
    return {
        name: pa.array([r[name] for r in records], node.arrow)
        for name, node in plan.parts["fields"]
    }


def test_reads_what_fastavro_reads(read: Read) -> None:
    rng = random.Random(11)
    payloads = [_frame(_record(rng)) for _ in range(500)]
    got = read(payloads, SCHEMA_ID, compile_schema(SCHEMA))
    expected = _by_fastavro(payloads)
    for name, array in expected.items():
        assert got[name].equals(array), name


def test_arrays_in_several_blocks_and_with_negative_counts(read: Read) -> None:
    # Avro lets a writer split an array into blocks; a negative count carries the block's size.
    plan = compile_schema({"type": "record", "name": "T", "fields": [
        {"name": "tags", "type": {"type": "array", "items": "string"}}]})  # fmt: skip
    body = bytes([4, 2, ord("a"), 2, ord("b"), 1, 4, 2, ord("c"), 0])  # 2 items, -1 (4 bytes): 1
    got = read([b"\x00" + SCHEMA_ID.to_bytes(4, "big") + body], SCHEMA_ID, plan)
    assert got["tags"].to_pylist() == [["a", "b", "c"]]


@pytest.mark.parametrize(
    "damage",
    ["truncated", "left over", "other schema id", "no magic", "bad utf-8", "bad branch", "short"],
)
def test_anything_unsure_is_not_columnar(damage: str, read: Read) -> None:
    rng = random.Random(5)
    payloads = [_frame(_record(rng)) for _ in range(20)]
    good = _frame({**_record(rng), "text": "ok", "again": None})
    bad = {
        "truncated": good[:-1],
        "left over": good + b"\x00",
        "other schema id": _frame(_record(rng), SCHEMA_ID + 1),
        "no magic": b"\x01" + good[1:],
        "bad utf-8": good.replace(b"\x04ok", b"\x04\xff\xfe"),
        "bad branch": good[:-1] + b"\x06",  # `again`: the last byte, branch 3 of 2
        "short": b"\x00\x00",
    }[damage]
    assert bad != good
    with pytest.raises(NotColumnar):
        read([*payloads, bad, *payloads], SCHEMA_ID, compile_schema(SCHEMA))


@pytest.mark.parametrize(
    "values",
    [(b"caf\xc3", b"\xa9"), (b"\xe2\x82", b"\xac5"), (b"caf\xc3", b"", b"\xa9x")],
    ids=["two-byte", "three-byte", "an empty value between"],
)
def test_a_character_split_between_two_values_is_not_utf8(
    values: tuple[bytes, ...], read: Read
) -> None:
    # Each value is checked, not only the values' bytes together: here those together are
    # UTF-8 (one character across a boundary), the values that hold part of it are not.
    plan = compile_schema({"type": "record", "name": "T", "fields": [
        {"name": "tags", "type": {"type": "array", "items": "string"}}]})  # fmt: skip
    assert b"".join(values).decode("utf-8")
    items = b"".join(bytes([2 * len(v)]) + v for v in values)
    body = bytes([2 * len(values)]) + items + b"\x00"
    framed = b"\x00" + SCHEMA_ID.to_bytes(4, "big") + body
    with pytest.raises(NotColumnar):
        read([framed], SCHEMA_ID, plan)
    whole = b"".join(values)  # the same character in one value reads
    body = bytes([2, 2 * len(whole)]) + whole + b"\x00"
    got = read([b"\x00" + SCHEMA_ID.to_bytes(4, "big") + body], SCHEMA_ID, plan)
    assert got["tags"].to_pylist() == [[whole.decode("utf-8")]]


def test_maps_are_not_columnar() -> None:
    with pytest.raises(NotColumnar):
        compile_schema({"type": "record", "name": "M", "fields": [
            {"name": "m", "type": {"type": "map", "values": "long"}}]})  # fmt: skip


NESTED: dict[str, Any] = {
    "type": "record",
    "name": "Nested",
    "fields": [
        {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
        {"name": "maybe", "type": ["null", {"type": "array", "items": "string"}]},
        {
            "name": "visits",
            "type": {
                "type": "array",
                "items": [
                    "null",
                    {
                        "type": "record",
                        "name": "Visit",
                        "fields": [
                            {"name": "page", "type": "string"},
                            {"name": "steps", "type": {"type": "array", "items": "long"}},
                            {"name": "ok", "type": ["boolean", "null"]},
                        ],
                    },
                ],
            },
        },
    ],
}


def test_nested_arrays_and_null_records_inside_arrays(read: Read) -> None:
    """Lists of lists, a nullable list, and null records among a list's items (whose
    fields and inner lists must stay aligned with the items that are records)."""
    parsed = parse_schema(NESTED)
    rng = random.Random(3)

    def visit() -> dict[str, Any] | None:
        if rng.random() < 0.4:
            return None
        steps = [rng.randint(-(2**40), 2**40) for _ in range(rng.randint(0, 3))]
        return {
            "page": rng.choice(["/", "/a", "é"]),
            "steps": steps,
            "ok": rng.choice([None, True]),
        }

    records = [
        {
            "grid": [
                [rng.randint(-9, 9) for _ in range(rng.randint(0, 3))]
                for _ in range(rng.randint(0, 3))
            ],
            "maybe": rng.choice([None, [], ["x", "yz"]]),
            "visits": [visit() for _ in range(rng.randint(0, 4))],
        }
        for _ in range(300)
    ]
    payloads = []
    for record in records:
        out = io.BytesIO()
        out.write(b"\x00" + SCHEMA_ID.to_bytes(4, "big"))
        schemaless_writer(out, parsed, record)
        payloads.append(out.getvalue())
    got = read(payloads, SCHEMA_ID, compile_schema(NESTED))
    for name in ("grid", "maybe", "visits"):
        assert got[name].to_pylist() == [r[name] for r in records], name
