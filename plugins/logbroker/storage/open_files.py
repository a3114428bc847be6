"""A bounded pool of open segment files, so that partitions on disk do not cost descriptors.

A segment opens its file when it is first read or written and keeps it in this pool; when
more than `capacity` are open, the least recently used (a clock sweep: a segment used since
the last sweep gets a second chance) is let go. Letting go only drops the pool's and the
segment's references: the descriptor closes when the last holder lets go of its
`SegmentFile`, so a fetch whose FileRegion is being sent with sendfile, a flush in the
flusher thread or a segment deleted by retention while a reader holds it keep theirs. The
descriptors open at once are at most `capacity` plus those in use at that moment. When the
process runs out of descriptors anyway (client connections took them), opening a file lets
half of the pool go first and tries once more.
"""

from __future__ import annotations

import contextlib
import errno
import io
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .segment import LogSegment

DEFAULT_CAPACITY = 1000


class SegmentFile(io.FileIO):
    """An unbuffered segment file that closes when its last holder lets it go."""

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class OpenFiles:
    """At most `capacity` segment files kept open (see the module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"the pool of open files needs room for at least 1, not {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[LogSegment, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def open(self, segment: LogSegment) -> SegmentFile:
        """The segment's file, opened (and created if missing) if it is not open now."""
        with self._lock:
            file = segment.open_file
            if file is not None:
                return file
            try:
                file = SegmentFile(segment.path, "a+")  # O_APPEND: writes land at the end
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._open:
                    raise
                self._let_go(len(self._open) // 2 + 1)  # out of descriptors: make room
                file = SegmentFile(segment.path, "a+")
            segment.open_file = file
            self._open[segment] = None
            self._evict()
            return file

    def _evict(self) -> None:
        while len(self._open) > self.capacity:
            victim, _ = self._open.popitem(last=False)
            if victim.recently_used:
                victim.recently_used = False
                self._open[victim] = None  # a second chance, at the back
                continue
            victim.open_file = None

    def _let_go(self, count: int) -> None:
        for _ in range(min(count, len(self._open))):
            victim, _ = self._open.popitem(last=False)
            victim.open_file = None

    def forget(self, segment: LogSegment, *, keep_open: bool = False) -> None:
        """Take the segment out of the pool; its file stays open only while held."""
        with self._lock:
            self._open.pop(segment, None)
            if not keep_open:
                segment.open_file = None

    def __repr__(self) -> str:
        return f"OpenFiles({len(self._open)} of {self.capacity} open)"
