"""Event schemas: the shared types as docs/design.md §3.4/§3.5 wrote them, canonical JSON, bad files,
and Avro's resolution rules as the backward-compatibility check. No servers needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logbroker.serde import schemas
from logbroker.serde.errors import IncompatibleSchemaError, SchemaError
from logbroker.serde.schemas import (
    check_backward_compatible,
    load_schema_file,
    parse_any_schema,
    parse_event_schema,
)

SCHEMAS = Path(__file__).resolve().parents[2] / "include" / "schemas"

# Copied from docs/design.md §3.4 and §3.5 by hand, not from the code under test.
DESIGN_HEADER = """
{"type": "record", "name": "EventHeader", "namespace": "logbroker", "fields": [
  {"name": "timestamp",   "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "server",      "type": "string"},
  {"name": "producer_id", "type": "string"},
  {"name": "seq",         "type": "long"}]}
"""
DESIGN_AUDIT = """
{"type": "record", "name": "AuditCount", "namespace": "logbroker", "fields": [
  {"name": "header",       "type": "logbroker.EventHeader"},
  {"name": "topic",        "type": "string"},
  {"name": "tier",         "type": "string"},
  {"name": "window_start", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "window_ms",    "type": "long"},
  {"name": "count",        "type": "long"}]}
"""


def event(*fields: dict, name: str = "PageView", namespace: str = "demo") -> dict:
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "fields": [{"name": "header", "type": "logbroker.EventHeader"}, *fields],
    }


def test_shared_schemas_are_designs():
    assert json.loads(DESIGN_HEADER) == schemas.EVENT_HEADER_SCHEMA
    assert json.loads(DESIGN_AUDIT) == schemas.AUDIT_COUNT_SCHEMA
    assert json.loads((SCHEMAS / "event_header.avsc").read_text()) == json.loads(DESIGN_HEADER)
    assert load_schema_file(SCHEMAS / "audit_count.avsc") == schemas.audit_count_schema()


def test_shipped_event_schemas_load():
    loaded = {
        p.stem: load_schema_file(p) for p in SCHEMAS.glob("*.avsc") if p.stem != "event_header"
    }
    assert set(loaded) == {"page_views", "searches", "ad_clicks", "audit_count"}
    for schema in loaded.values():
        assert schema.definition["fields"][0]["name"] == "header"


def test_canonical_json_is_one_text_per_schema():
    by_name = parse_event_schema(event({"name": "page", "type": "string"}))
    inline = parse_event_schema(
        {
            "fields": [
                {"type": json.loads(DESIGN_HEADER), "name": "header"},
                {"name": "page", "type": {"type": "string"}},
            ],
            "name": "demo.PageView",
            "type": "record",
        }
    )
    assert by_name == inline
    assert by_name.canonical == inline.canonical
    assert " " not in by_name.canonical and '"namespace"' not in by_name.canonical
    # what readers need survives, unlike Avro's Parsing Canonical Form
    with_default = parse_event_schema(
        event({"name": "page", "type": "string", "default": "/", "doc": "path"})
    )
    assert '"default":"/"' in with_default.canonical and '"doc":"path"' in with_default.canonical
    assert '"logicalType":"timestamp-millis"' in by_name.canonical
    # the canonical text parses back to the same schema
    assert parse_event_schema(by_name.canonical) == by_name


def test_nested_names_are_fully_qualified_and_referenced_after_first_use():
    schema = parse_event_schema(
        event(
            {
                "name": "a",
                "type": {
                    "type": "record",
                    "name": "Point",
                    "fields": [{"name": "x", "type": "int"}],
                },
            },
            {"name": "b", "type": "Point"},
            {"name": "c", "type": {"type": "enum", "name": "other.Color", "symbols": ["RED"]}},
        )
    )
    fields = schema.definition["fields"]
    assert fields[1]["type"]["name"] == "demo.Point"
    assert fields[2]["type"] == "demo.Point"
    assert fields[3]["type"]["name"] == "other.Color"


def test_a_file_that_is_not_json_names_file_and_place(tmp_path):
    bad = tmp_path / "bad.avsc"
    bad.write_text('{"type": "record",\n "name": oops}')
    with pytest.raises(
        SchemaError, match=r"schema file .*bad.avsc is not JSON: .* line 2 column 10"
    ):
        load_schema_file(bad)


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (event({"name": "page", "type": "strin"}), r"at page: unknown type 'strin'"),
        (event({"name": "n", "type": "int", "default": "x"}), r"Default value <x> must match"),
        (event({"name": "n"}), r"at n: the field has no 'type'"),
        ({"type": "record", "name": "X"}, r"record X needs a list of 'fields'"),
        (event({"name": "e", "type": {"type": "enum", "name": "E"}}), r"enum demo.E needs"),
        (
            event({"name": "a", "type": "int"}, {"name": "a", "type": "long"}),
            "two fields named 'a'",
        ),
        ("[]", r"a union needs at least one branch"),
    ],
)
def test_invalid_avro_is_refused_with_the_problem(tmp_path, schema, problem):
    path = tmp_path / "x.avsc"
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema))
    with pytest.raises(SchemaError, match=problem) as caught:
        load_schema_file(path)
    assert str(path) in str(caught.value)


def test_an_event_schema_starts_with_the_header():
    with pytest.raises(SchemaError, match=r"first field must be 'header'.*first field is 'page'"):
        parse_event_schema(
            {"type": "record", "name": "X", "fields": [{"name": "page", "type": "string"}]}
        )
    wrong = json.loads(DESIGN_HEADER)
    wrong["fields"][3]["type"] = "int"
    with pytest.raises(SchemaError, match=r"field 'header' must be of type logbroker.EventHeader"):
        parse_event_schema(
            {"type": "record", "name": "X", "fields": [{"name": "header", "type": wrong}]}
        )
    with pytest.raises(SchemaError, match=r"is an Avro record, not"):
        parse_event_schema('"string"')


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(SchemaError, match=r"cannot read schema file .*nope.avsc"):
        load_schema_file(tmp_path / "nope.avsc")


# -- backward compatibility: the new version reads the old version's data -------------------


def compatible(new: dict, old: dict) -> None:
    check_backward_compatible(parse_event_schema(new), parse_event_schema(old), "subject 's'")


OLD = event({"name": "page", "type": "string"}, {"name": "ms", "type": "int"})


@pytest.mark.parametrize(
    "new",
    [
        OLD,
        event({"name": "page", "type": "string"}),  # a field removed
        event({"name": "page", "type": "string"}, {"name": "ms", "type": "long"}),  # promoted
        event({"name": "page", "type": "bytes"}, {"name": "ms", "type": "double"}),
        event(
            {"name": "page", "type": "string"},
            {"name": "ms", "type": "int"},
            {
                "name": "referrer",
                "type": ["null", "string"],
                "default": None,
            },  # added with a default
        ),
        event({"name": "page", "type": ["null", "string"]}, {"name": "ms", "type": "int"}),
        event(
            {"name": "path", "type": "string", "aliases": ["page"]}, {"name": "ms", "type": "int"}
        ),
    ],
)
def test_compatible_versions_pass(new):
    compatible(new, OLD)


@pytest.mark.parametrize(
    ("new", "field", "reason"),
    [
        (
            event(
                {"name": "page", "type": "string"},
                {"name": "ms", "type": "int"},
                {"name": "user", "type": "string"},
            ),
            "user",
            "added without a default",
        ),
        (
            event({"name": "page", "type": "string"}, {"name": "ms", "type": "string"}),
            "ms",
            "from int to string",
        ),
        (
            event({"name": "page", "type": "int"}, {"name": "ms", "type": "int"}),
            "page",
            "from string to int",
        ),
        (
            event({"name": "page", "type": ["null", "int"]}, {"name": "ms", "type": "int"}),
            "page",
            "not readable by the new union",
        ),
    ],
)
def test_incompatible_versions_name_the_field(new, field, reason):
    with pytest.raises(IncompatibleSchemaError, match=reason) as caught:
        compatible(new, OLD)
    assert caught.value.field == field
    assert f"field {field!r}" in str(caught.value) and "subject 's'" in str(caught.value)


def test_nested_fields_are_named_by_path():
    point = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "long"}]}
    old = event({"name": "spots", "type": {"type": "array", "items": point}})
    point2 = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}
    with pytest.raises(IncompatibleSchemaError) as caught:
        compatible(event({"name": "spots", "type": {"type": "array", "items": point2}}), old)
    assert caught.value.field == "spots[].x"
    new_header = json.loads(DESIGN_HEADER)
    assert parse_any_schema(new_header).fullname == "logbroker.EventHeader"


def test_enums_and_unions():
    colors = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
    old = event({"name": "c", "type": colors})
    fewer = {"type": "enum", "name": "Color", "symbols": ["RED"]}
    with pytest.raises(IncompatibleSchemaError, match=r"\['GREEN'\] were removed") as caught:
        compatible(event({"name": "c", "type": fewer}), old)
    assert caught.value.field == "c"
    compatible(event({"name": "c", "type": {**fewer, "default": "RED"}}), old)
    compatible(event({"name": "c", "type": {**colors, "symbols": ["RED", "GREEN", "BLUE"]}}), old)
    # a union the old version wrote must be read branch by branch
    old_union = event({"name": "v", "type": ["null", "string", "int"]})
    compatible(event({"name": "v", "type": ["null", "string", "long"]}), old_union)
    with pytest.raises(IncompatibleSchemaError, match=r"union branch int") as caught:
        compatible(event({"name": "v", "type": ["null", "string"]}), old_union)
    assert caught.value.field == "v"


def test_recursive_records_terminate():
    node = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "next", "type": ["null", "Node"], "default": None},
            {"name": "v", "type": "int"},
        ],
    }
    compatible(event({"name": "list", "type": node}), event({"name": "list", "type": node}))
