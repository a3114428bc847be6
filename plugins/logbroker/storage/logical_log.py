"""The log of one partition in Kafka 0.8's format: logical offsets, and a sparse offset index
beside each segment (0.8.2's `log/Log.scala`, `log/LogSegment.scala`).

    <log.dir>/<topic>-<partition>/
        00000000000000000000.log     entries back to back (protocol/kafka08/message_set.py)
        00000000000000000000.index   its sparse offset index (offset_index.py)
        00000000000000004711.log     named by the logical offset of its first message
        00000000000000004711.index
        ...                          only the last segment is appended to

    entry:
      offset  size  field
      0       8     offset: the message's logical offset; a compressed wrapper's is that of
                    its last inner message (the inner messages carry theirs, consecutive)
      8       4     N, the message's size
      12      N     the 0.8 message (crc, magic 0, attributes, key, value)

Offsets are logical: the n-th message of the partition has offset n, through compressed
wrappers, and `end_offset` is the next one to assign. A segment's offsets run from its base
to the next segment's base. Offsets never restart: retention deletes whole segments from the
front, truncation cuts the tail, and appends continue at the end.

Reads: `read(offset, max_size)` starts at the entry that holds `offset`: the first entry of
its segment whose own offset is >= it (a compressed wrapper holding `offset` among its inner
messages is returned whole; the client skips the messages below the offset it asked for, as
0.8's did). The index gives the greatest indexed entry at or below the offset, and the reader
walks entry headers from there (at most about `log.index.interval.bytes` of them). The region
stays in one segment and is at most `max_size` bytes, so its last entry may be cut, as 0.8
served it. `FileRegion.offset` is the offset asked for. A reader at the start of the last
append, or at an append end a follower asks for, finds its byte without the index.

Appends: a producer's set (`append`) is validated as a whole, its offsets assigned from the
log's end (protocol/kafka08's `assign_offsets`: compressed wrappers re-encoded with absolute
inner offsets), and written to the last segment. A follower's copy of its leader's bytes
(`append_verbatim`) keeps the leader's offsets, and must continue the log exactly. Either way
the index entries of the append are written first and the segment's bytes second: a failed
write leaves neither (StorageError), a crash between them leaves index entries past the
segment's end, which make the index corrupt at open, so it is rebuilt.

The index is trusted only as far as its segment is: at open it is rebuilt from the segment's
entry headers when it is missing, corrupt (entries not increasing, or pointing past the
segment's end), changed while the broker was down, or its segment was recovered. Recovery
follows the 0.7 log's policy (log.py, recovery.py): every segment after an unclean stop, the
segments whose files changed since the clean-shutdown marker after a clean one; each entry
is validated as stored (offsets increasing, a wrapper's inner offsets consecutive up to its
own); the log is cut at the first bad entry, the cut bytes and later segments are kept aside
and never served, and the indexes of the set-aside segments are deleted. A segment whose
entries do not frame to its end when its end is read at open is recovered the same way.

Append marks (append_marks.py) count in logical offsets; their coordinate is a byte position
through the log, in memory only: each segment's `coordinate` is the sum of the sizes of the
segments before it since the log was opened.

The contract: this module knows nothing of ZooKeeper, replication or the wire. Who may append
(a leader), what a follower copies and where it truncates are decided above it; the log only
refuses what would break its own invariants (a damaged set, a copy that does not continue it).
Concurrency is log.py's: writers hold the log's lock, readers take none (copy-on-write segment
list; a segment's `tail`, its end offset and byte size, is replaced as one tuple).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ..protocol.errors import (
    CorruptMessageError,
    InvalidMessageError,
    OffsetOutOfRangeError,
    StorageError,
)
from ..protocol.kafka08.message import CODEC_MASK, MESSAGE_HEADER
from ..protocol.kafka08.message_set import (
    ENTRY_OVERHEAD,
    IndexPoint,
    Validation,
    assign_offsets,
    index_points,
    validate,
)
from ..protocol.message_formats import FORMAT_08
from ..protocol.wire import Buffer, byte_view
from .append_marks import AppendMarks
from .offset_index import (
    DEFAULT_INTERVAL_BYTES,
    ENTRY_SIZE,
    INDEX_SUFFIX,
    OFFSET_DIGITS,
    CorruptIndexError,
    OffsetIndex,
    index_file_name,
)
from .open_files import OpenFiles
from .recovery import WINDOW, EntryScan, RecoveryResult, recover_segment, recover_segments
from .segment import (
    FileRegion,
    LogSegment,
    empty_region,
    parse_segment_file_name,
    segment_file_name,
)
from .segmented_log import Clock, LogSettings, SegmentedLog, changed_since

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
_OFFSET_SIZE = struct.Struct(">qi")
_INT32_MAX = 2**31 - 1  # an index entry's position is an int32: no segment may be larger
_ATTRIBUTES_AT = ENTRY_OVERHEAD + 5  # an entry's attributes byte: after offset, size, crc, magic


class Walk(NamedTuple):
    """A header walk of a segment's bytes (`walk_entries`)."""

    points: list[IndexPoint]
    last_offset: int  # the last entry's offset as stored, -1 if none was walked
    end: int  # the byte where the walk stopped: the segment's size if its entries frame it


