"""Kafka 0.8 clients written by others, unchanged, against logbroker's Kafka 0.8 listener.

Three real brokers (port.08 set) on a real ZooKeeper, 0.8-format topics replicated three
times, and the clients as their users run them:

    kcat 1.7.1 (Debian's, librdkafka 2.0)   -X api.version.request=false
                                            -X broker.version.fallback=0.8.2.2
    kafka-python 3.0.12                     api_version=(0, 8, 2)
    confluent-kafka 2.16.1 (librdkafka 2.16) api.version.request=False,
                                            broker.version.fallback=0.8.2.2

What they rely on: metadata (brokers, leaders, replicas, ISR), keyed produces with gzip and
snappy at acks 1 and -1, consuming from the beginning, from an offset and from the end, a
group's offsets committed and read back (across a broker's restart), every message a leader
killed -9 acknowledged read back in order with its key, and malformed requests answered by
closing the connection while the broker serves everyone else and stores nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logbroker.client.cluster import Cluster
from logbroker.client.connection import BrokerConnection
from logbroker.protocol.errors import WrongPartitionError, error_for_code
from logbroker.protocol.kafka08.apis import encode_request
from logbroker.protocol.kafka08.metadata import METADATA_V0, MetadataRequest
from logbroker.protocol.requests import FetchRequest
from logbroker.protocol.responses import decode_fetch_response
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget, ZooKeeperServer, find_free_port

KCAT = shutil.which("kcat")
FALLBACK = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]
CONFLUENT = {"api.version.request": False, "broker.version.fallback": "0.8.2.2"}

pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (scripts/install-system-deps.sh)"
)


def wait_until(what: str, check: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Kafka08Cluster:
    """Three brokers with a 0.8 listener each, on fixed ports (a restart keeps them)."""

    def __init__(self, directory: Path, target: ZkTarget, **settings: object) -> None:
        self.target = target
        self.ports08 = [find_free_port() for _ in range(3)]
        self.brokers = [
            BrokerProcess(
                directory / f"broker-{i}",
                broker_id=i,
                zk_connect=target.connect,
                overrides={
                    "port.08": str(self.ports08[i]),
                    "zk.sessiontimeout.ms": "2000",
                    "replica.fetch.wait.max.ms": "100",
                    **{k.replace("_", "."): str(v) for k, v in settings.items()},
                },
            )
            for i in range(3)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports08)

    def start(self) -> Kafka08Cluster:
        for broker in self.brokers:
            broker.start()
        return self

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop(timeout=15)

    def create(self, topic: str, partitions: int = 3, message_format: str = "0.8") -> None:
        with Cluster(self.target.connect) as cluster:
            cluster.create_replicated_topic(topic, partitions, 3, message_format=message_format)
        # every listener knows the topic's leaders (its metadata comes through watches)
        for port in self.ports08 if message_format == "0.8" else ():
            wait_until(f"{topic} in the metadata of :{port}", lambda p=port: _leaders(p, topic))

    def kcat(self, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
        run = subprocess.run(
            [KCAT or "kcat", "-b", self.bootstrap, *FALLBACK, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert run.returncode == 0, f"kcat {' '.join(args)}: {run.stderr}"
        return run.stdout

    def consume(self, topic: str, count: int, *args: str, fmt: str = "%p %o %k %s\n") -> str:
        """kcat -C ... -e until it prints `count` messages: with acks 1 the followers may
        not hold the last ones yet, and consumers see only what the whole ISR holds."""
        out = ""

        def all_there() -> bool:
            nonlocal out
            out = self.kcat("-C", "-t", topic, *args, "-e", "-f", fmt)
            return len(out.splitlines()) >= count

        wait_until(f"{count} messages of {topic} below the high watermark", all_there)
        return out

    def replica_bytes(self, broker: BrokerProcess, topic: str, partition: int = 0) -> bytes:
        directory = Path(broker.log_dir) / f"{topic}-{partition}"
        return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))

    def leaders(self, topic: str) -> dict[int, int]:
        with Cluster(self.target.connect) as cluster:
            return {p.partition: p.leader for p in cluster.describe_replicated(topic)}


def _leaders(port: int, topic: str) -> bool:
    """Whether the broker on `port` answers Metadata with a leader for every partition."""
    from logbroker.protocol.kafka08.apis import decode_response

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_request(METADATA_V0, MetadataRequest((topic,)), 1, "test"))
        (size,) = struct.unpack(">i", _recv(sock, 4))
        _, answer = decode_response(METADATA_V0, _recv(sock, size))
    [found] = answer.topics
    return found.error_code == 0 and all(p.error_code == 0 for p in found.partitions)


def _recv(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kafka08Cluster]:
    target = zookeeper.create_chroot(f"/kafka08-{os.getpid()}")
    started = Kafka08Cluster(tmp_path_factory.mktemp("kafka08"), target).start()
    try:
        yield started
    finally:
        started.stop()


def lines(topic_out: str) -> list[tuple[str, str, str, str]]:
    """kcat -f '%p %o %k %s\\n' output: (partition, offset, key, value) per message."""
    return [tuple(line.split(" ", 3)) for line in topic_out.splitlines() if line]  # type: ignore[misc]


def test_kcat_lists_the_brokers_and_the_leaders(cluster: Kafka08Cluster) -> None:
    cluster.create("listed")
    out = cluster.kcat("-L", "-t", "listed")
    assert "3 brokers:" in out
    for i, port in enumerate(cluster.ports08):
        assert f"broker {i} at 127.0.0.1:{port}" in out
    leaders = cluster.leaders("listed")
    for partition, leader in leaders.items():
        assert f"partition {partition}, leader {leader}, replicas: " in out


@pytest.mark.parametrize(("codec", "acks"), [("gzip", "1"), ("snappy", "all")])
def test_kcat_produces_keyed_lines_and_consumes_them_from_the_start_an_offset_and_the_end(
    cluster: Kafka08Cluster, codec: str, acks: str
) -> None:
    topic = f"kcat-{codec}"
    cluster.create(topic)
    sent = [f"user-{i % 7}:event {i}" for i in range(300)]
    cluster.kcat(
        "-P", "-t", topic, "-K", ":", "-z", codec, "-X", f"acks={acks}", stdin="\n".join(sent)
    )
    got = lines(cluster.consume(topic, len(sent), "-o", "beginning"))
    assert sorted(f"{k}:{v}" for _, _, k, v in got) == sorted(sent)
    by_key: dict[str, list[str]] = {}
    for partition, offset, key, value in got:
        by_key.setdefault(key, []).append(value)
        assert int(offset) >= 0 and partition in ("0", "1", "2")
    for key, values in by_key.items():  # one key, one partition, the order it was sent in
        assert values == [s.split(":", 1)[1] for s in sent if s.startswith(key + ":")]
    # logical offsets: the n-th message of a partition has offset n
    for p in ("0", "1", "2"):
        assert [int(o) for q, o, _, _ in got if q == p] == list(
            range(sum(1 for q, *_ in got if q == p))
        )
    # from an offset (inside a compressed wrapper: the client skips what comes before it)
    first = [g for g in got if g[0] == "0"]
    out = cluster.kcat("-C", "-t", topic, "-p", "0", "-o", "3", "-e", "-f", "%o %k %s\n")
    assert out.splitlines() == [f"{o} {k} {v}" for _, o, k, v in first[3:]]
    # from the end: the last two of the partition
    out = cluster.kcat("-C", "-t", topic, "-p", "0", "-o", "-2", "-e", "-f", "%o %k %s\n")
    assert out.splitlines() == [f"{o} {k} {v}" for _, o, k, v in first[-2:]]


def test_kafka_python_produces_with_keys_at_acks_all_and_commits_a_groups_offsets(
    cluster: Kafka08Cluster,
) -> None:
    kafka = pytest.importorskip("kafka")
    from kafka.structs import OffsetAndMetadata, TopicPartition

    cluster.create("kp")
    producer = kafka.KafkaProducer(
        bootstrap_servers=cluster.bootstrap,
        api_version=(0, 8, 2),
        acks="all",
        compression_type="gzip",
    )
    sent = {}
    for i in range(60):
        meta = producer.send("kp", key=f"k{i % 5}".encode(), value=f"v{i}".encode()).get(30)
        sent[(meta.partition, meta.offset)] = (f"k{i % 5}".encode(), f"v{i}".encode())
    producer.close()
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        api_version=(0, 8, 2),
        group_id="kp-readers",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    partitions = [TopicPartition("kp", p) for p in range(3)]
    consumer.assign(partitions)
    for tp in partitions:
        consumer.seek(tp, 0)
    got = {(m.partition, m.offset): (m.key, m.value) for m in consumer}
    assert got == sent
    ends = {tp: consumer.position(tp) for tp in partitions}
    consumer.commit({tp: OffsetAndMetadata(end, "", -1) for tp, end in ends.items()})
    consumer.close()
    # read back through a broker restarted meanwhile (the offsets live in ZooKeeper)
    cluster.brokers[1].stop()
    cluster.brokers[1].start()
    reader = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, api_version=(0, 8, 2), group_id="kp-readers"
    )
    try:
        assert {tp: reader.committed(tp) for tp in partitions} == ends
    finally:
        reader.close()


def test_confluent_kafka_produces_and_consumes_with_the_fallback(cluster: Kafka08Cluster) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    cluster.create("ck")
    delivered: list[tuple[int, int]] = []
    producer = confluent.Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "compression.codec": "snappy"}
        | CONFLUENT
    )
    for i in range(50):
        producer.produce(
            "ck",
            key=f"key-{i % 3}",
            value=f"value-{i}",
            on_delivery=lambda err, msg: (
                delivered.append((msg.partition(), msg.offset()))
                if err is None
                else pytest.fail(str(err))
            ),
        )
    assert producer.flush(30) == 0 and len(delivered) == 50
    consumer = confluent.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "ck-readers",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        | CONFLUENT
    )
    consumer.assign([confluent.TopicPartition("ck", p, 0) for p in range(3)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 50 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.key().decode(), msg.value().decode(), msg.partition(), msg.offset()))
    consumer.commit(asynchronous=False)
    committed = consumer.committed([confluent.TopicPartition("ck", p) for p in range(3)], 10)
    consumer.close()
    assert sorted(v for _, v, _, _ in got) == sorted(f"value-{i}" for i in range(50))
    assert sorted((p, o) for _, _, p, o in got) == sorted(delivered)
    ends = {p: 1 + max(o for _, _, q, o in got if q == p) for p in {q for *_, q, _ in got}}
    assert {tp.partition: tp.offset for tp in committed if tp.partition in ends} == ends


def test_each_port_serves_its_own_format_and_says_so_for_the_other(
    cluster: Kafka08Cluster,
) -> None:
    cluster.create("old-style", 1, message_format="0.7")
    out = cluster.kcat("-L", "-t", "old-style")
    assert 'topic "old-style" with 0 partitions: Broker: Unknown topic or partition' in out
    cluster.create("new-style", 1)
    leader = cluster.brokers[cluster.leaders("new-style")[0]]
    with BrokerConnection(*leader.address) as conn:
        answer = decode_fetch_response(conn.request(FetchRequest("new-style", 0, 0, 1024)))
    assert answer.error == 3  # UnknownTopicOrPartition, as 0.7 clients know it
    assert isinstance(error_for_code(answer.error), WrongPartitionError)


def _frame(api_key: int, version: int, body: bytes, client: str = "evil") -> bytes:
    head = struct.pack(">hhih", api_key, version, 7, len(client)) + client.encode()
    return struct.pack(">i", len(head) + len(body)) + head + body


def test_malformed_requests_close_the_connection_and_nothing_is_stored(
    cluster: Kafka08Cluster,
) -> None:
    cluster.create("guarded", 1)
    leader_id = cluster.leaders("guarded")[0]
    leader, port = cluster.brokers[leader_id], cluster.ports08[leader_id]
    cluster.kcat("-P", "-t", "guarded", "-p", "0", stdin="kept\n")
    start = len(leader.log_since())
    produce_body = struct.pack(">hi", 1, 1000) + struct.pack(">i", 1)  # acks 1, one topic ...
    cases = {
        # a Produce whose topic array is cut off after its count
        "cut": _frame(0, 0, produce_body),
        # a size under the header's
        "size": struct.pack(">i", 3) + b"\x00\x00\x00",
        # ApiVersions (18), which 0.8 does not have
        "key": _frame(18, 0, b""),
        # Metadata asking for 2**31-1 topics in a few bytes
        "count": _frame(3, 0, struct.pack(">i", 2**31 - 1) + b"\x00\x01x"),
    }
    for name, frame in cases.items():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(frame)
            assert sock.recv(64) == b"", f"{name}: answered instead of closed"
    said = leader.log_since(start)
    assert "closing connection from" in said
    assert "api key 18 (unknown) version 0 is not served" in said
    assert "0.8 request size 3 is outside" in said
    # the broker serves on, and holds only what was produced before
    out = cluster.kcat("-C", "-t", "guarded", "-p", "0", "-o", "beginning", "-e", "-f", "%s\n")
    assert out.splitlines() == ["kept"]


def test_a_leader_killed_under_kcat_at_acks_all_loses_no_acknowledged_message(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    cluster = Kafka08Cluster(
        tmp_path, zookeeper.create_chroot(f"/kafka08-kill-{os.getpid()}")
    ).start()
    try:
        cluster.create("orders", 1)
        victim = cluster.leaders("orders")[0]
        sent = [f"order-{i % 10}:payment {i}" for i in range(3000)]
        # the first third acknowledged by the whole ISR before anything happens: the
        # followers copy the leader's 0.8 entries (logical offsets) byte for byte
        cluster.kcat(
            "-P", "-t", "orders", "-K", ":", "-X", "acks=all", stdin="\n".join(sent[:1000])
        )
        wait_until(
            "every replica holding the first third",
            lambda: len({cluster.replica_bytes(b, "orders") for b in cluster.brokers}) == 1,
        )
        producer = subprocess.Popen(
            [KCAT or "kcat", "-b", cluster.bootstrap, *FALLBACK, "-P", "-t", "orders", "-K", ":",
             "-X", "acks=all", "-X", "linger.ms=5", "-X", "message.timeout.ms=120000"],
            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert producer.stdin is not None
        for i, line in enumerate(sent[1000:]):
            producer.stdin.write(line + "\n")
            if i == 1000:
                producer.stdin.flush()
                time.sleep(0.5)  # on their way, part of them acknowledged
                os.kill(cluster.brokers[victim].pid, signal.SIGKILL)  # type: ignore[arg-type]
        producer.stdin.close()
        assert producer.wait(180) == 0, producer.stderr.read() if producer.stderr else ""
        wait_until("a new leader", lambda: cluster.leaders("orders")[0] not in (victim, -1))
        got = cluster.consume("orders", len(sent), "-o", "beginning", fmt="%k:%s\n").splitlines()
        # every line kcat had acknowledged (all: it exited 0), in the order it sent them
        # (a retry after a lost answer may store a line twice: at least once)
        assert set(got) == set(sent)
        deduplicated = list(dict.fromkeys(got))
        assert deduplicated == sent
    finally:
        cluster.stop()
