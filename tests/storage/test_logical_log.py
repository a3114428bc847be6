"""The log of one 0.8-format partition on real files (storage/logical_log.py): logical offsets
through plain and compressed sets, reads from any offset (inside a wrapper too) through the
offset index, rolling, truncation, a follower's verbatim copy, retention, offsets_before, and
recovery with the index rebuilt, under each damage shape of test_recovery.py.

The reference the log is checked against is the segment files themselves, walked entry by
entry here (entry_headers), and indexes rebuilt from them with OffsetIndex.rebuild.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import struct
import zlib
from pathlib import Path

import pytest

from logbroker.protocol import compression
from logbroker.protocol.errors import InvalidMessageError, OffsetOutOfRangeError, StorageError
from logbroker.protocol.kafka08.message_set import (
    build_message_set,
    entry,
    entry_headers,
    first_entry_size,
    iter_messages,
    validate,
)
from logbroker.protocol.requests import EARLIEST_TIME, LATEST_TIME
from logbroker.storage.log import LogConfig
from logbroker.storage.logical_log import LogicalLog
from logbroker.storage.offset_index import OffsetIndex

HOUR = 3600 * 1000
INTERVAL = 256  # log.index.interval.bytes, small: segments here span many index entries


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def make_log(
    tmp_path: Path,
    clock: FakeClock | None = None,
    interval: int = INTERVAL,
    name: str = "topic-0",
    recover: bool = False,
    modified_after_ns: int | None = None,
    **config: int,
) -> LogicalLog:
    return LogicalLog(
        tmp_path / name,
        "topic",
        0,
        LogConfig(**config),
        clock or FakeClock(),
        recover=recover,
        modified_after_ns=modified_after_ns,
        index_interval_bytes=interval,
    )


def records(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in iter_messages(data)]


def stored(log: LogicalLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every message the segment files hold, in order."""
    return [m for s in log.segments for m in records(s.path.read_bytes()[: s.size])]


def headers(log: LogicalLog) -> list[tuple[object, int, int, int]]:
    """(segment, offset as stored, position, size) of every entry of the segment files."""
    return [
        (s, offset, position, size)
        for s in log.segments
        for offset, position, size in entry_headers(s.path.read_bytes()[: s.size])
    ]


def rebuilt_entries(segment: object, tmp_path: Path, interval: int = INTERVAL) -> list:
    path = tmp_path / f"rebuilt-{os.urandom(4).hex()}.index"
    data = segment.path.read_bytes()[: segment.size]  # type: ignore[attr-defined]
    base = segment.base_offset  # type: ignore[attr-defined]
    with OffsetIndex.rebuild(path, base, entry_headers(data), interval_bytes=interval) as index:
        return index.entries()


def index_files(log: LogicalLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.glob("*.index"))}


