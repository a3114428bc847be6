"""SASL per listener, as Kafka's `listener.security.protocol.map`: one broker process with

    PLAINTEXT   the 0.7 port, no login (0.7 clients cannot log in)
    SASL_SSL    logbroker's protocol over TLS, a SCRAM login, no client certificate
    SASL_SSL08  Kafka 0.8's protocol, the same (logbroker's SASL_SSL clients, 0.8-format topics)
    SSL08       Kafka 0.8's protocol over TLS, a client certificate required
                (listener.name.ssl08.ssl.client.auth=required), no login: kcat's
    SASL_PLAINTEXT  logbroker's protocol, a PLAIN login only
                (listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN; the broker's
                mechanism is SCRAM-SHA-256)

and no authorizer: each listener asks exactly what its protocol says. Followers would fetch
over SASL_SSL (security.inter.broker.protocol). One broker and one chroot for the module;
two more brokers show followers fetching on the listener inter.broker.listener.name names.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kazoo.client import KazooClient

from logbroker.cli import main
from logbroker.client.cluster import Cluster
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.config import BrokerConfig, ConfigError
from logbroker.protocol.errors import LogbrokerError
from logbroker.security.certificates import CertificateAuthority, Issued
from logbroker.security.client import ClientCredentials
from logbroker.security.sasl import SaslAuthenticationError, SaslClientConfig
from logbroker.security.tls import ClientSecurity
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget, ZooKeeperServer

KCAT = shutil.which("kcat")
MECHANISM = "SCRAM-SHA-256"
ALICE = SaslClientConfig(MECHANISM, "alice", "alice-secret")
JAAS = 'ScramLoginModule required username="broker-0" password="broker-secret";'


@dataclass
class Listened:
    chroot: ZkTarget
    broker: BrokerProcess
    ca: CertificateAuthority
    kcat: Issued

    @property
    def sasl_ssl(self) -> int:
        return self.broker.listener_ports["SASL_SSL"]

    @property
    def ssl08(self) -> int:
        return self.broker.listener_ports["SSL08"]

    def tls(self) -> ClientSecurity:
        return ClientSecurity("SASL_SSL", str(self.ca.certfile))


def _add_user(chroot: ZkTarget, user: str, password: str) -> None:
    assert main(["configs", "--zookeeper", chroot.connect, "--entity-type", "users", "--alter",
                 "--entity-name", user, "--add-config", f"{MECHANISM}=[password={password}]"]) == 0  # fmt: skip


@pytest.fixture(scope="module")
def listened(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Listened]:
    chroot = zookeeper.create_chroot(f"/t/listeners-{uuid.uuid4().hex[:8]}")
    ca = CertificateAuthority(tmp_path_factory.mktemp("listener-certs"))
    own = ca.issue("broker-0")
    _add_user(chroot, "broker-0", "broker-secret")
    _add_user(chroot, ALICE.username, ALICE.password)
    broker = BrokerProcess(
        tmp_path_factory.mktemp("listener-broker"),
        zk_connect=chroot.connect,
        listeners={"SASL_SSL": 0, "SASL_SSL08": 0, "SSL08": 0, "SASL_PLAINTEXT": 0},
        overrides={
            "ssl.certfile": str(own.certfile),
            "ssl.keyfile": str(own.keyfile),
            "ssl.cafile": str(ca.certfile),
            "listener.name.ssl08.ssl.client.auth": "required",  # the others: none
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
            "security.inter.broker.protocol": "SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "sasl.jaas.config": 'ScramLoginModule required username="broker-0" '
            'password="broker-secret";',
            "connection.log.interval.ms": "0",
            "num.partitions": "1",
        },
    )
    broker.start()
    try:
        yield Listened(chroot, broker, ca, ca.issue("kcat"))
    finally:
        broker.stop(timeout=15)


def test_a_07_client_uses_the_plaintext_port_without_a_login(listened: Listened) -> None:
    broker = listened.broker
    with Producer(broker_list=f"0:{broker.host}:{broker.port}", acks="ack") as producer:
        producer.send("plain", [b"no login"])
    with SimpleConsumer(*broker.address) as consumer:
        messages, _next = consumer.fetch_messages("plain", 0, 0)
        assert consumer.connection.principal is None  # no login: the broker's ANONYMOUS
    assert [m.payload for m in messages] == [b"no login"]


def test_the_sasl_ssl_listener_asks_a_login_and_no_certificate(listened: Listened) -> None:
    context = listened.tls().context()
    host = listened.broker.host
    start = listened.broker.log_path.stat().st_size
    with (
        pytest.raises(LogbrokerError),
        SimpleConsumer(host, listened.sasl_ssl, tls=context, timeout=10) as refused,
    ):
        refused.latest_offset("plain", 0)
    deadline = time.monotonic() + 10
    while "expected a SaslHandshake" not in listened.broker.log_since(start):
        assert time.monotonic() < deadline, listened.broker.log_since(start)
        time.sleep(0.05)
    wait_for_login(listened)
    with SimpleConsumer(host, listened.sasl_ssl, tls=context, sasl=ALICE) as consumer:
        consumer.latest_offset("plain", 0)
        assert consumer.connection.principal == "User:alice"  # no certificate was asked


def wait_for_login(listened: Listened) -> None:
    """The broker reads users through a watch: a new one counts within moments."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with SimpleConsumer(
                listened.broker.host, listened.sasl_ssl, tls=listened.tls().context(), sasl=ALICE
            ) as consumer:
                consumer.latest_offset("ready", 0)
            return
        except SaslAuthenticationError:
            assert time.monotonic() < deadline, "the broker never knew alice"
            time.sleep(0.1)


