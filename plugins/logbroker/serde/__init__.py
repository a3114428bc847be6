"""Events: Avro records with a schema id, and the schema registry (docs/design.md §3.4).

One concept per module, from the bytes up:

    errors.py    what can go wrong, one exception each (all LogbrokerErrors; messages say where)
    framing.py   the byte layout: magic 0, 4-byte big-endian schema id, Avro binary body
    schemas.py   EventHeader and AuditCount, loading .avsc files, canonical JSON, the
                 backward-compatibility check
    misfit.py    which field of a record does not fit its schema, and why (error messages)
    registry.py  the ZooKeeper layout (/ids/<id>, /subjects/<subject>/<version>), register and
                 look up, a cache of ids
    header.py    the header every event starts with: reading it without the event's schema
                 (fast), making it for a producer (producer_id, seq)
    codec.py     records to framed events and back, one at a time or in bulk
    confluent_api.py  the Confluent Schema Registry's REST API over the registry (served by
                 `logbroker schema-registry`; not imported here: http.server stays out)

Typical use::

    from logbroker.serde import EventCodec, SchemaRegistry, load_schema_file

    with SchemaRegistry("127.0.0.1:2181/registry") as registry:
        registry.register("page_views", load_schema_file("include/schemas/page_views.avsc"))
        codec = EventCodec(registry)
        payload = codec.encode("page_views", {"header": {...}, "user_id": "u1", ...})
        record = codec.decode(payload)

Avro itself is fastavro's: nothing here encodes or decodes Avro data by hand except
`header.read_timestamp`, one varint on the mirror's hot path. The library imports no Airflow
and no Spark.
"""

from .codec import DecodedBatch, DecodedEvent, EventCodec, EventWriter
from .errors import (
    DecodeError,
    EncodeError,
    FramingError,
    IncompatibleSchemaError,
    RegistryError,
    SchemaError,
    SerdeError,
    UnknownSchemaError,
)
from .framing import MAGIC, PREFIX_SIZE, frame, is_event, schema_id_of, unframe
from .header import EventHeader, HeaderMaker, read_header, read_timestamp, read_timestamps
from .registry import SchemaRegistry, SchemaVersion
from .schemas import (
    AUDIT_COUNT_SCHEMA,
    EVENT_HEADER_SCHEMA,
    EventSchema,
    audit_count_schema,
    check_backward_compatible,
    load_schema_file,
    parse_event_schema,
)

__all__ = [
    "AUDIT_COUNT_SCHEMA",
    "EVENT_HEADER_SCHEMA",
    "MAGIC",
    "PREFIX_SIZE",
    "DecodeError",
    "DecodedBatch",
    "DecodedEvent",
    "EncodeError",
    "EventCodec",
    "EventHeader",
    "EventSchema",
    "EventWriter",
    "FramingError",
    "HeaderMaker",
    "IncompatibleSchemaError",
    "RegistryError",
    "SchemaError",
    "SchemaRegistry",
    "SchemaVersion",
    "SerdeError",
    "UnknownSchemaError",
    "audit_count_schema",
    "check_backward_compatible",
    "frame",
    "is_event",
    "load_schema_file",
    "parse_event_schema",
    "read_header",
    "read_timestamp",
    "read_timestamps",
    "schema_id_of",
    "unframe",
]
