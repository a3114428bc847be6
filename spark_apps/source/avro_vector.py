"""Columnar Avro decoding: a batch of events straight into Arrow arrays, a field at a time.

Why: serde's per-event path (fastavro) builds a dict, and an object per field, for every
event (~10 us each, most of a load's CPU), and the columns are then built from those dicts.
This reads all events of a batch at once with numpy over one buffer of their bodies: one
varint step per byte position, across every event, and no Python object per event.

It reads only what it is sure of, and says so by raising `NotColumnar` otherwise; the caller
then decodes the batch by serde's path, which stays the reference (bad records keep serde's
reasons). So: every payload framed with the reader's own schema id (older writers' events
need Avro's resolution: serde), and no damage of any kind (truncated, bytes left over, a
union branch or enum index out of range, a boolean that is not 0 or 1, an int out of range,
invalid UTF-8). Types: boolean, int, long, float, double, bytes, string, enum, fixed,
record, array, a union of null and one type; logical types read as their base types, as
serde's reader does (the caller converts top-level timestamps and dates). Not: map, and
decimal at the top level.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

PREFIX_SIZE = 5  # magic byte 0, schema id (4 bytes, big-endian): logbroker.serde framing

_PRIMITIVE_TYPES = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


class NotColumnar(Exception):
    """This batch (or schema) is not for the columnar path: decode it by serde's."""


class Node:
    """A compiled Avro type: its kind, the Arrow type it reads to, and its parts."""

    def __init__(self, kind: str, arrow: pa.DataType, **parts: Any) -> None:
        self.kind = kind
        self.arrow = arrow
        self.parts = parts


def compile_schema(node: Any, named: dict[str, Node] | None = None) -> Node:
    """The reading plan of an Avro schema node (raises NotColumnar where unsupported)."""
    named = {} if named is None else named
    if isinstance(node, str):
        if node in _PRIMITIVE_TYPES:
            return Node(node, _PRIMITIVE_TYPES[node])
        found = named.get(node) or next(
            (n for k, n in named.items() if k.rsplit(".", 1)[-1] == node.rsplit(".", 1)[-1]),
            None,
        )
        if found is None:
            raise NotColumnar(f"unknown type {node!r}")
        return found
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) != 1 or len(node) != 2:
            raise NotColumnar("a union other than null and one type")
        inner = compile_schema(branches[0], named)
        return Node("nullable", inner.arrow, inner=inner, value_branch=node.index(branches[0]))
    if not isinstance(node, dict):
        raise NotColumnar(f"not an Avro schema: {node!r}")
    kind = node.get("type")
    if kind == "record":
        result = Node("record", pa.null(), fields=[])  # registered first: it may recur
        _register(node, result, named)
        fields = [(f["name"], compile_schema(f["type"], named)) for f in node["fields"]]
        result.parts["fields"] = fields
        result.arrow = pa.struct([pa.field(name, n.arrow) for name, n in fields])
        return result
    if kind == "enum":
        result = Node("enum", pa.string(), symbols=pa.array(node["symbols"], pa.string()))
    elif kind == "fixed":
        result = Node("fixed", pa.binary(), size=int(node["size"]))
    elif kind == "array":
        items = compile_schema(node["items"], named)
        return Node("array", pa.list_(pa.field("element", items.arrow)), items=items)
    elif kind == "map":
        raise NotColumnar("map")
    else:
        return compile_schema(kind, named)  # {"type": "long", "logicalType": ...} and the like
    _register(node, result, named)
    return result


def _register(node: dict[str, Any], compiled: Node, named: dict[str, Node]) -> None:
    name, namespace = node.get("name"), node.get("namespace")
    if name:
        named[f"{namespace}.{name}" if namespace and "." not in name else name] = compiled


def framed_payloads(values: pa.BinaryArray) -> tuple[pa.Buffer, np.ndarray, np.ndarray]:
    """A binary column's data buffer and where each payload starts and ends in it (int64);
    NotColumnar for no payloads or one shorter than the framing."""
    n = len(values)
    _, offsets_buffer, data_buffer = values.buffers()
    if n == 0 or data_buffer is None:
        raise NotColumnar("empty batch")
    offsets = np.frombuffer(offsets_buffer, np.int32)[values.offset : values.offset + n + 1]
    starts = offsets[:-1].astype(np.int64)
    ends = offsets[1:].astype(np.int64)
    if int((ends - starts).min()) < PREFIX_SIZE:
        raise NotColumnar("a payload shorter than the framing")
    return data_buffer, starts, ends


