"""Records to framed events and back, with schemas from the registry (fastavro does the Avro).

Writing: `EventCodec.writer(subject)` looks the subject's latest version up once and returns an
`EventWriter` bound to that schema and id; `encode(record)` gives `frame(id, avro(record))`.
A record that does not fit raises EncodeError naming the field path (misfit.py).

Reading: the id in the frame picks the writer's schema (from the registry once per id, then
from this codec's dict); an optional reader schema resolves old data to a newer shape by Avro's
rules (added fields get their defaults, promotions apply, removed fields are skipped). Records
come back as plain dicts of Avro's underlying types: a `timestamp-millis` is an int (UTC ms),
exactly what was written. `decode_batch` is the bulk path (Spark's reader, the consumer): at
most one dict lookup per payload for the schema, no parsing, no registry round trip after the
first payload of each id; a bad payload's SerdeError is kept by position and the rest are read.
`decode_many` is the same as a list (records, or errors in place with `errors="keep"`).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, overload

from fastavro import schemaless_reader, schemaless_writer
from fastavro._read_common import SchemaResolutionError
from fastavro.validation import validate

from .errors import DecodeError, EncodeError, SerdeError, UnknownSchemaError
from .framing import PREFIX_SIZE, prefix, schema_id_of
from .misfit import first_misfit
from .registry import SchemaRegistry, SchemaVersion
from .schemas import EventSchema

# What fastavro raises on bytes it cannot read with a schema.
_READ_ERRORS = (
    EOFError,
    IndexError,
    ValueError,
    UnicodeDecodeError,
    OverflowError,
    KeyError,
    TypeError,
    SchemaResolutionError,  # a reader schema that cannot read this writer's data
)


class DecodedEvent(NamedTuple):
    schema_id: int
    record: dict[str, Any]


class DecodedBatch(NamedTuple):
    """What `decode_batch` read: per position a record or None, a schema id or None (not an
    event), and the bad positions' errors."""

    records: list[dict[str, Any] | None]
    schema_ids: list[int | None]
    errors: dict[int, SerdeError]


def _at(where: str) -> str:
    return f"{where}: " if where else ""


class EventWriter:
    """Encodes records with one schema and id (one version of a subject).

    fastavro's writer refuses a value of the wrong type, a missing field without default and
    an unknown field, but writes an int out of 32-bit range as if it were a long (Java readers
    then fail). `validate=True` checks every value first (fastavro's validator, ~1.5x the cost
    of encoding): the CLI does, a producer that trusts its records need not.
    """

    def __init__(
        self,
        schema_id: int,
        schema: EventSchema,
        subject: str = "",
        version: int = 0,
        *,
        validate: bool = False,
    ) -> None:
        self.schema_id = schema_id
        self.schema = schema
        self.subject = subject
        self.version = version
        self.validate = validate
        self._prefix = prefix(schema_id)
        self._parsed = schema.writer

    @classmethod
    def for_version(cls, version: SchemaVersion, *, validate: bool = False) -> EventWriter:
        return cls(version.id, version.schema, version.subject, version.version, validate=validate)

    def encode(self, record: Mapping[str, Any], where: str = "") -> bytes:
        """The framed event; EncodeError (with `.field`) if the record does not fit."""
        if self.validate and not validate(record, self._parsed, raise_errors=False, strict=True):
            raise self._misfit(record, where, ValueError("fastavro's validator refused it"))
        stream = io.BytesIO()
        stream.write(self._prefix)
        try:
            schemaless_writer(stream, self._parsed, record, strict=True)
        except Exception as exc:  # fastavro raises TypeError, ValueError, KeyError, ...
            raise self._misfit(record, where, exc) from None
        return stream.getvalue()

    def _misfit(self, record: Any, where: str, exc: Exception) -> EncodeError:
        problem = first_misfit(self.schema.definition, self.schema.names, record)
        path, reason = problem if problem is not None else ("", f"{type(exc).__name__}: {exc}")
        what = f"field {path!r}: " if path else ""
        named = f"{self.subject!r} " if self.subject else ""
        return EncodeError(
            f"{_at(where)}record does not fit {named}schema {self.schema.fullname} "
            f"(id {self.schema_id}): {what}{reason}",
            path,
        )


