"""Every client follows leaders: the CLI, the producer, the group consumer (issue 30).

Three real brokers (zk.sessiontimeout.ms 2 s, replica.lag.time.max.ms 1.5 s) and a real
ZooKeeper. What a user relies on:

- `produce --request-required-acks -1` exits 0 only when every line is on the whole ISR, also
  when a partition's leader is killed mid-stream; `consume` then reads every line, and every
  replica holds the same bytes;
- a producer whose view of the leaders lags behind is refused (NotLeaderForPartition), reads
  them again and sends to the new leader; with no live in-sync replica it gives up, saying
  how many messages were not acknowledged and why;
- a group consumer follows a leader failover without losing a message, and names the
  partitions `<p>` in ZooKeeper (Kafka 0.8's names).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from three_brokers import hold_watches, wait_until
from three_brokers import three as three_brokers

from logbroker.client.cluster import Cluster
from logbroker.client.group_consumer import GroupConsumer
from logbroker.client.leaders import Leaders
from logbroker.client.partition_reader import PartitionReader
from logbroker.client.producer import ProduceError, Producer
from logbroker.config import BrokerConfig
from logbroker.coordination import paths
from logbroker.coordination.replication_state import NO_LEADER
from logbroker.protocol.errors import LeaderNotAvailableError, RequestTimedOutError
from logbroker.protocol.message_set import build_message_set
from logbroker.stack.broker import BrokerProcess


@pytest.fixture
def three(broker_factory, zk_chroot) -> dict[int, BrokerProcess]:
    return three_brokers(
        broker_factory, zk_chroot, replica_lag_time_max_ms=1500, replica_fetch_wait_max_ms=200
    )


def logbroker(*args: str, **kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "logbroker.cli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,  # type: ignore[call-overload]
    )


def log_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    directory = Path(broker.log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.kafka")))


def test_produce_with_acks_all_across_a_killed_leader_then_consume_everything(
    broker_factory, zk_chroot
) -> None:
    """The command at its own retry settings, the brokers at their default ZooKeeper session
    timeout: the failover takes that long (the dead leader's session must expire), and the
    producer's delivery timeout outlasts it."""
    three = three_brokers(
        broker_factory,
        zk_chroot,
        zk_sessiontimeout_ms=BrokerConfig().zk_sessiontimeout_ms,
        replica_lag_time_max_ms=1500,
        replica_fetch_wait_max_ms=200,
    )
    zk = zk_chroot.connect
    create = logbroker(
        "topics", "--zookeeper", zk, "create", "orders", "--partitions", "3",
        "--replication-factor", "3",
    )  # fmt: skip
    out, err = create.communicate(timeout=60)
    assert create.returncode == 0, err
    lines = [f"order {i:05d} ".encode() + b"x" * (i % 40) for i in range(3000)]
    # keyed by their number: every batch has a set for every partition, the killed leader's too
    keyed = [f"{i}\t".encode() + line for i, line in enumerate(lines)]
    first = lines[:1500]
    produce = logbroker(
        "produce", "--zookeeper", zk, "--topic", "orders", "--request-required-acks", "-1",
        "--key-separator", "\t", "--batch-size", "100",
    )  # fmt: skip
    assert produce.stdin is not None
    produce.stdin.write(b"\n".join(keyed[:1500]) + b"\n")
    produce.stdin.flush()
    with Cluster(zk) as cluster:
        # the first half is acknowledged (15 whole batches); the producer waits for more
        size = sum(len(build_message_set([line])) for line in first)
        wait_until(
            "the first half on every ISR",
            lambda: sum(r.latest for r in cluster.describe("orders")) == size,
        )
        before = cluster.describe_replicated("orders")[0]
        three[before.leader].kill()  # kill -9, with the producer's connection open
        out, err = produce.communicate(b"\n".join(keyed[1500:]) + b"\n", timeout=120)
        assert produce.returncode == 0, err
        assert b"sent 3000 of 3000 messages" in err
        assert re.search(rb"retried sets [1-9]", err), err  # the dead leader's sets went again
        after = cluster.describe_replicated("orders")[0]
        assert after.leader in before.isr and after.leader != before.leader
        assert after.state is not None and before.state is not None
        assert after.state.leader_epoch > before.state.leader_epoch
        assert before.leader not in after.isr

        three[before.leader].start()
        wait_until(
            "the restarted broker back in every ISR",
            lambda: all(before.leader in p.isr for p in cluster.describe_replicated("orders")),
        )
        consume = logbroker(
            "consume", "--zookeeper", zk, "--topic", "orders", "--from-beginning",
            "--timeout-ms", "4000",
        )  # fmt: skip
        out, err = consume.communicate(timeout=120)
        assert consume.returncode == 0, err
        consumed = out.splitlines()
        assert set(consumed) == set(lines)  # every line (a retry may have stored one twice)
        offsets = logbroker(
            "offsets", "--zookeeper", zk, "--topic", "orders", "--partition", "0", "--time", "-1"
        )
        out, err = offsets.communicate(timeout=60)
        assert out.split() == [str(cluster.describe("orders")[0].latest).encode()], err

        # every replica holds the same bytes below the high watermark
        ends = {row.partition: row.latest for row in cluster.describe("orders")}
        assert sum(ends.values()) >= sum(len(build_message_set([line])) for line in lines)
        for p, end in ends.items():
            leader = three[cluster.describe_replicated("orders")[p].leader]
            wait_until(
                f"orders-{p} identical on every replica",
                lambda p=p, end=end, leader=leader: all(
                    log_bytes(b, "orders", p)[:end] == log_bytes(leader, "orders", p)[:end]
                    for b in three.values()
                ),
            )


def test_a_producer_follows_a_new_leader_and_gives_up_without_one(three, zk_chroot) -> None:
    zk = zk_chroot.connect
    with (
        Cluster(zk) as cluster,
        Producer(zk_connect=zk, request_required_acks=-1, retries=3) as producer,
    ):
        [p] = cluster.create_replicated_topic("payments", 1, 2)
        old = p.leader
        [follower] = [r for r in p.replicas if r != old]
        producer.retries = 20  # the new leader may take a moment to take its role
        [before] = producer.send("payments", [b"before"])
        producer.retries = 3
        assert (before.broker_id, before.partition) == (-1, 0)
        client = producer.brokers.client  # type: ignore[attr-defined]
        reader = PartitionReader(Leaders(client), "payments", 0, leader_timeout_ms=10000)
        assert [m.payload for m in reader.iter_messages(0)] == [b"before"]
        assert reader.leader is not None and reader.leader.id == old

        # leadership moves while the old leader lives on as a follower; the producer's and
        # the reader's watches lag behind, so they ask the old leader and are refused
        release = hold_watches(client)
        try:
            os.kill(three[old].pid, signal.SIGSTOP)
            try:
                wait_until(
                    "a new leader",
                    lambda: cluster.describe_replicated("payments")[0].leader == follower,
                )
            finally:
                os.kill(three[old].pid, signal.SIGCONT)
            wait_until(
                "the old leader to follow",
                lambda: old in cluster.describe_replicated("payments")[0].isr,
            )
            # refused (NotLeaderForPartition), the reader finds the new leader, same offset
            assert [m.payload for m in reader.iter_messages(0)] == [b"before"]
            assert reader.leader is not None and reader.leader.id == follower
            retried = producer.stats.retried_sets
            [after] = producer.send("payments", [b"after"])
            assert producer.stats.retried_sets == retried + 1  # NotLeaderForPartition, once
            assert after.offset >= before.next_offset
        finally:
            release()
        fetched = cluster.partition_consumer("payments", -1, 0).fetch("payments", 0, 0, 1 << 16)
        assert [m.payload for m in fetched.messages()] == [b"before", b"after"]
        assert cluster.partition_consumer("payments", -1, 0) is cluster.consumer(follower)

        # -1 waits for every in-sync replica: with one stopped, not acknowledged in time
        with Producer(
            zk_connect=zk, request_required_acks=-1, request_timeout_ms=300, retries=0
        ) as strict:
            os.kill(three[old].pid, signal.SIGSTOP)
            try:
                with pytest.raises(ProduceError) as timed_out:
                    strict.send("payments", [b"unreplicated"])
            finally:
                os.kill(three[old].pid, signal.SIGCONT)
        assert isinstance(timed_out.value.cause, RequestTimedOutError)
        assert timed_out.value.lost == 1

        # no live in-sync replica: no leader, and the producer says so after its retries
        three[old].kill()
        three[follower].kill()
        wait_until(
            "the partition offline",
            lambda: cluster.describe_replicated("payments")[0].leader == NO_LEADER,
        )
        with pytest.raises(ProduceError) as info:
            producer.send("payments", [b"lost 1", b"lost 2"])
        assert info.value.lost == 2
        assert isinstance(info.value.cause, LeaderNotAvailableError)
        assert str(info.value).startswith("2 messages not acknowledged after 3 retries in ")
        assert "(message.send.max.retries=3): " in str(info.value)
        assert "payments-0 has no leader now" in str(info.value)
        produce = logbroker(
            "produce", "--zookeeper", zk, "--topic", "payments", "--request-required-acks",
            "-1", "--message-send-max-retries", "1", "--retry-backoff-ms", "10",
        )  # fmt: skip
        _, err = produce.communicate(b"one\ntwo\nthree\n", timeout=60)
        assert produce.returncode == 1
        assert b"3 of the 3 lines read were not acknowledged" in err, err
        reader.close()


def test_a_group_consumer_reads_everything_across_a_leader_failover(three, zk_chroot) -> None:
    zk = zk_chroot.connect
    first = [f"click {i:04d}".encode() for i in range(600)]
    second = [f"click {i:04d}".encode() for i in range(600, 1200)]
    with (
        Cluster(zk) as cluster,
        Producer(zk_connect=zk, request_required_acks=-1, retries=30) as producer,
    ):
        cluster.create_replicated_topic("clicks", 3, 3)
        producer.send_batch([("clicks", str(i), m) for i, m in enumerate(first)])
        consumer = GroupConsumer(
            "readers",
            zk,
            consumer_timeout_ms=30000,
            fetcher_backoff_ms=200,
            rebalance_backoff_ms=300,
            zk_session_timeout_ms=4000,
        )
        try:
            stream = consumer.create_message_streams({"clicks": 1})["clicks"][0]
            got = [next(stream) for _ in first]
            assert sorted(m.payload for m in got) == first
            assert consumer.owned_partitions() == {"clicks": ["0", "1", "2"]}
            owners = cluster.zk.get_children(paths.consumer_owners_path("readers", "clicks"))
            assert sorted(owners) == ["0", "1", "2"]

            victim = cluster.describe_replicated("clicks")[0].leader
            three[victim].kill()
            producer.send_batch([("clicks", str(i), m) for i, m in enumerate(second, 600)])
            wanted = set(first + second)
            while not wanted <= {m.payload for m in got}:
                got.append(next(stream))  # StopIteration (a failure) after 30 s without one
            while more := stream.next_chunk(1.0):  # a set a retry stored twice, if any
                got += more

            # the killed broker comes back and a preferred-replica election gives it its
            # partition back: a leader that moves while every broker lives. The broker's
            # return rebalances the group (0.7's rule); the election must not
            rebalances = consumer.stats.rebalances
            three[victim].start()
            wait_until(
                "the returned broker in sync",
                lambda: victim in cluster.describe_replicated("clicks")[0].isr,
            )
            wait_until("its rebalance", lambda: consumer.stats.rebalances > rebalances)
            rebalances = consumer.stats.rebalances
            election = logbroker(
                "preferred-replica-election", "--zookeeper", zk, "--topic", "clicks",
                "--partition", "0",
            )  # fmt: skip
            out, err = election.communicate(timeout=60)
            assert election.returncode == 0, err
            assert b"moved 1 of 1 partitions" in out, out
            assert cluster.describe_replicated("clicks")[0].leader == victim
            third = [f"click {i:04d}".encode() for i in range(1200, 1300)]
            producer.send_batch([("clicks", "0", m) for m in third])  # "0" hashes to 0
            while not set(third) <= {m.payload for m in got if m.partition == "0"}:
                got.append(next(stream))
            assert consumer.stats.rebalances == rebalances
            while more := stream.next_chunk(1.0):
                got += more
            consumer.commit_offsets()
            ends = {row.name: row.latest for row in cluster.describe("clicks")}
            committed = {
                name: cluster._read_int(
                    f"{paths.consumer_offsets_path('readers', 'clicks')}/{name}"
                )
                for name in cluster.zk.get_children(
                    paths.consumer_offsets_path("readers", "clicks")
                )
            }
            assert committed == ends  # named "<p>", each at its partition's high watermark
            assert set(first + second + third) == {m.payload for m in got}
            assert {m.partition for m in got} == {"0", "1", "2"}
        finally:
            consumer.close()
        lag = cluster.group_partitions("readers")
        assert {(r.name, r.lag) for r in lag} == {("0", 0), ("1", 0), ("2", 0)}
