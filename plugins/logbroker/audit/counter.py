"""Events counted per (topic, window), taken out as deltas when they are published.

Counting is on every producer's hot path, so it works per batch, not per event: the smallest
and largest timestamp of a batch (two C-level passes) almost always fall in one window, and then
the whole batch is one addition to one dict entry. Only a batch that straddles a window edge is
counted event by event.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from .windows import WINDOW_MS

WindowKey = tuple[str, int]  # (topic, window start in UTC ms)


class WindowCounter:
    """Counts per (topic, window start); `take` removes and returns them. Thread-safe."""

    def __init__(self, window_ms: int = WINDOW_MS) -> None:
        if window_ms <= 0:
            raise ValueError(f"window_ms must be positive, got {window_ms}")
        self.window_ms = window_ms
        self._counts: dict[WindowKey, int] = {}
        self._lock = threading.Lock()
        self.earliest_start: int | None = None  # of the windows counted and not taken yet

    def add(self, topic: str, timestamps: Sequence[int]) -> None:
        """Count one event per timestamp (UTC ms) of `topic`."""
        if not timestamps:
            return
        w = self.window_ms
        low = min(timestamps)
        start = low - low % w
        if max(timestamps) < start + w:  # the whole batch in one window: the usual case
            self.add_window(topic, start, len(timestamps))
            return
        per_window: dict[int, int] = {}
        for ts in timestamps:
            s = ts - ts % w
            per_window[s] = per_window.get(s, 0) + 1
        self.add_windows(topic, per_window.items())

    def add_window(self, topic: str, start: int, count: int) -> None:
        """Count `count` events of `topic` in the window starting at `start`."""
        key = (topic, start)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + count
            if self.earliest_start is None or start < self.earliest_start:
                self.earliest_start = start

    def add_windows(self, topic: str, counts: Iterable[tuple[int, int]]) -> None:
        for start, count in counts:
            self.add_window(topic, start, count)

    def take(self, ending_by: int | None = None) -> dict[WindowKey, int]:
        """Remove and return the counts of windows that end at or before `ending_by` (all if None)."""
        with self._lock:
            if ending_by is None:
                taken, self._counts = self._counts, {}
            else:
                last_start = ending_by - self.window_ms
                taken = {k: n for k, n in self._counts.items() if k[1] <= last_start}
                for key in taken:
                    del self._counts[key]
            self.earliest_start = min((k[1] for k in self._counts), default=None)
            return taken

    def pending(self) -> dict[WindowKey, int]:
        """A copy of the counts not taken yet."""
        with self._lock:
            return dict(self._counts)
