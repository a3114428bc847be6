"""Hostile and broken input to a real broker subprocess, over raw sockets.

Reference: docs/protocol.md's Framing (bad sizes, unknown types close the connection), Errors,
by request (what closes a connection and what is an error code) and Topic names; damaged
message sets as logbroker.protocol.message_set's layout (0.7.2's `ByteBufferMessageSet`).
For every case three things are checked: the client gets 0.7's answer (the connection is
closed, with a broker log line naming the client's address, or an error code on a kept
connection); the broker goes on serving other clients (one connected before, one after);
and what is stored did not change (the bytes of every file under the broker's directory,
segment files included, and no directory anywhere new).

Frames are packed here field by field; message sets byte by byte.

Every case runs three times (issue 46), over each way in a client has: PLAINTEXT (0.7's
port), SSL (a TLS listener of the same broker) and SASL_SSL (a second broker, with SASL on
its listeners and users in ZooKeeper: each connection completes a TLS handshake and a
SCRAM-SHA-256 login before the hostile bytes). The framing and the handlers are the same
ClientConnection's under TLS and after a login, and so must the answers be. `Endpoint` is a
broker as one transport reaches it. The last section sends what is hostile to the TLS
handshake and the SASL exchange themselves, on the SASL broker's SSL listener.

The brokers: num.partitions=2, max.socket.request.bytes=65536, request.timeout.ms=1000,
connection.log.interval.ms=0 (every closed connection is logged, so each test finds its own
line). The topic "seeded" holds known data in partitions 0 and 1.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import re
import resource
import select
import socket
import ssl
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logbroker.cli import main as cli_main
from logbroker.security.certificates import CertificateAuthority
from logbroker.security.sasl import (
    MAX_FRAME,
    SaslClientConfig,
    authenticate,
    encode_handshake,
)
from logbroker.security.sasl import frame as sasl_frame
from logbroker.security.scram import ScramClient
from logbroker.security.tls import ClientSecurity
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZooKeeperServer, find_free_port

PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS = 0, 1, 2, 3, 4
PRODUCE_ACK, FETCH_WAIT, METADATA = 5, 6, 7
LATEST = -1
MAX_REQUEST = 65536
SEEDED = "seeded"

# ---------------------------------------------------------------------------------------
# Byte-by-byte builders.


def message0(payload: bytes) -> bytes:
    return (
        struct.pack(">i", 5 + len(payload))  # entry size N
        + struct.pack(">B", 0)  # magic 0
        + struct.pack(">I", zlib.crc32(payload))  # CRC32 of the payload
        + payload
    )


def message1(payload: bytes, codec: int = 0, crc: int | None = None, magic: int = 1) -> bytes:
    return (
        struct.pack(">i", 6 + len(payload))  # entry size N
        + struct.pack(">B", magic)  # magic (1; anything else is unknown)
        + struct.pack(">B", codec)  # attributes: compression codec
        + struct.pack(">I", zlib.crc32(payload) if crc is None else crc)  # CRC32 of payload
        + payload
    )


def frame(request_type: int, body: bytes) -> bytes:
    return (
        struct.pack(">i", 2 + len(body))  # size: the bytes after this field
        + struct.pack(">h", request_type)  # request type
        + body
    )


def short_string(topic: str | bytes) -> bytes:
    raw = topic.encode() if isinstance(topic, str) else topic
    return struct.pack(">h", len(raw)) + raw  # int16 byte length | bytes


def produce_body(topic: str | bytes, partition: int, messages: bytes) -> bytes:
    return (
        short_string(topic)  # topic
        + struct.pack(">i", partition)  # partition
        + struct.pack(">i", len(messages))  # message set size
        + messages
    )


def fetch_body(topic: str | bytes, partition: int, offset: int, max_size: int) -> bytes:
    return (
        short_string(topic)  # topic
        + struct.pack(">i", partition)  # partition
        + struct.pack(">q", offset)  # offset
        + struct.pack(">i", max_size)  # max size
    )


def produce(topic: str | bytes, partition: int, messages: bytes) -> bytes:
    return frame(PRODUCE, produce_body(topic, partition, messages))


def fetch(topic: str | bytes, partition: int, offset: int, max_size: int) -> bytes:
    return frame(FETCH, fetch_body(topic, partition, offset, max_size))


def offsets(topic: str | bytes, partition: int, time_ms: int, max_offsets: int) -> bytes:
    return frame(
        OFFSETS,
        short_string(topic)  # topic
        + struct.pack(">i", partition)  # partition
        + struct.pack(">q", time_ms)  # time
        + struct.pack(">i", max_offsets),  # max number of offsets
    )


def multifetch(fetches: list[tuple[str | bytes, int, int, int]]) -> bytes:
    return frame(
        MULTIFETCH,
        struct.pack(">h", len(fetches))  # count
        + b"".join(fetch_body(*f) for f in fetches),
    )


# ---------------------------------------------------------------------------------------
# Reading answers.


class Endpoint:
    """A broker as one transport reaches it: `connect` gives a socket that is past the TLS
    handshake and the SASL login where the transport has them, ready for 0.7's frames."""

    def __init__(
        self,
        process: BrokerProcess,
        transport: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        sasl: SaslClientConfig | None = None,
    ) -> None:
        self.process = process
        self.transport = transport
        self.address = (process.host, port)
        self.tls = tls
        self.sasl = sasl
        self.directory = process.directory
        self.log_dir = process.log_dir
        self.log_path = process.log_path
        # Where the log was when a client port connected: a line about an earlier client
        # of the same port (ports are reused; PLAINTEXT and SSL share a broker) is not its.
        self._log_at: dict[int, int] = {}
        self._bystander: socket.socket | None = None

    def bystander(self) -> socket.socket:
        """One connection kept for the module (a client connected before each bad one; a
        new one per test would cost a handshake and a login each, over TLS)."""
        if self._bystander is None:
            self._bystander = self.connect()
        return self._bystander

    def close(self) -> None:
        if self._bystander is not None:
            self._bystander.close()

    def mark(self, sock: socket.socket) -> None:
        self._log_at[sock.getsockname()[1]] = self.log_path.stat().st_size

    def log_since(self, port: int | None = None) -> str:
        return self.process.log_since(self._log_at.get(port, 0) if port is not None else 0)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=10)
        self.mark(sock)
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_hostname=self.address[0])
        if self.sasl is not None:
            authenticate(sock, self.sasl, f"{self.address[0]}:{self.address[1]}")
        return sock


