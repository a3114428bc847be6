"""Append marks: where a log's last appends ended, for the whole entries a follower copies.

In memory only, three parallel arrays (int64), oldest first, at most `2 * MARKS` long:

    ends         the log's end offset after each append (0.7: a byte offset; 0.8: logical)
    counts       messages the log had taken by then (counted through compression)
    coordinates  the same end as a byte coordinate, increasing through the log's segments
                 (a 0.8 log's own, see logical_log.py); absent when the ends are bytes already

The first mark is the log's end when it was opened (or where a truncation cut it), with a
count of 0. Every append ends at a message boundary, so the bytes between two marks are
whole messages, and the difference of their counts says how many: `whole` hands a follower
such bytes (REPLICA_FETCH) without walking its entries. When more than `2 * MARKS` are held
the oldest `MARKS` go; a truncation forgets the marks past the cut.

Not thread-safe: the log calls these under its lock.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable

from .segment import FileRegion

MARKS = 4096  # append ends remembered (between MARKS and 2 * MARKS)

# read(offset, coordinate or -1 when unknown, max bytes): the log's region from `offset`
RegionReader = Callable[[int, int, int], FileRegion]


class AppendMarks:
    """The marks of one log (see the module doc)."""

    __slots__ = ("_coordinates", "_counts", "_ends", "appended")

    def __init__(self, end: int, coordinate: int | None = None) -> None:
        """Marks starting at `end`; `coordinate` only when ends are not byte offsets."""
        self._ends = array("q", [end])
        self._counts = array("q", [0])
        self._coordinates = None if coordinate is None else array("q", [coordinate])
        self.appended = 0  # messages appended since the first mark

    def add(self, end: int, messages: int, coordinate: int = 0) -> None:
        """An append of `messages` ended at `end` (at `coordinate`); nothing if it did not
        move the end (an empty append)."""
        ends = self._ends
        if end == ends[-1]:
            return
        self.appended += messages
        coordinates = self._coordinates
        if len(ends) >= 2 * MARKS:
            del ends[:MARKS]
            del self._counts[:MARKS]
            if coordinates is not None:
                del coordinates[:MARKS]
        ends.append(end)
        self._counts.append(self.appended)
        if coordinates is not None:
            coordinates.append(coordinate)

    def forget_after(self, end: int, coordinate: int = 0) -> None:
        """The log was cut at `end` (at `coordinate`): the marks past it go; a cut between
        two marks starts the marks again there."""
        ends, counts, coordinates = self._ends, self._counts, self._coordinates
        keep = bisect.bisect_right(ends, end)
        del ends[keep:]
        del counts[keep:]
        if coordinates is not None:
            del coordinates[keep:]
        if not ends or ends[-1] != end:
            self._ends, self._counts = array("q", [end]), array("q", [0])
            if coordinates is not None:
                self._coordinates = array("q", [coordinate])
            self.appended = 0
        else:
            self.appended = counts[-1]

    def whole(self, offset: int, max_size: int, read: RegionReader) -> tuple[FileRegion, int]:
        """Bytes from `offset`, at most `max_size`, that end where an append ended, and how
        many messages they hold. When the marks do not say (`offset` is not a remembered
        append end, or no append within `max_size` bytes of it is remembered), `read`'s
        region of `max_size` and -1: its last entry may then be cut. `read` reads one
        segment at most; a segment's end is an append's end too."""
        ends, counts = self._ends, self._counts
        places = ends if self._coordinates is None else self._coordinates
        first = bisect.bisect_left(ends, offset)
        if first < len(ends) and ends[first] == offset:
            start = places[first]
            # ends[-1] is the log's end: an offset past it raises in `read`, as ever
            last = bisect.bisect_right(places, start + max_size, first) - 1
            if last > first:
                region = read(offset, start, places[last] - start)
                cut = start + region.length
                if cut != places[last]:  # the region stopped at its segment's end
                    last = bisect.bisect_left(places, cut, first, last)
                if places[last] == cut:
                    return region, counts[last] - counts[first]
            elif first == len(ends) - 1:
                return read(offset, start, max_size), 0  # at the end: nothing to send
        return read(offset, -1, max_size), -1

    def __len__(self) -> int:
        return len(self._ends)
