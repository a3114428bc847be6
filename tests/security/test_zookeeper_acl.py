"""ZooKeeper digest ACLs (`zookeeper.set.acl`, `zookeeper.auth`): one real broker with them on,
on the session's real ZooKeeper. A client without the digest reads the brokers' znodes and
cannot change them; the broker registers, serves and keeps its partitions' state; /consumers
stays open; `logbroker acls` and `configs` write only with the digest; a znode made before
set.acl was turned on is given the brokers' ACL at start."""

from __future__ import annotations

import functools
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from logbroker.client.cluster import Cluster
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.config import BrokerConfig, ConfigError
from logbroker.coordination import paths
from logbroker.coordination import replication_state as zk
from logbroker.coordination.zk_acl import secure_tree, watch_children
from logbroker.mirror.settings import MirrorConfigError, TargetSettings
from logbroker.mirror.target import TargetCluster
from logbroker.protocol.kafka08 import group_offsets as groups08
from logbroker.protocol.kafka08.apis import decode_response, encode_request
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget, ZooKeeperServer

DIGEST = "digest:brokers:s3cret"
# (scheme, user, permissions): ZooKeeper shows a digest's hash only to the digest itself
BROKER_ACL = [("digest", "brokers", "ALL"), ("world", "anyone", "READ")]
PLAIN, REPLICATED, FORMAT08, LEGACY = "plain", "replicated", "format08", "legacy"


def acl_of(client: KazooClient, path: str) -> list[tuple[str, str, str]]:
    acls, _ = client.get_acls(path)
    return sorted((a.id.scheme, a.id.id.split(":")[0], ",".join(a.acl_list)) for a in acls)


