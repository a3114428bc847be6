"""Avro rows (valueFormat avro): the event header and the topic schema's fields as columns.

    topic, broker_id, partition, offset, index      the message's place (raw_columns.py)
    key          binary      the message's key (null: none); only when a topic read is of
                             the 0.8 format (raw_columns.py says why)
    event_time   timestamp   header.timestamp (UTC)
    server       string      header.server
    producer_id  string      header.producer_id
    seq          bigint      header.seq
    schema_id    bigint      the schema id in the payload's framing (writer's schema)
    <fields>                 the topic schema's fields after `header`, Avro -> Spark types:
                             boolean, int, bigint, float, double, binary (bytes, fixed),
                             string (string, enum, uuid), timestamp (timestamp-millis/micros),
                             date, decimal(p,s), array, map<string,_>, struct (record);
                             a union with null is a nullable column, other unions refused
    _error, _value           mode PERMISSIVE only: why the payload is not an event, and the
                             payload itself; null on good rows (whose other columns are null
                             on bad rows)

The reader schema of a topic is the latest version of the subject named after it (docs/design.md
§3.4); each event is decoded with its writer's schema (by id) resolved to it, so old
versions read as the new one. Several topics: the union of their fields by name (a field
name with two types is an error). A batch whose payloads all carry the reader's schema id
and read cleanly is decoded column-wise straight into Arrow arrays (avro_compiled.py, or
avro_vector.py for the rare schema the compiled reader does not take); any
other batch (bad records, older writers' ids, maps, top-level decimals) is decoded event by
event by logbroker.serde (logical types read as their base types), then turned into Arrow
columns, one list per column. Both give the same batch; top-level timestamp, date and
decimal fields become those Spark types, nested ones keep their base types (long, int, bytes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_apps.source.avro_vector import Node, NotColumnar, compile_schema, read_columns
from spark_apps.source.event_decoding import EventDecoding, ReaderSchema, reader_schemas
from spark_apps.source.options import SourceOptions
from spark_apps.source.ranges import Chunk, PartitionRange
from spark_apps.source.raw_columns import key_array, position_arrays

POSITION_COLUMNS = [
    StructField("topic", StringType()),
    StructField("broker_id", IntegerType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("index", IntegerType()),
]
HEADER_COLUMNS = [
    StructField("event_time", TimestampType()),
    StructField("server", StringType()),
    StructField("producer_id", StringType()),
    StructField("seq", LongType()),
    StructField("schema_id", LongType()),
]
KEY_COLUMN = StructField("key", BinaryType())
ERROR_COLUMNS = [StructField("_error", StringType()), StructField("_value", BinaryType())]
FIXED_NAMES = {f.name for f in POSITION_COLUMNS + HEADER_COLUMNS + ERROR_COLUMNS} | {"load_hour"}

_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


class AvroColumnError(ValueError):
    """An event schema has a field this source cannot make a column of: named, with why."""


def spark_type(node: Any, named: dict[str, DataType], where: str, top: bool = False) -> DataType:
    """The Spark type of an Avro schema node (`named` collects named types as it goes).

    Logical types are kept for top-level fields only (timestamp, date, decimal columns);
    nested ones are their base types, as serde's reader returns them.
    """
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return _PRIMITIVES[node]
        if node in named:
            return named[node]
        short = node.rsplit(".", 1)[-1]
        for name, t in named.items():
            if name.rsplit(".", 1)[-1] == short:
                return t
        raise AvroColumnError(f"{where}: unknown type {node!r}")
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) != 1:
            raise AvroColumnError(
                f"{where}: a union of {len(branches)} non-null types cannot be one column"
            )
        return spark_type(branches[0], named, where, top)
    if not isinstance(node, dict):
        raise AvroColumnError(f"{where}: not an Avro schema: {node!r}")
    kind, logical = node.get("type"), node.get("logicalType") if top else None
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType()
    if logical == "date":
        return DateType()
    if logical == "decimal":
        return DecimalType(int(node["precision"]), int(node.get("scale", 0)))
    if kind == "record":
        fields = [
            StructField(f["name"], spark_type(f["type"], named, f"{where}.{f['name']}"))
            for f in node["fields"]
        ]
        result: DataType = StructType(fields)
    elif kind == "enum":
        result = StringType()
    elif kind == "fixed":
        result = BinaryType()
    elif kind == "array":
        return ArrayType(spark_type(node["items"], named, f"{where}[]"))
    elif kind == "map":
        return MapType(StringType(), spark_type(node["values"], named, f"{where}{{}}"))
    else:
        return spark_type(kind, named, where)
    if "name" in node:
        name = node["name"]
        namespace = node.get("namespace")
        named[f"{namespace}.{name}" if namespace and "." not in name else name] = result
    return result


def column_name(field: str) -> str:
    """The column of an event's own field: its name, or `event_<name>` where the name is a
    fixed column's (AuditCount's `topic` is `event_topic`: the row's `topic` is `_audit`)."""
    return f"event_{field}" if field in FIXED_NAMES else field


