"""The sparse offset index of one segment of a 0.8-format log (0.8's `log/OffsetIndex`).

On disk, beside its segment:

    <log.dir>/<topic>-<partition>/<base offset, 20 digits zero-padded>.index

    entry (8 bytes, big-endian), back to back, offsets and positions strictly increasing:
      offset  size  field
      0       4     relative offset: the entry's offset - the segment's base offset
      4       4     position: where that entry starts in the segment file

One entry per `log.index.interval.bytes` (4096) of appended data: the segment reports each
top-level message set entry it appends (its offset as stored, its position, its size), and
the index takes it when more than the interval lies between the last indexed position (0 at
first) and this entry's start, as 0.8's LogSegment does. The offset is the entry's own field:
a compressed wrapper's is its last inner message's, so a lookup of an offset inside a
wrapper lands at or before the wrapper, never after it, and neither appending nor recovery
has to inflate anything to index it (0.8.2 inflated wrappers during recovery to index their
first inner offset). Since the rule depends only on the entries and their positions, an
index built entry by entry while appending is the same as one rebuilt from the segment.

`lookup(offset)` is a binary search for the greatest entry whose offset is <= `offset`: the
reader starts scanning the segment there ((base offset, 0) when there is none).
`truncate_to(offset)` drops the entries at or after `offset` (the log truncating its tail).

A plain file, not preallocated and not memory-mapped (0.8 preallocated 10 MiB and mapped
it, and trimmed the file at close): the entries are also held in memory, 16 bytes each
(4 MiB for a 1 GiB segment), so lookups read no file, and the file's size always says how
many entries it has. A crash can leave a torn last entry: it is dropped when the index is
opened. An index whose entries do not increase, or point past the segment's end, is
corrupt (`CorruptIndexError`): recovery rebuilds it from the segment (`rebuild`).
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path

from ..protocol.errors import LogbrokerError

INDEX_SUFFIX = ".index"
ENTRY_SIZE = 8
DEFAULT_INTERVAL_BYTES = 4096  # log.index.interval.bytes
OFFSET_DIGITS = 20
_ENTRY = struct.Struct(">ii")
_INT32_MAX = 2**31 - 1


class CorruptIndexError(LogbrokerError):
    """An index file that cannot be trusted: its segment's entries must be indexed again."""


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:0{OFFSET_DIGITS}d}{INDEX_SUFFIX}"