def open_index_files(log: LogicalLog) -> list[str]:
    """The index files of `log` this process holds open."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(log.directory)) and target.endswith(".index"):
                names.append(Path(target).name)
    return sorted(names)


def keyed(prefix: str, count: int, size: int = 40) -> list[tuple[bytes, bytes]]:
    return [
        (f"{prefix}-key-{i}".encode(), f"{prefix}-{i}-".encode().ljust(size, b"."))
        for i in range(count)
    ]


def mixed_appends(log: LogicalLog, count: int, seed: int = 5) -> list[tuple[bytes, bytes]]:
    """`count` appends of 1-6 keyed messages of assorted sizes, plain, gzip or snappy; the
    messages in order."""
    rng = random.Random(seed)
    sent: list[tuple[bytes, bytes]] = []
    for n in range(count):
        messages = [
            (f"k{n}.{i}".encode(), rng.randbytes(rng.choice((10, 100, 700))))
            for i in range(rng.randint(1, 6))
        ]
        codec = rng.choice(
            (compression.NONE, compression.NONE, compression.GZIP, compression.SNAPPY)
        )
        log.append(build_message_set(messages, codec, base_offset=rng.randrange(1000)))
        sent += messages
    return sent


# -- offsets ------------------------------------------------------------------------------


def test_appends_assign_consecutive_offsets_through_plain_and_compressed_sets(tmp_path):
    log = make_log(tmp_path)
    # producers' offsets are anything (Java's 0..n-1, librdkafka's 0): the log assigns its own
    assert log.append(build_message_set(keyed("a", 3), base_offset=77)) == (0, 3)
    assert log.append(build_message_set(keyed("b", 4), compression.GZIP)) == (3, 7)
    assert log.append(build_message_set(keyed("c", 2), compression.SNAPPY, 40)) == (7, 9)
    assert log.append(build_message_set(keyed("d", 1))) == (9, 10)
    assert log.end_offset == 10
    expected = keyed("a", 3) + keyed("b", 4) + keyed("c", 2) + keyed("d", 1)
    assert stored(log) == [(i, k, v) for i, (k, v) in enumerate(expected)]
    # a wrapper's own offset is its last inner message's: 6 and 8
    assert [offset for _, offset, _, _ in headers(log)] == [0, 1, 2, 6, 8, 9]
    segment = log.segments[0]
    assert validate(segment.path.read_bytes(), stored=True).error is None
    assert log.append(b"") == (10, 10)


def test_a_damaged_or_incomplete_set_appends_nothing(tmp_path):
    log = make_log(tmp_path)
    log.append(build_message_set(keyed("a", 2)))
    good = build_message_set(keyed("b", 2))
    damaged = bytearray(good)
    damaged[-1] ^= 0xFF
    with pytest.raises(InvalidMessageError, match="topic-0: CRC mismatch"):
        log.append(bytes(damaged))
    with pytest.raises(InvalidMessageError, match="incomplete"):
        log.append(good[:20])
    bad_inner = entry(0, compression.compress(compression.GZIP, b"not a message set"), None, 1)
    with pytest.raises(InvalidMessageError, match="compressed set"):
        log.append(bad_inner)
    assert log.end_offset == 2 and log.segments[0].size == len(good)
    # a partial trailing entry is dropped, the whole ones appended
    assert log.append(good + good[:7]) == (2, 4)


# -- reads --------------------------------------------------------------------------------


def test_fetch_rules_and_the_visible_end(tmp_path):
    log = make_log(tmp_path)
    log.append(build_message_set(keyed("a", 3)))
    log.append(build_message_set(keyed("b", 3), compression.GZIP))  # offsets 3..5
    log.append(build_message_set(keyed("c", 2)))  # 6, 7
    assert log.read(8, 1000).length == 0  # offset == end: empty, no error
    with pytest.raises(OffsetOutOfRangeError, match="offset 9 is out of range for topic-0"):
        log.read(9, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    region = log.read(1, 100)  # at most max_size: the last entry cut, as 0.8 served it
    assert region.length == 100 and region.offset == 1
    assert records(region.read()) == [(1, *keyed("a", 3)[1])]
    # the high watermark: nothing at or past it; a wrapper that holds it is left out whole
    assert [o for o, _, _ in records(log.read(0, 10**6, visible_end=7).read())] == list(range(7))
    assert [o for o, _, _ in records(log.read(0, 10**6, visible_end=4).read())] == [0, 1, 2]
    assert log.read(3, 10**6, visible_end=4).length == 0
    assert log.read(7, 10**6, visible_end=7).length == 0


def test_a_read_from_every_offset_of_a_compressed_wrapper_returns_that_wrapper(tmp_path):
    log = make_log(tmp_path)
    log.append(build_message_set(keyed("a", 3)))
    for codec in (compression.GZIP, compression.SNAPPY):
        first, end = log.append(build_message_set(keyed(f"w{codec}", 5), codec))
        wrapper = next(h for h in headers(log) if h[1] == end - 1)
        _, _, position, size = wrapper
        wrapper_bytes = log.segments[0].path.read_bytes()[position : position + size]
        for offset in range(first, end):
            region = log.read(offset, 10**6)
            assert region.position == position and region.offset == offset
            data = region.read()
            assert data[:size] == wrapper_bytes
            # the client skips what is below the offset it asked for
            assert [o for o, _, _ in records(data)][: end - first] == list(range(first, end))
        # a segment's own regions name the first message at their start
        segment = log.segments[0]
        assert segment.region(position, 10).offset == first
        assert segment.region(0, 10).offset == 0
    after = log.append(build_message_set(keyed("z", 1)))[0]
    assert records(log.read(after, 10**6).read()) == [(after, *keyed("z", 1)[0])]
    assert log.segments[0].region(log.segments[0].size, 10).offset == log.end_offset


def test_index_lookups_hit_the_exact_entry(tmp_path):
    log = make_log(tmp_path, segment_bytes=10**6)
    sent = mixed_appends(log, 150)
    entries = headers(log)
    segment = log.segments[0]
    assert len(segment.index) > 40  # the reads below go through many index entries
    # every index entry points at the start of an entry and carries that entry's offset
    at = {position: offset for _, offset, position, _ in entries}
    assert all(at[position] == offset for offset, position in segment.index.entries())
    assert segment.index.entries() == rebuilt_entries(segment, tmp_path)
    first = 0
    for _, offset, position, _ in entries:
        for target in range(first, offset + 1):  # every message of the entry
            region = log.read(target, 1)
            assert region.position == position, (target, offset)
        first = offset + 1
    assert first == len(sent) == log.end_offset
    # after a restart the index comes from its file, and reads land the same
    log.close()
    again = make_log(tmp_path, segment_bytes=10**6)
    assert again.segments[0].index.entries() == segment.index.entries()
    for target in random.Random(1).sample(range(len(sent)), 50):
        region = again.read(target, 10**6)
        got = records(region.read())
        assert got[0][0] <= target and any(o == target for o, _, _ in got)
        assert got[[o for o, _, _ in got].index(target)][1:] == sent[target]


# -- segments -----------------------------------------------------------------------------


def test_rolls_by_size_and_reads_across_segments(tmp_path):
    log = make_log(tmp_path, segment_bytes=600)
    sent: list[tuple[bytes, bytes]] = []
    for n in range(12):
        messages = keyed(f"s{n}", 3)
        log.append(build_message_set(messages, compression.GZIP if n % 3 == 2 else 0))
        sent += messages
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3 and all(s.size <= 600 for s in log.segments)
    names = sorted(p.name for p in log.directory.iterdir())
    assert names == sorted([f"{b:020d}.log" for b in bases] + [f"{b:020d}.index" for b in bases])
    for segment, following in zip(log.segments, log.segments[1:], strict=False):
        assert segment.end_offset == following.base_offset  # named by their first message
        assert stored(log)[following.base_offset][0] == following.base_offset
    # only the last segment's index holds a descriptor; the pool bounds the segment files
    assert open_index_files(log) == [log.segments[-1].index.path.name]
    log.close()
    log = make_log(tmp_path, segment_bytes=600)
    assert open_index_files(log) == [log.segments[-1].index.path.name]
    # a consumer: each read stays in one segment, the next starts after its last whole message
    offset, got = 0, []
    while offset < log.end_offset:
        region = log.read(offset, 700)
        assert region.position + region.length <= region.segment.size
        whole = [m for m in records(region.read()) if m[0] >= offset]
        got += whole
        offset = whole[-1][0] + 1
    assert got == [(i, k, v) for i, (k, v) in enumerate(sent)]


def test_rolls_by_age(tmp_path):
    clock = FakeClock()
    log = make_log(tmp_path, clock=clock, roll_ms=2 * HOUR)
    log.append(build_message_set(keyed("a", 1)))
    clock.advance(HOUR)
    log.append(build_message_set(keyed("b", 2)))
    assert len(log.segments) == 1
    clock.advance(HOUR)
    # an index left by a segment of that name that is gone (its unlink failed) is not this one's
    stale = log.directory / f"{3:020d}.index"
    stale.write_bytes(struct.pack(">ii", 1, 30))
    log.append(build_message_set(keyed("c", 1)))
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.append(build_message_set(keyed("d", 20)))
    new = log.segments[1]
    assert new.index.entries() == rebuilt_entries(new, tmp_path) and len(new.index) > 1
    assert all(
        target in [o for o, _, _ in records(log.read(target, 1000).read())]
        for target in range(3, 24)
    )


def test_truncation_mid_segment_then_appends_continue_at_the_cut(tmp_path, caplog):
    log = make_log(tmp_path, segment_bytes=10**6)
    mixed_appends(log, 60)
    boundaries = [offset + 1 for _, offset, _, _ in headers(log)]
    cut = boundaries[len(boundaries) // 2]
    before = stored(log)
    removed = log.truncate_to(cut)
    assert log.end_offset == cut and removed > 0
    assert stored(log) == before[:cut]
    segment = log.segments[0]
    assert all(offset < cut for offset, _ in segment.index.entries())
    assert segment.index.entries() == rebuilt_entries(segment, tmp_path)
    assert log.append(build_message_set(keyed("after", 3))) == (cut, cut + 3)
    more = mixed_appends(log, 20, seed=9)
    assert [m[1:] for m in stored(log)[cut + 3 :]] == more
    assert segment.index.entries() == rebuilt_entries(segment, tmp_path)
    # an offset inside a compressed wrapper is no message boundary: the cut is before it
    first, _ = log.append(build_message_set(keyed("w", 4), compression.GZIP))
    with caplog.at_level("WARNING"):
        log.truncate_to(first + 2)
    assert log.end_offset == first
    assert any("inside the compressed wrapper" in r.getMessage() for r in caplog.records)
    with pytest.raises(OffsetOutOfRangeError, match="before its first offset 0"):
        log.truncate_to(-1)
    assert log.truncate_to(log.end_offset) == 0


def test_truncation_at_a_segment_boundary(tmp_path):
    log = make_log(tmp_path, segment_bytes=600)
    for n in range(10):
        log.append(build_message_set(keyed(f"s{n}", 4)))
    assert len(log.segments) >= 4
    third = log.segments[2]
    later = log.segments[3:]
    log.truncate_to(third.base_offset)
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in log.segments[:2]]
    assert log.end_offset == third.base_offset == log.segments[-1].end_offset
    for gone in (third, *later):
        assert not gone.path.exists() and not gone.index.path.exists()
    assert log.append(build_message_set(keyed("next", 2)))[0] == third.base_offset
    # inside an older segment: it is the last again, its index is cut and takes entries
    log.truncate_to(3)
    assert [s.base_offset for s in log.segments] == [0] and log.end_offset == 3
    log.append(build_message_set(keyed("more", 4)))
    first = log.segments[0]
    assert first.index.entries() == rebuilt_entries(first, tmp_path)
    assert first.index.entries() and all(o >= 3 for o, _ in first.index.entries())  # new ones
    assert [m[0] for m in stored(log)] == list(range(log.end_offset))


# -- followers ----------------------------------------------------------------------------


def copy(leader: LogicalLog, follower: LogicalLog, max_bytes: int) -> int:
    """Fetch-and-append rounds until the follower has the leader's log; returns the rounds
    whose count the leader's marks gave."""
    counted = 0
    while follower.end_offset < leader.end_offset:
        region, messages = leader.read_whole(follower.end_offset, max_bytes)
        data = region.read()
        if messages >= 0:
            counted += 1
        else:  # not counted: the whole entries are the follower's to find
            whole = 0
            for _, position, size in entry_headers(data):
                whole = position + size
            if not whole:  # one entry larger than the fetch: fetch it whole (as a follower does)
                region, messages = leader.read_whole(follower.end_offset, first_entry_size(data))
                data = region.read()
                whole = len(data)
            data = data[:whole]
        follower.append_verbatim(data, messages)
    return counted


