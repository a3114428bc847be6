"""Topic names ZooKeeper cannot hold, against real broker processes and a real ZooKeeper.

Once, a produce to `emoji😀` was acknowledged and stored, never reached ZooKeeper, and then
stopped the broker at every start with the message `logbroker broker: ` and nothing after
it; after a session expiry, re-registration stopped at the first failing topic and every
topic after it vanished from ZooKeeper. Here: every door refuses such a name before anything
is written, a directory left by an older version is skipped by name, one topic that cannot
be registered never stops the others (at start and after a real session expiry), and a
start error always says what failed and where.

Frames are built with logbroker's encoder with `validate_topics=False`: the byte layout is
tested field by field in test_conformance.py; here the broker's answers matter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import make_acl

from logbroker.protocol.errors import InvalidTopicError
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import (
    AckedProduceRequest,
    CreateTopicRequest,
    FetchRequest,
    MultiProduceRequest,
    ProduceRequest,
    Request,
    encode_request,
)
from logbroker.protocol.responses import (
    decode_acked_produce_response,
    decode_create_topic_response,
    decode_fetch_response,
)
from logbroker.stack.broker import BrokerProcess, BrokerStartError
from logbroker.stack.zookeeper import ZkTarget

EMOJI = "emoji😀"  # U+1F600: Java holds it as two surrogates, which ZooKeeper refuses
INVALID_TOPIC = 6
# No CREATE: the broker cannot write `<topic>/<id>` under such a node.
NO_CREATE = [make_acl("world", "anyone", read=True, write=True, delete=True, admin=True)]

BrokerFactory = Callable[..., BrokerProcess]


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def frame(request: Request) -> bytes:
    return encode_request(request, validate_topics=False)


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def assert_closed(sock: socket.socket) -> None:
    sock.settimeout(10)
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(100) == b"", "the broker answered instead of closing"


def fetch(broker: BrokerProcess, topic: str, partition: int = 0) -> bytes:
    with socket.create_connection(broker.address, timeout=10) as s:
        s.sendall(frame(FetchRequest(topic, partition, 0, 100000)))
        response = decode_fetch_response(read_frame(s))
    assert response.error == 0, (topic, response.error)
    return bytes(response.messages)


def acked_produce(broker: BrokerProcess, topic: str, payload: bytes) -> None:
    with socket.create_connection(broker.address, timeout=10) as s:
        s.sendall(frame(AckedProduceRequest(False, (ProduceRequest(topic, 0, set_of(payload)),))))
        (result,) = decode_acked_produce_response(read_frame(s))
    assert result.error == 0


def set_of(payload: bytes) -> bytes:
    return build_message_set([payload])


def log_line(broker: BrokerProcess, *fragments: str) -> str:
    """The first broker log line holding every fragment (waited for)."""

    def find() -> str | None:
        for line in broker.log_since().splitlines():
            if all(f in line for f in fragments):
                return line
        return None

    found: str = wait_for(find, f"a broker log line with {fragments}", timeout=10)
    return found


def children(client: KazooClient, path: str) -> list[str]:
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []


def owner(client: KazooClient, path: str) -> int | None:
    stat = client.exists(path)
    return None if stat is None else int(stat.ephemeralOwner)


def on_disk(broker: BrokerProcess) -> list[str]:
    return sorted(p.name for p in broker.log_dir.iterdir() if p.is_dir())


def write_log(broker: BrokerProcess, directory: str, payload: bytes) -> None:
    """A partition directory with one segment, as a broker (perhaps an older one) left it."""
    path = broker.log_dir / directory
    path.mkdir(parents=True)
    (path / "00000000000000000000.kafka").write_bytes(set_of(payload))


# ---------------------------------------------------------------------------------------


def test_every_door_refuses_an_emoji_topic_before_anything_is_written(
    zk_chroot: ZkTarget, zk_client: KazooClient, broker_factory: BrokerFactory
) -> None:
    broker = broker_factory(0, zk=zk_chroot, num_partitions=1, connection_log_interval_ms=0)
    acked_produce(broker, "kept", b"kept")

    # PRODUCE and MULTIPRODUCE get no answer in 0.7: the broker closes the connection, appends
    # nothing of the request (not even its legal sets) and logs what and where.
    for request in (
        ProduceRequest(EMOJI, 0, set_of(b"x")),
        MultiProduceRequest(
            (ProduceRequest("kept", 0, set_of(b"legal")), ProduceRequest(EMOJI, 0, set_of(b"x")))
        ),
    ):
        with socket.create_connection(broker.address, timeout=10) as s:
            port = s.getsockname()[1]
            s.sendall(frame(request))
            assert_closed(s)
        line = log_line(broker, f"127.0.0.1:{port}", EMOJI)
        assert "refused, nothing appended" in line and "illegal character '😀'" in line

    with socket.create_connection(broker.address, timeout=10) as s:
        # PRODUCE_ACK answers per set: code 6 for the illegal one, the legal one is appended.
        s.sendall(
            frame(
                AckedProduceRequest(
                    False,
                    (
                        ProduceRequest(EMOJI, 0, set_of(b"x")),
                        ProduceRequest("kept", 0, set_of(b"2")),
                    ),
                )
            )
        )
        refused, appended = decode_acked_produce_response(read_frame(s))
        assert (refused.topic, refused.error, refused.offset) == (EMOJI, INVALID_TOPIC, -1)
        assert appended.error == 0
        # CREATE_TOPIC answers code 6 and the rule the name breaks.
        s.sendall(frame(CreateTopicRequest(EMOJI, 2)))
        with pytest.raises(InvalidTopicError) as refused:
            decode_create_topic_response(read_frame(s))
        assert str(refused.value) == (
            f"topic name '{EMOJI}' contains the illegal character '😀' at position 5 "
            "(a topic name is ASCII letters, digits, '.', '_' and '-')"
        )

    assert fetch(broker, "kept") == set_of(b"kept") + set_of(b"2")
    assert on_disk(broker) == ["kept-0"]
    # "kept" is registered in ZooKeeper after its first append, asynchronously: wait for it.
    wait_for(lambda: children(zk_client, "/brokers/topics") == ["kept"], "kept registered alone")
    # And the broker starts again (it once could not).
    assert broker.stop() == 0
    broker.start()
    assert fetch(broker, "kept") == set_of(b"kept") + set_of(b"2")


def test_an_illegal_directory_in_log_dir_is_skipped_by_name_and_the_rest_is_served(
    zk_chroot: ZkTarget, zk_client: KazooClient, broker_factory: BrokerFactory
) -> None:
    broker = broker_factory(0, zk=zk_chroot, start=False)
    write_log(broker, f"{EMOJI}-0", b"left by an older version")
    write_log(broker, "kept-0", b"kept")
    write_log(broker, "kept-1", b"kept too")

    broker.start()  # once: exit code 1 and "logbroker broker: "

    assert fetch(broker, "kept", 0) == set_of(b"kept")
    assert fetch(broker, "kept", 1) == set_of(b"kept too")
    line = log_line(broker, f"{EMOJI}-0", "not served")
    assert "illegal character '😀'" in line
    wait_for(lambda: children(zk_client, "/brokers/topics/kept") == ["0"], "kept registered")
    assert children(zk_client, "/brokers/topics") == ["kept"]
    # skipped, not deleted: an operator decides what to do with it
    segment = broker.log_dir / f"{EMOJI}-0" / "00000000000000000000.kafka"
    assert segment.read_bytes() == set_of(b"left by an older version")


def test_at_start_one_topic_zookeeper_refuses_does_not_stop_the_broker(
    zk_chroot: ZkTarget, zk_client: KazooClient, broker_factory: BrokerFactory
) -> None:
    zk_client.ensure_path("/brokers/topics")
    zk_client.create("/brokers/topics/aaa", acl=NO_CREATE)
    broker = broker_factory(0, zk=zk_chroot, start=False)
    write_log(broker, "aaa-0", b"a")
    write_log(broker, "mmm-0", b"m")

    broker.start()

    wait_for(lambda: children(zk_client, "/brokers/topics/mmm") == ["0"], "mmm registered")
    assert children(zk_client, "/brokers/topics/aaa") == []
    log_line(broker, "could not register topic aaa", "/brokers/topics/aaa/0", "NoAuthError")
    assert fetch(broker, "aaa") == set_of(b"a")  # still served from disk


def test_after_a_real_session_expiry_every_topic_is_registered_even_when_one_fails(
    zk_chroot: ZkTarget, zk_client: KazooClient, broker_factory: BrokerFactory
) -> None:
    broker = broker_factory(0, zk=zk_chroot, zk_sessiontimeout_ms=4000)
    for topic in ("aaa", "mmm", "zzz"):
        acked_produce(broker, topic, topic.encode())
    for topic in ("aaa", "mmm", "zzz"):
        wait_for(lambda t=topic: owner(zk_client, f"/brokers/topics/{t}/0"), f"{topic}/0")
    old_session = owner(zk_client, "/brokers/ids/0")
    zk_client.set_acls("/brokers/topics/aaa", NO_CREATE)

    # A broker that stops answering (a long GC pause, a stopped VM) loses its session: the
    # server expires it and deletes its ephemeral nodes.
    assert broker.pid is not None
    os.killpg(broker.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: zk_client.exists("/brokers/ids/0") is None, "the session to expire")
    finally:
        os.killpg(broker.pid, signal.SIGCONT)

    new_session = wait_for(
        lambda: (
            (owner(zk_client, "/brokers/ids/0") or 0) not in (0, old_session)
            and owner(zk_client, "/brokers/ids/0")
        ),
        "the broker to register in a new session",
    )
    # aaa sorts first: its failure once ended the re-registration, and mmm and zzz were gone.
    for topic in ("mmm", "zzz"):
        wait_for(
            lambda t=topic: owner(zk_client, f"/brokers/topics/{t}/0") == new_session,
            f"{topic} registered again",
        )
    assert owner(zk_client, "/brokers/topics/aaa/0") is None
    log_line(broker, "could not register topic aaa", "NoAuthError")
    # The summary line follows the last topic's node, which the wait above may see first.
    log_line(broker, "re-registered", "2 of 3 topics")
    for topic in ("aaa", "mmm", "zzz"):
        assert fetch(broker, topic) == set_of(topic.encode())


def test_a_start_error_names_its_type_and_where_it_happened(
    zk_chroot: ZkTarget, zk_client: KazooClient, broker_factory: BrokerFactory
) -> None:
    # ZooKeeper refuses /brokers/ids/0 with NoAuth, whose kazoo exception has an empty str():
    # once the whole message was "logbroker broker: ".
    zk_client.ensure_path("/brokers")
    zk_client.create("/brokers/ids", acl=NO_CREATE)
    broker = broker_factory(0, zk=zk_chroot, start=False)
    with pytest.raises(BrokerStartError, match="exited with 1") as info:
        broker.start()
    (line,) = [x for x in str(info.value).splitlines() if x.startswith("logbroker broker:")]
    assert line == (
        "logbroker broker: StartupError: broker 0 could not start: registering in ZooKeeper "
        f"{zk_chroot.connect} (zk.connect) failed: ZooKeeperRegistrationError: creating "
        f"/brokers/ids/0 in ZooKeeper {zk_chroot.connect} failed: NoAuthError: Not authenticated."
    )
    assert "Traceback" not in str(info.value)
