"""Every part of the pipeline carries its credentials (issue 46 item 6), against real brokers
that take nothing but SASL (SCRAM-SHA-256) logins, on their plain 0.7 port and inside TLS on
their SSL listener: the CLI's --command-config, the mirror from one such cluster to another,
and an Airflow connection of type `logbroker` (hooks, the mirror operator's 0600 properties
files, the trigger).

Two clusters for the module, "source" and "target" (a broker and a chroot each, seconds);
each test uses its own topics. The users: `mirror` on both, with a different password each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from logbroker.cli import main
from logbroker.client.cluster import Cluster
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.config import read_properties
from logbroker.protocol.errors import LogbrokerError
from logbroker.security.certificates import CertificateAuthority
from logbroker.security.client import ClientCredentials
from logbroker.security.sasl import SaslAuthenticationError, SaslClientConfig
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget, ZooKeeperServer, find_free_port

MECHANISM = "SCRAM-SHA-256"
BROKER_LOGIN = 'ScramLoginModule required username="broker-0" password="broker-secret";'


@dataclass
class Secured:
    """One SASL-only cluster: its chroot, broker, SSL port, and the mirror user's password."""

    chroot: ZkTarget
    broker: BrokerProcess
    ssl_port: int
    password: str
    cafile: str

    def properties(self, **more: str) -> dict[str, str]:
        """The mirror user's client properties over SASL_SSL, as a user writes them."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": "mirror",
            "sasl.password": self.password,
            "ssl.cafile": self.cafile,
            **more,
        }


def _write(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _add_user(chroot: ZkTarget, user: str, password: str) -> None:
    setting = f"{MECHANISM}=[password={password}]"
    args = ["configs", "--zookeeper", chroot.connect, "--entity-type", "users", "--alter"]
    assert main([*args, "--entity-name", user, "--add-config", setting]) == 0


def _wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.1)


def _start(
    zookeeper: ZooKeeperServer,
    ca: CertificateAuthority,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
) -> Secured:
    chroot = zookeeper.create_chroot(f"/t/creds-{name}-{uuid.uuid4().hex[:8]}")
    _add_user(chroot, "broker-0", "broker-secret")
    password = f"{name}-mirror-secret-{uuid.uuid4().hex[:6]}"
    _add_user(chroot, "mirror", password)
    own = ca.issue(f"broker-0-{name}")
    ssl_port = find_free_port()
    broker = BrokerProcess(
        tmp_path_factory.mktemp(f"creds-{name}"),
        zk_connect=chroot.connect,
        overrides={
            # logins only: the 0.7 port SASL_PLAINTEXT, the TLS listener SASL_SSL
            "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
            "listeners": f"SASL_SSL://127.0.0.1:{ssl_port}",
            "ssl.certfile": str(own.certfile),
            "ssl.keyfile": str(own.keyfile),
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.jaas.config": BROKER_LOGIN,
            "num.partitions": "1",
        },
    )
    broker.start()
    secured = Secured(chroot, broker, ssl_port, password, str(ca.certfile))
    # the broker reads users through a watch: the mirror's login counts within moments
    config = SaslClientConfig(MECHANISM, "mirror", password)

    def logged_in() -> bool:
        try:
            with SimpleConsumer(*broker.address, sasl=config) as consumer:
                consumer.latest_offset("ready", 0)
        except SaslAuthenticationError:
            return False
        except LogbrokerError:
            pass
        return True

    _wait_until("the broker knows the mirror user", logged_in)
    return secured


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("creds-ca"))


@pytest.fixture(scope="module")
def source(
    zookeeper: ZooKeeperServer, ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    secured = _start(zookeeper, ca, tmp_path_factory, "source")
    yield secured
    secured.broker.stop(timeout=15)


@pytest.fixture(scope="module")
def target(
    zookeeper: ZooKeeperServer, ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    secured = _start(zookeeper, ca, tmp_path_factory, "target")
    yield secured
    secured.broker.stop(timeout=15)


def _produce(cluster: Secured, topic: str, payloads: list[bytes]) -> None:
    props = cluster.properties(**{"zk.connect": cluster.chroot.connect, "acks": "ack"})
    with Producer.from_properties(props) as producer:
        producer.send(topic, payloads)
    with Cluster.from_properties(cluster.chroot.connect, props) as view:
        _wait_until(f"{topic} registered", lambda: topic in view.topics())


def _read(cluster: Secured, topic: str) -> list[bytes]:
    """Every message of partition 0 of `topic`, read over SASL_SSL."""
    credentials = ClientCredentials.from_properties(cluster.properties())
    host, _port = cluster.broker.address
    with SimpleConsumer(
        host, cluster.ssl_port, tls=credentials.context(), sasl=credentials.sasl
    ) as consumer:
        messages, _next = consumer.fetch_messages(topic, 0, 0)
    return [bytes(m.payload) for m in messages]


def test_the_cli_logs_in_with_command_config(
    source: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """topics, lag and offsets log in with --command-config's SASL_SSL settings; without
    them the broker refuses (the connection is closed before any request)."""
    _produce(source, "cli-creds", [b"one", b"two"])
    config = str(_write(tmp_path / "client.properties", source.properties()))
    zk = ["--zookeeper", source.chroot.connect]
    capsys.readouterr()

    assert main(["topics", *zk, "describe", "cli-creds"]) == 1
    assert "cli-creds" not in capsys.readouterr().out  # no broker answered
    assert main(["topics", *zk, "--command-config", config, "describe", "cli-creds"]) == 0
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.startswith("cli-creds"))
    assert int(row[4]) > 0, out  # the latest offset, from the broker's SSL listener

    host, _port = source.broker.address
    broker = ["--broker", f"{host}:{source.ssl_port}", "--topic", "cli-creds"]
    assert main(["offsets", *broker, "--partition", "0", "--time", "-1"]) == 1  # no TLS
    capsys.readouterr()
    cmd = ["offsets", *broker, "--partition", "0", "--time", "-1", "--command-config", config]
    assert main(cmd) == 0
    assert int(capsys.readouterr().out.split()[0]) == int(row[4])

    # produce and consume log in with the same file (SASL on top of TLS)
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"p1\np2\n")
    produce = ["produce", *zk, "--topic", "cli-creds-pc", "--file", str(lines), "--acks"]
    assert main([*produce, "--command-config", config]) == 0
    consume = ["consume", *zk, "--topic", "cli-creds-pc", "--from-beginning"]
    consume += ["--max-messages", "2", "--timeout-ms", "10000", "--command-config", config]
    capsys.readouterr()
    assert main(consume) == 0
    assert capsys.readouterr().out.split() == ["p1", "p2"]

    # a bad setting: one line naming the file and the key, nothing connects
    bad = _write(tmp_path / "bad.properties", {"security.protocol": "SASL_SSL"})
    assert main(["lag", *zk, "--group", "g", "--command-config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.properties" in err and "needs sasl.mechanism" in err, err


def test_the_mirror_copies_between_sasl_ssl_clusters(
    source: Secured, target: Secured, tmp_path: Path
) -> None:
    """The mirror's consumer.config logs in to the source, its producer.config to the
    target (each cluster knows only its own password for `mirror`)."""
    topic = "mirrored-creds"
    payloads = [b"m%02d" % i for i in range(20)]
    _produce(source, topic, payloads)
    consumer = _write(
        tmp_path / "consumer.properties",
        source.properties(**{"zk.connect": source.chroot.connect, "groupid": "mirror-creds"}),
    )
    producer = _write(
        tmp_path / "producer.properties",
        target.properties(**{"zk.connect": target.chroot.connect}),
    )
    args = ["mirror", "--consumer.config", str(consumer), "--producer.config", str(producer)]
    assert main([*args, "--whitelist", topic, "--until-caught-up"]) == 0
    assert _read(target, topic) == payloads


def test_bad_credentials_are_refused_naming_the_file_or_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mirror file with SASL_SSL and no mechanism stops the mirror before it connects;
    a connection with a secret in extra, or a login without a SASL protocol, is an error
    naming the connection and not the secret."""
    from hooks.logbroker_hook import LogbrokerHook

    good = {"zk.connect": "127.0.0.1:1/nowhere", "groupid": "g"}
    consumer = _write(tmp_path / "c.properties", {**good, "security.protocol": "SASL_SSL"})
    producer = _write(tmp_path / "p.properties", good)
    args = ["mirror", "--consumer.config", str(consumer), "--producer.config", str(producer)]
    assert main([*args, "--whitelist", "x", "--until-caught-up"]) == 2  # a config error
    err = capsys.readouterr().err
    assert "consumer.config" in err and "security.protocol=SASL_SSL needs sasl.mechanism" in err

    secret = "in-extra-secret"
    for conn_id, conn, why in (
        (
            "lb_secret_extra",
            {"host": "h:1", "extra": {"sasl.password": secret}},
            "sasl.password in extra",
        ),
        (
            "lb_login_plaintext",
            {"host": "h:1", "login": "u", "password": secret},
            "has a login or password but security.protocol PLAINTEXT",
        ),
    ):
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "logbroker", **conn})
        )
        with pytest.raises(ValueError, match=why) as refused:
            _ = LogbrokerHook(conn_id).zk_connect
        assert conn_id in str(refused.value) and secret not in str(refused.value)


