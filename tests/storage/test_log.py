"""The log of one partition on real files: appends, the fetch rules, rolling, offsets_before,
and the append marks that let a leader hand a follower whole messages, counted."""

from __future__ import annotations

import pytest

from logbroker.protocol import compression
from logbroker.protocol.errors import InvalidMessageError, OffsetOutOfRangeError
from logbroker.protocol.message_set import build_message_set, iter_messages, validate
from logbroker.protocol.requests import EARLIEST_TIME, LATEST_TIME
from logbroker.storage import append_marks
from logbroker.storage.log import Log, LogConfig

HOUR = 3600 * 1000


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def make_log(tmp_path, clock=None, **config) -> Log:
    return Log(tmp_path / "topic-0", "topic", 0, LogConfig(**config), clock or FakeClock())


def payloads_of(region) -> list[bytes]:
    return [m.payload for m in iter_messages(region.read(), region.offset)]


def test_offsets_are_byte_positions(tmp_path):
    log = make_log(tmp_path)
    first = build_message_set([b"a" * 10, b"b" * 20])  # 4+6+10 and 4+6+20 bytes
    assert log.append(first) == (0, 20 + 30)
    assert log.append(build_message_set([b"c"])) == (50, 61)
    assert log.end_offset == 61
    messages = list(iter_messages(log.read(0, 1000).read()))
    assert [(m.offset, m.next_offset) for m in messages] == [(0, 20), (20, 50), (50, 61)]
    assert payloads_of(log.read(20, 1000)) == [b"b" * 20, b"c"]


def test_fetch_rules(tmp_path):
    log = make_log(tmp_path)
    log.append(build_message_set([b"x" * 100] * 3))  # 3 x 110 bytes
    assert log.read(330, 1000).length == 0  # offset == end: empty, no error
    with pytest.raises(OffsetOutOfRangeError, match="331"):
        log.read(331, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    # min(max size, available), the cut-off last message included
    region = log.read(0, 150)
    assert region.length == 150
    assert payloads_of(region) == [b"x" * 100]


def test_empty_log_reads_and_offsets(tmp_path):
    log = make_log(tmp_path)
    assert log.read(0, 100).length == 0
    assert log.offsets_before(LATEST_TIME, 10) == [0]
    assert log.offsets_before(EARLIEST_TIME, 10) == [0]


def test_damaged_or_truncated_first_entry_appends_nothing(tmp_path):
    log = make_log(tmp_path)
    good = build_message_set([b"hello", b"world"])
    damaged = bytearray(good)
    damaged[-1] ^= 0xFF
    with pytest.raises(InvalidMessageError, match="CRC"):
        log.append(bytes(damaged))
    with pytest.raises(InvalidMessageError, match="incomplete"):
        log.append(good[:8])
    assert log.end_offset == 0
    # a partial trailing entry is dropped, the whole ones appended
    assert log.append(good + good[:7]) == (0, len(good))


def test_rolls_at_segment_size_and_reads_across_segments(tmp_path):
    log = make_log(tmp_path, segment_bytes=1000)
    entry_set = build_message_set([b"y" * 190] * 2)  # 400 bytes
    for _ in range(5):
        log.append(entry_set)
    assert [s.base_offset for s in log.segments] == [0, 800, 1600]
    assert [p.name for p in sorted((tmp_path / "topic-0").iterdir())] == [
        "00000000000000000000.kafka",
        "00000000000000000800.kafka",
        "00000000000000001600.kafka",
    ]
    # a read stays inside one segment; the next read starts where it ended
    first = log.read(0, 10_000)
    assert first.length == 800
    assert log.read(first.offset + first.length, 10_000).offset == 800
    assert payloads_of(log.read(1000, 10_000)) == [b"y" * 190] * 3


def test_rolls_by_age(tmp_path):
    clock = FakeClock()
    log = make_log(tmp_path, clock=clock, roll_ms=2 * HOUR)
    log.append(build_message_set([b"a"]))
    clock.advance(HOUR)
    log.append(build_message_set([b"b"]))
    assert len(log.segments) == 1
    clock.advance(HOUR)
    log.append(build_message_set([b"c"]))
    assert [s.base_offset for s in log.segments] == [0, 22]


def test_offsets_before_follows_0_7(tmp_path):
    clock = FakeClock(now=10 * HOUR)
    log = make_log(tmp_path, clock=clock, segment_bytes=50)
    ends = []
    for _ in range(3):  # three segments of one 48-byte set each, an hour apart
        clock.advance(HOUR)
        ends.append(log.append(build_message_set([b"z" * 14, b"z" * 14]))[1])
    assert [s.base_offset for s in log.segments] == [0, 48, 96]
    assert [s.last_modified_ms for s in log.segments] == [11 * HOUR, 12 * HOUR, 13 * HOUR]
    assert log.offsets_before(LATEST_TIME, 1) == [144]
    assert log.offsets_before(LATEST_TIME, 10) == [144, 96, 48, 0]
    assert log.offsets_before(EARLIEST_TIME, 10) == [0]
    assert log.offsets_before(12 * HOUR, 10) == [48, 0]  # last segment modified at or before
    assert log.offsets_before(12 * HOUR + 1, 2) == [48, 0]
    assert log.offsets_before(11 * HOUR - 1, 10) == []  # older than everything
    assert log.offsets_before(LATEST_TIME, 0) == []


def test_reader_keeps_a_deleted_segment_readable(tmp_path):
    log = make_log(tmp_path, segment_bytes=100)
    for _ in range(3):
        log.append(build_message_set([b"q" * 80]))
    region = log.read(0, 1000)
    deleted = log.delete_segments_while(lambda s: s.base_offset == 0)
    assert [s.base_offset for s in deleted] == [0]
    assert not (tmp_path / "topic-0" / "00000000000000000000.kafka").exists()
    assert payloads_of(region) == [b"q" * 80]  # the open region still reads the old file
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)