def walk_entries(fd: int, start: int, end: int, last_indexed: int, interval: int) -> Walk:
    """Walk the entry headers of a segment file from byte `start` (an entry) to `end`."""
    points: list[IndexPoint] = []
    position, last = start, -1
    while position < end:
        chunk = os.pread(fd, min(WINDOW, end - position), position)
        found, chunk_last, used = index_points(
            chunk, position, last_indexed, interval, end - position
        )
        if not used:
            break  # a header that does not frame an entry within the file
        if found:
            points += found
            last_indexed = found[-1][1]
        last = chunk_last
        position += used
    return Walk(points, last, position)


class LogicalSegment(LogSegment):
    """A segment of a 0.8-format log: its file (LogSegment's bytes, pool and torn-write
    handling), its offset index, and `tail`: (the offset after its last message, the byte
    where that message ends), replaced whole after each write so that a reader sees the two
    agree; `end_offset` is its first item. `coordinate`: see the module doc.

    Made by LogicalLog, which opens the index (LogSegment's `create` and `open` do not).
    A segment before the last is `sealed`: its index file is closed and its entries stay in
    memory for lookups, so that only the last segment of a log holds an index descriptor
    (segment files are in the bounded pool of open_files.py)."""

    __slots__ = ("coordinate", "index", "sealed", "tail")

    def __init__(
        self,
        path: Path,
        base_offset: int,
        last_modified_ms: int,
        size: int,
        files: OpenFiles,
        index: OffsetIndex,
        next_offset: int,
        coordinate: int,
        sealed: bool = False,
    ) -> None:
        """`sealed`: `index` is closed already (see `seal`)."""
        super().__init__(path, base_offset, last_modified_ms, size, files)
        self.index = index
        self.tail = (next_offset, size)
        self.coordinate = coordinate
        self.sealed = sealed

    @property
    def end_offset(self) -> int:
        return self.tail[0]

    def region(self, position: int, max_length: int) -> FileRegion:
        """Up to `max_length` bytes from `position` (an entry's start, or the end), with the
        offset of the first message there."""
        next_offset, size = self.tail
        length = max(0, min(max_length, size - position))
        if position >= size:
            return FileRegion(self, position, length, next_offset)
        return FileRegion(self, position, length, self._first_offset_at(position))

    def _first_offset_at(self, position: int) -> int:
        file = self.file
        stored, size = _OFFSET_SIZE.unpack(os.pread(file.fileno(), ENTRY_OVERHEAD, position))
        whole = os.pread(file.fileno(), ENTRY_OVERHEAD + size, position)
        if not whole[_ATTRIBUTES_AT] & CODEC_MASK:
            return int(stored)
        return int(stored) - validate(whole).messages + 1  # a wrapper: its first inner offset

    def seal(self) -> None:
        """No more appends (a later segment exists): the index file is flushed and closed."""
        if not self.sealed:
            self.index.flush()
            self.index.close()
            self.sealed = True

    def unseal(self, interval_bytes: int) -> None:
        """The last segment again (a truncation cut the later ones): its index is opened
        again, to take entries."""
        if self.sealed:
            self.index = OffsetIndex(
                self.index.path, self.base_offset, interval_bytes=interval_bytes
            )
            self.sealed = False

    def flush(self) -> None:
        if not self.sealed:
            self.index.flush()
        super().flush()

    def close(self) -> None:
        super().close()
        self.index.close()

    def delete(self) -> None:
        super().delete()
        self.index.close()
        with contextlib.suppress(FileNotFoundError):
            self.index.path.unlink()

    def __repr__(self) -> str:
        return f"LogicalSegment({self.path.name}, offsets {self.base_offset}..{self.tail[0]})"


