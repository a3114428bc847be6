"""Event names, (producer_id, seq), read from fetched log bytes: proving a load holds no repeat.

Every event's record starts with its header (DESIGN.md §3.4: byte 0 magic 0, bytes 1-4 the
schema id, then the record in Avro binary, whose first field is the one shared EventHeader):

    timestamp   long (zigzag varint)
    server      string (varint length, UTF-8 bytes)
    producer_id string
    seq         long

The rows_sha256 thread reads every message of a load's range anyway; it hands each plain
fetch (entry_scan.PlainRun) to `NameKeys`, which reads the names of its payloads in compiled
code (numba; ~140 ns per event with the seq ranges) and keeps one 64-bit key per event and each producer's lowest
and highest seq. From those, without a Spark job:

- `repeats_possible()` False proves every name of the range distinct: equal names make equal
  keys, so distinct keys are distinct names. A repeated key (a real repeat, or two names
  hashing alike) says only "look": the load then runs its Spark check.
- `shares_names_with(previous)` False proves no name is in the previous load, from that
  load's summary (its names' seq ranges per producer): a shared name needs a producer whose
  seq ranges overlap.

Anything unread makes both answer "possible": a fetch that is not plain entries only, a
payload whose header does not read (a bad record), more events than `max_events` (the keys
take 8 bytes per event: the proof is for hours of up to 16M events by default, the Spark
check for larger ones).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from .entry_scan import ENTRY_HEADER, PlainRun
from .logbroker_source.avro_compiled import varint

MAX_EVENTS = 16_000_000
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def producer_hash(producer_id: str) -> int:
    """The 64-bit hash NameKeys gives a producer_id (FNV-1a over its UTF-8 bytes, mixed)."""
    h = _FNV_OFFSET
    for b in producer_id.encode():
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return _mix(h)


def _mix(h: int) -> int:  # splitmix64's finalizer: spreads FNV's low-entropy high bits
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
    return h ^ (h >> 31)


_jit = numba.njit(cache=True, nogil=True)


@_jit  # type: ignore[misc]
def _mix64(h: Any) -> Any:
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@_jit  # type: ignore[misc]
def _read_names(buf: Any, entries: Any, stop: int, producers: Any, seqs: Any, keys: Any) -> int:
    """Each payload's producer hash, seq and name key; returns how many did not read."""
    unread = 0
    n = entries.shape[0]
    for i in range(n):
        pos = entries[i] + ENTRY_HEADER
        end = entries[i + 1] if i + 1 < n else stop
        producers[i] = 0
        seqs[i] = 0
        keys[i] = 0
        if end - pos < 5 or buf[pos] != 0:
            unread += 1
            continue
        pos += 5
        _, pos, ok = varint(buf, pos, end)  # timestamp
        if not ok:
            unread += 1
            continue
        length, pos, ok = varint(buf, pos, end)  # server
        if not ok or length < 0 or length > end - pos:
            unread += 1
            continue
        pos += length
        length, pos, ok = varint(buf, pos, end)  # producer_id
        if not ok or length < 0 or length > end - pos:
            unread += 1
            continue
        h = np.uint64(_FNV_OFFSET)
        for k in range(pos, pos + length):
            h = (h ^ np.uint64(buf[k])) * np.uint64(_FNV_PRIME)
        pos += length
        seq, pos, ok = varint(buf, pos, end)
        if not ok:
            unread += 1
            continue
        ph = _mix64(h)
        producers[i] = ph
        seqs[i] = seq
        keys[i] = _mix64(ph ^ (np.uint64(seq) * np.uint64(0x9E3779B97F4A7C15)))
    return unread


class NameKeys:
    """The names of the events of some fetches (see the module doc)."""

    def __init__(self, max_events: int = MAX_EVENTS) -> None:
        self.max_events = max_events
        self.events = 0
        self.complete = True  # every message so far read to a name
        self._keys: list[np.ndarray] = []
        self.seq_ranges: dict[int, tuple[int, int]] = {}  # producer hash -> (lowest, highest)

    def add(self, run: PlainRun) -> None:
        """The names of a plain fetch's payloads."""
        n = len(run.entries)
        if not self.complete or n == 0:
            return
        self.events += n
        if self.events > self.max_events:
            self.not_read()
            return
        producers = np.empty(n, np.uint64)
        seqs = np.empty(n, np.int64)
        keys = np.empty(n, np.uint64)
        if _read_names(run.buf, run.entries, run.stop, producers, seqs, keys):
            self.not_read()  # a payload that is not an event: the Spark check decides
            return
        self._keys.append(keys)
        found, where = np.unique(producers, return_inverse=True)
        lowest = np.full(len(found), np.iinfo(np.int64).max, np.int64)
        highest = np.full(len(found), np.iinfo(np.int64).min, np.int64)
        np.minimum.at(lowest, where, seqs)
        np.maximum.at(highest, where, seqs)
        for p, lo, hi in zip(found.tolist(), lowest.tolist(), highest.tolist(), strict=True):
            was = self.seq_ranges.get(p)
            self.seq_ranges[p] = (lo, hi) if was is None else (min(was[0], lo), max(was[1], hi))

    def not_read(self) -> None:
        """Some messages were not read to names: nothing can be proved."""
        self.complete = False
        self._keys = []
        self.seq_ranges = {}

    def repeats_possible(self) -> bool:
        if not self.complete:
            return True
        if not self._keys:
            return False
        keys = np.sort(np.concatenate(self._keys))
        return bool((keys[1:] == keys[:-1]).any())

    def shares_names_with(self, previous: list[tuple[str, int, int]]) -> bool:
        """Whether a name may also be in a load whose names are `previous`: (producer_id,
        lowest seq, highest seq) rows, as a load summary's `names` give them."""
        if not self.complete:
            return True
        for producer_id, lowest, highest in previous:
            ours = self.seq_ranges.get(producer_hash(producer_id))
            if ours is not None and ours[0] <= highest and lowest <= ours[1]:
                return True
        return False
