"""Event schemas: the shared `EventHeader` and `AuditCount`, loading, canonical JSON, compatibility.

Every event schema is an Avro record whose first field is `header`, of the one shared type
(docs/design.md §3.4)::

    {"type": "record", "name": "EventHeader", "namespace": "logbroker", "fields": [
      {"name": "timestamp",   "type": {"type": "long", "logicalType": "timestamp-millis"}},
      {"name": "server",      "type": "string"},
      {"name": "producer_id", "type": "string"},
      {"name": "seq",         "type": "long"}]}

A schema file may define it inline or name it (`"type": "logbroker.EventHeader"`): the name is
known everywhere. The audit's counts are events too, `logbroker.AuditCount` (docs/design.md §3.5).

Canonical JSON (what the registry stores at `/ids/<id>`, and what "the same schema" means) is
the schema made self-contained and written one way: every named type's name fully qualified
(no `namespace` key), defined inline where it is first used and named after that, a type
without attributes written as its bare name (`"long"`, not `{"type": "long"}`), keys sorted,
no whitespace. Unlike Avro's Parsing Canonical Form it keeps `default`, `doc`, `aliases`,
`order` and `logicalType`, because readers need the defaults to resolve old data.

Backward compatibility (a new version of a subject must be able to read the previous
version's data) follows Avro's schema resolution rules: fields matched by name or by the new
field's aliases; a field the new version adds needs a default; removed fields are skipped;
int -> long -> float -> double and string <-> bytes are promotions; an enum may only lose
symbols if the new one has a default; a union reads every branch the old type could write.
The refusal names the field path that breaks it.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastavro import parse_schema

from .errors import IncompatibleSchemaError, SchemaError

HEADER_FIELD = "header"
EVENT_HEADER_NAME = "logbroker.EventHeader"
AUDIT_COUNT_NAME = "logbroker.AuditCount"

# docs/design.md §3.4, exactly.
EVENT_HEADER_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "EventHeader",
    "namespace": "logbroker",
    "fields": [
        {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "server", "type": "string"},
        {"name": "producer_id", "type": "string"},
        {"name": "seq", "type": "long"},
    ],
}
HEADER_FIELDS = ("timestamp", "server", "producer_id", "seq")

# docs/design.md §3.5, exactly.
AUDIT_COUNT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "AuditCount",
    "namespace": "logbroker",
    "fields": [
        {"name": "header", "type": "logbroker.EventHeader"},
        {"name": "topic", "type": "string"},
        {"name": "tier", "type": "string"},
        {"name": "window_start", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "window_ms", "type": "long"},
        {"name": "count", "type": "long"},
    ],
}

PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
NAMED_KINDS = frozenset(("record", "error", "enum", "fixed"))
# Types a schema may name without defining them: the shared ones.
SHARED_TYPES: dict[str, dict[str, Any]] = {EVENT_HEADER_NAME: EVENT_HEADER_SCHEMA}


@dataclass(frozen=True, eq=False)
class EventSchema:
    """A valid event schema, self-contained, with what fastavro needs to read and write it.

    Two EventSchemas are equal when their canonical JSON is.
    """

    definition: dict[str, Any]  # the normalized JSON (see the module doc)
    canonical: str  # canonical JSON text, what the registry stores
    names: dict[str, dict[str, Any]] = field(repr=False)  # full name -> definition
    writer: Any = field(repr=False)  # fastavro's parsed schema (logical types on)
    reader: Any = field(repr=False)  # the same without logical types: timestamps stay ints

    @property
    def fullname(self) -> str:
        name: str = self.definition["name"]
        return name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EventSchema) and other.canonical == self.canonical

    def __hash__(self) -> int:
        return hash(self.canonical)


def canonical_json(definition: Any) -> str:
    """One text per schema: keys sorted, no whitespace (of an already normalized definition)."""
    return json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_event_schema(source: str | Mapping[str, Any], where: str = "schema") -> EventSchema:
    """An EventSchema from JSON text or a parsed dict; SchemaError says what is wrong and where.

    `where` names the source in errors (a file name, a registry path).
    """
    schema = parse_any_schema(source, where)
    check_event_schema(schema, where)
    return schema


def parse_any_schema(source: str | Mapping[str, Any], where: str = "schema") -> EventSchema:
    """Like parse_event_schema, without requiring the header (for sub-schemas and tests)."""
    if isinstance(source, str):
        try:
            raw = json.loads(source)
        except json.JSONDecodeError as exc:
            raise SchemaError(
                f"{where} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
    else:
        raw = copy.deepcopy(dict(source))
    names: dict[str, dict[str, Any]] = {}
    definition = _Normalizer(where, names).type(raw, "", "")
    if not isinstance(definition, dict) or definition.get("type") not in ("record", "error"):
        raise SchemaError(f"{where}: an event schema is an Avro record, not {_describe(raw)}")
    try:
        writer = parse_schema(copy.deepcopy(definition), {})
        reader = parse_schema(_without_logical_types(definition), {})
    except Exception as exc:  # fastavro raises several kinds; all mean "not valid Avro"
        raise SchemaError(f"{where} is not a valid Avro schema: {exc}") from None
    return EventSchema(definition, canonical_json(definition), names, writer, reader)


def load_schema_file(path: str | Path) -> EventSchema:
    """Read an .avsc file as an event schema; SchemaError names the file and the problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SchemaError(f"cannot read schema file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SchemaError(f"schema file {path} is not UTF-8 text: {exc.reason}") from None
    return parse_event_schema(text, f"schema file {path}")


def event_header_schema() -> EventSchema:
    """`logbroker.EventHeader` as a schema of its own (for reading the header alone)."""
    return parse_any_schema(EVENT_HEADER_SCHEMA, EVENT_HEADER_NAME)


def audit_count_schema() -> EventSchema:
    """`logbroker.AuditCount`, the audit's event (subject `_audit`)."""
    return parse_event_schema(AUDIT_COUNT_SCHEMA, AUDIT_COUNT_NAME)


@functools.cache
def _header_canonical() -> str:
    return canonical_json(event_header_schema().definition)


def check_event_schema(schema: EventSchema, where: str = "schema") -> None:
    """SchemaError unless the first field is `header` of type logbroker.EventHeader, as §3.4."""
    fields = schema.definition.get("fields", [])
    if not fields or fields[0].get("name") != HEADER_FIELD:
        first = f"{fields[0].get('name')!r}" if fields else "none (no fields)"
        raise SchemaError(
            f"{where}: record {schema.fullname} is not an event schema: its first field must be "
            f"'header' of type {EVENT_HEADER_NAME}, but the first field is {first}"
        )
    header_type = fields[0]["type"]
    if canonical_json(header_type) != _header_canonical():
        raise SchemaError(
            f"{where}: record {schema.fullname}: field 'header' must be of type "
            f"{EVENT_HEADER_NAME} exactly (fields timestamp: long timestamp-millis, server: "
            f"string, producer_id: string, seq: long), not {canonical_json(header_type)}"
        )


# -- normalizing ------------------------------------------------------------------------------


class _Normalizer:
    """Turns a schema as written into its normalized, self-contained definition."""

    def __init__(self, where: str, names: dict[str, dict[str, Any]]) -> None:
        self.where = where
        self.names = names

    def fail(self, path: str, problem: str) -> SchemaError:
        at = f" at {path}" if path else ""
        return SchemaError(f"{self.where} is not a valid Avro schema{at}: {problem}")

    def type(self, schema: Any, namespace: str, path: str) -> Any:
        if isinstance(schema, str):
            return self.reference(schema, namespace, path)
        if isinstance(schema, list):
            if not schema:
                raise self.fail(path, "a union needs at least one branch")
            return [self.type(branch, namespace, path) for branch in schema]
        if not isinstance(schema, dict):
            raise self.fail(path, f"a type is a name, an object or a list, not {schema!r}")
        kind = schema.get("type")
        if kind is None:
            raise self.fail(path, f"the object {_describe(schema)} has no 'type'")
        if isinstance(kind, (dict, list)):  # {"type": {...}}: a wrapped type
            return self.type(kind, namespace, path)
        if not isinstance(kind, str):
            raise self.fail(path, f"'type' must be a string, not {kind!r}")
        if kind in PRIMITIVES:
            rest = {k: v for k, v in schema.items() if k != "type"}
            return {"type": kind, **rest} if rest else kind
        if kind in NAMED_KINDS:
            return self.named(schema, kind, namespace, path)
        if kind == "array":
            if "items" not in schema:
                raise self.fail(path, "an array needs 'items'")
            return {**schema, "items": self.type(schema["items"], namespace, f"{path}[]")}
        if kind == "map":
            if "values" not in schema:
                raise self.fail(path, "a map needs 'values'")
            return {**schema, "values": self.type(schema["values"], namespace, f"{path}{{}}")}
        if len(schema) == 1:  # {"type": "some.Name"}: a reference written as an object
            return self.reference(kind, namespace, path)
        raise self.fail(path, f"unknown type {kind!r}")

    def reference(self, name: str, namespace: str, path: str) -> Any:
        if name in PRIMITIVES:
            return name
        candidates = [name] if "." in name else [f"{namespace}.{name}", name]
        for full in candidates:
            if full in self.names:
                return full
        for full in candidates:
            if full in SHARED_TYPES:  # first use of a shared type: define it here
                return self.type(copy.deepcopy(SHARED_TYPES[full]), "", path)
        raise self.fail(path, f"unknown type {name!r}")

    def named(self, schema: dict[str, Any], kind: str, namespace: str, path: str) -> Any:
        name = schema.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail(path, f"a {kind} needs a 'name'")
        if "." in name:
            full = name
        else:
            ns = schema.get("namespace", namespace)
            if ns is not None and not isinstance(ns, str):
                raise self.fail(path, f"'namespace' of {name} must be a string")
            full = f"{ns}.{name}" if ns else name
        if full in self.names:
            raise self.fail(path, f"the type {full} is defined twice")
        inner_ns = full.rpartition(".")[0]
        out: dict[str, Any] = {k: v for k, v in schema.items() if k != "namespace"}
        out["name"] = full
        if "aliases" in out:
            out["aliases"] = [
                a if "." in a or not inner_ns else f"{inner_ns}.{a}" for a in out["aliases"]
            ]
        self.names[full] = out  # before the fields: a record may refer to itself
        if kind in ("record", "error"):
            fields = schema.get("fields")
            if not isinstance(fields, list):
                raise self.fail(path, f"record {full} needs a list of 'fields'")
            seen: set[str] = set()
            normalized = []
            for i, f in enumerate(fields):
                if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                    raise self.fail(path, f"field {i} of record {full} has no name")
                fname = f["name"]
                if fname in seen:
                    raise self.fail(path, f"record {full} has two fields named {fname!r}")
                seen.add(fname)
                if "type" not in f:
                    raise self.fail(_join(path, fname), "the field has no 'type'")
                normalized.append({**f, "type": self.type(f["type"], inner_ns, _join(path, fname))})
            out["fields"] = normalized
        elif kind == "enum":
            symbols = schema.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
                raise self.fail(path, f"enum {full} needs a list of string 'symbols'")
        elif not isinstance(schema.get("size"), int):
            raise self.fail(path, f"fixed {full} needs an integer 'size'")
        return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _describe(schema: Any) -> str:
    text = json.dumps(schema) if not isinstance(schema, str) else repr(schema)
    return text if len(text) <= 80 else text[:77] + "..."


def _without_logical_types(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_without_logical_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if len(out) == 1 and isinstance(out.get("type"), str) and out["type"] in PRIMITIVES:
        return out["type"]
    return out


# -- backward compatibility -------------------------------------------------------------------

_PROMOTIONS = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}


def check_backward_compatible(new: EventSchema, old: EventSchema, what: str = "") -> None:
    """IncompatibleSchemaError unless readers of `new` can read data written with `old`.

    `what` names the pair in the message ("subject 'page_views' version 2").
    """
    problem = _Resolution(new.names, old.names).check(new.definition, old.definition, "")
    if problem is not None:
        path, reason = problem
        subject = f"{what}: " if what else ""
        where = f"field {path!r}" if path else f"record {new.fullname}"
        raise IncompatibleSchemaError(
            f"{subject}not backward compatible with the previous version: {where}: {reason}",
            path,
        )


class _Resolution:
    """Avro's resolution rules, reader (new) against writer (old); the first problem found."""

    def __init__(self, reader_names: dict[str, Any], writer_names: dict[str, Any]) -> None:
        self.reader_names = reader_names
        self.writer_names = writer_names
        self.assumed: set[tuple[str, str]] = set()  # record pairs being checked (recursion)

    def check(self, reader: Any, writer: Any, path: str) -> tuple[str, str] | None:
        reader = self._resolve(reader, self.reader_names)
        writer = self._resolve(writer, self.writer_names)
        if isinstance(writer, list):
            for branch in writer:
                problem = self.check(reader, branch, path)
                if problem is not None:
                    if not isinstance(reader, list) and problem[0] != path:
                        return problem
                    return (
                        path,
                        f"the old type's union branch {_kind(branch)} cannot be read as "
                        f"{_kind(reader)}",
                    )
            return None
        if isinstance(reader, list):
            if any(self.check(branch, writer, path) is None for branch in reader):
                return None
            return (
                path,
                f"the old type {_kind(writer)} is not readable by the new union {_kind(reader)}",
            )
        r_kind, w_kind = _base(reader), _base(writer)
        if r_kind != w_kind:
            if r_kind in _PROMOTIONS.get(w_kind, ()):
                return None
            return path, f"type changed from {w_kind} to {r_kind}, which Avro does not promote"
        if r_kind in PRIMITIVES:
            return None
        if r_kind in ("record", "error", "enum", "fixed"):
            r_short, w_short = _short(reader["name"]), _short(writer["name"])
            aliases = {_short(a) for a in reader.get("aliases", [])}
            if r_short != w_short and w_short not in aliases:
                return path, f"{r_kind} name changed from {writer['name']} to {reader['name']}"
        if r_kind in ("record", "error"):
            return self._record(reader, writer, path)
        if r_kind == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return path, f"enum symbols {missing} were removed and the enum has no default"
            return None
        if r_kind == "fixed":
            if reader["size"] != writer["size"]:
                return path, f"fixed size changed from {writer['size']} to {reader['size']}"
            return None
        if r_kind == "array":
            return self.check(reader["items"], writer["items"], f"{path}[]")
        if r_kind == "map":
            return self.check(reader["values"], writer["values"], f"{path}{{}}")
        return path, f"unknown type {r_kind}"

    def _record(self, reader: Any, writer: Any, path: str) -> tuple[str, str] | None:
        pair = (reader["name"], writer["name"])
        if pair in self.assumed:
            return None
        self.assumed.add(pair)
        written = {f["name"]: f for f in writer["fields"]}
        for f in reader["fields"]:
            here = _join(path, f["name"])
            match = next(
                (written[n] for n in [f["name"], *f.get("aliases", [])] if n in written), None
            )
            if match is None:
                if "default" not in f:
                    return (
                        here,
                        "added without a default, so readers of the new version cannot fill "
                        "it in data written with the previous one",
                    )
                continue
            problem = self.check(f["type"], match["type"], here)
            if problem is not None:
                return problem
        return None

    @staticmethod
    def _resolve(schema: Any, names: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return names[schema]
        return schema


def _base(schema: Any) -> str:
    kind: str = schema if isinstance(schema, str) else schema["type"]
    return "record" if kind == "error" else kind


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_kind(s) for s in schema) + "]"
    if isinstance(schema, str):
        return schema
    if schema.get("type") in NAMED_KINDS:
        return str(schema["name"])
    return str(schema.get("type"))