def test_an_airflow_connection_carries_its_credentials(
    source: Secured,
    target: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """login/password and extras by Kafka's names: the hook's cluster view and producer, the
    mirror operator (its properties files 0600 in a 0700 directory, the passwords in no log
    line and not on its command line) and the mirror trigger all log in."""
    from hooks.logbroker_hook import LogbrokerHook
    from hooks.operators import MirrorOperator
    from hooks.triggers import MirrorCaughtUpTrigger

    for name, cluster in (("LB_SECURE_SOURCE", source), ("LB_SECURE_TARGET", target)):
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{name}",
            json.dumps(
                {
                    "conn_type": "logbroker",
                    "host": cluster.chroot.connect,
                    "login": "mirror",
                    "password": cluster.password,
                    "extra": {
                        "security.protocol": "SASL_SSL",
                        "sasl.mechanism": MECHANISM,
                        "ssl.cafile": cluster.cafile,
                        "acks": "ack",
                    },
                }
            ),
        )
    hook = LogbrokerHook("lb_secure_source")
    ok, message = hook.test_connection()
    assert ok, message
    topic = "airflow-creds"
    with hook.producer() as producer:
        producer.send(topic, [b"a", b"b", b"c"])
    _wait_until("the topic's offsets", lambda: sum(hook.end_offsets([topic])[topic].values()) > 0)
    targets = hook.end_offsets([topic])

    seen: list[tuple[int, int, int, str, list[str]]] = []

    class Probe(MirrorOperator):
        def command(self, consumer_file: Path, producer_file: Path) -> list[str]:
            cmd = super().command(consumer_file, producer_file)
            seen.append(
                (
                    stat.S_IMODE(consumer_file.stat().st_mode),
                    stat.S_IMODE(producer_file.stat().st_mode),
                    stat.S_IMODE(consumer_file.parent.stat().st_mode),
                    consumer_file.read_text() + producer_file.read_text(),
                    cmd,
                )
            )
            return cmd

    operator = Probe(
        task_id="mirror",
        source_conn_id="lb_secure_source",
        target_conn_id="lb_secure_target",
        mirror_group="mirror-airflow-creds",
        whitelist=topic,
    )
    with caplog.at_level(logging.DEBUG):
        operator.execute({})
    consumer_mode, producer_mode, dir_mode, texts, cmd = seen[0]
    assert (consumer_mode, producer_mode, dir_mode) == (0o600, 0o600, 0o700)
    written = read_properties(texts.splitlines())
    assert written["sasl.mechanism"] == MECHANISM and written["ssl.cafile"] == source.cafile
    assert f"sasl.password={source.password}" in texts
    assert f"sasl.password={target.password}" in texts
    for password in (source.password, target.password):
        assert password not in " ".join(cmd)
        assert password not in caplog.text
    assert _read(target, topic) == [b"a", b"b", b"c"]

    async def wait() -> dict[str, object]:
        trigger = MirrorCaughtUpTrigger("lb_secure_source", "mirror-airflow-creds", targets, 0.1)
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    assert asyncio.run(wait())["status"] == "caught_up"