class _StoredScan(EntryScan):
    """Recovery's walk of a 0.8 segment: each entry validated as stored, and the index points
    and the last offset of the valid prefix collected on the way."""

    size_at = 8
    overhead = ENTRY_OVERHEAD
    min_size = MESSAGE_HEADER

    def __init__(self, base_offset: int, interval: int) -> None:
        self.interval = interval
        self.last = base_offset - 1  # the last valid message's offset
        self.points: list[IndexPoint] = []
        self.last_indexed = 0

    def check(self, chunk: bytes, position: int) -> tuple[int, InvalidMessageError | None]:
        result = validate(chunk, stored=True)
        valid, error = result.valid_bytes, result.error
        if result.entries and result.first_offset <= self.last:
            return 0, CorruptMessageError(
                f"the entry at byte {position} (offset {result.first_offset}) does not follow "
                f"offset {self.last}: stored offsets increase"
            )
        if error is not None and position:  # validate counts bytes from the window's start
            error = type(error)(f"{error} (in the bytes from byte {position} of the segment)")
        if valid:
            found, _, _ = index_points(
                memoryview(chunk)[:valid], position, self.last_indexed, self.interval
            )
            if found:
                self.points += found
                self.last_indexed = found[-1][1]
            self.last = result.last_offset
        return valid, error

    def where(self, position: int) -> str:
        return f"byte {position} (offset {self.last + 1})"

    def offset_at(self, segment: LogSegment, position: int) -> int:
        return self.last + 1  # where the scan stopped: the offset after the last valid entry