class ColumnarBatch:
    """The bodies of one batch's payloads in one buffer, a read position per event."""

    def __init__(self, payloads: Sequence[bytes] | pa.BinaryArray, schema_id: int) -> None:
        values = (
            payloads if isinstance(payloads, pa.BinaryArray) else pa.array(payloads, pa.binary())
        )
        data, start, self.end = framed_payloads(values)
        self.buf = np.frombuffer(data, np.uint8)
        prefix = self.buf[start[:, None] + np.arange(PREFIX_SIZE)].astype(np.int64)
        ids = (prefix[:, 1] << 24) | (prefix[:, 2] << 16) | (prefix[:, 3] << 8) | prefix[:, 4]
        if prefix[:, 0].any() or (ids != schema_id).any():
            raise NotColumnar("not every payload is framed with the reader's schema id")
        self.pos = start + PREFIX_SIZE
        self.last = len(self.buf) - 1

    def finish(self) -> None:
        if (self.pos != self.end).any():
            raise NotColumnar("bytes left over after an event")

    # -- primitives, each over the events `sel` (indexes), advancing their positions --

    def long(self, sel: np.ndarray) -> np.ndarray:
        pos, end = self.pos[sel], self.end[sel]
        value = np.zeros(len(sel), np.uint64)
        size = np.zeros(len(sel), np.int64)
        done = np.zeros(len(sel), bool)
        for k in range(10):
            at = pos + k
            if (~done & (at >= end)).any():
                raise NotColumnar("truncated varint")
            byte = self.buf[np.minimum(at, self.last)]
            live = ~done
            value |= np.where(live, (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k), 0)
            ends_here = live & (byte < 0x80)
            size[ends_here] = k + 1
            done |= ends_here
            if done.all():
                break
        else:
            raise NotColumnar("varint longer than 10 bytes")
        self.pos[sel] = pos + size
        return (value >> np.uint64(1)).view(np.int64) ^ -(value & np.uint64(1)).view(np.int64)

    def int(self, sel: np.ndarray) -> np.ndarray:
        value = self.long(sel)
        if len(value) and (value.min() < -(2**31) or value.max() >= 2**31):
            raise NotColumnar("int out of range")
        return value.astype(np.int32)

    # builtins.int: `int` in this class is the method reading Avro ints
    def fixed_bytes(self, sel: np.ndarray, size: builtins.int) -> np.ndarray:
        """A (len(sel), size) array of the next `size` bytes of each event."""
        pos: np.ndarray = self.pos[sel]
        if ((pos + size) > self.end[sel]).any():
            raise NotColumnar("truncated")
        self.pos[sel] = pos + size
        return self.buf[pos[:, None] + np.arange(size)]

    def binary(self, sel: np.ndarray, arrow: pa.DataType) -> pa.Array:
        lengths = self.long(sel)
        pos = self.pos[sel]
        if (lengths < 0).any() or ((pos + lengths) > self.end[sel]).any():
            raise NotColumnar("bad length")
        self.pos[sel] = pos + lengths
        return _variable(self.buf, pos, lengths, arrow)

    # -- types --

    def read(self, node: Node, sel: np.ndarray) -> pa.Array:
        kind = node.kind
        if kind == "long":
            return pa.array(self.long(sel), pa.int64())
        if kind in ("string", "bytes"):
            return self.binary(sel, node.arrow)
        if kind == "int":
            return pa.array(self.int(sel), pa.int32())
        if kind == "record":
            children = [self.read(child, sel) for _, child in node.parts["fields"]]
            return pa.StructArray.from_arrays(children, fields=list(node.arrow))
        if kind == "nullable":
            return self._nullable(node, sel)
        if kind == "array":
            return self._array(node, sel)
        if kind == "boolean":
            byte = self.fixed_bytes(sel, 1)[:, 0]
            if (byte > 1).any():
                raise NotColumnar("boolean not 0 or 1")
            return pa.array(byte == 1, pa.bool_())
        if kind in ("float", "double"):
            size, dtype = (4, "<f4") if kind == "float" else (8, "<f8")
            raw = np.ascontiguousarray(self.fixed_bytes(sel, size))
            return pa.array(raw.view(dtype).reshape(-1), node.arrow)
        if kind == "enum":
            index = self.long(sel)
            symbols = node.parts["symbols"]
            if len(index) and (index.min() < 0 or index.max() >= len(symbols)):
                raise NotColumnar("enum index out of range")
            return symbols.take(pa.array(index))
        if kind == "fixed":
            size = node.parts["size"]
            pos = self.pos[sel]
            self.fixed_bytes(sel, size)
            return _variable(self.buf, pos, np.full(len(sel), size, np.int64), pa.binary())
        raise NotColumnar(f"type {kind}")

    def _nullable(self, node: Node, sel: np.ndarray) -> pa.Array:
        branch = self.long(sel)
        if len(branch) and (branch.min() < 0 or branch.max() > 1):
            raise NotColumnar("union branch out of range")
        has_value = branch == node.parts["value_branch"]
        values = self.read(node.parts["inner"], sel[has_value])
        if values.null_count == 0 and len(values) == len(sel):
            return values
        # values where there is one, null elsewhere: a take from [values..., null]
        where = np.full(len(sel), len(values), np.int64)
        where[has_value] = np.arange(len(values))
        padded = pa.concat_arrays([values, pa.nulls(1, values.type)])
        return padded.take(pa.array(where))

    def _array(self, node: Node, sel: np.ndarray) -> pa.Array:
        """Blocks of items until a count of 0; item j of every event in one read."""
        counts = np.zeros(len(sel), np.int64)
        parts: list[pa.Array] = []
        owners: list[np.ndarray] = []  # per part: the events (indexes into sel)
        slots: list[np.ndarray] = []  # per part: the item's place in its event's list
        active = np.arange(len(sel))
        while active.size:
            block = self.long(sel[active])
            negative = block < 0
            if negative.any():  # a negative count is followed by the block's size in bytes
                block = np.abs(block)
                self.long(sel[active[negative]])
            if (block > self.end[sel[active]] - self.pos[sel[active]]).any():
                raise NotColumnar("array block longer than the event")
            active, block = active[block > 0], block[block > 0]
            for j in range(int(block.max()) if block.size else 0):
                who = active[block > j]
                parts.append(self.read(node.parts["items"], sel[who]))
                owners.append(who)
                slots.append(counts[who] + j)
            counts[active] += block
        offsets = np.zeros(len(sel) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        item_type = node.parts["items"].arrow
        if parts:
            target = offsets[np.concatenate(owners)] + np.concatenate(slots)
            values = pa.concat_arrays(parts).take(pa.array(np.argsort(target, kind="stable")))
        else:
            values = pa.array([], item_type)
        if offsets[-1] >= 2**31:
            raise NotColumnar("list too large")
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values, type=node.arrow)


