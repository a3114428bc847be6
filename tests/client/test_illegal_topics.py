"""The clients refuse an illegal topic name in the call that names it, before anything is sent
or written to ZooKeeper (protocol/topics.py), against a real broker and ZooKeeper."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from logbroker.client.cluster import Cluster
from logbroker.client.group_consumer import GroupConsumer
from logbroker.client.producer import AsyncProducer, Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.protocol.errors import InvalidTopicError
from logbroker.protocol.requests import FetchRequest
from logbroker.stack.zookeeper import ZkTarget

EMOJI = "emoji😀"
WHAT = r"topic name 'emoji😀' contains the illegal character '😀' at position 5"


def test_producers_refuse_before_sending_any_of_the_batch(zk_chroot: ZkTarget, broker_factory):
    broker = broker_factory(0, zk=zk_chroot)
    with Producer(zk_connect=zk_chroot.connect, acks="ack") as p:
        with pytest.raises(InvalidTopicError, match=WHAT):
            p.send(EMOJI, b"x")
        with pytest.raises(InvalidTopicError, match=WHAT):
            p.send(EMOJI, [b"x", b"y"])
        with pytest.raises(InvalidTopicError, match=WHAT):  # the legal one is not sent either
            p.send_batch([("legal", None, b"first"), (EMOJI, None, b"x")])
        assert p.stats.sent_messages == 0
    fire_and_forget = Producer(broker_list=f"{broker.host}:{broker.port}")
    with pytest.raises(InvalidTopicError, match=WHAT):
        fire_and_forget.send(EMOJI, b"x")
    with AsyncProducer(fire_and_forget, queue_time_ms=10) as queued:
        # at once, in the caller's thread: queued, it would fail the whole batch it joined
        with pytest.raises(InvalidTopicError, match=WHAT):
            queued.send(EMOJI, b"x")
        assert queued.send("legal", b"queued")
        queued.flush()
        assert queued.errors == []
    with SimpleConsumer(broker.host, broker.port) as consumer:
        assert [m.payload for m in consumer.iter_messages("legal", 0, 0)] == [b"queued"]
    assert sorted(p.name for p in broker.log_dir.iterdir() if p.is_dir()) == ["legal-0"]


def test_consumers_and_the_cluster_refuse_before_asking_anyone(
    zk_chroot: ZkTarget, zk_client: KazooClient, broker_factory
):
    broker = broker_factory(0, zk=zk_chroot)
    with SimpleConsumer(broker.host, broker.port) as consumer:
        for call in (
            lambda: consumer.fetch(EMOJI, 0, 0),
            lambda: consumer.offsets_before(EMOJI, 0, -1),
            lambda: consumer.multifetch([FetchRequest(EMOJI, 0, 0, 100)]),
            lambda: list(consumer.iter_messages(EMOJI, 0, 0)),
        ):
            with pytest.raises(InvalidTopicError, match=WHAT):
                call()
    with GroupConsumer("readers", zk_chroot.connect) as group:
        with pytest.raises(InvalidTopicError, match=WHAT):
            group.create_message_streams({"legal": 1, EMOJI: 1})
        assert not zk_client.exists("/consumers/readers/ids") or (
            zk_client.get_children("/consumers/readers/ids") == []
        )
    with Cluster(zk_chroot.connect) as cluster:
        with pytest.raises(InvalidTopicError, match=WHAT):
            cluster.create_topic(EMOJI, 2)
        with pytest.raises(InvalidTopicError, match=WHAT):
            cluster.describe(EMOJI)
    assert not any(p.is_dir() for p in broker.log_dir.iterdir())
