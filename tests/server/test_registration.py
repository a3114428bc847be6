"""Broker registration against a real ZooKeeper, and the 0.7 paths and value codecs it writes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from logbroker.coordination import paths
from logbroker.protocol.errors import LogbrokerError
from logbroker.server.registration import (
    BrokerIdTakenError,
    BrokerRegistration,
    ZooKeeperRegistrationError,
    ZooKeeperUnavailableError,
)
from logbroker.stack import zookeeper as zk

T0 = 1_700_000_000_123
LOGGER = "logbroker.server.registration"


class FakeClock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """Poll until ``predicate()`` is truthy; return its value or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def node(client: KazooClient, path: str) -> tuple[bytes, int] | None:
    """(value, ephemeral owner) of a node, or None if it does not exist."""
    try:
        data, stat = client.get(path)
    except NoNodeError:
        return None
    return data, stat.ephemeralOwner


@pytest.fixture
def registrations() -> Iterator[list[BrokerRegistration]]:
    """Registrations to stop after the test, whatever happened."""
    made: list[BrokerRegistration] = []
    yield made
    for registration in made:
        registration.stop()


@pytest.fixture
def register(
    zk_chroot: zk.ZkTarget, registrations: list[BrokerRegistration]
) -> Callable[..., BrokerRegistration]:
    """register(broker_id=3, port=9093, start=True, **kwargs) -> a registration in the test's chroot."""

    def make(
        broker_id: int = 3,
        port: int = 9093,
        *,
        connect: str | None = None,
        start: bool = True,
        **kwargs: Any,
    ) -> BrokerRegistration:
        kwargs.setdefault("clock_ms", FakeClock())
        registration = BrokerRegistration(
            connect or zk_chroot.connect, broker_id, "127.0.0.1", port, **kwargs
        )
        registrations.append(registration)
        if start:
            registration.start()
        return registration

    return make


# -- registering ---------------------------------------------------------------------------------