def test_deleting_everything_keeps_offsets_going(tmp_path):
    log = make_log(tmp_path, segment_bytes=100)
    for _ in range(3):
        log.append(build_message_set([b"q" * 80]))
    end = log.end_offset
    log.delete_segments_while(lambda s: True)
    assert [(s.base_offset, s.size) for s in log.segments] == [(end, 0)]
    assert log.start_offset == log.end_offset == end
    assert log.offsets_before(EARLIEST_TIME, 5) == [end]
    assert log.append(build_message_set([b"next"])) == (end, end + 14)
    # an empty last segment is never deleted: deleting again keeps the same end
    log.delete_segments_while(lambda s: True)
    assert log.end_offset == end + 14 and log.segments[-1].size == 0


def test_flush_by_message_count_asks_the_flusher(tmp_path):
    wanted = []
    log = Log(
        tmp_path / "t-0",
        "t",
        0,
        LogConfig(flush_interval_messages=5),
        FakeClock(),
        request_flush=wanted.append,
    )
    log.append(build_message_set([b"m"] * 4))
    assert wanted == []
    log.append(build_message_set([b"m"] * 2))
    assert wanted == [log]
    log.flush()
    assert log.unflushed_messages == 0


def test_reopened_log_continues_at_the_end(tmp_path):
    log = make_log(tmp_path, segment_bytes=100)
    for _ in range(3):
        log.append(build_message_set([b"r" * 50]))
    end = log.end_offset
    log.close()
    again = make_log(tmp_path, segment_bytes=100)
    assert again.end_offset == end
    assert again.append(build_message_set([b"s"]))[0] == end


def test_append_many_writes_in_order_and_rolls_between_sets(tmp_path):
    log = make_log(tmp_path, segment_bytes=1000)
    sets = [build_message_set([f"m{i:04d}".encode() * 10]) for i in range(2000)]  # 60 bytes each
    log.append_many([(s, validate(s)) for s in sets])  # more sets than IOV_MAX
    assert log.end_offset == 2000 * 60
    starts = [s.base_offset for s in log.segments]
    assert starts == list(range(0, 2000 * 60, 960))  # 16 sets per segment, never split
    assert all(s.size <= 1000 for s in log.segments)
    payloads = [
        m.payload
        for seg in log.segments
        for m in iter_messages(seg.region(0, seg.size).read(), seg.base_offset)
    ]
    assert payloads == [f"m{i:04d}".encode() * 10 for i in range(2000)]


def test_append_many_drops_partial_tails_like_append(tmp_path):
    log = make_log(tmp_path)
    whole = build_message_set([b"whole"])
    torn = whole + build_message_set([b"torn"])[:-1]
    log.append_many([(torn, validate(torn)), (whole, validate(whole))])
    assert [m.payload for m in iter_messages(log.read(0, 100).read())] == [b"whole", b"whole"]


