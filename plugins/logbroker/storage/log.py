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
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from pathlib import Path

from ..protocol.errors import InvalidMessageError, OffsetOutOfRangeError
from ..protocol.message_set import Buffer, Validation, validate
from ..protocol.requests import EARLIEST_TIME, LATEST_TIME
from .open_files import OpenFiles
from .recovery import RecoveryResult, recover_segments
from .segment import FileRegion, LogSegment, empty_region, parse_segment_file_name

log = logging.getLogger(__name__)

# append_many's passes over (buffer, Validation) pairs, in C
_DATA, _CHECK = itemgetter(0), itemgetter(1)
_VALID_BYTES, _LENGTH = attrgetter("valid_bytes"), attrgetter("length")
_MESSAGES = attrgetter("messages")


Clock = Callable[[], int]  # milliseconds since the epoch
MARKS = 4096  # append ends remembered (between MARKS and 2 * MARKS): see "Append marks"


@dataclass(frozen=True)
class LogConfig:
    """The settings one partition's log needs (from server.properties, see config.py)."""

    segment_bytes: int = 512 * 1024 * 1024  # log.file.size
    roll_ms: int = 168 * 3600 * 1000  # log.roll.hours
    flush_interval_messages: int = 10000  # log.flush.interval
    flush_interval_ms: int = 1000  # log.default.flush.interval.ms


