"""Stored data: a snapshot of every segment file, and the check of the files after a run.

`verify_segments` counts, into the report, the bytes that break either rule: the first
`old size` bytes of every segment file in the snapshot are unchanged (appends only add at
the end), and `message_set.validate` accepts every byte of every segment file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from logbroker.protocol.message_set import validate

from .report import FuzzReport

SEGMENT_SUFFIX = ".kafka"


@dataclass(frozen=True)
class SegmentSnapshot:
    size: int
    sha256: str
    data: bytes


def snapshot_segments(log_dir: Path) -> dict[str, SegmentSnapshot]:
    """Every segment file under `log_dir` (relative path -> size, hash and bytes)."""
    out = {}
    for path in sorted(Path(log_dir).rglob(f"*{SEGMENT_SUFFIX}")):
        if path.is_file():
            data = path.read_bytes()
            out[str(path.relative_to(log_dir))] = SegmentSnapshot(
                len(data), hashlib.sha256(data).hexdigest(), data
            )
    return out


def verify_segments(
    log_dir: Path, before: Mapping[str, SegmentSnapshot], report: FuzzReport
) -> None:
    """Old bytes unchanged (appends only add at the end) and every byte of every log valid."""
    after = snapshot_segments(log_dir)
    report.files_after = len(after)
    report.bytes_after = sum(s.size for s in after.values())
    for name, old in before.items():
        new = after.get(name)
        if new is None:
            report.old_bytes_changed += old.size
            report.note(f"segment {name} ({old.size} bytes) disappeared")
            continue
        prefix = new.data[: old.size]
        if hashlib.sha256(prefix).hexdigest() != old.sha256:
            changed = sum(a != b for a, b in zip(old.data, prefix, strict=False))
            changed += old.size - len(prefix)
            report.old_bytes_changed += changed
            report.note(f"segment {name}: {changed} of its first {old.size} bytes changed")
    for name, seg in after.items():
        check = validate(seg.data)
        if check.error is not None or check.valid_bytes != seg.size:
            bad = seg.size - check.valid_bytes
            report.invalid_bytes += bad
            report.note(
                f"segment {name}: {bad} invalid bytes from position {check.valid_bytes} "
                f"({check.error or 'a partial entry at the end'})"
            )
    report.bytes_changed_by_invalid = report.old_bytes_changed + report.invalid_bytes
