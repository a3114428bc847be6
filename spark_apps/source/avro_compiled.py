"""Columnar Avro decoding in compiled code: a batch of events into Arrow arrays, event by event.

The plan of a reader schema (avro_vector.compile_schema's Node tree) becomes a flat program,
one op per value read, in the order Avro writes them (records are flattened: they read
nothing of their own). Compiled with numba, one pass over each event's body runs the
program and writes every value to its column ("slot"):

    op kinds   LONG INT BOOLEAN FLOAT DOUBLE BYTES (string, bytes) ENUM FIXED: one value
               ARRAY ... ARRAY_END: a list; the ops between read one item, once per item
               NULL_RECORD: a record in a union with null; when null, every slot inside it
               gets a null placeholder (so that every column of the record stays as long)
    per op     slot, nullable (a union with null around it), value branch, size (fixed)
               or symbol count (enum), and for ARRAY/ARRAY_END/NULL_RECORD the op to go to

    per slot   vals   int64: the value (longs, ints, booleans, enum indexes), the bits of a
                      float or double, a byte position in the batch (bytes, strings, fixed),
                      or a list's item count (arrays)
               lens   int64: the length of a bytes, string or fixed value
               valid  uint8: 0 where the union held null
               count  how many values the slot holds (top-level slots: one per event; the
                      slots inside an array: one per item)

Why: avro_vector reads a field of every event at a time with numpy (~1 us per event for a
dozen fields, most of it in per-field numpy calls); this costs ~0.1-0.2 us per event. The
contract is avro_vector's: the same arrays, and NotColumnar for whatever it is not sure of
(damage of any kind, unsupported types: maps, fixed of size 0); the caller then reads the
batch by serde's path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numba
import numpy as np
import pyarrow as pa
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from spark_apps.source.avro_vector import (
    PREFIX_SIZE,
    Node,
    NotColumnar,
    framed_payloads,
)
from spark_apps.source.entry_scan import byte_array

LONG, INT, BOOLEAN, FLOAT, DOUBLE, BYTES, ENUM, FIXED, ARRAY, ARRAY_END, NULL_RECORD = range(11)
_LEAF_KINDS = {
    "long": LONG,
    "int": INT,
    "boolean": BOOLEAN,
    "float": FLOAT,
    "double": DOUBLE,
    "bytes": BYTES,
    "string": BYTES,
    "enum": ENUM,
    "fixed": FIXED,
}
# What _run returns as its first value, and what NotColumnar then says
_REASONS = {
    1: "truncated, or a varint longer than 10 bytes",
    3: "union branch out of range",
    4: "int out of range",
    5: "boolean not 0 or 1",
    6: "enum index out of range",
    7: "bad length",
    8: "bytes left over after an event",
    9: "framing: not the reader's schema id",
}

_jit = numba.njit(cache=True, nogil=True)
# The compiled functions' annotations are for mypy; numba types a function by its arguments.
# Compiled arithmetic makes np.int64 scalars of Python ints, hence `int | np.int64`.


class Ops(NamedTuple):
    """A Program as int64 arrays: per op its kind, slot, nullable, branch, extra and jump;
    fill[fill_at[op]:fill_at[op + 1]] the slots a NULL_RECORD op fills when null."""

    kind: np.ndarray
    slot: np.ndarray
    nullable: np.ndarray
    branch: np.ndarray
    extra: np.ndarray
    jump: np.ndarray
    fill_at: np.ndarray
    fill: np.ndarray


class Program:
    """The flat program of a reader schema's fields, and where each Node's values go."""

    def __init__(self, plan: Node) -> None:
        self.kind: list[int] = []
        self.slot: list[int] = []
        self.nullable: list[int] = []
        self.branch: list[int] = []
        self.extra: list[int] = []
        self.jump: list[int] = []
        self.fill: list[list[int]] = []  # NULL_RECORD: the slots it fills when null
        self.depth: list[int] = []  # per slot: arrays around it (0: one value per event)
        self.slots_of: dict[int, int] = {}  # id(Node) at its place -> slot
        self.top: list[tuple[str, Node, Any]] = []  # (field, node, its layout)
        if plan.kind != "record":
            raise NotColumnar("not a record")
        for name, node in plan.parts["fields"]:
            self.top.append((name, node, self._emit(node, nullable=False, depth=0)))
        if not self.kind:
            raise NotColumnar("a record of no fields")

    def _op(self, kind: int, slot: int, nullable: bool, branch: int, extra: int) -> int:
        self.kind.append(kind)
        self.slot.append(slot)
        self.nullable.append(int(nullable))
        self.branch.append(branch)
        self.extra.append(extra)
        self.jump.append(-1)
        self.fill.append([])
        return len(self.kind) - 1

    def _new_slot(self, depth: int) -> int:
        self.depth.append(depth)
        return len(self.depth) - 1

    def _emit(self, node: Node, nullable: bool, depth: int, branch: int = 0) -> Any:
        """Ops for one value of `node`; returns its layout: how to build its Arrow array."""
        kind = node.kind
        if kind == "nullable":
            if nullable:
                raise NotColumnar("a union inside a union")
            return self._emit(node.parts["inner"], True, depth, node.parts["value_branch"])
        if kind in _LEAF_KINDS:
            extra = 0
            if kind == "fixed":
                extra = int(node.parts["size"])
                if extra <= 0:
                    raise NotColumnar("fixed of size 0")
            elif kind == "enum":
                extra = len(node.parts["symbols"])
            slot = self._new_slot(depth)
            self._op(_LEAF_KINDS[kind], slot, nullable, branch, extra)
            return ("leaf", node, slot, nullable)
        if kind == "record":
            if not node.parts["fields"]:
                raise NotColumnar("a record of no fields")
            if not nullable:
                fields = [self._emit(n, False, depth) for _, n in node.parts["fields"]]
                return ("record", node, fields, None)
            slot = self._new_slot(depth)
            at = self._op(NULL_RECORD, slot, True, branch, 0)
            first_slot = len(self.depth)
            children = [self._emit(n, False, depth) for _, n in node.parts["fields"]]
            self.jump[at] = len(self.kind)
            # when null: a placeholder in every slot of this record outside its arrays' items
            self.fill[at] = [
                s for s in range(first_slot, len(self.depth)) if self.depth[s] == depth
            ]
            return ("record", node, children, slot)
        if kind == "array":
            slot = self._new_slot(depth)
            begin = self._op(ARRAY, slot, nullable, branch, 0)
            items = self._emit(node.parts["items"], False, depth + 1)
            end = self._op(ARRAY_END, slot, False, 0, 0)
            self.jump[begin] = end
            self.jump[end] = begin
            return ("array", node, slot, nullable, items)
        raise NotColumnar(f"type {kind}")

    def arrays(self) -> Ops:
        fill_at = np.zeros(len(self.kind) + 1, np.int64)
        np.cumsum([len(f) for f in self.fill], out=fill_at[1:])
        fill = np.array([s for f in self.fill for s in f], np.int64)
        return Ops(
            np.array(self.kind, np.int64),
            np.array(self.slot, np.int64),
            np.array(self.nullable, np.int64),
            np.array(self.branch, np.int64),
            np.array(self.extra, np.int64),
            np.array(self.jump, np.int64),
            fill_at,
            fill,
        )


@_jit
def varint(
    buf: Any, pos: int | np.int64, end: int | np.int64
) -> tuple[int | np.int64, int | np.int64, bool]:
    """Avro's zigzag varint at `pos`: (value, the position after it, whether it read).

    Also compiled into event_names' kernel: numba's cache does not see a change here from
    there; `make setup` recompiles everything from scratch (scripts/compile_readers.py).
    """
    result = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(10):
        if pos >= end:
            return 0, pos, False
        b = buf[pos]
        pos += 1
        result |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            return np.int64(result >> np.uint64(1)) ^ -np.int64(result & np.uint64(1)), pos, True
        shift += np.uint64(7)
    return 0, pos, False


@_jit
def _run(
    buf: Any,
    starts: Any,
    ends: Any,
    schema_id: int,
    kind: Any,
    slot: Any,
    nullable: Any,
    branch: Any,
    extra: Any,
    jump: Any,
    fill_at: Any,
    fill: Any,
    base: Any,
    vals: Any,
    lens: Any,
    valid: Any,
    count: Any,
) -> tuple[int, int]:
    """Decode every event; (error code or 0, the event where it happened)."""
    nops = kind.shape[0]
    stack_op = np.empty(64, np.int64)
    stack_left = np.empty(64, np.int64)
    stack_at = np.empty(64, np.int64)
    for e in range(starts.shape[0]):
        pos = starts[e]
        end = ends[e]
        if end - pos < 5 or buf[pos] != 0:
            return 9, e
        framed = (
            (np.int64(buf[pos + 1]) << 24)
            | (np.int64(buf[pos + 2]) << 16)
            | (np.int64(buf[pos + 3]) << 8)
            | np.int64(buf[pos + 4])
        )
        if framed != schema_id:
            return 9, e
        pos += 5
        sp = 0
        pc = 0
        while pc < nops:
            k = kind[pc]
            s = slot[pc]
            if k == ARRAY_END:  # one item read
                vals[stack_at[sp - 1]] += 1
                stack_left[sp - 1] -= 1
                if stack_left[sp - 1] > 0:
                    pc = stack_op[sp - 1] + 1
                    continue
                block, pos, ok = varint(buf, pos, end)
                if not ok:
                    return 1, e
                if block < 0:
                    block = -block
                    _, pos, ok = varint(buf, pos, end)  # the block's size in bytes
                    if not ok:
                        return 1, e
                if block == 0:
                    sp -= 1
                    pc += 1
                    continue
                if block > end - pos:
                    return 7, e
                stack_left[sp - 1] = block
                pc = stack_op[sp - 1] + 1
                continue
            at = base[s] + count[s]
            count[s] += 1
            valid[at] = 1
            if nullable[pc]:
                b, pos, ok = varint(buf, pos, end)
                if not ok:
                    return 1, e
                if b < 0 or b > 1:
                    return 3, e
                if b != branch[pc]:
                    valid[at] = 0
                    vals[at] = 0
                    lens[at] = 0
                    if k == NULL_RECORD:
                        for f in range(fill_at[pc], fill_at[pc + 1]):
                            t = fill[f]
                            where = base[t] + count[t]
                            count[t] += 1
                            valid[where] = 0
                            vals[where] = 0
                            lens[where] = 0
                        pc = jump[pc]
                    elif k == ARRAY:
                        pc = jump[pc] + 1
                    else:
                        pc += 1
                    continue
            if k in (LONG, INT, ENUM):
                v, pos, ok = varint(buf, pos, end)
                if not ok:
                    return 1, e
                if k == INT and (v < -(2**31) or v >= 2**31):
                    return 4, e
                if k == ENUM and (v < 0 or v >= extra[pc]):
                    return 6, e
                vals[at] = v
            elif k == BYTES:
                n, pos, ok = varint(buf, pos, end)
                if not ok:
                    return 1, e
                if n < 0 or n > end - pos:
                    return 7, e
                vals[at] = pos
                lens[at] = n
                pos += n
            elif k == BOOLEAN:
                if pos >= end:
                    return 1, e
                if buf[pos] > 1:
                    return 5, e
                vals[at] = buf[pos]
                pos += 1
            elif k in (FLOAT, DOUBLE, FIXED):
                size = 4 if k == FLOAT else (8 if k == DOUBLE else extra[pc])
                if size > end - pos:
                    return 1, e
                if k == FIXED:
                    vals[at] = pos
                    lens[at] = size
                else:
                    bits = np.int64(0)
                    for i in range(size):
                        bits |= np.int64(buf[pos + i]) << (8 * i)
                    vals[at] = bits
                pos += size
            elif k == ARRAY:
                vals[at] = 0
                block, pos, ok = varint(buf, pos, end)
                if not ok:
                    return 1, e
                if block < 0:
                    block = -block
                    _, pos, ok = varint(buf, pos, end)
                    if not ok:
                        return 1, e
                if block == 0:
                    pc = jump[pc] + 1
                    continue
                if block > end - pos:
                    return 7, e
                if sp == 64:
                    return 7, e  # nested deeper than any schema here
                stack_op[sp] = pc
                stack_left[sp] = block
                stack_at[sp] = at
                sp += 1
            # NULL_RECORD with a value: its fields follow
            pc += 1
        if pos != end:
            return 8, e
    return 0, -1


def _copy_bytes_typed(
    typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, n: Any
) -> tuple[Any, Any]:
    """dst[dst_at:dst_at + n] = src[src_at:src_at + n] as one memcpy, no bounds checked.

    Why: numba's slice assignment builds two array views and checks their shapes, ~25 ns a
    string; a short string's bytes take ~5. Only for callers that sized `dst` themselves.
    """
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        dst_array, dst_pos, src_array, src_pos, count = args
        to = context.make_array(signature.args[0])(context, builder, dst_array)
        frm = context.make_array(signature.args[2])(context, builder, src_array)
        cgutils.raw_memcpy(  # type: ignore[no-untyped-call]
            builder, builder.gep(to.data, [dst_pos]), builder.gep(frm.data, [src_pos]), count, 1
        )
        return context.get_dummy_value()

    return sig, codegen


# Called from compiled code only: (dst, dst_at, src, src_at, n), as its docstring says.
_copy_bytes: Any = intrinsic(_copy_bytes_typed)


@_jit
def _gather(buf: Any, starts: Any, lens: Any, out: Any, offsets: Any) -> bool:
    """buf[starts[i]:starts[i] + lens[i]] one after another into `out` (lens.sum() bytes at
    least), offsets[i] where each begins; every range inside buf (_run checked them).
    Whether no value starts with a UTF-8 continuation byte (10xxxxxx): see _utf8_values."""
    at = 0
    starts_a_char = True
    for i in range(starts.shape[0]):
        offsets[i] = at
        n = lens[i]
        if n and buf[starts[i]] & 0xC0 == 0x80:
            starts_a_char = False
        _copy_bytes(out, at, buf, starts[i], n)
        at += n
    offsets[starts.shape[0]] = at
    return starts_a_char


def _utf8_values(data: np.ndarray, starts_a_char: bool) -> bool:
    """Whether every value _gather put into `data` is UTF-8. Checked at once, not value by
    value (~1 ns a value instead of ~6): the values are UTF-8 exactly when their concatenation
    is and none starts inside a character (valid values concatenate to valid UTF-8; and in
    valid UTF-8, a value that starts on a character ends where the next one starts, on one)."""
    if not starts_a_char:
        return False
    whole = pa.Array.from_buffers(
        pa.string(), 1, [None, pa.py_buffer(np.array([0, len(data)], np.int32)), pa.py_buffer(data)]
    )
    try:
        whole.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


class CompiledReader:
    """Reads batches of one reader schema's events (`plan`) into Arrow arrays."""

    def __init__(self, plan: Node) -> None:
        self.program = Program(plan)
        self.ops = self.program.arrays()

    def read(self, values: pa.BinaryArray, schema_id: int) -> dict[str, pa.Array]:
        """Top-level field name -> its Arrow array, or NotColumnar naming why not."""
        data, starts, ends = framed_payloads(values)
        return self.read_framed(byte_array(data), starts, ends, schema_id)

    def read_framed(
        self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, schema_id: int
    ) -> dict[str, pa.Array]:
        """The same for payloads read in place: buf[starts[i]:ends[i]] (a read-only uint8
        array, int64 positions), e.g. straight from a fetch (ranges.Chunk.run)."""
        n = len(starts)
        if n == 0:
            raise NotColumnar("empty batch")
        if int((ends - starts).min()) < PREFIX_SIZE:
            raise NotColumnar("a payload shorter than the framing")
        items = int(ends[-1] - starts[0])  # every item of an array takes a byte at least
        caps = np.array([items if d else n for d in self.program.depth], np.int64)
        base = np.zeros(len(caps), np.int64)
        np.cumsum(caps[:-1], out=base[1:])
        total = int(caps.sum())
        vals = np.empty(total, np.int64)
        lens = np.empty(total, np.int64)
        valid = np.empty(total, np.uint8)
        count = np.zeros(len(caps), np.int64)
        err, where = _run(buf, starts, ends, schema_id, *self.ops, base, vals, lens, valid, count)
        if err:
            raise NotColumnar(f"event {where}: {_REASONS.get(err, err)}")
        self._buf, self._base, self._count = buf, base, count
        self._vals, self._lens, self._valid = vals, lens, valid
        return {name: self._build(layout) for name, _, layout in self.program.top}

    def _region(self, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        at, n = int(self._base[slot]), int(self._count[slot])
        return self._vals[at : at + n], self._lens[at : at + n], self._valid[at : at + n]

    def _build(self, layout: Any) -> pa.Array:
        what = layout[0]
        if what == "leaf":
            _, node, slot, nullable = layout
            vals, lens, valid = self._region(slot)
            return _leaf(node, self._buf, vals, lens, valid if nullable else None)
        if what == "record":
            _, node, children, slot = layout
            arrays = [self._build(c) for c in children]
            mask = None
            if slot is not None:
                mask = pa.array(self._region(slot)[2] == 0)
            return pa.StructArray.from_arrays(arrays, fields=list(node.arrow), mask=mask)
        _, node, slot, nullable, items = layout
        counts, _, valid = self._region(slot)
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise NotColumnar("list too large")
        mask = pa.array(valid == 0) if nullable else None
        return pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)), self._build(items), type=node.arrow, mask=mask
        )


