"""Followers copy their leader's bytes; consumers see what the ISR has; acks=-1 means it.

Three real brokers and a real ZooKeeper on this machine (faults between separate hosts,
network cuts included, are the network-namespace suite's; docs/chaos.md). What a user relies on:

- an acks=-1 produce is answered only once every in-sync replica holds it, and every replica
  then holds the same bytes at the same offsets;
- a consumer never sees a message that is not on the whole ISR;
- a follower that stops leaves the ISR after replica.lag.time.max.ms, acks=-1 is then refused
  when the ISR is under min.insync.replicas, and it rejoins once it has caught up;
- a leader that took messages it could not replicate and died comes back as a follower and
  truncates them (leader epochs), so no two replicas disagree about an offset;
- a follower far behind copies its leader in fetches smaller than the backlog, and than some
  single messages, and ends up byte-identical.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from logbroker.client.cluster import Cluster, ReplicatedPartition
from logbroker.client.connection import BrokerConnection
from logbroker.protocol.errors import (
    LogbrokerError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    error_for_code,
)
from logbroker.protocol.message_set import build_message_set, iter_messages
from logbroker.protocol.requests import AckedProduceRequest, FetchRequest, ProduceRequest
from logbroker.protocol.responses import decode_acked_produce_response, decode_fetch_response
from logbroker.replication.epochs import LeaderEpochs
from logbroker.stack.broker import BrokerProcess

SESSION_MS = 2000
LAG_MS = 1500


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float = 30.0,
    explain: Callable[[], str] = str,
) -> None:
    """Wait for `check`; a timeout says `what`, and `explain()` if given."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{explain()}"
        time.sleep(0.05)


@pytest.fixture
def three(broker_factory, zk_chroot) -> dict[int, BrokerProcess]:
    return {
        i: broker_factory(
            broker_id=i,
            zk=zk_chroot,
            zk_sessiontimeout_ms=SESSION_MS,
            replica_lag_time_max_ms=LAG_MS,
            min_insync_replicas=2,
            replica_fetch_wait_max_ms=200,
        )
        for i in range(3)
    }


def produce(
    broker: BrokerProcess,
    topic: str,
    partition: int,
    payloads: list[bytes],
    all_in_sync: bool = True,
    timeout_ms: int = 10000,
) -> int:
    """An acked produce (acks=-1 by default): the end offset, or the error code raised."""
    with BrokerConnection(*broker.address, timeout=timeout_ms / 1000 + 10) as conn:
        body = conn.request(
            AckedProduceRequest(
                False,
                (ProduceRequest(topic, partition, build_message_set(payloads)),),
                all_in_sync,
                timeout_ms,
            )
        )
    [result] = decode_acked_produce_response(body)
    if result.error:
        raise error_for_code(result.error)
    return result.next_offset


def consume(broker: BrokerProcess, topic: str, partition: int) -> list[bytes]:
    """Every message a consumer can read from `broker` now (0.7's FETCH, from 0)."""
    out: list[bytes] = []
    offset = 0
    with BrokerConnection(*broker.address) as conn:
        while True:
            answer = decode_fetch_response(
                conn.request(FetchRequest(topic, partition, offset, 65536))
            )
            if answer.error:
                raise error_for_code(answer.error)
            messages = list(iter_messages(bytes(answer.messages), offset))
            if not messages:
                return out
            out += [m.payload for m in messages]
            offset = messages[-1].next_offset


