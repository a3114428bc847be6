"""Fixtures shared by every test layer: one real ZooKeeper server, a fresh chroot per test.

    zookeeper       (session) the ZooKeeperServer; stopped by PID at the end of the session
    zk_chroot       a ZkTarget: a new, empty chroot /t/<test name>-<uuid8> on that server;
                    .connect is the connect string with the chroot, .chroot the path
    zk_client       a started KazooClient inside that chroot, stopped afterwards
    expire_session  expire_session(client) -> new session id: expires the session on the server,
                    the real way (harness.sessions.expire_session)
    quickstart_ports  held while a test uses `logbroker quickstart`'s fixed ports (2181, 9092-9095,
                    9192-9195): the suite runs on two xdist workers, and only one may hold them

More fixtures (brokers, ...) live in tests/fixtures_*.py, registered through ``pytest_plugins``.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from harness import sessions
from logbroker.stack import zookeeper as zk

pytest_plugins = ["fixtures_brokers", "fixtures_hosts", "fixtures_spark"]


def pytest_report_header() -> str:
    """Which message-set walks this run exercises: the compiled module, or the pure-Python
    reference (`make test-pure`, LOGBROKER_PURE_PYTHON=1, which brokers and Spark inherit)."""
    from logbroker.protocol import native

    return f"logbroker message-set walks: {native.ACTIVE}"


# One Airflow home for the whole session, set before any test imports airflow (Airflow reads
# its configuration at import). Never the developer's own home: tests write its database.
ROOT = Path(__file__).resolve().parents[1]
AIRFLOW_HOME = tempfile.mkdtemp(prefix="logbroker-airflow-home-")
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
os.environ.update(
    {
        "AIRFLOW_HOME": AIRFLOW_HOME,
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API__HOST": "127.0.0.1",
    }
)


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
        return sessions.expire_session(client, zookeeper, timeout)

    return expire


@pytest.fixture
def quickstart_ports() -> Iterator[None]:
    """One test at a time on quickstart's fixed ports, whichever xdist worker runs it: a lock
    file in the temporary directory every worker shares, held for the test."""
    with open(Path(tempfile.gettempdir()) / "logbroker-tests-quickstart-ports.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


# The modules that run a whole stack (Airflow's scheduler, PostgreSQL, Spark, brokers, a
# browser): each keeps both cores busy for minutes. xdist runs them one after the other on one
# worker, while the other worker takes every other module: two at once took twice as long
# each, and the last one to start kept one worker running alone.
WHOLE_STACKS = (
    "tests/deploy/test_ui_journeys.py",
    "tests/chaos/test_chaos_run.py",
    "tests/airflow/test_load_runs.py",
    "tests/airflow/test_pipeline_end_to_end.py",
    "tests/deploy/test_up.py",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadFileScheduling

    class WholeStacksTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "whole stacks" if module in WHOLE_STACKS else module

    return WholeStacksTogether(config, log)  # type: ignore[arg-type]


# When each xdist worker ran out of work, in seconds from the session's start: the summary
# prints them, so a run shows whether the whole stacks' worker or the other one is the longer.
_WORKERS_DONE: dict[str, float] = {}
_SESSION_STARTED = time.monotonic()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    _WORKERS_DONE[node.gateway.id] = time.monotonic() - _SESSION_STARTED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _WORKERS_DONE:
        done = ", ".join(f"{w} at {s:.0f} s" for w, s in sorted(_WORKERS_DONE.items()))
        terminalreporter.write_line(f"xdist workers ran out of work: {done}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with a test marked slow run first: xdist hands modules out in this order, and
    a long one started last would keep one worker busy after the other ran out of work."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)