def connect(broker: Endpoint) -> socket.socket:
    return broker.connect()


def half_close(sock: socket.socket) -> None:
    """Shut the sending side, keep reading. On TLS the TCP stream's (SSLSocket.shutdown
    would drop the TLS layer and read what follows as clear text)."""
    socket.socket.shutdown(sock, socket.SHUT_WR)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def read_fetch(sock: socket.socket) -> tuple[int, bytes]:
    body = read_frame(sock)
    return struct.unpack_from(">h", body)[0], body[2:]


def read_multifetch(sock: socket.socket) -> list[tuple[int, bytes]]:
    body = read_frame(sock)
    assert body[:2] == b"\x00\x00"
    sets, pos = [], 2
    while pos < len(body):
        size, error = struct.unpack_from(">ih", body, pos)
        sets.append((error, body[pos + 6 : pos + 4 + size]))
        pos += 4 + size
    return sets


def read_offsets(sock: socket.socket) -> list[int]:
    body = read_frame(sock)
    error, count = struct.unpack_from(">hi", body)
    assert error == 0
    return list(struct.unpack_from(f">{count}q", body, 6))


def send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send, tolerating a broker that closes before it has read everything."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
        sock.sendall(data)


def assert_closed(sock: socket.socket, timeout: float = 5.0) -> None:
    """The broker closed the connection, without sending a byte."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(4096)
    except (ConnectionResetError, ssl.SSLEOFError):  # TLS: closed without close_notify
        return
    except TimeoutError:
        raise AssertionError(f"the broker kept the connection open for {timeout} s") from None
    assert data == b"", f"the broker answered {data[:40]!r} instead of closing"


def log_line_for(broker: Endpoint, port: int, timeout: float = 10.0) -> str:
    """The broker log line naming a client's address (127.0.0.1:<its port>), other than
    the one saying that its SASL login succeeded."""
    regex = re.compile(rf"127\.0\.0\.1:{port}\b")
    deadline = time.monotonic() + timeout
    while True:
        for line in broker.log_since(port).splitlines():
            if regex.search(line) and "authenticated as" not in line:
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no broker log line names {regex.pattern}")
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------
# Fixtures and the three checks.


SETTINGS = {
    "num.partitions": "2",
    "max.socket.request.bytes": str(MAX_REQUEST),
    "request.timeout.ms": "1000",
    "connection.log.interval.ms": "0",  # every closed connection logged: tests look
}
TRANSPORTS = ["PLAINTEXT", "SSL", "SASL_SSL"]
LOGIN = SaslClientConfig("SCRAM-SHA-256", "hostile", "hostile-secret")


@pytest.fixture(scope="module")
def descriptors() -> Iterator[None]:
    """A thousand idle connections (and their TLS peers) need more than 1024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:  # the brokers inherit it
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("bad-input-ca"))


def _tls_settings(ca: CertificateAuthority, name: str, port: int) -> dict[str, str]:
    own = ca.issue(name)
    return {
        "listeners": f"SSL://127.0.0.1:{port}",
        "ssl.certfile": str(own.certfile),
        "ssl.keyfile": str(own.keyfile),
    }


@pytest.fixture(scope="module")
def plain_broker(
    descriptors: None, ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, int]]:
    """Standalone (no ZooKeeper): its PLAINTEXT port and an SSL listener."""
    ssl_port = find_free_port()
    proc = BrokerProcess(
        tmp_path_factory.mktemp("bad-input"),
        overrides={**SETTINGS, **_tls_settings(ca, "broker-0", ssl_port)},
    )
    proc.start()
    try:
        yield proc, ssl_port
    finally:
        assert proc.stop() == 0


@pytest.fixture(scope="module")
def sasl_broker(
    descriptors: None,
    ca: CertificateAuthority,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, int]]:
    """SASL (SCRAM-SHA-256) on every listener (both mapped to SASL_*), users in a ZooKeeper
    chroot: its SSL listener is SASL_SSL."""
    chroot = zookeeper.create_chroot(f"/t/bad-input-{uuid.uuid4().hex[:8]}")
    for user, password in (("broker-1", "broker-secret"), (LOGIN.username, LOGIN.password)):
        setting = f"SCRAM-SHA-256=[password={password}]"
        assert cli_main(["configs", "--zookeeper", chroot.connect, "--entity-type", "users",
                         "--alter", "--entity-name", user, "--add-config", setting]) == 0  # fmt: skip
    ssl_port = find_free_port()
    proc = BrokerProcess(
        tmp_path_factory.mktemp("bad-input-sasl"),
        broker_id=1,
        zk_connect=chroot.connect,
        overrides={
            **SETTINGS,
            **_tls_settings(ca, "broker-1", ssl_port),
            # logins on both listeners: the one named SSL is SASL_SSL (Kafka's map)
            "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "sasl.jaas.config": 'ScramLoginModule required username="broker-1" '
            'password="broker-secret";',
        },
    )
    proc.start()
    try:
        yield proc, ssl_port
    finally:
        assert proc.stop() == 0