def test_a_sasl_ssl_client_finds_the_sasl_ssl_listener_in_zookeeper(listened: Listened) -> None:
    """security.protocol=SASL_SSL: the brokers at their SASL_SSL listener (its name in
    /replication/endpoints), logged in; PLAINTEXT and SSL clients would not log in."""
    wait_for_login(listened)
    properties = {
        "security.protocol": "SASL_SSL",
        "ssl.cafile": str(listened.ca.certfile),
        "sasl.mechanism": MECHANISM,
        "sasl.username": ALICE.username,
        "sasl.password": ALICE.password,
    }
    with Cluster.from_properties(listened.chroot.connect, properties) as cluster:
        [endpoint] = cluster.brokers.brokers().values()
        assert endpoint.port == listened.sasl_ssl
        cluster.create_replicated_topic("found08", 1, 1, message_format="0.8")
    producer = Producer.from_properties({"zk.connect": listened.chroot.connect, **properties})
    with producer:
        producer.send("found", [b"over SASL_SSL"])
        producer.send("found08", [b"over SASL_SSL08"])  # the leader's SASL_SSL08, logged in
    credentials = ClientCredentials.from_properties(properties)
    reader = PartitionReader08.connect(
        listened.chroot.connect, "found08", 0, sasl=credentials.sasl, tls=credentials.context()
    )
    try:
        assert [m.payload for m in reader.iter_messages(0)] == [b"over SASL_SSL08"]
    finally:
        reader.close()
    as_ssl = ClientCredentials.from_properties({**properties, "security.protocol": "SSL"})
    assert as_ssl.sasl is None and as_ssl.tls  # sasl.* unused: SSL logs in by certificate
    assert ClientCredentials.from_properties(properties).sasl == ALICE


def _kcat(listened: Listened, certificate: bool) -> subprocess.CompletedProcess[str]:
    issued = listened.kcat
    command = [
        KCAT or "kcat", "-b", f"127.0.0.1:{listened.ssl08}",
        "-X", "security.protocol=ssl",
        "-X", f"ssl.ca.location={listened.ca.certfile}",
        "-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2",
        "-m", "5", "-L",
    ]  # fmt: skip
    if certificate:
        command[3:3] = ["-X", f"ssl.certificate.location={issued.certfile}",
                        "-X", f"ssl.key.location={issued.keyfile}"]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/install-system-deps.sh)")
