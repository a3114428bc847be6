"""One segment file of a partition's log (`log/LogSegment`, `message/FileMessageSet.scala`).

On disk:

    <log.dir>/<topic>-<partition>/<base offset, 20 digits zero-padded>.kafka

A segment holds message set entries back to back, exactly the bytes producers sent. Its
name is the partition offset of its first byte, so the offset of any entry is
`base_offset + position in the file`. Only the newest segment of a log is appended to.

The file is opened when first used, unbuffered, in append mode, and kept in the log
manager's bounded pool of open files (open_files.py), so a broker with many partitions does
not hold a descriptor for each. Whoever holds a segment's `SegmentFile` keeps it open, even
if the pool lets it go meanwhile. A `FileRegion` handed to a reader keeps its segment
alive, and a segment that retention deletes keeps its file open until its last reader drops
it (the inode lives until then), so a reader never waits for a delete nor loses its data.

The last append, when it was one buffer of at most LAST_APPEND_MAX bytes, is also kept in
memory (`last_append`) until the next write or a truncation: a consumer waiting at the end
of the log is answered with those bytes without reading them back.

`size` is the end of the last whole append. A write that fails or stops short (a full disk,
an I/O error, a file size limit) leaves a torn tail after it: the file is cut back to
`size` before the error is raised, and if even that fails, before the next append is
allowed. So an append never lands after bytes of a failed one, and no reader or restart
ever sees them.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import NamedTuple

from ..protocol.errors import StorageError
from ..protocol.wire import Buffer
from .open_files import OpenFiles, SegmentFile

SEGMENT_SUFFIX = ".kafka"
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024
# A one-buffer append this small is kept in memory (`last_append`) until the next write: a
# consumer waiting at the end of the log is answered with it, without a pread. Larger sets
# (a batch producer's) are not copied: their readers are rarely waiting at their start.
LAST_APPEND_MAX = 4096
OFFSET_DIGITS = 20


def segment_file_name(base_offset: int, suffix: str = SEGMENT_SUFFIX) -> str:
    """`suffix`: `.kafka` for a 0.7 log, `.log` for a 0.8-format one (logical_log.py)."""
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


def parse_segment_file_name(name: str, suffix: str = SEGMENT_SUFFIX) -> int | None:
    """Base offset of a segment file name, or None if the name is not one."""
    stem, found = name[: -len(suffix)], name[-len(suffix) :]
    if found != suffix or len(stem) != OFFSET_DIGITS or not stem.isdigit():
        return None
    return int(stem)


class FileRegion(NamedTuple):
    """Bytes [position, position + length) of a segment file, at log offset `offset`.

    The server hands `fileno()`, `position` and `length` to sendfile; everyone else calls
    `read()`. Holding a region keeps its segment's file open.
    """

    segment: LogSegment | None
    position: int
    length: int
    offset: int

    @property
    def size(self) -> int:
        """Its length, under the name the 0.8 codecs give a part they leave to the caller."""
        return self.length

    def file(self) -> SegmentFile:
        """The open file: keep the object while its descriptor is in use."""
        if self.segment is None:
            raise ValueError("an empty region has no file")
        return self.segment.file

    def read(self) -> bytes:
        segment = self.segment
        if self.length == 0 or segment is None:
            return b""
        last = segment.last_append
        if last is not None and last[0] == self.position and len(last[1]) == self.length:
            return last[1]  # exactly the last append: the bytes the write was given
        chunks = []
        file = segment.file  # held: the descriptor stays open until this returns
        fd, position, remaining = file.fileno(), self.position, self.length
        while remaining > 0:
            chunk = os.pread(fd, remaining, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


_new_tuple = tuple.__new__


def empty_region(offset: int) -> FileRegion:
    return FileRegion(None, 0, 0, offset)


def _after(buffers: list[Buffer], skip: int) -> list[Buffer]:
    """`buffers` without their first `skip` bytes."""
    out: list[Buffer] = []
    for buf in buffers:
        if skip >= len(buf):
            skip -= len(buf)
            continue
        out.append(memoryview(buf)[skip:] if skip else buf)
        skip = 0
    return out


class LogSegment:
    """A segment file plus what the log needs to know of it without touching the disk."""

    __slots__ = (
        "__weakref__",
        "base_offset",
        "files",
        "first_append_ms",
        "last_append",
        "last_modified_ms",
        "open_file",
        "path",
        "recently_used",
        "size",
        "torn",
    )

    def __init__(
        self, path: Path, base_offset: int, last_modified_ms: int, size: int, files: OpenFiles
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self.files = files
        self.open_file: SegmentFile | None = None  # set and cleared by the pool
        self.recently_used = False  # the pool's second chance
        self.size = size
        self.last_modified_ms = last_modified_ms
        self.first_append_ms: int | None = None
        self.torn = False  # bytes of a failed write may lie past `size`
        # (file position, bytes) of the last append when it was one small buffer, else None
        self.last_append: tuple[int, bytes] | None = None

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, now_ms: int, files: OpenFiles | None = None
    ) -> LogSegment:
        path = directory / segment_file_name(base_offset)
        segment = cls(path, base_offset, now_ms, 0, files if files is not None else OpenFiles())
        file = segment.file  # creates the file; held while its descriptor is used
        segment.size = os.fstat(file.fileno()).st_size
        return segment

    @classmethod
    def open(cls, path: Path, files: OpenFiles | None = None) -> LogSegment:
        base = parse_segment_file_name(path.name)
        if base is None:
            raise ValueError(f"{path} is not a segment file")
        stat = path.stat()
        return cls(
            path,
            base,
            int(stat.st_mtime * 1000),
            stat.st_size,
            files if files is not None else OpenFiles(),
        )

    @property
    def file(self) -> SegmentFile:
        """The open file (opened through the pool if it is not): hold it while in use."""
        file = self.open_file
        if file is None:
            file = self.files.open(self)
        self.recently_used = True
        return file

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    def append(self, data: bytes | memoryview, now_ms: int) -> None:
        """Write all of `data` at the end of the file; visible to readers once this returns."""
        self.append_all([data], len(data), now_ms)

    def append_all(self, buffers: list[Buffer], total: int, now_ms: int) -> None:
        """Write `buffers` (`total` bytes) at the end of the file, in as few calls as it takes.

        All or nothing: if the bytes cannot all be written, the file is cut back to its end
        before this call and StorageError is raised; `size` only moves once all are written.
        """
        # held: the descriptor stays open until this returns (`file`, inlined: an append
        # is on a waiting consumer's way)
        file = self.open_file
        if file is None:
            file = self.files.open(self)
        self.recently_used = True
        fd = file.fileno()
        if self.torn:
            self._cut_torn_tail(None)
        self.last_append = None
        pending, remaining = buffers, total
        try:
            while pending:  # writev takes IOV_MAX buffers at most, and may write short
                written = os.writev(fd, pending[:_IOV_MAX])
                if written <= 0:  # no progress and no error: do not spin
                    raise OSError(errno.ENOSPC, "the write made no progress")
                remaining -= written
                if not remaining:
                    break
                pending = _after(pending, written)
        except OSError as exc:
            self.torn = True
            self._cut_torn_tail(exc)
            raise StorageError(
                f"writing {total} bytes to {self.path} failed ({exc.strerror or exc}); "
                f"nothing of them is kept: the segment was cut back to {self.size} bytes"
            ) from exc
        if self.first_append_ms is None:
            self.first_append_ms = now_ms
        self.last_modified_ms = now_ms
        if total <= LAST_APPEND_MAX and len(buffers) == 1:
            # a copy: the buffer is a view of a socket read that is reused
            self.last_append = (self.size, bytes(buffers[0]))
        self.size += total

    def _cut_torn_tail(self, cause: OSError | None) -> None:
        """Cut the file back to `size`, the end of the last whole append."""
        try:
            file = self.file
            os.ftruncate(file.fileno(), self.size)
        except OSError as exc:
            what = f"writing failed ({cause.strerror or cause}) and " if cause else ""
            raise StorageError(
                f"{self.path}: {what}cutting the torn tail back to {self.size} bytes failed "
                f"({exc.strerror or exc}); no append is possible until it can be cut"
            ) from exc
        self.torn = False

    def flush(self) -> None:
        """fsync, and record the modification time so a restart sees the same age."""
        file = self.file
        os.fsync(file.fileno())
        self.touch()

    def touch(self) -> None:
        seconds = self.last_modified_ms / 1000
        with contextlib.suppress(OSError):  # a deleted segment: nothing left to date
            os.utime(self.path, (seconds, seconds))

    def region(self, position: int, max_length: int) -> FileRegion:
        """Up to `max_length` bytes from `position` (file-relative), never past the end."""
        length = max(0, min(max_length, self.size - position))
        # tuple.__new__: the named tuple's own __new__ is a Python function, one call more
        # on a waiting fetch's way
        return _new_tuple(FileRegion, (self, position, length, self.base_offset + position))

    def truncate_to(self, size: int) -> int:
        """Cut the file to `size` bytes; returns how many bytes were removed."""
        removed = self.size - size
        self.last_append = None
        file = self.file
        os.ftruncate(file.fileno(), size)
        self.size = size
        self.torn = False
        return removed

    def delete(self) -> None:
        """Unlink the file. The segment keeps it open, out of the pool, until the last
        reader holding the segment lets go: a reader never loses what it was given."""
        with contextlib.suppress(OSError):  # no descriptor to spare: readers may miss it
            self.file  # noqa: B018 - opened, and kept open by `open_file`
        self.files.forget(self, keep_open=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def close(self) -> None:
        """Leave the pool; the file closes once no reader holds it."""
        self.files.forget(self)

    def __repr__(self) -> str:
        return f"LogSegment({self.path.name}, size={self.size})"