@pytest.fixture(scope="module", params=TRANSPORTS)
def broker(request: pytest.FixtureRequest, ca: CertificateAuthority) -> Iterator[Endpoint]:
    tls = ClientSecurity("SSL", str(ca.certfile)).context()
    if request.param == "SASL_SSL":
        proc, ssl_port = request.getfixturevalue("sasl_broker")
        endpoint = Endpoint(proc, "SASL_SSL", ssl_port, tls, LOGIN)
    else:
        proc, ssl_port = request.getfixturevalue("plain_broker")
        if request.param == "SSL":
            endpoint = Endpoint(proc, "SSL", ssl_port, tls)
        else:
            endpoint = Endpoint(proc, "PLAINTEXT", proc.port)
    yield endpoint
    endpoint.close()


def seed(broker: Endpoint) -> dict[int, bytes]:
    """The topic "seeded", written once a broker (checked on every transport)."""
    data = {
        0: message0(b"seed zero")
        + message1(b"seed one")
        + message1(gzip.compress(message1(b"inner"), mtime=0), codec=1),
        1: message1(b"partition one" * 10),
    }
    with connect(broker) as s:
        if not (broker.log_dir / f"{SEEDED}-0").exists():  # PLAINTEXT and SSL: one broker
            s.sendall(produce(SEEDED, 0, data[0]) + produce(SEEDED, 1, data[1]))
        s.sendall(fetch(SEEDED, 0, 0, 100000) + fetch(SEEDED, 1, 0, 100000))
        assert read_fetch(s) == (0, data[0])
        assert read_fetch(s) == (0, data[1])
    return data


@pytest.fixture(scope="module")
def seeded(broker: Endpoint) -> dict[int, bytes]:
    return seed(broker)


def stored(broker: Endpoint) -> dict[str, bytes | None]:
    """Every path under the broker's directory (None for directories) and its bytes; not a
    checkpoint's `.tmp`, which a replicated broker writes and renames now and then (it is
    not stored data, and may be gone between the listing and the read)."""
    found: dict[str, bytes | None] = {}
    for p in sorted(broker.directory.rglob("*")):
        if p == broker.log_path or p.name.endswith(".tmp"):
            continue
        try:
            found[str(p.relative_to(broker.directory))] = None if p.is_dir() else p.read_bytes()
        except FileNotFoundError:
            continue
    return found


def assert_serving(broker: Endpoint, seeded: dict[int, bytes], sock=None) -> None:
    """The seeded data is served, on `sock` or on a new connection."""
    s = sock or connect(broker)
    try:
        s.sendall(multifetch([(SEEDED, 0, 0, 100000), (SEEDED, 1, 0, 100000)]))
        assert read_multifetch(s) == [(0, seeded[0]), (0, seeded[1])]
        s.sendall(offsets(SEEDED, 0, LATEST, 10))
        assert read_offsets(s) == [len(seeded[0]), 0]
    finally:
        if sock is None:
            s.close()


def expect_closed(broker: Endpoint, seeded: dict[int, bytes], data: bytes) -> str:
    """Send `data`; the broker must close, log it, keep serving, and store nothing."""
    before = stored(broker)
    bystander = broker.bystander()  # a client connected before the bad one
    assert_serving(broker, seeded, bystander)
    with connect(broker) as sock:
        port = sock.getsockname()[1]
        send_quietly(sock, data)
        assert_closed(sock)
        line = log_line_for(broker, port)
    assert_serving(broker, seeded, bystander)
    assert_serving(broker, seeded)
    assert stored(broker) == before
    return line


def expect_error(broker: Endpoint, seeded: dict[int, bytes], data: bytes, error: int) -> None:
    """Send a FETCH `data`; the answer is `error` with no data, and the connection stays."""
    before = stored(broker)
    with connect(broker) as sock:
        sock.sendall(data)
        assert read_fetch(sock) == (error, b"")
        assert_serving(broker, seeded, sock)
    assert_serving(broker, seeded)
    assert stored(broker) == before


# ---------------------------------------------------------------------------------------
# §1: sizes and types.


@pytest.mark.parametrize("size", [0, 1, -1, -2, -(2**31), MAX_REQUEST + 1, 2**24, 2**31 - 1])
def test_size_prefix_out_of_range_closes(
    broker: Endpoint, seeded: dict[int, bytes], size: int
) -> None:
    # Only the prefix (and a type) is sent: a broker that waited for `size` bytes, or
    # allocated them, would not close at once.
    line = expect_closed(broker, seeded, struct.pack(">i", size) + struct.pack(">h", FETCH))
    assert "closing connection" in line and str(size) in line


def test_request_of_exactly_max_socket_request_bytes_is_served(broker: Endpoint) -> None:
    topic = f"at-limit-{uuid.uuid4().hex[:8]}"
    overhead = 2 + 2 + len(topic) + 4 + 4 + 4 + 6  # type, topic, partition, set size, entry
    data = message1(b"m" * (MAX_REQUEST - overhead))
    request = produce(topic, 0, data)
    assert struct.unpack_from(">i", request)[0] == MAX_REQUEST
    with connect(broker) as s:
        s.sendall(request + fetch(topic, 0, 0, 100000))
        assert read_fetch(s) == (0, data)


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 6, 20, 60])
def test_request_cut_off_then_client_closes(
    broker: Endpoint, seeded: dict[int, bytes], cut: int
) -> None:
    before = stored(broker)
    request = produce(SEEDED, 0, message1(b"never complete" * 3))
    assert cut < len(request)
    with connect(broker) as s:
        s.sendall(request[:cut])
    with connect(broker) as s:  # a half-closed client too: it may still read
        s.sendall(request[:cut])
        half_close(s)
        assert_closed(s)
    assert_serving(broker, seeded)
    assert stored(broker) == before


