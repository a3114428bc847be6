"""Why an hour was not loaded: one exception per reason, each message one line that says what
and where. Nothing of the hour was committed when one of these is raised."""

from __future__ import annotations

from logbroker.protocol.errors import LogbrokerError


class LoadError(LogbrokerError):
    """The hour cannot be loaded as asked; nothing of it was committed."""


class LoadOrderError(LoadError):
    """The previous hour is not committed (or a later one already is)."""


class TooManyBadRecordsError(LoadError):
    """More bad records than --max-bad-fraction allows."""


class LoadLockError(LoadError):
    """Another load of the topic holds its lock (its holder is named), or this load lost it."""
