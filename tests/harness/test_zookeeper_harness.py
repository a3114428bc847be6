"""The ZooKeeper harness against the real server: fixtures, chroots, session expiry, start/stop."""

from __future__ import annotations

import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState

from harness.sessions import expire_session as expire
from logbroker.stack import zookeeper as zk


def java_processes_using(path: Path) -> list[int]:
    """PIDs of live processes whose command line mentions ``path``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmdline:
            pids.append(int(proc.name))
    return pids


def is_zookeeper_process(pid: int) -> bool:
    try:
        return b"ZooKeeperServerMain" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def accepts_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def fake_java(tmp_path: Path, script: str) -> str:
    path = tmp_path / "fake-java"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# -- the fixtures --------------------------------------------------------------------------------


def test_session_server_serves(zookeeper: zk.ZooKeeperServer, zk_client: KazooClient) -> None:
    assert zookeeper.connect_string == f"127.0.0.1:{zookeeper.port}"
    assert zookeeper.pid is not None and is_zookeeper_process(zookeeper.pid)
    assert "Mode: standalone" in zookeeper.command("srvr")
    zk_client.create("/hello", b"world")
    assert zk_client.get("/hello")[0] == b"world"


@pytest.mark.parametrize("run", ["first", "second"])
def test_each_test_gets_a_fresh_chroot(
    run: str, zookeeper: zk.ZooKeeperServer, zk_chroot: zk.ZkTarget, zk_client: KazooClient
) -> None:
    # Both runs write the same node: the second would see the first's if chroots were shared.
    assert zk_chroot.chroot.startswith(f"/t/test_each_test_gets_a_fresh_chroot_{run}_-")
    assert zk_chroot.connect == zookeeper.connect_string + zk_chroot.chroot
    assert zk_client.get_children("/") == []
    zk_client.create("/marker", run.encode())

    root = KazooClient(hosts=zookeeper.connect_string)
    root.start(timeout=10)
    try:
        assert root.get(f"{zk_chroot.chroot}/marker")[0] == run.encode()
        assert root.exists("/marker") is None
    finally:
        root.stop()
        root.close()


def test_chroots_do_not_see_each_other(zookeeper: zk.ZooKeeperServer) -> None:
    a = zookeeper.create_chroot("/t/isolation-a")
    b = zookeeper.create_chroot("/t/isolation-b")
    client_a, client_b = a.client(), b.client()
    client_a.start(timeout=10)
    client_b.start(timeout=10)
    try:
        client_a.create("/brokers/ids/0", b"a", makepath=True, ephemeral=True)
        assert client_b.exists("/brokers") is None
        client_b.create("/brokers/ids/0", b"b", makepath=True, ephemeral=True)
        assert client_a.get("/brokers/ids/0")[0] == b"a"
    finally:
        for client in (client_a, client_b):
            client.stop()
            client.close()


# -- session expiry ------------------------------------------------------------------------------


def test_expire_session_deletes_ephemerals_and_reconnects(
    zookeeper: zk.ZooKeeperServer,
    zk_chroot: zk.ZkTarget,
    zk_client: KazooClient,
    expire_session: Callable[[KazooClient], int],
) -> None:
    states: list[str] = []
    zk_client.add_listener(lambda state: states.append(state) and False)
    zk_client.create("/eph", ephemeral=True)
    old_session = zk_client.client_id[0]
    assert zk_client.exists("/eph").ephemeralOwner == old_session

    new_session = expire_session(zk_client)

    assert new_session != old_session
    assert zk_client.client_id[0] == new_session
    assert KazooState.LOST in states
    assert states[-1] == KazooState.CONNECTED
    # Gone at once (no waiting for a session timeout), for this client and for anyone else.
    assert zk_client.exists("/eph") is None
    observer = zk_chroot.client()
    observer.start(timeout=10)
    try:
        assert observer.exists("/eph") is None
    finally:
        observer.stop()
        observer.close()
    assert f"0x{old_session:x}" not in zookeeper.command("dump")
    # The client works in its new session.
    zk_client.create("/eph", ephemeral=True)
    assert zk_client.exists("/eph").ephemeralOwner == new_session


def test_expire_session_accepts_a_connect_string(
    zookeeper: zk.ZooKeeperServer, zk_client: KazooClient
) -> None:
    zk_client.create("/eph", ephemeral=True)
    old_session = zk_client.client_id[0]
    new_session = expire(zk_client, zookeeper.connect_string, timeout=20)
    assert new_session != old_session
    assert zk_client.exists("/eph") is None


def test_expire_session_twice(zk_client: KazooClient, expire_session: Callable[..., int]) -> None:
    first = expire_session(zk_client)
    second = expire_session(zk_client)
    assert len({first, second}) == 2
    zk_client.create("/still-works")


def test_expire_session_needs_a_connected_client(zk_chroot: zk.ZkTarget) -> None:
    with pytest.raises(RuntimeError, match="connected client"):
        expire(zk_chroot.client(), zk_chroot.server)


# -- start and stop ------------------------------------------------------------------------------


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    server = zk.ZooKeeperServer(tmp_path).start()
    pid, port = server.pid, server.port
    assert pid is not None and is_zookeeper_process(pid) and accepts_connections(port)

    server.stop()

    assert not is_zookeeper_process(pid)
    assert java_processes_using(tmp_path) == []
    assert server.pid is None and not server.running
    assert not accepts_connections(port)
    server.stop()  # idempotent


def test_context_manager_stops_the_server(tmp_path: Path) -> None:
    with zk.ZooKeeperServer(tmp_path) as server:
        pid = server.pid
        assert pid is not None and server.running
        assert server.command("ruok") == "imok"
    assert not is_zookeeper_process(pid)
    assert java_processes_using(tmp_path) == []


def test_restart_keeps_port_and_data(tmp_path: Path) -> None:
    server = zk.ZooKeeperServer(tmp_path)
    try:
        target = server.start().create_chroot("/live")
        port = server.port
        client = target.client()
        client.start(timeout=10)
        client.create("/brokers/topics/t", b"kept", makepath=True)
        client.stop()
        client.close()
        server.stop()

        server.start()
        assert server.port == port
        client = target.client()
        client.start(timeout=10)
        assert client.get("/brokers/topics/t")[0] == b"kept"
        client.stop()
        client.close()
    finally:
        server.stop()


def test_port_already_taken_is_reported(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = zk.ZooKeeperServer(tmp_path, port=port)
        with pytest.raises(zk.ZooKeeperPortInUseError, match=f"127.0.0.1:{port}.*already in use"):
            server.start(timeout=20)
    assert server.pid is None
    assert java_processes_using(tmp_path) == []


def test_port_of_another_zookeeper_is_reported(
    tmp_path: Path, zookeeper: zk.ZooKeeperServer
) -> None:
    # The other server answers on that port: start() must not take its answers for ours.
    server = zk.ZooKeeperServer(tmp_path, port=zookeeper.port)
    with pytest.raises(zk.ZooKeeperPortInUseError, match="already in use"):
        server.start(timeout=20)
    assert java_processes_using(tmp_path) == []
    assert "Mode: standalone" in zookeeper.command("srvr")


def test_a_free_port_taken_meanwhile_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken, zk.find_free_port()])
        monkeypatch.setattr(zk, "find_free_port", lambda host="127.0.0.1": next(ports))
        with zk.ZooKeeperServer(tmp_path) as server:
            assert server.port != taken
            assert "Mode: standalone" in server.command("srvr")


def test_server_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    java = fake_java(tmp_path, "echo 'Invalid config, exiting abnormally' >&2\nexit 3\n")
    with pytest.raises(zk.ZooKeeperStartError, match=r"(?s)exited with code 3.*Invalid config"):
        zk.ZooKeeperServer(tmp_path, java=java).start(timeout=20)


def test_server_that_never_serves_times_out_and_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "fake.pid"
    java = fake_java(tmp_path, f"echo $$ > {pid_file}\necho 'hanging here'\nexec sleep 600\n")
    server = zk.ZooKeeperServer(tmp_path, java=java)
    with pytest.raises(zk.ZooKeeperStartError, match=r"(?s)not serving .* after 1 s.*hanging here"):
        server.start(timeout=1)
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists()
    assert server.pid is None