def test_a_follower_copies_the_leader_byte_for_byte(tmp_path):
    leader = make_log(tmp_path, name="leader-0", segment_bytes=2000)
    follower = make_log(tmp_path, name="follower-0", segment_bytes=2000)
    for seed in (5, 6, 7):  # the follower catches up three times
        mixed_appends(leader, 20, seed=seed)
        copy(leader, follower, 5000)  # room for every append: each fetch is counted
    assert follower.end_offset == leader.end_offset
    # whole appends: the follower rolls where the leader did, and its files are the same
    assert [s.path.name for s in follower.segments] == [s.path.name for s in leader.segments]
    for mine, theirs in zip(follower.segments, leader.segments, strict=True):
        assert mine.path.read_bytes() == theirs.path.read_bytes()
        assert mine.index.path.read_bytes() == theirs.index.path.read_bytes()
    # fetches smaller than an append, and a leader that lost its marks (a restart): not
    # counted, split inside appends (the follower rolls on its own), the same log still
    leader.close()
    leader = make_log(tmp_path, name="leader-0", segment_bytes=2000)
    mixed_appends(leader, 20, seed=8)
    assert leader.read_whole(follower.end_offset, 100)[1] == -1
    copy(leader, follower, 300)
    assert stored(follower) == stored(leader)
    assert b"".join(s.path.read_bytes() for s in follower.segments) == b"".join(
        s.path.read_bytes() for s in leader.segments
    )
    for segment in follower.segments:
        assert segment.index.entries() == rebuilt_entries(segment, tmp_path)


