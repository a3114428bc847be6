"""Recovery of a segment after an unclean shutdown (`FileMessageSet.recover`).

The segment is walked entry by entry, in windows read from the file, with the same
validation a produce gets (message_set.validate: size, magic, codec, CRC, and compressed
payloads decoded and checked inside). The file is truncated at the first byte that does not
begin a whole valid entry: a size under the minimum, an entry running past the end of the
file, a CRC mismatch, an unknown magic or codec, or a compressed payload that does not
decode. Everything before that byte is kept exactly as it was.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..protocol.message_set import validate
from .segment import LogSegment

WINDOW = 8 * 1024 * 1024


class RecoveryResult(NamedTuple):
    valid_bytes: int
    truncated_bytes: int
    reason: str  # "" when nothing was cut, else why the tail was cut

    @property
    def truncated(self) -> bool:
        return self.truncated_bytes > 0


def scan_valid_prefix(fd: int, file_size: int, window: int = WINDOW) -> tuple[int, str]:
    """Bytes of whole valid entries at the start of the file, and why the scan stopped."""
    position = 0
    reason = ""
    while position < file_size:
        chunk = os.pread(fd, min(window, file_size - position), position)
        reaches_end = position + len(chunk) >= file_size
        check = validate(chunk, position)
        position += check.valid_bytes
        if check.error is not None:
            reason = str(check.error)
            break
        if check.valid_bytes == len(chunk):
            continue
        if reaches_end:  # an entry torn by the end of the file
            reason = f"a partial entry of {file_size - position} bytes at offset {position}"
            break
        if check.valid_bytes == 0:  # one entry larger than the window: read it whole
            needed = int.from_bytes(chunk[:4], "big", signed=True)
            window = max(window, needed + 4)
    return position, reason


def recover_segment(segment: LogSegment) -> RecoveryResult:
    """Validate the whole segment and cut it after its last whole valid entry."""
    valid, reason = scan_valid_prefix(segment.file.fileno(), segment.size)
    removed = segment.truncate_to(valid) if valid < segment.size else 0
    return RecoveryResult(valid, removed, reason if removed else "")
