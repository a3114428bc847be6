"""The registry against a real ZooKeeper: the §3.4 layout, ids and versions, races, bad nodes."""

from __future__ import annotations

import json
import threading

import pytest

from logbroker.serde.errors import IncompatibleSchemaError, RegistryError, UnknownSchemaError
from logbroker.serde.registry import SchemaRegistry
from logbroker.serde.schemas import audit_count_schema, parse_event_schema


def event(*fields: dict, name: str = "PageView") -> dict:
    return {
        "type": "record",
        "name": name,
        "namespace": "demo",
        "fields": [{"name": "header", "type": "logbroker.EventHeader"}, *fields],
    }


V1 = event({"name": "page", "type": "string"})
V2 = event(
    {"name": "page", "type": "string"}, {"name": "ref", "type": ["null", "string"], "default": None}
)


@pytest.fixture
def registry(zk_chroot):
    with SchemaRegistry(zk_chroot.connect + "/registry") as reg:
        yield reg


def test_round_trip_and_the_layout_in_zookeeper(registry, zk_client):
    first = registry.register("page_views", V1)
    assert (first.subject, first.version, first.id) == ("page_views", 1, 1)
    second = registry.register("page_views", V2)
    assert (second.version, second.id) == (2, 2)
    audit = registry.register("_audit", audit_count_schema())
    assert (audit.version, audit.id) == (1, 3)

    # the layout of docs/design.md §3.4, read with a plain ZooKeeper client
    assert sorted(zk_client.get_children("/registry/ids")) == ["1", "2", "3"]
    stored, _ = zk_client.get("/registry/ids/2")
    assert stored.decode() == parse_event_schema(V2).canonical
    assert json.loads(stored)["name"] == "demo.PageView"
    assert sorted(zk_client.get_children("/registry/subjects/page_views")) == [
        "0000000001",
        "0000000002",
    ]
    assert zk_client.get("/registry/subjects/page_views/0000000002")[0] == b"2"

    # reading back, with a second client that has no cache
    with SchemaRegistry(registry.connect) as other:
        assert other.schema(2) == parse_event_schema(V2)
        assert other.subjects() == ["_audit", "page_views"]
        assert other.versions("page_views") == [1, 2]
        assert other.latest("page_views") == second
        assert other.version("page_views", 1) == first
        assert [v.id for v in other.all_versions("page_views")] == [1, 2]
        assert other.ids() == [1, 2, 3]


def test_the_same_schema_gets_the_same_id(registry):
    first = registry.register("page_views", V1)
    # formatted differently, header inline: the same canonical JSON
    again = json.dumps(V1, indent=4).replace(
        '"logbroker.EventHeader"',
        json.dumps(
            {
                "type": "record",
                "name": "EventHeader",
                "namespace": "logbroker",
                "fields": [
                    {
                        "name": "timestamp",
                        "type": {"type": "long", "logicalType": "timestamp-millis"},
                    },
                    {"name": "server", "type": "string"},
                    {"name": "producer_id", "type": "string"},
                    {"name": "seq", "type": "long"},
                ],
            }
        ),
    )
    assert registry.register("page_views", again) == first
    registry.register("page_views", V2)
    assert registry.register("page_views", V1) == first  # an older version is still found
    elsewhere = registry.register("page_views_copy", V1)
    assert (elsewhere.version, elsewhere.id) == (1, first.id)  # one schema, one id
    assert registry.ids() == [1, 2]


def test_an_incompatible_version_is_refused_naming_the_field(registry, zk_client):
    registry.register("page_views", V1)
    breaking = event({"name": "page", "type": "string"}, {"name": "member_id", "type": "long"})
    with pytest.raises(
        IncompatibleSchemaError,
        match=r"subject 'page_views'.*field 'member_id': added without a default",
    ) as caught:
        registry.register("page_views", breaking)
    assert caught.value.field == "member_id"
    assert registry.versions("page_views") == [1]
    assert zk_client.get_children("/registry/ids") == ["1"]  # nothing half-created


def test_concurrent_registrants_get_distinct_ids_and_versions(zk_chroot):
    connect = zk_chroot.connect + "/registry"
    registrants = 6
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(registrants)

    def register(n: int) -> None:
        try:
            with SchemaRegistry(connect) as reg:
                barrier.wait()
                mine = []
                for k in range(3):
                    # every schema differs; all go to one subject (compatible: defaults) or their own
                    field = {"name": f"f{n}_{k}", "type": "int", "default": 0}
                    mine.append(reg.register("shared", event(field)))
                    mine.append(reg.register(f"own-{n}", event(field, name=f"Own{n}")))
                results[n] = mine
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=register, args=(n,)) for n in range(registrants)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    registered = [v for mine in results.values() for v in mine]
    ids = [v.id for v in registered]
    assert len(set(ids)) == len(ids) == registrants * 6
    with SchemaRegistry(connect) as reg:
        assert reg.ids() == sorted(ids)
        assert reg.versions("shared") == list(range(1, registrants * 3 + 1))
        for v in registered:
            assert reg.version(v.subject, v.version) == v


def test_bad_nodes_and_unknown_names_are_clear_errors(registry, zk_client):
    registry.register("page_views", V1)
    zk_client.create("/registry/ids/9", b"this is not json")
    with pytest.raises(
        RegistryError,
        match=r"registry node .*/registry/ids/9 is not JSON: Expecting value at line 1 column 1",
    ):
        registry.schema(9)
    zk_client.create("/registry/ids/10", b'{"type": "record", "name": "X", "fields": []}')
    with pytest.raises(RegistryError, match=r"/registry/ids/10: record X is not an event schema"):
        registry.schema(10)
    zk_client.create("/registry/subjects/broken/0000000001", b"one", makepath=True)
    with pytest.raises(
        RegistryError, match=r"/registry/subjects/broken/0000000001 should hold a decimal schema id"
    ):
        registry.latest("broken")
    with pytest.raises(UnknownSchemaError, match=r"unknown schema id 77: no node /ids/77"):
        registry.schema(77)
    with pytest.raises(UnknownSchemaError, match=r"unknown subject 'nope'"):
        registry.latest("nope")
    with pytest.raises(UnknownSchemaError, match=r"has no version 5 .*versions: \[1\]"):
        registry.version("page_views", 5)
    with pytest.raises(ValueError, match="subject must be"):
        registry.register("a/b", V1)


def test_unreachable_zookeeper_is_named():
    with pytest.raises(
        RegistryError,
        match=r"cannot connect to the schema registry's ZooKeeper at 127.0.0.1:1/registry",
    ):
        SchemaRegistry("127.0.0.1:1/registry", timeout=0.5)


def test_from_properties_reads_the_config_key(zk_chroot):
    connect = zk_chroot.connect + "/registry"
    with SchemaRegistry.from_properties({"schema.registry.zk": connect}) as reg:
        assert reg.connect == connect
    with pytest.raises(RegistryError, match=r"consumer.properties has no schema.registry.zk"):
        SchemaRegistry.from_properties({"zk.connect": "x"}, "consumer.properties")
