"""AuditPublisher as the mirror uses it: tier "mirror", counts from event headers read without
their schema, deltas that add up, and `_audit` itself never counted."""

from __future__ import annotations

import pytest

from logbroker.audit.publisher import AuditPublisher
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.serde import (
    EventCodec,
    EventWriter,
    SchemaRegistry,
    parse_event_schema,
    read_timestamps,
)

W = 600_000
T0 = 1_763_805_600_000
SEARCH = {
    "type": "record",
    "name": "Search",
    "fields": [
        {"name": "header", "type": "logbroker.EventHeader"},
        {"name": "q", "type": "string"},
    ],
}


def test_a_mirror_counts_forwarded_events_from_their_headers(zk_chroot, broker_factory):
    broker = broker_factory(0, zk=zk_chroot)
    schema = parse_event_schema(
        {
            "type": "record",
            "name": "Search",
            "fields": [
                {"name": "header", "type": "logbroker.EventHeader"},
                {"name": "q", "type": "string"},
            ],
        }
    )
    now = [T0 + 2 * W]
    with SchemaRegistry(zk_chroot.connect + "/registry") as registry:
        version = registry.register("searches", schema)
        writer = EventWriter.for_version(version)
        # events as some producer wrote them, two windows
        payloads = [
            writer.encode(
                {
                    "header": {
                        "timestamp": T0 + i * 1000,
                        "server": "s",
                        "producer_id": "p",
                        "seq": i,
                    },
                    "q": "x",
                }
            )
            for i in range(0, 900)
        ]
        with Producer(zk_connect=zk_chroot.connect, acks="ack") as target:
            publisher = AuditPublisher(
                target, registry, tier="mirror", clock=lambda: now[0] / 1000, grace_ms=0
            )
            for start in range(0, len(payloads), 50):  # as acknowledged batches come back
                publisher.count("searches", read_timestamps(payloads[start : start + 50]))
            publisher.count("_audit", [T0])  # the audit's own events are not counted
            assert publisher.pending() == {}  # both windows were closed: published on count
            publisher.count("searches", [T0 + 3 * W])  # open window
            assert publisher.pending() == {("searches", T0 + 3 * W): 1}
            publisher.close()
        with SimpleConsumer(broker.host, broker.port) as consumer:
            audit = [bytes(m.payload) for m in consumer.iter_messages("_audit", 0, 0)]
        counts = EventCodec(registry).decode_many(audit)
    assert {c["tier"] for c in counts} == {"mirror"}
    totals: dict[int, int] = {}
    for c in counts:
        totals[c["window_start"]] = totals.get(c["window_start"], 0) + c["count"]
    assert totals == {T0: 600, T0 + W: 300, T0 + 3 * W: 1}
    assert publisher.published_count == 901 and publisher.published_events == len(counts)
    assert len({(c["header"]["producer_id"], c["header"]["seq"]) for c in counts}) == len(counts)


def test_the_audit_schema_is_registered_with_the_first_count_not_before(zk_chroot, broker_factory):
    """A mirror or producer that has counted nothing yet leaves a fresh registry alone: the
    README's walk-through ran the mirror first, and the first schema registered got id 2."""
    broker_factory(0, zk=zk_chroot)
    with (
        SchemaRegistry(zk_chroot.connect + "/registry") as registry,
        Producer(zk_connect=zk_chroot.connect, acks="ack") as target,
    ):
        publisher = AuditPublisher(target, registry, tier="mirror", clock=lambda: T0 / 1000)
        assert publisher.publish_closed() == 0 and publisher.flush() == 0
        assert registry.subjects() == []
        searches = registry.register("searches", parse_event_schema(SEARCH))
        assert searches.id == 1
        publisher.count("searches", [T0])
        assert publisher.flush() == 1
        assert registry.latest("_audit").id == 2


def test_a_registry_that_fails_at_the_first_publish_loses_no_count(zk_chroot, broker_factory):
    broker_factory(0, zk=zk_chroot)
    with Producer(zk_connect=zk_chroot.connect, acks="ack") as target:
        registry = SchemaRegistry(zk_chroot.connect + "/registry")
        publisher = AuditPublisher(target, registry, tier="mirror", clock=lambda: T0 / 1000)
        publisher.count("searches", [T0, T0 + 1, T0 + W])  # open windows: not published yet
        registry.close()  # ZooKeeper gone for it: registering the AuditCount schema fails
        with pytest.raises(Exception):  # noqa: B017 - whatever the closed client raises
            publisher.flush()
        assert publisher.pending() == {("searches", T0): 2, ("searches", T0 + W): 1}
