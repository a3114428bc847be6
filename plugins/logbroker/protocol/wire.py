"""Primitives of the Kafka 0.7 wire (`utils/Utils.scala`), shared by requests and responses.

    type          bytes  encoding
    int8          1      big-endian, signed two's complement (all integers are)
    int16         2
    int32         4
    int64         8
    short string  2 + N  int16 N | N bytes of UTF-8. N counts BYTES (0.7's Java writer put
                         the UTF-16 length there, which mis-frames non-ASCII names); N = -1
                         is null, which no request or response of ours accepts

`Reader` walks a buffer field by field and checks every bound before it reads: a field cut
off by the end, a negative or oversized length, a count that the bytes left cannot hold,
invalid UTF-8 or bytes left over all raise the error class it was given, with a message that
names the field and its byte position (counted from the start of the buffer given to the
reader). Nothing else escapes it: no struct.error, IndexError or UnicodeDecodeError, and no
allocation sized by a count that was not checked against the bytes present.
"""

from __future__ import annotations

import struct
from typing import NoReturn

from .errors import LogbrokerError

Buffer = bytes | bytearray | memoryview

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")

INT8_MIN, INT8_MAX = -(2**7), 2**7 - 1
INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

NULL_LENGTH = -1
SHORT_STRING_OVERHEAD = 2  # the int16 length in front of a short string


def byte_view(buffer: Buffer) -> memoryview:
    """A flat, contiguous memoryview of unsigned bytes over `buffer` (zero-copy when it can)."""
    view = memoryview(buffer)
    if view.format == "B" and view.ndim == 1 and view.c_contiguous:
        return view
    if view.c_contiguous:
        return view.cast("B")
    return memoryview(view.tobytes())


def check_int(value: int, low: int, high: int, what: str) -> int:
    """`value` if it is an int in [low, high]; else ValueError naming the field (encoders)."""
    if not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be an integer in [{low}, {high}], got {value!r}")
    return value


def encode_string(value: str, what: str = "topic") -> bytes:
    """A short string: int16 byte length | UTF-8 bytes."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a str, got {type(value).__name__}")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} {value!r} cannot be encoded in UTF-8: {exc.reason}") from None
    if len(data) > INT16_MAX:
        raise ValueError(f"{what} is {len(data)} bytes in UTF-8, over the int16 limit {INT16_MAX}")
    return INT16.pack(len(data)) + data


class Reader:
    """A cursor over a byte view that refuses to read past its end.

    `kind` is "request" or "response" (it appears in messages); `context` prefixes every
    message and may be changed while reading (e.g. "MULTIFETCH, fetch 3 of 5").
    """

    __slots__ = ("_error", "_kind", "_view", "context", "end", "pos")

    def __init__(
        self, view: memoryview, error: type[LogbrokerError], kind: str, context: str
    ) -> None:
        self._view = view
        self._error = error
        self._kind = kind
        self.context = context
        self.pos = 0
        self.end = len(view)

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def fail(self, message: str) -> NoReturn:
        raise self._error(f"{self.context}: {message}")

    def _take(self, n: int, what: str, kind: str) -> int:
        pos = self.pos
        if self.end - pos < n:
            self.fail(
                f"{what} ({kind}) at byte {pos} is cut off: the {self._kind} ends at byte "
                f"{self.end}"
            )
        self.pos = pos + n
        return pos

    def int8(self, what: str) -> int:
        return int(INT8.unpack_from(self._view, self._take(1, what, "int8"))[0])

    def int16(self, what: str) -> int:
        return int(INT16.unpack_from(self._view, self._take(2, what, "int16"))[0])

    def int32(self, what: str) -> int:
        return int(INT32.unpack_from(self._view, self._take(4, what, "int32"))[0])

    def int64(self, what: str) -> int:
        return int(INT64.unpack_from(self._view, self._take(8, what, "int64"))[0])

    def unpack(self, fields: struct.Struct, what: str) -> tuple[int, ...]:
        """Several fixed-size fields at once (a hot path's few calls instead of one per
        field); `what` names them in the message when they are cut off."""
        return fields.unpack_from(self._view, self._take(fields.size, what, f"{fields.size} bytes"))

    def non_negative_int32(self, what: str) -> int:
        pos = self.pos
        value = self.int32(what)
        if value < 0:
            self.fail(f"{what} {value} at byte {pos} is negative")
        return value

    def string(self, what: str) -> str:
        """A short string; null (-1), negative or overlong lengths and bad UTF-8 fail."""
        pos = self.pos
        n = self.int16(f"{what} length")
        if n == NULL_LENGTH:
            self.fail(f"{what} at byte {pos} is null (length -1)")
        if n < 0:
            self.fail(f"{what} length {n} at byte {pos} is negative")
        start = self.pos
        if n > self.end - start:
            self.fail(
                f"{what} length {n} at byte {pos} runs past the end of the {self._kind} "
                f"({self.end - start} bytes remain)"
            )
        self.pos = start + n
        try:
            return str(self._view[start : start + n], "utf-8")
        except UnicodeDecodeError as exc:
            self.fail(
                f"{what} at byte {pos} is not valid UTF-8 (byte {start + exc.start}: {exc.reason})"
            )

    def sized_bytes(self, what: str) -> memoryview:
        """int32 N | N bytes, as a zero-copy slice of the buffer."""
        pos = self.pos
        n = self.int32(f"{what} size")
        if n < 0:
            self.fail(f"{what} size {n} at byte {pos} is negative")
        start = self.pos
        if n > self.end - start:
            self.fail(
                f"{what} size {n} at byte {pos} runs past the end of the {self._kind} "
                f"({self.end - start} bytes remain)"
            )
        self.pos = start + n
        return self._view[start : start + n]

    def raw(self, n: int, what: str) -> memoryview:
        """The next `n` bytes, as a zero-copy slice."""
        pos = self._take(n, what, f"{n} bytes")
        return self._view[pos : pos + n]

    def rest(self) -> memoryview:
        """Every byte left, as a zero-copy slice."""
        start, self.pos = self.pos, self.end
        return self._view[start : self.end]

    def count(self, what: str, min_item_size: int, *, wide: bool = False) -> int:
        """An int16 (int32 if `wide`) count, checked to be >= 0 and to fit the bytes left.

        Every item takes at least `min_item_size` bytes, so a count the buffer cannot hold
        fails here, before anything is allocated for it.
        """
        pos = self.pos
        n = self.int32(what) if wide else self.int16(what)
        if n < 0:
            self.fail(f"{what} {n} at byte {pos} is negative")
        if n * min_item_size > self.end - self.pos:
            self.fail(
                f"{what} {n} at byte {pos} needs at least {n * min_item_size} more bytes, "
                f"but only {self.end - self.pos} remain"
            )
        return n

    def done(self) -> None:
        """Fail if any byte is left after the last field."""
        if self.pos != self.end:
            self.fail(
                f"{self.end - self.pos} unexpected bytes after the last field, "
                f"from byte {self.pos} to {self.end}"
            )