def test_a_follower_refuses_a_gap_an_overlap_and_cut_entries(tmp_path):
    leader = make_log(tmp_path, name="leader-0")
    follower = make_log(tmp_path, name="follower-0")
    leader.append(build_message_set(keyed("a", 3)))
    leader.append(build_message_set(keyed("b", 4), compression.SNAPPY))  # 3..6, one wrapper
    leader.append(build_message_set(keyed("c", 2)))  # 7, 8
    follower.append_verbatim(leader.read(0, 10**6).read()[: leader.read(3, 1).position], 3)
    assert follower.end_offset == 3
    size, index = follower.segments[0].size, follower.segments[0].index.entries()
    with pytest.raises(
        OffsetOutOfRangeError,
        match=r"start at offset 7 but this log ends at offset 3 \(a gap of 4 messages\)",
    ):
        follower.append_verbatim(leader.read(7, 10**6).read(), 2)
    with pytest.raises(OffsetOutOfRangeError, match=r"start at offset 1 but .* ends at offset 3"):
        follower.append_verbatim(leader.read(1, 10**6).read(), 8)
    wrapper_and_after = leader.read(3, 10**6).read()
    with pytest.raises(OffsetOutOfRangeError, match="start at offset 4 but"):
        follower.append_verbatim(wrapper_and_after, 5)  # says 5 messages: the first is 4
    with pytest.raises(InvalidMessageError, match="not whole entries"):
        follower.append_verbatim(wrapper_and_after[:-3], 6)
    assert follower.end_offset == 3 and follower.segments[0].size == size
    assert follower.segments[0].index.entries() == index
    # not counted (-1): the first wrapper is opened to find its first message
    assert follower.append_verbatim(wrapper_and_after, -1) == 9
    assert stored(follower) == stored(leader)


