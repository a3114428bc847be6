"""The Kafka 0.8 clients written by others, unchanged, decoded by logbroker.protocol.kafka08.

A recording peer (a socket server in this test, not a broker: one broker, one topic of one
partition, every answer built with our response encoders) keeps every frame each client
sends. Decoding them with our request decoders proves that these accept the real clients'
bytes; the clients accepting our answers (kcat listing the topic, kafka-python and
confluent-kafka reading back the committed offset) proves the same of the encoders.

    client                               flags                                   first request
    kcat 1.7.1 (Debian, librdkafka 2.0)  -X api.version.request=false            Metadata v0, all topics
                                         -X broker.version.fallback=0.8.2.2
    kafka-python 3.0.12                  api_version=(0, 8, 2)                   Metadata v0, its topic
    confluent-kafka 2.16.1 (librdkafka   api.version.request=False,              Metadata v0, all
      2.16.0)                            broker.version.fallback=0.8.2.2         topics or its own

Without the flags librdkafka's first request is ApiVersions (key 18) v3, which 0.8 does not
have: the listener closes the connection and librdkafka 2.x retries it, never falling back
on its own (`test_kcat_without_the_fallback_asks_api_versions_first`).
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from logbroker.protocol.kafka08 import apis
from logbroker.protocol.kafka08.apis import Request, UnsupportedApiError, decode_request
from logbroker.protocol.kafka08.fetch import FetchedPartition, FetchResponse, FetchResponseTopic
from logbroker.protocol.kafka08.group_offsets import (
    CommitPartitionV1,
    CommitResponseTopic,
    CommitResult,
    ConsumerMetadataRequest,
    ConsumerMetadataResponse,
    FetchedOffset,
    OffsetCommitResponse,
    OffsetFetchResponse,
    OffsetFetchResponseTopic,
)
from logbroker.protocol.kafka08.header import ApiKey, decode_header
from logbroker.protocol.kafka08.message_set import Record, iter_messages, validate
from logbroker.protocol.kafka08.metadata import (
    Broker,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)
from logbroker.protocol.kafka08.offsets import (
    OffsetsResponse,
    OffsetsResponseTopic,
    PartitionOffsets,
)
from logbroker.protocol.kafka08.produce import (
    ProduceResponse,
    ProduceResponseTopic,
    ProduceResult,
)

TOPIC = "probe"
STORED_OFFSET = 5  # what the peer answers every OffsetFetch with
KCAT = shutil.which("kcat")
FALLBACK = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]
CONFLUENT_FALLBACK = {"api.version.request": False, "broker.version.fallback": "0.8.2.2"}

needs_kcat = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (scripts/install-system-deps.sh)"
)


class RecordingPeer:
    """Keeps every request frame and answers it as a one-broker 0.8 cluster would."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def received(self) -> list[bytes]:
        with self._lock:
            return list(self.frames)

    def requests(self, *keys: ApiKey) -> list[Request]:
        """The frames received (of the `keys` given, else all), decoded."""
        frames = self.received()
        return [
            decode_request(f) for f in frames if not keys or decode_header(f)[0].api_key in keys
        ]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        with conn:
            try:
                while True:
                    (size,) = struct.unpack(">i", _read(conn, 4))
                    frame = _read(conn, size)
                    with self._lock:
                        self.frames.append(frame)
                    try:
                        request = decode_request(frame)
                    except UnsupportedApiError:
                        return  # what 0.8 does: close the connection
                    answer = self._answer(request)
                    if answer is not None:
                        conn.sendall(answer)
            except (EOFError, OSError):
                return

    def _answer(self, request: Request) -> bytes | None:
        body: Any = request.body
        key = request.api.key
        answer: Any
        if key == ApiKey.METADATA:
            partition = PartitionMetadata(0, 0, 0, (0,), (0,))
            answer = MetadataResponse(
                (Broker(0, "127.0.0.1", self.port),), (TopicMetadata(0, TOPIC, (partition,)),)
            )
        elif key == ApiKey.PRODUCE:
            if body.required_acks == 0:
                return None
            answer = ProduceResponse(
                tuple(
                    ProduceResponseTopic(
                        t.topic, tuple(ProduceResult(p.partition, 0, 0) for p in t.partitions)
                    )
                    for t in body.topics
                )
            )
        elif key == ApiKey.FETCH:
            answer = FetchResponse(
                tuple(
                    FetchResponseTopic(
                        t.topic,
                        tuple(FetchedPartition(p.partition, 0, 0, b"") for p in t.partitions),
                    )
                    for t in body.topics
                )
            )
        elif key == ApiKey.OFFSETS:
            answer = OffsetsResponse(
                tuple(
                    OffsetsResponseTopic(
                        t.topic, tuple(PartitionOffsets(p.partition, 0, (0,)) for p in t.partitions)
                    )
                    for t in body.topics
                )
            )
        elif key == ApiKey.CONSUMER_METADATA:
            answer = ConsumerMetadataResponse(0, 0, "127.0.0.1", self.port)
        elif key == ApiKey.OFFSET_COMMIT:
            answer = OffsetCommitResponse(
                tuple(
                    CommitResponseTopic(
                        t.topic, tuple(CommitResult(p.partition, 0) for p in t.partitions)
                    )
                    for t in body.topics
                )
            )
        else:
            answer = OffsetFetchResponse(
                tuple(
                    OffsetFetchResponseTopic(
                        t.topic, tuple(FetchedOffset(p, STORED_OFFSET, "", 0) for p in t.partitions)
                    )
                    for t in body.topics
                )
            )
        return apis.encode_response(request.api, request.header.correlation_id, answer)


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