def eventually(what: str, check: Callable[[], object], timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


class Locked:
    def __init__(self, target: ZkTarget, broker: BrokerProcess, open_client: KazooClient) -> None:
        self.target = target
        self.broker = broker
        self.open = open_client  # no digest: anyone who can reach ZooKeeper

    def cli(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "logbroker.cli",
                args[0],
                "--zookeeper",
                self.target.connect,
                *args[1:],
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )


@pytest.fixture(scope="module")
def locked(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Locked]:
    target = zookeeper.create_chroot(f"/zkacl-{os.getpid()}")
    client = target.client()
    client.start(timeout=10)
    # made before zookeeper.set.acl was turned on: open, as every znode was
    client.create(paths.broker_topic_path(LEGACY), b"", makepath=True)
    broker = BrokerProcess(
        tmp_path_factory.mktemp("zkacl"),
        zk_connect=target.connect,
        port_08=0,
        overrides={"zookeeper.set.acl": "true", "zookeeper.auth": DIGEST},
    )
    broker.start()
    try:
        with Cluster(target.connect, zk_auth=DIGEST) as cluster:
            cluster.create_replicated_topic(REPLICATED, 1, 1)
            cluster.create_replicated_topic(FORMAT08, 1, 1, message_format="0.8")
            for topic in (REPLICATED, FORMAT08):
                eventually(
                    f"{topic}'s leader", functools.partial(cluster.partition_state, topic, 0)
                )
        yield Locked(target, broker, client)
    finally:
        broker.stop(timeout=15)
        client.stop()
        client.close()


def test_a_client_without_the_digest_reads_the_brokers_znodes_and_cannot_change_them(
    locked: Locked,
) -> None:
    z = locked.open
    registered = paths.broker_id_path(0)
    state = zk.partition_path(REPLICATED, 0)
    data, _ = z.get(registered)
    assert paths.parse_broker_value(data) == locked.broker.address  # READ: world
    before, _ = z.get(state)
    assert zk.PartitionState.decode(before).leader == 0
    for path in (registered, state, zk.CONTROLLER):
        assert acl_of(z, path) == BROKER_ACL, path
        with pytest.raises(NoAuthError):
            z.set(path, b"forged")
        with pytest.raises(NoAuthError):
            z.delete(path)
    for parent in (paths.BROKER_IDS, zk.partitions_path(REPLICATED), zk.TOPICS):
        with pytest.raises(NoAuthError):
            z.create(f"{parent}/9", b"impostor")
    assert z.get(state)[0] == before and z.get(registered)[0] == data


def test_the_broker_registers_serves_and_elects_with_its_acls(locked: Locked) -> None:
    zk_connect = locked.target.connect
    with Cluster(zk_connect) as cluster:  # a 0.7 topic: the broker creates it and registers it
        cluster.create_topic(PLAIN, 1)
        eventually(
            "plain's node", lambda: locked.open.exists(paths.broker_topic_broker_path(PLAIN, 0))
        )
    assert acl_of(locked.open, paths.broker_topic_broker_path(PLAIN, 0)) == BROKER_ACL
    with Producer(zk_connect=zk_connect, request_required_acks=1, retries=10) as producer:
        [sent] = producer.send(PLAIN, [b"one", b"two"])
        [replicated] = producer.send(REPLICATED, [b"three"])
        # a topic nobody made: the broker makes it, the producer (no digest) only watches
        [first] = producer.send("made_by_a_produce", [b"four"])
    assert replicated.broker_id == zk.REPLICATED
    with SimpleConsumer(*locked.broker.address) as consumer:
        fetched = consumer.fetch(PLAIN, sent.partition, 0)
        assert [m.payload for m in fetched.messages()] == [b"one", b"two"]
        fetched = consumer.fetch("made_by_a_produce", first.partition, 0)
        assert [m.payload for m in fetched.messages()] == [b"four"]


def test_a_client_without_the_digest_watches_a_topic_that_only_a_broker_may_make(
    locked: Locked,
) -> None:
    seen: list[list[str]] = []
    path = paths.broker_topic_path("later")
    watch_children(locked.open, path, seen.append)  # may not make it: waits for it
    assert not locked.open.exists(path) and not seen
    with Cluster(locked.target.connect, zk_auth=DIGEST) as brokers:  # as a broker would
        brokers.zk.create(f"{path}/0", b"1", makepath=True)
    eventually("the watch on the new topic", lambda: ["0"] in seen)


def test_a_znode_made_before_set_acl_is_given_the_brokers_acl_at_start(locked: Locked) -> None:
    legacy = paths.broker_topic_path(LEGACY)
    assert acl_of(locked.open, legacy) == BROKER_ACL
    with pytest.raises(NoAuthError):
        locked.open.delete(legacy)
    assert "set the ACL of" in locked.broker.log_since()
    # the next start changes nothing: every znode has the ACL already
    with Cluster(locked.target.connect, zk_auth=DIGEST) as brokers:
        roots = (paths.BROKERS, zk.ROOT, "/kafka-acl", "/kafka-acl-changes", "/config")
        assert secure_tree(brokers.zk, roots, brokers.zk.default_acl) == 0


def test_the_mirror_creates_its_target_topics_with_the_digest_of_its_producer_config(
    locked: Locked,
) -> None:
    plain = {"zk.connect": locked.target.connect}
    without = TargetCluster(TargetSettings.from_properties(plain))
    try:
        assert without.cluster is not None
        with pytest.raises(NoAuthError):
            without.cluster.create_replicated_topic("mirrored", 1, 1)
    finally:
        without.close()
    target = TargetCluster(TargetSettings.from_properties({**plain, "zookeeper.auth": DIGEST}))
    try:
        assert target.cluster is not None
        target.cluster.create_replicated_topic("mirrored", 1, 1)
    finally:
        target.close()
    assert acl_of(locked.open, zk.topic_path("mirrored")) == BROKER_ACL
    with pytest.raises(MirrorConfigError, match=r"zookeeper\.auth must be digest:"):
        TargetSettings.from_properties({**plain, "zookeeper.auth": "brokers:s3cret"})


def _recv(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, f"closed after {len(out)} of {n} bytes"
        out += chunk
    return out


def commit08(port: int, group: str, offset: int) -> int:
    """A Kafka 0.8 OffsetCommit through the broker (it writes /consumers): its error code."""
    part = groups08.CommitPartitionV0(0, offset, None)
    body = groups08.OffsetCommitRequestV0(group, (groups08.CommitTopicV0(FORMAT08, (part,)),))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(groups08.OFFSET_COMMIT_V0, body, 7, "test"))
        (size,) = struct.unpack(">i", _recv(sock, 4))
        _, answer = decode_response(groups08.OFFSET_COMMIT_V0, _recv(sock, size))
    [topic] = answer.topics
    [result] = topic.partitions
    return int(result.error_code)


def test_consumer_offsets_stay_open_even_those_the_broker_writes(locked: Locked) -> None:
    assert locked.broker.port_08 is not None
    assert commit08(locked.broker.port_08, "loaders", 5) == 0
    stored = paths.consumer_offset_path("loaders", FORMAT08, zk.REPLICATED, 0)
    locked.open.set(stored, b"0")  # a 0.7 tool (or an operator) resets the group's offset
    # a 0.7 group's own nodes: created and changed without any digest
    mine = paths.consumer_offset_path("walkers", PLAIN, 0, 0)
    locked.open.create(mine, b"7", makepath=True)
    locked.open.set(mine, b"8")


def test_acls_configs_and_topics_write_only_with_the_digest(locked: Locked, tmp_path: Path) -> None:
    add = ("acls", "--add", "--allow-principal", "User:loader", "--operation", "Read")
    refused = locked.cli(*add, "--topic", "clicks")
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert "zookeeper.auth" in line and "LOGBROKER_ZOOKEEPER_AUTH" in line, line
    assert not locked.open.exists("/kafka-acl/Topic/clicks")

    by_env = locked.cli(*add, "--topic", "clicks", env={"LOGBROKER_ZOOKEEPER_AUTH": DIGEST})
    assert by_env.returncode == 0, by_env.stderr
    assert acl_of(locked.open, "/kafka-acl/Topic/clicks") == BROKER_ACL
    properties = tmp_path / "admin.properties"
    properties.write_text(f"zookeeper.auth={DIGEST}\n")
    by_file = locked.cli(*add, "--topic", "views", "--command-config", str(properties))
    assert by_file.returncode == 0, by_file.stderr
    assert locked.open.exists("/kafka-acl/Topic/views")

    scram = ("configs", "--alter", "--entity-type", "users", "--entity-name", "loader",
             "--add-config", "SCRAM-SHA-256=[password=pw]")  # fmt: skip
    assert locked.cli(*scram).returncode == 1
    stored = locked.cli(*scram, env={"LOGBROKER_ZOOKEEPER_AUTH": DIGEST})
    assert stored.returncode == 0, stored.stderr
    with pytest.raises(NoAuthError):  # the salted keys: not even READ for the world
        locked.open.get("/config/users/loader")
    describe = ("configs", "--describe", "--entity-type", "users", "--entity-name", "loader")
    assert "zookeeper.auth" in locked.cli(*describe).stderr
    described = locked.cli(*describe, env={"LOGBROKER_ZOOKEEPER_AUTH": DIGEST})
    assert "SCRAM-SHA-256=iterations=4096" in described.stdout, described.stderr
    brokers = KazooClient(locked.target.connect, auth_data=[("digest", DIGEST[7:])])
    brokers.start(timeout=10)
    try:
        assert acl_of(brokers, "/config/users/loader") == BROKER_ACL[:1]
    finally:
        brokers.stop()
        brokers.close()

    create = ("topics", "create", "orders", "--partitions", "1", "--replication-factor", "1",
              "--message-format", "0.8")  # fmt: skip
    topic_refused = locked.cli(*create)
    assert topic_refused.returncode == 1 and "zookeeper.auth" in topic_refused.stderr
    created = locked.cli(*create, env={"LOGBROKER_ZOOKEEPER_AUTH": DIGEST})
    assert created.returncode == 0, created.stderr
    assert acl_of(locked.open, zk.topic_path("orders")) == BROKER_ACL

    bad = locked.cli("acls", "--list", env={"LOGBROKER_ZOOKEEPER_AUTH": "brokers:s3cret"})
    assert bad.returncode == 2 and "zookeeper.auth" in bad.stderr


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"zookeeper.set.acl": "true"}, "zookeeper.auth"),
        ({"zookeeper.auth": "brokers:s3cret"}, "zookeeper.auth must be digest:"),
        ({"zookeeper.auth": "digest::s3cret"}, "zookeeper.auth"),
        ({"zookeeper.set.acl": "maybe", "zookeeper.auth": DIGEST}, "zookeeper.set.acl=maybe"),
    ],
)
def test_a_bad_zookeeper_acl_setting_is_refused_naming_its_key(
    properties: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties(properties)
    assert named in str(refused.value) and "s3cret" not in str(refused.value)
    assert "\n" not in str(refused.value)