def test_read_whole_ends_where_an_append_ended_and_counts_its_messages(tmp_path):
    log = make_log(tmp_path)
    log.append(build_message_set(keyed("a", 3, 100)))  # 0..2
    log.append(build_message_set(keyed("b", 2, 100), compression.GZIP))  # 3, 4
    log.append(build_message_set(keyed("c", 3, 100)))  # 5..7
    region, messages = log.read_whole(0, 10**6)
    assert messages == 8 and region.length == log.segments[0].size
    first = log.read(3, 1).position
    region, messages = log.read_whole(0, first + 50)  # `read` would cut the next entry
    assert (region.length, messages) == (first, 3)
    assert log.read_whole(3, 10**6)[1] == 5
    assert log.read_whole(8, 1000)[1] == 0 and log.read_whole(8, 1000)[0].length == 0
    region, messages = log.read_whole(1, 10**6)  # not where an append ended: not counted
    assert messages == -1 and region.length == log.read(1, 10**6).length
    log.truncate_to(5)  # at an append's end: the marks before it stay
    assert log.read_whole(0, 10**6)[1] == 5
    log.truncate_to(1)  # between two marks: counting starts again there
    assert log.read_whole(0, 10**6)[1] == -1
    log.append(build_message_set(keyed("d", 4)))
    assert log.read_whole(1, 10**6)[1] == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read_whole(6, 100)


# -- writes that fail ---------------------------------------------------------------------


def fsize_limit(limit: int) -> object:
    """RLIMIT_FSIZE for this process while in the block: a write past `limit` bytes of a file
    writes what fits and then fails with EFBIG, as a full disk does (Python ignores SIGXFSZ)."""

    class Limit:
        def __enter__(self) -> None:
            self.old = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, self.old[1]))

        def __exit__(self, *exc: object) -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, self.old)

    return Limit()


def test_a_write_that_fails_appends_nothing(tmp_path):
    log = make_log(tmp_path, interval=64)
    log.append(build_message_set(keyed("a", 20)))
    segment = log.segments[0]
    size, index_size = segment.size, segment.index.path.stat().st_size
    entries = segment.index.entries()
    big = build_message_set(keyed("b", 20))
    assert index_size + 100 < size  # so the limit below stops the segment, not the index
    # the segment's write stops short: its index entries, written first, are taken back
    with fsize_limit(size + len(big) // 2), pytest.raises(StorageError, match="nothing of them"):
        log.append(big)
    # the index's write fails: the segment is not touched
    with fsize_limit(index_size + 3), pytest.raises(StorageError, match="offset index"):
        log.append(big)
    assert log.end_offset == 20 and segment.size == size == segment.path.stat().st_size
    assert segment.index.entries() == entries
    assert segment.index.path.stat().st_size == index_size
    assert log.append(big) == (20, 40)
    assert stored(log)[20:] == [(20 + i, k, v) for i, (k, v) in enumerate(keyed("b", 20))]
    assert segment.index.entries() == rebuilt_entries(segment, tmp_path, interval=64)


def test_flush_by_message_count_asks_the_flusher(tmp_path):
    wanted = []
    log = LogicalLog(
        tmp_path / "t-0",
        "t",
        0,
        LogConfig(flush_interval_messages=5),
        FakeClock(),
        request_flush=wanted.append,
    )
    log.append(build_message_set(keyed("m", 4)))
    assert wanted == []
    log.append(build_message_set(keyed("m", 2), compression.GZIP))
    assert wanted == [log]
    log.flush()
    assert log.unflushed_messages == 0


# -- retention and the Offsets API --------------------------------------------------------


def test_retention_deletes_whole_segments_with_their_indexes(tmp_path):
    log = make_log(tmp_path, segment_bytes=300)
    for n in range(6):
        log.append(build_message_set(keyed(f"r{n}", 2, 100)))
    first = log.segments[0]
    region = log.read(0, 10**6)
    deleted = log.delete_segments_while(lambda s: s.base_offset < 4)
    assert [s.base_offset for s in deleted] == [0, 2]
    assert not first.path.exists() and not first.index.path.exists()
    assert records(region.read())[0][0] == 0  # an open region still reads the old file
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    assert log.start_offset == 4 and records(log.read(4, 10**6).read())[0][0] == 4
    end = log.end_offset
    log.delete_segments_while(lambda s: True)  # everything: offsets go on at the end
    assert [(s.base_offset, s.size) for s in log.segments] == [(end, 0)]
    assert log.offsets_before(EARLIEST_TIME, 5) == [end]
    assert log.append(build_message_set(keyed("next", 2))) == (end, end + 2)
    assert sorted(p.name for p in log.directory.iterdir()) == [
        f"{end:020d}.index",
        f"{end:020d}.log",
    ]


def test_offsets_before_answers_at_segment_granularity(tmp_path):
    clock = FakeClock(now=10 * HOUR)
    log = make_log(tmp_path, clock=clock, segment_bytes=200)
    assert log.offsets_before(LATEST_TIME, 10) == [0]
    assert log.offsets_before(EARLIEST_TIME, 10) == [0]
    for _ in range(3):  # three segments of 2 messages, an hour apart
        clock.advance(HOUR)
        log.append(build_message_set(keyed("z", 2, 50)))
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert log.offsets_before(LATEST_TIME, 1) == [6]
    assert log.offsets_before(LATEST_TIME, 10) == [6, 4, 2, 0]
    assert log.offsets_before(EARLIEST_TIME, 10) == [0]
    assert log.offsets_before(12 * HOUR, 10) == [2, 0]
    assert log.offsets_before(12 * HOUR + 1, 1) == [2]
    assert log.offsets_before(11 * HOUR - 1, 10) == []


# -- opening, recovery and the index ------------------------------------------------------

PAYLOADS = keyed("event", 40, 30)


def written_log(tmp_path: Path, segment_bytes: int = 10**6) -> tuple[list[int], Path]:
    """A log of 40 keyed messages in plain sets of 4, flushed, then a crash (not closed):
    the end of each set in bytes, and the last segment's path."""
    log = make_log(tmp_path, segment_bytes=segment_bytes)
    for i in range(0, len(PAYLOADS), 4):
        log.append(build_message_set(PAYLOADS[i : i + 4]))
    log.flush()
    ends = []
    for offset, position, size in entry_headers(log.segments[-1].path.read_bytes()):
        if offset % 4 == 3:
            ends.append(position + size)
    return ends, log.segments[-1].path


ENTRY = 12 + 14 + len(PAYLOADS[-1][0]) + len(PAYLOADS[-1][1])  # the last message's entry


def check_recovered(tmp_path: Path, good_end: int, cut: bool = True) -> LogicalLog:
    log = make_log(tmp_path, recover=True)
    assert log.end_offset == good_end
    assert stored(log) == [(i, k, v) for i, (k, v) in enumerate(PAYLOADS[:good_end])]
    assert (log.recovery is not None and log.recovery.truncated) == cut
    for segment in log.segments:
        assert segment.index.entries() == rebuilt_entries(segment, tmp_path)
    assert log.append(build_message_set([(b"after", b"crash")])) == (good_end, good_end + 1)
    assert stored(log)[-1] == (good_end, b"after", b"crash")
    return log


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x01]))


