"""A real broker with the authorizer on (`authorizer.class.name`, no ACL = closed), on a real
ZooKeeper: PLAINTEXT clients are User:ANONYMOUS, refused with Kafka's codes on the 0.8
listener and by closing the connection where 0.7 has no answer, until `logbroker acls`
allows them, without a restart."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fixtures_brokers import BrokerFactory

from logbroker.client.cluster import Cluster
from logbroker.coordination.paths import consumer_offset_path
from logbroker.coordination.replication_state import REPLICATED
from logbroker.protocol.kafka08 import fetch as fetch08
from logbroker.protocol.kafka08 import group_offsets as groups08
from logbroker.protocol.kafka08 import produce as produce08
from logbroker.protocol.kafka08.apis import decode_response, encode_request
from logbroker.protocol.kafka08.message_set import build_message_set, iter_messages
from logbroker.protocol.message_set import build_message_set as build_message_set07
from logbroker.protocol.requests import CreateTopicRequest, ProduceRequest
from logbroker.protocol.requests import encode_request as encode_request07
from logbroker.security.acl_store import AclStore
from logbroker.security.acls import Acl, Operation, Permission, group, topic
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget, ZooKeeperServer

TOPIC = "secured"


def _recv(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def call08(port: int, api: object, body: object) -> object:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(api, body, 7, "test"))  # type: ignore[arg-type]
        (size,) = struct.unpack(">i", _recv(sock, 4))
        _, answer = decode_response(api, _recv(sock, size))  # type: ignore[arg-type]
    return answer


def produce(port: int, value: bytes) -> produce08.ProduceResult:
    messages = build_message_set([(None, value)])
    part = produce08.ProducePartition(0, messages)
    body = produce08.ProduceRequest(1, 5000, (produce08.ProduceTopic(TOPIC, (part,)),))
    answer = call08(port, produce08.PRODUCE_V0, body)
    [topic] = answer.topics  # type: ignore[attr-defined]
    [result] = topic.partitions
    return result  # type: ignore[no-any-return]


def fetch(port: int) -> fetch08.FetchedPartition:
    part = fetch08.FetchPartition(0, 0, 65536)
    body = fetch08.FetchRequest(-1, 0, 1, (fetch08.FetchTopic(TOPIC, (part,)),))
    answer = call08(port, fetch08.FETCH_V0, body)
    [topic] = answer.topics  # type: ignore[attr-defined]
    [result] = topic.partitions
    return result  # type: ignore[no-any-return]


def acls(target: ZkTarget, *args: str) -> None:
    """`logbroker acls` as an operator runs it."""
    run = subprocess.run(
        [sys.executable, "-m", "logbroker.cli", "acls", "--zookeeper", target.connect, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr


def eventually(what: str, check: Callable[[], object], timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


class Secured:
    def __init__(self, target: ZkTarget, broker: BrokerProcess) -> None:
        self.target = target
        self.broker = broker

    @property
    def port08(self) -> int:
        assert self.broker.port_08 is not None
        return self.broker.port_08


@pytest.fixture(scope="module")
def secured(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    target = zookeeper.create_chroot(f"/secured-{os.getpid()}")
    broker = BrokerProcess(
        tmp_path_factory.mktemp("secured"),
        zk_connect=target.connect,
        port_08=0,
        overrides={
            "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": "User:admin",
            "connection.log.interval.ms": "0",  # every refusal's line, for the asserts
        },
    )
    broker.start()
    try:
        with Cluster(target.connect) as cluster:
            cluster.create_replicated_topic(TOPIC, 1, 1, message_format="0.8")
        yield Secured(target, broker)
    finally:
        broker.stop(timeout=15)


def test_an_anonymous_produce_is_refused_then_allowed_by_an_acl_without_a_restart(
    secured: Secured,
) -> None:
    refused = produce(secured.port08, b"refused")
    assert refused.error_code == 29  # TopicAuthorizationFailed
    acls(
        secured.target, "--add", "--allow-principal", "User:ANONYMOUS", "--operation", "Write",
        "--topic", TOPIC,
    )  # fmt: skip
    # the broker applies the change notification: the same produce, until it is taken
    taken = eventually(
        "the ACL on the broker (and the partition's leader)",
        lambda: (r := produce(secured.port08, b"allowed")).error_code == 0 and r,
    )
    assert taken.offset == 0  # type: ignore[attr-defined]  # the refused one stored nothing
    assert "refused Write on Topic:secured from User:ANONYMOUS" in secured.broker.log_since()

    # Write is not Read: the fetch is refused and carries no data ...
    denied = fetch(secured.port08)
    assert denied.error_code == 29 and not bytes(denied.messages)
    # ... until Read is allowed; then it reads the one message the broker kept
    acls(
        secured.target, "--add", "--allow-principal", "User:ANONYMOUS", "--operation", "Read",
        "--topic", TOPIC,
    )  # fmt: skip
    served = eventually(
        "Read on the broker", lambda: (f := fetch(secured.port08)).error_code == 0 and f
    )
    values = [m.value for m in iter_messages(bytes(served.messages))]  # type: ignore[attr-defined]
    assert values == [b"allowed"]


def test_a_0_7_produce_without_write_closes_the_connection_and_creates_nothing(
    secured: Secured,
) -> None:
    start = len(secured.broker.log_since())
    request = ProduceRequest("plain07", 0, build_message_set07([b"x"]))
    with socket.create_connection(secured.broker.address, timeout=10) as sock:
        sock.sendall(encode_request07(request))
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
    assert closed
    eventually(
        "the refusal in the broker's log",
        lambda: (
            "refused Write on Topic:plain07 from User:ANONYMOUS" in secured.broker.log_since(start)
        ),
    )
    assert not list(Path(secured.broker.log_dir).glob("plain07-*"))


def commit(port: int, group_name: str, offset: int) -> int:
    part = groups08.CommitPartitionV0(0, offset, None)
    body = groups08.OffsetCommitRequestV0(group_name, (groups08.CommitTopicV0(TOPIC, (part,)),))
    answer = call08(port, groups08.OFFSET_COMMIT_V0, body)
    [topic] = answer.topics  # type: ignore[attr-defined]
    [result] = topic.partitions
    return result.error_code  # type: ignore[no-any-return]


def test_an_offset_commit_needs_read_on_the_group(secured: Secured) -> None:
    client = secured.target.client()
    client.start(timeout=10)
    try:
        store = AclStore(client)
        anonymous_read = Acl("User:ANONYMOUS", "*", Operation.READ, Permission.ALLOW)
        store.add(topic(TOPIC), [anonymous_read])
        assert commit(secured.port08, "loaders", 5) == 30  # GroupAuthorizationFailed
        stored = consumer_offset_path("loaders", TOPIC, REPLICATED, 0)
        assert not client.exists(stored)
        store.add(group("loaders"), [anonymous_read])
        eventually("Read on the group", lambda: commit(secured.port08, "loaders", 5) == 0)
        assert client.exists(stored)
    finally:
        client.stop()
        client.close()


def create_topic07(address: tuple[str, int], name: str) -> int:
    """A 0.7 CREATE_TOPIC's answer: its error code (0: created, the metadata follows)."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(encode_request07(CreateTopicRequest(name, 1)))
        (size,) = struct.unpack(">i", _recv(sock, 4))
        (error,) = struct.unpack(">h", _recv(sock, size)[:2])
    return int(error)


def test_creating_a_topic_needs_create_on_the_cluster_which_a_super_user_has(
    secured: Secured, broker_factory: BrokerFactory, zk_chroot: ZkTarget
) -> None:
    assert create_topic07(secured.broker.address, "made07") == 31  # ClusterAuthorizationFailed
    assert not list(Path(secured.broker.log_dir).glob("made07-*"))
    # the same request on a broker whose super.users names the PLAINTEXT principal
    open_broker = broker_factory(
        zk=zk_chroot, authorizer_class_name="acl", super_users="User:admin;User:ANONYMOUS"
    )
    assert create_topic07(open_broker.address, "made07") == 0
    assert list(Path(open_broker.log_dir).glob("made07-*"))