class LogicalLog(SegmentedLog[LogicalSegment]):
    """Append-only log of one topic-partition in Kafka 0.8's format (see the module doc)."""

    message_format = FORMAT_08  # logical offsets, 0.8's entries

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogSettings,
        clock: Clock,
        *,
        recover: bool = False,
        modified_after_ns: int | None = None,
        request_flush: Callable[[LogicalLog], None] | None = None,
        files: OpenFiles | None = None,
        index_interval_bytes: int = DEFAULT_INTERVAL_BYTES,
    ) -> None:
        if not 0 < config.segment_bytes <= _INT32_MAX:
            raise ValueError(
                f"a 0.8-format log's segments hold at most {_INT32_MAX} bytes (an index "
                f"entry's position is an int32), not log.file.size={config.segment_bytes}"
            )
        if index_interval_bytes < 0:
            raise ValueError(f"log.index.interval.bytes must be >= 0, not {index_interval_bytes}")
        super().__init__(
            directory, topic, partition, config, clock, request_flush=request_flush, files=files
        )
        self.index_interval_bytes = index_interval_bytes
        # a header walk reads this much at a time: an index entry is at most one interval
        # (and one entry) before the entry a reader looks for
        self._seek_window = max(8192, 2 * index_interval_bytes)
        # (first offset, segment, byte) of the last append: a reader waiting at the end
        # reads from there next, without the index
        self._last_start: tuple[int, LogicalSegment, int] | None = None
        self._load(recover, modified_after_ns)
        self._marks = AppendMarks(self.end_offset, self._end_coordinate())

    # -- loading ----------------------------------------------------------------------

    def _load(self, recover: bool, modified_after_ns: int | None) -> None:
        """Open the segments and their indexes (the module doc says which are checked and
        which indexes are rebuilt)."""
        found: list[tuple[int, Path]] = []
        indexes: list[Path] = []
        for path in self.directory.iterdir():
            base = parse_segment_file_name(path.name, LOG_SUFFIX)
            if base is not None and path.is_file():
                found.append((base, path))
            elif _is_index_file(path.name):
                indexes.append(path)
        found.sort()
        wanted = {path.with_suffix(INDEX_SUFFIX) for _, path in found}
        for path in indexes:  # a set-aside or deleted segment's, or a rebuild's leftover
            if path not in wanted:
                path.unlink(missing_ok=True)
        if not found:
            self._set_segments((self._create_segment(0, self.clock(), 0),))
            if recover:
                self.recovery = RecoveryResult(0, 0, "")
            return
        plain = [self._plain_segment(base, path) for base, path in found]
        policy = changed_since(recover, modified_after_ns)
        opened: dict[int, tuple[OffsetIndex, int]] = {}  # base -> (index, end offset or -1)
        last = plain[-1]

        def check(segment: LogSegment) -> bool:
            if policy is not None and policy(segment):
                return True
            return not self._open_unchecked(segment, segment is last, modified_after_ns, opened)

        def recover_one(segment: LogSegment) -> RecoveryResult:
            scan = _StoredScan(segment.base_offset, self.index_interval_bytes)
            result = recover_segment(segment, scan)
            index = OffsetIndex.rebuild(
                self._index_path(segment.base_offset),
                segment.base_offset,
                scan.points,
                interval_bytes=self.index_interval_bytes,
            )
            index.close()  # the last segment's is opened again at the end
            opened[segment.base_offset] = (index, scan.last + 1)
            return result

        kept, cut = recover_segments(plain, check, recover_one)
        for segment in plain:
            segment.close()  # out of the pool: the log's own segments take their files
        for segment in plain[len(kept) :]:  # set aside: their indexes describe nothing served
            self._index_path(segment.base_offset).unlink(missing_ok=True)
        self._set_segments(self._logical_segments(kept, opened))
        if policy is not None:
            self._report_recovery(cut, recover, self.end_offset)
        elif cut is not None:
            self._report_recovery(cut, recover, self.end_offset, "of a segment not framed")

    def _plain_segment(self, base: int, path: Path) -> LogSegment:
        stat = path.stat()
        return LogSegment(path, base, int(stat.st_mtime * 1000), stat.st_size, self.files)

    def _index_path(self, base_offset: int) -> Path:
        return self.directory / index_file_name(base_offset)

    def _open_unchecked(
        self,
        segment: LogSegment,
        is_last: bool,
        modified_after_ns: int | None,
        opened: dict[int, tuple[OffsetIndex, int]],
    ) -> bool:
        """Read the index of a segment recovery does not check (its entries, in memory; the
        file is closed), rebuilt from its entry headers if it cannot be trusted; for the last
        segment read its end offset from the entries after the last indexed one. False when
        the entries walked do not frame the segment to its end (it is then recovered)."""
        base = segment.base_offset
        index = self._trusted_index(segment, modified_after_ns)
        if index is not None and not is_last:
            index.close()  # entries in memory: an older segment holds no descriptor
            opened[base] = (index, -1)  # its end is the next segment's base
            return True
        start = 0 if index is None else index.last_position
        file = segment.file
        walk = walk_entries(file.fileno(), start, segment.size, start, self.index_interval_bytes)
        if walk.end != segment.size:
            if index is not None:
                index.close()
            log.warning(
                "%s: the entries of %s do not frame its %d bytes (a header at byte %d does "
                "not); it is recovered",
                self.name,
                segment.path.name,
                segment.size,
                walk.end,
            )
            return False
        if index is None:
            index = OffsetIndex.rebuild(
                self._index_path(base), base, walk.points, interval_bytes=self.index_interval_bytes
            )
        elif walk.points:  # entries the index should hold and does not: it takes them now
            index.add_entries(walk.points)
        index.close()
        opened[base] = (index, walk.last_offset + 1 if walk.last_offset >= 0 else base)
        return True

    def _trusted_index(
        self, segment: LogSegment, modified_after_ns: int | None
    ) -> OffsetIndex | None:
        """The segment's index as it is on disk, or None when it must be rebuilt."""
        path = self._index_path(segment.base_offset)
        try:
            stat = path.stat()
        except FileNotFoundError:
            log.info("%s: %s has no index; it is rebuilt", self.name, segment.path.name)
            return None
        if modified_after_ns is not None and stat.st_mtime_ns >= modified_after_ns:
            log.warning("%s: %s changed while down; it is rebuilt", self.name, path.name)
            return None
        if stat.st_size % ENTRY_SIZE:  # a write torn by a crash: what else did it miss?
            log.warning("%s: %s ends in a torn entry; it is rebuilt", self.name, path.name)
            return None
        try:
            return OffsetIndex(
                path,
                segment.base_offset,
                interval_bytes=self.index_interval_bytes,
                segment_size=segment.size,
            )
        except CorruptIndexError as exc:
            log.warning("%s: %s; it is rebuilt from its segment", self.name, exc)
            return None

    def _logical_segments(
        self, kept: list[LogSegment], opened: dict[int, tuple[OffsetIndex, int]]
    ) -> tuple[LogicalSegment, ...]:
        segments: list[LogicalSegment] = []
        coordinate = 0
        for i, plain in enumerate(kept):
            index, end = opened[plain.base_offset]
            following = kept[i + 1].base_offset if i + 1 < len(kept) else None
            if end < 0:
                assert following is not None  # only a segment before the last is not walked
                end = following
            elif following is not None and end != following:
                log.warning(
                    "%s: segment %s ends at offset %d but the next starts at %d",
                    self.name,
                    plain.path.name,
                    end,
                    following,
                )
            segments.append(
                LogicalSegment(
                    plain.path,
                    plain.base_offset,
                    plain.last_modified_ms,
                    plain.size,
                    self.files,
                    index,
                    end,
                    coordinate,
                    sealed=True,  # every index was closed once read or rebuilt
                )
            )
            coordinate += plain.size
        segments[-1].unseal(self.index_interval_bytes)  # the last one takes entries
        return tuple(segments)

    def _create_segment(self, base_offset: int, now: int, coordinate: int) -> LogicalSegment:
        index_path = self._index_path(base_offset)
        index_path.unlink(missing_ok=True)  # left by a segment of that name that is gone
        index = OffsetIndex(index_path, base_offset, interval_bytes=self.index_interval_bytes)
        path = self.directory / segment_file_name(base_offset, LOG_SUFFIX)
        segment = LogicalSegment(
            path, base_offset, now, 0, self.files, index, base_offset, coordinate
        )
        segment.file  # noqa: B018 - creates the file
        return segment

    def _new_segment(self, after: LogicalSegment, now: int) -> LogicalSegment:
        next_offset, size = after.tail
        segment = self._create_segment(next_offset, now, after.coordinate + size)
        after.seal()
        return segment

    # -- what readers see -------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self._segments[-1].tail[0]

    def read(self, offset: int, max_size: int, visible_end: int | None = None) -> FileRegion:
        """Whole entries from the one holding `offset`, at most `max_size` bytes (the last
        may be cut), from one segment.

        offset == end -> empty region; offset < start or > end -> OffsetOutOfRangeError.
        With `visible_end` (a replicated partition's high watermark, for consumers) no entry
        holding an offset at or past it is returned: an offset between it and the log's end
        reads as empty.
        """
        return self._read(offset, -1, max_size, visible_end)

    def _region_at(self, offset: int, coordinate: int, max_size: int) -> FileRegion:
        return self._read(offset, coordinate, max_size, None)

    def _read(
        self, offset: int, coordinate: int, max_size: int, visible_end: int | None
    ) -> FileRegion:
        """`read`, where an append mark says `offset` starts at `coordinate` (-1: unknown)."""
        view = self._view
        segments = view[0]
        end = segments[-1].tail[0]
        if offset == end:
            return empty_region(offset)
        if offset < segments[0].base_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: "
                f"the log holds offsets {segments[0].base_offset} to {end}"
            )
        if visible_end is not None and offset >= visible_end:
            return empty_region(offset)
        return self._region(view, offset, coordinate, max_size, visible_end)

    def _region(
        self,
        view: tuple[tuple[LogicalSegment, ...], tuple[int, ...]],
        offset: int,
        coordinate: int,
        max_size: int,
        visible_end: int | None,
    ) -> FileRegion:
        """The region of a read whose offset is in range (see `read`); `coordinate`: where
        an append mark says `offset` starts, -1 when unknown."""
        segments, bases = view
        i = bisect_right(bases, offset) - 1
        segment = segments[i]
        next_offset, limit = segment.tail
        position = coordinate - segment.coordinate if coordinate >= 0 else -1
        if not 0 <= position <= limit:
            start = self._last_start
            if start is not None and start[0] == offset and start[1] is segment:
                position = start[2]
            else:
                position = self._seek(segment, offset, limit)[0]
        if position >= limit and i + 1 < len(segments):
            # nothing at or after `offset` in its segment (a gap before the next one)
            segment = segments[i + 1]
            next_offset, limit = segment.tail
            position = 0
        if visible_end is not None and visible_end < next_offset:
            limit = self._seek(segment, visible_end, limit)[0]
        length = max(0, min(max_size, limit - position))
        return FileRegion(segment, position, length, offset)

    def _seek(
        self, segment: LogicalSegment, offset: int, limit: int, previous: bool = False
    ) -> tuple[int, int]:
        """(the byte of the first entry of `segment` before `limit` whose offset as stored
        is >= `offset`, or `limit` if none; with `previous`, the stored offset of the entry
        before it, base - 1 if none). From the index's entry at or below the offset (below
        it with `previous`, so that the walk passes the entry before), walking headers."""
        try:
            found, position = segment.index.lookup(offset - 1 if previous else offset)
        except IndexError:  # a truncation took the entry between the search and the read
            found, position = segment.base_offset - 1, 0
        if not previous and found == offset and position < limit:
            return position, -1  # the indexed entry is the one
        before = segment.base_offset - 1
        window = self._seek_window
        unpack = _OFFSET_SIZE.unpack_from
        while position < limit:
            chunk = _read_bytes(segment, position, min(window, limit - position))
            n, at = len(chunk), 0
            while at + ENTRY_OVERHEAD <= n:
                stored, size = unpack(chunk, at)
                if stored >= offset:
                    return position + at, before
                if size < MESSAGE_HEADER:
                    return limit, before  # not an entry: nothing here is served
                before = stored
                at += ENTRY_OVERHEAD + size
            if at == 0:
                break  # a header cut by `limit`: not an entry either
            position += at
        return limit, before

    # -- writing ----------------------------------------------------------------------

    def append(self, message_set: Buffer, validation: Validation | None = None) -> tuple[int, int]:
        """Append a producer's set with the log's next offsets; returns (the offset of its
        first message, the log's new end).

        The set is validated whole (protocol/kafka08's `validate`: sizes, CRCs, magic,
        codecs, and each wrapper's inner set); a damaged set, or one whose first entry is
        incomplete, raises InvalidMessageError and appends nothing. A partial trailing entry
        is dropped. Offsets are assigned from the log's end (`assign_offsets`). A write that
        fails raises StorageError and appends nothing. Pass `validation` if the caller
        already validated these exact bytes.
        """
        check = validation if validation is not None else validate(message_set)
        data = self._valid_entries(message_set, check)
        if data is None:
            end = self.end_offset
            return end, end
        with self._lock:
            first = self._segments[-1].tail[0]
            try:
                assigned = assign_offsets(data, first, validation=check)
            except InvalidMessageError as exc:
                raise type(exc)(f"{self.name}: {exc}") from None
            now = self.clock()
            segment = self._maybe_roll(len(assigned.data), now)
            position = self._write(segment, assigned.data, now, None)
            end = assigned.next_offset
            segment.tail = (end, segment.size)
            self._last_start = (first, segment, position)
            flush_now = self._count_appended(
                assigned.messages, end, segment.coordinate + segment.size
            )
        if flush_now:
            self._flush_soon()
        return first, end

    def append_many(self, sets: list[tuple[Buffer, Validation]]) -> tuple[int, int]:
        """Append already validated sets in order (Log.append_many's contract: produces
        that get no answer); returns the messages and bytes appended. Each set gets the
        next offsets (`assign_offsets`) as `append` gives them, and the sets of one segment
        go in one write (its index entries in one more), where `append` makes two of each
        per set. A damaged set raises InvalidMessageError before anything is written; a
        write that fails raises StorageError: what went to an older segment before a roll
        is kept whole, nothing of the failed write is."""
        valid = [(v, check) for data, check in sets if (v := self._valid_entries(data, check))]
        messages = nbytes = 0
        flush_now = False
        with self._lock:
            now = self.clock()
            segment = self._segments[-1]
            next_offset = segment.tail[0]
            pending: list[Buffer] = []
            first = next_offset
            size = count = produced = 0  # bytes written, messages, bytes as produced

            def write() -> None:
                nonlocal flush_now, messages, nbytes
                data = pending[0] if len(pending) == 1 else b"".join(pending)
                position = self._write(segment, data, now, None)
                segment.tail = (next_offset, segment.size)
                self._last_start = (first, segment, position)
                end = segment.coordinate + segment.size
                flush_now = self._count_appended(count, next_offset, end) or flush_now
                messages, nbytes = messages + count, nbytes + produced

            for data, check in valid:
                try:
                    assigned = assign_offsets(data, next_offset, validation=check)
                except InvalidMessageError as exc:
                    if pending:
                        write()  # the sets before it, as one append each would have kept them
                    raise type(exc)(f"{self.name}: {exc}") from None
                n = len(assigned.data)
                if pending and self._should_roll(segment, n, now, pending=size):
                    write()
                    pending, first, size, count, produced = [], next_offset, 0, 0, 0
                if not pending and self._should_roll(segment, n, now):
                    segment = self._roll(now)
                pending.append(assigned.data)
                size += n
                count += assigned.messages
                produced += check.valid_bytes
                next_offset = assigned.next_offset
            if pending:
                write()
        if flush_now:
            self._flush_soon()
        return messages, nbytes

    def append_verbatim(self, data: Buffer, messages: int) -> int:
        """Append bytes copied from a leader's log as they are (whole entries, offsets
        assigned by the leader, checked by the follower when it fetched them). Their first
        message must be the log's end offset: a gap or an overlap raises
        OffsetOutOfRangeError naming both, and bytes that are not whole entries raise
        InvalidMessageError; either appends nothing. `messages`: how many they hold
        (through compression), -1 if not known. Returns the new end offset."""
        view = byte_view(data)
        if not len(view):
            return self.end_offset
        with self._lock:
            segment = self._segments[-1]
            end = segment.tail[0]
            now = self.clock()
            rolling = self._should_roll(segment, len(view), now)
            position = 0 if rolling else segment.size
            last_indexed = 0 if rolling else segment.index.last_position
            points, last, walked = index_points(
                view, position, last_indexed, self.index_interval_bytes
            )
            if walked != len(view):
                raise InvalidMessageError(
                    f"{self.name}: {len(view)} bytes copied from the leader are not whole "
                    f"entries (the entry at byte {walked} does not fit); nothing appended"
                )
            first = _first_message(view, last, messages)
            if first != end:
                how = (
                    f"a gap of {first - end} messages"
                    if first > end
                    else f"{end - first} messages this log holds already"
                )
                raise OffsetOutOfRangeError(
                    f"{self.name}: the leader's bytes start at offset {first} but this log "
                    f"ends at offset {end} ({how}); nothing appended"
                )
            if rolling:
                segment = self._roll(now)
            start = self._write(segment, view, now, points)
            new_end = last + 1
            segment.tail = (new_end, segment.size)
            self._last_start = (end, segment, start)
            flush_now = self._count_appended(
                new_end - end, new_end, segment.coordinate + segment.size
            )
        if flush_now:
            self._flush_soon()
        return new_end

    def _write(
        self, segment: LogicalSegment, data: Buffer, now: int, points: list[IndexPoint] | None
    ) -> int:
        """Write `data`'s index entries, then its bytes, at the end of `segment` (lock held);
        returns where the bytes start. All or nothing: StorageError leaves neither."""
        position = segment.size
        index = segment.index
        interval = self.index_interval_bytes
        if points is None:  # (none in an append within the interval of the last indexed entry)
            within = position + len(data) - index.last_position <= interval
            points = (
                [] if within else index_points(data, position, index.last_position, interval)[0]
            )
        if points:
            try:
                index.add_entries(points)
            except OSError as exc:
                raise StorageError(
                    f"writing the offset index {index.path} failed ({exc.strerror or exc}); "
                    f"nothing of the {len(data)} bytes is kept"
                ) from exc
        try:
            segment.append_all([data], len(data), now)
        except StorageError:
            if points:
                self._drop_index_entries(index, points[0][0])
            raise
        return position

    def _drop_index_entries(self, index: OffsetIndex, offset: int) -> None:
        """Take back the index entries of a write that failed. If even that fails, the
        index file is removed (the entries in memory are right): the next open rebuilds it."""
        try:
            index.truncate_to(offset)
        except OSError as exc:
            log.error(
                "%s: cutting %s back failed (%s); the file is removed, to be rebuilt at open",
                self.name,
                index.path.name,
                exc.strerror or exc,
            )
            with contextlib.suppress(OSError):
                index.path.unlink()

    def _cut_segment(self, segment: LogicalSegment, offset: int) -> int:
        self._last_start = None
        segment.unseal(self.index_interval_bytes)  # it is the last one from now on
        next_offset, size = segment.tail
        if offset >= next_offset:
            return 0  # kept whole: the cut is at the next segment's start
        position, before = self._seek(segment, offset, size, previous=True)
        end = before + 1
        if end != offset:
            log.warning(
                "%s: offset %d is inside the compressed wrapper at byte %d of %s; the log is "
                "cut before the wrapper, at offset %d",
                self.name,
                offset,
                position,
                segment.path.name,
                end,
            )
        segment.index.truncate_to(end)
        removed = segment.truncate_to(position)
        segment.tail = (end, position)
        return removed

    def _end_coordinate(self) -> int:
        last = self._segments[-1]
        return last.coordinate + last.tail[1]


