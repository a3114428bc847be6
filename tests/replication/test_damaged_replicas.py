"""Damaged bytes on a replica's disk are caught and healed, never copied nor served (issue 49,
item 2).

Two real brokers on one ZooKeeper; one replicated partition, small segments. The follower's
files are damaged while it is down, as a disk or an operator's tool would damage them: a byte
flipped after a clean stop, a file cut inside a message after a clean stop, a byte flipped in
its oldest segment after a kill -9. At start the broker checks what it cannot trust, cuts its
log at the first bad entry, and replication refills the rest: the replicas end byte-identical.
Damage on the leader's disk that no start saw (written under the running broker) is refused
by the follower's check of every fetched entry: it copies nothing from there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from three_brokers import produce, wait_until

from logbroker.client.cluster import Cluster
from logbroker.stack.broker import BrokerProcess

TOPIC = "damaged"
PAYLOADS = [f"message {i:04d} ".encode() + b"x" * 60 for i in range(400)]


def segments(broker: BrokerProcess) -> list[Path]:
    return sorted((Path(broker.log_dir) / f"{TOPIC}-0").glob("*.kafka"))


def log_bytes(broker: BrokerProcess) -> bytes:
    return b"".join(p.read_bytes() for p in segments(broker))


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x01]))


def test_damage_on_a_replicas_disk_is_cut_at_start_and_refilled(broker_factory, zk_chroot) -> None:
    two = {
        i: broker_factory(
            broker_id=i,
            zk=zk_chroot,
            zk_sessiontimeout_ms=2000,
            replica_lag_time_max_ms=1500,
            replica_fetch_wait_max_ms=200,
            log_file_size=4096,
        )
        for i in range(2)
    }
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic(TOPIC, 1, 2)
        leader, follower = two[p.leader], two[1 - p.leader]
        wait_until("both in sync", lambda: len(cluster.describe_replicated(TOPIC)[0].isr) == 2)

        def send(payloads: list[bytes]) -> None:
            for i in range(0, len(payloads), 20):
                produce(leader, TOPIC, 0, payloads[i : i + 20], acks_all=True)

        def healed(what: str) -> None:
            wait_until(
                f"the follower byte-identical again after {what}",
                lambda: (
                    log_bytes(follower) == log_bytes(leader)
                    and len(cluster.describe_replicated(TOPIC)[0].isr) == 2
                ),
                timeout=60,
            )

        send(PAYLOADS[:200])
        healed("the first writes")
        assert len(segments(follower)) > 3

        # a byte flipped in an older segment while the follower was stopped cleanly
        follower.stop()
        flip_byte(segments(follower)[1], 100)
        send(PAYLOADS[200:250])
        follower.start()
        healed("a flipped byte")
        assert list(Path(follower.log_dir, f"{TOPIC}-0").glob("*.truncated-*"))  # kept aside

        # a torn end: the newest file cut inside a message while it was stopped cleanly
        follower.stop()
        last = segments(follower)[-1]
        with open(last, "r+b") as f:
            f.truncate(last.stat().st_size - 7)
        send(PAYLOADS[250:300])
        follower.start()
        healed("a torn end")

        # a byte flipped in the oldest segment after a kill -9
        follower.kill()
        flip_byte(segments(follower)[0], 30)
        send(PAYLOADS[300:350])
        follower.start()
        healed("a crash and a flipped byte")

        # damage on the leader's disk that no start saw: the follower copies nothing from it
        follower.stop()
        shutil.rmtree(Path(follower.log_dir) / f"{TOPIC}-0")  # it copies everything again
        damaged_at = segments(leader)[2]
        flip_byte(damaged_at, 100)  # under the running leader
        follower.start()
        start_of_damaged = int(damaged_at.stem)
        wait_until(
            "the follower at the damaged segment",
            lambda: (
                len(log_bytes(follower)) >= start_of_damaged
                and "fail their check" in follower.log_since()
            ),
            timeout=60,
        )
        copied = log_bytes(follower)
        assert copied == log_bytes(leader)[: len(copied)]  # a prefix of the leader, and ...
        assert len(copied) <= start_of_damaged + 100  # ... nothing of the damaged entry
