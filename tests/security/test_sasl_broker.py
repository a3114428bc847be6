"""SASL on a real broker process with real ZooKeeper: users made by `logbroker configs`
(salted and hashed in /config/users), logbroker's producer and consumer logging in with
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 on the 0.7 port and the 0.8 listener (and inside TLS
on an SSL listener: Kafka's SASL_SSL), and every
refused login (wrong password, unknown user, cut, oversized or out-of-turn frames) refused
with a clear error on the client's side and a line naming the client in the broker's log,
the broker serving on.

One broker and one chroot for the module (they cost seconds); each test uses its own users
and topics.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_brokers import BrokerFactory
from kazoo.client import KazooClient

from logbroker.cli import main
from logbroker.client.cluster import Cluster
from logbroker.client.group_consumer import GroupConsumer
from logbroker.client.leaders import Leaders
from logbroker.client.partition_reader import PartitionReader
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.client.simple_consumer08 import SimpleConsumer08
from logbroker.protocol.errors import LogbrokerError
from logbroker.security.certificates import CertificateAuthority
from logbroker.security.credentials import USERS_PATH, alter_user
from logbroker.security.sasl import (
    SaslAuthenticationError,
    SaslClientConfig,
    encode_handshake,
    frame,
)
from logbroker.security.scram import (
    ScramClient,
    ScramCredential,
    make_credential,
    password_matches,
)
from logbroker.security.tls import ClientSecurity
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget, ZooKeeperServer, find_free_port

MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
BROKER_LOGIN = 'ScramLoginModule required username="broker-0" password="broker-secret";'


@pytest.fixture(scope="module")
def chroot(zookeeper: ZooKeeperServer) -> ZkTarget:
    return zookeeper.create_chroot(f"/t/sasl-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def zk(chroot: ZkTarget) -> Iterator[KazooClient]:
    client = chroot.client()
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def configs(chroot: ZkTarget, *args: str) -> int:
    return main(["configs", "--zookeeper", chroot.connect, "--entity-type", "users", *args])


def add_user(chroot: ZkTarget, user: str, password: str, mechanisms: str = "") -> None:
    mechanisms = mechanisms or "SCRAM-SHA-256,SCRAM-SHA-512"
    setting = ",".join(f"{m}=[password={password}]" for m in mechanisms.split(","))
    assert configs(chroot, "--alter", "--entity-name", user, "--add-config", setting) == 0


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("sasl-certs"))


@pytest.fixture(scope="module")
def broker(
    chroot: ZkTarget, ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    add_user(chroot, "broker-0", "broker-secret")
    own = ca.issue("broker-0")
    process = BrokerProcess(
        tmp_path_factory.mktemp("sasl-broker"),
        zk_connect=chroot.connect,
        port_08=0,
        overrides={
            # SASL per listener (Kafka's map): the 0.7 port and the 0.8 listener take logins
            # (SASL_PLAINTEXT), and a SASL_SSL listener too, without client certificates
            "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,KAFKA08:SASL_PLAINTEXT",
            "listeners": f"SASL_SSL://127.0.0.1:{find_free_port()}",
            "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "ssl.certfile": str(own.certfile),
            "ssl.keyfile": str(own.keyfile),
            "sasl.enabled.mechanisms": MECHANISMS,
            "sasl.jaas.config": BROKER_LOGIN,
            "connection.log.interval.ms": "0",  # every refused login logs its line
            "num.partitions": "1",
        },
    )
    process.start()
    yield process
    process.stop(timeout=15)


def wait_for_log(broker: BrokerProcess, pattern: str, since: int, timeout: float = 10.0) -> str:
    """The first broker log line after byte `since` that matches `pattern`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = broker.log_path.read_bytes()[since:].decode(errors="replace")
        for line in text.splitlines():
            if re.search(pattern, line):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no broker log line matching {pattern!r}:\n{text[-3000:]}")


def log_size(broker: BrokerProcess) -> int:
    return broker.log_path.stat().st_size


