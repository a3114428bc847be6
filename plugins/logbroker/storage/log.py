"""The log of one partition: an ordered list of segments (`log/Log.scala`).

    <log.dir>/<topic>-<partition>/
        00000000000000000000.kafka      base offset 0
        00000000000536870931.kafka      base offset = previous base + previous size
        ...                             only the last segment is appended to

Offsets are byte positions in the partition. A read at `offset` bisects the sorted base
offsets to find its segment and returns a FileRegion of at most `max_size` bytes from that
segment; the last entry in it may be cut off, as 0.7 served it.

What a reader may see: every append that has completed, flushed or not. `end_offset` moves
when an append's bytes are in the file (the OS page cache), and fetch, latest offset and
out-of-range all use that one end point. A killed broker process loses nothing that was
appended; a machine that loses power loses the unflushed tail, which recovery cuts back to
the last whole valid entry. (0.7 showed only flushed data; we show it sooner for latency.)

The log knows nothing of replication: whether a partition is a 0.7 topic's or a replica, and
who may append to it (a replica's leader), is for the layers above (log_manager.py, the
replication package).

Concurrency: appends, rolls, truncation and deletes hold the log's lock. Readers take no
lock: the segment list is an immutable tuple replaced whole (copy-on-write), and a segment's
size only grows while a reader may look at it.

Append marks: the log remembers where its last appends ended and how many messages it had
taken by then (the last `MARKS` to `2 * MARKS` of them, in memory only; the log's end at open
is the first, with a count of 0). Every append ends at a message boundary, so a region between
two marks is whole messages, and the difference of their counts says how many: `read_whole`
gives a follower such a region (REPLICA_FETCH), which it appends as it comes, without walking
its entries. Truncation forgets the marks past the cut.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from pathlib import Path

from ..protocol.errors import OffsetOutOfRangeError
from ..protocol.message_formats import FORMAT_07
from ..protocol.message_set import Buffer, Validation, validate
from .append_marks import AppendMarks
from .open_files import OpenFiles
from .recovery import recover_segments
from .segment import FileRegion, LogSegment, empty_region, parse_segment_file_name
from .segmented_log import Clock as Clock
from .segmented_log import SegmentedLog, changed_since

log = logging.getLogger(__name__)

# append_many's passes over (buffer, Validation) pairs, in C
_DATA, _CHECK = itemgetter(0), itemgetter(1)
_VALID_BYTES, _LENGTH = attrgetter("valid_bytes"), attrgetter("length")
_MESSAGES = attrgetter("messages")


@dataclass(frozen=True)
class LogConfig:
    """The settings one partition's log needs (from server.properties, see config.py)."""

    segment_bytes: int = 512 * 1024 * 1024  # log.file.size
    roll_ms: int = 168 * 3600 * 1000  # log.roll.hours
    flush_interval_messages: int = 10000  # log.flush.interval
    flush_interval_ms: int = 1000  # log.default.flush.interval.ms