def _variable(
    buf: np.ndarray, pos: np.ndarray, lengths: np.ndarray, arrow: pa.DataType
) -> pa.Array:
    """A string or binary array of the slices buf[pos:pos+lengths] (UTF-8 checked)."""
    offsets = np.zeros(len(pos) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31 or len(buf) >= 2**31:
        raise NotColumnar("batch too large")
    # The byte-per-byte index arrays in int32: a third of the time of int64 ones (they are
    # the size of the column's data; measured 540 -> 155 ns per 50-byte string).
    gather = np.repeat((pos - offsets[:-1]).astype(np.int32), lengths) + np.arange(
        total, dtype=np.int32
    )
    data = buf[gather]
    return utf8_checked(
        pa.Array.from_buffers(
            arrow, len(pos), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
        )
    )


def utf8_checked(array: pa.Array) -> pa.Array:
    """`array`, once a string array's bytes are known to be UTF-8 (NotColumnar if not)."""
    if array.type == pa.string():
        try:
            array.validate(full=True)  # UTF-8, as fastavro's strict decoding
        except pa.ArrowInvalid as exc:
            raise NotColumnar("invalid UTF-8") from exc
    return array


def read_columns(
    payloads: Sequence[bytes] | pa.BinaryArray, schema_id: int, plan: Node
) -> dict[str, pa.Array]:
    """Top-level field name -> its Arrow array (base types), for all payloads (a list, or a
    binary column: a chunk's `values`), or raises NotColumnar (then nothing was decided: use
    serde's path for the whole batch)."""
    batch = ColumnarBatch(payloads, schema_id)
    sel = np.arange(len(payloads))
    out = {name: batch.read(node, sel) for name, node in plan.parts["fields"]}
    batch.finish()
    return out
