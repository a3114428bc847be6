"""Where a record does not fit its schema: the field path and what is wrong, for error messages.

fastavro's writer says "must be string on field user_id" or "an integer is required on field
seq on field header on field header"; a user wants `header.seq: expected long, got 'abc'`. The
encoder writes with fastavro and only when that fails asks `first_misfit` why, so the check
costs nothing on the fast path. It walks a normalized definition (schemas.py) the way Avro's
writer would: records are dicts (a missing field needs a default, an unknown field is refused),
unions take the first branch that fits, int and long are range-checked.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def first_misfit(
    schema: Any, names: Mapping[str, Any], datum: Any, path: str = ""
) -> tuple[str, str] | None:
    """(field path, problem) of the first part of `datum` that `schema` cannot write, or None."""
    if isinstance(schema, str) and schema in names:
        schema = names[schema]
    if isinstance(schema, list):
        for branch in schema:
            if first_misfit(branch, names, datum, path) is None:
                return None
        kinds = ", ".join(_name(b) for b in schema)
        return path, f"{_show(datum)} fits none of the union's types [{kinds}]"
    kind = schema if isinstance(schema, str) else schema["type"]
    logical = None if isinstance(schema, str) else schema.get("logicalType")
    if kind in ("record", "error"):
        if not isinstance(datum, Mapping):
            return path, f"expected a record ({schema['name']}), got {_show(datum)}"
        declared = {f["name"] for f in schema["fields"]}
        for field in schema["fields"]:
            here = f"{path}.{field['name']}" if path else field["name"]
            if field["name"] not in datum:
                if "default" in field:
                    continue
                return here, "missing, and the schema gives no default"
            problem = first_misfit(field["type"], names, datum[field["name"]], here)
            if problem is not None:
                return problem
        extra = sorted(str(k) for k in datum if k not in declared)
        if extra:
            where = f"{path}.{extra[0]}" if path else extra[0]
            return where, f"not a field of {schema['name']}"
        return None
    if kind == "array":
        if not isinstance(datum, list | tuple):
            return path, f"expected an array, got {_show(datum)}"
        for i, item in enumerate(datum):
            problem = first_misfit(schema["items"], names, item, f"{path}[{i}]")
            if problem is not None:
                return problem
        return None
    if kind == "map":
        if not isinstance(datum, Mapping):
            return path, f"expected a map, got {_show(datum)}"
        for key, value in datum.items():
            if not isinstance(key, str):
                return path, f"map keys are strings, got {_show(key)}"
            problem = first_misfit(schema["values"], names, value, f"{path}{{{key}}}")
            if problem is not None:
                return problem
        return None
    if kind == "enum":
        if datum not in schema["symbols"]:
            return path, f"{_show(datum)} is not one of the symbols {schema['symbols']}"
        return None
    if kind == "fixed":
        if not isinstance(datum, bytes) or len(datum) != schema["size"]:
            return path, f"expected {schema['size']} bytes, got {_show(datum)}"
        return None
    return _primitive(kind, logical, datum, path)


def _primitive(kind: str, logical: str | None, datum: Any, path: str) -> tuple[str, str] | None:
    ok: bool
    if kind == "null":
        ok = datum is None
    elif kind == "boolean":
        ok = isinstance(datum, bool)
    elif kind in _RANGES:
        if logical and isinstance(datum, datetime.datetime | datetime.date | datetime.time):
            return None
        ok = isinstance(datum, int) and not isinstance(datum, bool)
        low, high = _RANGES[kind]
        if ok and not low <= datum <= high:
            return path, f"{datum} is out of the range of an Avro {kind}"
    elif kind in ("float", "double"):
        ok = isinstance(datum, int | float) and not isinstance(datum, bool)
    elif kind == "string":
        ok = isinstance(datum, str)
    elif kind == "bytes":
        ok = isinstance(datum, bytes | bytearray)
    else:
        return path, f"unknown type {kind}"
    return None if ok else (path, f"expected {kind}, got {_show(datum)}")


def _name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    return str(schema.get("name") or schema["type"])


def _show(datum: Any) -> str:
    text = repr(datum)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(datum).__name__})"
