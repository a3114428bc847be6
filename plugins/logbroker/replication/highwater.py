"""The high watermarks of a broker's replicas, kept across restarts.

    <log.dir>/replication-offset-checkpoint
        0                      the format version
        2                      the number of entries
        orders 0 41230         topic, partition, high watermark
        orders 3 1904

Written whole (temporary file, fsync, rename) every
`replica.high.watermark.checkpoint.interval.ms` and at a clean shutdown; read at start, so
that a restarted replica does not show consumers what was never committed (a replica's high
watermark only grows while it runs, and is never above its log's end).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

FILE_NAME = "replication-offset-checkpoint"
VERSION = 0


def read_high_watermarks(log_dir: Path) -> dict[tuple[str, int], int]:
    """What the file says ({} when there is none; a damaged file counts as none: the high
    watermarks then start at 0 and catch up with the leader's)."""
    path = Path(log_dir) / FILE_NAME
    if not path.exists():
        return {}
    try:
        lines = path.read_text().splitlines()
        if int(lines[0]) != VERSION or int(lines[1]) != len(lines) - 2:
            return {}
        out = {}
        for line in lines[2:]:
            topic, partition, offset = line.split()
            out[(topic, int(partition))] = int(offset)
        return out
    except (IndexError, ValueError, OSError):
        return {}


def write_high_watermarks(log_dir: Path, marks: Mapping[tuple[str, int], int]) -> None:
    path = Path(log_dir) / FILE_NAME
    text = f"{VERSION}\n{len(marks)}\n" + "".join(
        f"{topic} {partition} {offset}\n" for (topic, partition), offset in sorted(marks.items())
    )
    temporary = path.with_name(f".{FILE_NAME}.tmp")
    with open(temporary, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
