"""The ACLs in a real ZooKeeper: `logbroker acls` writes them in Kafka's layout, and a broker's
AclCache follows the change notifications (waited on through its on_applied hook)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from logbroker.cli import main
from logbroker.security.acl_store import AclCache, AclStore
from logbroker.security.acls import Acl, Operation, Permission, group, topic
from logbroker.stack.zookeeper import ZkTarget

LOADER_READ = Acl("User:loader", "*", Operation.READ, Permission.ALLOW)


def acls(target: ZkTarget, *args: str) -> int:
    return main(["acls", "--zookeeper", target.connect, *args])


def test_add_list_and_remove_round_trip_in_kafkas_layout(
    zk_chroot: ZkTarget, zk_client: KazooClient, capsys: pytest.CaptureFixture[str]
) -> None:
    code = acls(
        zk_chroot, "--add", "--allow-principal", "User:loader", "--operation", "Read",
        "--topic", "page_views", "--group", "loaders",
    )  # fmt: skip
    assert code == 0
    data, _ = zk_client.get("/kafka-acl/Topic/page_views")
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {
                "principal": "User:loader",
                "permissionType": "Allow",
                "operation": "Read",
                "host": "*",
            }
        ],
    }
    assert zk_client.exists("/kafka-acl/Group/loaders")
    changes = sorted(zk_client.get_children("/kafka-acl-changes"))
    assert [zk_client.get(f"/kafka-acl-changes/{c}")[0] for c in changes] == [
        b"Topic:page_views",
        b"Group:loaders",
    ]
    assert all(c.startswith("acl_changes_") for c in changes)

    capsys.readouterr()
    # kafka-acls.sh's way of naming ZooKeeper works too
    where = f"zookeeper.connect={zk_chroot.connect}"
    assert main(["acls", "--authorizer-properties", where, "--list", "--topic", "page_views"]) == 0
    listed = capsys.readouterr().out
    assert "Current ACLs for resource `Topic:page_views`:" in listed
    assert "User:loader has Allow permission for operations: Read from hosts: *" in listed
    assert "Group:loaders" not in listed

    # a prompt answered no keeps them; --force removes without asking
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", io.StringIO("n\n"))
        assert acls(zk_chroot, "--remove", "--topic", "page_views") == 0
    assert "Are you sure you want to delete all ACLs for resource `Topic:page_views`?" in (
        capsys.readouterr().out
    )
    assert zk_client.exists("/kafka-acl/Topic/page_views")
    assert acls(zk_chroot, "--remove", "--topic", "page_views", "--force") == 0
    assert not zk_client.exists("/kafka-acl/Topic/page_views")  # its last ACL gone
    assert AclStore(zk_client).read_all() == {group("loaders"): frozenset({LOADER_READ})}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--add", "--topic", "t"], "--add needs --allow-principal or --deny-principal"),
        (["--add", "--allow-principal", "loader", "--topic", "t"], "principal is Type:name"),
        (["--add", "--allow-principal", "User:a", "--operation", "Eat", "--topic", "t"],
         "unknown operation 'Eat'"),
        (["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
         "--operation Write does not apply to Group"),
        (["--add", "--allow-principal", "User:a"], "needs a resource"),
        (["--add", "--allow-principal", "User:a", "--topic", "a/b"], "--topic 'a/b'"),
        (["--list", "--authorizer-properties", "zk=x"], "takes zookeeper.connect="),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_errors_and_write_nothing(
    zk_chroot: ZkTarget,
    zk_client: KazooClient,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    error: str,
) -> None:
    assert acls(zk_chroot, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("logbroker acls: ") and error in err and err.count("\n") == 1
    assert not zk_client.exists("/kafka-acl")


@pytest.fixture
def cache(zk_client: KazooClient) -> Iterator[tuple[AclCache, threading.Semaphore]]:
    applied = threading.Semaphore(0)
    made = AclCache(on_applied=applied.release)
    yield made, applied
    made.stop()


def test_the_cache_loads_everything_then_follows_each_change(
    zk_chroot: ZkTarget,
    zk_client: KazooClient,
    cache: tuple[AclCache, threading.Semaphore],
) -> None:
    store = AclStore(zk_client)
    store.add(topic("before"), [LOADER_READ])
    acl_cache, applied = cache
    acl_cache.start(zk_client)
    assert applied.acquire(timeout=10)  # the load
    assert acl_cache.loaded and acl_cache.get(topic("before")) == {LOADER_READ}

    writer = zk_chroot.client()  # another client: the CLI's
    writer.start(timeout=10)
    try:
        AclStore(writer).add(topic("after"), [LOADER_READ])
        assert applied.acquire(timeout=10)
        assert acl_cache.get(topic("after")) == {LOADER_READ}
        AclStore(writer).remove(topic("before"))
        assert applied.acquire(timeout=10)
        assert acl_cache.get(topic("before")) == frozenset()
    finally:
        writer.stop()
        writer.close()
    assert set(acl_cache.all()) == {topic("after")}