@pytest.mark.parametrize("request_type", [99, 1000, -1, 32767, -32768])
def test_unknown_request_type_closes(
    broker: Endpoint, seeded: dict[int, bytes], request_type: int
) -> None:
    body = fetch_body(SEEDED, 0, 0, 1000)  # a body that would make sense for a fetch
    line = expect_closed(broker, seeded, frame(request_type, body))
    assert "unknown request type" in line


# ---------------------------------------------------------------------------------------
# §3, §4: damaged message sets close the connection and append nothing.


def _bad_crc() -> bytes:
    return message1(b"payload", crc=zlib.crc32(b"payload") ^ 1)


DAMAGED = {
    "crc-mismatch": _bad_crc(),
    "crc-mismatch-magic0": struct.pack(">iBI", 9, 0, 0xDEADBEEF) + b"abcd",
    "crc-mismatch-second-entry": message1(b"fine") + _bad_crc(),
    "crc-mismatch-then-partial": _bad_crc() + message1(b"partial")[:8],
    "gzip-not-decodable": message1(b"this is not gzip", codec=1),  # right CRC
    "gzip-truncated": message1(gzip.compress(message1(b"x" * 100), mtime=0)[:-12], codec=1),
    "gzip-inner-bad-crc": message1(gzip.compress(_bad_crc(), mtime=0), codec=1),
    "gzip-inner-partial": message1(gzip.compress(message1(b"inner")[:-2], mtime=0), codec=1),
    "gzip-empty-inner": message1(gzip.compress(b"", mtime=0), codec=1),
    "snappy-not-decodable": message1(
        b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2 + b"\xff" * 9, codec=2
    ),
    "snappy-raw-garbage": message1(b"\xff\xff\xff\xff\x0f garbage", codec=2),
    "unknown-codec-3": message1(b"codec three", codec=3),
    "unknown-magic-2": message1(b"magic two", magic=2),
    "first-entry-truncated": message1(b"truncated")[:10],
    "first-entry-only-size": struct.pack(">i", 20),
    "entry-size-under-minimum": struct.pack(">i", 4) + b"\x00\x00\x00\x00",
    "entry-size-zero": struct.pack(">i", 0) + message1(b"after"),
    "entry-size-negative": struct.pack(">i", -100) + message1(b"after"),
    "magic1-shorter-than-header": struct.pack(">i", 5) + b"\x01\x00\x00\x00\x00",
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_damaged_produce_closes_and_appends_nothing(
    broker: Endpoint, seeded: dict[int, bytes], kind: str
) -> None:
    expect_closed(broker, seeded, produce(SEEDED, 0, DAMAGED[kind]))


def test_gzip_second_member_with_bad_crc_closes(broker: Endpoint, seeded: dict[int, bytes]) -> None:
    payload = gzip.compress(message1(b"first member"), mtime=0) + gzip.compress(_bad_crc(), mtime=0)
    topic = f"two-members-{uuid.uuid4().hex[:8]}"  # 0.7 read every member: so do we
    request = produce(topic, 0, message1(payload, codec=1))
    # An OFFSETS behind it makes a broker that wrongly kept the connection answer at once.
    expect_closed(broker, seeded, request + offsets(topic, 0, LATEST, 1))


def test_requests_before_a_bad_one_are_answered_then_closed(
    broker: Endpoint, seeded: dict[int, bytes]
) -> None:
    topic = f"before-bad-{uuid.uuid4().hex[:8]}"
    data = message1(b"appended before the bad request")
    with connect(broker) as s:
        port = s.getsockname()[1]
        s.sendall(
            fetch(SEEDED, 0, 0, 100000)
            + produce(topic, 0, data)
            + offsets(topic, 0, LATEST, 1)
            + frame(99, b"")  # unknown type: the connection closes here
            + offsets(topic, 0, LATEST, 1)  # never answered
        )
        assert read_fetch(s) == (0, seeded[0])
        assert read_offsets(s) == [len(data)]
        assert_closed(s)
    assert "unknown request type" in log_line_for(broker, port)
    with connect(broker) as s:  # the produce before the bad request was kept
        s.sendall(fetch(topic, 0, 0, 1000))
        assert read_fetch(s) == (0, data)
    assert_serving(broker, seeded)


def test_a_damaged_produce_among_many_in_one_read_keeps_only_those_before_it(
    broker: Endpoint, seeded: dict[int, bytes]
) -> None:
    """PRODUCEs to one partition that arrive together are checked and appended together
    (requests.produce_run); one damaged set among them still closes the connection with its
    own error, what came before it is stored whole and nothing from it on."""
    topic = f"run-{uuid.uuid4().hex[:8]}"
    first = message1(b"makes the log")
    sets = [b"".join(message1(b"%d-%d" % (i, k)) for k in range(50)) for i in range(40)]
    with connect(broker) as s:
        s.sendall(produce(topic, 0, first) + offsets(topic, 0, LATEST, 1))
        assert read_offsets(s) == [len(first)]
    with connect(broker) as s:
        port = s.getsockname()[1]
        send_quietly(
            s,
            b"".join(produce(topic, 0, m) for m in sets[:30])
            + produce(topic, 0, DAMAGED["crc-mismatch-second-entry"])
            + b"".join(produce(topic, 0, m) for m in sets[30:])
            + offsets(topic, 0, LATEST, 1),  # never answered
        )
        assert_closed(s)
        assert "CRC mismatch" in log_line_for(broker, port)
    with connect(broker) as s:
        s.sendall(fetch(topic, 0, 0, 1_000_000))
        assert read_fetch(s) == (0, first + b"".join(sets[:30]))
    assert_serving(broker, seeded)


@pytest.mark.parametrize("kind", ["crc-mismatch", "gzip-not-decodable", "first-entry-truncated"])
def test_damaged_produce_to_a_new_topic_creates_no_log(
    broker: Endpoint, seeded: dict[int, bytes], kind: str
) -> None:
    topic = f"never-{uuid.uuid4().hex[:8]}"
    expect_closed(broker, seeded, produce(topic, 0, DAMAGED[kind]))
    assert not (broker.log_dir / f"{topic}-0").exists()


def test_multiproduce_with_one_damaged_set_closes_and_appends_nothing(
    broker: Endpoint, seeded: dict[int, bytes]
) -> None:
    body = (
        struct.pack(">h", 3)  # count
        + produce_body(SEEDED, 1, message1(b"good"))
        + produce_body(SEEDED, 0, message1(b"good too"))
        + produce_body(SEEDED, 0, _bad_crc())
    )
    expect_closed(broker, seeded, frame(MULTIPRODUCE, body))


# ---------------------------------------------------------------------------------------
# §6: topic names.

BAD_TOPICS = {
    "slash": b"a/b",
    "leading-slash": b"/etc",
    "dot-dot": b"..",
    "dot": b".",
    "parent-escape": b"../escaped",
    "deep-escape": b"../../../../../../tmp/logbroker-escaped",
    "backslash": b"..\\..\\escaped",
    "empty": b"",
    "nul": b"abc\x00def",
    "newline": b"line\nbreak",
    "tab": b"tab\tname",
    "del": b"del\x7f",
    "c1-control": "next\u0085line".encode(),
    "private-use": "\ue000".encode(),
    "noncharacter": "\ufffe".encode(),
    "250-bytes": b"a" * 250,
    "long-utf8": "é".encode() * 125,  # 125 characters, 250 bytes
    "32767-bytes": b"b" * 32767,
    # legal in 0.7, refused now: ZooKeeper cannot hold the first, and a topic name is ASCII
    "emoji": "emoji😀".encode(),
    "non-ascii": "café".encode(),
    "space": b"page views",
}


def _escapes(broker: Endpoint) -> list[Path]:
    """Paths a bad topic name could have created outside log.dir."""
    out = []
    for raw in BAD_TOPICS.values():
        name = raw.decode(errors="replace")
        if "/" in name:
            for partition in (0, 1):
                out.append(Path(str(broker.log_dir / f"{name}-{partition}")))
    return [p for p in out if p.exists()]


@pytest.mark.parametrize("name", sorted(BAD_TOPICS))
def test_bad_topic_name_closes_produce_and_offsets(
    broker: Endpoint, seeded: dict[int, bytes], name: str
) -> None:
    topic = BAD_TOPICS[name]
    for request in (
        produce(topic, 0, message1(b"x")),
        frame(MULTIPRODUCE, struct.pack(">h", 1) + produce_body(topic, 0, message1(b"x"))),
        offsets(topic, 0, LATEST, 1),
    ):
        if len(request) - 4 > MAX_REQUEST:
            continue
        line = expect_closed(broker, seeded, request)
        assert "topic" in line
    assert _escapes(broker) == []


@pytest.mark.parametrize("name", sorted(BAD_TOPICS))
def test_bad_topic_name_in_a_fetch_is_error_unknown(
    broker: Endpoint, seeded: dict[int, bytes], name: str
) -> None:
    topic = BAD_TOPICS[name]
    expect_error(broker, seeded, fetch(topic, 0, 0, 1000), -1)  # 0.7 answered Unknown
    assert _escapes(broker) == []


@pytest.mark.parametrize(
    "topic_field",
    [
        struct.pack(">h", -1),  # null
        struct.pack(">h", -2),  # negative length
        struct.pack(">h", 4) + b"\xff\xfe\xfd\xfc",  # not UTF-8
        struct.pack(">h", 2) + "\ud800".encode("utf-8", "surrogatepass")[:2],  # cut UTF-8
        struct.pack(">h", 1000) + b"short",  # runs past the end of the request
    ],
    ids=["null", "negative", "not-utf8", "cut-utf8", "past-end"],
)
@pytest.mark.parametrize("request_type", [PRODUCE, FETCH, OFFSETS])
def test_undecodable_topic_closes(
    broker: Endpoint, seeded: dict[int, bytes], topic_field: bytes, request_type: int
) -> None:
    body = (
        topic_field  # topic
        + struct.pack(">i", 0)  # partition
        + struct.pack(">q", 0)  # offset / time (produce: set size 0 and 4 bytes more)
        + struct.pack(">i", 100)  # max size / max offsets
    )
    expect_closed(broker, seeded, frame(request_type, body))


def test_topic_of_249_bytes_is_accepted(broker: Endpoint) -> None:
    topic = ("t" + uuid.uuid4().hex) * 8
    topic = topic[:249]
    data = message1(b"long name")
    with connect(broker) as s:
        s.sendall(produce(topic, 1, data) + fetch(topic, 1, 0, 1000))
        assert read_fetch(s) == (0, data)
    assert (broker.log_dir / f"{topic}-1").is_dir()


# ---------------------------------------------------------------------------------------
# Partitions, offsets and sizes out of range.

BAD_PARTITIONS = [2, 3, 1000, 2**31 - 1, -2, -1000, -(2**31)]


@pytest.mark.parametrize("partition", BAD_PARTITIONS)
def test_produce_to_bad_partition_closes(
    broker: Endpoint, seeded: dict[int, bytes], partition: int
) -> None:
    line = expect_closed(broker, seeded, produce(SEEDED, partition, message1(b"x")))
    assert str(partition) in line
    assert not (broker.log_dir / f"{SEEDED}-{partition}").exists()


@pytest.mark.parametrize("partition", [*BAD_PARTITIONS, -1])
def test_offsets_for_bad_partition_closes(
    broker: Endpoint, seeded: dict[int, bytes], partition: int
) -> None:
    expect_closed(broker, seeded, offsets(SEEDED, partition, LATEST, 10))


@pytest.mark.parametrize("partition", [*BAD_PARTITIONS, -1])
def test_fetch_from_bad_partition_is_error_3(
    broker: Endpoint, seeded: dict[int, bytes], partition: int
) -> None:
    expect_error(broker, seeded, fetch(SEEDED, partition, 0, 1000), 3)
    expect_error(broker, seeded, fetch(f"fresh-{uuid.uuid4().hex[:6]}", partition, 0, 100), 3)


@pytest.mark.parametrize("delta", [1, 2, 1000, 2**31, 2**62])
def test_fetch_far_past_the_end_is_error_1(
    broker: Endpoint, seeded: dict[int, bytes], delta: int
) -> None:
    expect_error(broker, seeded, fetch(SEEDED, 0, len(seeded[0]) + delta, 1000), 1)
    expect_error(broker, seeded, fetch(SEEDED, 0, -delta, 1000), 1)


def test_fetch_at_int64_extremes_is_error_1(broker: Endpoint, seeded: dict[int, bytes]) -> None:
    expect_error(broker, seeded, fetch(SEEDED, 0, 2**63 - 1, 1000), 1)
    expect_error(broker, seeded, fetch(SEEDED, 0, -(2**63), 1000), 1)


def test_fetch_with_negative_max_size_is_an_error_code(
    broker: Endpoint, seeded: dict[int, bytes]
) -> None:
    expect_error(broker, seeded, fetch(SEEDED, 0, 0, -1), 4)  # InvalidFetchSize
    expect_error(broker, seeded, fetch(SEEDED, 0, 0, -(2**31)), 4)


def test_offsets_with_huge_max_offsets_is_answered(
    broker: Endpoint, seeded: dict[int, bytes]
) -> None:
    with connect(broker) as s:
        s.sendall(offsets(SEEDED, 0, LATEST, 2**31 - 1))
        assert read_offsets(s) == [len(seeded[0]), 0]


# ---------------------------------------------------------------------------------------
# Structurally malformed bodies.

MALFORMED = {
    "fetch-missing-max-size": frame(FETCH, short_string(SEEDED) + struct.pack(">iq", 0, 0)),
    "fetch-empty-body": frame(FETCH, b""),
    "produce-set-size-negative": frame(
        PRODUCE, short_string(SEEDED) + struct.pack(">ii", 0, -1) + message1(b"x")
    ),
    "produce-set-size-past-end": frame(
        PRODUCE, short_string(SEEDED) + struct.pack(">ii", 0, 1000) + message1(b"x")
    ),
    "multifetch-count-negative": frame(MULTIFETCH, struct.pack(">h", -1)),
    "multifetch-count-past-end": frame(
        MULTIFETCH, struct.pack(">h", 30000) + fetch_body(SEEDED, 0, 0, 10)
    ),
    "multiproduce-count-past-end": frame(
        MULTIPRODUCE, struct.pack(">h", 2) + produce_body(SEEDED, 0, message1(b"x"))
    ),
    "multiproduce-count-negative": frame(MULTIPRODUCE, struct.pack(">h", -5)),
    "offsets-cut-off": frame(OFFSETS, short_string(SEEDED) + struct.pack(">i", 0)),
    "produce-ack-unknown-flags": frame(
        PRODUCE_ACK,
        struct.pack(">b", 0x02)  # flags: an unknown bit
        + struct.pack(">h", 1)
        + produce_body(SEEDED, 0, message1(b"x")),
    ),
    "fetch-wait-negative-max-wait": frame(
        FETCH_WAIT,
        struct.pack(">i", -1)  # max wait ms
        + struct.pack(">i", 0)  # min bytes
        + struct.pack(">h", 1)
        + fetch_body(SEEDED, 0, 0, 10),
    ),
    "metadata-count-negative": frame(METADATA, struct.pack(">h", -1)),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_body_closes(broker: Endpoint, seeded: dict[int, bytes], kind: str) -> None:
    expect_closed(broker, seeded, MALFORMED[kind])


# ---------------------------------------------------------------------------------------
# Slow and idle clients.


def test_trickling_client_is_closed_after_request_timeout(
    broker: Endpoint, seeded: dict[int, bytes]
) -> None:
    before = stored(broker)
    request = produce(SEEDED, 0, message1(b"slow" * 50))  # 226 bytes: 11 s at 20 bytes/s
    trickler = connect(broker)
    port = trickler.getsockname()[1]
    result: dict[str, object] = {}

    def trickle() -> None:
        for i in range(len(request)):
            try:
                trickler.send(request[i : i + 1])
            except OSError:
                result["closed_after"] = i
                return
            readable, _, _ = select.select([trickler], [], [], 0.05)
            if readable:
                try:
                    data = trickler.recv(100)
                except OSError:
                    data = b""
                result["closed_after"] = i + 1
                result["data"] = data
                return
        result["completed"] = True

    thread = threading.Thread(target=trickle)
    thread.start()
    served = 0
    with connect(broker) as other:  # served normally while the trickle goes on
        while thread.is_alive():
            assert_serving(broker, seeded, other)
            served += 1
    thread.join()
    assert "completed" not in result, "the broker waited for the whole trickled request"
    assert result.get("data", b"") == b""
    assert 0 < int(result["closed_after"]) < len(request)  # type: ignore[call-overload]
    assert served > 5
    line = log_line_for(broker, port)
    assert "not complete" in line
    trickler.close()
    assert stored(broker) == before


# Over TLS each idle connection costs this process a handshake (and a SCRAM login): 200
# of them keep the test within seconds and still outnumber what one read serves at once.
IDLE = {"PLAINTEXT": 1000, "SSL": 200, "SASL_SSL": 200}


# What an idle connection may cost the broker: its receive buffer (64 KiB) and, over TLS,
# what OpenSSL and asyncio's TLS layer hold. asyncio's own read buffer was 256 KiB a TLS
# connection (342 kB each measured), and 1 MiB when it was raised for big reads (1,110 kB).
IDLE_BYTES_MAX = 250_000


def resident_bytes(broker: Endpoint) -> int:
    status = Path(f"/proc/{broker.process.pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def test_a_thousand_idle_connections(broker: Endpoint, seeded: dict[int, bytes]) -> None:
    idle: list[socket.socket] = []
    topic = f"busy-{uuid.uuid4().hex[:8]}"
    before = resident_bytes(broker)
    try:
        for _ in range(IDLE[broker.transport]):
            idle.append(connect(broker))
        assert_serving(broker, seeded)  # every one of them accepted and set up by now
        each = (resident_bytes(broker) - before) / len(idle)
        assert each < IDLE_BYTES_MAX, f"{each:,.0f} bytes a {broker.transport} connection"
        data = message1(b"while a thousand wait")
        with connect(broker) as s:
            s.sendall(produce(topic, 0, data) + produce(topic, 0, data))
            s.sendall(fetch(topic, 0, 0, 1000))
            assert read_fetch(s) == (0, data + data)
        assert_serving(broker, seeded)
        for s in (idle[0], idle[-1]):  # the first and the last are alive and served
            s.sendall(fetch(topic, 0, len(data), 1000))
            assert read_fetch(s) == (0, data)
    finally:
        for s in idle:
            s.close()
    assert_serving(broker, seeded)


# ---------------------------------------------------------------------------------------
# What is hostile to the TLS handshake and the SASL login themselves, on the SASL broker's
# SSL listener (SASL_SSL). Each: the client is closed (after the answer the exchange owes
# it, if any), one line names it and what was wrong, the broker serves a client connected
# before and one that connects while the hostile one is still open, and stores nothing.


@pytest.fixture(scope="module")
def sasl_ssl(
    sasl_broker: tuple[BrokerProcess, int], ca: CertificateAuthority
) -> Iterator[Endpoint]:
    proc, ssl_port = sasl_broker
    endpoint = Endpoint(
        proc, "SASL_SSL", ssl_port, ClientSecurity("SSL", str(ca.certfile)).context(), LOGIN
    )
    yield endpoint
    endpoint.close()


@pytest.fixture(scope="module")
def sasl_seeded(sasl_ssl: Endpoint) -> dict[int, bytes]:
    return seed(sasl_ssl)


def tls_only(endpoint: Endpoint) -> socket.socket:
    """Past the TLS handshake, not logged in."""
    assert endpoint.tls is not None
    raw = socket.create_connection(endpoint.address, timeout=10)
    return endpoint.tls.wrap_socket(raw, server_hostname=endpoint.address[0])


def expect_refused(
    endpoint: Endpoint,
    seeded: dict[int, bytes],
    sock: socket.socket,
    hostile: Callable[[socket.socket], None],
    timeout: float = 5.0,
) -> str:
    """Run `hostile` on `sock` (a new connection); the broker must close it, log a line
    naming it, serve others meanwhile and after, and store nothing. The line."""
    before = stored(endpoint)
    bystander = endpoint.bystander()
    assert_serving(endpoint, seeded, bystander)
    with sock:
        port = sock.getsockname()[1]
        endpoint.mark(sock)
        hostile(sock)
        assert_serving(endpoint, seeded)  # while the hostile connection is open
        assert_closed(sock, timeout)
        line = log_line_for(endpoint, port)
    assert_serving(endpoint, seeded, bystander)
    assert stored(endpoint) == before
    return line


def _handshake(sock: socket.socket) -> None:
    sock.sendall(encode_handshake("SCRAM-SHA-256"))
    read_frame(sock)  # the SaslHandshake response: error 0, the mechanisms


def test_plaintext_before_the_tls_handshake(
    sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes]
) -> None:
    raw = socket.create_connection(sasl_ssl.address, timeout=10)
    line = expect_refused(
        sasl_ssl, sasl_seeded, raw, lambda s: send_quietly(s, fetch(SEEDED, 0, 0, 1000))
    )
    assert "TLS handshake failed" in line and "WRONG_VERSION_NUMBER" in line


def test_a_stalled_tls_handshake_is_closed_and_blocks_no_one(
    sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes]
) -> None:
    """Half a ClientHello, then nothing: the handshake's request.timeout.ms (1 s) closes it;
    meanwhile others complete theirs and are served."""
    raw = socket.create_connection(sasl_ssl.address, timeout=10)
    hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # a record of 512 bytes: 6 came
    line = expect_refused(sasl_ssl, sasl_seeded, raw, lambda s: s.sendall(hello), timeout=10)
    assert "TLS handshake failed: not complete within request.timeout.ms" in line


@pytest.mark.parametrize("cut", [2, 9])  # in the size field, in the body
def test_a_cut_sasl_handshake(sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes], cut: int) -> None:
    """A SaslHandshake cut mid-frame: a client that waits is closed after
    request.timeout.ms; one that leaves is forgotten; nothing stored either way."""
    request = encode_handshake("SCRAM-SHA-256")
    assert cut < len(request)
    line = expect_refused(
        sasl_ssl, sasl_seeded, tls_only(sasl_ssl), lambda s: s.sendall(request[:cut]), timeout=10
    )
    assert "not complete after 1 s" in line
    with tls_only(sasl_ssl) as s:
        s.sendall(request[:cut])
        half_close(s)
        assert_closed(s)
    assert_serving(sasl_ssl, sasl_seeded)


