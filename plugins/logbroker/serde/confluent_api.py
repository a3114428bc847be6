"""The Confluent Schema Registry's REST API over the ZooKeeper registry (registry.py).

Confluent's clients (confluent-kafka's SchemaRegistryClient, AvroSerializer and
AvroDeserializer, the Java KafkaAvroSerializer) look schemas up over HTTP; logbroker keeps them
in ZooKeeper. This serves the one through the other: the same subjects, versions and ids, so
an event framed by Confluent's serializer (magic 0, 4-byte big-endian id, Avro body: the same
framing as framing.py) is read by EventCodec like any other. `logbroker schema-registry` runs
it (commands/schema_registry.py), bound to 127.0.0.1:8081 (Confluent's port) by default.

Routes; every body is JSON, Content-Type application/vnd.schemaregistry.v1+json; {s} is a
subject (URL-encoded), {v} a version number or `latest` (or -1), {id} a schema id:

| method | path                                           | answer                                        |
|--------|------------------------------------------------|-----------------------------------------------|
| GET    | /                                              | {}                                            |
| GET    | /subjects                                      | ["page_views", ...]                           |
| GET    | /subjects/{s}/versions                         | [1, 2]                                        |
| GET    | /subjects/{s}/versions/{v}                     | {"subject", "version", "id", "schema"}        |
| GET    | /subjects/{s}/versions/{v}/schema              | the schema itself                             |
| POST   | /subjects/{s}/versions  {"schema": "..."}      | register: {"id", "subject", "version"}; a schema the subject has answers its version |
| POST   | /subjects/{s}  {"schema": "..."}               | look up: {"subject", "version", "id", "schema"} |
| GET    | /schemas/ids/{id}                              | {"schema": "..."}                             |
| GET    | /schemas/ids/{id}/schema                       | the schema itself                             |
| GET    | /schemas/ids/{id}/versions                     | [{"subject", "version"}, ...]                 |
| GET    | /schemas/ids/{id}/subjects                     | ["page_views", ...]                           |
| GET    | /schemas/types                                 | ["AVRO"]                                      |
| POST   | /compatibility/subjects/{s}/versions/{v}       | {"is_compatible": bool} (+ "messages" with ?verbose=true) |
| POST   | /compatibility/subjects/{s}/versions           | the same against the latest version           |
| GET    | /config, /config/{s}                           | {"compatibilityLevel": "BACKWARD"}            |
| PUT    | /config, /config/{s}  {"compatibility": ...}   | BACKWARD is accepted (it is already so); any other level 42203 |
| GET    | /mode, /mode/{s}                               | {"mode": "READWRITE"}                         |
| GET    | /associations/resources/{ns}/{topic}           | the topic's value subject: the topic's name   |

Errors are Confluent's: {"error_code": N, "message": "..."} with HTTP status N // 100 for the
five-digit codes (40401 -> 404):

| error_code | meaning                                                                      |
|------------|------------------------------------------------------------------------------|
| 40401      | subject not found                                                            |
| 40402      | version not found                                                            |
| 40403      | schema not found (no such id; a look-up of a schema the subject has not)     |
| 409        | incompatible schema (HTTP 409): the message names the field that breaks it   |
| 42201      | invalid schema: not JSON, not Avro, not an event schema (a `header` first), a schemaType other than AVRO, references |
| 42202      | invalid version: not a positive integer, `latest` or -1                      |
| 42203      | invalid compatibility level: logbroker enforces BACKWARD only                |
| 42208      | invalid subject name (empty, `/`, NUL, `.` or `..`)                          |
| 400        | a body that is not a JSON object                                             |
| 404, 405   | no such route; a method the route does not take (nothing is ever deleted)    |
| 50001      | the registry's ZooKeeper failed (unreachable, a malformed node)              |
| 500        | anything else (a bug; logged with its traceback)                             |

What differs from Confluent's registry, because logbroker's registry is what it is: only
AVRO schemas, and only event schemas (their first field is the shared `header`,
docs/events.md); the compatibility level is BACKWARD (a new version must read the latest
version's data), fixed; nothing is ever deleted (DELETE answers 405); schema strings come back
in logbroker's canonical JSON, not as registered. The subject of a topic's events is the
topic's name, not `<topic>-value`: the associations route says so, and confluent-kafka's
default subject name strategy (associated, falling back to topic-value) asks it first.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from .errors import IncompatibleSchemaError, RegistryError, SchemaError, UnknownSchemaError
from .registry import SchemaRegistry, SchemaVersion, subject_path
from .schemas import EventSchema, check_backward_compatible, parse_event_schema

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081  # Confluent's
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
COMPATIBILITY = "BACKWARD"  # registry.py: a new version must read the latest one's data
MAX_BODY = 16 * 1024 * 1024
MAX_VERSION = 2**31 - 1  # Confluent's versions are Java ints

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_SUBJECT = 42208
BAD_REQUEST = 400
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
BACKEND_ERROR = 50001


class ApiError(Exception):
    """An answer in Confluent's error shape; the HTTP status is the code's first three digits."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return self.error_code if self.error_code < 1000 else self.error_code // 100