def event_fields(schema: dict[str, Any], topic: str) -> list[StructField]:
    """The columns of a topic's own fields (after the header)."""
    named: dict[str, DataType] = {}
    spark_type(schema["fields"][0]["type"], named, f"{topic}.header")  # registers EventHeader
    out = []
    for f in schema["fields"][1:]:
        column = column_name(f["name"])
        if column in FIXED_NAMES or column in {g["name"] for g in schema["fields"][1:]} - {
            f["name"]
        }:
            raise AvroColumnError(
                f"topic {topic!r}: the field {f['name']!r} cannot be a column: both its name "
                f"and {column!r} are taken (fixed columns: {', '.join(sorted(FIXED_NAMES))})"
            )
        out.append(
            StructField(column, spark_type(f["type"], named, f"{topic}.{f['name']}", top=True))
        )
    return out


def merge_fields(per_topic: dict[str, list[StructField]]) -> list[StructField]:
    merged: dict[str, tuple[StructField, str]] = {}
    for topic in sorted(per_topic):
        for f in per_topic[topic]:
            if f.name in merged and merged[f.name][0].dataType != f.dataType:
                other = merged[f.name][1]
                raise AvroColumnError(
                    f"field {f.name!r} is {f.dataType.simpleString()} in topic {topic!r} but "
                    f"{merged[f.name][0].dataType.simpleString()} in {other!r}: read them apart"
                )
            merged.setdefault(f.name, (f, topic))
    return [f for f, _ in merged.values()]


def top_level_conversions(readers: dict[str, ReaderSchema]) -> dict[str, Any]:
    """column -> how serde's base-type value becomes the column's: 1000 (ms -> us) or a
    decimal scale; fields that need nothing are absent."""
    out: dict[str, Any] = {}
    for reader in readers.values():
        for f in reader.definition["fields"][1:]:
            node = f["type"]
            if isinstance(node, list):
                node = next((b for b in node if b != "null"), node)
            if isinstance(node, dict):
                if node.get("logicalType") == "timestamp-millis":
                    out[column_name(f["name"])] = 1000
                elif node.get("logicalType") == "decimal":
                    out[column_name(f["name"])] = ("decimal", int(node.get("scale", 0)))
    return out


def _convert(values: list[Any], how: Any) -> list[Any]:
    if how == 1000:
        return [None if v is None else v * 1000 for v in values]
    import decimal

    scale = how[1]
    return [
        None if v is None else decimal.Decimal(int.from_bytes(v, "big", signed=True)).scaleb(-scale)
        for v in values
    ]


def build_schema(
    readers: dict[str, ReaderSchema], permissive: bool, keyed: bool = False
) -> StructType:
    fields = merge_fields({t: event_fields(s.definition, t) for t, s in readers.items()})
    if keyed and any(f.name == "key" for f in fields):
        raise AvroColumnError(
            "an event field is named 'key', the column of a 0.8-format topic's message keys; "
            "rename the field in a new schema version"
        )
    return StructType(
        POSITION_COLUMNS
        + ([KEY_COLUMN] if keyed else [])
        + HEADER_COLUMNS
        + fields
        + (ERROR_COLUMNS if permissive else [])
    )


def keyed(options: SourceOptions, readers: dict[str, ReaderSchema]) -> bool:
    """Whether the rows have a `key` column: a topic read is of the 0.8 format."""
    from spark_apps.source.discovery import format08_topics

    return bool(format08_topics(options, sorted(readers)))


def spark_schema(options: SourceOptions) -> StructType:
    readers = reader_schemas(options)
    return build_schema(readers, options.mode == "PERMISSIVE", keyed(options, readers))


