"""Kafka 0.7 wire conformance of a real broker subprocess, over raw sockets.

Reference: docs/protocol.md (framing, 0.7's five requests, error codes, visibility) and
the layouts atop logbroker.protocol.message and message_set (0.7.2's `api/` and `message/`),
plus our extensions PRODUCE_ACK (5), FETCH_WAIT (6) and METADATA (7). Every frame under
test is packed here field by field (one struct.pack and one comment per field), never with
logbroker's own encoder, so a symmetric bug in encoder and decoder cannot hide.

One broker serves the whole module (num.partitions=2, topic.partition.count.map
"five:5,three:3", max.message.size=1000); each test writes to its own topic. A log becomes
visible to readers as soon as it is appended, and a connection handles its requests in
order, so a fetch sent after a produce on the same socket sees that produce.
"""

from __future__ import annotations

import gzip
import re
import socket
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import cramjam
import pytest

from logbroker.protocol.message_set import build_message_set, iter_messages
from logbroker.stack.broker import BrokerProcess

# Request type ids (api/RequestKeys.scala, then our extensions).
PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS = 0, 1, 2, 3, 4
PRODUCE_ACK, FETCH_WAIT, METADATA = 5, 6, 7
LATEST, EARLIEST = -1, -2

# ---------------------------------------------------------------------------------------
# Messages, byte by byte (§4).


def message0(payload: bytes) -> bytes:
    """One magic-0 message set entry."""
    return (
        struct.pack(">i", 1 + 4 + len(payload))  # entry size N: magic, CRC, payload
        + struct.pack(">B", 0)  # magic 0
        + struct.pack(">I", zlib.crc32(payload))  # CRC32 of the payload only
        + payload  # payload
    )


def message1(payload: bytes, codec: int = 0) -> bytes:
    """One magic-1 message set entry; `codec` goes in the attributes' low 2 bits."""
    return (
        struct.pack(">i", 1 + 1 + 4 + len(payload))  # entry size N: magic, attrs, CRC, payload
        + struct.pack(">B", 1)  # magic 1
        + struct.pack(">B", codec)  # attributes: compression codec
        + struct.pack(">I", zlib.crc32(payload))  # CRC32 of the payload only
        + payload  # payload
    )


def gzip_wrapper(inner: bytes) -> bytes:
    """A gzip-compressed set: one magic-1 wrapper whose payload is the gzipped inner set."""
    return message1(gzip.compress(inner, mtime=0), codec=1)


def snappy_wrapper(inner: bytes) -> bytes:
    """A snappy-compressed set in snappy-java 1.0.4.1 stream framing (§4.1)."""
    block = bytes(cramjam.snappy.compress_raw(inner))
    framed = (
        b"\x82SNAPPY\x00"  # snappy-java magic
        + struct.pack(">i", 1)  # version
        + struct.pack(">i", 1)  # minimum compatible version
        + struct.pack(">i", len(block))  # compressed length of the one block
        + block  # raw snappy block
    )
    return message1(framed, codec=2)


# ---------------------------------------------------------------------------------------
# Requests, byte by byte (§1, §2 and the extensions).


def frame(request_type: int, body: bytes) -> bytes:
    return (
        struct.pack(">i", 2 + len(body))  # size: the bytes after this field
        + struct.pack(">h", request_type)  # request type
        + body
    )


def short_string(topic: str | bytes) -> bytes:
    raw = topic.encode() if isinstance(topic, str) else topic
    return struct.pack(">h", len(raw)) + raw  # int16 byte length | UTF-8 bytes


def produce_body(topic: str | bytes, partition: int, messages: bytes) -> bytes:
    return (
        short_string(topic)  # topic
        + struct.pack(">i", partition)  # partition (-1 = random)
        + struct.pack(">i", len(messages))  # message set size
        + messages  # message set
    )


def fetch_body(topic: str | bytes, partition: int, offset: int, max_size: int) -> bytes:
    return (
        short_string(topic)  # topic
        + struct.pack(">i", partition)  # partition
        + struct.pack(">q", offset)  # offset: a byte position
        + struct.pack(">i", max_size)  # max size: bytes of log data
    )


def produce(topic: str | bytes, partition: int, messages: bytes) -> bytes:
    return frame(PRODUCE, produce_body(topic, partition, messages))


def fetch(topic: str | bytes, partition: int, offset: int, max_size: int) -> bytes:
    return frame(FETCH, fetch_body(topic, partition, offset, max_size))