def test_tail_cut_in_the_middle_of_an_entry(tmp_path):
    ends, path = written_log(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(ends[-1] - 7)
    log = check_recovered(tmp_path, 39)  # per entry: the last set's first 3 stay
    assert log.recovery.truncated_bytes == ENTRY - 7
    assert "partial entry of 61 bytes at byte" in log.recovery.reason


def test_garbage_appended_after_the_last_entry(tmp_path):
    _, path = written_log(tmp_path)
    with open(path, "ab") as f:
        f.write(b"nonsense block ADDED" * 10)
    check_recovered(tmp_path, 40)


def test_flipped_byte_inside_the_last_payload(tmp_path):
    ends, path = written_log(tmp_path)
    flip_byte(path, ends[-1] - 3)
    log = check_recovered(tmp_path, 39)
    assert "CRC mismatch" in log.recovery.reason


def test_a_last_segment_not_framed_by_its_entries_is_recovered_even_unchecked(tmp_path, caplog):
    """Opened with nothing to check (no unclean stop, no file changed since the marker), the
    end of the last segment is read from its entry headers: a tail they do not frame is cut
    as recovery cuts it, never served."""
    ends, path = written_log(tmp_path)
    with open(path, "ab") as f:
        f.write(build_message_set([(b"k", b"v" * 50)], base_offset=40)[:-5])
    with caplog.at_level("WARNING"):
        log = make_log(tmp_path)
    assert log.end_offset == 40 and log.recovery.truncated and path.stat().st_size == ends[-1]
    assert any("do not frame" in r.getMessage() for r in caplog.records)
    assert stored(log) == [(i, k, v) for i, (k, v) in enumerate(PAYLOADS)]


def test_zero_filled_tail(tmp_path):
    _, path = written_log(tmp_path)
    with open(path, "ab") as f:
        f.write(b"\x00" * 4096)  # what a filesystem shows after a crash mid-extension
    check_recovered(tmp_path, 40)


def test_compressed_payload_that_does_not_decode(tmp_path):
    _, path = written_log(tmp_path)
    junk = b"\x1f\x8b not really gzip"
    body = struct.pack(">bBi", 0, 1, -1) + struct.pack(">i", len(junk)) + junk
    wrapper = struct.pack(">qiI", 40, 4 + len(body), zlib.crc32(body)) + body  # CRC is right
    with open(path, "ab") as f:
        f.write(wrapper)
    log = check_recovered(tmp_path, 40)
    assert "does not decode" in log.recovery.reason


def test_damage_in_a_compressed_set_cuts_the_whole_wrapper(tmp_path):
    _, path = written_log(tmp_path)
    with open(path, "ab") as f:
        f.write(build_message_set([(b"k1", b"inner-1"), (b"k2", b"inner-2")], 2, 40))
        f.write(build_message_set([(b"k3", b"inner-3")], 1, 42)[:-2])  # torn
    log = make_log(tmp_path, recover=True)
    assert log.end_offset == 42
    assert stored(log)[-2:] == [(40, b"k1", b"inner-1"), (41, b"k2", b"inner-2")]
    assert validate(log.read(0, 10**6).read(), stored=True).error is None


def test_offsets_that_do_not_increase_are_damage(tmp_path):
    """An entry intact by its CRC but whose offset does not follow: not this log's."""
    _, path = written_log(tmp_path)
    with open(path, "ab") as f:
        f.write(build_message_set([(b"k", b"again")], base_offset=12))
    log = check_recovered(tmp_path, 40)
    assert "does not follow offset 39" in log.recovery.reason


def test_every_segment_is_checked_after_a_crash_and_a_cut_sets_the_later_ones_aside(tmp_path):
    written_log(tmp_path, segment_bytes=300)
    log = make_log(tmp_path)
    segments = log.segments
    assert len(segments) > 3
    second = segments[1]
    later = segments[2:]
    later_bytes = [s.path.read_bytes() for s in later]
    log.close()
    flip_byte(second.path, 12 + 14 + 3)  # inside its first message's key
    log = check_recovered(tmp_path, second.base_offset)
    cut = log.recovery
    assert cut.kept_in == second.path.with_name(
        f"{second.path.name}.truncated-{second.base_offset}"
    )
    assert cut.set_aside == tuple(
        s.path.with_name(f"{s.path.name}.truncated-{s.base_offset}") for s in later
    )
    assert [p.read_bytes() for p in cut.set_aside] == later_bytes  # kept, never served
    assert not any(s.index.path.exists() for s in later[1:])  # their indexes are gone


def test_after_a_clean_shutdown_only_the_files_changed_while_down_are_checked(tmp_path):
    written_log(tmp_path, segment_bytes=300)
    log = make_log(tmp_path, recover=True)
    segments, indexes = log.segments, index_files(log)
    log.close()
    marker_ns = _marker_after(log)
    log = make_log(tmp_path, modified_after_ns=marker_ns)  # untouched: nothing to check
    assert log.recovery is None and index_files(log) == indexes
    log.close()
    marker_ns = _marker_after(log)
    flip_byte(segments[2].path, ENTRY + 12 + 14 + 3)  # its second message
    os.utime(segments[2].path, ns=(marker_ns + 1, marker_ns + 1))  # changed after the marker
    log = make_log(tmp_path, modified_after_ns=marker_ns)
    assert log.end_offset == segments[2].base_offset + 1 and log.recovery.truncated
    assert stored(log) == [(i, k, v) for i, (k, v) in enumerate(PAYLOADS[: log.end_offset])]
    for segment in log.segments:
        assert segment.index.entries() == rebuilt_entries(segment, tmp_path)


def _marker_after(log: LogicalLog) -> int:
    """The clean-shutdown marker's time: after every file of the log was last written (a
    second later, past any coarse file clock)."""
    return max(p.stat().st_mtime_ns for p in log.directory.iterdir()) + 10**9


def test_recovery_rebuilds_the_index_equal_to_the_one_built_while_appending(tmp_path):
    log = make_log(tmp_path, segment_bytes=3000)
    sent = mixed_appends(log, 80)
    built = index_files(log)
    assert sum(map(bool, built.values())) > 3
    log.close()
    files = [p for p in sorted(tmp_path.joinpath("topic-0").glob("*.index")) if built[p.name]]
    # after an unclean stop every index is rebuilt from its segment
    for path in files:
        path.write_bytes(b"")
    log = make_log(tmp_path, recover=True)
    assert index_files(log) == built
    log.close()
    # missing, torn, entries out of order, or pointing past the segment: rebuilt at open
    files[0].unlink()
    files[1].write_bytes(built[files[1].name][:-3])  # a torn last entry
    files[2].write_bytes(built[files[2].name][8:16] + built[files[2].name][:8])
    files[3].write_bytes(built[files[3].name] + struct.pack(">ii", 10**6, 10**6))
    log = make_log(tmp_path)
    assert index_files(log) == built
    assert [m[1:] for m in stored(log)] == sent
    for target in range(0, len(sent), 7):
        got = records(log.read(target, 10**6).read())
        assert target in [o for o, _, _ in got]
    # an index changed while the broker was down after a clean shutdown is rebuilt too
    log.close()
    marker_ns = _marker_after(log)
    files[1].write_bytes(built[files[1].name][:-8])  # a valid index, but not this segment's
    os.utime(files[1], ns=(marker_ns + 1, marker_ns + 1))
    log = make_log(tmp_path, modified_after_ns=marker_ns)
    assert index_files(log) == built


def test_a_reopened_log_continues_at_the_end(tmp_path):
    log = make_log(tmp_path, segment_bytes=500)
    sent = mixed_appends(log, 10)
    end = log.end_offset
    log.close()
    again = make_log(tmp_path, segment_bytes=500)
    assert again.end_offset == end and again.recovery is None
    assert again.append(build_message_set(keyed("s", 2)))[0] == end
    assert [m[1:] for m in stored(again)] == sent + keyed("s", 2)


def test_what_recovery_cuts_is_moved_aside_and_never_read_as_a_segment(tmp_path, caplog):
    ends, path = written_log(tmp_path)
    original = path.read_bytes()
    flip_byte(path, ends[2] + 12 + 14 + 2)  # inside the key of the 4th set's first message
    damaged = path.read_bytes()
    with caplog.at_level("WARNING"):
        log = check_recovered(tmp_path, 12)
    aside = path.with_name(f"{path.name}.truncated-12")  # named by the first message cut
    assert log.recovery.kept_in == aside
    assert aside.read_bytes() == damaged[ends[2] :]
    assert log.recovery.truncated_bytes == len(original) - ends[2]
    assert log.recovery.truncated_entries == 28
    (line,) = [r.getMessage() for r in caplog.records if "recovery after" in r.getMessage()]
    assert f"cut {len(original) - ends[2]} bytes (28 messages by their size fields)" in line
    assert "at offset 12: " in line and f"kept in {aside}" in line
    log.close()
    # another crash: the aside file is not a segment, nothing more is cut, and it stays
    again = make_log(tmp_path, recover=True)
    assert [s.path.name for s in again.segments] == [path.name]
    assert again.end_offset == 13 and not again.recovery.truncated
    assert aside.read_bytes() == damaged[ends[2] :]


def test_a_second_cut_at_the_same_offset_gets_its_own_file(tmp_path):
    ends, path = written_log(tmp_path)
    first_aside = path.with_name(f"{path.name}.truncated-39")
    first_aside.write_bytes(b"an earlier cut")  # e.g. a crash between copy and truncate
    with open(path, "r+b") as f:
        f.truncate(ends[-1] - 1)
    log = check_recovered(tmp_path, 39)
    assert log.recovery.kept_in == first_aside.with_name(first_aside.name + ".1")
    assert log.recovery.kept_in.stat().st_size == ENTRY - 1
    assert first_aside.read_bytes() == b"an earlier cut"


def log_files(log: LogicalLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())}