def test_a_login_never_finished_is_closed(
    sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes]
) -> None:
    """The handshake, the client-first, then silence: the login has request.timeout.ms from
    the connection's start, not idle.connection.timeout.ms (ten minutes)."""

    def stall(sock: socket.socket) -> None:
        _handshake(sock)
        sock.sendall(
            sasl_frame(ScramClient("SCRAM-SHA-256", LOGIN.username, LOGIN.password).first())
        )
        assert read_frame(sock).startswith(b"r=")  # the server-first

    line = expect_refused(sasl_ssl, sasl_seeded, tls_only(sasl_ssl), stall, timeout=10)
    assert "SASL login not complete after 1 s (during SCRAM-SHA-256 authentication)" in line


@pytest.mark.parametrize(
    "size", [MAX_FRAME + 1, 2**31 - 1, -1], ids=["bound-plus-one", "int32-max", "negative"]
)
@pytest.mark.parametrize("where", ["handshake", "token"])
def test_an_oversized_sasl_frame(
    sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes], size: int, where: str
) -> None:
    """Kafka's sasl.server.max.receive.size (512 KiB): a size over it closes at once, before
    any of the frame is kept."""

    def oversized(sock: socket.socket) -> None:
        if where == "token":
            _handshake(sock)
        send_quietly(sock, struct.pack(">i", size) + b"n,,n=")

    line = expect_refused(sasl_ssl, sasl_seeded, tls_only(sasl_ssl), oversized)
    assert f"SASL frame size {size} is outside 0..{MAX_FRAME}" in line


