"""The types of Kafka 0.8's wire, from which every request and response is declared as data
(as kafka-python's `protocol/types.py` does): apis.py lists the schemas, nothing is written
out by hand per API.

    type              bytes     encoding (integers big-endian, signed two's complement)
    INT8 .. INT64     1 .. 8
    STRING            2 + N     int16 N | N bytes of UTF-8; N = -1 (null) is refused
    NULLABLE_STRING   2 + N     the same; N = -1 is None
    BYTES             4 + N     int32 N | N bytes; N = -1 is None
    Array(T)          4 + ...   int32 count | count × T; a negative count is refused (0.8's
                                readers took -1 for no items; no 0.8 client sends it)
    MESSAGE_SET       4 + N     int32 N | N bytes of a 0.8 message set (message_set.py),
                                decoded as a zero-copy view; encoded from bytes, or from a
                                handle with `size` that the caller sends itself (sendfile)
    Schema(cls, ...)  Σ         its fields in order, decoded into the NamedTuple `cls`

Decoding is hardened the way wire.Reader is, whose checks it uses: a field cut off by the
end, a negative or oversized length, invalid UTF-8 and a count that the bytes left cannot
hold (every item takes at least its type's `min_size` bytes, so a count of 2**31 - 1 fails
before anything is allocated) raise the error class the reader was given, with a message
that names the API, the field by its path with the indexes it was met at
(`topics[0].partitions[3].offset`) and its byte position in the frame.

A run of fixed-size fields (`partition int32 | offset int64 | max_bytes int32`) is read with
one struct call when its bytes are all there; when they are not, field by field, so that the
error names the field that is cut off.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn, Protocol

from ..errors import LogbrokerError
from ..wire import INT16, INT32, NULL_LENGTH, Buffer, Reader, byte_view


class Sized(Protocol):
    """A part of a response that the caller sends itself (e.g. a file region, by sendfile)."""

    @property
    def size(self) -> int: ...


Part = bytes | memoryview | Sized


class SchemaReader(Reader):
    """wire.Reader that also knows the array indexes it is inside, for its messages."""

    __slots__ = ("indexes",)

    def __init__(
        self, view: memoryview, error: type[LogbrokerError], kind: str, context: str
    ) -> None:
        super().__init__(view, error, kind, context)
        self.indexes: list[int] = []

    def raw_within(self, n: int, what: str, pos: int) -> memoryview:
        """The next `n` bytes, the content of a field whose length was read at `pos`."""
        start = self.pos
        if n > self.end - start:
            self.fail(
                f"{what} length {n} at byte {pos} runs past the end of the {self._kind} "
                f"({self.end - start} bytes remain)"
            )
        self.pos = start + n
        return self._view[start : start + n]

    def fail(self, message: str) -> NoReturn:
        # Field paths carry "[]" for each array they are in: fill in where we are.
        for index in self.indexes:
            message = message.replace("[]", f"[{index}]", 1)
        raise self._error(f"{self.context}: {message}")


class Type:
    """One wire type: its smallest encoding, its decoder and its encoder."""

    min_size: int = 0
    fixed: struct.Struct | None = None  # set for fixed-size integers

    def decode(self, reader: SchemaReader, what: str) -> Any:
        raise NotImplementedError

    def encode(self, value: Any, out: list[Part], what: str) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__


class _Int(Type):
    def __init__(self, name: str, fmt: str) -> None:
        self.fixed = struct.Struct(fmt)
        self.min_size = self.fixed.size
        self._name = name
        bits = self.min_size * 8
        self.low, self.high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def decode(self, reader: SchemaReader, what: str) -> int:
        assert self.fixed is not None
        return int(reader.unpack(self.fixed, what)[0])

    def encode(self, value: Any, out: list[Part], what: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{what} must be an int, got {type(value).__name__}")
        if not self.low <= value <= self.high:
            raise ValueError(f"{what} {value} does not fit an {self._name}")
        assert self.fixed is not None
        out.append(self.fixed.pack(value))

    def __repr__(self) -> str:
        return self._name.upper()


INT8 = _Int("int8", ">b")
INT16_T = _Int("int16", ">h")
INT32_T = _Int("int32", ">i")
INT64_T = _Int("int64", ">q")


class _String(Type):
    min_size = 2

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable

    def decode(self, reader: SchemaReader, what: str) -> str | None:
        pos = reader.pos
        n = reader.int16(f"{what} length")
        if n == NULL_LENGTH and self.nullable:
            return None
        if n < 0:
            reader.fail(
                f"{what} length {n} at byte {pos} is negative" + (" (null)" if n == -1 else "")
            )
        view = reader.raw_within(n, what, pos)
        try:
            return str(view, "utf-8")
        except UnicodeDecodeError as exc:
            reader.fail(
                f"{what} at byte {pos} is not valid UTF-8 (byte {pos + 2 + exc.start}: {exc.reason})"
            )

    def encode(self, value: Any, out: list[Part], what: str) -> None:
        if value is None:
            if not self.nullable:
                raise ValueError(f"{what} must be a str, not None")
            out.append(INT16.pack(NULL_LENGTH))
            return
        if not isinstance(value, str):
            raise ValueError(f"{what} must be a str, got {type(value).__name__}")
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"{what} is {len(data)} bytes in UTF-8, over the int16 limit")
        out.append(INT16.pack(len(data)))
        out.append(data)

    def __repr__(self) -> str:
        return "NULLABLE_STRING" if self.nullable else "STRING"


STRING = _String(nullable=False)
NULLABLE_STRING = _String(nullable=True)


class _Bytes(Type):
    """int32 N | N bytes; -1 is None. Decoded as a zero-copy view of the frame."""

    min_size = 4

    def decode(self, reader: SchemaReader, what: str) -> memoryview | None:
        pos = reader.pos
        n = reader.int32(f"{what} size")
        if n == NULL_LENGTH:
            return None
        if n < 0:
            reader.fail(f"{what} size {n} at byte {pos} is negative")
        return reader.raw_within(n, what, pos)

    def encode(self, value: Any, out: list[Part], what: str) -> None:
        if value is None:
            out.append(INT32.pack(NULL_LENGTH))
            return
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ValueError(f"{what} must be bytes, got {type(value).__name__}")
        out.append(INT32.pack(len(value)))
        out.append(bytes(value) if isinstance(value, bytearray) else value)


BYTES = _Bytes()


class _MessageSet(Type):
    """int32 N | N bytes of message set, not null. Decoded as a zero-copy view."""

    min_size = 4

    def decode(self, reader: SchemaReader, what: str) -> memoryview:
        pos = reader.pos
        n = reader.int32(f"{what} size")
        if n < 0:
            reader.fail(f"{what} size {n} at byte {pos} is negative")
        return reader.raw_within(n, what, pos)

    def encode(self, value: Any, out: list[Part], what: str) -> None:
        if isinstance(value, bytes | memoryview):
            out.append(INT32.pack(len(value)))
            out.append(value)
        elif isinstance(value, bytearray):
            out.append(INT32.pack(len(value)))
            out.append(bytes(value))
        elif isinstance(getattr(value, "size", None), int):
            out.append(INT32.pack(value.size))
            out.append(value)  # the caller's handle, sent by the caller
        else:
            raise ValueError(f"{what} must be bytes or a handle with a size, got {value!r}")


MESSAGE_SET = _MessageSet()


class Array(Type):
    """int32 count | count × item."""

    min_size = 4

    def __init__(self, item: Type) -> None:
        self.item = item

    def decode(self, reader: SchemaReader, what: str) -> tuple[Any, ...]:
        count = reader.count(f"{what} count", max(self.item.min_size, 1), wide=True)
        if count == 0:
            return ()
        item, decode, indexes = self.item, self.item.decode, reader.indexes
        name = f"{what}[]"
        if isinstance(item, _Int):
            assert item.fixed is not None  # a run of integers: one call for them all
            return struct.unpack_from(
                f">{count}{item.fixed.format[1:]}", reader.raw(count * item.min_size, name)
            )
        indexes.append(0)
        depth = len(indexes) - 1
        items = []
        for i in range(count):
            indexes[depth] = i
            items.append(decode(reader, name))
        indexes.pop()
        return tuple(items)

    def encode(self, value: Any, out: list[Part], what: str) -> None:
        if not isinstance(value, Sequence) or isinstance(value, str | bytes):
            raise ValueError(f"{what} must be a sequence, got {type(value).__name__}")
        out.append(INT32.pack(len(value)))
        encode = self.item.encode
        for i, item in enumerate(value):
            encode(item, out, f"{what}[{i}]")

    def __repr__(self) -> str:
        return f"[{self.item!r}]"


class _Run(NamedTuple):
    """Consecutive fixed-size fields of a schema, read and written with one struct."""

    start: int  # index of the first field
    stop: int
    fields: struct.Struct
    names: str


class Schema(Type):
    """Fields in order, decoded into the NamedTuple `cls` (whose fields must be the same)."""

    def __init__(self, cls: type[Any], *fields: tuple[str, Type]) -> None:
        names = tuple(name for name, _ in fields)
        if names != tuple(cls._fields):
            raise TypeError(f"{cls.__name__}'s fields {cls._fields} are not the schema's {names}")
        self.cls = cls
        self.fields = fields
        self.min_size = sum(t.min_size for _, t in fields)
        self._runs = self._fixed_runs()
        self._make: Callable[..., Any] = cls._make

    def _fixed_runs(self) -> dict[int, _Run]:
        runs: dict[int, _Run] = {}
        i = 0
        while i < len(self.fields):
            j = i
            while j < len(self.fields) and self.fields[j][1].fixed is not None:
                j += 1
            if j - i >= 2:
                fmt = ">" + "".join(t.fixed.format[1:] for _, t in self.fields[i:j] if t.fixed)
                names = ", ".join(name for name, _ in self.fields[i:j])
                runs[i] = _Run(i, j, struct.Struct(fmt), names)
            i = max(j, i + 1)
        return runs

    def decode(self, reader: SchemaReader, what: str) -> Any:
        prefix = f"{what}." if what else ""
        values: list[Any] = []
        fields, runs = self.fields, self._runs
        i = 0
        while i < len(fields):
            run = runs.get(i)
            if run is not None and reader.remaining >= run.fields.size:
                values.extend(reader.unpack(run.fields, run.names))
                i = run.stop
                continue
            name, kind = fields[i]
            values.append(kind.decode(reader, prefix + name))
            i += 1
        return self._make(values)

    def encode(self, value: Any, out: list[Part], what: str) -> None:
        if not isinstance(value, self.cls):
            raise ValueError(
                f"{what or 'value'} must be a {self.cls.__name__}, got {type(value).__name__}"
            )
        prefix = f"{what}." if what else ""
        for (name, kind), item in zip(self.fields, value, strict=True):
            kind.encode(item, out, prefix + name)

    def __repr__(self) -> str:
        return f"{self.cls.__name__}({', '.join(f'{n} {t!r}' for n, t in self.fields)})"


def decode_with(
    schema: Schema,
    buffer: Buffer,
    *,
    error: type[LogbrokerError],
    kind: str,
    context: str,
    offset: int = 0,
) -> tuple[Any, int]:
    """(the value, where it ends) of `schema` read from `buffer` starting at `offset`.

    Byte positions in messages count from the start of `buffer`.
    """
    reader = SchemaReader(byte_view(buffer), error, kind, context)
    reader.pos = offset
    value = schema.decode(reader, "")
    return value, reader.pos


def encode_with(schema: Schema, value: Any, out: list[Part], context: str) -> None:
    """Append `value`'s encoding to `out`; a value the schema cannot encode raises
    ValueError naming `context` and the field."""
    try:
        schema.encode(value, out, "")
    except ValueError as exc:
        raise ValueError(f"{context}: {exc}") from None
