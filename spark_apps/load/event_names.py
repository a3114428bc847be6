"""Event names, (producer_id, seq), read from fetched log bytes: proving a load holds no repeat.

Every event's record starts with its header (docs/design.md §3.4: byte 0 magic 0, bytes 1-4 the
schema id, then the record in Avro binary, whose first field is the one shared EventHeader):

    timestamp   long (zigzag varint)
    server      string (varint length, UTF-8 bytes)
    producer_id string
    seq         long

The rows_sha256 thread reads every message of a load's range anyway; it hands each plain
fetch (entry_scan.PlainRun), and each other fetch (its payloads, compressed sets' as the reader
decompressed them: a 0.7 fetch's by message_columns, a 0.8-format topic's by its reader;
framed by entry_scan.payload_run) to `NameKeys`, which reads the names of its payloads in compiled
code (numba; ~140 ns per event with the seq ranges) and keeps one 64-bit key per event and each producer's lowest
and highest seq. From those, without a Spark job:

- `repeats_possible()` False proves every name of the range distinct: equal names make equal
  keys, so distinct keys are distinct names. A repeated key (a real repeat, or two names
  hashing alike) says only "look": the load then runs its Spark check.
- `shares_names_with(previous)` False proves no name is in the previous load, from that
  load's summary (its names' seq ranges per producer): a shared name needs a producer whose
  seq ranges overlap.

Anything unread makes both answer "possible": a payload whose header does not read (a bad
record), more events than `max_events` (the keys take 8 bytes per event: the proof is for
hours of up to 16M events by default, the Spark check for larger ones).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numba
import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from pipeline_warehouse.time_format import WINDOW_MS as _WINDOW_MS
from spark_apps.load.spark_hash import spark_xxhash64
from spark_apps.source.avro_compiled import varint
from spark_apps.source.entry_scan import ENTRY_HEADER, PlainRun
from spark_apps.summary_counts import PROFILE_QUERY_COLUMNS

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


@_jit
def _mix64(h: Any) -> Any:
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


# The group table of one fetch (rows of int64; `producers` holds each row's producer hash):
_USED, _WINDOW, _SCHEMA, _ROWS, _MIN_MS, _MAX_MS, _MIN_SEQ, _MAX_SEQ, _AT, _LENGTH = range(10)
_COLUMNS = 10
# Event times the driver profiles exactly as Spark would (1900-01-01 .. 9999-12-31 UTC): the
# rows' timestamps outside these are left to Spark (calendar rebasing, overflow in micros).
_PROFILED_MS = (-2_208_988_800_000, 253_402_300_799_999)
# Status of a fetch read by _read_names:
_READ, _TABLE_FULL, _NOT_PROFILED = 0, 1, 2


@_jit
def _count_in(row: Any, ms: Any, seq: Any) -> None:
    """One more event of a group's row: its count, and its event time and seq ranges."""
    row[_ROWS] += 1
    row[_MIN_MS] = min(row[_MIN_MS], ms)
    row[_MAX_MS] = max(row[_MAX_MS], ms)
    row[_MIN_SEQ] = min(row[_MIN_SEQ], seq)
    row[_MAX_SEQ] = max(row[_MAX_SEQ], seq)