def wait_for_user(broker: BrokerProcess, config: SaslClientConfig) -> None:
    """The broker reads users through a watch: a new one counts within moments."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with SimpleConsumer(*broker.address, sasl=config) as consumer:
                consumer.latest_offset("ready", 0)
            return
        except SaslAuthenticationError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
        except LogbrokerError:
            return


def round_trip(broker: BrokerProcess, config: SaslClientConfig, topic: str) -> None:
    """Produce (acked) and consume over SASL; works, and says so."""
    host, port = broker.address
    with Producer(broker_list=f"0:{host}:{port}", acks="ack", sasl=config) as producer:
        producer.send(topic, [b"one", b"two"])
    with SimpleConsumer(host, port, sasl=config) as consumer:
        messages, _next = consumer.fetch_messages(topic, 0, 0)
        assert consumer.connection.principal == f"User:{config.username}"
    assert [m.payload for m in messages] == [b"one", b"two"]


# -- the configs command ---------------------------------------------------------------------


def test_configs_round_trip_stores_salted_hashes_only(
    chroot: ZkTarget, zk: KazooClient, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "carol-" + uuid.uuid4().hex
    setting = f"SCRAM-SHA-256=[password={secret}],SCRAM-SHA-512=[iterations=8192,password={secret}]"
    assert configs(chroot, "--alter", "--entity-name", "carol", "--add-config", setting) == 0
    assert "Completed updating config for user carol." in capsys.readouterr().out
    data, _ = zk.get(f"{USERS_PATH}/carol")
    assert secret.encode() not in data
    for path in ("/config/users", "/config/changes"):
        for child in zk.get_children(path):
            assert secret.encode() not in zk.get(f"{path}/{child}")[0]
    stored = json.loads(data)
    assert stored["version"] == 1 and set(stored["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert re.fullmatch(
        r"salt=[A-Za-z0-9+/=]+,stored_key=[A-Za-z0-9+/=]+,server_key=[A-Za-z0-9+/=]+,"
        r"iterations=8192",
        stored["config"]["SCRAM-SHA-512"],
    )
    for mechanism, text in stored["config"].items():
        assert password_matches(mechanism, ScramCredential.from_config(text), secret)

    assert configs(chroot, "--describe", "--entity-name", "carol") == 0
    described = capsys.readouterr().out
    assert described.strip() == (
        "SCRAM credential configs for user-principal 'carol' are "
        "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192"
    )
    assert "salt" not in described and "key" not in described

    assert (
        configs(chroot, "--alter", "--entity-name", "carol", "--delete-config", "SCRAM-SHA-512")
        == 0
    )
    assert set(json.loads(zk.get(f"{USERS_PATH}/carol")[0])["config"]) == {"SCRAM-SHA-256"}
    capsys.readouterr()
    assert (
        configs(chroot, "--alter", "--entity-name", "carol", "--delete-config", "SCRAM-SHA-512")
        == 1
    )
    assert "user 'carol' has no SCRAM-SHA-512 to delete" in capsys.readouterr().err
    assert (
        configs(chroot, "--alter", "--entity-name", "carol", "--delete-config", "SCRAM-SHA-256")
        == 0
    )
    assert zk.exists(f"{USERS_PATH}/carol") is None  # nothing left: the user is gone


@pytest.mark.parametrize(
    "args,error",
    [
        (["--add-config", "SCRAM-SHA-256=password=x"], "(in brackets)"),
        (["--add-config", "SCRAM-SHA-1=[password=x]"], "only SCRAM-SHA-256 and SCRAM-SHA-512"),
        (["--add-config", "SCRAM-SHA-256=[pasword=x]"], "is not password=... or iterations=N"),
        (["--add-config", "SCRAM-SHA-256=[password=]"], "no password"),
        (["--add-config", "SCRAM-SHA-256=[password=x,iterations=lots]"], "not a number"),
        (["--add-config", "SCRAM-SHA-256=[password=x"], "cannot read"),
        (["--delete-config", "producer_byte_rate"], "not a user config here"),
    ],
)
def test_configs_bad_syntax_is_one_clear_error(
    chroot: ZkTarget, capsys: pytest.CaptureFixture[str], args: list[str], error: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        configs(chroot, "--alter", "--entity-name", "dave", *args)
    assert exited.value.code == 2
    assert error in capsys.readouterr().err


def test_configs_refuses_iterations_below_kafkas_minimum(
    chroot: ZkTarget, zk: KazooClient, capsys: pytest.CaptureFixture[str]
) -> None:
    setting = "SCRAM-SHA-256=[iterations=1000,password=x]"
    assert configs(chroot, "--alter", "--entity-name", "erin", "--add-config", setting) == 1
    assert "iterations=1000: SCRAM iterations must be 4096 to 16384" in capsys.readouterr().err
    assert zk.exists(f"{USERS_PATH}/erin") is None


# -- logging in -------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_produce_and_consume_over_sasl(
    chroot: ZkTarget, broker: BrokerProcess, mechanism: str
) -> None:
    user = f"alice-{mechanism.lower()}"
    add_user(chroot, user, "alice-secret")
    config = SaslClientConfig(mechanism, user, "alice-secret")
    wait_for_user(broker, config)
    since = log_size(broker)
    round_trip(broker, config, f"sasl-{mechanism.lower()}")
    wait_for_log(broker, rf"authenticated as User:{user}", since)


def test_sasl_inside_tls_on_the_ssl_listener(
    chroot: ZkTarget, broker: BrokerProcess, ca: CertificateAuthority
) -> None:
    """SASL_SSL: the TLS handshake first, then the login inside it; the connection is the
    login's principal, and a wrong password over TLS is refused as on the plain port."""
    add_user(chroot, "tls-alice", "alice-secret")
    config = SaslClientConfig("SCRAM-SHA-512", "tls-alice", "alice-secret")
    wait_for_user(broker, config)
    host, _port = broker.address
    ssl_port = int(broker.overrides["listeners"].rsplit(":", 1)[1])
    security = ClientSecurity("SASL_SSL", str(ca.certfile))
    since = log_size(broker)
    with Producer(
        broker_list=f"0:{host}:{ssl_port}", acks="ack", sasl=config, security=security
    ) as producer:
        producer.send("sasl-ssl", [b"sealed"])
    context = security.context()
    assert context is not None
    with SimpleConsumer(host, ssl_port, tls=context, sasl=config) as consumer:
        messages, _next = consumer.fetch_messages("sasl-ssl", 0, 0)
        assert consumer.connection.principal == "User:tls-alice"
    assert [m.payload for m in messages] == [b"sealed"]
    wait_for_log(broker, r"authenticated as User:tls-alice", since)
    wrong = SaslClientConfig("SCRAM-SHA-512", "tls-alice", "not-her-password")
    with (
        pytest.raises(SaslAuthenticationError),
        SimpleConsumer(host, ssl_port, tls=security.context(), sasl=wrong) as consumer,
    ):
        consumer.latest_offset("sasl-ssl", 0)