@pytest.fixture
def peer() -> Iterator[RecordingPeer]:
    recording = RecordingPeer()
    yield recording
    recording.close()


def _kcat(
    peer: RecordingPeer, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    assert KCAT is not None
    return subprocess.run(
        [KCAT, "-b", f"127.0.0.1:{peer.port}", *args],
        input=stdin,
        capture_output=True,
        timeout=30,
    )


def _produced(request: Request) -> list[Record]:
    (topic,) = request.body.topics
    (partition,) = topic.partitions
    assert (topic.topic, partition.partition) == (TOPIC, 0)
    check = validate(partition.messages)
    assert check.error is None and not check.partial_tail
    return list(iter_messages(partition.messages))


# ---------------------------------------------------------------------------------------
# kcat (librdkafka 2.0.2 as Debian builds it)


@needs_kcat
def test_kcat_lists_metadata_with_the_fallback(peer: RecordingPeer) -> None:
    done = _kcat(peer, "-L", "-m", "5", *FALLBACK)
    assert done.returncode == 0, done.stderr.decode()
    first = peer.requests()[0]
    assert (first.header.api_key, first.header.api_version) == (ApiKey.METADATA, 0)
    assert first.header.client_id == "rdkafka"
    assert first.body == MetadataRequest(())  # every topic
    listing = done.stdout.decode()
    assert f'topic "{TOPIC}" with 1 partitions' in listing
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in listing


@needs_kcat
def test_kcat_without_the_fallback_asks_api_versions_first(peer: RecordingPeer) -> None:
    done = _kcat(peer, "-L", "-m", "1")
    assert done.returncode != 0
    frames = peer.received()
    header, _ = decode_header(frames[0])
    assert (header.api_key, header.api_version) == (18, 3)  # ApiVersions, a flexible version
    with pytest.raises(
        UnsupportedApiError, match=r"api key 18 \(unknown\) version 3 is not served"
    ):
        decode_request(frames[0])


@needs_kcat
@pytest.mark.parametrize(("codec", "attribute"), [("gzip", 1), ("snappy", 2)])
def test_kcat_produces_keyed_compressed_sets(
    peer: RecordingPeer, codec: str, attribute: int
) -> None:
    done = _kcat(
        peer,
        "-P",
        "-t",
        TOPIC,
        "-p",
        "0",
        "-K",
        ":",
        "-z",
        codec,
        "-X",
        "acks=-1",
        *FALLBACK,
        stdin=b"k1:v1\nk2:v2\n:v3\n",
    )
    assert done.returncode == 0, done.stderr.decode()
    produces = peer.requests(ApiKey.PRODUCE)  # one, or more when stdin came slower than linger.ms
    assert {(p.header.api_version, p.body.required_acks) for p in produces} == {(0, -1)}
    batches = [_produced(p) for p in produces]
    records = [r for batch in batches for r in batch]
    assert [(r.key, r.value, r.codec) for r in records] == [
        (b"k1", b"v1", attribute),
        (b"k2", b"v2", attribute),
        (b"", b"v3", attribute),  # kcat's empty key is empty, not null
    ]
    # librdkafka numbers a wrapper's inner messages 0.. and puts the wrapper at 0: the
    # leader rewrites both (message_set.assign_offsets).
    for batch in batches:
        assert [r.offset for r in batch] == list(range(len(batch)))
        assert {r.wrapper_offset for r in batch} == {0}


# ---------------------------------------------------------------------------------------
# kafka-python


def test_kafka_python_producer(peer: RecordingPeer) -> None:
    kafka = pytest.importorskip("kafka")
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{peer.port}",
        api_version=(0, 8, 2),
        acks="all",
        request_timeout_ms=2000,
        max_block_ms=2000,
    )
    try:
        producer.send(TOPIC, key=b"k1", value=b"v1", partition=0).get(timeout=5)
        producer.send(TOPIC, key=None, value=b"v2", partition=0).get(timeout=5)
    finally:
        producer.close(timeout=2)
    first = peer.requests()[0]
    assert (first.header.api_key, first.header.api_version) == (ApiKey.METADATA, 0)
    assert first.body == MetadataRequest((TOPIC,))
    produces = peer.requests(ApiKey.PRODUCE)
    assert {p.body.required_acks for p in produces} == {-1}
    records = [r for p in produces for r in _produced(p)]
    assert [(r.key, r.value) for r in records] == [(b"k1", b"v1"), (None, b"v2")]