def multifetch(fetches: Sequence[tuple[str, int, int, int]]) -> bytes:
    return frame(
        MULTIFETCH,
        struct.pack(">h", len(fetches))  # count
        + b"".join(fetch_body(*f) for f in fetches),  # FETCH bodies
    )


def multiproduce(produces: Sequence[tuple[str, int, bytes]]) -> bytes:
    return frame(
        MULTIPRODUCE,
        struct.pack(">h", len(produces))  # count
        + b"".join(produce_body(*p) for p in produces),  # PRODUCE bodies
    )


def offsets(topic: str | bytes, partition: int, time_ms: int, max_offsets: int) -> bytes:
    return frame(
        OFFSETS,
        short_string(topic)  # topic
        + struct.pack(">i", partition)  # partition
        + struct.pack(">q", time_ms)  # time: -1 latest, -2 earliest, else ms
        + struct.pack(">i", max_offsets),  # max number of offsets
    )


def produce_ack(produces: Sequence[tuple[str, int, bytes]], fsync: bool = False) -> bytes:
    return frame(
        PRODUCE_ACK,
        struct.pack(">b", 1 if fsync else 0)  # flags: bit 0 = fsync
        + struct.pack(">h", len(produces))  # count
        + b"".join(produce_body(*p) for p in produces),  # PRODUCE bodies
    )


def fetch_wait(max_wait_ms: int, min_bytes: int, fetches: Sequence[tuple[str, int, int, int]]):
    return frame(
        FETCH_WAIT,
        struct.pack(">i", max_wait_ms)  # max wait ms
        + struct.pack(">i", min_bytes)  # min bytes
        + struct.pack(">h", len(fetches))  # count
        + b"".join(fetch_body(*f) for f in fetches),  # FETCH bodies
    )


def metadata(topics: Sequence[str]) -> bytes:
    return frame(
        METADATA,
        struct.pack(">h", len(topics))  # count (0 = every topic)
        + b"".join(short_string(t) for t in topics),  # topics
    )


# ---------------------------------------------------------------------------------------
# Responses, parsed by hand.


def connect(broker: BrokerProcess) -> socket.socket:
    return socket.create_connection(broker.address, timeout=10)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    assert size >= 2, size
    return recv_exact(sock, size)


def read_fetch(sock: socket.socket) -> tuple[int, bytes]:
    """FETCH response: (error code, raw log data)."""
    body = read_frame(sock)
    (error,) = struct.unpack_from(">h", body, 0)
    return error, body[2:]


def split_sets(body: bytes) -> list[tuple[int, bytes]]:
    """The sets of a MULTIFETCH / FETCH_WAIT response body (after the outer size)."""
    (outer,) = struct.unpack_from(">h", body, 0)
    assert outer == 0, f"outer error code {outer}"
    sets, pos = [], 2
    while pos < len(body):
        size, error = struct.unpack_from(">ih", body, pos)
        sets.append((error, body[pos + 6 : pos + 4 + size]))
        pos += 4 + size
    assert pos == len(body), "set sizes do not add up to the outer size"
    return sets


def read_multifetch(sock: socket.socket) -> list[tuple[int, bytes]]:
    return split_sets(read_frame(sock))


def read_offsets(sock: socket.socket) -> list[int]:
    body = read_frame(sock)
    error, count = struct.unpack_from(">hi", body, 0)
    assert error == 0
    assert len(body) == 6 + 8 * count
    return list(struct.unpack_from(f">{count}q", body, 6))


def read_acks(sock: socket.socket) -> list[tuple[str, int, int, int, int]]:
    """PRODUCE_ACK response: (topic, partition, error, offset, next offset) per produce."""
    body = read_frame(sock)
    error, count = struct.unpack_from(">hh", body, 0)
    assert error == 0
    results, pos = [], 4
    for _ in range(count):
        (n,) = struct.unpack_from(">h", body, pos)
        topic = body[pos + 2 : pos + 2 + n].decode()
        partition, err, offset, next_offset = struct.unpack_from(">ihqq", body, pos + 2 + n)
        results.append((topic, partition, err, offset, next_offset))
        pos += 2 + n + 4 + 2 + 8 + 8
    assert pos == len(body)
    return results


