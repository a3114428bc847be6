"""The plan of an hour's load when a broker of the previous checkpoint is down while it is made.

Two real brokers of a 0.7-format topic (no Spark: a plan is discovery and offsets). A broker
that is restarting is waited for, so the hour's ranges hold its data; one that stays down
past the wait is left out (its partitions are carried forward by the plan, and their data
comes in a later hour), as before.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from logbroker.coordination import paths
from logbroker.stack.zookeeper import ZooKeeperServer
from spark_apps.load.plan import discover_known, source_options
from spark_apps.load.settings import LoadSettings

from .helpers import PAGE_VIEW, AnalysisCluster, start_cluster

TOPIC = "plan_restarts"


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AnalysisCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("plan-cluster"), "plan")
    c.register(TOPIC, PAGE_VIEW)
    c.produce(TOPIC, [c.event(TOPIC) for _ in range(200)], batch=20, keyed=True)
    yield c
    c.stop()


def test_a_broker_restarting_while_the_hour_is_planned_is_waited_for(
    cluster: AnalysisCluster,
) -> None:
    options = source_options(
        LoadSettings(zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect),
        TOPIC,
        2,
    )
    before = discover_known(options, ())
    known = {(s.broker_id, s.partition) for s in before}
    assert {b for b, _ in known} == {0, 1}  # the previous checkpoint's: on both brokers
    ends = {(s.broker_id, s.partition): s.latest for s in before}

    restarting = cluster.broker(1)
    restarting.stop()
    # gone for longer than the wait: left out, as a dead broker's partitions always were
    assert {s.broker_id for s in discover_known(options, known, wait_s=0.5)} == {0}

    back = threading.Timer(2.0, restarting.start)
    back.start()
    try:
        states = discover_known(options, known, wait_s=60, sleep=lambda s: time.sleep(0.2))
    finally:
        back.join()
    assert {(s.broker_id, s.partition) for s in states} == known
    assert {(s.broker_id, s.partition): s.latest for s in states} == ends  # its data is there


def test_a_broker_registered_before_it_answers_is_waited_for(cluster: AnalysisCluster) -> None:
    """Registered in ZooKeeper while it cannot answer yet (a broker starting, or stopping):
    its METADATA fails, and the plan asks again within its wait instead of failing."""
    options = source_options(
        LoadSettings(zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect),
        TOPIC,
        2,
    )
    before = discover_known(options, ())
    known = {(s.broker_id, s.partition) for s in before}
    ends = {(s.broker_id, s.partition): s.latest for s in before}

    # A listener that takes each connection and closes it, as a broker not yet serving does.
    closing = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def refuse() -> None:
        closing.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = closing.accept()
                conn.close()

    refuser = threading.Thread(target=refuse, daemon=True)
    refuser.start()
    zk = KazooClient(hosts=cluster.live.connect)
    zk.start()
    restarting = cluster.broker(1)
    try:
        restarting.stop()
        node = paths.broker_id_path(1)
        wait_until = time.monotonic() + 30
        while zk.exists(node) is not None and time.monotonic() < wait_until:
            time.sleep(0.1)
        port = closing.getsockname()[1]
        zk.create(node, paths.broker_value("starting", "127.0.0.1", port).encode(), ephemeral=True)

        def real_broker_back() -> None:
            zk.delete(node)
            restarting.start()

        back = threading.Timer(2.0, real_broker_back)
        back.start()
        try:
            states = discover_known(options, known, wait_s=60, sleep=lambda s: time.sleep(0.2))
        finally:
            back.join()
    finally:
        stop.set()
        refuser.join()
        closing.close()
        zk.stop()
        zk.close()
    assert {(s.broker_id, s.partition) for s in states} == known
    assert {(s.broker_id, s.partition): s.latest for s in states} == ends
