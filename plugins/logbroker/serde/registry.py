"""The schema registry, in ZooKeeper (docs/design.md §3.4).

It lives under its own connect string (config key `schema.registry.zk`, e.g.
`127.0.0.1:2181/registry`), shared by every cluster so that an id means the same everywhere.
Paths are relative to that chroot, which is created if missing; all nodes are persistent and
never changed or deleted once written:

| path                                   | value                                                   |
|----------------------------------------|---------------------------------------------------------|
| `/ids/<id>`                            | the schema, canonical JSON (schemas.py), UTF-8; ids are decimal from 1, e.g. `/ids/7` |
| `/subjects/<subject>`                  | empty; its children are the subject's versions          |
| `/subjects/<subject>/<version>`        | the id of that version's schema, decimal; versions are 10 digits from 1, e.g. `/subjects/page_views/0000000002` holding `7` |

By convention the subject of a topic's events is the topic's name (and `_audit` for the
audit's counts).

Registering: a schema that the subject already has (equal canonical JSON) returns that
version; a new version must be backward compatible with the latest one (schemas.py), else
IncompatibleSchemaError names the field. A schema that some other subject registered keeps
its id. A new id is the largest id + 1. The new version (and the new id, and the subject's
node if it is the first version) are created in ONE ZooKeeper transaction: if another
registrant took the same version or id meanwhile, nothing is created and we look again, so
concurrent registrants never share an id or a version, and no id is left without a version.

Reading: ids are immutable, so `schema(id)` asks ZooKeeper once per id per process and caches
the parsed schema forever; subjects and versions are read from ZooKeeper when asked (rare).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError

from .errors import RegistryError, SchemaError, UnknownSchemaError
from .schemas import EventSchema, check_backward_compatible, parse_event_schema

log = logging.getLogger(__name__)

CONFIG_KEY = "schema.registry.zk"  # in every .properties file that reads or writes events
IDS = "/ids"
SUBJECTS = "/subjects"
VERSION_DIGITS = 10
FIRST_ID = 1
FIRST_VERSION = 1


def id_path(schema_id: int) -> str:
    """`/ids/<id>`: the schema's canonical JSON."""
    return f"{IDS}/{schema_id}"


def subject_path(subject: str) -> str:
    """`/subjects/<subject>`: parent of the subject's versions."""
    if (
        not isinstance(subject, str)
        or subject in ("", ".", "..")
        or "/" in subject
        or "\x00" in subject
    ):
        raise ValueError(
            f"a subject must be a non-empty name without '/' or NUL, not '.' or '..'; got {subject!r}"
        )
    return f"{SUBJECTS}/{subject}"


def version_path(subject: str, version: int) -> str:
    """`/subjects/<subject>/<version, 10 digits>`: the id of that version's schema."""
    return f"{subject_path(subject)}/{version:0{VERSION_DIGITS}d}"


class SchemaVersion(NamedTuple):
    """One version of a subject."""

    subject: str
    version: int
    id: int
    schema: EventSchema