def test_kcat_lists_metadata_on_ssl08_with_its_certificate_only(listened: Listened) -> None:
    listed = _kcat(listened, certificate=True)
    assert listed.returncode == 0, listed.stderr
    assert f"broker 0 at 127.0.0.1:{listened.ssl08}" in listed.stdout, listed.stdout
    start = listened.broker.log_path.stat().st_size
    refused = _kcat(listened, certificate=False)
    assert refused.returncode != 0, refused.stdout
    assert "broker 0 at" not in refused.stdout
    deadline = time.monotonic() + 10
    while "on listener SSL08: TLS handshake failed" not in listened.broker.log_since(start):
        assert time.monotonic() < deadline, listened.broker.log_since(start)
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0"},
            "listener SASL_PLAINTEXT is SASL_PLAINTEXT but sasl.enabled.mechanisms is empty",
        ),
        (
            {"listeners": "INTERNAL://127.0.0.1:0", "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT"},
            "listener INTERNAL is SASL_PLAINTEXT but sasl.enabled.mechanisms is empty",
        ),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": 'x required username="b" password="p";'},
            "no listener is SASL_PLAINTEXT or SASL_SSL",
        ),
        ({"listener.name.ssl08.ssl.client.auth": "required"}, "ssl08 is not one of the broker's listeners"),
        ({"listener.name.plaintext.ssl.keystore.location": "/k"}, "cannot be set per listener"),
        (
            {"listener.name.plaintext.sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS},
            "listener.name.plaintext.sasl.enabled.mechanisms: listener PLAINTEXT is PLAINTEXT",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": JAAS,
             "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,GSSAPI"},
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms: unknown SASL mechanism 'GSSAPI'",
        ),
        ({"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name=INTERNAL: not one of the broker's listeners"),
        ({"inter.broker.listener.name": "KAFKA08", "port.08": "0"}, "KAFKA08 speaks Kafka 0.8's protocol"),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
             "inter.broker.listener.name": "SASL_PLAINTEXT", "security.inter.broker.protocol": "SASL_PLAINTEXT"},
            "set only one of the two",
        ),
        (
            {"listener.name.plaintext.ssl.client.auth": "required", "security.inter.broker.protocol": "SSL"},
            "security.inter.broker.protocol=SSL: the broker has no SSL listener",
        ),
    ],
)  # fmt: skip
def test_a_bad_listener_setting_is_refused_naming_it(settings: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties(settings)
    assert named in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_sasl_ssl_listener_is_registered_by_name(listened: Listened) -> None:
    client = KazooClient(hosts=listened.chroot.connect)
    client.start(timeout=10)
    try:
        data, _ = client.get("/replication/endpoints/0")
    finally:
        client.stop()
        client.close()
    assert f"SASL_SSL://127.0.0.1:{listened.sasl_ssl}".encode() in data
    assert f"SSL08://127.0.0.1:{listened.ssl08}".encode() in data


def test_a_listener_takes_only_its_own_sasl_mechanisms(listened: Listened) -> None:
    """listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN: PLAIN there, and only
    there; SCRAM-SHA-256 (the broker's) on the SASL_* listeners without one of their own."""
    wait_for_login(listened)
    host, port = listened.broker.host, listened.broker.listener_ports["SASL_PLAINTEXT"]
    plain = SaslClientConfig("PLAIN", ALICE.username, ALICE.password)
    with SimpleConsumer(host, port, sasl=plain) as consumer:
        consumer.latest_offset("plain", 0)
        assert consumer.connection.principal == "User:alice"
    with (
        pytest.raises(SaslAuthenticationError, match="PLAIN"),
        SimpleConsumer(host, port, sasl=ALICE, timeout=10) as refused,
    ):
        refused.latest_offset("plain", 0)
    with (
        pytest.raises(SaslAuthenticationError, match=MECHANISM),
        SimpleConsumer(host, listened.sasl_ssl, tls=listened.tls().context(), sasl=plain) as no,
    ):
        no.latest_offset("plain", 0)


def test_followers_fetch_on_the_listener_inter_broker_listener_name_names(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """INTERNAL (mapped to SASL_PLAINTEXT, SCRAM-SHA-512 of its own) is where followers fetch:
    replication.require.authenticated.brokers=true refuses a fetch from anyone not logged in
    as a broker, the PLAINTEXT port logs no one in, and SASL_PLAINTEXT (listed first, the
    same protocol) takes PLAIN only, not the brokers' SCRAM-SHA-512. The proof: the leader
    stopped, the follower serves the message it could only have fetched on INTERNAL."""
    chroot = zookeeper.create_chroot(f"/t/inter-listener-{uuid.uuid4().hex[:8]}")
    for broker_id in (0, 1):
        assert main(["configs", "--zookeeper", chroot.connect, "--entity-type", "users",
                     "--alter", "--entity-name", f"broker-{broker_id}", "--add-config",
                     f"SCRAM-SHA-512=[password=secret-{broker_id}]"]) == 0  # fmt: skip
    brokers = [
        BrokerProcess(
            tmp_path_factory.mktemp(f"inter-listener-{broker_id}"),
            broker_id=broker_id,
            zk_connect=chroot.connect,
            listeners={"SASL_PLAINTEXT": 0, "INTERNAL": 0},
            overrides={
                "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "inter.broker.listener.name": "INTERNAL",
                "replication.require.authenticated.brokers": "true",
                "sasl.jaas.config": f'ScramLoginModule required username="broker-{broker_id}" '
                f'password="secret-{broker_id}";',
            },
        )
        for broker_id in (0, 1)
    ]
    for broker in brokers:
        broker.start()
    try:
        with Cluster(chroot.connect) as cluster:
            cluster.create_replicated_topic("inter", 1, 2)
        producer = Producer.from_properties(
            {"zk.connect": chroot.connect}, acks="ack", request_required_acks=-1, retries=20
        )
        with producer:
            producer.send("inter", [b"held by both"])  # acknowledged once the ISR has it
        with Cluster(chroot.connect) as cluster:
            [partition] = cluster.describe_replicated("inter")
            leader = partition.leader
            brokers[leader].stop(timeout=15)

            def moved() -> int | None:
                [now] = cluster.describe_replicated("inter")
                return now.leader if now.leader == 1 - leader else None

            deadline = time.monotonic() + 30
            while moved() is None:
                assert time.monotonic() < deadline, cluster.describe_replicated("inter")
                time.sleep(0.1)
        follower = brokers[1 - leader]
        with SimpleConsumer(*follower.address) as consumer:
            messages, _next = consumer.fetch_messages("inter", 0, 0)
        assert [m.payload for m in messages] == [b"held by both"]
    finally:
        for broker in brokers:
            broker.stop(timeout=15)