class EventCodec:
    """Encode and decode framed events with the schemas of one registry. Thread-safe."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self._schemas: dict[int, EventSchema] = {}
        self._writers: dict[tuple[str, int | None, bool], EventWriter] = {}
        self._lock = threading.Lock()

    # -- writing ----------------------------------------------------------------------------

    def writer(
        self, subject: str, version: int | None = None, *, validate: bool = False
    ) -> EventWriter:
        """An EventWriter for `subject` (its latest version when `version` is None, as it was
        on the first call: a codec keeps writing one version until it is made anew)."""
        key = (subject, version, validate)
        writer = self._writers.get(key)
        if writer is None:
            found = self.registry.version(subject, version)
            writer = EventWriter.for_version(found, validate=validate)
            with self._lock:
                writer = self._writers.setdefault(key, writer)
        return writer

    def encode(
        self, subject: str, record: Mapping[str, Any], where: str = "", *, validate: bool = False
    ) -> bytes:
        """`record` as a framed event with the subject's latest schema."""
        return self.writer(subject, validate=validate).encode(record, where)

    # -- reading ----------------------------------------------------------------------------

    def schema(self, schema_id: int, where: str = "") -> EventSchema:
        """The writer schema of an id: this codec's dict, else the registry (once per id)."""
        schema = self._schemas.get(schema_id)
        if schema is None:
            try:
                schema = self.registry.schema(schema_id)
            except UnknownSchemaError as exc:
                raise UnknownSchemaError(f"{_at(where)}{exc}") from None
            self._schemas[schema_id] = schema
        return schema

    def decode(
        self, payload: bytes | memoryview, reader: EventSchema | None = None, where: str = ""
    ) -> dict[str, Any]:
        """The record of a framed event, read with `reader` if given (Avro resolution)."""
        return self.decode_event(payload, reader, where).record

    def decode_event(
        self, payload: bytes | memoryview, reader: EventSchema | None = None, where: str = ""
    ) -> DecodedEvent:
        """(schema id, record) of a framed event."""
        schema_id = schema_id_of(payload, where)
        record = _read(payload, schema_id, self.schema(schema_id, where), reader, where)
        return DecodedEvent(schema_id, record)

    @overload
    def decode_many(
        self,
        payloads: Iterable[bytes | memoryview],
        reader: EventSchema | None = ...,
        *,
        errors: Literal["raise"] = ...,
    ) -> list[dict[str, Any]]: ...

    @overload
    def decode_many(
        self,
        payloads: Iterable[bytes | memoryview],
        reader: EventSchema | None = ...,
        *,
        errors: Literal["keep"],
    ) -> list[dict[str, Any] | SerdeError]: ...

    def decode_many(
        self,
        payloads: Iterable[bytes | memoryview],
        reader: EventSchema | None = None,
        *,
        errors: Literal["raise", "keep"] = "raise",
    ) -> Sequence[dict[str, Any] | SerdeError]:
        """The records of many framed events, in order.

        errors="raise": the first bad payload raises (the message says its index);
        errors="keep": a bad payload's SerdeError stands in its place and the rest are read.
        """
        if not isinstance(payloads, Sequence):
            payloads = list(payloads)
        batch = self.decode_batch(payloads, reader, stop_at_error=errors == "raise")
        if errors == "raise" and batch.errors:
            raise batch.errors[min(batch.errors)]
        return [
            record if record is not None else batch.errors[i]
            for i, record in enumerate(batch.records)
        ]

    def decode_batch(
        self,
        payloads: Sequence[bytes | memoryview],
        reader: EventSchema | None = None,
        where: Callable[[int], str] | None = None,
        *,
        stop_at_error: bool = False,
    ) -> DecodedBatch:
        """Decode many payloads; the bulk path (Spark's reader, consumers).

        Per payload: its record (None if bad), its schema id (None if not an event), and for
        the bad ones their SerdeError by position. `where(i)` names payload i in errors
        (default "payload <i>"), e.g. "page_views 0-1 offset 1234". One dict lookup per
        payload for its schema, none when it has the previous payload's id.
        """
        n = len(payloads)
        records: list[dict[str, Any] | None] = [None] * n
        ids: list[int | None] = [None] * n
        errors: dict[int, SerdeError] = {}
        name = where or _payload_name
        reader_parsed = None if reader is None else reader.reader
        unknown: dict[int, SerdeError] = {}  # ask the registry once per unknown id per call
        last_id, last_schema = -1, None
        for index in range(n):
            payload = payloads[index]
            try:
                if len(payload) < PREFIX_SIZE or payload[0] != 0:
                    schema_id_of(payload, name(index))  # raises FramingError
                schema_id = int.from_bytes(payload[1:PREFIX_SIZE], "big")
                ids[index] = schema_id
                if schema_id == last_id:
                    schema = last_schema
                else:
                    schema = self._schemas.get(schema_id)
                    if schema is None:
                        if schema_id in unknown:
                            raise type(unknown[schema_id])(
                                f"{name(index)}: unknown schema id {schema_id}"
                            )
                        try:
                            schema = self.schema(schema_id, name(index))
                        except SerdeError as exc:
                            unknown[schema_id] = exc
                            raise
                    last_id, last_schema = schema_id, schema
                assert schema is not None
                stream = io.BytesIO(payload)
                stream.seek(PREFIX_SIZE)
                try:
                    record = schemaless_reader(stream, schema.reader, reader_parsed)
                except _READ_ERRORS as exc:
                    raise _unreadable(
                        payload, schema_id, schema, reader, name(index), exc
                    ) from None
                if stream.tell() != len(payload):
                    raise _left_over(payload, schema_id, stream.tell(), name(index))
                records[index] = record  # type: ignore[assignment]
            except SerdeError as exc:
                errors[index] = exc
                if stop_at_error:
                    break
        return DecodedBatch(records, ids, errors)


