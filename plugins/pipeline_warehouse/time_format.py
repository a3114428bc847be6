"""Hours, windows, durations and instants as the warehouse writes them (docs/design.md §3.5,
§3.6): parsing, formatting and the arithmetic on them.

An hour is named `YYYY-MM-DDTHH` (UTC), as in `load_hour=2026-11-22T10` and
`_checkpoints/<topic>/2026-11-22T10.json`. Audit windows are 10 minutes of event time, aligned
to the epoch; a window is held as its start in milliseconds since the epoch (UTC).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

HOUR_FORMAT = "%Y-%m-%dT%H"
HOUR_MS = 3_600_000
WINDOW_MS = 600_000  # docs/design.md §3.5: the audit window, 10 minutes
WINDOWS_PER_HOUR = HOUR_MS // WINDOW_MS

_HOUR_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}$")
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": HOUR_MS, "d": 24 * HOUR_MS}


def parse_hour(text: str) -> datetime:
    """`2026-11-22T10` -> that hour's start, UTC. ValueError names the expected form."""
    if not isinstance(text, str) or not _HOUR_RE.match(text):
        raise ValueError(f"an hour is YYYY-MM-DDTHH (UTC), e.g. 2026-11-22T10; got {text!r}")
    try:
        return datetime.strptime(text, HOUR_FORMAT).replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a real hour: {exc}") from None


def format_hour(hour: datetime) -> str:
    return hour.astimezone(UTC).strftime(HOUR_FORMAT)


def hour_name(hour: datetime | str) -> str:
    """An hour as the warehouse names it, from either form (a name is checked)."""
    return format_hour(parse_hour(hour) if isinstance(hour, str) else hour)


def next_hour(hour: str) -> str:
    return format_hour(parse_hour(hour) + timedelta(hours=1))


def previous_hour(hour: str) -> str:
    return format_hour(parse_hour(hour) - timedelta(hours=1))


def recent_hours(now: datetime, count: int) -> list[str]:
    """The `count` whole hours before `now`, newest first."""
    last = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    return [format_hour(last - timedelta(hours=i)) for i in range(count)]


def hour_ms(hour: datetime) -> int:
    return int(hour.timestamp() * 1000)


def hour_of_ms(ms: int) -> datetime:
    """The hour (start, UTC) that holds the instant `ms`."""
    return datetime.fromtimestamp((ms // HOUR_MS) * HOUR_MS / 1000, tz=UTC)


def hour_name_of_ms(ms: int) -> str:
    return format_hour(hour_of_ms(ms))


def hours_between(first: datetime, last: datetime) -> list[datetime]:
    """Every hour from `first` to `last`, both included."""
    out = []
    hour = first
    while hour <= last:
        out.append(hour)
        hour += timedelta(hours=1)
    return out


def parse_hour_range(text: str) -> list[datetime]:
    """`FROM..TO` (both included) or one hour -> the hours, in order."""
    first, sep, last = text.partition("..")
    start = parse_hour(first.strip())
    end = parse_hour(last.strip()) if sep else start
    if end < start:
        raise ValueError(f"the range {text!r} ends before it starts")
    return hours_between(start, end)


def parse_duration_ms(text: str) -> int:
    """`2h`, `90m`, `30s`, `1d`, `1500ms`, `0` -> milliseconds (a bare number is seconds)."""
    match = _DURATION_RE.match(text.strip())
    if not match:
        raise ValueError(
            f"a duration is a number and a unit (ms, s, m, h, d), e.g. 2h or 90m; got {text!r}"
        )
    number, unit = match.groups()
    return int(float(number) * _UNIT_MS[unit or "s"])


def format_duration_ms(ms: int) -> str:
    for unit in ("d", "h", "m", "s"):
        if ms and ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


def parse_instant(text: str) -> datetime:
    """An ISO 8601 instant (`2026-11-22T13:05:00Z`); a naive one is taken as UTC."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def format_instant(moment: datetime) -> str:
    """An instant to the millisecond, as the audit writes them: `2026-11-22T13:05:00.123Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def format_second(moment: datetime) -> str:
    """An instant to the second, as checkpoints write `committed_at`: `2026-11-22T11:02:13Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


T = TypeVar("T")


def argparse_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Wrap a parser above so that argparse prints its ValueError as a usage error."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = parse.__name__.replace("parse_", "")
    return convert