@dataclass
class AvroDecoder:
    """Turns a chunk of one partition's messages into an Arrow batch of event rows."""

    options: SourceOptions
    readers: dict[str, ReaderSchema]
    schema: StructType

    @classmethod
    def pinned(cls, options: SourceOptions, logical: bool | None = None) -> AvroDecoder:
        """The topics' reader schemas read from the registry once, and the rows' schema made
        of them: a decoder planned ahead of every read of a query (the hourly load's plan).
        `logical`: whether a topic read is of the 0.8 format, when the caller's discovery
        already said (the plan's ranges); None asks ZooKeeper (a session of its own)."""
        readers = reader_schemas(options)
        if logical is None:
            logical = keyed(options, readers)
        schema = build_schema(readers, options.mode == "PERMISSIVE", logical)
        return cls(options, readers, schema)

    @classmethod
    def for_schema(cls, options: SourceOptions, schema: StructType) -> AvroDecoder:
        readers = reader_schemas(options)
        again = build_schema(readers, options.mode == "PERMISSIVE", "key" in schema.fieldNames())
        if again != schema:
            raise AvroColumnError(
                "the topics' schemas changed in the registry while the query was planned; "
                "run the query again"
            )
        return cls(options, readers, schema)

    def __post_init__(self) -> None:
        self._arrow = pa.schema(
            [
                pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"))
                for f in self.schema.fields
            ]
        )
        self._keyed = "key" in self.schema.fieldNames()
        self._fixed = len(POSITION_COLUMNS) + len(HEADER_COLUMNS) + self._keyed
        self._event_fields = [
            f.name for f in self.schema.fields[self._fixed :] if f.name not in ("_error", "_value")
        ]
        self._conversions = top_level_conversions(self.readers)
        self._field_of_column = {
            column_name(f["name"]): f["name"]
            for reader in self.readers.values()
            for f in reader.definition["fields"][1:]
        }
        self._decoding: dict[str, EventDecoding] = {}
        self._plans: dict[str, Node | None] = {}
        self._compiled: dict[str, Any] = {}  # topic -> avro_compiled.CompiledReader or None

    def _plan_for(self, topic: str) -> Node | None:
        """The columnar reading plan of a topic's reader schema; None: serde's path only."""
        if topic not in self._plans:
            try:
                plan = compile_schema(self.readers[topic].definition)
                self._check_types(topic, plan)
            except NotColumnar:
                plan = None
            self._plans[topic] = plan
            try:
                from spark_apps.source.avro_compiled import (
                    CompiledReader,  # numba: in the readers, not planning
                )

                self._compiled[topic] = None if plan is None else CompiledReader(plan)
            except NotColumnar:
                self._compiled[topic] = None  # numpy's reader only (a fixed of size 0)
        return self._plans[topic]

    def _check_types(self, topic: str, plan: Node) -> None:
        """Every column the plan reads has the column's type, or converts as the per-event
        path does (timestamps, dates); anything else (decimals) is not columnar."""
        header = plan.parts["fields"][0][1]
        if header.kind != "record" or {"timestamp", "server", "producer_id", "seq"} - {
            name for name, _ in header.parts["fields"]
        }:
            raise NotColumnar("not an event header")
        arrow = {f.name: f.type for f in self._arrow}
        conversions = top_level_conversions({topic: self.readers[topic]})
        for field, node in plan.parts["fields"][1:]:
            column = column_name(field)
            target = arrow[column]
            how = conversions.get(column)
            if how is not None and how != 1000:
                raise NotColumnar(f"{column}: decimal")
            if node.arrow != target and not (
                (pa.types.is_timestamp(target) and node.arrow == pa.int64())
                or (pa.types.is_date32(target) and node.arrow == pa.int32())
            ):
                raise NotColumnar(f"{column}: {node.arrow} is not {target}")

    def _columnar_batch(self, r: PartitionRange, chunk: Chunk) -> pa.RecordBatch | None:
        """The batch read column-wise (avro_vector.py), or None: read it event by event."""
        plan = self._plan_for(r.topic)
        if plan is None:
            return None
        schema_id = self.readers[r.topic].schema_id
        compiled = self._compiled[r.topic]
        try:
            if compiled is not None and chunk.run is not None:  # in place, no copy first
                columns = compiled.read_framed(*chunk.run.framed(), schema_id)
            elif compiled is not None:
                columns = compiled.read(chunk.values, schema_id)
            else:
                columns = read_columns(chunk.values, schema_id, plan)
        except NotColumnar:
            return None
        n = len(chunk)
        header = columns["header"]
        event_time = pc.multiply(header.field("timestamp"), np.int64(1000))
        arrays = self._positions(r, chunk.offsets, chunk.indexes, chunk.key_values)
        arrays += [
            event_time.cast(pa.timestamp("us", tz="UTC")),
            header.field("server").cast(pa.string()),
            header.field("producer_id").cast(pa.string()),
            header.field("seq").cast(pa.int64()),
            pa.array(np.full(n, schema_id, np.int64)),
        ]
        for name, target in zip(self._event_fields, self._arrow.types[self._fixed :], strict=False):
            values = columns.get(self._field_of_column.get(name, name))
            if values is None:  # a field of another topic's schema
                arrays.append(pa.nulls(n, target))
                continue
            if self._conversions.get(name) == 1000:  # timestamp-millis -> micros
                values = pc.multiply(values, np.int64(1000))
            arrays.append(values.cast(target) if values.type != target else values)
        if self.options.mode == "PERMISSIVE":
            arrays += [pa.nulls(n, pa.string()), pa.nulls(n, pa.binary())]
        return pa.RecordBatch.from_arrays(arrays, schema=self._arrow)

    def _decoding_for(self, topic: str) -> EventDecoding:
        if topic not in self._decoding:
            self._decoding[topic] = EventDecoding(
                self.options.schema_registry or "", self.readers[topic]
            )
        return self._decoding[topic]

    def batch(self, r: PartitionRange, chunk: Chunk) -> pa.RecordBatch:
        columnar = self._columnar_batch(r, chunk)
        if columnar is not None:
            return columnar
        return self.batch_by_event(r, chunk)

    def batch_by_event(self, r: PartitionRange, chunk: Chunk) -> pa.RecordBatch:
        """The batch from serde's per-event records: any schema, bad records, old writers."""
        decoded = self._decoding_for(r.topic).decode(
            chunk.payloads,
            where=lambda i: (
                f"{r.topic} {r.name} offset {chunk.offsets[i]} index {chunk.indexes[i]}"
            ),
        )
        errors = decoded.errors  # position -> reason
        mode = self.options.mode
        if errors and mode == "FAILFAST":
            first = min(errors)
            raise AvroColumnError(
                f"{errors[first]} (mode FAILFAST; PERMISSIVE keeps bad records, DROPMALFORMED "
                "skips them)"
            )
        keep: Iterable[int] = range(len(chunk.payloads))
        offsets, indexes, keys = chunk.offsets, chunk.indexes, chunk.keys
        if errors and mode == "DROPMALFORMED":
            keep = [i for i in range(len(chunk.payloads)) if i not in errors]
            offsets = [offsets[i] for i in keep]
            indexes = [indexes[i] for i in keep]
            keys = None if keys is None else [keys[i] for i in keep]
        records = decoded.records  # None at bad positions
        if errors and mode == "DROPMALFORMED":
            records = [records[i] for i in keep]
            schema_ids = [decoded.schema_ids[i] for i in keep]
        else:
            schema_ids = decoded.schema_ids
        arrays = self._positions(r, offsets, indexes, keys)
        arrays += self._header_arrays(records, schema_ids)
        for name, field in zip(self._event_fields, self._arrow.types[self._fixed :], strict=False):
            key = self._field_of_column.get(name, name)
            values = [None if x is None else x.get(key) for x in records]
            if name in self._conversions:
                values = _convert(values, self._conversions[name])
            arrays.append(pa.array(values, field))
        if mode == "PERMISSIVE":
            n = len(records)
            reasons: list[str | None] = [None] * n
            bad_payloads: list[bytes | None] = [None] * n
            for i, reason in errors.items():
                reasons[i] = reason
                bad_payloads[i] = chunk.payloads[i]
            arrays.append(pa.array(reasons, pa.string()))
            arrays.append(pa.array(bad_payloads, pa.binary()))
        return pa.RecordBatch.from_arrays(arrays, schema=self._arrow)

    def _positions(
        self,
        r: PartitionRange,
        offsets: Any,
        indexes: Any,
        keys: list[bytes | None] | pa.Array | None,
    ) -> list[pa.Array]:
        """The message's place, and its key when the rows have that column."""
        arrays = position_arrays(r, offsets, indexes)
        if self._keyed:
            arrays.append(key_array(keys, len(offsets)))
        return arrays

    @staticmethod
    def _header_arrays(
        records: list[dict[str, Any] | None], schema_ids: list[int | None]
    ) -> list[pa.Array]:
        headers = [None if x is None else x["header"] for x in records]
        millis = pa.array([None if h is None else h["timestamp"] for h in headers], pa.int64())
        event_time = pc.multiply(millis, np.int64(1000)).cast(pa.timestamp("us", tz="UTC"))
        return [
            event_time,
            pa.array([None if h is None else h["server"] for h in headers], pa.string()),
            pa.array([None if h is None else h["producer_id"] for h in headers], pa.string()),
            pa.array([None if h is None else h["seq"] for h in headers], pa.int64()),
            pa.array(schema_ids, pa.int64()),
        ]
