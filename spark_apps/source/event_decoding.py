"""Decoding events for the source, through logbroker.serde: reader schemas and bulk decoding.

A topic's reader schema is the latest version of the subject named after it (docs/design.md
§3.4), pinned by id when the query is planned; each payload is read with its writer's schema
(by the id in its framing) resolved to the reader's, by serde's `EventCodec.decode_many`,
which reads logical types as their base types (timestamps stay epoch integers: cheap to turn
into Arrow columns). A payload that is not an event is a bad record, with serde's reason:

    not an event          no magic byte 0, or shorter than the 5-byte framing
    unknown schema id     the registry has no such id
    undecodable           the body does not read with its writer's schema (truncated,
                          left-over bytes, a writer schema the reader cannot resolve)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from logbroker.serde import EventCodec, SchemaRegistry, SerdeError
from spark_apps.source.discovery import discover
from spark_apps.source.options import SourceOptions

_registries: dict[str, SchemaRegistry] = {}
_lock = threading.Lock()


def registry(connect: str) -> SchemaRegistry:
    """One registry client (and its id cache) per connect string per process."""
    with _lock:
        found = _registries.get(connect)
        if found is None:
            found = _registries[connect] = SchemaRegistry(connect, timeout=30)
        return found


def topics_of(options: SourceOptions) -> list[str]:
    if options.subscribe is not None:
        return list(options.subscribe)
    if options.assign is not None:
        return sorted(options.assign)
    return sorted({s.topic for s in discover(options)})


@dataclass(frozen=True)
class ReaderSchema:
    schema_id: int
    definition: dict[str, Any]


def reader_schemas(options: SourceOptions) -> dict[str, ReaderSchema]:
    assert options.schema_registry is not None
    reg = registry(options.schema_registry)
    out = {}
    for topic in topics_of(options):
        try:
            latest = reg.latest(topic)
        except SerdeError as exc:
            raise SerdeError(
                f"topic {topic!r}: no reader schema (the latest version of subject {topic!r}): {exc}"
            ) from exc
        out[topic] = ReaderSchema(latest.id, latest.schema.definition)
    return out


@dataclass
class Decoded:
    records: list[dict[str, Any] | None]
    schema_ids: list[int | None]
    errors: dict[int, str]


class EventDecoding:
    """Decodes payloads of one topic to its pinned reader schema, in bulk."""

    def __init__(self, registry_connect: str, reader: ReaderSchema) -> None:
        self.registry = registry(registry_connect)
        self.codec = EventCodec(self.registry)
        self.reader = self.registry.schema(reader.schema_id)

    def decode(self, payloads: list[bytes], where: Callable[[int], str]) -> Decoded:
        results = self.codec.decode_many(payloads, self.reader, errors="keep")
        records: list[dict[str, Any] | None] = []
        ids: list[int | None] = []
        errors: dict[int, str] = {}
        for i, result in enumerate(results):
            if isinstance(result, SerdeError):
                records.append(None)
                ids.append(None)
                errors[i] = f"{where(i)}: {_reason(result)}"
            else:
                records.append(result)
                ids.append(int.from_bytes(payloads[i][1:5], "big"))
        return Decoded(records, ids, errors)


def _reason(error: SerdeError) -> str:
    from logbroker.serde import FramingError, UnknownSchemaError

    text = str(error)
    if isinstance(error, FramingError):
        return f"not an event: {text}"
    if isinstance(error, UnknownSchemaError):
        return f"unknown schema id: {text}"
    return f"undecodable: {text}"