def log_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    directory = Path(broker.log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.kafka")))


def story(brokers: dict[int, BrokerProcess], topic: str) -> str:
    """The brokers' log lines about `topic`, the controller and ZooKeeper sessions, in time
    order: what a failed check of the replicas says (whole logs: each broker's log_path)."""
    keys = (topic, "controller", "ZooKeeper", "fetching from leader")
    lines = []
    for i, broker in sorted(brokers.items()):
        for line in broker.log_since().splitlines():
            if any(k in line for k in keys):
                stamp, _, rest = line.partition(" ")
                lines.append(f"{stamp} [broker {i}] {rest}")
    return "\n".join(["broker logs:", *sorted(lines)])


def state(cluster: Cluster, topic: str, partition: int = 0) -> ReplicatedPartition:
    return cluster.describe_replicated(topic)[partition]


def test_acks_all_is_on_every_replica_byte_for_byte(three, zk_chroot) -> None:
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic("copied", 1, 3)
        leader = three[p.leader]
        wait_until("the leader to take produces", lambda: _takes(leader, "copied"))
        sent = [f"event {i}".encode() * (1 + i % 7) for i in range(500)]
        for i in range(0, 500, 50):
            produce(leader, "copied", 0, sent[i : i + 50])
        # (a follower starved of CPU for the lag limit may have left the ISR meanwhile, and
        # those answers counted without it: the proof is one answered by the whole ISR)
        end = acked_by_every_replica(cluster, leader, "copied", sent)
        # answered: every replica has it, byte for byte, with the leader's epochs
        for b in three.values():
            assert log_bytes(b, "copied", 0)[:end] == log_bytes(leader, "copied", 0)[:end]
            assert LeaderEpochs(Path(b.log_dir) / "copied-0").entries == [(0, 0)]
        assert consume(leader, "copied", 0)[-len(sent) :] == sent


def _produced(broker: BrokerProcess, topic: str, ends: list[int]) -> bool:
    """An acks=-1 produce of b"all three", its end put in `ends`; False if it was refused."""
    try:
        ends.append(produce(broker, topic, 0, [b"all three"]))
        return True
    except NotEnoughReplicasError:
        return False


def acked_by_every_replica(
    cluster: Cluster, leader: BrokerProcess, topic: str, sent: list[bytes]
) -> int:
    """The end of an acks=-1 produce answered while ZooKeeper's state of partition 0 named
    every replica in its ISR, read before the produce and the same (znode version included)
    after its answer: a leader acknowledges by a smaller ISR only once it has written it
    there, so that answer means every replica holds the message. One answered while the ISR
    moved (a follower still named but about to be dropped) proves nothing, and another
    message is sent. Every message sent, `last <n>`, is added to `sent`."""
    ends: list[int] = []

    def once() -> bool:
        before = state(cluster, topic)
        if len(before.isr) < len(before.replicas):
            return False
        sent.append(f"last {len(sent)}".encode())
        ends.append(produce(leader, topic, 0, sent[-1:]))
        return state(cluster, topic).state == before.state

    wait_until(f"an acks=-1 produce to {topic} answered by the whole ISR", once)
    return ends[-1]


def _takes(broker: BrokerProcess, topic: str) -> bool:
    try:
        produce(broker, topic, 0, [b"probe"], all_in_sync=False)
        return True
    except LogbrokerError:
        return False


def test_a_stopped_follower_leaves_the_isr_and_comes_back(three, zk_chroot) -> None:
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic("lagging", 1, 3)
        leader = three[p.leader]
        a, b = (three[r] for r in p.replicas if r != p.leader)
        wait_until("the leader to take produces", lambda: _takes(leader, "lagging"))
        os.kill(a.pid, signal.SIGSTOP)
        os.kill(b.pid, signal.SIGSTOP)
        try:
            # in the ISR but stopped: an acks=-1 produce waits, then says it timed out
            with pytest.raises(RequestTimedOutError):
                produce(leader, "lagging", 0, [b"unreplicated"], timeout_ms=300)
            before = consume(leader, "lagging", 0)
            assert b"unreplicated" not in before  # not on the ISR: no consumer sees it
            wait_until("the ISR to shrink", lambda: state(cluster, "lagging").isr == (p.leader,))
            # now the ISR is the leader alone: committed, visible, and acks=-1 is refused
            wait_until(
                "the message to commit", lambda: b"unreplicated" in consume(leader, "lagging", 0)
            )
            with pytest.raises(NotEnoughReplicasError):
                produce(leader, "lagging", 0, [b"refused"])
            assert b"refused" not in consume(leader, "lagging", 0)  # refused before the append
        finally:
            os.kill(a.pid, signal.SIGCONT)
            os.kill(b.pid, signal.SIGCONT)
        wait_until(
            "the followers to rejoin", lambda: set(state(cluster, "lagging").isr) == set(p.replicas)
        )
        # The leader takes the ISR it wrote when its own watch brings it back, a moment after
        # ZooKeeper shows it; until then acks=-1 is refused, before anything is appended.
        ends: list[int] = []
        wait_until("the leader to count them in", lambda: _produced(leader, "lagging", ends))
        end = ends[0]
        for follower in (a, b):
            assert log_bytes(follower, "lagging", 0)[:end] == log_bytes(leader, "lagging", 0)[:end]


def test_a_dead_leaders_unreplicated_tail_is_truncated(three, zk_chroot) -> None:
    """KIP-101's case: the old leader took messages no follower had, and died; the new
    leader writes other messages at those offsets; the old one comes back as a follower."""
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic("diverged", 1, 3)
        old = three[p.leader]
        followers = [three[r] for r in p.replicas if r != p.leader]
        wait_until("the leader to take produces", lambda: _takes(old, "diverged"))
        committed = produce(old, "diverged", 0, [b"committed"] * 10)
        for f in followers:
            os.kill(f.pid, signal.SIGSTOP)
        try:
            # the followers' fetches parked at the leader are answered (empty) first: none is
            # left to carry the tail to them (replica.fetch.wait.max.ms is 200 ms)
            time.sleep(0.6)
            tail_end = produce(old, "diverged", 0, [b"tail"] * 20, all_in_sync=False)
            assert tail_end > committed
            old.kill()  # before the followers copied the tail
        finally:
            for f in followers:
                os.kill(f.pid, signal.SIGCONT)
        wait_until("a new leader", lambda: state(cluster, "diverged").leader not in (p.leader, -1))
        new = three[state(cluster, "diverged").leader]
        wait_until("the new leader to take produces", lambda: _takes(new, "diverged"))
        end = produce(new, "diverged", 0, [b"new leader"] * 5)
        old.start()
        wait_until(
            "the old leader to rejoin the ISR",
            lambda: p.leader in state(cluster, "diverged").isr,
        )
        wait_until(
            "the old leader to copy the new leader's log",
            lambda: log_bytes(old, "diverged", 0)[:end] == log_bytes(new, "diverged", 0)[:end],
        )
        copied = consume(new, "diverged", 0)
        assert b"tail" not in copied and copied.count(b"committed") == 10
        epochs = LeaderEpochs(Path(old.log_dir) / "diverged-0").entries
        assert epochs == LeaderEpochs(Path(new.log_dir) / "diverged-0").entries
        assert len(epochs) == 2 and epochs[1][1] >= committed


def test_a_follower_far_behind_copies_in_small_fetches_byte_for_byte(
    broker_factory, zk_chroot
) -> None:
    """The leader cuts each fetch where one of its appends ended and counts its messages; a
    message larger than replica.fetch.max.bytes comes uncounted and cut, and the follower
    asks again for as much as it needs (fetcher.py)."""
    three = {
        i: broker_factory(
            broker_id=i,
            zk=zk_chroot,
            zk_sessiontimeout_ms=SESSION_MS,
            replica_lag_time_max_ms=LAG_MS,
            replica_fetch_wait_max_ms=200,
            replica_fetch_max_bytes=1024,
        )
        for i in range(3)
    }
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic("behind", 1, 3)
        leader = three[p.leader]
        slow, other = (three[r] for r in p.replicas if r != p.leader)
        wait_until("the leader to take produces", lambda: _takes(leader, "behind"))
        os.kill(slow.pid, signal.SIGSTOP)
        try:
            sent = []
            for i in range(120):
                batch = (
                    [f"big {i} ".encode() * 400]  # ~3 KB: more than a fetch's 1024 bytes
                    if i % 15 == 0
                    else [f"small {i}.{j}".encode() * (1 + j % 5) for j in range(1 + i % 9)]
                )
                produce(leader, "behind", 0, batch, all_in_sync=False)
                sent += batch
        finally:
            os.kill(slow.pid, signal.SIGCONT)
        # ZooKeeper may still name the stopped follower in the ISR: the leader drops it at its
        # next check, up to half of replica.lag.time.max.ms after the limit. So wait for what
        # is proved here, the backlog copied byte for byte (the leader takes nothing meanwhile),
        # and then for the follower in the ISR again.
        backlog = log_bytes(leader, "behind", 0)
        wait_until(
            "the slow follower to copy the backlog and rejoin the ISR",
            lambda: (
                log_bytes(slow, "behind", 0)[: len(backlog)] == backlog
                and len(state(cluster, "behind").isr) == 3
            ),
            explain=lambda: story(three, "behind"),
        )
        lasts: list[bytes] = []
        end = acked_by_every_replica(cluster, leader, "behind", lasts)
        for follower in (slow, other):
            copied = log_bytes(follower, "behind", 0)[:end]
            assert copied == log_bytes(leader, "behind", 0)[:end], (
                f"broker {follower.broker_id} holds {len(copied)} of the {end} bytes acknowledged "
                f"with acks=-1 (ISR {list(state(cluster, 'behind').isr)} now)\n"
                + story(three, "behind")
            )
        assert consume(leader, "behind", 0)[-len(sent) - len(lasts) :] == [*sent, *lasts]