def test_the_08_listener_logs_in_too(chroot: ZkTarget, broker: BrokerProcess) -> None:
    add_user(chroot, "olga", "olga-secret")
    config = SaslClientConfig("SCRAM-SHA-256", "olga", "olga-secret")
    wait_for_user(broker, config)
    assert broker.port_08 is not None
    with SimpleConsumer08(broker.host, broker.port_08, sasl=config) as consumer:
        with pytest.raises(LogbrokerError, match=r"0\.8 code 3"):
            consumer.latest_offset("no-such-topic", 0)  # an answer: the request was served
        assert consumer.connection.connection.principal == "User:olga"
    with pytest.raises(SaslAuthenticationError, match="e=invalid-proof"):
        wrong = SaslClientConfig("SCRAM-SHA-256", "olga", "wrong")
        with SimpleConsumer08(broker.host, broker.port_08, sasl=wrong) as c:
            c.latest_offset("no-such-topic", 0)


@pytest.mark.parametrize(
    "mechanism,user,password,client_error,broker_line",
    [
        (
            "SCRAM-SHA-256",
            "frank",
            "not-franks-pw",
            "invalid-proof",
            "SCRAM-SHA-256 authentication of user 'frank' failed",
        ),
        (
            "SCRAM-SHA-512",
            "nobody",
            "nobodys-pw",
            "invalid-proof",
            "SCRAM-SHA-512 authentication of user 'nobody' failed",
        ),
        (
            "PLAIN",
            "frank",
            "not-franks-pw",
            "closed the connection",
            "PLAIN authentication of user 'frank' failed",
        ),
        (
            "PLAIN",
            "nobody",
            "nobodys-pw",
            "closed the connection",
            "PLAIN authentication of user 'nobody' failed",
        ),
    ],
)
def test_wrong_password_and_unknown_user_are_refused(
    chroot: ZkTarget,
    broker: BrokerProcess,
    mechanism: str,
    user: str,
    password: str,
    client_error: str,
    broker_line: str,
) -> None:
    add_user(chroot, "frank", "frank-secret")
    wait_for_user(broker, SaslClientConfig("SCRAM-SHA-256", "frank", "frank-secret"))
    since = log_size(broker)
    config = SaslClientConfig(mechanism, user, password)
    with (
        pytest.raises(SaslAuthenticationError, match=client_error) as refused,
        SimpleConsumer(*broker.address, sasl=config) as consumer,
    ):
        consumer.latest_offset("anything", 0)
    assert f"user {user!r} to broker 127.0.0.1:{broker.port}" in str(refused.value)
    line = wait_for_log(
        broker, "closing connection from 127.0.0.1:[0-9]+: SASL authentication failed", since
    )
    assert broker_line in line and password not in line
    topic = f"after-refusal-{uuid.uuid4().hex[:8]}"
    round_trip(broker, SaslClientConfig("SCRAM-SHA-256", "frank", "frank-secret"), topic)