def _payload_name(index: int) -> str:
    return f"payload {index}"


def _read(
    payload: bytes | memoryview,
    schema_id: int,
    writer: EventSchema,
    reader: EventSchema | None,
    where: str,
) -> dict[str, Any]:
    stream = io.BytesIO(payload)
    stream.seek(PREFIX_SIZE)
    try:
        record = schemaless_reader(stream, writer.reader, None if reader is None else reader.reader)
    except _READ_ERRORS as exc:
        raise _unreadable(payload, schema_id, writer, reader, where, exc) from None
    if stream.tell() != len(payload):
        raise _left_over(payload, schema_id, stream.tell(), where)
    assert isinstance(record, dict)
    return record


def _unreadable(
    payload: bytes | memoryview,
    schema_id: int,
    writer: EventSchema,
    reader: EventSchema | None,
    where: str,
    exc: Exception,
) -> DecodeError:
    size = len(payload) - PREFIX_SIZE
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, EOFError | IndexError):
        return DecodeError(
            f"{_at(where)}truncated event: the {size}-byte Avro body ends before the record of "
            f"schema id {schema_id} ({writer.fullname}) does ({detail})"
        )
    with_reader = f" with reader schema {reader.fullname}" if reader is not None else ""
    return DecodeError(
        f"{_at(where)}cannot read the {size}-byte Avro body of schema id {schema_id} "
        f"({writer.fullname}){with_reader}: {type(exc).__name__}: {detail}"
    )


def _left_over(payload: bytes | memoryview, schema_id: int, end: int, where: str) -> DecodeError:
    return DecodeError(
        f"{_at(where)}{len(payload) - end} bytes left over after the record of schema id "
        f"{schema_id} ends at byte {end} of {len(payload)}: the payload is not that schema's event"
    )
