"""logbroker's own clients on 0.8-format topics, against three real brokers with port.08.

The Producer sends keyed 0.8 message sets to the leaders' 0.8 listeners (Produce v0, acks 0,
1 and -1, compressed as configured) and answers with logical offsets; PartitionReader08 reads
a partition from its leader's listener (Fetch v0, Offsets v0), from inside a compressed
wrapper too; the GroupConsumer consumes 0.8-format topics across a leader killed -9, its
offsets committed where Kafka 0.8's clients of the same group read theirs (kafka-python,
unchanged, is the other side); `logbroker produce` and `consume` round-trip keys. The cluster
is tests/compat/test_kafka08_listener.py's Kafka08Cluster, one for the module.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator

import pytest

from logbroker.client.brokers import BrokerEndpoint
from logbroker.client.cluster import Cluster
from logbroker.client.group_consumer import GroupConsumer, GroupMessage
from logbroker.client.messages08 import build_set
from logbroker.client.partition_reader import PartitionReader
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.partitioner import default_partitioner
from logbroker.client.producer import ProduceError, Producer, SendResult
from logbroker.coordination.replication_state import REPLICATED
from logbroker.protocol.errors import LogbrokerError
from logbroker.protocol.kafka08.apis import encode_request
from logbroker.protocol.kafka08.metadata import METADATA_V0, MetadataRequest
from logbroker.protocol.kafka08.produce import (
    PRODUCE_V0,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)
from logbroker.stack.zookeeper import ZooKeeperServer
from tests.compat.test_kafka08_listener import KCAT, Kafka08Cluster, wait_until

# the other side, unchanged: kcat (librdkafka) reads what the producer wrote, kafka-python
# (api_version=(0, 8, 2)) commits and reads a group's offsets
kafka = pytest.importorskip("kafka")
pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (scripts/install-system-deps.sh)"
)


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kafka08Cluster]:
    target = zookeeper.create_chroot(f"/own08-{os.getpid()}")
    started = Kafka08Cluster(tmp_path_factory.mktemp("own08"), target).start()
    try:
        yield started
    finally:
        started.stop()


def read_all(cluster: Kafka08Cluster, topic: str) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(partition, offset) -> (key, value) of every message, as kcat reads them."""
    out = cluster.kcat("-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p %o %k %s\n")
    return {
        (int(p), int(o)): (k.encode(), v.encode())
        for p, o, k, v in (line.split(" ", 3) for line in out.splitlines())
    }


@pytest.mark.parametrize(("codec", "acks"), [("gzip", -1), ("snappy", 1), ("none", 0)])
def test_the_producer_sends_keyed_0_8_sets_to_the_leaders_listeners(
    cluster: Kafka08Cluster, codec: str, acks: int
) -> None:
    topic = f"own-{codec}"
    cluster.create(topic, 3)
    if acks == 0:  # no answer, no retry: a leader that is not serving yet would drop a set
        for p in range(3):
            with PartitionReader08.connect(cluster.target.connect, topic, p) as reader:
                assert reader.latest_offset() == 0  # retried until the leader answers
    sent = [(f"user-{i % 7}", f"event {i}".encode()) for i in range(140)]
    with Producer(
        zk_connect=cluster.target.connect, compression_codec=codec, request_required_acks=acks
    ) as producer:
        results: list[SendResult] = []
        for start in range(0, len(sent), 35):  # four batches: offsets go on from batch to batch
            results += producer.send_batch([(topic, k, v) for k, v in sent[start : start + 35]])
    expected: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for key, value in sent:  # a key's partition is the partitioner's, in the order sent
        expected[default_partitioner(key, 3)].append((key.encode(), value))
    if acks == 0:
        assert results == []
    # below the high watermark: with acks 0 and 1 the followers may not have it all yet
    wait_until("every message readable", lambda: len(read_all(cluster, topic)) == len(sent))
    got = read_all(cluster, topic)
    for partition in range(3):  # logical offsets: the n-th message of a partition is n
        offsets = sorted(o for p, o in got if p == partition)
        assert offsets == list(range(len(expected[partition])))
        assert [got[(partition, o)] for o in offsets] == expected[partition]
    if acks != 0:  # each answer names where its set landed, at logical offsets
        for r in results:
            assert r.next_offset == r.offset + r.messages
            landed = [got[(r.partition, o)] for o in range(r.offset, r.next_offset)]
            assert all(default_partitioner(k.decode(), 3) == r.partition for k, _ in landed)
        assert sum(r.messages for r in results) == len(sent)