def read_metadata(sock: socket.socket) -> tuple[int, dict[str, tuple[int, list[tuple]]]]:
    """METADATA response: broker id, {topic: (error, [(partition, earliest, latest, size)])}."""
    body = read_frame(sock)
    error, broker_id, count = struct.unpack_from(">hih", body, 0)
    assert error == 0
    topics, pos = {}, 8
    for _ in range(count):
        (n,) = struct.unpack_from(">h", body, pos)
        topic = body[pos + 2 : pos + 2 + n].decode()
        pos += 2 + n
        err, nparts = struct.unpack_from(">hi", body, pos)
        pos += 6
        parts = []
        for _ in range(nparts):
            parts.append(struct.unpack_from(">iqqq", body, pos))
            pos += 28
        topics[topic] = (err, parts)
    assert pos == len(body)
    return broker_id, topics


def wait_for_log(broker: BrokerProcess, pattern: str, timeout: float = 10.0) -> str:
    """The first broker log line matching `pattern`, polling until it appears."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while True:
        for line in broker.log_since().splitlines():
            if regex.search(line):
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no broker log line matches {pattern!r}")
        time.sleep(0.02)


def client_address(sock: socket.socket) -> str:
    return rf"127\.0\.0\.1:{sock.getsockname()[1]}\b"


# ---------------------------------------------------------------------------------------
# Fixtures.


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("conformance"),
        overrides={
            "num.partitions": "2",
            "topic.partition.count.map": "five:5,three:3",
            "max.message.size": "1000",
            "connection.log.interval.ms": "0",  # every refusal logged: tests look for each
        },
    )
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return "c." + re.sub(r"[^A-Za-z0-9_.]+", "_", request.node.name)[:120]


@pytest.fixture
def sock(broker: BrokerProcess) -> Iterator[socket.socket]:
    s = connect(broker)
    yield s
    s.close()


def partition_dir(broker: BrokerProcess, topic: str, partition: int) -> Path:
    return broker.log_dir / f"{topic}-{partition}"


# ---------------------------------------------------------------------------------------
# §1: framing; PRODUCE has no response; pipelining.


def test_produce_gets_no_response(sock: socket.socket, topic: str) -> None:
    data = message0(b"hello") + message1(b"world")
    sock.sendall(produce(topic, 0, data) + fetch(topic, 0, 0, 1000))
    # The first bytes on the socket are the FETCH response: size, error, the data.
    assert recv_exact(sock, 4) == struct.pack(">i", 2 + len(data))
    assert recv_exact(sock, 2) == struct.pack(">h", 0)
    assert recv_exact(sock, len(data)) == data
    # Nor did anything for the produce arrive after it: the next bytes answer OFFSETS.
    sock.sendall(produce(topic, 0, message0(b"again")) + offsets(topic, 0, LATEST, 1))
    assert read_offsets(sock) == [len(data) + len(message0(b"again"))]


def test_multiproduce_gets_no_response_and_appends_each_set(
    sock: socket.socket, topic: str
) -> None:
    a, b, c = message0(b"a"), message1(b"bb"), gzip_wrapper(message1(b"c") + message1(b"cc"))
    sock.sendall(multiproduce([(topic, 0, a), (topic, 1, b), (topic, 0, c)]))
    sock.sendall(multifetch([(topic, 0, 0, 1000), (topic, 1, 0, 1000)]))
    assert read_multifetch(sock) == [(0, a + c), (0, b)]


def test_pipelined_requests_are_answered_in_order(sock: socket.socket, topic: str) -> None:
    big = b"".join(message1(b"%04d" % i * 50) for i in range(40))  # sent with sendfile
    requests = [
        produce(topic, 0, big),  # no response
        fetch(topic, 0, 0, 100000),  # the whole set
        offsets(topic, 0, LATEST, 10),  # [end, 0]
        fetch(topic, 0, len(big) + 1, 100),  # error 1, no data
        multifetch([(topic, 0, 10, 20), (topic, 1, 0, 10)]),  # a slice; an empty set
    ]
    sock.sendall(b"".join(requests))  # five requests in one send
    assert read_fetch(sock) == (0, big)
    assert read_offsets(sock) == [len(big), 0]
    assert read_fetch(sock) == (1, b"")
    assert read_multifetch(sock) == [(0, big[10:30]), (0, b"")]


def test_half_closed_client_gets_every_answer(broker: BrokerProcess, topic: str) -> None:
    big = b"".join(message1(b"%05d" % i * 40) for i in range(2000))  # 412 KB: sendfile
    with connect(broker) as s:
        s.sendall(produce(topic, 0, big) + fetch(topic, 0, 0, 10_000_000))
        s.sendall(offsets(topic, 0, LATEST, 1) + fetch(topic, 0, 5, 100))
        s.shutdown(socket.SHUT_WR)  # nothing more to send; the answers must still come
        assert read_fetch(s) == (0, big)
        assert read_offsets(s) == [len(big)]
        assert read_fetch(s) == (0, big[5:105])
        assert s.recv(10) == b""  # and then the broker closes


def test_produce_then_close_is_still_appended(broker: BrokerProcess, topic: str) -> None:
    data = message0(b"fire and forget")
    with connect(broker) as s:  # a 0.7 producer may send and hang up at once
        s.sendall(produce(topic, 0, data))
    deadline = time.monotonic() + 10
    with connect(broker) as s:
        while True:
            s.sendall(fetch(topic, 0, 0, 1000))
            got = read_fetch(s)
            if got != (0, b"") or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    assert got == (0, data)


# ---------------------------------------------------------------------------------------
# §4: message sets are stored and served verbatim.

MIXED = {
    "magic0": message0(b"zero") + message0(b"") + message0(b"\x00\xff" * 100),
    "magic1": message1(b"one") + message1(b"") + message1(bytes(range(256))),
    "gzip": gzip_wrapper(message1(b"g1") + message1(b"g2") + message0(b"g3")),
    "snappy": snappy_wrapper(message1(b"s1") + message1(b"s2" * 300)),
    "snappy-raw-block": message1(  # no snappy-java header: read as one raw block
        bytes(cramjam.snappy.compress_raw(message1(b"raw"))), codec=2
    ),
    "built": build_message_set([b"x", b"yy"], codec=1) + build_message_set([b"z"], codec=2),
}


@pytest.mark.parametrize("kind", sorted(MIXED))
def test_produced_sets_are_stored_and_fetched_verbatim(
    broker: BrokerProcess, sock: socket.socket, topic: str, kind: str
) -> None:
    data = MIXED[kind]
    sock.sendall(produce(topic, 0, data) + produce(topic, 0, data) + fetch(topic, 0, 0, 100000))
    assert read_fetch(sock) == (0, data + data)
    segment = partition_dir(broker, topic, 0) / "00000000000000000000.kafka"
    assert segment.read_bytes() == data + data  # the file holds exactly the bytes sent
    list(iter_messages(data + data))  # and they are valid through compression


def test_all_kinds_in_one_set_and_offsets_are_byte_positions(
    sock: socket.socket, topic: str
) -> None:
    data = b"".join(MIXED[k] for k in sorted(MIXED))
    sock.sendall(produce(topic, 1, data))
    position = 0
    for kind in sorted(MIXED):  # each kind's first entry starts at its byte position
        entry = MIXED[kind]
        sock.sendall(fetch(topic, 1, position, len(entry)))
        assert read_fetch(sock) == (0, entry)
        position += len(entry)
    sock.sendall(offsets(topic, 1, LATEST, 1))
    assert read_offsets(sock) == [position]


def test_partial_trailing_entry_is_dropped_on_produce(sock: socket.socket, topic: str) -> None:
    whole = message1(b"whole") + message0(b"also whole")
    cut = message1(b"cut off")[:9]  # size, magic, attributes and part of the CRC
    sock.sendall(produce(topic, 0, whole + cut) + fetch(topic, 0, 0, 1000))
    assert read_fetch(sock) == (0, whole)


def test_non_ascii_topic_length_counts_bytes(
    broker: BrokerProcess, sock: socket.socket, topic: str
) -> None:
    # 2.1: the int16 length is the UTF-8 byte count. Such a name is not a legal topic (ASCII
    # only, protocol/topics.py), so a FETCH of it is answered Unknown (-1), as 0.7 answered an
    # illegal name; a broker that counted characters would misread the frame and close.
    name = "c.tøpic-ü-東京"
    data = message1(b"data")
    sock.sendall(produce(topic, 0, data) + fetch(name, 0, 0, 1000) + fetch(topic, 0, 0, 1000))
    assert read_fetch(sock) == (-1, b"")
    assert read_fetch(sock) == (0, data)
    assert not partition_dir(broker, name, 0).exists()


# ---------------------------------------------------------------------------------------
# §2.3, §4.2, §5: FETCH.

THREE = [message1(b"%02d" % i * 10) for i in range(3)]  # 3 entries of 30 bytes
THREE_BYTES = b"".join(THREE)


@pytest.mark.parametrize(
    ("offset", "max_size", "expected"),
    [
        (0, 100000, THREE_BYTES),  # all there is
        (0, 90, THREE_BYTES),  # exactly all
        (0, 75, THREE_BYTES[:75]),  # the last message cut off, and sent anyway
        (30, 1000, THREE_BYTES[30:]),  # from the second message
        (30, 45, THREE_BYTES[30:75]),
        (0, 10, THREE_BYTES[:10]),  # not even the first message fits: 10 bytes of it
        (7, 10, THREE_BYTES[7:17]),  # not on a message boundary: raw bytes all the same
        (0, 0, b""),  # nothing asked, nothing sent, no error
        (89, 100, THREE_BYTES[89:]),
        (90, 100, b""),  # offset == end: an empty set, error 0
    ],
)
def test_fetch_returns_min_of_max_size_and_available(
    sock: socket.socket, topic: str, offset: int, max_size: int, expected: bytes
) -> None:
    sock.sendall(produce(topic, 0, THREE_BYTES) + fetch(topic, 0, offset, max_size))
    assert read_fetch(sock) == (0, expected)


@pytest.mark.parametrize("offset", [91, 1000, 2**40, 2**63 - 1, -1, -30, -(2**63)])
def test_fetch_out_of_range_is_error_1(sock: socket.socket, topic: str, offset: int) -> None:
    sock.sendall(produce(topic, 0, THREE_BYTES) + fetch(topic, 0, offset, 1000))
    assert read_fetch(sock) == (1, b"")
    sock.sendall(fetch(topic, 0, 0, 1000))  # the connection is kept
    assert read_fetch(sock) == (0, THREE_BYTES)


@pytest.mark.parametrize(
    ("name", "partition"),
    [
        ("any", 2),
        ("any", 3),
        ("any", 2**31 - 1),
        ("any", -1),
        ("any", -(2**31)),
        ("five", 5),
        ("five", -1),
        ("three", 3),
    ],
)
def test_fetch_bad_partition_is_error_3(
    broker: BrokerProcess, sock: socket.socket, topic: str, name: str, partition: int
) -> None:
    name = topic if name == "any" else name
    sock.sendall(fetch(name, partition, 0, 1000))
    assert read_fetch(sock) == (3, b"")
    sock.sendall(fetch(name, 0, 0, 1000))  # kept, and partition 0 is fine
    assert read_fetch(sock)[0] == 0
    assert not partition_dir(broker, name, partition).exists()


def test_fetch_and_offsets_never_create_logs(
    broker: BrokerProcess, sock: socket.socket, topic: str
) -> None:
    sock.sendall(fetch(topic, 1, 0, 1000))
    assert read_fetch(sock) == (0, b"")
    sock.sendall(fetch(topic, 1, 12345, 1000))  # no log: empty whatever the offset
    assert read_fetch(sock) == (0, b"")
    sock.sendall(multifetch([(topic, 0, 0, 100), (topic, 1, 0, 100)]))
    assert read_multifetch(sock) == [(0, b""), (0, b"")]
    sock.sendall(offsets(topic, 1, LATEST, 10))
    assert read_offsets(sock) == [0]
    sock.sendall(offsets(topic, 1, EARLIEST, 10))
    assert read_offsets(sock) == [0]
    sock.sendall(offsets(topic, 1, int(time.time() * 1000), 10))
    assert read_offsets(sock) == []  # an explicit time on a missing log: none
    sock.sendall(fetch_wait(0, 0, [(topic, 0, 0, 100)]))
    assert read_multifetch(sock) == [(0, b"")]
    sock.sendall(metadata([topic]))
    assert read_metadata(sock)[1] == {topic: (0, [])}
    assert not partition_dir(broker, topic, 0).exists()
    assert not partition_dir(broker, topic, 1).exists()
    assert not any(p.name.startswith(topic) for p in broker.log_dir.iterdir())


def test_multifetch_per_set_errors_in_request_order(sock: socket.socket, topic: str) -> None:
    a = message1(b"partition zero") + message0(b"more")
    b = message0(b"partition one")
    sock.sendall(produce(topic, 0, a) + produce(topic, 1, b))
    fetches = [
        (topic, 1, 0, 1000),  # data of partition 1
        (topic, 2, 0, 1000),  # bad partition: 3
        (topic, 0, len(a) + 1, 1000),  # past the end: 1
        (topic, 0, 0, 1000),  # data of partition 0
        (topic, 0, -5, 1000),  # before the start: 1
        (topic, 0, len(a), 1000),  # at the end: empty, 0
        (topic + ".none", 1, 0, 1000),  # no log yet: empty, 0
        ("bad/topic", 0, 0, 1000),  # illegal name: -1 (Unknown, as 0.7)
        (topic, 0, 3, 10),  # raw bytes from the middle
        (topic, -1, 0, 1000),  # bad partition: 3
    ]
    sock.sendall(multifetch(fetches))
    body = read_frame(sock)
    assert body[:2] == struct.pack(">h", 0)  # outer error is always 0
    assert split_sets(body) == [
        (0, b),
        (3, b""),
        (1, b""),
        (0, a),
        (1, b""),
        (0, b""),
        (0, b""),
        (-1, b""),
        (0, a[3:13]),
        (3, b""),
    ]
    sock.sendall(multifetch([]))  # no fetches: just the outer header
    assert read_frame(sock) == struct.pack(">h", 0)


# ---------------------------------------------------------------------------------------
# §5.1: OFFSETS.


def test_offsets_of_one_segment(sock: socket.socket, topic: str) -> None:
    data = message1(b"x" * 50) + message0(b"y")
    end = len(data)
    sock.sendall(produce(topic, 0, data))
    for time_ms, max_offsets, expected in [
        (LATEST, 1, [end]),
        (LATEST, 10, [end, 0]),
        (LATEST, 2, [end, 0]),
        (LATEST, 0, []),
        (EARLIEST, 1, [0]),
        (EARLIEST, 10, [0]),
        (int(time.time() * 1000) + 3600_000, 10, [end, 0]),  # a time after everything
        (1, 10, []),  # a time before the segment was written
    ]:
        sock.sendall(offsets(topic, 0, time_ms, max_offsets))
        assert read_offsets(sock) == expected, (time_ms, max_offsets)
    sock.sendall(offsets(topic, 1, LATEST, 10))  # the other partition has no log: [0]
    assert read_offsets(sock) == [0]


def test_offsets_of_several_segments_and_after_retention(broker_factory) -> None:
    b = broker_factory(log_file_size=100)  # every 74-byte set after the first rolls
    entry = message1(b"s" * 64)
    assert len(entry) == 74
    with connect(b) as s:
        s.sendall(b"".join(produce("segs", 0, entry) for _ in range(4)))
        s.sendall(offsets("segs", 0, LATEST, 10))
        assert read_offsets(s) == [296, 222, 148, 74, 0]
        s.sendall(offsets("segs", 0, LATEST, 3))
        assert read_offsets(s) == [296, 222, 148]
        s.sendall(offsets("segs", 0, EARLIEST, 10))
        assert read_offsets(s) == [0]
        # A fetch reads from one segment; offsets run on across segment files.
        s.sendall(fetch("segs", 0, 74, 1000))
        error, data = read_fetch(s)
        assert error == 0 and data and (entry * 3).startswith(data)
        s.sendall(fetch("segs", 0, 290, 1000))
        assert read_fetch(s) == (0, entry[68:])
    names = sorted(p.name for p in (b.log_dir / "segs-0").iterdir())
    assert names == [f"{o:020d}.kafka" for o in (0, 74, 148, 222)]
    # Retention deletes segments from the front: emulate it while the broker is down.
    assert b.stop() == 0
    for o in (0, 74):
        (b.log_dir / "segs-0" / f"{o:020d}.kafka").unlink()
    b.start()
    with connect(b) as s:
        s.sendall(offsets("segs", 0, EARLIEST, 10))
        assert read_offsets(s) == [148]  # the first retained segment
        s.sendall(offsets("segs", 0, LATEST, 10))
        assert read_offsets(s) == [296, 222, 148]
        for offset in (0, 74, 147):  # before the start: 1
            s.sendall(fetch("segs", 0, offset, 1000))
            assert read_fetch(s) == (1, b"")
        s.sendall(fetch("segs", 0, 148, 1000))
        assert read_fetch(s) == (0, entry)
        s.sendall(metadata(["segs"]))
        assert read_metadata(s)[1] == {"segs": (0, [(0, 148, 296, 148)])}
        s.sendall(produce("segs", 0, entry) + offsets("segs", 0, LATEST, 1))
        assert read_offsets(s) == [370]  # offsets never restart


# ---------------------------------------------------------------------------------------
# §6: partitions per topic; random partition.


def test_partition_counts_from_num_partitions_and_the_map(
    broker: BrokerProcess, sock: socket.socket, topic: str
) -> None:
    msg = message1(b"p")
    for name, count in [(topic, 2), ("five", 5), ("three", 3)]:
        last = count - 1
        sock.sendall(produce_ack([(name, last, msg), (name, count, msg)]))
        (ok, bad) = read_acks(sock)
        assert ok[1:3] == (last, 0) and bad[1:3] == (count, 3)
        sock.sendall(multifetch([(name, last, 0, 1000), (name, count, 0, 1000)]))
        (first, second) = read_multifetch(sock)
        assert first[0] == 0 and first[1].endswith(msg) and second == (3, b"")
        sock.sendall(metadata([name]))
        _, topics = read_metadata(sock)
        assert [p[0] for p in topics[name][1]] == list(range(count))
        assert not partition_dir(broker, name, count).exists()


def test_partition_minus_one_goes_to_a_valid_partition(
    broker: BrokerProcess, sock: socket.socket
) -> None:
    name = "three"
    sock.sendall(offsets(name, 0, LATEST, 1) + offsets(name, 1, LATEST, 1))
    sock.sendall(offsets(name, 2, LATEST, 1))
    before = [read_offsets(sock)[0] for _ in range(3)]
    msg = message0(b"random")
    sock.sendall(b"".join(produce(name, -1, msg) for _ in range(30)))
    sock.sendall(b"".join(offsets(name, p, LATEST, 1) for p in range(3)))
    after = [read_offsets(sock)[0] for _ in range(3)]
    added = [(a - b) // len(msg) for a, b in zip(after, before, strict=True)]
    assert sum(added) == 30
    assert {p.name for p in broker.log_dir.glob("three-*")} <= {"three-0", "three-1", "three-2"}
    sock.sendall(produce_ack([(name, -1, msg)]))  # the acked produce says which one
    ((_, partition, error, offset, next_offset),) = read_acks(sock)
    assert 0 <= partition < 3 and error == 0
    assert offset == after[partition] and next_offset == offset + len(msg)


# ---------------------------------------------------------------------------------------
# §3: max.message.size.


def test_message_over_max_message_size_is_dropped_connection_kept(
    broker: BrokerProcess, sock: socket.socket, topic: str
) -> None:
    small = message1(b"small")
    at_limit = message1(b"L" * 1000)  # a payload of exactly max.message.size is fine
    too_big = message1(b"B" * 1001)
    sock.sendall(produce(topic, 0, small))
    sock.sendall(produce(topic, 0, too_big))  # dropped
    sock.sendall(produce(topic, 0, small + too_big + small))  # the whole set dropped
    sock.sendall(produce(topic, 0, at_limit))
    sock.sendall(fetch(topic, 0, 0, 100000))  # the same socket still works
    assert read_fetch(sock) == (0, small + at_limit)
    line = wait_for_log(broker, rf"dropped a produce from {client_address(sock)}")
    assert "1001" in line and "max.message.size" in line


# ---------------------------------------------------------------------------------------
# Extension: PRODUCE_ACK (type 5).


@pytest.mark.parametrize("fsync", [False, True])
def test_produce_ack_returns_offsets(sock: socket.socket, topic: str, fsync: bool) -> None:
    a, b, c = message1(b"a" * 10), message0(b"b"), gzip_wrapper(message1(b"c"))
    sock.sendall(produce_ack([(topic, 0, a), (topic, 1, b), (topic, 0, c)], fsync=fsync))
    assert read_acks(sock) == [
        (topic, 0, 0, 0, len(a)),
        (topic, 1, 0, 0, len(b)),
        (topic, 0, 0, len(a), len(a) + len(c)),
    ]
    sock.sendall(fetch(topic, 0, 0, 1000))
    assert read_fetch(sock) == (0, a + c)
    sock.sendall(produce_ack([], fsync=fsync))  # nothing to do: an empty answer
    assert read_acks(sock) == []


def test_produce_ack_errors_per_result_without_closing(
    broker: BrokerProcess, sock: socket.socket, topic: str
) -> None:
    good, good2 = message1(b"good"), message0(b"good too")
    bad_crc = bytearray(message1(b"crc"))
    bad_crc[-1] ^= 0xFF
    sock.sendall(
        produce_ack(
            [
                (topic, 0, good),
                (topic, 2, good),  # bad partition: 3
                (topic, -7, good),  # bad partition: 3
                (topic, 0, bytes(bad_crc)),  # bad CRC: 2
                (topic, 0, message1(b"x" * 1001)),  # over max.message.size: 5
                (topic, 0, good[:7]),  # first entry truncated: 2
                (topic, 0, message1(b"bad gzip", codec=1)),  # undecodable: 2
                ("bad/topic", 0, good),  # illegal topic: 6
                (topic, 0, good2),
            ]
        )
    )
    assert read_acks(sock) == [
        (topic, 0, 0, 0, len(good)),
        (topic, 2, 3, -1, -1),
        (topic, -7, 3, -1, -1),
        (topic, 0, 2, -1, -1),
        (topic, 0, 5, -1, -1),
        (topic, 0, 2, -1, -1),
        (topic, 0, 2, -1, -1),
        ("bad/topic", 0, 6, -1, -1),
        (topic, 0, 0, len(good), len(good) + len(good2)),
    ]
    sock.sendall(fetch(topic, 0, 0, 1000))  # kept; only the good sets were appended
    assert read_fetch(sock) == (0, good + good2)
    assert not (broker.log_dir / "bad").exists()
    wait_for_log(broker, rf"acked produce from {client_address(sock)} refused")


# ---------------------------------------------------------------------------------------
# Extension: FETCH_WAIT (type 6).


def test_fetch_wait_answers_at_once_when_data_is_there(sock: socket.socket, topic: str) -> None:
    data = message1(b"ready")
    sock.sendall(produce(topic, 1, data))
    sock.sendall(fetch_wait(60000, 1, [(topic, 0, 0, 1000), (topic, 1, 0, 1000)]))
    assert read_multifetch(sock) == [(0, b""), (0, data)]
    sock.sendall(fetch_wait(60000, 1, [(topic, 0, 0, 1000), (topic, 5, 0, 1000)]))
    assert read_multifetch(sock) == [(0, b""), (3, b"")]  # an error answers at once too
    sock.sendall(fetch_wait(0, 1000, [(topic, 0, 0, 1000)]))  # max wait 0: no waiting
    assert read_multifetch(sock) == [(0, b"")]


def test_fetch_wait_returns_as_soon_as_another_connection_produces(
    broker: BrokerProcess, sock: socket.socket, topic: str
) -> None:
    data = message1(b"arrived")
    # max_wait is 10 minutes and the socket gives up after 60 s: only a FETCH_WAIT that the
    # produce wakes is answered in time. (The in-process tests in test_waiting_fetch.py order
    # the append after the wait exactly; over the wire the produce may also come first.)
    sock.settimeout(60)
    sock.sendall(fetch_wait(600_000, 1, [(topic, 0, 0, 1000), (topic, 1, 0, 1000)]))
    with connect(broker) as other:
        other.sendall(produce_ack([(topic, 0, data)]))
        read_acks(other)
    assert read_multifetch(sock) == [(0, data), (0, b"")]


def test_fetch_wait_waits_for_min_bytes_and_holds_later_requests(
    sock: socket.socket, topic: str
) -> None:
    data = message1(b"not enough")
    sock.sendall(produce(topic, 0, data))
    sock.sendall(
        fetch_wait(300, 1000, [(topic, 0, 0, 1000)])  # fewer than 1000 bytes: times out
        + fetch(topic, 0, 0, 1000)  # pipelined behind it: answered after it
        + offsets(topic, 0, LATEST, 1)
    )
    assert read_multifetch(sock) == [(0, data)]  # what there is, once max wait is over
    assert read_fetch(sock) == (0, data)
    assert read_offsets(sock) == [len(data)]


def test_fetch_wait_returns_empty_after_max_wait(sock: socket.socket, topic: str) -> None:
    sock.sendall(fetch_wait(300, 1, [(topic, 0, 0, 1000)]))
    assert read_multifetch(sock) == [(0, b"")]
    sock.sendall(fetch(topic, 0, 0, 1000))  # and the connection goes on
    assert read_fetch(sock) == (0, b"")


# ---------------------------------------------------------------------------------------
# Extension: METADATA (type 7).


def test_metadata_lists_topics_partitions_and_offsets(sock: socket.socket, topic: str) -> None:
    a, b = message1(b"a" * 20), message0(b"b")
    sock.sendall(produce(topic, 0, a) + produce(topic, 0, b) + produce(topic, 1, b))
    sock.sendall(metadata([topic, topic + ".missing", "bad/name"]))
    broker_id, topics = read_metadata(sock)
    assert broker_id == 0
    assert topics == {
        topic: (0, [(0, 0, len(a) + len(b), len(a) + len(b)), (1, 0, len(b), len(b))]),
        topic + ".missing": (0, []),
        "bad/name": (6, []),
    }
    sock.sendall(metadata([]))  # every topic
    _, every = read_metadata(sock)
    assert every[topic] == topics[topic]
    assert all(error == 0 for error, _ in every.values())