@pytest.mark.parametrize("segment_bytes", [10**6, 3000])
def test_append_many_makes_the_files_one_append_per_set_makes(
    tmp_path: Path, segment_bytes: int
) -> None:
    """The 0.8 listener's unanswered produces (append_many: one write per segment) leave the
    segments, their indexes and the offsets that appends of one set each leave, across rolls
    and with wrappers among plain sets."""
    rng = random.Random(44)
    sets = []
    for i in range(40):
        batch = [(rng.choice([None, b"k%d" % i]), rng.randbytes(rng.randrange(0, 120)))]
        batch *= rng.randrange(1, 6)
        codec = rng.choice([compression.NONE] * 3 + [compression.GZIP])
        data = build_message_set(batch)
        if codec != compression.NONE:
            data = entry(len(batch) - 1, compression.compress(codec, data), None, codec)
        sets.append(data)
    one_each = make_log(tmp_path, name="one-each-0", segment_bytes=segment_bytes)
    many = make_log(tmp_path, name="many-0", segment_bytes=segment_bytes)
    for data in sets:
        one_each.append(data)
    checked = [(data, validate(data)) for data in sets]
    messages, nbytes = many.append_many(checked[:25])
    more = many.append_many(checked[25:])
    assert (messages + more[0], nbytes + more[1]) == (
        one_each.end_offset,
        sum(len(data) for data in sets),
    )
    assert many.end_offset == one_each.end_offset
    assert len(many.segments) == len(one_each.segments) > (1 if segment_bytes < 10**6 else 0)
    assert log_files(many) == log_files(one_each)
    for offset in (0, 7, many.end_offset - 1):  # reads find what they found
        assert bytes(many.read(offset, 10**6).read()) == bytes(one_each.read(offset, 10**6).read())


def test_append_many_refuses_a_damaged_set_before_writing_any(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    good = build_message_set([(None, b"a")])
    cut = build_message_set([(None, b"bc")])[:-1]  # its only entry incomplete
    with pytest.raises(InvalidMessageError, match="incomplete"):
        log.append_many([(good, validate(good)), (cut, validate(cut))])
    assert log.end_offset == 0
    assert stored(log) == []
