"""Event-time windows of the audit (docs/design.md §3.5): fixed, 10 minutes, aligned to the epoch.

The window of an event with timestamp `ts` (UTC ms) is `[ts - ts % W, ts - ts % W + W)`, so
every producer, mirror and warehouse agrees on the windows without talking to each other; a
window is named by its start (UTC ms). Python's `%` floors, so events before 1970 fall in the
window below them too.
"""

from __future__ import annotations

WINDOW_MS = 10 * 60 * 1000


def window_start(timestamp_ms: int, window_ms: int = WINDOW_MS) -> int:
    """The start (UTC ms) of the window that holds `timestamp_ms`."""
    return timestamp_ms - timestamp_ms % window_ms


def window_end(timestamp_ms: int, window_ms: int = WINDOW_MS) -> int:
    """The end (exclusive, UTC ms) of the window that holds `timestamp_ms`."""
    return window_start(timestamp_ms, window_ms) + window_ms