def test_read_whole_ends_where_an_append_ended_and_counts_its_messages(tmp_path):
    log = make_log(tmp_path)
    log.append(build_message_set([b"a" * 100] * 3))  # 0..330, 3 messages
    log.append(build_message_set([b"b" * 100] * 2, compression.GZIP))  # one wrapper, 2 inside
    gzip_end = log.end_offset
    sets = [build_message_set([b"c" * 100]), build_message_set([b"d" * 100] * 2)]
    log.append_many([(m, validate(m)) for m in sets])  # one write: one mark at its end
    end = log.end_offset
    assert log.read_whole(0, 10_000)[1] == 3 + 2 + 3
    region, messages = log.read_whole(0, 350)  # `read` would cut the next set's bytes
    assert (region.offset, region.length, messages) == (0, 330, 3)
    assert payloads_of(region) == [b"a" * 100] * 3
    region, messages = log.read_whole(330, end - 330 - 1)  # the last append does not fit
    assert (region.length, messages) == (gzip_end - 330, 2)
    assert log.read_whole(end, 1000)[1:] == (0,) and log.read_whole(end, 1000)[0].length == 0
    # not an append's end, or no append's end within max_size: read's region, not counted
    region, messages = log.read_whole(110, 1000)
    assert (region.length, messages) == (log.read(110, 1000).length, -1)
    region, messages = log.read_whole(0, 200)
    assert (region.length, messages) == (200, -1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read_whole(end + 1, 100)


def test_read_whole_stays_in_one_segment_and_forgets_what_truncation_cut(tmp_path):
    log = make_log(tmp_path, segment_bytes=500)
    log.append(build_message_set([b"a" * 100] * 3))  # 330 bytes
    log.append(build_message_set([b"b" * 100] * 2))  # 220 more: a new segment at 330
    assert [s.base_offset for s in log.segments] == [0, 330]
    region, messages = log.read_whole(0, 10_000)
    assert (region.length, messages) == (330, 3)  # the segment's end is an append's end
    assert log.read_whole(330, 10_000)[1] == 2
    log.truncate_to(330)  # at an append's end: the marks before it stay
    assert log.read_whole(0, 10_000)[1] == 3
    log.append(build_message_set([b"c" * 100]))
    assert log.read_whole(330, 10_000)[1] == 1
    log.truncate_to(110)  # between two marks (a message boundary): counting starts there
    assert log.read_whole(0, 10_000)[1] == -1
    log.append(build_message_set([b"d" * 100] * 4))
    region, messages = log.read_whole(110, 10_000)
    assert messages == 4 and payloads_of(region) == [b"d" * 100] * 4


def test_a_reopened_log_counts_from_its_end_and_marks_stay_bounded(tmp_path, monkeypatch):
    log = make_log(tmp_path)
    log.append(build_message_set([b"old"] * 5))
    end = log.end_offset
    log.close()
    log = make_log(tmp_path)  # the marks are in memory only: the end at open is the first
    log.append(build_message_set([b"new"] * 2))
    assert log.read_whole(0, 10_000)[1] == -1
    assert log.read_whole(end, 10_000)[1] == 2
    monkeypatch.setattr(append_marks, "MARKS", 4)
    starts = []
    for _ in range(20):
        starts.append(log.end_offset)
        log.append(build_message_set([b"m"]))
    assert log.read_whole(starts[0], 10_000)[1] == -1  # forgotten: too many appends since
    assert log.read_whole(starts[-4], 10_000)[1] == 4


def test_a_read_of_the_last_small_append_is_what_the_file_holds(tmp_path):
    """The last small append is answered from memory (segment.last_append, no pread):
    whatever region is read, after a truncation and an append of the same length at the
    same place too, the bytes are the file's."""
    log = make_log(tmp_path)
    first, second = build_message_set([b"a" * 40]), build_message_set([b"b" * 40])
    log.append(first)
    start, _ = log.append(second)
    segment = log.segments[-1]
    assert segment.last_append == (start, second)

    def from_file(offset: int, length: int) -> bytes:
        with open(segment.path, "rb") as f:
            f.seek(offset - segment.base_offset)
            return f.read(length)

    for offset, length in [(start, len(second)), (start, 10), (start + 4, 20), (0, 100)]:
        region = log.read(offset, length)
        assert region.read() == from_file(offset, region.length)
    log.truncate_to(start)
    assert segment.last_append is None
    third = build_message_set([b"c" * 40])  # the same length, at the same position
    log.append(third)
    assert log.read(start, 1000).read() == third == from_file(start, len(third))
    big = build_message_set([b"d" * 5000])  # over LAST_APPEND_MAX: not kept, read from disk
    at, _ = log.append(big)
    assert segment.last_append is None
    assert log.read(at, 10_000).read() == big