def _leaf(
    node: Node, buf: np.ndarray, vals: np.ndarray, lens: np.ndarray, valid: np.ndarray | None
) -> pa.Array:
    kind = node.kind
    mask = None if valid is None else valid == 0
    if kind in ("string", "bytes", "fixed"):
        arrow = pa.binary() if kind == "fixed" else node.arrow
        offsets = np.empty(len(vals) + 1, np.int32)
        size = int(lens.sum())
        if size >= 2**31:
            raise NotColumnar("batch too large")
        data = np.empty(size, np.uint8)
        starts_a_char = _gather(buf, vals, lens, data, offsets)
        if kind == "string" and not _utf8_values(data, starts_a_char):
            raise NotColumnar("invalid UTF-8")  # as fastavro's strict decoding
        bitmap = None
        nulls = 0
        if mask is not None and mask.any():
            bitmap = pa.py_buffer(np.packbits(~mask, bitorder="little"))
            nulls = int(mask.sum())
        return pa.Array.from_buffers(
            arrow, len(vals), [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], nulls
        )
    if kind == "enum":
        return node.parts["symbols"].take(pa.array(vals, mask=mask))
    if kind == "long":
        values: np.ndarray = vals
    elif kind == "int":
        values = vals.astype(np.int32)
    elif kind == "boolean":
        values = vals.astype(np.bool_)
    elif kind == "float":
        values = vals.astype(np.uint32).view(np.float32)
    else:  # double
        values = vals.view(np.float64)
    return pa.array(values, node.arrow, mask=mask)
