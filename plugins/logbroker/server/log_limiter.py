"""Warnings a client can cause, at most one line per cause per interval.

A broken or hostile client makes the broker log a line per bad request (each closes its
connection); 10,000 bad frames once wrote 9,100 lines. Lines a client can cause go through
one `RateLimitedLog`:

    warnings = RateLimitedLog(log, interval_s=10.0, clock=time.monotonic)
    warnings.warning("request_size", "closing connection from %s: %s", client, reason)

The first line of a cause is logged at once. Until `interval_s` has passed since then, more
lines of that cause are only counted (not even formatted); the socket server's sweeper calls
`flush()` every half second, which logs, per cause whose interval is over and that has
counted lines, one line saying how many were suppressed and the last of them, and starts a
new interval. So a sustained flood writes one line per cause per interval, and every
suppressed line is accounted for. Causes are a small fixed set of names (never addresses).
An interval of 0 logs every line. The clock is injected: tests drive it by hand.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class _Cause:
    since: float  # when the current interval began (its first line was logged, or a summary)
    suppressed: int = 0
    last: tuple[str, tuple[Any, ...]] | None = None  # the last suppressed line, unformatted


class RateLimitedLog:
    """One logger's warnings, limited per cause (see the module doc)."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s < 0:
            raise ValueError(f"a log interval is 0 or more seconds, not {interval_s}")
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._causes: dict[str, _Cause] = {}
        self._lock = threading.Lock()  # the event loop and executor threads both log

    def warning(self, cause: str, msg: str, *args: Any, **kwargs: Any) -> bool:
        """Log `msg % args` as a warning unless `cause` was logged within the interval;
        returns whether it was logged. `kwargs` (e.g. exc_info) go to the logger."""
        return self.log(logging.WARNING, cause, msg, *args, **kwargs)

    def log(self, level: int, cause: str, msg: str, *args: Any, **kwargs: Any) -> bool:
        """`warning` at another level (an error a client's request caused)."""
        if self.interval_s == 0:
            self.logger.log(level, msg, *args, **kwargs)
            return True
        now = self.clock()
        with self._lock:
            state = self._causes.get(cause)
            if state is not None and now - state.since < self.interval_s:
                state.suppressed += 1
                state.last = (msg, args)
                return False
            summary = self._summary(cause, state, now) if state is not None else None
            self._causes[cause] = _Cause(since=now)
        if summary is not None:
            self.logger.warning(*summary)
        self.logger.log(level, msg, *args, **kwargs)
        return True

    def flush(self) -> int:
        """Log the count of suppressed lines of every cause whose interval is over; returns
        how many summary lines were written."""
        now = self.clock()
        summaries = []
        with self._lock:
            for cause, state in list(self._causes.items()):
                if now - state.since < self.interval_s:
                    continue
                summary = self._summary(cause, state, now)
                if summary is not None:
                    summaries.append(summary)
                    self._causes[cause] = _Cause(since=now)
                else:
                    del self._causes[cause]  # quiet for a whole interval: forget it
        for summary in summaries:
            self.logger.warning(*summary)
        return len(summaries)

    def _summary(self, cause: str, state: _Cause, now: float) -> tuple[Any, ...] | None:
        if not state.suppressed or state.last is None:
            return None
        msg, args = state.last
        return (
            "suppressed %d more warnings of kind %s in the last %.1f s; the last: " + msg,
            state.suppressed,
            cause,
            now - state.since,
            *args,
        )
