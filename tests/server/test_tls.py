"""TLS listeners and replication only between brokers (issue 46, docs/security.md).

Two real brokers on a real ZooKeeper, each with its PLAINTEXT port, an `SSL` listener (0.7's
protocol) and an `SSL08` listener (Kafka 0.8's), `ssl.client.auth=required`, followers on
`security.inter.broker.protocol=SSL` (so `replication.require.authenticated.brokers` is on, its
`auto`). Certificates come from logbroker.security.certificates: a CA, `broker-0`, `broker-1`,
a client `loader`, and an `intruder` signed by another CA. `connection.log.interval.ms=0`: every
refusal is logged, so that each test finds its own line.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from logbroker.client.cluster import Cluster
from logbroker.client.connection import BrokerConnection, BrokerUnavailableError
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.config import BrokerConfig, ConfigError
from logbroker.coordination import paths
from logbroker.coordination import replication_state as zk
from logbroker.coordination.replication_state import Assignment, PartitionState
from logbroker.protocol.errors import ClusterAuthorizationFailedError, RequestTimedOutError
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.replication import (
    EpochQuery,
    OffsetsForLeaderEpochRequest,
    ReplicaFetch,
    ReplicaFetchRequest,
    decode_offsets_for_leader_epoch_response,
    decode_replica_fetch_response,
)
from logbroker.protocol.requests import AckedProduceRequest, FetchRequest, ProduceRequest
from logbroker.protocol.responses import decode_acked_produce_response, decode_fetch_response
from logbroker.replication.epochs import FILE_NAME as EPOCH_FILE
from logbroker.replication.replicas import ReplicaManager
from logbroker.security.certificates import CertificateAuthority, Issued
from logbroker.security.tls import ClientSecurity, client_context
from logbroker.server.handlers import RequestHandlers
from logbroker.server.metrics import BrokerMetrics
from logbroker.server.waiters import AppendWaiters
from logbroker.stack.broker import BrokerProcess, BrokerStartError
from logbroker.stack.zookeeper import ZooKeeperServer, find_free_port
from logbroker.storage.log_manager import LogManager

KCAT = shutil.which("kcat")


def wait_until(what: str, check: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@dataclass
class Secure:
    connect: str
    ca: CertificateAuthority
    loader: Issued
    intruder: Issued
    brokers: list[BrokerProcess]
    ssl_ports: list[int]
    ssl08_ports: list[int]

    def security(self, who: Issued | None = None) -> ClientSecurity:
        who = who or self.loader
        return ClientSecurity("SSL", str(self.ca.certfile), str(who.certfile), str(who.keyfile))

    def tls(self, who: Issued | None = None) -> BrokerConnection:
        """A connection to broker 0's SSL listener with `who`'s certificate."""
        context = self.security(who).context()
        return BrokerConnection("127.0.0.1", self.ssl_ports[0], timeout=10, tls=context)

    def create(self, topic: str, message_format: str = "0.7") -> None:
        with Cluster(self.connect) as cluster:
            cluster.create_replicated_topic(topic, 1, 2, message_format=message_format)

    def state(self, client: KazooClient, topic: str) -> PartitionState:
        data, stat = client.get(zk.partition_path(topic, 0))
        return PartitionState.decode(data, stat.version)


def _broker_settings(
    ca: CertificateAuthority, i: int, ssl_port: int, ssl08_port: int
) -> dict[str, str]:
    own = ca.issue(f"broker-{i}")
    return {
        "listeners": f"SSL://127.0.0.1:{ssl_port},SSL08://127.0.0.1:{ssl08_port}",
        "ssl.certfile": str(own.certfile),
        "ssl.keyfile": str(own.keyfile),
        "ssl.cafile": str(ca.certfile),
        "ssl.client.auth": "required",
        "security.inter.broker.protocol": "SSL",
        # the forged-fetch test freezes a follower for ~1 s: it must keep its session and
        # its ISR place (replica.lag.time.max.ms, 10 s) meanwhile
        "zk.sessiontimeout.ms": "10000",
        "replica.fetch.wait.max.ms": "100",
        "connection.log.interval.ms": "0",
    }


@pytest.fixture(scope="module")
def secure(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secure]:
    directory = tmp_path_factory.mktemp("tls")
    target = zookeeper.create_chroot(f"/t/tls-{uuid.uuid4().hex[:8]}")
    ca = CertificateAuthority(directory / "certs")
    other = CertificateAuthority(directory / "other-ca", name="someone-else")
    ssl_ports = [find_free_port() for _ in range(2)]
    ssl08_ports = [find_free_port() for _ in range(2)]
    brokers = [
        BrokerProcess(
            directory / f"broker-{i}",
            broker_id=i,
            zk_connect=target.connect,
            overrides=_broker_settings(ca, i, ssl_ports[i], ssl08_ports[i]),
        )
        for i in range(2)
    ]
    try:
        for broker in brokers:
            broker.start()
        yield Secure(
            target.connect,
            ca,
            ca.issue("loader"),
            other.issue("intruder"),
            brokers,
            ssl_ports,
            ssl08_ports,
        )
    finally:
        for broker in brokers:
            broker.stop(timeout=15)


def test_certificates_are_written_0600(secure: Secure) -> None:
    for path in (secure.ca.certfile, secure.ca.keyfile, secure.loader.keyfile):
        assert os.stat(path).st_mode & 0o777 == 0o600, path


def test_logbroker_clients_produce_and_consume_over_ssl(secure: Secure, tmp_path: Path) -> None:
    """The CLI with --command-config, through ZooKeeper to the brokers' SSL listeners, on a
    replicated topic at acks=-1: acknowledged only once the follower, fetching over TLS with
    its own certificate, holds it. Then a 0.7 topic through a broker list, a message larger
    than what the broker copies into one write: served from the file over TLS."""
    secure.create("secure-07")
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SSL\n"
        f"ssl.cafile={secure.ca.certfile}\n"
        f"ssl.certfile={secure.loader.certfile}\n"
        f"ssl.keyfile={secure.loader.keyfile}\n"
    )
    cli = [sys.executable, "-m", "logbroker.cli"]
    lines = "".join(f"event {i}\n" for i in range(20))
    produced = subprocess.run(
        [*cli, "produce", "--zookeeper", secure.connect, "--topic", "secure-07",
         "--command-config", str(config), "--request-required-acks", "-1",
         "--delivery-timeout-ms", "30000"],
        input=lines, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [*cli, "consume", "--zookeeper", secure.connect, "--topic", "secure-07",
         "--command-config", str(config), "--from-beginning", "--max-messages", "20",
         "--timeout-ms", "20000"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == lines
    # both replicas hold them: the follower copied over TLS, with its own certificate
    for broker in secure.brokers:
        directory = broker.log_dir / "secure-07-0"
        wait_until(
            f"broker {broker.broker_id}'s replica holds the lines",
            lambda d=directory: b"event 19" in b"".join(p.read_bytes() for p in d.glob("*.kafka")),
        )

    big = os.urandom(200_000)
    broker_list = f"0:127.0.0.1:{secure.ssl_ports[0]}"
    producer = Producer(broker_list=broker_list, security=secure.security(), acks="ack")
    try:
        producer.send("plain-07", [big, b"after"])
    finally:
        producer.close()
    context = secure.security().context()
    with SimpleConsumer("127.0.0.1", secure.ssl_ports[0], timeout=10, tls=context) as consumer:
        payloads = [m.payload for m in consumer.iter_messages("plain-07", 0, 0)]
    assert payloads == [big, b"after"]


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/install-system-deps.sh)")
def test_kcat_produces_and_consumes_over_the_ssl08_listener(secure: Secure) -> None:
    secure.create("secure-08", message_format="0.8")
    issued = secure.ca.issue("kcat")
    base = [
        KCAT or "kcat",
        "-b", ",".join(f"127.0.0.1:{p}" for p in secure.ssl08_ports),
        "-X", "api.version.request=false",
        "-X", "broker.version.fallback=0.8.2.2",
        "-X", "security.protocol=ssl",
        "-X", f"ssl.ca.location={secure.ca.certfile}",
        "-X", f"ssl.certificate.location={issued.certfile}",
        "-X", f"ssl.key.location={issued.keyfile}",
        "-t", "secure-08",
    ]  # fmt: skip
    messages = "".join(f"k{i}:v{i}\n" for i in range(10))
    produced = subprocess.run(
        [*base, "-P", "-K", ":", "-X", "request.required.acks=-1"],
        input=messages, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    out = ""

    def all_there() -> bool:
        nonlocal out
        run = subprocess.run(
            [*base, "-C", "-e", "-f", "%k:%s\n"], capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
        out = run.stdout
        return len(out.splitlines()) >= 10

    wait_until("kcat reads the 10 messages over SSL08", all_there)
    assert out == messages


def _refusal_logged(broker: BrokerProcess, start: int, *needles: str) -> bool:
    text = broker.log_since(start)
    return any(all(n in line for n in needles) for line in text.splitlines())


def test_plaintext_and_foreign_certificates_are_refused_and_logged(secure: Secure) -> None:
    broker = secure.brokers[0]
    start = broker.log_path.stat().st_size
    with socket.create_connection(("127.0.0.1", secure.ssl_ports[0]), timeout=10) as sock:
        sock.sendall(b"\x00\x00\x00\x0a\x00\x01" + b"\x00" * 8)  # a 0.7 FETCH, in clear text
        assert sock.recv(100) == b""  # closed, nothing answered
        client = f"127.0.0.1:{sock.getsockname()[1]}"
    wait_until(
        "the broker's line about the plaintext client",
        lambda: _refusal_logged(broker, start, client, "listener SSL", "TLS handshake failed"),
    )

    start = broker.log_path.stat().st_size
    with pytest.raises(BrokerUnavailableError) as refused, secure.tls(secure.intruder) as conn:
        conn.request(FetchRequest("plain-07", 0, 0, 1000))
    assert "ALERT_UNKNOWN_CA" in str(refused.value)  # what the client is told
    wait_until(
        "the broker's line about the foreign certificate",
        lambda: _refusal_logged(
            broker, start, "TLS handshake failed", "unable to get local issuer"
        ),
    )
    start = broker.log_path.stat().st_size
    expired = secure.ca.issue(
        "expired", not_before=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3),
        valid_days=1,
    )  # fmt: skip
    with pytest.raises(BrokerUnavailableError) as refused, secure.tls(expired) as conn:
        conn.request(FetchRequest("plain-07", 0, 0, 1000))
    assert "ALERT_CERTIFICATE_EXPIRED" in str(refused.value)
    wait_until(
        "the broker's line about the expired certificate",
        lambda: _refusal_logged(broker, start, "TLS handshake failed", "certificate has expired"),
    )
    # a client without a certificate, where one is required
    anonymous = ClientSecurity("SSL", str(secure.ca.certfile)).context()
    start = broker.log_path.stat().st_size
    without = BrokerConnection("127.0.0.1", secure.ssl_ports[0], timeout=10, tls=anonymous)
    with pytest.raises(BrokerUnavailableError), without:
        without.request(FetchRequest("plain-07", 0, 0, 1000))
    wait_until(
        "the broker's line about the missing certificate",
        lambda: _refusal_logged(broker, start, "TLS handshake failed", "CERTIFICATE"),
    )
    # and the broker goes on serving
    with secure.tls() as conn:
        assert decode_fetch_response(conn.request(FetchRequest("plain-07", 0, 0, 1000))).error == 0


def test_hostile_frames_over_tls_close_only_their_connection(secure: Secure) -> None:
    """test_bad_input's size checks, through TLS: a frame over max.socket.request.bytes and one
    under the smallest request each close their connection with a line naming the client, and
    the broker serves everyone else (the framing is the same ClientConnection's)."""
    broker = secure.brokers[0]
    context = secure.security().context()
    assert context is not None
    for size, needle in ((1 << 30, "is outside 2.."), (1, "is outside 2..")):
        start = broker.log_path.stat().st_size
        raw = socket.create_connection(("127.0.0.1", secure.ssl_ports[0]), timeout=10)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(size.to_bytes(4, "big") + b"\x00\x01")
            assert sock.recv(100) == b""  # closed, nothing answered
            client = f"127.0.0.1:{sock.getsockname()[1]}"
        wait_until(
            f"the line about the {size}-byte frame",
            lambda c=client, n=needle, s=start: _refusal_logged(
                broker, s, "closing connection from " + c, n
            ),
        )
    with secure.tls() as conn:  # everyone else is served
        assert decode_fetch_response(conn.request(FetchRequest("plain-07", 0, 0, 1000))).error == 0


def _forge(conn: BrokerConnection, replica_id: int, topic: str, offset: int) -> int:
    """A REPLICA_FETCH claiming to be broker `replica_id` at `offset`: its error code."""
    body = conn.request(
        ReplicaFetchRequest(replica_id, 0, 1, (ReplicaFetch(topic, 0, offset, 65536, 0),))
    )
    [answer] = decode_replica_fetch_response(body)
    return answer.error


def _committed(leader: BrokerProcess, topic: str) -> bytes:
    """What a consumer reads of the partition from its leader: up to the high watermark."""
    with BrokerConnection(*leader.address, timeout=10) as conn:
        response = decode_fetch_response(conn.request(FetchRequest(topic, 0, 0, 1 << 20)))
    assert response.error == 0
    return bytes(response.messages)


def test_a_forged_follower_fetch_is_refused_and_changes_nothing(secure: Secure) -> None:
    """The issue's first paragraph: the follower frozen, an acks=1 write past the high
    watermark and an acks=-1 write waiting for the follower, then REPLICA_FETCHes claiming
    the follower holds both, from clients that are not that broker: on the PLAINTEXT port (no
    certificate), with a client's certificate, with the leader's own, and an
    OFFSETS_FOR_LEADER_EPOCH from the client. Each is answered code 31 and logged; the
    acks=-1 write is not acknowledged, the high watermark and the ISR stay. The follower's
    certificate (the control) does move the high watermark."""
    topic = "forged"
    secure.create(topic)
    client = KazooClient(hosts=secure.connect)
    client.start(timeout=10)
    follower_pid = 0
    try:
        wait_until("a full ISR", lambda: len(secure.state(client, topic).isr) == 2)
        state = secure.state(client, topic)
        leader = secure.brokers[state.leader]
        follower = 1 - state.leader
        wait_until("the leader knows it leads", lambda: _produce(leader, topic, [b"first"]) > 0)
        wait_until("the follower has it", lambda: _committed(leader, topic) != b"")
        committed = _committed(leader, topic)
        follower_pid = secure.brokers[follower].pid or 0
        os.kill(follower_pid, signal.SIGSTOP)
        end = _produce(leader, topic, [b"not replicated"])
        assert _committed(leader, topic) == committed  # acks=1: past the high watermark
        waiting = BrokerConnection(*leader.address, timeout=30)
        must_wait = build_message_set([b"acks=-1"])
        waiting.send(AckedProduceRequest(False, (ProduceRequest(topic, 0, must_wait),), True, 500))
        claimed = end + len(must_wait)
        start = leader.log_path.stat().st_size
        code = ClusterAuthorizationFailedError.code
        leader_ssl = secure.ssl_ports[state.leader]
        impostors = {
            "plaintext": BrokerConnection(*leader.address, timeout=10),
            "client certificate": BrokerConnection(
                "127.0.0.1", leader_ssl, timeout=10, tls=secure.security().context()
            ),
            "the leader's own certificate": BrokerConnection(
                "127.0.0.1", leader_ssl, timeout=10, tls=_broker_context(secure, state.leader)
            ),
        }
        for what, conn in impostors.items():
            with conn:
                assert _forge(conn, follower, topic, claimed) == code, what
        with impostors["client certificate"] as conn:
            [epoch_end] = decode_offsets_for_leader_epoch_response(
                conn.request(OffsetsForLeaderEpochRequest((EpochQuery(topic, 0, 0),)))
            )
            assert epoch_end.error == code
        with waiting:
            [result] = decode_acked_produce_response(waiting.receive())
        assert result.error == RequestTimedOutError.code  # not acknowledged
        assert _committed(leader, topic) == committed
        assert secure.state(client, topic) == state
        for needle in ("User:ANONYMOUS", "User:CN=loader", f"User:CN=broker-{state.leader}"):
            assert _refusal_logged(
                leader, start, f"refused REPLICA_FETCH as broker {follower} from 127.0.0.1:", needle
            ), needle
        assert _refusal_logged(leader, start, "refused OFFSETS_FOR_LEADER_EPOCH", "CN=loader")
        # the control: the follower's own certificate is what the leader takes
        with BrokerConnection(
            "127.0.0.1", leader_ssl, timeout=10, tls=_broker_context(secure, follower)
        ) as conn:
            assert _forge(conn, follower, topic, claimed) == 0
        assert _committed(leader, topic) != committed
    finally:
        if follower_pid:
            os.kill(follower_pid, signal.SIGCONT)
        client.stop()
        client.close()


def _broker_context(secure: Secure, broker_id: int) -> ssl.SSLContext:
    directory = secure.ca.directory
    return client_context(
        str(secure.ca.certfile),
        str(directory / f"broker-{broker_id}.pem"),
        str(directory / f"broker-{broker_id}.key"),
    )


def _produce(broker: BrokerProcess, topic: str, payloads: list[bytes]) -> int:
    """An acks=1 produce on the PLAINTEXT port: the log end after it, 0 if refused."""
    with BrokerConnection(*broker.address, timeout=10) as conn:
        body = conn.request(
            AckedProduceRequest(
                False, (ProduceRequest(topic, 0, build_message_set(payloads)),), False, 10000
            )
        )
    [result] = decode_acked_produce_response(body)
    return 0 if result.error else result.next_offset


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"listeners": "SSL://127.0.0.1:0"}, "ssl.certfile is not set"),
        (
            {"listeners": "SSL://127.0.0.1:0", "ssl.certfile": "/etc/hostname", "ssl.keyfile": "/no/such.key"},
            "ssl.keyfile=/no/such.key: cannot read it",
        ),
        (
            {"listeners": "SSL://127.0.0.1:0", "ssl.certfile": "/etc/hostname", "ssl.keyfile": "/etc/hostname"},
            "ssl.certfile=/etc/hostname / ssl.keyfile=/etc/hostname: not a PEM certificate",
        ),
        ({"listeners": "TLS://127.0.0.1:0"}, "listeners: listener TLS has no security protocol"),
        ({"listeners": "SSL://127.0.0.1"}, "listeners: 'SSL://127.0.0.1' is not NAME://host:port"),
        ({"security.inter.broker.protocol": "SASL"}, "security.inter.broker.protocol=SASL"),
        ({"ssl.client.auth": "maybe", "listeners": "SSL://127.0.0.1:0", "ssl.certfile": "x"}, "ssl.client.auth=maybe"),
        ({"listener.security.protocol.map": "INTERNAL:TLS"}, "listener.security.protocol.map: 'INTERNAL:TLS'"),
        ({"advertised.listeners": "SSL://h:1"}, "advertised.listeners: SSL is not one of the broker's"),
        ({"replication.require.authenticated.brokers": "yes"}, "replication.require.authenticated.brokers=yes"),
    ],
)  # fmt: skip
def test_a_bad_security_setting_is_refused_naming_the_key(
    settings: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties(settings)
    assert named in str(refused.value)
    assert "\n" not in str(refused.value)


def test_client_auth_without_inter_broker_ssl_is_refused(secure: Secure) -> None:
    """Brokers that must authenticate to replicate, with followers on PLAINTEXT: refused."""
    own = secure.ca.directory
    with pytest.raises(ConfigError, match=r"security\.inter\.broker\.protocol=PLAINTEXT"):
        BrokerConfig.from_properties(
            {
                "listeners": "SSL://127.0.0.1:0",
                "ssl.certfile": str(own / "broker-0.pem"),
                "ssl.keyfile": str(own / "broker-0.key"),
                "ssl.cafile": str(secure.ca.certfile),
                "ssl.client.auth": "required",
            }
        )


def test_a_broker_with_a_bad_security_setting_does_not_start(tmp_path: Path) -> None:
    """The process: one line on its output, naming the key, and no broker."""
    broker = BrokerProcess(tmp_path / "bad", overrides={"listeners": "SSL://127.0.0.1:0"})
    with pytest.raises(BrokerStartError) as refused:
        broker.start(timeout=30)
    output = str(refused.value).splitlines()[1:]
    assert output == [
        "logbroker broker: ssl.certfile is not set: an SSL listener needs a certificate"
    ]


def test_a_forged_fetch_does_not_put_a_follower_back_in_the_isr(
    tmp_path: Path, zk_client: KazooClient
) -> None:
    """The ISR half of the issue's paragraph, in process (tests/replication/test_isr_expansion.py's
    setup): broker 1 is out of the ISR; a REPLICA_FETCH claiming it holds the whole log, from a
    client's certificate, is refused and asks nothing of the ISR; the same fetch from broker
    1's certificate (the control) asks for broker 1 to join."""
    topic = "t"
    zk_client.create(zk.topic_path(topic), Assignment(topic, 2, ((0, 1),)).encode(), makepath=True)
    zk_client.create(
        zk.partition_path(topic, 0), PartitionState(0, 0, (0,), 1).encode(), makepath=True
    )
    zk_client.create(paths.broker_id_path(1), b"", ephemeral=True, makepath=True)  # alive
    config = BrokerConfig(log_dir=str(tmp_path))
    logs = LogManager(config, replica_marker=EPOCH_FILE)
    manager = ReplicaManager(0, logs, lag_time_max_ms=600_000, checkpoint_interval_ms=600_000)
    manager._client = zk_client  # what start() sets; the worker stays unstarted
    try:
        manager._adopt_topics([topic])
        replica = manager.replica(topic, 0)
        assert replica is not None
        data, stat = zk_client.get(zk.partition_path(topic, 0))
        manager._apply(replica, PartitionState.decode(data, stat.version))  # 0 leads, ISR [0]
        handlers = RequestHandlers(
            logs, config, BrokerMetrics(0), AppendWaiters(), replicas=manager
        )
        handlers.authenticated_brokers_only = True  # what SSL listeners with client auth make
        handlers.acked_produce(
            AckedProduceRequest(
                False, (ProduceRequest(topic, 0, build_message_set([b"x"])),), False, 0
            ),
            "producer",
        )
        end = replica.log.end_offset
        forged = ReplicaFetchRequest(1, 0, 1, (ReplicaFetch(topic, 0, end, 65536, 0),))
        answer = handlers.replication(forged, "127.0.0.1:5000", "User:CN=loader")
        assert isinstance(answer, list)  # refused at once: header bytes only, no data
        [refused] = decode_replica_fetch_response(b"".join(bytes(p) for p in answer)[4:])  # type: ignore[arg-type]
        assert manager._asked_in == set() and 1 not in replica.follower_end
        assert refused.error == ClusterAuthorizationFailedError.code
        handlers.replication(forged, "127.0.0.1:5001", "User:CN=broker-1")
        assert manager._asked_in == {(topic, 0, 1)}  # the real broker 1 is asked in
    finally:
        manager.stop()