class SchemaRegistry:
    """Register and look up event schemas in ZooKeeper; see the module doc for the layout.

    Give it the registry's connect string (it then owns its ZooKeeper client), or a started
    KazooClient already inside the registry's chroot. Thread-safe. Close it when done.
    """

    def __init__(
        self,
        zk_connect: str | None = None,
        *,
        client: KazooClient | None = None,
        timeout: float = 10.0,
        max_attempts: int = 50,
    ) -> None:
        if (zk_connect is None) == (client is None):
            raise ValueError("a SchemaRegistry needs exactly one of zk_connect and client")
        self.max_attempts = max_attempts
        self._owns_client = client is None
        if client is None:
            assert zk_connect is not None
            client = KazooClient(hosts=zk_connect, timeout=timeout)
            # start_async, not start(): start() warns about a chroot that register() creates
            client.start_async().wait(timeout)
            if not client.connected:
                client.stop()
                client.close()
                raise RegistryError(
                    f"cannot connect to the schema registry's ZooKeeper at {zk_connect} "
                    f"within {timeout:g} s (schema.registry.zk)"
                ) from None
            self.connect = zk_connect
        else:
            self.connect = f"{client.hosts}{client.chroot or ''}"
        self.client = client
        self._lock = threading.Lock()
        self._schemas: dict[int, EventSchema] = {}  # ids are immutable: cached forever
        self._ids_by_canonical: dict[str, int] = {}
        self._layout_ready = False

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], where: str = "the config", **kwargs: Any
    ) -> SchemaRegistry:
        """From a .properties mapping's `schema.registry.zk` (docs/design.md §3.7)."""
        connect = props.get(CONFIG_KEY)
        if not connect:
            raise RegistryError(
                f"{where} has no {CONFIG_KEY}: events need the schema registry's connect "
                "string, e.g. schema.registry.zk=127.0.0.1:2181/registry"
            )
        return cls(connect, **kwargs)

    # -- reading ----------------------------------------------------------------------------

    def schema(self, schema_id: int) -> EventSchema:
        """The schema with this id (cached after the first call); UnknownSchemaError if none."""
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        path = id_path(schema_id)
        text = self._read(path)
        if text is None:
            raise UnknownSchemaError(
                f"unknown schema id {schema_id}: no node {path} in the registry at {self.connect}"
            )
        schema = self._parse_schema_node(path, text)
        with self._lock:
            self._remember(schema_id, schema)
        return schema

    def ids(self) -> list[int]:
        """Every registered id, ascending."""
        return sorted(self._ids())

    def subjects(self) -> list[str]:
        """Every subject that has at least one version, sorted."""
        subjects = self._children(SUBJECTS) or []
        return sorted(s for s in subjects if self._children(subject_path(s)))

    def versions(self, subject: str) -> list[int]:
        """The subject's version numbers, ascending; UnknownSchemaError for an unknown subject."""
        versions = self._versions(subject)
        if not versions:
            raise UnknownSchemaError(
                f"unknown subject {subject!r}: no versions under {subject_path(subject)} "
                f"in the registry at {self.connect}"
            )
        return versions

    def version(self, subject: str, version: int | None = None) -> SchemaVersion:
        """One version of a subject, the latest when `version` is None."""
        if version is None:
            version = self.versions(subject)[-1]
        path = version_path(subject, version)
        text = self._read(path)
        if text is None:
            known = self._versions(subject)
            raise UnknownSchemaError(
                f"subject {subject!r} has no version {version} (no node {path} in the registry "
                f"at {self.connect}; versions: {known or 'none'})"
            )
        schema_id = self._parse_id_node(path, text)
        return SchemaVersion(subject, version, schema_id, self.schema(schema_id))

    def latest(self, subject: str) -> SchemaVersion:
        """The subject's newest version."""
        return self.version(subject)

    def all_versions(self, subject: str) -> list[SchemaVersion]:
        """Every version of the subject, oldest first."""
        return [self.version(subject, v) for v in self.versions(subject)]

    # -- registering ------------------------------------------------------------------------

    def register(
        self, subject: str, schema: EventSchema | Mapping[str, Any] | str
    ) -> SchemaVersion:
        """Register `schema` under `subject`; the existing version if the subject has it.

        Raises SchemaError for a schema that is not a valid event schema and
        IncompatibleSchemaError (naming the field) for one that cannot read the latest
        version's data.
        """
        if not isinstance(schema, EventSchema):
            schema = parse_event_schema(
                schema if isinstance(schema, str) else dict(schema), f"schema for {subject!r}"
            )
        subject_node = subject_path(subject)
        self._ensure_layout()
        for _attempt in range(self.max_attempts):
            versions = self._versions(subject)
            existing = [self.version(subject, v) for v in versions]
            for known in existing:
                if known.schema == schema:
                    return known
            if existing:
                latest = existing[-1]
                check_backward_compatible(
                    schema,
                    latest.schema,
                    f"subject {subject!r}: the new version (would be {latest.version + 1}) vs "
                    f"version {latest.version} (id {latest.id})",
                )
            new_version = versions[-1] + 1 if versions else FIRST_VERSION
            schema_id = self._id_of(schema)
            transaction = self.client.transaction()
            if not versions and self.client.exists(subject_node) is None:
                transaction.create(subject_node, b"")
            new_id = schema_id is None
            if schema_id is None:
                schema_id = max(self._ids(), default=FIRST_ID - 1) + 1
                transaction.create(id_path(schema_id), schema.canonical.encode("utf-8"))
            transaction.create(version_path(subject, new_version), str(schema_id).encode())
            results = transaction.commit()
            if not any(isinstance(r, Exception) for r in results):
                with self._lock:
                    self._remember(schema_id, schema)
                log.info(
                    "registered %s version %d with %s id %d",
                    subject,
                    new_version,
                    "new" if new_id else "existing",
                    schema_id,
                )
                return SchemaVersion(subject, new_version, schema_id, schema)
            failures = [r for r in results if isinstance(r, Exception)]
            if not all(isinstance(r, _RACE_LOST) for r in failures):
                raise RegistryError(
                    f"registering {subject!r} in the registry at {self.connect} failed: {failures}"
                )
            log.debug("lost a registration race for %s; looking again", subject)
        raise RegistryError(
            f"registering {subject!r} in the registry at {self.connect}: other registrants took "
            f"every id or version tried, {self.max_attempts} times in a row; try again"
        )

    # -- the client -------------------------------------------------------------------------

    def close(self) -> None:
        if self._owns_client:
            self.client.stop()
            self.client.close()

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _remember(self, schema_id: int, schema: EventSchema) -> None:
        self._schemas[schema_id] = schema
        known = self._ids_by_canonical.get(schema.canonical)
        if known is None or schema_id < known:
            self._ids_by_canonical[schema.canonical] = schema_id

    def _id_of(self, schema: EventSchema) -> int | None:
        """The id some subject registered this schema with, if any (reads unseen ids once)."""
        for schema_id in self._ids():
            if schema_id not in self._schemas:
                self.schema(schema_id)
        return self._ids_by_canonical.get(schema.canonical)

    def _ids(self) -> list[int]:
        ids = []
        for name in self._children(IDS) or []:
            if not name.isdigit():
                raise RegistryError(
                    f"registry node {self.connect}{IDS}/{name} is not named by a decimal schema id"
                )
            ids.append(int(name))
        return ids

    def _versions(self, subject: str) -> list[int]:
        node = subject_path(subject)
        versions = []
        for name in self._children(node) or []:
            if not (name.isdigit() and len(name) == VERSION_DIGITS):
                raise RegistryError(
                    f"registry node {self.connect}{node}/{name} is not a {VERSION_DIGITS}-digit version"
                )
            versions.append(int(name))
        return sorted(versions)

    def _ensure_layout(self) -> None:
        if not self._layout_ready:
            self._call(self.client.ensure_path, IDS)
            self._call(self.client.ensure_path, SUBJECTS)
            self._layout_ready = True

    def _children(self, path: str) -> list[str] | None:
        try:
            children: list[str] = self._call(self.client.get_children, path)
            return children
        except NoNodeError:
            return None

    def _read(self, path: str) -> str | None:
        try:
            data, _stat = self._call(self.client.get, path)
        except NoNodeError:
            return None
        try:
            text: str = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RegistryError(
                f"registry node {self.connect}{path} is not UTF-8 text: {exc.reason} at byte {exc.start}"
            ) from None
        return text

    def _call(self, method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except NoNodeError:
            raise
        except (KazooException, KazooTimeoutError) as exc:
            raise RegistryError(
                f"the registry's ZooKeeper at {self.connect} failed on {args[0]}: "
                f"{type(exc).__name__} {exc}"
            ) from exc

    def _parse_schema_node(self, path: str, text: str) -> EventSchema:
        where = f"registry node {self.connect}{path}"
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RegistryError(
                f"{where} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
                f"(it should hold a schema's canonical JSON); its value starts {text[:40]!r}"
            ) from None
        try:
            return parse_event_schema(parsed, where)
        except SchemaError as exc:
            raise RegistryError(str(exc)) from None

    def _parse_id_node(self, path: str, text: str) -> int:
        stripped = text.strip()
        if not stripped.isdigit():
            raise RegistryError(
                f"registry node {self.connect}{path} should hold a decimal schema id, "
                f"but holds {text[:40]!r}"
            )
        return int(stripped)


# What a transaction answers when another registrant got there first: our create found the
# node (or its parent) changed; the other operations of the transaction are rolled back.
_RACE_LOST = (NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency)
