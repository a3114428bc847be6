"""A flood of partitions and connections cannot take a broker to its descriptor limit.

A real broker runs with RLIMIT_NOFILE 256 (so at most 128 segment files open at once) and
registers in ZooKeeper. Twelve CREATE_TOPIC requests ask for 1024 partitions each (12,288
partition directories); one asks for more than max.partitions.per.topic and is refused.
Its descriptors (`/proc/<pid>/fd`) stay bounded, it keeps serving produces and fetches on
hundreds of those partitions, a burst of connections beyond its limit is refused without a
line per failure, and it restarts over all of it.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from collections.abc import Iterator

import pytest

from logbroker.client.connection import BrokerConnection
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.protocol.errors import WrongPartitionError
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import (
    AckedProduceRequest,
    CreateTopicRequest,
    MetadataRequest,
    ProduceRequest,
)
from logbroker.protocol.responses import (
    decode_acked_produce_response,
    decode_create_topic_response,
    decode_metadata_response,
)
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget

LIMIT = 256
TOPICS = [f"flood-{i}" for i in range(12)]
EVERY_16TH = range(0, 1024, 16)  # 768 partitions in all: the pool of 128 cycles many times


def descriptors(broker: BrokerProcess) -> int:
    return len(os.listdir(f"/proc/{broker.pid}/fd"))


@pytest.fixture
def broker(
    tmp_path_factory: pytest.TempPathFactory, zk_chroot: ZkTarget
) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("descriptors"),
        zk_connect=zk_chroot.connect,
        rlimits={resource.RLIMIT_NOFILE: (LIMIT, LIMIT)},
    )
    try:
        yield proc.start()
    finally:
        proc.stop()


def create_topic(conn: BrokerConnection, topic: str, partitions: int) -> int:
    """The topic's partitions in the answer; a refusal raises, with the broker's reason."""
    answer = decode_create_topic_response(conn.request(CreateTopicRequest(topic, partitions)))
    return len(answer.partitions)


def produce_everywhere(broker: BrokerProcess, partitions: range) -> None:
    with BrokerConnection(*broker.address, timeout=60) as conn:
        for topic in TOPICS:
            produces = tuple(
                ProduceRequest(topic, p, build_message_set([f"{topic}/{p}".encode()]))
                for p in partitions
            )
            results = decode_acked_produce_response(
                conn.request(AckedProduceRequest(False, produces))
            )
            assert [r.error for r in results] == [0] * len(produces)


def check_everywhere(broker: BrokerProcess, partitions: range) -> None:
    with SimpleConsumer(*broker.address, timeout=60) as consumer:
        for topic in TOPICS:
            for p in partitions:
                messages, _ = consumer.fetch_messages(topic, p, 0)
                assert [m.payload for m in messages] == [f"{topic}/{p}".encode()]


def test_a_partition_flood_keeps_descriptors_bounded_and_the_broker_serving(
    broker: BrokerProcess,
) -> None:
    with BrokerConnection(*broker.address, timeout=120) as conn:
        for topic in TOPICS:
            assert create_topic(conn, topic, 1024) == 1024
            assert descriptors(broker) < LIMIT // 2 + 64
        with pytest.raises(WrongPartitionError, match=r"1 to 1024 .*\(max.partitions.per.topic\)"):
            create_topic(conn, "too-wide", 1025)
    assert not (broker.log_dir / "too-wide-0").exists()

    # Every partition of every topic exists and serves.
    produce_everywhere(broker, EVERY_16TH)
    check_everywhere(broker, EVERY_16TH)
    assert descriptors(broker) < LIMIT // 2 + 64

    # More connections than descriptors: the broker stops accepting for a while, says so
    # in one line, and serves again once they are gone.
    flood = []
    for _ in range(LIMIT):
        try:
            flood.append(socket.create_connection(broker.address, timeout=5))
        except OSError:
            break
    deadline = time.monotonic() + 30
    while "cannot accept connections" not in broker.log_since():
        assert time.monotonic() < deadline, "the broker never ran out of descriptors"
        time.sleep(0.05)
    for sock in flood:
        sock.close()
    with BrokerConnection(*broker.address, timeout=60) as conn:
        decode_metadata_response(conn.request(MetadataRequest((TOPICS[0],))))
    assert broker.log_since().count("cannot accept connections") == 1
    assert "Traceback" not in broker.log_since()

    # It restarts over 12,288 partitions under the same limit, with everything in place.
    assert broker.stop() == 0
    broker.start()
    assert descriptors(broker) < LIMIT // 2 + 64
    check_everywhere(broker, EVERY_16TH)