def test_kafka_python_consumer_commits_and_fetches_offsets(peer: RecordingPeer) -> None:
    kafka = pytest.importorskip("kafka")
    from kafka.structs import OffsetAndMetadata

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{peer.port}",
        api_version=(0, 8, 2),
        group_id="g1",
        enable_auto_commit=False,
        request_timeout_ms=2000,
    )
    tp = kafka.TopicPartition(TOPIC, 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 3)
        consumer.commit({tp: OffsetAndMetadata(4, "meta", -1)})
        assert consumer.committed(tp) == STORED_OFFSET  # our OffsetFetch answer, read back
    finally:
        consumer.close()
    (coordinator,) = peer.requests(ApiKey.CONSUMER_METADATA)
    assert coordinator.body == ConsumerMetadataRequest("g1")
    (commit,) = peer.requests(ApiKey.OFFSET_COMMIT)
    assert commit.header.api_version == 1  # broker-stored offsets, 0.8.2's
    assert (commit.body.group, commit.body.generation_id, commit.body.consumer_id) == ("g1", -1, "")
    assert commit.body.topics[0].partitions == (CommitPartitionV1(0, 4, -1, "meta"),)
    (fetch,) = peer.requests(ApiKey.OFFSET_FETCH)
    assert fetch.header.api_version == 1
    assert [(t.topic, t.partitions) for t in fetch.body.topics] == [(TOPIC, (0,))]


# ---------------------------------------------------------------------------------------
# confluent-kafka (its own librdkafka)


def test_confluent_producer(peer: RecordingPeer) -> None:
    ck = pytest.importorskip("confluent_kafka")
    producer = ck.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{peer.port}",
            "acks": "all",
            "log_level": 0,
            **CONFLUENT_FALLBACK,
        }
    )
    producer.produce(TOPIC, key=b"k1", value=b"v1", partition=0)
    producer.produce(TOPIC, value=b"v2", partition=0)
    assert producer.flush(10) == 0
    first = peer.requests()[0]
    assert (first.header.api_key, first.header.api_version) == (ApiKey.METADATA, 0)
    # librdkafka's first refresh, at connect, asks for every topic or for those it already
    # knows: which one comes first is a race between its threads.
    assert first.body in (MetadataRequest(()), MetadataRequest((TOPIC,)))
    produces = peer.requests(ApiKey.PRODUCE)
    assert {(p.header.api_version, p.body.required_acks) for p in produces} == {(0, -1)}
    records = [r for p in produces for r in _produced(p)]
    assert [(r.key, r.value) for r in records] == [(b"k1", b"v1"), (None, b"v2")]


def test_confluent_consumer_commits_and_fetches_offsets(peer: RecordingPeer) -> None:
    ck = pytest.importorskip("confluent_kafka")
    consumer = ck.Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{peer.port}",
            "group.id": "g2",
            "enable.auto.commit": False,
            "log_level": 0,
            **CONFLUENT_FALLBACK,
        }
    )
    try:
        consumer.assign([ck.TopicPartition(TOPIC, 0, 3)])
        consumer.commit(offsets=[ck.TopicPartition(TOPIC, 0, 7)], asynchronous=False)
        (committed,) = consumer.committed([ck.TopicPartition(TOPIC, 0)], timeout=5)
        assert committed.offset == STORED_OFFSET
        deadline = time.monotonic() + 10  # its fetcher starts on its own thread: wait for it
        while not peer.requests(ApiKey.FETCH) and time.monotonic() < deadline:
            consumer.poll(0.1)
    finally:
        consumer.close()
    assert {r.body.group for r in peer.requests(ApiKey.CONSUMER_METADATA)} == {"g2"}
    (commit,) = peer.requests(ApiKey.OFFSET_COMMIT)
    assert commit.header.api_version == 1
    assert (commit.body.generation_id, commit.body.consumer_id) == (-1, "")
    assert commit.body.topics[0].partitions == (CommitPartitionV1(0, 7, -1, ""),)
    assert [r.header.api_version for r in peer.requests(ApiKey.OFFSET_FETCH)] == [1]
    fetches = peer.requests(ApiKey.FETCH)
    assert fetches, "the assigned consumer fetches"
    fetch = fetches[0].body
    assert (fetch.replica_id, fetch.topics[0].partitions[0].fetch_offset) == (-1, 3)