@_jit
def _read_names(buf: Any, entries: Any, stop: int, keys: Any, table: Any, producers: Any) -> Any:
    """Each payload's name key into `keys`, and its (producer, window, schema id) group into
    `table` (open addressing; `producers` the rows' producer hashes). Returns (payloads that
    did not read, status): _TABLE_FULL when over half the table is used (call again with a
    larger one), _NOT_PROFILED when a group cannot be trusted for the summary (two
    producer_ids with one hash, an event time outside _PROFILED_MS)."""
    unread = 0
    status = _READ
    n = entries.shape[0]
    mask = table.shape[0] - 1
    used = 0
    # The previous event read: its producer_id's bytes, hash and group. Events come in runs
    # of one producer and window, so most reuse both instead of hashing and probing again.
    prev_at: Any = np.int64(-1)
    prev_length: Any = np.int64(-1)
    prev_slot: Any = np.int64(-1)
    prev_ph: Any = np.uint64(0)
    prev_window: Any = np.int64(-1)
    prev_schema: Any = np.int64(-1)
    for i in range(n):
        pos = entries[i] + ENTRY_HEADER
        end = entries[i + 1] if i + 1 < n else stop
        keys[i] = 0
        if end - pos < 5 or buf[pos] != 0:
            unread += 1
            continue
        schema = (
            (np.int64(buf[pos + 1]) << 24)
            | (np.int64(buf[pos + 2]) << 16)
            | (np.int64(buf[pos + 3]) << 8)
            | np.int64(buf[pos + 4])
        )
        pos += 5
        ms, pos, ok = varint(buf, pos, end)  # timestamp
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
        at = pos
        same = length == prev_length
        if same:
            for k in range(length):
                if buf[at + k] != buf[prev_at + k]:
                    same = False
                    break
        if same:
            ph = prev_ph
        else:
            h = np.uint64(_FNV_OFFSET)
            for k in range(pos, pos + length):
                h = (h ^ np.uint64(buf[k])) * np.uint64(_FNV_PRIME)
            ph = _mix64(h)
        pos += length
        seq, pos, ok = varint(buf, pos, end)
        if not ok:
            unread += 1
            continue
        prev_at, prev_length, prev_ph = at, length, ph
        keys[i] = _mix64(ph ^ (np.uint64(seq) * np.uint64(0x9E3779B97F4A7C15)))
        if ms < _PROFILED_MS[0] or ms > _PROFILED_MS[1]:
            status = _NOT_PROFILED  # still grouped: the seq ranges need every event
        window = ms - ms % _WINDOW_MS  # floor, as Spark's pmod: before 1970 too
        if same and window == prev_window and schema == prev_schema:
            # the previous event's group; its bytes were checked against the group's first
            _count_in(table[prev_slot], ms, seq)
            continue
        slot = np.int64(
            _mix64(ph ^ (np.uint64(window) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(schema))
            & np.uint64(mask)
        )
        while True:
            row = table[slot]
            if row[_USED] == 0:
                if 2 * (used + 1) > table.shape[0]:
                    return unread, _TABLE_FULL
                used += 1
                row[_USED] = 1
                producers[slot] = ph
                row[_WINDOW] = window
                row[_SCHEMA] = schema
                row[_ROWS] = 1
                row[_MIN_MS] = ms
                row[_MAX_MS] = ms
                row[_MIN_SEQ] = seq
                row[_MAX_SEQ] = seq
                row[_AT] = at
                row[_LENGTH] = length
                break
            if producers[slot] == ph and row[_WINDOW] == window and row[_SCHEMA] == schema:
                # the same producer_id as the group's first event, byte for byte
                first = row[_AT]
                if row[_LENGTH] != length:
                    status = _NOT_PROFILED
                else:
                    for k in range(length):
                        if buf[first + k] != buf[at + k]:
                            status = _NOT_PROFILED
                            break
                _count_in(row, ms, seq)
                break
            slot = (slot + 1) & mask
        prev_slot, prev_window, prev_schema = slot, window, schema
    return unread, status


class NameKeys:
    """The names of the events of some fetches (see the module doc)."""

    def __init__(self, max_events: int = MAX_EVENTS) -> None:
        self.max_events = max_events
        self.events = 0
        self.complete = True  # every message so far read to a name
        self.profiled = True  # every group can be summarized as Spark would
        self._keys: list[np.ndarray] = []
        self._repeats: bool | None = None  # repeats_possible(), once asked, until more arrive
        # (producer hash, window, schema id) -> [rows, min ms, max ms, min seq, max seq]
        self._groups: dict[tuple[int, int, int], list[int]] = {}
        self._producer_ids: dict[int, bytes] = {}  # producer hash -> its producer_id's bytes
        self._capacity = 256  # group table rows per fetch: grows when a fetch fills it

    def add(self, run: PlainRun) -> None:
        """The names of a plain fetch's payloads."""
        n = len(run.entries)
        if not self.complete or n == 0:
            return
        self.events += n
        if self.events > self.max_events:
            self.not_read()
            return
        keys = np.empty(n, np.uint64)
        while True:
            table = np.zeros((self._capacity, _COLUMNS), np.int64)
            producers = np.zeros(self._capacity, np.uint64)
            unread, status = _read_names(run.buf, run.entries, run.stop, keys, table, producers)
            if status != _TABLE_FULL:
                break
            self._capacity *= 4
        if unread:
            self.not_read()  # a payload that is not an event: the Spark check decides
            return
        if status == _NOT_PROFILED:
            self.profiled = False
        self._keys.append(keys)
        self._repeats = None
        used = np.flatnonzero(table[:, _USED])
        for ph, row in zip(producers[used].tolist(), table[used].tolist(), strict=True):
            producer_id = run.buf[row[_AT] : row[_AT] + row[_LENGTH]].tobytes()
            if self._producer_ids.setdefault(ph, producer_id) != producer_id:
                self.profiled = False  # two producer_ids, one hash: summarized by Spark
            group = self._groups.get((ph, row[_WINDOW], row[_SCHEMA]))
            if group is None:
                self._groups[(ph, row[_WINDOW], row[_SCHEMA])] = row[_ROWS : _MAX_SEQ + 1]
            else:
                group[0] += row[_ROWS]
                group[1] = min(group[1], row[_MIN_MS])
                group[2] = max(group[2], row[_MAX_MS])
                group[3] = min(group[3], row[_MIN_SEQ])
                group[4] = max(group[4], row[_MAX_SEQ])

    def not_read(self) -> None:
        """Some messages were not read to names: nothing can be proved."""
        self.complete = False
        self._keys = []
        self._groups = {}
        self._producer_ids = {}

    @property
    def seq_ranges(self) -> dict[int, tuple[int, int]]:
        """Producer hash -> (lowest, highest) seq of the events read."""
        ranges: dict[int, tuple[int, int]] = {}
        for (ph, _, _), (_, _, _, lowest, highest) in self._groups.items():
            was = ranges.get(ph)
            if was is not None:
                lowest, highest = min(was[0], lowest), max(was[1], highest)
            ranges[ph] = (lowest, highest)
        return ranges

    def repeats_possible(self) -> bool:
        """Whether two events read may share a name (a sort of the keys: ~0.16 s for 2M,
        so the rows_sha256 thread asks once it has read everything, while Spark writes)."""
        if not self.complete:
            return True
        if self._repeats is None:
            keys = np.sort(np.concatenate(self._keys)) if self._keys else np.empty(0, np.uint64)
            self._repeats = bool((keys[1:] == keys[:-1]).any())
        return self._repeats

    def shares_names_with(self, previous: list[tuple[str, int, int]]) -> bool:
        """Whether a name may also be in a load whose names are `previous`: (producer_id,
        lowest seq, highest seq) rows, as a load summary's `names` give them."""
        if not self.complete:
            return True
        ranges = self.seq_ranges
        for producer_id, lowest, highest in previous:
            ours = ranges.get(producer_hash(producer_id))
            if ours is not None and ours[0] <= highest and lowest <= ours[1]:
                return True
        return False

    def profile(self, topic: str, load_hour: str) -> pd.DataFrame | None:
        """The load summary's profile of these events: summary_counts.profile_query's columns
        and values, as Spark counts them from the rows these events become. None when it
        cannot be given exactly (then Spark counts it). Every event read has its header, so
        no header field is null."""
        import pandas as pd

        if not self.complete or not self.profiled:
            return None
        names: dict[int, tuple[str, int]] = {}
        for ph, raw in self._producer_ids.items():
            try:
                producer_id = raw.decode()
            except UnicodeDecodeError:
                return None  # not a row Spark would write
            names[ph] = (producer_id, spark_xxhash64(producer_id))
        records = [
            (topic, load_hour, window, *names[ph], schema, rows, 0, 0, *extremes)
            for (ph, window, schema), (rows, *extremes) in sorted(self._groups.items())
        ]
        return pd.DataFrame.from_records(records, columns=PROFILE_QUERY_COLUMNS)
