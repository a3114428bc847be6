"""The pure parts of replication: the assignment, the ZooKeeper values, the epoch file, and
what a follower appends of a leader's answer."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from logbroker.coordination.replica_assignment import AssignmentError, assign
from logbroker.coordination.replication_state import (
    Assignment,
    ControllerInfo,
    PartitionState,
    StateFormatError,
    decode_election,
    encode_election,
)
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.replication import ReplicaSet
from logbroker.replication.epochs import UNDEFINED, EpochFileError, LeaderEpochs
from logbroker.replication.fetcher import ReplicaFetcher
from logbroker.storage.log import Log, LogConfig


def test_assignment_is_kafkas_round_robin_with_leaders_spread() -> None:
    assert assign([0, 1, 2], 6, 3, start=0, shift=0) == [
        [0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [1, 0, 2], [2, 1, 0],
    ]  # fmt: skip
    for seed in range(50):
        rng = random.Random(seed)
        brokers = rng.sample(range(20), rng.randint(1, 7))
        factor = rng.randint(1, len(brokers))
        partitions = rng.randint(1, 40)
        replicas = assign(brokers, partitions, factor, rng=rng)
        assert len(replicas) == partitions
        for r in replicas:
            assert len(r) == factor == len(set(r)) and set(r) <= set(brokers)
        leaders = Counter(r[0] for r in replicas)
        # every broker leads its share, give or take one
        assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1


def test_assignment_refuses_what_cannot_be_placed() -> None:
    with pytest.raises(AssignmentError, match="larger than the 2 live brokers"):
        assign([4, 7], 3, 3)
    with pytest.raises(AssignmentError, match="at least 1 partition"):
        assign([1], 0, 1)


def test_zookeeper_values_round_trip_and_say_what_is_wrong() -> None:
    a = Assignment("orders", 2, ((1, 2), (2, 0)))
    assert Assignment.decode("orders", a.encode()) == a
    assert a.encode() == b'{"version":1,"replication_factor":2,"partitions":{"0":[1,2],"1":[2,0]}}'
    with pytest.raises(StateFormatError, match="partition 1 has replicas \\[2, 2\\]"):
        Assignment.decode("orders", b'{"replication_factor":2,"partitions":{"0":[1,2],"1":[2,2]}}')
    with pytest.raises(StateFormatError, match="partitions are not 0 to 1"):
        Assignment.decode("orders", b'{"replication_factor":1,"partitions":{"0":[1],"2":[2]}}')
    s = PartitionState(leader=2, leader_epoch=5, isr=(2, 0), controller_epoch=3)
    back = PartitionState.decode(s.encode(), version=7)
    assert (back.leader, back.leader_epoch, back.isr, back.controller_epoch, back.version) == (
        2, 5, (2, 0), 3, 7,
    )  # fmt: skip
    with pytest.raises(StateFormatError, match="'leader' is not a broker id or -1"):
        PartitionState.decode(b'{"leader":-2,"leader_epoch":0,"isr":[],"controller_epoch":0}')
    with pytest.raises(StateFormatError, match="is not JSON"):
        PartitionState.decode(b"{leader")
    assert ControllerInfo.decode(ControllerInfo(4, 9).encode()) == ControllerInfo(4, 9)
    assert decode_election(encode_election([("a", 0), ("b", 3)])) == [("a", 0), ("b", 3)]


def test_epoch_file_finds_where_an_epoch_ends(tmp_path: Path) -> None:
    epochs = LeaderEpochs.create(tmp_path)
    assert LeaderEpochs.marks(tmp_path) and epochs.latest_epoch == UNDEFINED
    assert epochs.end_offset_for(0, 100) == (UNDEFINED, UNDEFINED)
    epochs.assign(0, 0)
    epochs.assign(3, 400)
    epochs.assign(3, 900)  # an epoch keeps its first start
    epochs.assign(5, 1000)
    again = LeaderEpochs(tmp_path)  # the file says the same
    assert again.entries == [(0, 0), (3, 400), (5, 1000)]
    assert again.end_offset_for(0, 2000) == (0, 400)
    assert again.end_offset_for(2, 2000) == (0, 400)  # epoch 2 never wrote: 0's end
    assert again.end_offset_for(4, 2000) == (3, 1000)
    assert again.end_offset_for(5, 2000) == (5, 2000)  # the latest: the log's end
    assert again.end_offset_for(9, 2000) == (5, 2000)
    again.truncate_after(700)
    assert again.entries == [(0, 0), (3, 400)]
    again.drop_above(1)
    assert LeaderEpochs(tmp_path).entries == [(0, 0)]
    with pytest.raises(EpochFileError, match="before epoch 0's start"):
        again.assign(1, -5)
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n1 10\n")
    with pytest.raises(EpochFileError, match="2 entries announced, 1 found"):
        LeaderEpochs(tmp_path)


def test_a_follower_appends_only_whole_messages(tmp_path: Path) -> None:
    """Bytes the leader counted are appended as they come; uncounted ones (-1) only up to
    their last whole message; a first message larger than the fetch is asked for whole."""
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(), lambda: 0)
    epochs = LeaderEpochs.create(log.directory)
    follower = SimpleNamespace(
        topic="t", partition=0, log=log, epochs=epochs, state=None, high_watermark=0, name="t-0"
    )
    fetcher = ReplicaFetcher(1, 0, lambda broker: None, max_bytes=1024, max_wait_ms=100)

    def answer(data: bytes, messages: int) -> ReplicaSet[memoryview]:
        return ReplicaSet("t", 0, 0, 60, 9999, ((0, 0),), len(data), memoryview(data), messages)

    data = build_message_set([b"a" * 50, b"b" * 50, b"c" * 50])  # 3 x 60 bytes
    fetcher._take(follower, answer(data[:120], 2), log.end_offset)
    assert log.end_offset == 120 and follower.high_watermark == 60
    fetcher._take(
        follower, answer(data[120:] + build_message_set([b"d" * 50])[:30], -1), log.end_offset
    )
    assert log.end_offset == 180  # the cut-off "d" waits for the next fetch
    big = build_message_set([b"e" * 5000])
    fetcher._take(follower, answer(big[:1024], -1), log.end_offset)
    assert log.end_offset == 180 and fetcher._fetch_size[("t", 0)] == len(big)
    assert bytes(log.read(0, 1000).read()) == data and epochs.entries == [(0, 0)]


def test_a_follower_appends_nothing_of_an_answer_whose_bytes_fail_their_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bytes damaged on the leader's disk (or on the way) are not copied: nothing of the
    answer is appended, it is said once and counted each time, and the same offset is
    fetched again; the good bytes are then appended as they come."""
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(), lambda: 0)
    epochs = LeaderEpochs.create(log.directory)
    follower = SimpleNamespace(
        topic="t", partition=0, log=log, epochs=epochs, state=None, high_watermark=0, name="t-0"
    )
    counted: list[str] = []
    fetcher = ReplicaFetcher(
        1, 0, lambda broker: None, max_bytes=1024, max_wait_ms=100, on_damaged=counted.append
    )
    good = build_message_set([b"a" * 50, b"b" * 50, b"c" * 50])
    damaged = bytearray(good)
    damaged[60 + 20] ^= 0x01  # a payload byte of the second message

    def answer(data: bytes) -> ReplicaSet[memoryview]:
        return ReplicaSet("t", 0, 0, 180, 180, ((0, 0),), len(data), memoryview(data), 3)

    with caplog.at_level("ERROR", logger="logbroker.replication.fetcher"):
        fetcher._take(follower, answer(bytes(damaged)), 0)
        fetcher._take(follower, answer(bytes(damaged)), 0)
    assert log.end_offset == 0 and follower.high_watermark == 0  # not even the first message
    assert counted == ["t", "t"]
    [said] = [r.getMessage() for r in caplog.records]
    assert "t-0: the bytes from leader 0 at offset 0 fail their check" in said
    assert "CRC" in said or "crc" in said
    fetcher._take(follower, answer(good), 0)
    assert log.end_offset == 180 and log.read(0, 1000).read() == good
