"""A replica's leader epochs: which leader epoch wrote which part of its log (KIP-101).

    <log.dir>/<topic>-<partition>/leader-epoch-checkpoint
        0                  the format version
        2                  the number of entries
        0 0                epoch 0 started at offset 0
        3 41230            epoch 3 started at offset 41230 (epochs 1 and 2 wrote nothing here)

One line per epoch that wrote something, in increasing epoch and offset: `<epoch> <start
offset>`, where the start offset is the log end when that epoch's leader began to append (a
message boundary on every replica that holds it, since replicas copy bytes verbatim). The file
is written whole (temporary file, fsync, rename) before the first append of a new epoch, so an
append is never on disk without its epoch. Its presence also marks the directory as a
replicated partition's (the broker gives storage's LogManager this name as `replica_marker`):
a 0.7 topic's partition has none.

`end_offset_for(epoch, log_end)`: the end of `epoch` in this log, as a leader answers
OFFSETS_FOR_LEADER_EPOCH: the start of the first epoch above it (or `log_end` when `epoch` is
the latest), and the largest epoch not above the one asked.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

FILE_NAME = "leader-epoch-checkpoint"  # its presence marks a replica's directory
VERSION = 0
UNDEFINED = -1  # no epoch: a log that no leader has written to


class EpochFileError(ValueError):
    """The epoch file is damaged: the message names it and the line."""


class LeaderEpochs:
    """The epoch cache of one replica, kept in memory and in its file."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / FILE_NAME
        self._lock = threading.Lock()
        self._entries: list[tuple[int, int]] = self._read() if self.path.exists() else []

    @classmethod
    def create(cls, directory: Path) -> LeaderEpochs:
        """A new replica's, with no epochs yet (written at once: it marks the directory)."""
        epochs = cls(directory)
        if not epochs.path.exists():
            epochs._write([])
        return epochs

    @staticmethod
    def marks(directory: Path) -> bool:
        """Whether `directory` is a replicated partition's."""
        return (Path(directory) / FILE_NAME).exists()

    @property
    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._entries)

    @property
    def latest_start(self) -> int:
        """Where the latest epoch starts (0 with none)."""
        with self._lock:
            return self._entries[-1][1] if self._entries else 0

    @property
    def latest_epoch(self) -> int:
        with self._lock:
            return self._entries[-1][0] if self._entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> None:
        """Epoch `epoch` writes from `start_offset` on (a leader, before its first append, or
        a follower, for the data it copies). An epoch already known keeps its start."""
        with self._lock:
            if self._entries and self._entries[-1][0] >= epoch:
                return
            if self._entries and self._entries[-1][1] > start_offset:
                raise EpochFileError(
                    f"{self.path}: epoch {epoch} cannot start at {start_offset}, before epoch "
                    f"{self._entries[-1][0]}'s start {self._entries[-1][1]}"
                )
            entries = [*self._entries, (epoch, start_offset)]
            self._write(entries)
            self._entries = entries

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """(the largest epoch <= `epoch` that this log has, where it ends here)."""
        with self._lock:
            entries = self._entries
            if not entries or epoch < entries[0][0]:
                return UNDEFINED, UNDEFINED
            if epoch >= entries[-1][0]:
                return entries[-1][0], log_end
            found = max(i for i, (e, _) in enumerate(entries) if e <= epoch)
            return entries[found][0], entries[found + 1][1]

    def truncate_after(self, offset: int) -> None:
        """The log was cut at `offset`: epochs that start after it are gone."""
        with self._lock:
            kept = [(e, s) for e, s in self._entries if s <= offset]
            # an epoch starting exactly at the cut wrote nothing that stays: drop it too,
            # unless it is the only one (a log cut to its start)
            while len(kept) > 1 and kept[-1][1] == offset:
                kept.pop()
            if kept != self._entries:
                self._write(kept)
                self._entries = kept

    def drop_above(self, epoch: int) -> None:
        """Forget epochs above `epoch` (a follower whose leader never had them)."""
        with self._lock:
            kept = [(e, s) for e, s in self._entries if e <= epoch]
            if kept != self._entries:
                self._write(kept)
                self._entries = kept

    # -- the file ---------------------------------------------------------------------------

    def _read(self) -> list[tuple[int, int]]:
        lines = self.path.read_text().splitlines()
        try:
            if int(lines[0]) != VERSION:
                raise EpochFileError(f"{self.path}: format version {lines[0]!r}, not {VERSION}")
            count = int(lines[1])
            entries = []
            for line in lines[2:]:
                epoch, offset = line.split()
                entries.append((int(epoch), int(offset)))
        except (IndexError, ValueError) as exc:
            if isinstance(exc, EpochFileError):
                raise
            raise EpochFileError(f"{self.path}: not a leader epoch file ({exc})") from None
        if len(entries) != count:
            raise EpochFileError(f"{self.path}: {count} entries announced, {len(entries)} found")
        for (e1, s1), (e2, s2) in itertools.pairwise(entries):
            if not (e1 < e2 and s1 <= s2):
                raise EpochFileError(f"{self.path}: entries out of order at epoch {e2}")
        return entries

    def _write(self, entries: list[tuple[int, int]]) -> None:
        text = f"{VERSION}\n{len(entries)}\n" + "".join(f"{e} {s}\n" for e, s in entries)
        temporary = self.path.with_name(f".{FILE_NAME}.tmp")
        with open(temporary, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