class Log(SegmentedLog[LogSegment]):
    """Append-only log of one topic-partition."""

    message_format = FORMAT_07  # byte offsets, 0.7's entries

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        clock: Clock,
        *,
        recover: bool = False,
        modified_after_ns: int | None = None,
        request_flush: Callable[[Log], None] | None = None,
        files: OpenFiles | None = None,
    ) -> None:
        super().__init__(
            directory, topic, partition, config, clock, request_flush=request_flush, files=files
        )
        self._load(recover, modified_after_ns)
        self._marks = AppendMarks(self.end_offset)

    # -- loading ----------------------------------------------------------------------

    def _load(self, recover: bool, modified_after_ns: int | None) -> None:
        """Open the segments; with `recover` check every one, with `modified_after_ns` those
        whose file changed since (recovery.py), and cut at the first bad byte."""
        found = []
        for path in self.directory.iterdir():
            base = parse_segment_file_name(path.name)
            if base is not None and path.is_file():
                found.append((base, path))
        found.sort()
        segments = [LogSegment.open(path, self.files) for _, path in found]
        if not segments:
            segments = [LogSegment.create(self.directory, 0, self.clock(), self.files)]
        for earlier, later in itertools.pairwise(segments):
            if earlier.end_offset != later.base_offset:
                log.warning(
                    "%s: segment %s ends at %d but the next starts at %d",
                    self.name,
                    earlier.path.name,
                    earlier.end_offset,
                    later.base_offset,
                )
        check = changed_since(recover, modified_after_ns)
        if check is not None:
            segments, cut = recover_segments(segments, check)
            self._report_recovery(cut, recover, segments[-1].end_offset)
        self._set_segments(tuple(segments))

    def read(self, offset: int, max_size: int, visible_end: int | None = None) -> FileRegion:
        """Bytes from `offset`, at most `max_size`, from one segment (0.7's fetch rules).

        offset == end -> empty region; offset < start or > end -> OffsetOutOfRangeError.
        With `visible_end` (a replicated partition's high watermark, for consumers) nothing
        at or past it is returned: an offset between it and the log's end reads as empty.
        """
        segments, bases = self._segments, self._bases
        last = segments[-1]
        end = last.base_offset + last.size  # end_offset, inlined: on a waiting fetch's way
        if offset == end:
            return empty_region(offset)
        if offset < bases[0] or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: "
                f"the log holds offsets {bases[0]} to {end}"
            )
        if visible_end is not None:
            if offset >= visible_end:
                return empty_region(offset)
            max_size = min(max_size, visible_end - offset)
        segment = segments[bisect.bisect_right(bases, offset) - 1]
        return segment.region(offset - segment.base_offset, max(0, max_size))

    # -- writing ----------------------------------------------------------------------

    def append(self, message_set: Buffer, validation: Validation | None = None) -> tuple[int, int]:
        """Append the valid whole entries of a message set; returns (offset, next offset).

        A damaged set (bad size, magic, codec, CRC, undecodable compression) or one whose
        first entry is incomplete raises InvalidMessageError and appends nothing. A partial
        trailing entry is dropped, as 0.7 did. A write that fails (a full disk) raises
        StorageError and appends nothing: the end offset stays where it was. Pass
        `validation` if the caller already validated these exact bytes.
        """
        check = validation if validation is not None else validate(message_set)
        data = self._valid_entries(message_set, check)
        if data is None:
            end = self.end_offset
            return end, end
        with self._lock:
            now = self.clock()
            segment = self._maybe_roll(len(data), now)
            offset = segment.end_offset
            segment.append(data, now)
            flush_now = self._count_appended(check.messages, offset + len(data))
        if flush_now:
            self._flush_soon()
        return offset, offset + len(data)

    def append_verbatim(self, data: Buffer, messages: int) -> int:
        """Append bytes copied from a leader's log as they are: whole entries, already
        checked by the leader when it took them (a follower does no per-message work).
        Returns the new end offset."""
        if not len(data):
            return self.end_offset
        with self._lock:
            now = self.clock()
            segment = self._maybe_roll(len(data), now)
            segment.append(memoryview(data), now)
            end = segment.end_offset
            flush_now = self._count_appended(messages, end)
        if flush_now:
            self._flush_soon()
        return end

    def append_many(self, sets: list[tuple[Buffer, Validation]]) -> tuple[int, int]:
        """Append already validated sets in order, with one write per segment; returns the
        messages and bytes appended.

        For produces that get no answer: nobody needs each set's offset, and many small
        sets from one read of the socket cost one system call instead of one each. A write
        that fails raises StorageError: what went to an older segment before a roll is kept
        whole, nothing of the failed write is.
        """
        flush_now = False
        with self._lock:
            now = self.clock()
            buffers: list[Buffer] = []
            size = messages = written = nbytes = 0
            segment = self._segments[-1]
            try:
                one = self._one_write(segment, sets, now)
                if one is not None:  # the usual case: whole sets, no roll before any
                    buffers, size, messages = one
                else:
                    for data, check in sets:
                        n = check.valid_bytes
                        if not n:
                            continue
                        if buffers and self._should_roll(segment, n, now, pending=size):
                            segment.append_all(buffers, size, now)  # the old one, then roll
                            buffers, written, nbytes = [], written + messages, nbytes + size
                            size = messages = 0
                        if not buffers and self._should_roll(segment, n, now):
                            segment = self._roll(now)  # `segment` is the last one here
                        buffers.append(memoryview(data)[:n])
                        size += n
                        messages += check.messages
                if buffers:
                    segment.append_all(buffers, size, now)
                    written, nbytes = written + messages, nbytes + size
            finally:
                flush_now = self._count_appended(written, self._segments[-1].end_offset)
        if flush_now:
            self._flush_soon()
        return written, nbytes

    def _one_write(
        self, segment: LogSegment, sets: list[tuple[Buffer, Validation]], now: int
    ) -> tuple[list[Buffer], int, int] | None:
        """(buffers, bytes, messages) of `sets` when each is valid to its end and all of
        them go to `segment` in one write (_should_roll false before each of them, as
        append_many's loop would find); None otherwise. A socket read brings many sets:
        the passes over them run in C (map), with no Python step per set."""
        config = self.config
        first = segment.first_append_ms
        if first is not None and now - first >= config.roll_ms:
            return None
        checks = list(map(_CHECK, sets))
        size = sum(map(_VALID_BYTES, checks))
        if size != sum(map(_LENGTH, checks)):  # a set with bytes to leave out
            return None
        if segment.size + size > config.segment_bytes:  # a roll may come first
            return None
        return list(map(_DATA, sets)), size, sum(map(_MESSAGES, checks))

    def _cut_segment(self, segment: LogSegment, offset: int) -> int:
        return segment.truncate_to(offset - segment.base_offset)

    def _region_at(self, offset: int, coordinate: int, max_size: int) -> FileRegion:
        return self.read(offset, max_size)

    def _new_segment(self, after: LogSegment, now: int) -> LogSegment:
        return LogSegment.create(self.directory, after.end_offset, now, self.files)
