"""Fixtures shared by every test layer: one real ZooKeeper server, a fresh chroot per test.

    zookeeper       (session) the ZooKeeperServer; stopped by PID at the end of the session
    zk_chroot       a ZkTarget: a new, empty chroot /t/<test name>-<uuid8> on that server;
                    .connect is the connect string with the chroot, .chroot the path
    zk_client       a started KazooClient inside that chroot, stopped afterwards
    expire_session  expire_session(client) -> new session id: expires the session on the server,
                    the real way (see logbroker.testing.zookeeper.expire_session)

More fixtures (brokers, ...) live in tests/fixtures_*.py, registered through ``pytest_plugins``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from logbroker.testing import zookeeper as zk

pytest_plugins = ["fixtures_brokers"]


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zk.ZooKeeperServer]:
    server = zk.ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_chroot(zookeeper: zk.ZooKeeperServer, request: pytest.FixtureRequest) -> zk.ZkTarget:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    return zookeeper.create_chroot(f"/t/{name}-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def zk_client(zk_chroot: zk.ZkTarget) -> Iterator[KazooClient]:
    client = zk_chroot.client()
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def expire_session(zookeeper: zk.ZooKeeperServer) -> Callable[[KazooClient], int]:
    def expire(client: KazooClient, timeout: float = 30.0) -> int:
        return zk.expire_session(client, zookeeper, timeout)

    return expire