def test_a_mechanism_the_broker_does_not_enable(broker: BrokerProcess) -> None:
    with socket.create_connection(broker.address, timeout=10) as sock:
        sock.sendall(encode_handshake("GSSAPI"))
        size = struct.unpack(">i", sock.recv(4))[0]
        body = sock.recv(size)
        assert struct.unpack_from(">h", body, 4)[0] == 33  # UnsupportedSaslMechanism
        assert b"SCRAM-SHA-512" in body
        assert sock.recv(10) == b""  # then closed


def _raw(broker: BrokerProcess, data: bytes, port: int | None = None) -> bytes:
    """Send `data`, half-close, and read what the broker sends until it closes."""
    with socket.create_connection((broker.host, port or broker.port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize(
    "name,data,line",
    [
        ("a request before logging in", struct.pack(">ihi", 6, 4, 0), "expected a SaslHandshake"),
        (
            "an oversized frame",
            encode_handshake("SCRAM-SHA-256") + struct.pack(">i", 10_000_000),
            "SASL frame size 10000000 is outside 0..524288",
        ),
        (
            "a cut client-first",
            encode_handshake("SCRAM-SHA-256") + frame(b"n,,n=alice"),
            "cut or out of order",
        ),
        (
            "a cut frame, then the client left",
            encode_handshake("SCRAM-SHA-256") + struct.pack(">i", 100) + b"n,,",
            None,
        ),
        (
            "a negative size",
            encode_handshake("PLAIN") + struct.pack(">i", -1),
            "SASL frame size -1",
        ),
        ("a bad PLAIN message", encode_handshake("PLAIN") + frame(b"alice"), "0 NUL separators"),
    ],
)
def test_hostile_sasl_frames_close_the_connection(
    broker: BrokerProcess, name: str, data: bytes, line: str | None
) -> None:
    since = log_size(broker)
    for port in (broker.port, broker.port_08):
        _raw(broker, data, port)
        if line is not None:
            found = wait_for_log(
                broker, r"closing connection from 127\.0\.0\.1:[0-9]+: SASL", since
            )
            assert line in found, name
            since = log_size(broker)
    add_user_ready = SaslClientConfig("SCRAM-SHA-512", "broker-0", "broker-secret")
    with SimpleConsumer(*broker.address, sasl=add_user_ready) as consumer:
        assert consumer.latest_offset("still-serving", 0) == 0


def test_a_replayed_client_final_is_refused(chroot: ZkTarget, broker: BrokerProcess) -> None:
    """A recorded exchange cannot be played again: the broker's nonce is new each time."""
    add_user(chroot, "gina", "gina-secret")
    wait_for_user(broker, SaslClientConfig("SCRAM-SHA-256", "gina", "gina-secret"))
    client = ScramClient("SCRAM-SHA-256", "gina", "gina-secret", nonce="fixednonce")

    def exchange(sock: socket.socket, final: bytes | None) -> bytes:
        sock.sendall(encode_handshake("SCRAM-SHA-256"))
        sock.recv(4096)
        sock.sendall(frame(client.first()))
        server_first = _read(sock)
        sock.sendall(frame(final if final is not None else client.final(server_first)))
        return final or client.final(server_first)

    with socket.create_connection(broker.address, timeout=10) as sock:
        recorded = exchange(sock, None)
        assert _read(sock).startswith(b"v=")
    since = log_size(broker)
    with socket.create_connection(broker.address, timeout=10) as sock:
        exchange(sock, recorded)
        assert sock.recv(10) == b""
    wait_for_log(broker, "nonce is not the one of this exchange", since)


def _read(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", sock.recv(4))[0]
    return sock.recv(size)


def test_sasl_to_a_listener_without_it(tmp_path: Path, chroot: ZkTarget) -> None:
    plain = BrokerProcess(tmp_path / "plain", broker_id=9, zk_connect=chroot.connect)
    plain.start()
    try:
        config = SaslClientConfig("SCRAM-SHA-256", "x", "y")
        with (
            pytest.raises(SaslAuthenticationError, match="enable SASL"),
            SimpleConsumer(*plain.address, sasl=config) as consumer,
        ):
            consumer.latest_offset("anything", 0)
    finally:
        plain.stop(timeout=15)


def test_replication_between_brokers_logs_in(
    zookeeper: ZooKeeperServer, broker_factory: BrokerFactory
) -> None:
    """Followers fetch from their leader with the broker's own login (sasl.jaas.config): an
    acks=-1 produce is acknowledged once the follower has it, which it fetched logged in. With
    replica requests only from brokers (trust-tls), the login User:broker-<id> is the broker
    its replica id names: refused with 31, the follower would never have it."""
    target = zookeeper.create_chroot(f"/t/sasl-replication-{uuid.uuid4().hex[:8]}")
    brokers = {}
    for broker_id in (0, 1):
        add_user(target, f"broker-{broker_id}", f"broker-{broker_id}-secret")
        brokers[broker_id] = broker_factory(
            broker_id,
            zk=target,
            sasl_enabled_mechanisms="SCRAM-SHA-512",
            listener_security_protocol_map="PLAINTEXT:SASL_PLAINTEXT,KAFKA08:SASL_PLAINTEXT",
            security_inter_broker_protocol="SASL_PLAINTEXT",
            sasl_jaas_config=(
                f'ScramLoginModule required username="broker-{broker_id}" '
                f'password="broker-{broker_id}-secret";'
            ),
            replica_lag_time_max_ms=60000,  # a follower that cannot fetch stays in the ISR
            replication_require_authenticated_brokers="true",
            port_08=0,  # any free port, registered in ZooKeeper
        )
    add_user(target, "loader", "loader-secret")
    loader = SaslClientConfig("SCRAM-SHA-512", "loader", "loader-secret")
    with Cluster(target.connect) as cluster:
        [partition] = cluster.create_replicated_topic("payments", 1, 2)
        cluster.create_replicated_topic("payments08", 1, 2, message_format="0.8")
    [follower] = [r for r in partition.replicas if r != partition.leader]
    with Producer(
        zk_connect=target.connect,
        request_required_acks=-1,
        request_timeout_ms=5000,
        retries=20,
        sasl=loader,
    ) as producer:
        [sent] = producer.send("payments", [b"paid"])
        producer.send("payments08", [b"paid08"])  # to the leader's 0.8 listener
    assert (sent.offset, sent.messages) == (0, 1)
    wait_for_log(brokers[partition.leader], f"authenticated as User:broker-{follower}", 0)
    client = target.client()
    client.start(timeout=10)
    try:  # a reader that follows the leader logs in to it
        reader = PartitionReader(Leaders(client), "payments", 0, sasl=loader)
        assert [m.payload for m in reader.iter_messages(0)] == [b"paid"]
        reader.close()
        reader08 = PartitionReader08(Leaders(client), "payments08", 0, sasl=loader)
        assert [m.payload for m in reader08.iter_messages(0)] == [b"paid08"]
        reader08.close()
    finally:
        client.stop()
        client.close()


def test_a_group_consumer_logs_in_from_its_properties(
    chroot: ZkTarget, broker: BrokerProcess
) -> None:
    """consumer.properties with Kafka's sasl.mechanism and sasl.jaas.config: the group's
    fetchers log in (the mirror's consumer is made so)."""
    add_user(chroot, "hank", "hank-secret")
    config = SaslClientConfig("SCRAM-SHA-256", "hank", "hank-secret")
    wait_for_user(broker, config)
    topic = f"group-{uuid.uuid4().hex[:8]}"
    with Producer(broker_list=f"0:{broker.host}:{broker.port}", acks="ack", sasl=config) as p:
        p.send(topic, [b"a", b"b"])
    consumer = GroupConsumer.from_properties(
        {
            "groupid": f"g-{topic}",
            "zk.connect": chroot.connect,
            "consumer.timeout.ms": "5000",
            "security.protocol": "SASL_PLAINTEXT",  # as Kafka's: SASL_* logs in
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="hank" password="hank-secret";',
        }
    )
    try:
        stream = consumer.create_message_streams({topic: 1})[topic][0]
        got = [m.payload for m in itertools.islice(stream, 2)]
    finally:
        consumer.close()
    assert got == [b"a", b"b"]


def test_a_new_password_and_a_deleted_user_count_at_the_next_login(
    chroot: ZkTarget, broker: BrokerProcess
) -> None:
    """The broker watches /config/users: no restart for a change to count."""
    add_user(chroot, "ivan", "ivan-old")
    old = SaslClientConfig("SCRAM-SHA-256", "ivan", "ivan-old")
    new = SaslClientConfig("SCRAM-SHA-256", "ivan", "ivan-new")
    wait_for_user(broker, old)
    add_user(chroot, "ivan", "ivan-new")
    wait_for_user(broker, new)
    with pytest.raises(SaslAuthenticationError, match="invalid-proof"):
        login(broker, old)
    names = "SCRAM-SHA-256,SCRAM-SHA-512"
    assert configs(chroot, "--alter", "--entity-name", "ivan", "--delete-config", names) == 0
    deadline = time.monotonic() + 10
    while True:  # the deletion reaches the broker through its watch
        try:
            login(broker, new)
        except SaslAuthenticationError as exc:
            assert "invalid-proof" in str(exc)
            break
        assert time.monotonic() < deadline, "ivan still logs in after his deletion"
        time.sleep(0.1)
    add_user(chroot, "ivan", "ivan-again")  # a user made again is watched again
    wait_for_user(broker, SaslClientConfig("SCRAM-SHA-512", "ivan", "ivan-again"))


def login(broker: BrokerProcess, config: SaslClientConfig) -> None:
    with SimpleConsumer(*broker.address, sasl=config) as consumer:
        consumer.latest_offset("login", 0)


def test_a_group_consumer_with_a_wrong_password_says_so(
    chroot: ZkTarget,
    zk: KazooClient,
    broker: BrokerProcess,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A line per attempt, not a traceback; and the rebalance's OFFSETS log in too."""
    # not through `logbroker configs`: main() would set the logging up anew (no caplog)
    alter_user(zk, "judy", add={"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "judy-secret")})
    judy = SaslClientConfig("SCRAM-SHA-256", "judy", "judy-secret")
    wait_for_user(broker, judy)
    topic = f"judy-{uuid.uuid4().hex[:8]}"
    with Producer(broker_list=f"0:{broker.host}:{broker.port}", acks="ack", sasl=judy) as p:
        p.send(topic, [b"a"])
    consumer = GroupConsumer(
        f"g-{topic}",
        chroot.connect,
        consumer_timeout_ms=1500,
        fetcher_backoff_ms=200,
        sasl=SaslClientConfig("SCRAM-SHA-256", "judy", "not-judys"),
    )
    try:
        assert list(consumer.create_message_streams({topic: 1})[topic][0]) == []
    finally:
        consumer.close()
    lines = [r.getMessage() for r in caplog.records]
    fetcher = [r for r in caplog.records if r.getMessage().startswith("fetcher for broker")]
    assert fetcher, lines
    for record in fetcher:  # one clear line per attempt, not a traceback
        assert "the broker refused the proof" in record.getMessage() and not record.exc_info
    assert not [line for line in lines if "closed the connection" in line], lines