class Log:
    """Append-only log of one topic-partition."""

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
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self._request_flush = request_flush
        self.files = files if files is not None else OpenFiles()
        self.unflushed_messages = 0
        self.last_flush_ms = clock()
        self.recovery: RecoveryResult | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._load(recover, modified_after_ns)
        # append marks (the module's doc): where appends ended, and the messages taken by then
        self.appended_messages = 0
        self._mark_ends = array("q", [self.end_offset])
        self._mark_counts = array("q", [0])

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
        if recover or modified_after_ns is not None:
            # `>=`: file times come from a coarse clock, a change in the marker's own tick
            # has its time (and a segment flushed in that tick is checked again, harmless)
            since = -1 if recover or modified_after_ns is None else modified_after_ns
            segments, cut = recover_segments(
                segments, lambda segment: segment.path.stat().st_mtime_ns >= since
            )
            if cut is not None:
                self.recovery = cut
                why = "after an unclean shutdown" if recover else "of files changed while down"
                set_aside = ", ".join(p.name for p in cut.set_aside)
                log.warning(
                    "%s: recovery %s cut %d bytes (%d messages by their size fields) at offset "
                    "%d: %s; the cut bytes are kept in %s%s",
                    self.name,
                    why,
                    cut.truncated_bytes,
                    cut.truncated_entries,
                    segments[-1].end_offset,
                    cut.reason,
                    cut.kept_in,
                    f", the later segments set aside whole ({set_aside})" if set_aside else "",
                )
            elif recover:
                self.recovery = RecoveryResult(segments[-1].end_offset, 0, "")
        self._set_segments(tuple(segments))

    def _set_segments(self, segments: tuple[LogSegment, ...]) -> None:
        # Bases first would let a reader see a base with no segment; assign as one tuple.
        self._segments, self._bases = segments, tuple(s.base_offset for s in segments)

    # -- what readers see -------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def end_offset(self) -> int:
        return self._segments[-1].end_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

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

    def read_whole(self, offset: int, max_size: int) -> tuple[FileRegion, int]:
        """What a follower copies: bytes from `offset`, at most `max_size`, that end where an
        append ended, and how many messages they hold (as the appends counted them: through
        compression). When the marks do not say (`offset` is not a remembered append end, or
        no append within `max_size` of it is remembered), `read`'s region and -1: its last
        entry may then be cut, and the caller finds the whole ones itself."""
        with self._lock:  # the marks change under it; reading them is short
            ends, counts = self._mark_ends, self._mark_counts
            first = bisect.bisect_left(ends, offset)
            if first < len(ends) and ends[first] == offset:
                # ends[-1] is the log's end: an offset past it raises in `read`, as ever
                last = bisect.bisect_right(ends, offset + max_size, first) - 1
                if last > first:
                    region = self.read(offset, ends[last] - offset)
                    # a segment's end (reads stay in one segment) is an append's end too
                    cut = offset + region.length
                    if cut != ends[last]:
                        last = bisect.bisect_left(ends, cut, first, last)
                    if ends[last] == cut:
                        return region, counts[last] - counts[first]
                elif ends[first] == ends[-1]:
                    return self.read(offset, max_size), 0  # at the end: nothing to send
        return self.read(offset, max_size), -1

    def offsets_before(self, time_ms: int, max_offsets: int) -> list[int]:
        """0.7's getOffsetsBefore: segment starts (and the end), newest first.

        Entries are (segment base, segment mtime) plus (end, now) when the last segment
        holds data; time -1 starts at the last entry, -2 at the first, any other time at
        the last entry whose time is <= it. Up to `max_offsets` offsets, descending.
        """
        segments = self._segments
        entries = [(s.base_offset, s.last_modified_ms) for s in segments]
        if segments[-1].size > 0:
            entries.append((segments[-1].end_offset, self.clock()))
        if time_ms == LATEST_TIME:
            start = len(entries) - 1
        elif time_ms == EARLIEST_TIME:
            start = 0
        else:
            start = len(entries) - 1
            while start >= 0 and entries[start][1] > time_ms:
                start -= 1
        count = max(0, min(max_offsets, start + 1))
        return [entries[start - i][0] for i in range(count)]

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
        if check.error is not None:
            raise InvalidMessageError(f"{self.name}: {check.error}")
        if check.valid_bytes == 0:
            if len(message_set) == 0:
                end = self.end_offset
                return end, end
            raise InvalidMessageError(
                f"{self.name}: the first entry of the message set is incomplete "
                f"({len(message_set)} bytes)"
            )
        data = memoryview(message_set)[: check.valid_bytes]
        with self._lock:
            now = self.clock()
            segment = self._maybe_roll(len(data), now)
            offset = segment.end_offset
            segment.append(data, now)
            flush_now = self._count_appended(check.messages)
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
            flush_now = self._count_appended(messages)
        if flush_now:
            self._flush_soon()
        return end

    def truncate_to(self, offset: int) -> int:
        """Cut the log at `offset` (a message boundary: replication truncates to where it
        agrees with its leader); segments past it are deleted. Returns the bytes removed."""
        with self._lock:
            segments = self._segments
            if offset >= segments[-1].end_offset:
                return 0
            if offset < segments[0].base_offset:
                raise OffsetOutOfRangeError(
                    f"{self.name}: cannot truncate to {offset}, before its first offset "
                    f"{segments[0].base_offset}"
                )
            keep = bisect.bisect_right(self._bases, offset) - 1
            if keep > 0 and segments[keep].base_offset == offset:
                keep -= 1  # the cut falls at a segment's start: keep the one before, whole
            removed = 0
            doomed = segments[keep + 1 :]
            last = segments[keep]
            removed += last.truncate_to(offset - last.base_offset)
            self._set_segments(segments[: keep + 1])
            self._forget_marks_after(offset)
        for segment in doomed:
            removed += segment.size
            segment.delete()
        log.warning("%s: truncated to offset %d (%d bytes removed)", self.name, offset, removed)
        return removed

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
                flush_now = self._count_appended(written)
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

    def _count_appended(self, messages: int) -> bool:
        """Count appended messages and mark where the append ended (lock held; the module's
        "Append marks"); True when log.flush.interval is reached."""
        last = self._segments[-1]
        end = last.base_offset + last.size  # end_offset, without the property's call
        ends = self._mark_ends
        if end != ends[-1]:
            self.appended_messages += messages
            if len(ends) >= 2 * MARKS:
                del ends[:MARKS]
                del self._mark_counts[:MARKS]
            ends.append(end)
            self._mark_counts.append(self.appended_messages)
        self.unflushed_messages += messages
        return self.unflushed_messages >= self.config.flush_interval_messages

    def _forget_marks_after(self, offset: int) -> None:
        """Truncation (lock held): the marks past `offset` go; a cut between two marks starts
        the marks again there."""
        ends, counts = self._mark_ends, self._mark_counts
        keep = bisect.bisect_right(ends, offset)
        del ends[keep:]
        del counts[keep:]
        if not ends or ends[-1] != offset:
            self._mark_ends, self._mark_counts = array("q", [offset]), array("q", [0])
            self.appended_messages = 0
        else:
            self.appended_messages = counts[-1]

    def _flush_soon(self) -> None:
        if self._request_flush is not None:
            self._request_flush(self)  # the log manager's flusher thread does it
        else:
            self.flush()

    def _should_roll(self, segment: LogSegment, incoming: int, now: int, pending: int = 0) -> bool:
        """Roll before `incoming` more bytes (after `pending` bytes not yet written)?"""
        size = segment.size + pending
        too_big = size > 0 and size + incoming > self.config.segment_bytes
        too_old = (
            segment.first_append_ms is not None
            and now - segment.first_append_ms >= self.config.roll_ms
        )
        return too_big or too_old

    def _maybe_roll(self, incoming: int, now: int) -> LogSegment:
        segment = self._segments[-1]
        return self._roll(now) if self._should_roll(segment, incoming, now) else segment

    def _roll(self, now: int) -> LogSegment:
        """Start a new empty segment at the end (caller holds the lock)."""
        old = self._segments[-1]
        if old.size == 0:
            return old
        old.flush()
        new = LogSegment.create(self.directory, old.end_offset, now, self.files)
        self._set_segments((*self._segments, new))
        log.info("%s: rolled a new segment at offset %d", self.name, new.base_offset)
        return new

    def flush(self) -> None:
        """fsync what was appended since the last flush."""
        with self._lock:
            pending = self.unflushed_messages
            self.unflushed_messages = 0
            segment = self._segments[-1]
        if pending or segment.first_append_ms is not None:
            try:
                segment.flush()
            except OSError:
                with self._lock:  # still unflushed: the next round tries again
                    self.unflushed_messages += pending
                raise
        self.last_flush_ms = self.clock()

    # -- retention --------------------------------------------------------------------

    def delete_segments_while(self, doomed: Callable[[LogSegment], bool]) -> list[LogSegment]:
        """Delete whole segments from the front while `doomed` holds; offsets never restart.

        Deleting every segment first rolls a new empty one at the current end, so the next
        append lands at the old end offset. An empty last segment is never deleted.
        """
        with self._lock:
            segments = self._segments
            count = 0
            for segment in segments:
                if not doomed(segment) or (segment is segments[-1] and segment.size == 0):
                    break
                count += 1
            if count == 0:
                return []
            if count == len(segments):
                self._roll(self.clock())
            deleted = self._segments[:count]
            self._set_segments(self._segments[count:])
        for segment in deleted:
            segment.delete()
        return list(deleted)

    def close(self) -> None:
        with self._lock:
            for segment in self._segments:
                segment.touch()
                segment.close()

    def __repr__(self) -> str:
        return f"Log({self.name}, {self.start_offset}..{self.end_offset})"
