"""Recovery of a log's segments at start (`FileMessageSet.recover`, `Log.recoverLog`).

What is checked: after an unclean shutdown every segment, oldest first (a killed broker's
writes, and anything done to its files since, can be anywhere, not only in the newest); after
a clean one, the segments modified since the clean-shutdown marker was written (their
mtime is later: bytes flipped or a file cut while the broker was down). A segment is walked
entry by entry, in windows read from the file, with the same
validation a produce gets (message_set.validate: size, magic, codec, CRC, and compressed
payloads decoded and checked inside). The file is truncated at the first byte that does not
begin a whole valid entry: a size under the minimum, an entry running past the end of the
file, a CRC mismatch, an unknown magic or codec, or a compressed payload that does not
decode. Everything before that byte is kept exactly as it was.

What is cut is never thrown away: one flipped byte can cut off megabytes of fsynced,
acknowledged messages behind it. Before the segment is truncated, the cut bytes are copied
(and fsynced) next to it:

    <log.dir>/<topic>-<partition>/<base offset, 20 digits>.kafka.truncated-<offset>

where <offset> is the partition offset of the first byte cut (another `.N` is added if that
name is taken). The name does not end in `.kafka`, so the log never reads it as a segment
and never serves it; an operator can inspect it (e.g. with `validate`/`iter_messages` from
`offset`) and, if it is worth it, produce what it holds again. A cut in an older segment
leaves the later ones after a gap: they are set aside whole the same way (renamed to
`<their name>.truncated-<their base offset>`), so that the log stays one run of offsets. A
replica refills all of it from its leader.

The walk is 0.7's by default; a 0.8-format log (logical_log.py) passes its own `EntryScan`
(its entries' framing, its validation, and the logical offset that names a cut), and the
same copy-aside, truncation and setting aside apply.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

from ..protocol.errors import InvalidMessageError
from ..protocol.message_set import validate
from .segment import LogSegment

WINDOW = 8 * 1024 * 1024
ASIDE_INFIX = ".truncated-"
_SIZE = struct.Struct(">i")
_MIN_ENTRY = 5  # magic-0 header: magic and CRC; an entry's size is never less
S = TypeVar("S", bound=LogSegment)


class RecoveryResult(NamedTuple):
    valid_bytes: int
    truncated_bytes: int
    reason: str  # "" when nothing was cut, else why the tail was cut
    truncated_entries: int = 0  # entries the cut bytes frame by their size fields (estimate)
    kept_in: Path | None = None  # where the cut bytes were moved
    set_aside: tuple[Path, ...] = ()  # later segments, set aside whole after the cut

    @property
    def truncated(self) -> bool:
        return self.truncated_bytes > 0


class EntryScan:
    """How recovery walks one format's entries: 0.7's here (an entry is `int32 size |
    message`, an offset is `base offset + position`). One scan walks one segment, windows
    in order from its start; a format whose check needs what came before keeps it here."""

    size_at = 0  # where an entry's int32 size field starts
    overhead = 4  # bytes of an entry before its message: the size field's end
    min_size = _MIN_ENTRY  # the least size field a whole entry can have

    def __init__(self, base_offset: int = 0) -> None:
        self.base_offset = base_offset  # the segment's: reasons name partition offsets

    def check(self, chunk: bytes, position: int) -> tuple[int, InvalidMessageError | None]:
        """(bytes of whole valid entries at the start of `chunk`, the damage that stopped
        them or None); `chunk` starts at byte `position` of the segment, at an entry."""
        result = validate(chunk, self.base_offset + position)
        return result.valid_bytes, result.error

    def where(self, position: int) -> str:
        """Names byte `position` of the segment in a reason: its partition offset."""
        return f"offset {self.base_offset + position}"

    def offset_at(self, segment: LogSegment, position: int) -> int:
        """The partition offset of the entry at `position` (where the scan stopped)."""
        return segment.base_offset + position


def scan_valid_prefix(
    fd: int, file_size: int, window: int = WINDOW, scan: EntryScan | None = None
) -> tuple[int, str]:
    """Bytes of whole valid entries at the start of the file, and why the scan stopped."""
    scan = EntryScan() if scan is None else scan
    position = 0
    reason = ""
    while position < file_size:
        chunk = os.pread(fd, min(window, file_size - position), position)
        reaches_end = position + len(chunk) >= file_size
        valid, error = scan.check(chunk, position)
        position += valid
        if error is not None:
            reason = str(error)
            break
        if valid == len(chunk):
            continue
        if reaches_end:  # an entry torn by the end of the file
            reason = f"a partial entry of {file_size - position} bytes at {scan.where(position)}"
            break
        if valid == 0:  # one entry larger than the window: read it whole
            size_at = scan.size_at
            needed = int.from_bytes(chunk[size_at : size_at + 4], "big", signed=True)
            window = max(window, needed + scan.overhead)
    return position, reason


def count_framed_entries(fd: int, start: int, end: int, scan: EntryScan | None = None) -> int:
    """Entries between `start` and `end` as their size fields frame them, valid or not: how
    many messages a cut most likely took (the first one is the damaged one)."""
    scan = EntryScan() if scan is None else scan
    size_at, overhead = scan.size_at, scan.overhead
    count, position = 0, start
    while position + overhead <= end:
        (size,) = _SIZE.unpack(os.pread(fd, 4, position + size_at))
        if size < scan.min_size or position + overhead + size > end:
            break
        count += 1
        position += overhead + size
    return count


def aside_path(segment: LogSegment, offset: int) -> Path:
    """A free name for the bytes cut at partition offset `offset` (see the module doc)."""
    path = segment.path.with_name(f"{segment.path.name}{ASIDE_INFIX}{offset}")
    n = 1
    while path.exists():
        path = segment.path.with_name(f"{segment.path.name}{ASIDE_INFIX}{offset}.{n}")
        n += 1
    return path


def _copy_aside(fd: int, start: int, end: int, path: Path) -> None:
    """Copy bytes [start, end) of `fd` to a new file `path`, durably (file and directory
    fsynced), before anything is truncated."""
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        position = start
        while position < end:
            chunk = os.pread(fd, min(WINDOW, end - position), position)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            position += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def recover_segments(
    segments: list[S],
    check: Callable[[S], bool],
    recover: Callable[[S], RecoveryResult] | None = None,
) -> tuple[list[S], RecoveryResult | None]:
    """Recover, oldest first, the segments that `check` names (with `recover`, default
    `recover_segment`); the first cut ends the log there (the later segments are set
    aside). Returns the segments kept and the cut (None when nothing was cut)."""
    for i, segment in enumerate(segments):
        if not check(segment):
            continue
        result = recover_segment(segment) if recover is None else recover(segment)
        if not result.truncated:
            continue
        for later in segments[i + 1 :]:
            aside = aside_path(later, later.base_offset)
            later.close()
            os.rename(later.path, aside)
            result = result._replace(
                truncated_bytes=result.truncated_bytes + later.size,
                set_aside=(*result.set_aside, aside),
            )
        return segments[: i + 1], result
    return segments, None


def recover_segment(segment: LogSegment, scan: EntryScan | None = None) -> RecoveryResult:
    """Validate the whole segment and cut it after its last whole valid entry, keeping what
    is cut in a `.truncated-<offset>` file beside it."""
    scan = EntryScan(segment.base_offset) if scan is None else scan
    file = segment.file  # held until recovery is done
    fd = file.fileno()
    size = segment.size
    valid, reason = scan_valid_prefix(fd, size, scan=scan)
    if valid >= size:
        return RecoveryResult(valid, 0, "")
    entries = count_framed_entries(fd, valid, size, scan)
    kept_in = aside_path(segment, scan.offset_at(segment, valid))
    _copy_aside(fd, valid, size, kept_in)
    removed = segment.truncate_to(valid)
    return RecoveryResult(valid, removed, reason, entries, kept_in)
