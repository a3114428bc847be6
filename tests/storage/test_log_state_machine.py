"""A stateful property test of one partition's log, through the log manager, against a model.

The model is the list of (offset, entry bytes) that the log should hold, the offset where it
starts, and how far it is durable (flushed, or in a segment that a roll fsynced). Hypothesis
drives appends of message sets, the clock (rolls by age, retention by age), flushes,
retention (by age and by size), clean restarts, and crashes: the process dies with nothing
lost, or the machine loses what was not flushed (the newest segment cut at a random point
at or after its durable end, possibly inside an entry), or a partial entry or garbage is
left at the tail; each time the log is opened again and recovered.

After every step: a read at every offset of the model returns exactly its entry; the end is
the model's end; reading at the end is empty and outside [start, end] is out of range;
offsets never restart (the start never goes back, the end goes back only in a crash and
never below what was durable); retention removes whole segments from the front only, and
leaves none that it should have removed; recovery never loses a durable message and never
serves a partial one.

Runs `LOGBROKER_STATEFUL_EXAMPLES` examples (default 30, a few seconds); raise it for a long
run, e.g. `LOGBROKER_STATEFUL_EXAMPLES=2000 pytest tests/storage/test_log_state_machine.py`.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logbroker.config import BrokerConfig
from logbroker.protocol.errors import OffsetOutOfRangeError
from logbroker.protocol.message_set import build_message_set
from logbroker.storage.log import Log
from logbroker.storage.log_manager import LogManager

HOUR = 3600 * 1000
SEGMENT_BYTES = 150  # a few small entries per segment: rolls happen all the time
RETENTION_BYTES = 400
RETENTION_HOURS = 2
TOPIC, PARTITION = "events", 0
EXAMPLES = int(os.environ.get("LOGBROKER_STATEFUL_EXAMPLES", "30"))

payloads = st.binary(min_size=0, max_size=40)


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="log-machine-"))
        self.clock = FakeClock()
        self.config = BrokerConfig(
            log_dir=str(self.directory),
            log_file_size=SEGMENT_BYTES,
            log_roll_hours=1,
            log_retention_hours=RETENTION_HOURS,
            log_retention_size=RETENTION_BYTES,
            log_flush_interval=1_000_000,  # flushes come from the rules only
            log_default_flush_interval_ms=1_000_000_000,
        )
        self.manager: LogManager | None = None
        self.open_manager()
        self.log = self.manager_log(create=True)
        # the model
        self.entries: list[tuple[int, bytes]] = []  # (offset, entry bytes), ascending
        self.start = 0
        self.end = 0
        self.durable = 0  # every entry that ends at or before this offset was fsynced

    # -- helpers -----------------------------------------------------------------------

    def open_manager(self) -> None:
        self.manager = LogManager(self.config, clock=self.clock)

    def manager_log(self, create: bool = False) -> Log:
        assert self.manager is not None
        found = (
            self.manager.get_or_create_log(TOPIC, PARTITION)
            if create
            else self.manager.get_log(TOPIC, PARTITION)
        )
        assert found is not None
        return found

    def boundaries(self) -> list[int]:
        return [self.start] + [offset + len(entry) for offset, entry in self.entries]

    def note_rolls(self) -> None:
        # a roll fsyncs the segment it closes: all but the newest segment are durable
        self.durable = max(self.durable, self.log.segments[-1].base_offset)

    def drop_model_after(self, end: int) -> None:
        self.entries = [(o, e) for o, e in self.entries if o + len(e) <= end]
        self.end = end

    def die(self) -> None:
        """The process ends without a clean shutdown: no marker, descriptors closed."""
        for segment in self.log.segments:
            segment.close()
        self.manager = None

    def reopen(self) -> None:
        self.open_manager()
        self.log = self.manager_log()

    # -- rules -------------------------------------------------------------------------

    @rule(batch=st.lists(payloads, min_size=1, max_size=3))
    def append(self, batch: list[bytes]) -> None:
        entries = [build_message_set([p]) for p in batch]
        offset, next_offset = self.log.append(b"".join(entries))
        assert offset == self.end, "an append starts at the end"
        for entry in entries:
            self.entries.append((offset, entry))
            offset += len(entry)
        assert next_offset == offset
        self.end = next_offset
        self.note_rolls()

    @rule(ms=st.integers(min_value=0, max_value=3 * HOUR))
    def advance_clock(self, ms: int) -> None:
        self.clock.now += ms

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.durable = self.end

    @rule()
    def retention(self) -> None:
        assert self.manager is not None
        bases_before = [s.base_offset for s in self.log.segments]
        deleted = self.manager.cleanup()
        bases_after = [s.base_offset for s in self.log.segments]
        deleted_bases = [s.base_offset for s in deleted]
        # whole segments, from the front, in order; offsets never restart
        assert deleted_bases == bases_before[: len(deleted_bases)]
        new_start = self.log.start_offset
        assert new_start >= self.start
        # a front segment's base, or the end when every segment went (a new one starts there)
        assert new_start in bases_before or (bases_after == [self.end] and new_start == self.end)
        assert self.log.end_offset == self.end
        # and nothing is left that retention should have taken
        first = self.log.segments[0]
        only_empty = len(self.log.segments) == 1 and first.size == 0
        if not only_empty:
            assert first.last_modified_ms >= self.clock.now - RETENTION_HOURS * HOUR
            assert self.log.size_in_bytes - first.size < RETENTION_BYTES
        self.entries = [(o, e) for o, e in self.entries if o >= new_start]
        self.start = new_start
        self.durable = max(self.durable, new_start)

    @rule()
    def clean_restart(self) -> None:
        assert self.manager is not None
        self.manager.shutdown()
        self.reopen()
        assert self.log.recovery is None, "a clean shutdown is not recovered"
        self.durable = self.end

    @rule()
    def crash_losing_nothing(self) -> None:
        """kill -9: the page cache keeps every completed write."""
        self.die()
        self.reopen()
        assert self.log.end_offset == self.end

    @rule(data=st.data())
    def crash_losing_the_unflushed_tail(self, data: st.DataObject) -> None:
        """Power loss: the newest segment keeps its durable part and any prefix of the rest,
        cut anywhere, inside an entry too."""
        newest = self.log.segments[-1]
        durable_size = max(0, self.durable - newest.base_offset)
        keep = data.draw(st.integers(min_value=durable_size, max_value=newest.size), "keep")
        path, base = newest.path, newest.base_offset
        self.die()
        os.truncate(path, keep)
        self.reopen()
        # recovery cuts back to the last whole entry within what was kept
        expected = max(b for b in self.boundaries() if b <= base + keep)
        assert self.log.end_offset == expected
        assert expected >= self.durable, "recovery lost a flushed message"
        self.drop_model_after(expected)

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def crash_leaving_a_partial_entry_or_garbage(self, data: st.DataObject) -> None:
        newest = self.log.segments[-1]
        _, some_entry = data.draw(st.sampled_from(self.entries), "entry")
        tail = data.draw(
            st.one_of(
                st.integers(min_value=1, max_value=len(some_entry) - 1).map(
                    lambda n: some_entry[:n]
                ),
                st.binary(min_size=1, max_size=30),
            ),
            "tail",
        )
        path = newest.path
        self.die()
        with open(path, "ab") as f:
            f.write(tail)
        self.reopen()
        assert self.log.end_offset == self.end, "the partial tail was served, or data lost"

    # -- what must always hold ---------------------------------------------------------

    @invariant()
    def reads_match_the_model(self) -> None:
        log = self.log
        assert log.start_offset == self.start
        assert log.end_offset == self.end
        for offset, entry in self.entries:
            assert log.read(offset, len(entry)).read() == entry, offset
        assert log.read(self.end, 1000).length == 0
        for outside in (self.start - 1, self.end + 1):
            if outside >= 0:
                try:
                    log.read(outside, 100)
                except OffsetOutOfRangeError:
                    pass
                else:
                    raise AssertionError(f"offset {outside} outside the log was served")

    @invariant()
    def segments_tile_the_log(self) -> None:
        segments = self.log.segments
        assert segments[0].base_offset == self.start
        for earlier, later in itertools.pairwise(segments):
            assert earlier.end_offset == later.base_offset
        assert segments[-1].end_offset == self.end

    def teardown(self) -> None:
        if self.manager is not None:
            self.manager.shutdown()
        shutil.rmtree(self.directory, ignore_errors=True)


LogMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_log_state_machine = LogMachine.TestCase
