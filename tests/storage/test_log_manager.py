"""The log manager: topics and partitions, retention by age and size, the flusher."""

from __future__ import annotations

import os
import time

import pytest

from logbroker.config import BrokerConfig, load_config, read_properties
from logbroker.protocol.errors import InvalidTopicError, WrongPartitionError
from logbroker.protocol.message_set import build_message_set
from logbroker.storage.log_manager import LogManager

HOUR = 3600 * 1000


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def manager(tmp_path, clock=None, **settings) -> LogManager:
    return LogManager(BrokerConfig(log_dir=str(tmp_path), **settings), clock=clock or FakeClock())


def test_partition_counts_and_created_directories(tmp_path):
    created = []
    lm = LogManager(
        BrokerConfig(
            log_dir=str(tmp_path), num_partitions=2, topic_partition_count_map={"wide": 5}
        ),
        on_new_topic=lambda topic, count: created.append((topic, count)),
    )
    lm.get_or_create_log("narrow", 1)
    lm.get_or_create_log("wide", 4)
    lm.get_or_create_log("wide", 0)
    assert created == [("narrow", 2), ("wide", 5)]  # once per new topic
    assert sorted(p.name for p in tmp_path.iterdir()) == ["narrow-1", "wide-0", "wide-4"]
    with pytest.raises(WrongPartitionError, match="partition 2 of topic 'narrow'"):
        lm.get_or_create_log("narrow", 2)
    with pytest.raises(WrongPartitionError):
        lm.get_log("wide", -1)
    assert lm.get_log("wide", 3) is None  # valid but not created: fetches never create logs
    assert all(0 <= lm.choose_partition("wide") < 5 for _ in range(50))


@pytest.mark.parametrize(
    "topic",
    [
        *("", ".", "..", "../escape", "a/b", "a\\b", "tab\there", "nul\x00", "x" * 256, "del\x7f"),
        *("emoji😀", "café", "東京", "page views", "a:b", "\ufeffbom"),
    ],
)
def test_bad_topic_names_never_touch_the_disk(tmp_path, topic):
    lm = manager(tmp_path / "logs")
    with pytest.raises(InvalidTopicError):
        lm.get_or_create_log(topic, 0)
    assert os.listdir(tmp_path) == ["logs"]
    assert os.listdir(tmp_path / "logs") == []


def test_longest_topic_name_and_dashes_are_fine(tmp_path):
    lm = manager(tmp_path, topic_partition_count_map={"t" * 249: 100000})
    lm.get_or_create_log("a-b-c", 0).append(build_message_set([b"1"]))
    lm.get_or_create_log("t" * 249, 99999)  # the longest directory name that fits: 255 bytes
    with pytest.raises(InvalidTopicError, match="250 characters, over the limit of 249"):
        lm.get_or_create_log("t" * 250, 0)
    lm.shutdown()
    again = manager(tmp_path, topic_partition_count_map={"t" * 249: 100000})
    assert again.topics() == sorted(["a-b-c", "t" * 249])
    assert again.get_log("a-b-c", 0).end_offset == 11


def test_a_directory_that_is_not_a_legal_topic_is_skipped_by_name(tmp_path, caplog):
    good = manager(tmp_path)
    good.get_or_create_log("page-views", 0).append(build_message_set([b"kept"]))
    good.shutdown()
    for name in ("emoji😀-0", "café-1", "no-partition-number", "-3"):  # an older version's
        (tmp_path / name).mkdir()
        (tmp_path / name / "00000000000000000000.kafka").write_bytes(b"old data")
    with caplog.at_level("WARNING", logger="logbroker.storage.log_manager"):
        again = manager(tmp_path)
    assert again.topics() == ["page-views"]
    assert again.get_log("page-views", 0).end_offset == 14  # 4 + 6 + len("kept")
    assert sorted(again.skipped) == sorted(["emoji😀-0", "café-1", "no-partition-number", "-3"])
    assert "illegal character '😀'" in again.skipped["emoji😀-0"]
    assert "topic name is empty" in again.skipped["-3"]
    warned = [r.getMessage() for r in caplog.records]
    for name in again.skipped:
        assert any(name in line and "not served" in line for line in warned), name
    # left as it was: skipped, never deleted nor changed
    assert (tmp_path / "emoji😀-0" / "00000000000000000000.kafka").read_bytes() == b"old data"


