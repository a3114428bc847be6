"""Events for the source: reader schemas from the registry, and bulk decoding of payloads.

Schemas come from the registry (DESIGN.md §3.4): a topic's reader schema is the latest
version of the subject named after it; each payload's writer schema is the one its framing
names. Decoding returns, per payload, the record or the reason it is a bad record:

    not an event          no magic byte 0, or shorter than the 5-byte framing
    unknown schema id     the registry has no such id
    undecodable           the body does not read with its writer's schema (truncated,
                          left-over bytes, a writer schema the reader cannot resolve)
"""

from __future__ import annotations

import copy
import io
import json
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from .discovery import discover
from .options import SourceOptions

# The framing of DESIGN.md §3.4; logbroker.serde's framing and decoding replace these once
# serde is on main.
PREFIX_SIZE = 5
_PREFIX = struct.Struct(">BI")


class FramingError(ValueError):
    pass


def schema_id_of(payload: bytes) -> int:
    if len(payload) < PREFIX_SIZE:
        raise FramingError(f"payload of {len(payload)} bytes is too short for an event")
    if payload[0] != 0:
        raise FramingError(f"payload starts with byte {payload[0]:#04x}, not the event magic 0x00")
    return int(_PREFIX.unpack_from(payload)[1])


_clients: dict[str, KazooClient] = {}
_lock = threading.Lock()


class RegistryLookupError(LookupError):
    pass


def _client(connect: str) -> KazooClient:
    with _lock:
        client = _clients.get(connect)
        if client is None:
            client = KazooClient(hosts=connect, timeout=30)
            client.start(timeout=30)
            _clients[connect] = client
        return client


def latest_schema(connect: str, subject: str) -> tuple[int, dict[str, Any]]:
    client = _client(connect)
    try:
        versions = client.get_children(f"/subjects/{subject}")
    except NoNodeError:
        versions = []
    if not versions:
        raise RegistryLookupError(
            f"no schema is registered for subject {subject!r} (the topic's events) in {connect}"
        )
    data, _ = client.get(f"/subjects/{subject}/{max(versions)}")
    schema_id = int(data)
    return schema_id, schema_by_id(connect, schema_id)


def schema_by_id(connect: str, schema_id: int) -> dict[str, Any]:
    try:
        data, _ = _client(connect).get(f"/ids/{schema_id}")
    except NoNodeError:
        raise RegistryLookupError(f"unknown schema id {schema_id}") from None
    value: dict[str, Any] = json.loads(data)
    return value


def topics_of(options: SourceOptions) -> list[str]:
    if options.subscribe is not None:
        return list(options.subscribe)
    if options.assign is not None:
        return sorted(options.assign)
    return sorted({s.topic for s in discover(options)})


def reader_schemas(options: SourceOptions) -> dict[str, dict[str, Any]]:
    assert options.schema_registry is not None
    return {t: latest_schema(options.schema_registry, t)[1] for t in topics_of(options)}


def _header_millis(schema: dict[str, Any]) -> dict[str, Any]:
    """The reader schema with header.timestamp read as a plain long (epoch ms, no datetime)."""
    reader = copy.deepcopy(schema)
    header = reader["fields"][0]["type"]
    if isinstance(header, dict):
        for f in header["fields"]:
            if f["name"] == "timestamp":
                f["type"] = "long"
    return reader


@dataclass
class Decoded:
    records: list[dict[str, Any] | None]
    schema_ids: list[int | None]
    errors: dict[int, str]


class EventDecoding:
    """Decodes payloads of one topic to its reader schema; writer schemas cached by id."""

    def __init__(self, registry: str, reader_schema: dict[str, Any]) -> None:
        self.registry = registry
        self.reader = fastavro.parse_schema(_header_millis(reader_schema))
        self._writers: dict[int, Any] = {}

    def _writer(self, schema_id: int) -> Any:
        if schema_id not in self._writers:
            self._writers[schema_id] = fastavro.parse_schema(
                _header_millis(schema_by_id(self.registry, schema_id))
            )
        return self._writers[schema_id]

    def decode(self, payloads: list[bytes], where: Callable[[int], str]) -> Decoded:
        n = len(payloads)
        records: list[dict[str, Any] | None] = [None] * n
        ids: list[int | None] = [None] * n
        errors: dict[int, str] = {}
        read = fastavro.schemaless_reader
        for i, payload in enumerate(payloads):
            try:
                schema_id = schema_id_of(payload)
            except FramingError as exc:
                errors[i] = f"{where(i)}: not an event: {exc}"
                continue
            try:
                writer = self._writer(schema_id)
            except RegistryLookupError:
                errors[i] = f"{where(i)}: unknown schema id {schema_id}"
                continue
            body = io.BytesIO(payload)
            body.seek(PREFIX_SIZE)
            try:
                record = read(body, writer, self.reader)
            except Exception as exc:
                errors[i] = (
                    f"{where(i)}: undecodable with schema id {schema_id}: {type(exc).__name__}: {exc}"
                )
                continue
            if body.tell() != len(payload):
                errors[i] = (
                    f"{where(i)}: undecodable with schema id {schema_id}: "
                    f"{len(payload) - body.tell()} bytes left over after the record"
                )
                continue
            records[i] = record
            ids[i] = schema_id
        return Decoded(records, ids, errors)