def test_registers_broker_and_topics_as_ephemeral_nodes(
    register: Callable[..., BrokerRegistration],
    zk_client: KazooClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    reg = register(topics=lambda: {"clicks": 4, "views": 1})

    session = reg.session_id
    assert reg.connected and session is not None and session != 0
    assert session == reg.client.client_id[0]
    assert node(zk_client, "/brokers/ids/3") == (
        f"127.0.0.1-{T0}:127.0.0.1:9093".encode(),
        session,
    )
    assert zk_client.get_children("/brokers/ids") == ["3"]
    assert node(zk_client, "/brokers/topics/clicks/3") == (b"4", session)
    assert node(zk_client, "/brokers/topics/views/3") == (b"1", session)
    assert sorted(zk_client.get_children("/brokers/topics")) == ["clicks", "views"]
    # Parents are persistent: they outlive the broker's session.
    for parent in ("/brokers", "/brokers/ids", "/brokers/topics", "/brokers/topics/clicks"):
        assert zk_client.exists(parent).ephemeralOwner == 0, parent
    assert any(
        "registered broker 3 at 127.0.0.1:9093" in r.getMessage() and r.name == LOGGER
        for r in caplog.records
    )


def test_a_topic_registered_later_appears_and_can_change(
    register: Callable[..., BrokerRegistration], zk_client: KazooClient
) -> None:
    reg = register(topics=lambda: {"clicks": 4})
    session = reg.session_id

    reg.register_topic("late", 2)
    wait_for(lambda: node(zk_client, "/brokers/topics/late/3") == (b"2", session), "late = 2")
    reg.register_topic("late", 5)  # e.g. the partition count was raised in the config
    wait_for(lambda: node(zk_client, "/brokers/topics/late/3") == (b"5", session), "late = 5")
    assert node(zk_client, "/brokers/topics/clicks/3") == (b"4", session)


def test_register_topic_rejects_bad_input_at_once(
    register: Callable[..., BrokerRegistration],
) -> None:
    reg = register()
    with pytest.raises(ValueError, match="topic"):
        reg.register_topic("a/b", 1)
    with pytest.raises(ValueError, match="partition count"):
        reg.register_topic("ok", 0)


def test_topics_registered_before_start_are_written_at_start(
    register: Callable[..., BrokerRegistration], zk_client: KazooClient
) -> None:
    reg = register(start=False, topics=lambda: {"from-logs": 3})
    reg.register_topic("early", 1)
    reg.start()
    session = reg.session_id
    wait_for(lambda: node(zk_client, "/brokers/topics/early/3") == (b"1", session), "early")
    assert node(zk_client, "/brokers/topics/from-logs/3") == (b"3", session)


# -- the id is taken -----------------------------------------------------------------------------


def test_a_second_broker_with_the_same_id_fails_and_leaves_the_first_alone(
    register: Callable[..., BrokerRegistration], zk_client: KazooClient
) -> None:
    first = register(port=9093, topics=lambda: {"clicks": 4})
    before = zk_client.get("/brokers/ids/3")

    second = register(port=9094, start=False, clock_ms=FakeClock(T0 + 5000))
    with pytest.raises(BrokerIdTakenError) as caught:
        second.start()

    message = str(caught.value)
    assert "broker id 3 is already registered by 127.0.0.1:9093" in message
    assert isinstance(caught.value, LogbrokerError)
    assert caught.value.broker_id == 3
    assert caught.value.holder == "127.0.0.1:9093"
    assert caught.value.owner_session == first.session_id
    assert not second.connected and second.session_id is None and second.client is None
    second.stop()  # what the broker does on a failed start: harmless
    after = zk_client.get("/brokers/ids/3")
    assert after == before  # same value and same stat: not rewritten, not re-created
    assert after[1].ephemeralOwner == first.session_id
    assert node(zk_client, "/brokers/topics/clicks/3") == (b"4", first.session_id)
    with pytest.raises(RuntimeError, match="stopped"):
        second.start()


def test_a_restart_before_the_old_session_expired_waits_for_it(
    register: Callable[..., BrokerRegistration], zk_chroot: zk.ZkTarget
) -> None:
    # The node of this broker's previous run (kill -9): same address, a session still alive.
    crashed = zk_chroot.client()
    crashed.start()
    crashed.ensure_path("/brokers/ids")
    crashed.create("/brokers/ids/3", b"127.0.0.1-1:127.0.0.1:9093", ephemeral=True)
    old_session = crashed.client_id[0]
    threading.Timer(1.0, crashed.stop).start()  # the old session ends a second later

    restarted = register(port=9093)  # waits for it instead of refusing to start
    assert restarted.session_id != old_session
    assert restarted.connected


def test_a_persistent_node_in_the_way_is_reported_as_such(
    register: Callable[..., BrokerRegistration], zk_client: KazooClient
) -> None:
    zk_client.create("/brokers/ids/3", b"old-1:10.1.1.1:9092", makepath=True)
    with pytest.raises(BrokerIdTakenError, match=r"by 10\.1\.1\.1:9092 .*persistent node"):
        register()
    assert zk_client.get("/brokers/ids/3")[0] == b"old-1:10.1.1.1:9092"


def test_id_taken_while_the_session_was_lost_is_retaken_when_freed(
    register: Callable[..., BrokerRegistration],
    zk_chroot: zk.ZkTarget,
    zk_client: KazooClient,
    expire_session: Callable[[KazooClient], int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    reg = register(topics=lambda: {"clicks": 4})
    # Hold the re-registration until an intruder has taken the id.
    gate = threading.Event()
    check_session = reg._check_session

    def gated_check_session(*args: Any) -> None:
        gate.wait(30)
        check_session(*args)

    monkeypatch.setattr(reg, "_check_session", gated_check_session)
    expire_session(reg.client)
    intruder = zk_chroot.client()
    intruder.start(timeout=10)
    try:
        intruder.create("/brokers/ids/3", b"10.9.9.9-1:10.9.9.9:9999", ephemeral=True)
        intruder_session = intruder.client_id[0]
        gate.set()
        wait_for(
            lambda: any("could not re-register" in r.getMessage() for r in caplog.records),
            "the re-registration to fail",
        )
        assert any("10.9.9.9:9999" in r.getMessage() for r in caplog.records)
        assert node(zk_client, "/brokers/ids/3") == (b"10.9.9.9-1:10.9.9.9:9999", intruder_session)
        assert zk_client.exists("/brokers/topics/clicks/3") is None
    finally:
        intruder.stop()
        intruder.close()
    session = reg.session_id
    wait_for(lambda: node(zk_client, "/brokers/ids/3") is not None, "the id to be retaken")
    assert node(zk_client, "/brokers/ids/3") == (f"127.0.0.1-{T0}:127.0.0.1:9093".encode(), session)
    wait_for(lambda: node(zk_client, "/brokers/topics/clicks/3") == (b"4", session), "topics")


# -- session expiry ------------------------------------------------------------------------------


def test_nodes_come_back_after_the_session_expires(
    register: Callable[..., BrokerRegistration],
    zk_client: KazooClient,
    expire_session: Callable[[KazooClient], int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    reg = register(topics=lambda: {"clicks": 4}, clock_ms=clock)
    reg.register_topic("late", 2)
    old = reg.session_id
    wait_for(lambda: node(zk_client, "/brokers/topics/late/3") == (b"2", old), "late")

    clock.now = T0 + 60_000
    new = expire_session(reg.client)

    assert new != old
    broker_value = f"127.0.0.1-{T0 + 60_000}:127.0.0.1:9093".encode()  # a new creatorId
    wait_for(lambda: node(zk_client, "/brokers/ids/3") == (broker_value, new), "/brokers/ids/3")
    wait_for(lambda: node(zk_client, "/brokers/topics/clicks/3") == (b"4", new), "clicks")
    wait_for(lambda: node(zk_client, "/brokers/topics/late/3") == (b"2", new), "late")
    assert reg.session_id == new and reg.connected
    # said once every node is back, so a moment after the last of them appears
    wait_for(
        lambda: any(
            "re-registered" in r.getMessage() and "broker 3 at 127.0.0.1:9093" in r.getMessage()
            for r in caplog.records
        ),
        "the re-registered line",
    )
    # And it keeps working in the new session.
    reg.register_topic("later", 7)
    wait_for(lambda: node(zk_client, "/brokers/topics/later/3") == (b"7", new), "later")


# No CREATE: the broker cannot write `<topic>/<id>` under such a node (an operator's lock, a
# tool's mistake); ZooKeeper answers NoAuth, which kazoo raises with an empty message.
NO_CREATE = [make_acl("world", "anyone", read=True, write=True, delete=True, admin=True)]


def test_after_an_expiry_every_topic_is_registered_even_when_one_fails(
    register: Callable[..., BrokerRegistration],
    zk_client: KazooClient,
    expire_session: Callable[[KazooClient], int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    reg = register(topics=lambda: {"aaa": 1, "mmm": 2, "zzz": 3})
    old = reg.session_id
    assert node(zk_client, "/brokers/topics/aaa/3") == (b"1", old)
    zk_client.set_acls("/brokers/topics/aaa", NO_CREATE)

    new = expire_session(reg.client)

    # aaa sorts first: once, its failure stopped the loop and mmm and zzz vanished from
    # ZooKeeper, so consumer groups stopped reading them.
    wait_for(lambda: node(zk_client, "/brokers/topics/mmm/3") == (b"2", new), "mmm")
    wait_for(lambda: node(zk_client, "/brokers/topics/zzz/3") == (b"3", new), "zzz")
    wait_for(lambda: "aaa" in reg.unregistered, "aaa among the unregistered")
    assert node(zk_client, "/brokers/topics/aaa/3") is None
    assert reg.unregistered["aaa"].startswith("NoAuthError: ")
    assert any(
        "could not register topic aaa" in r.getMessage()
        and "/brokers/topics/aaa/3" in r.getMessage()
        and "NoAuthError" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR
    )
    wait_for(lambda: any("2 of 3 topics" in r.getMessage() for r in caplog.records), "the summary")

    # Once the node is fixed, the next registration of the topic writes it.
    zk_client.set_acls("/brokers/topics/aaa", OPEN_ACL_UNSAFE)
    reg.register_topic("aaa", 1)
    wait_for(lambda: node(zk_client, "/brokers/topics/aaa/3") == (b"1", new), "aaa")
    wait_for(lambda: reg.unregistered == {}, "nothing unregistered")


def test_at_start_a_topic_that_cannot_be_registered_does_not_stop_the_others(
    register: Callable[..., BrokerRegistration], zk_client: KazooClient
) -> None:
    zk_client.ensure_path("/brokers/topics")
    zk_client.create("/brokers/topics/aaa", acl=NO_CREATE)
    reg = register(topics=lambda: {"aaa": 1, "bbb": 1})
    session = reg.session_id
    assert node(zk_client, "/brokers/topics/bbb/3") == (b"1", session)
    assert node(zk_client, "/brokers/ids/3") is not None
    assert list(reg.unregistered) == ["aaa"]


def test_a_refused_broker_node_is_an_error_that_says_what_and_where(
    register: Callable[..., BrokerRegistration], zk_client: KazooClient, zk_chroot: zk.ZkTarget
) -> None:
    zk_client.ensure_path("/brokers")
    zk_client.create("/brokers/ids", acl=NO_CREATE)
    with pytest.raises(ZooKeeperRegistrationError) as info:
        register()
    assert str(info.value) == (
        f"creating /brokers/ids/3 in ZooKeeper {zk_chroot.connect} failed: "
        "NoAuthError: Not authenticated."
    )


def test_survives_two_expiries_in_a_row(
    register: Callable[..., BrokerRegistration],
    zk_client: KazooClient,
    expire_session: Callable[[KazooClient], int],
) -> None:
    reg = register(topics=lambda: {"clicks": 4})
    expire_session(reg.client)
    new = expire_session(reg.client)
    wait_for(lambda: (node(zk_client, "/brokers/ids/3") or (b"", 0))[1] == new, "broker node")
    wait_for(lambda: node(zk_client, "/brokers/topics/clicks/3") == (b"4", new), "clicks")


# -- stopping ------------------------------------------------------------------------------------


def test_stop_removes_the_nodes_and_is_idempotent(
    register: Callable[..., BrokerRegistration],
    zk_client: KazooClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    reg = register(topics=lambda: {"clicks": 4})
    assert zk_client.exists("/brokers/ids/3") is not None

    reg.stop()

    assert zk_client.exists("/brokers/ids/3") is None
    assert zk_client.exists("/brokers/topics/clicks/3") is None
    assert zk_client.exists("/brokers/topics/clicks") is not None  # persistent parent stays
    assert not reg.connected and reg.session_id is None and reg.client is None
    assert not [t for t in threading.enumerate() if t.name == "zk-registration-3"]
    reg.stop()
    reg.register_topic("after-stop", 1)  # ignored, no error
    assert zk_client.exists("/brokers/topics/after-stop") is None
    assert any("left ZooKeeper" in r.getMessage() for r in caplog.records)


def test_a_stopped_id_can_be_registered_again_at_once(
    register: Callable[..., BrokerRegistration], zk_client: KazooClient
) -> None:
    register(port=9093).stop()
    again = register(port=9094)
    assert node(zk_client, "/brokers/ids/3") == (
        f"127.0.0.1-{T0}:127.0.0.1:9094".encode(),
        again.session_id,
    )


# -- connecting ----------------------------------------------------------------------------------


def test_chroot_is_created_and_holds_the_nodes(
    zookeeper: zk.ZooKeeperServer,
    zk_chroot: zk.ZkTarget,
    zk_client: KazooClient,
    register: Callable[..., BrokerRegistration],
) -> None:
    # Two missing levels below the test's chroot: kazoo's chrooted client cannot create them.
    connect = f"{zookeeper.connect_string}{zk_chroot.chroot}/clusters/live"
    assert zk_client.exists("/clusters") is None
    reg = register(connect=connect, topics=lambda: {"clicks": 4})

    assert reg.chroot == f"{zk_chroot.chroot}/clusters/live"
    assert node(zk_client, "/clusters/live/brokers/ids/3") == (
        f"127.0.0.1-{T0}:127.0.0.1:9093".encode(),
        reg.session_id,
    )
    assert node(zk_client, "/clusters/live/brokers/topics/clicks/3") == (b"4", reg.session_id)
    assert zk_client.exists("/brokers") is None  # nothing outside the chroot


def test_two_clusters_on_one_server_use_the_same_id(
    zookeeper: zk.ZooKeeperServer,
    zk_chroot: zk.ZkTarget,
    zk_client: KazooClient,
    register: Callable[..., BrokerRegistration],
) -> None:
    live = register(connect=f"{zookeeper.connect_string}{zk_chroot.chroot}/live", port=9093)
    analysis = register(connect=f"{zookeeper.connect_string}{zk_chroot.chroot}/analysis", port=9193)
    assert node(zk_client, "/live/brokers/ids/3")[1] == live.session_id
    assert node(zk_client, "/analysis/brokers/ids/3")[1] == analysis.session_id


def test_unreachable_zookeeper_fails_within_the_connection_timeout(
    register: Callable[..., BrokerRegistration],
) -> None:
    connect = f"127.0.0.1:{zk.find_free_port()}/live"
    reg = register(connect=connect, start=False, connection_timeout_ms=500)
    # (kazoo's own default would retry for ever: the test's timeout is the deadline)
    with pytest.raises(ZooKeeperUnavailableError, match=f"ZooKeeper at {connect} within 500 ms"):
        reg.start()
    assert not reg.connected and reg.client is None
    reg.stop()


def test_register_topic_never_blocks_while_zookeeper_is_down(
    tmp_path: Path, registrations: list[BrokerRegistration]
) -> None:
    server = zk.ZooKeeperServer(tmp_path / "zk").start()
    try:
        reg = BrokerRegistration(
            server.connect_string + "/live", 3, "127.0.0.1", 9093, session_timeout_ms=10_000
        )
        registrations.append(reg)
        reg.start()
        server.stop()
        wait_for(lambda: not reg.connected, "the client to notice")

        # A blocking implementation would wait for ZooKeeper here (the event loop would freeze).
        caller = threading.Thread(target=reg.register_topic, args=("while-down", 2), daemon=True)
        caller.start()
        caller.join(1.0)
        assert not caller.is_alive(), "register_topic blocked while ZooKeeper was down"

        server.start()  # same port and data
        watcher = KazooClient(hosts=server.connect_string + "/live")
        watcher.start(timeout=10)
        try:
            # Usually the session survives the short outage and the pending write goes through;
            # on a slow machine it may expire meanwhile, and the re-registration writes it.
            wait_for(
                lambda: node(watcher, "/brokers/topics/while-down/3") == (b"2", reg.session_id),
                "the topic to be written after ZooKeeper came back",
                timeout=20,
            )
            assert node(watcher, "/brokers/ids/3")[1] == reg.session_id
        finally:
            watcher.stop()
            watcher.close()
    finally:
        for registration in registrations:
            registration.stop()
        server.stop()


def test_stop_is_quick_while_zookeeper_is_down(tmp_path: Path) -> None:
    with zk.ZooKeeperServer(tmp_path / "zk") as server:
        reg = BrokerRegistration(server.connect_string, 3, "127.0.0.1", 9093)
        reg.start()
        reg.register_topic("t", 1)
    wait_for(lambda: not reg.connected, "the client to notice")
    reg.register_topic("t2", 1)  # the worker now waits for ZooKeeper
    stopper = threading.Thread(target=reg.stop, daemon=True)
    stopper.start()
    stopper.join(60)  # ZooKeeper never comes back: a stop that waited for it never returns
    assert not stopper.is_alive(), "stop() waited for ZooKeeper"
    assert reg.client is None
    assert not [t for t in threading.enumerate() if t.name == "zk-registration-3"]


def test_bad_settings_are_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="':'"):
        BrokerRegistration("127.0.0.1:2181", 0, "::1", 9092)
    with pytest.raises(ValueError, match="port"):
        BrokerRegistration("127.0.0.1:2181", 0, "127.0.0.1", 0)
    with pytest.raises(ValueError, match="broker id"):
        BrokerRegistration("127.0.0.1:2181", -1, "127.0.0.1", 9092)
    with pytest.raises(ValueError, match="chroot"):
        BrokerRegistration("127.0.0.1:2181/live/", 0, "127.0.0.1", 9092)


# -- paths and values (no ZooKeeper) -------------------------------------------------------------


def test_paths_of_the_0_7_layout() -> None:
    assert paths.BROKER_IDS == "/brokers/ids"
    assert paths.BROKER_TOPICS == "/brokers/topics"
    assert paths.broker_id_path(3) == "/brokers/ids/3"
    assert paths.broker_topic_path("clicks") == "/brokers/topics/clicks"
    assert paths.broker_topic_broker_path("clicks", 3) == "/brokers/topics/clicks/3"
    assert paths.consumer_ids_path("g") == "/consumers/g/ids"
    assert paths.consumer_id_path("g", "g_host-1-abcd1234") == "/consumers/g/ids/g_host-1-abcd1234"
    assert paths.consumer_offsets_path("g", "clicks") == "/consumers/g/offsets/clicks"
    assert paths.consumer_offset_path("g", "clicks", 3, 10) == "/consumers/g/offsets/clicks/3-10"
    assert paths.consumer_owners_path("g", "clicks") == "/consumers/g/owners/clicks"
    assert paths.consumer_owner_path("g", "clicks", 0, 2) == "/consumers/g/owners/clicks/0-2"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "nul\x00"])
def test_path_elements_are_checked(name: str) -> None:
    with pytest.raises(ValueError):
        paths.broker_topic_path(name)
    with pytest.raises(ValueError):
        paths.consumer_ids_path(name)


def test_partition_names() -> None:
    assert paths.partition_name(3, 10) == "3-10"
    assert paths.parse_partition_name("3-10") == (3, 10)
    # a replicated topic's partition: its number alone (Kafka 0.8's name), broker id -1
    assert paths.partition_name(-1, 10) == "10"
    assert paths.parse_partition_name("10") == (-1, 10)
    assert paths.consumer_offset_path("g", "t", -1, 10) == "/consumers/g/offsets/t/10"
    for bad in ("", "3-", "-1", "a-1", "3-1-2", "3-²", "²", " 3", "-1-3"):
        with pytest.raises(ValueError):
            paths.parse_partition_name(bad)
    with pytest.raises(ValueError):
        paths.partition_name(3, -1)
    with pytest.raises(ValueError):
        paths.partition_name(-2, 1)


def test_broker_value_round_trip() -> None:
    creator = paths.make_creator_id("10.0.0.5", 1323456789012)
    assert creator == "10.0.0.5-1323456789012"
    value = paths.broker_value(creator, "10.0.0.5", 9092)
    assert value == "10.0.0.5-1323456789012:10.0.0.5:9092"
    assert paths.parse_broker_value(value) == ("10.0.0.5", 9092)
    assert paths.parse_broker_value(value.encode()) == ("10.0.0.5", 9092)
    # Like Java's Broker.createBroker: fields 1 and 2, anything after ignored.
    assert paths.parse_broker_value("c:host.example:9092:extra") == ("host.example", 9092)


@pytest.mark.parametrize(
    ("creator", "host", "port"),
    [
        ("c", "::1", 9092),
        ("c", "", 9092),
        ("c:x", "h", 9092),
        ("c", "h", 0),
        ("c", "h", 65536),
        ("c", "h", True),
    ],
)
def test_broker_value_rejects_what_readers_would_misread(
    creator: str, host: str, port: Any
) -> None:
    with pytest.raises(ValueError):
        paths.broker_value(creator, host, port)


@pytest.mark.parametrize("value", ["", "host:9092", "c::9092", "c:h:", "c:h:90x2", "c:h:-1"])
def test_parse_broker_value_rejects_malformed_values(value: str) -> None:
    with pytest.raises(ValueError, match="creatorId:host:port"):
        paths.parse_broker_value(value)


def test_topic_value() -> None:
    assert paths.topic_value(4) == "4"
    assert paths.parse_topic_value("4") == 4
    assert paths.parse_topic_value(b"12") == 12
    for bad in (0, -1, True, "4"):
        with pytest.raises(ValueError):
            paths.topic_value(bad)  # type: ignore[arg-type]
    for bad_text in ("", "0", "-1", " 4", "4.0", "x"):
        with pytest.raises(ValueError):
            paths.parse_topic_value(bad_text)


@pytest.mark.parametrize(
    ("connect", "expected"),
    [
        ("127.0.0.1:2181", ("127.0.0.1:2181", None)),
        ("h1:2181,h2:2182/chroot", ("h1:2181,h2:2182", "/chroot")),
        ("h:2181/", ("h:2181", None)),
        ("h:2181/a/b", ("h:2181", "/a/b")),
        (" h:2181/live ", ("h:2181", "/live")),
    ],
)
def test_split_connect_string(connect: str, expected: tuple[str, str | None]) -> None:
    assert paths.split_connect_string(connect) == expected


@pytest.mark.parametrize(
    "connect", ["", "/live", "h:1,/x", "h:1/live/", "h:1/a//b", "h:1/./a", "h:1/a/.."]
)
def test_split_connect_string_rejects_bad_strings(connect: str) -> None:
    with pytest.raises(ValueError):
        paths.split_connect_string(connect)