def test_retention_by_age_deletes_whole_old_segments(tmp_path):
    clock = FakeClock()
    start = clock.now
    lm = manager(tmp_path, clock=clock, log_file_size=100, log_retention_hours=24)
    log = lm.get_or_create_log("t", 0)
    for hour in range(4):  # four one-entry segments, written at hours 0, 1, 2, 3
        clock.now = start + hour * HOUR
        log.append(build_message_set([b"o" * 80]))
    clock.now = start + 25 * HOUR + HOUR // 2  # hours 0 and 1 are now older than 24 h
    deleted = lm.cleanup()
    assert [s.base_offset for s in deleted] == [0, 90]
    assert log.start_offset == 180 and log.end_offset == 360


def test_retention_emptying_a_log_never_restarts_offsets(tmp_path):
    clock = FakeClock()
    lm = manager(tmp_path, clock=clock, log_retention_hours=1)
    log = lm.get_or_create_log("t", 0)
    log.append(build_message_set([b"gone"] * 3))
    clock.now += 2 * HOUR
    lm.cleanup()
    assert log.start_offset == log.end_offset == 42
    assert [p.name for p in (tmp_path / "t-0").iterdir()] == ["00000000000000000042.kafka"]
    lm.shutdown()
    again = manager(tmp_path, clock=clock)
    assert again.get_log("t", 0).append(build_message_set([b"x"]))[0] == 42


def test_retention_by_size_keeps_at_most_the_limit(tmp_path):
    lm = manager(tmp_path, log_file_size=100, log_retention_size=250)
    log = lm.get_or_create_log("t", 0)
    for _ in range(5):
        log.append(build_message_set([b"s" * 80]))  # 90-byte segments
    lm.cleanup()
    # 0.7's rule: drop whole front segments while what remains stays at least the limit
    assert 250 <= log.size_in_bytes < 250 + 90
    assert [s.base_offset for s in log.segments] == [180, 270, 360]


def test_flusher_thread_flushes_on_message_count(tmp_path):
    lm = LogManager(
        BrokerConfig(
            log_dir=str(tmp_path),
            log_flush_interval=10,
            log_default_flush_scheduler_interval_ms=60_000,
        )
    )
    lm.start_background()
    try:
        log = lm.get_or_create_log("t", 0)
        log.append(build_message_set([b"f"] * 12))
        deadline = time.monotonic() + 10
        while log.unflushed_messages and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.unflushed_messages == 0
    finally:
        lm.shutdown()


def test_flush_due_by_time(tmp_path):
    clock = FakeClock()
    lm = manager(tmp_path, clock=clock, log_default_flush_interval_ms=1000)
    log = lm.get_or_create_log("t", 0)
    log.append(build_message_set([b"late"]))
    assert lm.flush_due() == []
    clock.now += 1000
    assert lm.flush_due() == [log]
    assert log.unflushed_messages == 0


def test_properties_file_and_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "brokerid=3\n"
        "port: 9093\n"
        "log.dir=/var/tmp/x\n"
        "zk.connect=127.0.0.1:2181/live\n"
        "topic.partition.count.map=a:3, b:4\n"
        "enable.zookeeper=false\n"
        "num.partitions=\\\n   7\n"
        "some.future.key=1\n"
    )
    config = load_config(path, {"port": "9999"})
    assert (config.brokerid, config.port, config.log_dir) == (3, 9999, "/var/tmp/x")
    assert config.zk_connect == "127.0.0.1:2181/live"
    assert config.partitions_for("a") == 3 and config.partitions_for("zzz") == 7
    assert config.enable_zookeeper is False
    assert config.extra == {"some.future.key": "1"}
    assert config.with_overrides({"brokerid": "4"}).brokerid == 4
    with pytest.raises(ValueError, match=r"num\.partitions"):
        load_config(None, {"num.partitions": "many"})
    assert read_properties(["a = b = c"]) == {"a": "b = c"}


def test_create_topic_makes_partitions_that_stick_and_is_bounded(tmp_path):
    created = []
    lm = LogManager(
        BrokerConfig(log_dir=str(tmp_path), num_partitions=1),
        on_new_topic=lambda topic, count: created.append((topic, count)),
    )
    assert lm.create_topic("wide", 6) == 6
    assert created == [("wide", 6)]
    lm.get_or_create_log("wide", 5)  # beyond num.partitions, but the topic has 6 now
    with pytest.raises(WrongPartitionError, match="1 to 1024 partitions per broker"):
        lm.create_topic("huge", 2**31 - 1)
    assert not (tmp_path / "huge-0").exists()
    lm.shutdown()
    assert manager(tmp_path).partition_count("wide") == 6  # the directories remember it