def _is_index_file(name: str) -> bool:
    stem = name[:OFFSET_DIGITS]
    return stem.isdigit() and name[OFFSET_DIGITS:] in (INDEX_SUFFIX, INDEX_SUFFIX + ".tmp")


def _read_bytes(segment: LogicalSegment, position: int, length: int) -> Buffer:
    """Bytes [position, position + length) of the segment: from the last append kept in
    memory when they are in it, else read from the file."""
    last = segment.last_append
    if last is not None and last[0] <= position and position + length <= last[0] + len(last[1]):
        start = position - last[0]
        return memoryview(last[1])[start : start + length]
    file = segment.file  # held: the descriptor stays open until this returns
    return os.pread(file.fileno(), length, position)


def _first_message(view: memoryview, last: int, messages: int) -> int:
    """The offset of the first message of whole entries `view`, whose last entry's offset is
    `last` and which hold `messages` (-1: not known)."""
    stored, size = _OFFSET_SIZE.unpack_from(view, 0)
    if not view[_ATTRIBUTES_AT] & CODEC_MASK:
        return int(stored)
    if messages >= 0:  # offsets are consecutive through wrappers: count back from the last
        return last - messages + 1
    inner = validate(view[: ENTRY_OVERHEAD + size]).messages  # inflate the first wrapper
    return int(stored) - inner + 1