def test_acks_fsync_is_refused_for_a_0_8_topic_and_nothing_is_sent(cluster: Kafka08Cluster) -> None:
    cluster.create("own-fsync", 1)
    with Producer(zk_connect=cluster.target.connect, acks="fsync") as producer:
        with pytest.raises(ProduceError, match=r"acks=fsync has no Kafka 0\.8 equivalent"):
            producer.check_topic("own-fsync")
        with pytest.raises(ProduceError, match=r"'own-fsync' is a 0\.8-format topic") as refused:
            producer.send_batch([("own-fsync", "k", b"v")] * 3)
        assert refused.value.lost == 3
    with PartitionReader08.connect(cluster.target.connect, "own-fsync", 0) as reader:
        assert reader.latest_offset() == 0


def test_the_partition_reader_reads_keys_from_any_offset_inside_a_compressed_wrapper(
    cluster: Kafka08Cluster,
) -> None:
    cluster.create("own-reader", 2)
    with Producer(
        zk_connect=cluster.target.connect, compression_codec="gzip", request_required_acks=-1
    ) as producer:  # three wrappers of 10 messages each in one partition
        results = [
            producer.send("own-reader", [f"m{b * 10 + i}".encode() for i in range(10)], key="k")
            for b in range(3)
        ]
    partition = results[0][0].partition
    assert [r[0].offset for r in results] == [0, 10, 20]
    with PartitionReader08.connect(
        cluster.target.connect, "own-reader", partition, fetch_size=64
    ) as reader:  # 64 bytes: smaller than a wrapper, so the fetch size grows
        assert (reader.earliest_offset(), reader.latest_offset()) == (0, 30)
        messages = list(reader.iter_messages(13))  # inside the second wrapper
        assert [m.offset for m in messages] == list(range(13, 30))
        assert [m.payload for m in messages] == [f"m{i}".encode() for i in range(13, 30)]
        assert {m.key for m in messages} == {b"k"}
        assert messages[-1].next_offset == 30
        batches = list(reader.iter_batches(0))
        assert [o for b in batches for o in b.offsets] == list(range(30))
        assert batches[-1].next_offset == 30
    with Cluster(cluster.target.connect) as view:  # the cluster view: logical offsets too
        rows = {r.partition: r for r in view.describe("own-reader")}
        assert (rows[partition].earliest, rows[partition].latest) == (0, 30)
        with pytest.raises(LogbrokerError, match=r"is a 0\.8-format topic: read it with"):
            PartitionReader(view.leaders, "own-reader", partition)


def test_a_reader_at_the_planned_leader_needs_no_zookeeper_and_follows_a_moved_one(
    cluster: Kafka08Cluster,
) -> None:
    """PartitionReader08.at: the Spark source's reads start at the 0.8 listener the plan found
    leading; ZooKeeper is asked only when that broker refuses (the leader moved)."""
    cluster.create("own-planned", 1)
    with Producer(zk_connect=cluster.target.connect, request_required_acks=-1) as producer:
        producer.send_batch([("own-planned", f"k{i}", f"m{i}".encode()) for i in range(50)])
    leader = cluster.leaders("own-planned")[0]
    other = (leader + 1) % 3  # alive, a follower: it refuses with NotLeaderForPartition
    listener = {b: BrokerEndpoint(REPLICATED, "127.0.0.1", cluster.ports08[b]) for b in (0, 1, 2)}
    # the planned leader still leads: read with a ZooKeeper nobody serves (port 1)
    with PartitionReader08.at(
        "127.0.0.1:1/nowhere", "own-planned", 0, listener[leader], leader_timeout_ms=2000
    ) as reader:
        batches = list(reader.iter_batches(0))
        assert [p for b in batches for p in b.payloads] == [f"m{i}".encode() for i in range(50)]
        assert reader.latest_offset() == 50
    # the plan named a broker that does not lead: the reader asks ZooKeeper and reads on
    with PartitionReader08.at(
        cluster.target.connect, "own-planned", 0, listener[other], retry_backoff_ms=10
    ) as reader:
        messages = list(reader.iter_messages(20))
        assert [(m.offset, m.key) for m in messages] == [
            (i, f"k{i}".encode()) for i in range(20, 50)
        ]
        assert reader.leader is not None and reader.leader.port == cluster.ports08[leader]