def test_a_token_of_the_largest_size_is_read_and_refused(
    sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes]
) -> None:
    def largest(sock: socket.socket) -> None:
        _handshake(sock)
        send_quietly(sock, sasl_frame(b"n,,n=" + b"a" * (MAX_FRAME - 5)))

    line = expect_refused(sasl_ssl, sasl_seeded, tls_only(sasl_ssl), largest)
    assert "SASL" in line and "SCRAM" in line


def test_a_request_before_the_login(sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes]) -> None:
    line = expect_refused(
        sasl_ssl,
        sasl_seeded,
        tls_only(sasl_ssl),
        lambda s: s.sendall(produce(SEEDED, 0, message1(b"x"))),
    )
    assert "expected a SaslHandshake" in line


def _scram(sock: socket.socket, client: ScramClient) -> bytes:
    """Handshake, client-first, server-first: the client-final the exchange asks for."""
    _handshake(sock)
    sock.sendall(sasl_frame(client.first()))
    return client.final(read_frame(sock))


def test_a_wrong_scram_proof(sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes]) -> None:
    """The right user and password, the proof's last byte changed: refused with
    e=invalid-proof, then closed."""

    def wrong_proof(sock: socket.socket) -> None:
        final = _scram(sock, ScramClient("SCRAM-SHA-256", LOGIN.username, LOGIN.password))
        head, proof = final.rsplit(b",p=", 1)
        forged = bytearray(base64.b64decode(proof))
        forged[-1] ^= 1
        sock.sendall(sasl_frame(head + b",p=" + base64.b64encode(bytes(forged))))
        assert read_frame(sock) == b"e=invalid-proof"

    line = expect_refused(sasl_ssl, sasl_seeded, tls_only(sasl_ssl), wrong_proof)
    assert "SCRAM-SHA-256 authentication of user 'hostile' failed" in line
    assert LOGIN.password not in sasl_ssl.log_since()


def test_a_replayed_scram_client_final(sasl_ssl: Endpoint, sasl_seeded: dict[int, bytes]) -> None:
    """A recorded login (its client-final, proof included) played on a second connection:
    the broker's nonce is new, so the proof is for another exchange."""
    client = ScramClient("SCRAM-SHA-256", LOGIN.username, LOGIN.password, nonce="recorded")
    with tls_only(sasl_ssl) as sock:
        recorded = _scram(sock, client)
        sock.sendall(sasl_frame(recorded))
        client.verify(read_frame(sock))  # the recorded login itself succeeded

    def replay(sock: socket.socket) -> None:
        _scram(sock, ScramClient("SCRAM-SHA-256", LOGIN.username, LOGIN.password, nonce="recorded"))
        sock.sendall(sasl_frame(recorded))

    line = expect_refused(sasl_ssl, sasl_seeded, tls_only(sasl_ssl), replay)
    assert "nonce is not the one of this exchange" in line
