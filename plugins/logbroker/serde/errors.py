"""What can go wrong with events, one exception each; all are LogbrokerErrors.

Every message says what is wrong and where: the payload (a caller-given `where`, such as
``page_views 0-1 offset 1234``), the schema file, the registry node or the field path
(``header.seq``, ``tags[]``, ``prices{}``). None has a wire error code: the broker never sees
events, only opaque payloads.
"""

from __future__ import annotations

from ..protocol.errors import LogbrokerError


class SerdeError(LogbrokerError):
    """Base of the event errors."""


class FramingError(SerdeError):
    """A payload is not a framed event: too short, or a magic byte other than 0."""


class SchemaError(SerdeError):
    """A schema is not valid Avro, or not an event schema (no `header` first)."""


class IncompatibleSchemaError(SchemaError):
    """A new version cannot read the previous version's data; `field` is the path that breaks it."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class RegistryError(SerdeError):
    """The registry's ZooKeeper nodes are missing, malformed or unreachable."""


class UnknownSchemaError(RegistryError):
    """No schema has this id, or no subject/version has this name."""


class EncodeError(SerdeError):
    """A record does not fit its schema; `field` is the path of the first misfit ('' for the record)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class DecodeError(SerdeError):
    """A framed payload could not be read with its schema: truncated, left-over bytes, no header."""