class OffsetIndex:
    """The index of the segment whose first offset is `base_offset`, kept at `path`."""

    def __init__(
        self,
        path: Path,
        base_offset: int,
        *,
        interval_bytes: int = DEFAULT_INTERVAL_BYTES,
        segment_size: int | None = None,
    ) -> None:
        """Open (or create) the index at `path`; `segment_size`, when given, is the size of
        its segment, which no entry may point at or past (else CorruptIndexError)."""
        if interval_bytes < 0:
            raise ValueError(f"log.index.interval.bytes must be >= 0, got {interval_bytes}")
        self.path = path
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self._offsets = array("q")
        self._positions = array("q")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self._load(segment_size)
        except BaseException:
            os.close(self._fd)
            raise

    def _load(self, segment_size: int | None) -> None:
        size = os.fstat(self._fd).st_size
        whole = size - size % ENTRY_SIZE
        if whole != size:
            os.ftruncate(self._fd, whole)  # a torn last entry, from a crash mid-write
        data = os.pread(self._fd, whole, 0)
        last_offset = last_position = -1
        for at in range(0, whole, ENTRY_SIZE):
            relative, position = _ENTRY.unpack_from(data, at)
            if relative <= last_offset or position <= last_position:
                raise CorruptIndexError(
                    f"{self.path}: entry {at // ENTRY_SIZE} (relative offset {relative}, "
                    f"position {position}) does not follow ({last_offset}, {last_position})"
                )
            if segment_size is not None and position >= segment_size:
                raise CorruptIndexError(
                    f"{self.path}: entry {at // ENTRY_SIZE} points at byte {position}, "
                    f"past its segment's {segment_size} bytes"
                )
            last_offset, last_position = relative, position
            self._offsets.append(self.base_offset + relative)
            self._positions.append(position)

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def last_position(self) -> int:
        """Where the last indexed entry starts (0 when none is)."""
        return self._positions[-1] if self._positions else 0

    def entries(self) -> list[tuple[int, int]]:
        """(offset, position) of every entry, in order."""
        return list(zip(self._offsets, self._positions, strict=True))

    def add(self, offset: int, position: int, size: int) -> bool:
        """The segment appended an entry: index it if the interval has passed since the last
        indexed position. True when it did. `size` is not needed by the rule (which looks at
        where the entry starts), but a caller that feeds whole appends passes them here
        entry by entry so that the index is what a rebuild makes."""
        if position - self.last_position > self.interval_bytes:
            self.append(offset, position)
            return True
        return False

    def add_entries(self, entries: Iterable[tuple[int, int, int]]) -> int:
        """`add` for each (offset, position, size) of one append; returns entries indexed."""
        before = len(self._offsets)
        batch = bytearray()
        try:
            for offset, position, _size in entries:
                if position - self.last_position > self.interval_bytes:
                    batch += self._entry(offset, position)
            if batch:
                _write_all(self._fd, batch)
        except BaseException:
            self._drop_after(before)  # nothing of a failed batch stays, in memory or on disk
            raise
        return len(self._offsets) - before

    def append(self, offset: int, position: int) -> None:
        """Index `offset` at `position` (both above the last entry's)."""
        before = len(self._offsets)
        entry = self._entry(offset, position)
        try:
            _write_all(self._fd, entry)
        except BaseException:
            self._drop_after(before)
            raise

    def _drop_after(self, keep: int) -> None:
        del self._offsets[keep:]
        del self._positions[keep:]
        if os.fstat(self._fd).st_size > keep * ENTRY_SIZE:
            os.ftruncate(self._fd, keep * ENTRY_SIZE)

    def _entry(self, offset: int, position: int) -> bytes:
        relative = offset - self.base_offset
        if self._offsets and offset <= self._offsets[-1]:
            raise ValueError(
                f"offset {offset} does not follow the last indexed {self._offsets[-1]}"
            )
        if self._positions and position <= self._positions[-1]:
            raise ValueError(
                f"position {position} does not follow the last indexed {self._positions[-1]}"
            )
        if not 0 <= relative <= _INT32_MAX or not 0 <= position <= _INT32_MAX:
            raise ValueError(
                f"offset {offset} (base {self.base_offset}) or position {position} does not "
                "fit an index entry's int32"
            )
        self._offsets.append(offset)
        self._positions.append(position)
        return _ENTRY.pack(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry whose offset is <= `offset`; (base
        offset, 0) when there is none: where a read for `offset` starts scanning."""
        i = bisect_right(self._offsets, offset)
        if i == 0:
            return self.base_offset, 0
        return self._offsets[i - 1], self._positions[i - 1]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset` (the segment loses those)."""
        keep = bisect_right(self._offsets, offset - 1)
        if keep < len(self._offsets):
            self._drop_after(keep)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> OffsetIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def rebuild(
        cls,
        path: Path,
        base_offset: int,
        entries: Iterable[tuple[int, int, int]],
        *,
        interval_bytes: int = DEFAULT_INTERVAL_BYTES,
    ) -> OffsetIndex:
        """The index of a segment whose entries are `entries` ((offset, position, size) of
        each top-level entry, in order: kafka08.message_set.entry_headers), written to a
        temporary file and moved over `path` (a crash leaves the old index or the new)."""
        temporary = path.with_name(path.name + ".tmp")
        temporary.unlink(missing_ok=True)
        index = cls(temporary, base_offset, interval_bytes=interval_bytes)
        try:
            index.add_entries(entries)
            index.flush()
            os.replace(temporary, path)
            index.path = path
        except BaseException:
            index.close()
            temporary.unlink(missing_ok=True)
            raise
        return index


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
