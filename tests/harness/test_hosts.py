"""Separate hosts on one machine (harness.hosts), with real namespaces, a real
ZooKeeper and real broker processes: what the replication tests will rely on.

The cluster of most tests: ZooKeeper on host `zk`, broker 1 on `b1`, broker 2 on `b2`, each
broker with a 2 s ZooKeeper session; the test process produces and fetches through the hosts'
addresses, and watches the brokers' registrations through its own ZooKeeper client.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from harness import hosts
from harness.hosts import Host, Network
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.stack.broker import BrokerProcess

NetworkFactory = Callable[..., Network]  # the network_factory fixture (tests/fixtures_hosts.py)

SESSION_MS = 2000
TOPIC = "events"
WAIT_S = 30.0  # a deadline, never a measure: sessions end in ~SESSION_MS


def wait_until(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting until {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """The process runs (a zombie does not: an orphan waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def reachable(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=1.0).close()
        return True
    except OSError:
        return False


@dataclass
class Cluster:
    net: Network
    zk_host: Host
    b1: Host
    b2: Host
    brokers: dict[int, BrokerProcess]
    zk: KazooClient  # the test process's own session, inside the cluster's chroot

    def registration(self, broker_id: int) -> str | None:
        """The broker's `/brokers/ids/<id>` value, None while it has none."""
        found = self.zk.exists(f"/brokers/ids/{broker_id}")
        if found is None:
            return None
        try:
            return self.zk.get(f"/brokers/ids/{broker_id}")[0].decode()
        except Exception:  # deleted in between
            return None

    def session_of(self, broker_id: int) -> int | None:
        found = self.zk.exists(f"/brokers/ids/{broker_id}")
        return found.ephemeralOwner if found is not None else None

    def produce(self, broker_id: int, payloads: list[bytes]) -> None:
        broker = self.brokers[broker_id]
        with Producer(broker_list=f"{broker_id}:{broker.host}:{broker.port}", acks="ack") as p:
            p.send(TOPIC, payloads)

    def fetch(self, broker_id: int) -> list[bytes]:
        broker = self.brokers[broker_id]
        with SimpleConsumer(broker.host, broker.port, timeout=10) as consumer:
            return [m.payload for m in consumer.fetch(TOPIC, 0, 0).messages()]


@pytest.fixture
def cluster(network_factory: NetworkFactory) -> Iterator[Cluster]:
    net = network_factory(["zk", "b1", "b2"])
    zk_host, b1, b2 = net.hosts
    target = zk_host.zookeeper().create_chroot("/cluster")
    overrides = {"zk.sessiontimeout.ms": str(SESSION_MS)}
    brokers = {
        1: b1.broker(1, target.connect, overrides=overrides),
        2: b2.broker(2, target.connect, overrides=overrides),
    }
    client = target.client()
    client.start(timeout=10)
    try:
        yield Cluster(net, zk_host, b1, b2, brokers, client)
    finally:
        client.stop()
        client.close()


def test_a_host_reaches_the_other_hosts_and_the_test_process_and_nothing_else(
    network_factory: NetworkFactory,
) -> None:
    net = network_factory(2)
    h0, h1 = net.hosts
    with (
        socket.create_server((net.test_address, 0)) as on_bridge,
        socket.create_server(("127.0.0.1", 0)) as on_loopback,
    ):
        probe = textwrap.dedent(
            """
            import json, socket, sys
            def connect(address, port):
                try:
                    socket.create_connection((address, port), timeout=2).close()
                    return "connected"
                except ConnectionRefusedError:
                    return "refused"
                except OSError as exc:
                    return type(exc).__name__ + ": " + str(exc)
            print(json.dumps([connect(a, int(p)) for a, p in zip(sys.argv[1::2], sys.argv[2::2])]))
            """
        )
        targets = [
            (net.test_address, on_bridge.getsockname()[1]),  # the test process: reached
            (h1.address, 9),  # another host, nothing listening: it answers, refused
            ("127.0.0.1", on_loopback.getsockname()[1]),  # the host's own loopback: refused
            ("192.0.2.1", 9),  # anything else (TEST-NET-1): no route
        ]
        args = [str(x) for target in targets for x in target]
        out = subprocess.run(
            [*h0.command_prefix, sys.executable, "-c", probe, *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    assert json.loads(out)[:3] == ["connected", "refused", "refused"]
    assert "Network is unreachable" in json.loads(out)[3]
    routes = subprocess.run(
        ["ip", "-n", h0.namespace, "-4", "route"], capture_output=True, text=True, check=True
    ).stdout
    assert routes.splitlines() == [
        f"{net.subnet} dev eth0 proto kernel scope link src {h0.address} "
    ], routes


def test_brokers_register_their_host_address_and_serve_the_test_process_there(
    cluster: Cluster,
) -> None:
    for broker_id, host in ((1, cluster.b1), (2, cluster.b2)):
        registered = cluster.registration(broker_id)
        assert registered is not None and registered.endswith(f":{host.address}:9092")
        host_, port = registered.split(":")[1:]
        payloads = [f"{host.name}-{i}".encode() for i in range(5)]
        with Producer(broker_list=f"{broker_id}:{host_}:{port}", acks="ack") as producer:
            producer.send(TOPIC, payloads)
        with SimpleConsumer(host_, int(port)) as consumer:
            assert [m.payload for m in consumer.fetch(TOPIC, 0, 0).messages()] == payloads
    assert cluster.brokers[1].pid in cluster.b1.pids()
    assert cluster.brokers[1].pid not in cluster.b2.pids()


def test_a_cut_host_loses_its_session_and_is_unreachable_until_healed(cluster: Cluster) -> None:
    net, b1 = cluster.net, cluster.b1
    cluster.produce(1, [b"before"])
    net.cut(b1)
    wait_until(lambda: cluster.registration(1) is None, "broker 1's registration is gone")
    assert not reachable(b1.address, 9092)
    cluster.produce(2, [b"meanwhile"])  # the rest of the network works on
    assert cluster.fetch(2) == [b"meanwhile"]
    assert cluster.registration(2) is not None

    net.heal(b1)
    wait_until(lambda: cluster.registration(1) is not None, "broker 1 registers again")
    assert cluster.registration(1).endswith(f":{b1.address}:9092")  # type: ignore[union-attr]
    cluster.produce(1, [b"after"])
    assert cluster.fetch(1) == [b"before", b"after"]
    assert [(e.action, e.hosts) for e in net.history] == [("cut", ("b1",)), ("heal", ("b1",))]
    assert net.history[0].monotonic < net.history[1].monotonic


def test_cut_between_a_broker_and_zookeeper_leaves_it_reachable_by_the_test(
    cluster: Cluster,
) -> None:
    net, b1 = cluster.net, cluster.b1
    net.cut_between(b1, cluster.zk_host)
    wait_until(lambda: cluster.registration(1) is None, "broker 1's session expires")
    cluster.produce(1, [b"while cut from zookeeper"])  # the producers still reach it
    assert cluster.fetch(1) == [b"while cut from zookeeper"]
    net.heal_between(b1, cluster.zk_host)
    wait_until(lambda: cluster.registration(1) is not None, "broker 1 registers again")

    # The other way round: the test cannot reach the broker, which keeps its session.
    session = cluster.session_of(1)
    net.cut_between(b1, net.tester)  # type: ignore[arg-type]
    assert not reachable(b1.address, 9092)
    time.sleep(2 * SESSION_MS / 1000)  # long enough for a session to expire, were it cut
    assert cluster.session_of(1) == session
    net.heal_between(b1, net.tester)  # type: ignore[arg-type]
    assert cluster.fetch(1) == [b"while cut from zookeeper"]
    assert [e.action for e in net.history] == ["cut_between", "heal_between"] * 2
    assert net.faults == {"cut": [], "cut_between": [], "paused": []}


def test_a_paused_broker_loses_its_session_and_serves_again_when_resumed(
    cluster: Cluster,
) -> None:
    net, b1 = cluster.net, cluster.b1
    cluster.produce(1, [b"one", b"two"])
    session = cluster.session_of(1)
    pids = net.pause(b1)
    assert cluster.brokers[1].pid in pids
    wait_until(lambda: cluster.registration(1) is None, "the paused broker's session expires")
    assert cluster.registration(2) is not None
    net.resume(b1)
    wait_until(lambda: cluster.registration(1) is not None, "broker 1 registers again")
    assert cluster.session_of(1) != session
    assert cluster.fetch(1) == [b"one", b"two"]


def test_a_killed_broker_starts_again_on_the_same_data(cluster: Cluster) -> None:
    net, b1, broker = cluster.net, cluster.b1, cluster.brokers[1]
    payloads = [f"m{i}".encode() for i in range(20)]
    cluster.produce(1, payloads)
    assert net.kill(b1) == [broker.pid]
    assert broker.proc is not None and broker.proc.wait(10) == -signal.SIGKILL
    assert b1.pids() == []
    wait_until(lambda: cluster.registration(1) is None, "the killed broker's session expires")
    broker.start()
    assert cluster.registration(1) is not None
    assert cluster.fetch(1) == payloads
    assert [e.action for e in net.history] == ["kill"]


def test_faults_are_undone_once_and_recorded(network_factory: NetworkFactory) -> None:
    net = network_factory(["a", "b"])
    a, b = net.hosts
    net.cut(a)
    with pytest.raises(ValueError, match="already cut"):
        net.cut(a)
    net.cut_between(a, b)
    with pytest.raises(ValueError, match="already cut from each other"):
        net.cut_between(b, a)
    with pytest.raises(ValueError, match="not paused"):
        net.resume(b)
    net.pause(b)
    assert net.faults == {"cut": ["a"], "cut_between": ["a|b"], "paused": ["b"]}
    net.heal_all()
    assert net.faults == {"cut": [], "cut_between": [], "paused": []}
    with pytest.raises(ValueError, match="not cut"):
        net.heal(a)
    assert [e.action for e in net.history] == [
        "cut",
        "cut_between",
        "pause",
        "resume",
        "heal_between",
        "heal",
    ]


def test_a_process_is_on_its_host_when_run_returns(network_factory: NetworkFactory) -> None:
    """Else a kill right after the start misses it, and it runs on in a deleted namespace."""
    net = network_factory(1)
    (host,) = net.hosts
    for i in range(5):
        process = host.run(["sleep", "600"], name=f"sleeper-{i}")
        assert net.kill(host) == [process.pid]
        assert process.wait(10) == -signal.SIGKILL


def test_close_stops_every_process_and_removes_every_name(
    network_factory: NetworkFactory,
) -> None:
    net = network_factory(2)
    h0, h1 = net.hosts
    sleeper = h0.run(["sleep", "600"], name="sleeper")
    net.pause(h1)  # close() undoes faults before it stops processes
    net.cut(h0)
    names = {net.bridge, *net.namespaces, *net.veths}
    assert names <= {*hosts.our_names()["namespaces"], *hosts.our_names()["links"]}
    net.close()
    assert sleeper.wait(0) == -signal.SIGTERM
    present = hosts.our_names()
    assert not names & {*present["namespaces"], *present["links"]}
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in net.namespaces)
    assert not (hosts.STATE_DIR / f"{net.bridge}.json").exists()


def test_sweep_removes_what_a_killed_run_left_and_nothing_alive(
    network_factory: NetworkFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    living = network_factory(1)
    crashing = textwrap.dedent(
        """
        import json, sys, time
        from pathlib import Path
        from harness.hosts import Network
        net = Network(Path(sys.argv[1]), 2).start()
        child = net.hosts[0].run(["sleep", "600"], name="orphan")
        print(json.dumps({"names": [net.bridge, *net.namespaces, *net.veths], "pid": child.pid}))
        sys.stdout.flush()
        time.sleep(600)
        """
    )
    run = subprocess.Popen(
        [sys.executable, "-c", crashing, str(tmp_path_factory.mktemp("crashing"))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None
        left = json.loads(run.stdout.readline())
    finally:
        run.kill()  # SIGKILL: no cleanup of its own
        run.wait()
    try:
        present = hosts.our_names()
        assert set(left["names"]) <= {*present["namespaces"], *present["links"]}
        orphan = left["pid"]
        assert alive(orphan)

        removed = hosts.sweep()
        assert left["names"][0] in removed
        assert living.bridge not in removed
        present = hosts.our_names()
        assert not set(left["names"]) & {*present["namespaces"], *present["links"]}
        assert {living.bridge, *living.namespaces} <= {*present["namespaces"], *present["links"]}
        wait_until(lambda: not alive(orphan), "the orphan is dead", 10)
    finally:
        hosts.sweep()  # this test's crashed run leaves nothing behind, failed or not