def logbroker(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "logbroker.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def test_produce_and_consume_commands_round_trip_keys(cluster: Kafka08Cluster) -> None:
    cluster.create("own-cli", 3)
    zk = cluster.target.connect
    lines = [f"user-{i % 5}:click {i}" for i in range(60)] + ["no separator here"]
    produced = logbroker(
        "produce", "--zookeeper", zk, "--topic", "own-cli", "--key-separator", ":",
        "--request-required-acks", "-1", "--compression", "snappy",
        stdin="\n".join(lines).encode(),
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = logbroker(
        "consume", "--zookeeper", zk, "--topic", "own-cli", "--from-beginning",
        "--print-key", "--key-separator", ":", "--print-offsets",
        "--max-messages", str(len(lines)), "--timeout-ms", "10000",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    rows = [line.split(" ", 3) for line in consumed.stdout.decode().splitlines()]
    assert sorted(text for *_, text in rows) == sorted([*lines[:-1], "null:no separator here"])
    for partition, offset, next_offset, _ in rows:
        assert int(next_offset) == int(offset) + 1 and partition in ("0", "1", "2")
    for key in {line.split(":")[0] for line in lines[:-1]}:  # one key: one partition, in order
        mine = [r for r in rows if r[3].startswith(key + ":")]
        assert len({p for p, *_ in mine}) == 1
        assert [r[3] for r in mine] == [line for line in lines if line.startswith(key + ":")]
    refused = logbroker("produce", "--zookeeper", zk, "--topic", "own-cli", "--fsync", stdin=b"x")
    assert refused.returncode == 2
    assert b"acks=fsync has no Kafka 0.8 equivalent" in refused.stderr


def _take(stream: Iterator[GroupMessage], n: int) -> list[GroupMessage]:
    got = []
    for message in stream:
        got.append(message)
        if len(got) == n:
            break
    return got


def test_the_group_consumer_follows_a_killed_leader_and_kafka_python_reads_its_offsets(
    cluster: Kafka08Cluster,
) -> None:
    cluster.create("own-group", 2)
    victim = cluster.leaders("own-group")[0]
    try:
        _consume_across_a_kill(cluster, victim)
    finally:  # registered anew before the next test makes topics
        cluster.brokers[victim].start()
        with Cluster(cluster.target.connect) as view:
            wait_until("the broker back", lambda: len(view.live_brokers()) == 3)


def _consume_across_a_kill(cluster: Kafka08Cluster, victim: int) -> None:
    from kafka.structs import TopicPartition

    zk = cluster.target.connect
    sent = [(f"order-{i % 9}", f"payment {i}".encode()) for i in range(400)]
    with Producer(zk_connect=zk, request_required_acks=-1, compression_codec="gzip") as producer:
        producer.send_batch([("own-group", k, v) for k, v in sent[:200]])
        # autocommit: the rebalance the broker's death brings commits what was handed out
        # first, so nothing is handed out twice (at-least-once, exactly once here)
        consumer = GroupConsumer("own-readers", zk, consumer_timeout_ms=20000)
        try:
            stream = consumer.create_message_streams({"own-group": 1})["own-group"][0]
            got = _take(stream, 150)
            consumer.commit_offsets()
            cluster.brokers[victim].kill()  # -9, the leader of partition 0
            # the producer finds the new leaders too, retrying what the kill refused
            producer.send_batch([("own-group", k, v) for k, v in sent[200:]])
            got += _take(stream, len(sent) - len(got))
            consumer.commit_offsets()
            final = {m.partition: m.next_offset for m in got}  # the last of each partition
        finally:
            consumer.close()
    # every message, each once, with its key, in each partition's order
    assert sorted((m.key, m.payload) for m in got) == sorted((k.encode(), v) for k, v in sent)
    for p in ("0", "1"):
        offsets = [m.offset for m in got if m.partition == p]
        assert offsets == list(range(len(offsets)))
    assert {m.partition: m.offset + 1 for m in got} == final
    # the committed offsets are where Kafka 0.8's clients of the group read them
    reader = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, api_version=(0, 8, 2), group_id="own-readers"
    )
    try:
        committed = {p: reader.committed(TopicPartition("own-group", p)) for p in (0, 1)}
    finally:
        reader.close()
    assert committed == {int(p): offset for p, offset in final.items()}
    with Cluster(zk) as view:
        lag = {
            r.partition: (r.committed, r.latest, r.lag)
            for r in view.group_partitions("own-readers")
        }
    assert lag == {int(p): (o, o, 0) for p, o in final.items()}


def test_the_group_consumer_starts_where_kafka_python_committed(cluster: Kafka08Cluster) -> None:
    from kafka.structs import OffsetAndMetadata, TopicPartition

    cluster.create("own-handover", 1)
    with Producer(zk_connect=cluster.target.connect, request_required_acks=1) as producer:
        producer.send_batch([("own-handover", None, f"e{i}".encode()) for i in range(20)])
    committer = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        api_version=(0, 8, 2),
        group_id="handover",
        enable_auto_commit=False,
    )
    try:
        committer.commit({TopicPartition("own-handover", 0): OffsetAndMetadata(12, "", -1)})
    finally:
        committer.close()
    consumer = GroupConsumer("handover", cluster.target.connect, consumer_timeout_ms=5000)
    try:
        stream = consumer.create_message_streams({"own-handover": 1})["own-handover"][0]
        got = list(stream)
    finally:
        consumer.close()
    assert [(m.offset, m.payload) for m in got] == [(i, f"e{i}".encode()) for i in range(12, 20)]


def test_unanswered_produces_in_a_row_keep_each_sets_offsets_and_refuse_only_the_bad_ones(
    cluster: Kafka08Cluster,
) -> None:
    """acks=0 Produce requests that reach the listener in one read are appended together
    (Kafka08Apis.produce_unanswered): each set still gets its own consecutive offsets, a
    damaged set and one for a partition that does not exist are refused alone, and the
    request after them is answered on the same connection."""
    topic = "unanswered-run"
    cluster.create(topic, partitions=1)
    port = cluster.ports08[cluster.leaders(topic)[0]]
    sets = [build_set([b"k%d" % i] * 3, [b"v%d-%d" % (i, j) for j in range(3)]) for i in range(20)]
    damaged = bytearray(sets[5])
    damaged[-1] ^= 1  # the CRC of its last message no longer matches

    def produce(partition: int, data: bytes, correlation_id: int) -> bytes:
        parts = (ProduceTopic(topic, (ProducePartition(partition, data),)),)
        return encode_request(PRODUCE_V0, ProduceRequest(0, 1000, parts), correlation_id, "run")

    frames = [produce(0, bytes(damaged) if i == 5 else s, i) for i, s in enumerate(sets)]
    frames.insert(9, produce(7, sets[0], 100))  # no partition 7
    frames.append(encode_request(METADATA_V0, MetadataRequest((topic,)), 99, "run"))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"".join(frames))
        head = b""
        while len(head) < 8:
            got = sock.recv(8 - len(head))
            assert got, "the listener closed the connection"
            head += got
        assert struct.unpack(">ii", head)[1] == 99  # the request after the run is answered

    expected = [(b"k%d" % i, b"v%d-%d" % (i, j)) for i in range(20) if i != 5 for j in range(3)]
    found: list[tuple[int, bytes | None, bytes]] = []

    def all_read() -> bool:
        nonlocal found
        with PartitionReader08.connect(cluster.target.connect, topic, 0) as reader:
            found = [(m.offset, m.key, m.payload) for m in reader.iter_messages(0)]
        return len(found) >= len(expected)

    wait_until(f"{len(expected)} messages of {topic}", all_read)
    assert found == [(offset, k, v) for offset, (k, v) in enumerate(expected)]