def test_a_spark_read_over_sasl_ssl_keeps_the_password_out_of_the_plan(
    source: Secured, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The source's options take the client's properties by their Kafka names; the driver's
    discovery and the executors' reads log in with them, and the password is in no plan
    string nor explain()'s output (Spark redacts options named like a password; the
    source's own options keep it in a repr-less field)."""
    topic = "spark-creds"
    payloads = [b"s%02d" % i for i in range(12)]
    _produce(source, topic, payloads)
    reader = (
        spark.read.format("logbroker")
        .option("zookeeper", source.chroot.connect)
        .option("subscribe", topic)
    )
    for key, value in source.properties().items():
        reader = reader.option(key, value)
    df = reader.load()
    assert sorted(bytes(r.value) for r in df.select("value").collect()) == payloads
    capsys.readouterr()
    df.explain(extended=True)
    df.explain(mode="formatted")
    execution = df._jdf.queryExecution()
    plans = [
        capsys.readouterr().out,
        execution.toString(),
        execution.logical().toString(),
        execution.analyzed().toString(),
        execution.executedPlan().toString(),
        execution.logical().toJSON(),
        execution.optimizedPlan().toJSON(),
    ]
    assert "BatchScan logbroker" in plans[0]
    for plan in plans:
        assert source.password not in plan


def test_the_hourly_load_gets_the_connections_credentials_in_a_0600_file(
    source: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HourlyLoadOperator hands the job the analysis connection's credentials in a 0600 file
    of a private directory, named by --client-config: spark-submit's command line (which the
    provider logs) holds no password, and the job's source options log in with them. (The
    spark-submit itself is stood in for: the Spark read is the test above.)"""
    from collections import defaultdict
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from hooks.operators import HourlyLoadOperator
    from hooks.spark_submit import SparkAppOperator
    from spark_apps.load.cli import _client, build_parser
    from spark_apps.load.plan import source_options
    from spark_apps.load.settings import LoadSettings

    monkeypatch.setenv(
        "AIRFLOW_CONN_LB_SECURE_ANALYSIS",
        json.dumps(
            {
                "conn_type": "logbroker",
                "host": source.chroot.connect,
                "login": "mirror",
                "password": source.password,
                "extra": {
                    "schema_registry": source.chroot.connect,
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": MECHANISM,
                    "ssl.cafile": source.cafile,
                },
            }
        ),
    )
    submitted: list[tuple[list[str], int, int, dict[str, str]]] = []

    def submit(self: SparkAppOperator, context: object) -> None:
        argv = list(self.application_args or [])
        client_file = Path(argv[argv.index("--client-config") + 1])
        submitted.append(
            (
                argv,
                stat.S_IMODE(client_file.stat().st_mode),
                stat.S_IMODE(client_file.parent.stat().st_mode),
                _client(build_parser().parse_args(argv)),
            )
        )

    monkeypatch.setattr(SparkAppOperator, "execute", submit)
    load = HourlyLoadOperator(
        task_id="load",
        topics=["page_views"],
        analysis_conn_id="lb_secure_analysis",
        warehouse="file:///nowhere",
    )
    events: defaultdict[object, SimpleNamespace] = defaultdict(
        lambda: SimpleNamespace(add=lambda *args, **kwargs: None)
    )
    context = {
        "data_interval_start": datetime(2026, 11, 22, 14, tzinfo=UTC),
        "dag_run": SimpleNamespace(run_type="manual", start_date=None),
        "ti": SimpleNamespace(try_number=1),
        "outlet_events": events,
    }
    load.execute(context)  # type: ignore[arg-type]
    argv, file_mode, dir_mode, client = submitted[0]
    assert (file_mode, dir_mode) == (0o600, 0o700)
    assert source.password not in " ".join(argv)
    assert client["sasl.password"] == source.password and client["sasl.username"] == "mirror"
    client_file = Path(argv[argv.index("--client-config") + 1])
    assert not client_file.parent.exists()  # removed once the submit returned

    settings = LoadSettings(zookeeper=source.chroot.connect, schema_registry="r", client=client)
    assert source.password not in repr(settings)
    credentials = source_options(settings, "page_views", 2).credentials
    assert credentials.sasl is not None and credentials.sasl.password == source.password
    assert credentials.protocol == "SASL_SSL"
