"""What a partition's log does the same in either message format: the list of segments,
rolling, flushing, retention, the append marks, the Offsets API's answer, truncation's choice
of segments and the recovery policy at open.

    <log.dir>/<topic>-<partition>/      one directory per partition, segments named by the
        <base offset, 20 digits><suffix>  offset of their first message; only the last is
                                          appended to

    format  offsets                      segments   module
    0.7     byte positions               .kafka     log.py
    0.8     logical (n-th message)       .log       logical_log.py (+ an .index per segment)

A subclass opens its segments (`_load`), reads, appends and cuts a segment in its format
(`read`, `append`, `append_verbatim`, `_cut_segment`), makes the next segment at a roll
(`_new_segment`) and says where an append mark points (`_region_at`, `_end_coordinate`);
everything else is here, once.

Concurrency: appends, rolls, truncation and deletes hold the log's lock. Readers take no
lock: the segment list is an immutable tuple replaced whole (copy-on-write), and a segment's
size only grows while a reader may look at it.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, Self, TypeVar

from ..protocol.errors import InvalidMessageError, OffsetOutOfRangeError
from ..protocol.requests import EARLIEST_TIME, LATEST_TIME
from ..protocol.wire import Buffer
from .append_marks import AppendMarks
from .open_files import OpenFiles
from .recovery import RecoveryResult
from .segment import FileRegion, LogSegment

Clock = Callable[[], int]  # milliseconds since the epoch
S = TypeVar("S", bound=LogSegment)


class LogSettings(Protocol):
    """What the shared part reads of a log's settings (log.py's LogConfig has them)."""

    @property
    def segment_bytes(self) -> int: ...  # log.file.size: roll before a segment passes it

    @property
    def roll_ms(self) -> int: ...  # log.roll.hours: roll a segment this old

    @property
    def flush_interval_messages(self) -> int: ...  # log.flush.interval


class SetCheck(Protocol):
    """What the shared part reads of a format's validation of a producer's set."""

    @property
    def error(self) -> InvalidMessageError | None: ...  # the damage that stopped the walk

    @property
    def valid_bytes(self) -> int: ...  # bytes of whole valid entries at the set's start


def changed_since(
    recover: bool, modified_after_ns: int | None
) -> Callable[[LogSegment], bool] | None:
    """The recovery policy at open: with `recover` (an unclean stop) every segment is
    checked, with `modified_after_ns` (the clean-shutdown marker's time) those whose file
    changed since; None when nothing is to be checked."""
    if not recover and modified_after_ns is None:
        return None
    # `>=`: file times come from a coarse clock, a change in the marker's own tick has its
    # time (and a segment flushed in that tick is checked again, harmless)
    since = -1 if recover or modified_after_ns is None else modified_after_ns
    return lambda segment: segment.path.stat().st_mtime_ns >= since


class SegmentedLog(Generic[S]):
    """The format-independent half of one topic-partition's log (see the module doc)."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogSettings,
        clock: Clock,
        *,
        request_flush: Callable[[Self], None] | None = None,
        files: OpenFiles | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self._log = logging.getLogger(type(self).__module__)  # lines name the format's module
        self._lock = threading.Lock()
        self._request_flush = request_flush
        self.files = files if files is not None else OpenFiles()
        self.unflushed_messages = 0
        self.last_flush_ms = clock()
        self.recovery: RecoveryResult | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: tuple[S, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._view: tuple[tuple[S, ...], tuple[int, ...]] = ((), ())
        self._marks = AppendMarks(0)  # started again at the log's end once it is loaded

    # -- what a format provides ---------------------------------------------------------

    def _new_segment(self, after: S, now: int) -> S:
        """An empty segment starting where `after`, the last one, ends (lock held)."""
        raise NotImplementedError

    def _cut_segment(self, segment: S, offset: int) -> int:
        """Cut `segment`, the one that will be last, so that it ends at `offset` (at the
        message boundary at or before it); returns the bytes removed (lock held)."""
        raise NotImplementedError

    def _region_at(self, offset: int, coordinate: int, max_size: int) -> FileRegion:
        """`read(offset, max_size)`, where an append mark says `offset` lies at
        `coordinate` (-1: not known)."""
        raise NotImplementedError

    def _end_coordinate(self) -> int:
        """The append marks' coordinate of the log's end (0.7 does not use them)."""
        return 0

    # -- loading ----------------------------------------------------------------------

    def _set_segments(self, segments: tuple[S, ...]) -> None:
        # Bases first would let a reader see a base with no segment; assign as one tuple.
        # `_view` has both as one object: a reader that takes it sees the two agree.
        bases = tuple(s.base_offset for s in segments)
        self._segments, self._bases = segments, bases
        self._view = (segments, bases)

    def _report_recovery(
        self, cut: RecoveryResult | None, recover: bool, end: int, why: str | None = None
    ) -> None:
        """Keep and log what recovery at open did; `end`: the log's end after it; `why`:
        what was checked, when not the policy's (see `changed_since`)."""
        if cut is not None:
            self.recovery = cut
            if why is None:
                why = "after an unclean shutdown" if recover else "of files changed while down"
            set_aside = ", ".join(p.name for p in cut.set_aside)
            self._log.warning(
                "%s: recovery %s cut %d bytes (%d messages by their size fields) at offset "
                "%d: %s; the cut bytes are kept in %s%s",
                self.name,
                why,
                cut.truncated_bytes,
                cut.truncated_entries,
                end,
                cut.reason,
                cut.kept_in,
                f", the later segments set aside whole ({set_aside})" if set_aside else "",
            )
        elif recover:
            self.recovery = RecoveryResult(end, 0, "")

    # -- what readers see -------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def segments(self) -> tuple[S, ...]:
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

    def read_whole(self, offset: int, max_size: int) -> tuple[FileRegion, int]:
        """What a follower copies: bytes from `offset`, at most `max_size`, that end where an
        append ended, and how many messages they hold (as the appends counted them: through
        compression). When the marks do not say (`offset` is not a remembered append end, or
        no append within `max_size` of it is remembered), `read`'s region and -1: its last
        entry may then be cut, and the caller finds the whole ones itself."""
        with self._lock:  # the marks change under it; reading them is short
            return self._marks.whole(offset, max_size, self._region_at)

    def offsets_before(self, time_ms: int, max_offsets: int) -> list[int]:
        """The Offsets API's answer (0.7's getOffsetsBefore, kept by 0.8): segment starts
        (and the end), newest first.

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

    def _valid_entries(self, message_set: Buffer, check: SetCheck) -> memoryview | None:
        """The whole valid entries of a producer's set, as `check` (its format's validation)
        found them; None for an empty set. A damaged set, or one whose first entry is
        incomplete, raises InvalidMessageError; a partial trailing entry is left out."""
        if check.error is not None:
            raise InvalidMessageError(f"{self.name}: {check.error}")
        if check.valid_bytes == 0:
            if len(message_set) == 0:
                return None
            raise InvalidMessageError(
                f"{self.name}: the first entry of the message set is incomplete "
                f"({len(message_set)} bytes)"
            )
        return memoryview(message_set)[: check.valid_bytes]

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
            doomed = segments[keep + 1 :]
            removed = self._cut_segment(segments[keep], offset)
            self._set_segments(segments[: keep + 1])
            end = segments[keep].end_offset
            self._marks.forget_after(end, self._end_coordinate())
        for segment in doomed:
            removed += segment.size
            segment.delete()
        self._log.warning("%s: truncated to offset %d (%d bytes removed)", self.name, end, removed)
        return removed

    def _count_appended(self, messages: int, end: int, coordinate: int = 0) -> bool:
        """Count appended messages and mark where the append ended (lock held; see
        append_marks.py); True when log.flush.interval is reached."""
        self._marks.add(end, messages, coordinate)
        self.unflushed_messages += messages
        return self.unflushed_messages >= self.config.flush_interval_messages

    def _flush_soon(self: Self) -> None:
        if self._request_flush is not None:
            self._request_flush(self)  # the log manager's flusher thread does it
        else:
            self.flush()

    def _should_roll(self, segment: S, incoming: int, now: int, pending: int = 0) -> bool:
        """Roll before `incoming` more bytes (after `pending` bytes not yet written)?"""
        size = segment.size + pending
        too_big = size > 0 and size + incoming > self.config.segment_bytes
        too_old = (
            segment.first_append_ms is not None
            and now - segment.first_append_ms >= self.config.roll_ms
        )
        return too_big or too_old

    def _maybe_roll(self, incoming: int, now: int) -> S:
        segment = self._segments[-1]
        return self._roll(now) if self._should_roll(segment, incoming, now) else segment

    def _roll(self, now: int) -> S:
        """Start a new empty segment at the end (caller holds the lock)."""
        old = self._segments[-1]
        if old.size == 0:
            return old
        old.flush()
        new = self._new_segment(old, now)
        self._set_segments((*self._segments, new))
        self._log.info("%s: rolled a new segment at offset %d", self.name, new.base_offset)
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

    def delete_segments_while(self, doomed: Callable[[S], bool]) -> list[S]:
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
        return f"{type(self).__name__}({self.name}, {self.start_offset}..{self.end_offset})"