class Request:
    """What a route sees: the path's parameters, the query, the JSON body."""

    def __init__(self, params: tuple[str, ...], query: dict[str, list[str]], body: Any) -> None:
        self.params = params
        self.query = query
        self.body = body

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[-1].lower() == "true"


Answer = tuple[int, Any]  # HTTP status, JSON value (bytes: sent as they are)
Route = Callable[["RegistryApi", Request], Answer]


class RegistryApi:
    """The routes, over one SchemaRegistry; `handle` answers one request, never raises."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        seg = r"([^/]+)"
        table: list[tuple[str, str, Route]] = [
            ("GET", r"", RegistryApi.root),
            ("GET", r"/subjects", RegistryApi.list_subjects),
            ("GET", rf"/subjects/{seg}/versions", RegistryApi.list_versions),
            ("GET", rf"/subjects/{seg}/versions/{seg}", RegistryApi.get_version),
            ("GET", rf"/subjects/{seg}/versions/{seg}/schema", RegistryApi.get_version_schema),
            ("POST", rf"/subjects/{seg}/versions", RegistryApi.register),
            ("POST", rf"/subjects/{seg}", RegistryApi.lookup),
            ("GET", r"/schemas/types", RegistryApi.schema_types),
            ("GET", rf"/schemas/ids/{seg}", RegistryApi.get_schema),
            ("GET", rf"/schemas/ids/{seg}/schema", RegistryApi.get_schema_text),
            ("GET", rf"/schemas/ids/{seg}/versions", RegistryApi.id_versions),
            ("GET", rf"/schemas/ids/{seg}/subjects", RegistryApi.id_subjects),
            ("POST", rf"/compatibility/subjects/{seg}/versions/{seg}", RegistryApi.compatible),
            ("POST", rf"/compatibility/subjects/{seg}/versions", RegistryApi.compatible_latest),
            ("GET", r"/config", RegistryApi.get_config),
            ("GET", rf"/config/{seg}", RegistryApi.get_config),
            ("PUT", r"/config", RegistryApi.put_config),
            ("PUT", rf"/config/{seg}", RegistryApi.put_config),
            ("GET", r"/mode", RegistryApi.get_mode),
            ("GET", rf"/mode/{seg}", RegistryApi.get_mode),
            ("GET", rf"/associations/resources/{seg}/{seg}", RegistryApi.associations),
        ]
        self.routes = [(method, re.compile(pattern), route) for method, pattern, route in table]

    def handle(self, method: str, target: str, body: bytes | None) -> Answer:
        url = urlsplit(target)
        path = url.path.rstrip("/")
        try:
            allowed = []
            for route_method, pattern, route in self.routes:
                match = pattern.fullmatch(path)
                if match is None:
                    continue
                if route_method != method:
                    allowed.append(route_method)
                    continue
                params = tuple(unquote(p) for p in match.groups())
                return route(self, Request(params, parse_qs(url.query), _json_body(body)))
            if allowed:
                raise ApiError(
                    METHOD_NOT_ALLOWED,
                    f"{method} {path} is not served (only {', '.join(sorted(set(allowed)))}): "
                    "logbroker's registry never deletes or changes a schema or a version",
                )
            raise ApiError(NOT_FOUND, f"no route {method} {path or '/'}")
        except ApiError as exc:
            return exc.status, {"error_code": exc.error_code, "message": exc.message}
        except IncompatibleSchemaError as exc:
            return INCOMPATIBLE_SCHEMA, {"error_code": INCOMPATIBLE_SCHEMA, "message": str(exc)}
        except SchemaError as exc:
            return 422, {"error_code": INVALID_SCHEMA, "message": str(exc)}
        except RegistryError as exc:  # UnknownSchemaError is answered where it is raised
            log.warning("%s %s: %s", method, path, exc)
            return 500, {"error_code": BACKEND_ERROR, "message": str(exc)}
        except Exception as exc:  # a bug: answered, logged, the server keeps serving
            log.exception("%s %s failed", method, path)
            return 500, {"error_code": 500, "message": f"{type(exc).__name__}: {exc}"}

    # -- subjects and versions --------------------------------------------------------------

    def root(self, request: Request) -> Answer:
        return 200, {}

    def list_subjects(self, request: Request) -> Answer:
        prefix = request.query.get("subjectPrefix", [""])[-1]
        return 200, [s for s in self.registry.subjects() if s.startswith(prefix)]

    def list_versions(self, request: Request) -> Answer:
        return 200, self._versions(request.params[0])

    def get_version(self, request: Request) -> Answer:
        return 200, _version_json(self._version(*request.params))

    def get_version_schema(self, request: Request) -> Answer:
        return 200, self._version(*request.params).schema.canonical.encode("utf-8")

    def register(self, request: Request) -> Answer:
        subject = _subject(request.params[0])
        schema = _schema_of(request.body, subject)
        registered = self.registry.register(subject, schema)
        return 200, {"id": registered.id, "subject": subject, "version": registered.version}

    def lookup(self, request: Request) -> Answer:
        subject = request.params[0]
        versions = self._versions(subject)
        schema = _schema_of(request.body, subject)
        for version in versions:
            found = self.registry.version(subject, version)
            if found.schema == schema:
                return 200, _version_json(found)
        raise ApiError(
            SCHEMA_NOT_FOUND,
            f"schema not found: subject {subject!r} has no version with this schema "
            f"({schema.fullname}; versions {versions})",
        )

    # -- schemas by id ----------------------------------------------------------------------

    def schema_types(self, request: Request) -> Answer:
        return 200, ["AVRO"]

    def get_schema(self, request: Request) -> Answer:
        return 200, {"schema": self._schema(request.params[0]).canonical}

    def get_schema_text(self, request: Request) -> Answer:
        return 200, self._schema(request.params[0]).canonical.encode("utf-8")

    def id_versions(self, request: Request) -> Answer:
        return 200, [{"subject": v.subject, "version": v.version} for v in self._uses(request)]

    def id_subjects(self, request: Request) -> Answer:
        return 200, sorted({v.subject for v in self._uses(request)})

    # -- compatibility, config, mode, associations ------------------------------------------

    def compatible(self, request: Request) -> Answer:
        subject, version = request.params
        against = self._version(subject, version)
        return 200, _compatibility(_schema_of(request.body, subject), against, request)

    def compatible_latest(self, request: Request) -> Answer:
        subject = _subject(request.params[0])
        schema = _schema_of(request.body, subject)
        try:
            latest = self.registry.latest(subject)
        except UnknownSchemaError:  # Confluent's answer for a subject with nothing to break
            return 200, {"is_compatible": True}
        return 200, _compatibility(schema, latest, request)

    def get_config(self, request: Request) -> Answer:
        return 200, {"compatibilityLevel": COMPATIBILITY}

    def put_config(self, request: Request) -> Answer:
        body = request.body if isinstance(request.body, dict) else {}
        level = str(body.get("compatibility", "")).upper()
        if level != COMPATIBILITY:
            raise ApiError(
                INVALID_COMPATIBILITY_LEVEL,
                f"invalid compatibility level {body.get('compatibility')!r}: logbroker's registry "
                f"enforces {COMPATIBILITY} for every subject (a new version must read the latest "
                "version's data), and it cannot be changed",
            )
        return 200, {"compatibility": COMPATIBILITY}

    def get_mode(self, request: Request) -> Answer:
        return 200, {"mode": "READWRITE"}

    def associations(self, request: Request) -> Answer:
        """logbroker's convention as an association: a topic's value subject is its name.

        confluent-kafka's default subject name strategy asks this before it falls back to
        `<topic>-value`; keys have no subject in logbroker (an empty list: the fallback).
        """
        namespace, topic = request.params
        kinds = request.query.get("associationType", ["value"])
        resource_type = request.query.get("resourceType", ["topic"])[-1]
        if resource_type != "topic" or "value" not in kinds:
            return 200, []
        _subject(topic)
        return 200, [
            {
                "subject": topic,
                "resourceName": topic,
                "resourceNamespace": namespace,
                "resourceType": "topic",
                "associationType": "value",
                "frozen": True,
            }
        ]

    # -- internals --------------------------------------------------------------------------

    def _versions(self, subject: str) -> list[int]:
        _subject(subject)
        try:
            return self.registry.versions(subject)
        except UnknownSchemaError:
            raise ApiError(SUBJECT_NOT_FOUND, f"subject {subject!r} not found") from None

    def _version(self, subject: str, version_text: str) -> SchemaVersion:
        versions = self._versions(subject)
        version = _version_number(version_text)
        if version is None:
            version = versions[-1]
        if version not in versions:
            raise ApiError(
                VERSION_NOT_FOUND,
                f"version {version} not found: subject {subject!r} has versions {versions}",
            )
        return self.registry.version(subject, version)

    def _schema(self, id_text: str) -> EventSchema:
        schema_id = _schema_id(id_text)
        try:
            return self.registry.schema(schema_id)
        except UnknownSchemaError:
            raise ApiError(SCHEMA_NOT_FOUND, f"schema {schema_id} not found") from None

    def _uses(self, request: Request) -> list[SchemaVersion]:
        schema_id = _schema_id(request.params[0])
        self._schema(request.params[0])  # 40403 for an unknown id
        return [
            found
            for subject in self.registry.subjects()
            for found in self.registry.all_versions(subject)
            if found.id == schema_id
        ]


def _json_body(body: bytes | None) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(BAD_REQUEST, f"the request body is not JSON: {exc}") from None


def _subject(subject: str) -> str:
    try:
        subject_path(subject)
    except ValueError as exc:
        raise ApiError(INVALID_SUBJECT, f"invalid subject: {exc}") from None
    return subject


def _schema_of(body: Any, subject: str) -> EventSchema:
    """The event schema a register, look-up or compatibility request carries; 42201 if none."""
    if not isinstance(body, dict):
        raise ApiError(BAD_REQUEST, 'the request body must be a JSON object {"schema": "..."}')
    schema_type = body.get("schemaType") or "AVRO"
    if schema_type != "AVRO":
        raise ApiError(
            INVALID_SCHEMA,
            f"schemaType {schema_type!r} is not served: logbroker's events are Avro, and its "
            "registry keeps AVRO schemas only",
        )
    if body.get("references"):
        raise ApiError(
            INVALID_SCHEMA,
            "schema references are not supported: logbroker's registry keeps self-contained "
            "schemas (define each named type inline; logbroker.EventHeader is known by name)",
        )
    text = body.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise ApiError(INVALID_SCHEMA, 'the request has no "schema" string')
    return parse_event_schema(text, f"schema for subject {subject!r}")


def _compatibility(schema: EventSchema, against: SchemaVersion, request: Request) -> Any:
    try:
        check_backward_compatible(
            schema, against.schema, f"subject {against.subject!r} version {against.version}"
        )
    except IncompatibleSchemaError as exc:
        answer: dict[str, Any] = {"is_compatible": False}
        if request.flag("verbose"):
            answer["messages"] = [str(exc)]
        return answer
    return {"is_compatible": True}


def _version_number(text: str) -> int | None:
    """A version from the path: None for the latest; 42202 if not a version."""
    if text in ("latest", "-1"):
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_VERSION:
        raise ApiError(
            INVALID_VERSION,
            f"invalid version {text!r}: a version is an integer from 1 to {MAX_VERSION}, "
            "'latest' or -1",
        )
    return int(text)


def _schema_id(text: str) -> int:
    if not text.isdigit():
        raise ApiError(SCHEMA_NOT_FOUND, f"schema {text!r} not found: ids are decimal integers")
    return int(text)


def _version_json(found: SchemaVersion) -> dict[str, Any]:
    return {
        "subject": found.subject,
        "version": found.version,
        "id": found.id,
        "schema": found.schema.canonical,
    }


# -- HTTP -------------------------------------------------------------------------------------


class RegistryApiServer(ThreadingHTTPServer):
    """The API on a socket; a thread per connection. `url` is where it listens."""

    daemon_threads = True

    def __init__(self, registry: SchemaRegistry, host: str, port: int) -> None:
        self.api = RegistryApi(registry)
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Confluent's clients reuse connections
    server: RegistryApiServer
    server_version = "logbroker-schema-registry"

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def _answer(self, method: str) -> None:
        length_text = self.headers.get("Content-Length", "0") or "0"
        if not length_text.isdigit() or int(length_text) > MAX_BODY:
            status, value = (
                BAD_REQUEST,
                {
                    "error_code": BAD_REQUEST,
                    "message": f"Content-Length {length_text!r}: at most {MAX_BODY} bytes",
                },
            )
            self.close_connection = True
        else:
            body = self.rfile.read(int(length_text)) if int(length_text) else None
            status, value = self.server.api.handle(method, self.path, body)
        data = value if isinstance(value, bytes) else json.dumps(value).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def log_error(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)
