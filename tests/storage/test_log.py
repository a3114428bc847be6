"""The log of one partition on real files: appends, the fetch rules, rolling, offsets_before."""

from __future__ import annotations

import pytest

from logbroker.protocol.errors import InvalidMessageError, OffsetOutOfRangeError
from logbroker.protocol.message_set import build_message_set, iter_messages, validate
from logbroker.protocol.requests import EARLIEST_TIME, LATEST_TIME
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
