"""The audited producer against a real broker and ZooKeeper, on a fake clock: headers, encoding,
and `_audit` counts equal to the events sent per topic and window (on close, flush and grace)."""

from __future__ import annotations

import pytest

from logbroker.audit.producer import AuditedProducer
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.serde import EncodeError, EventCodec, SchemaRegistry, read_header

W = 600_000
T0 = 1_763_805_600_000  # a window start


def page_view_schema() -> dict:
    return {
        "type": "record",
        "name": "PageView",
        "namespace": "demo",
        "fields": [
            {"name": "header", "type": "logbroker.EventHeader"},
            {"name": "page", "type": "string"},
        ],
    }


class FakeClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


@pytest.fixture
def cluster(zk_chroot, broker_factory):
    broker = broker_factory(0, zk=zk_chroot)
    registry = SchemaRegistry(zk_chroot.connect + "/registry")
    for topic in ("page_views", "searches"):
        registry.register(topic, {**page_view_schema(), "name": topic.title().replace("_", "")})
    yield zk_chroot.connect, broker, registry
    registry.close()


def read_topic(broker, topic: str) -> list[bytes]:
    with SimpleConsumer(broker.host, broker.port) as consumer:
        return [bytes(m.payload) for m in consumer.iter_messages(topic, 0, 0)]


def audit_counts(broker, registry) -> tuple[dict[tuple[str, int], int], list[dict]]:
    records = EventCodec(registry).decode_many(read_topic(broker, "_audit"))
    totals: dict[tuple[str, int], int] = {}
    for r in records:
        assert r["tier"] == "producer" and r["window_ms"] == W
        key = (r["topic"], r["window_start"])
        totals[key] = totals.get(key, 0) + r["count"]
    return totals, records


def test_counts_equal_events_per_topic_and_window(cluster):
    zk, broker, registry = cluster
    clock = FakeClock(T0 + 1000)
    producer = AuditedProducer(
        Producer(zk_connect=zk, acks="ack"), registry, clock=clock, grace_ms=30_000, server="web-7"
    )
    sent: dict[tuple[str, int], int] = {}

    def send(topic: str, timestamps: list[int | None]) -> None:
        records = [
            {"page": f"/p{i}"} if ts is None else {"header": {"timestamp": ts}, "page": "/"}
            for i, ts in enumerate(timestamps)
        ]
        producer.send(topic, records)
        for ts in timestamps:
            start = (clock.ms if ts is None else ts) // W * W
            sent[(topic, start)] = sent.get((topic, start), 0) + 1

    send("page_views", [None] * 50)  # stamped now: window T0
    send("searches", [T0 + 10, T0 + W + 5, None])  # one batch straddling two windows
    assert read_topic(broker, "_audit") == []  # nothing closed yet

    clock.ms = T0 + W + 29_999  # window T0 ended, grace not over
    send("page_views", [None])
    assert read_topic(broker, "_audit") == []
    clock.ms = T0 + W + 30_000  # grace over: window T0 closes on the next count
    send("page_views", [None] * 2)
    totals, _ = audit_counts(broker, registry)
    assert totals == {("page_views", T0): 50, ("searches", T0): 2}

    send("page_views", [T0 + 7])  # late for a closed window: a second delta, at once
    assert audit_counts(broker, registry)[0][("page_views", T0)] == 51
    send("searches", [T0 + 2 * W + 1])  # a future window, open
    assert producer.flush() == 3  # everything counted so far, open windows too
    send("page_views", [None] * 3)
    producer.close()  # the rest

    totals, records = audit_counts(broker, registry)
    assert totals == sent
    assert sum(totals.values()) == producer.sent_events == 61
    # the audit events are events of this producer: unique (producer_id, seq), server kept
    headers = [r["header"] for r in records]
    assert {h["producer_id"] for h in headers} == {producer.producer_id}
    assert {h["server"] for h in headers} == {"web-7"}
    event_seqs = {
        read_header(p).seq for t in ("page_views", "searches") for p in read_topic(broker, t)
    }
    audit_seqs = {h["seq"] for h in headers}
    assert not event_seqs & audit_seqs
    assert event_seqs | audit_seqs == set(range(len(event_seqs) + len(audit_seqs)))


def test_headers_filled_and_kept(cluster):
    zk, broker, registry = cluster
    clock = FakeClock(T0)
    with AuditedProducer(
        Producer(zk_connect=zk, acks="ack"), registry, clock=clock, audit=False
    ) as producer:
        given = {"timestamp": T0 - 5, "server": "web-1", "producer_id": "replayed", "seq": 77}
        producer.send(
            "page_views", [{"page": "/a"}, {"header": given, "page": "/b"}, {"page": "/c"}]
        )
    payloads = read_topic(broker, "page_views")
    records = EventCodec(registry).decode_many(payloads)
    assert [r["header"]["seq"] for r in records] == [0, 77, 1]
    assert records[1]["header"] == given
    assert records[0]["header"]["producer_id"] == producer.producer_id
    assert records[0]["header"]["timestamp"] == T0
    assert read_topic(broker, "_audit") == []  # audit=False


def test_a_bad_record_sends_nothing_and_takes_no_seq(cluster):
    zk, broker, registry = cluster
    with AuditedProducer(
        Producer(zk_connect=zk, acks="ack"), registry, clock=FakeClock(T0)
    ) as producer:
        with pytest.raises(
            EncodeError, match=r"^line 2: record does not fit .* field 'page': expected string"
        ):
            producer.send_prepared(
                producer.prepare(
                    "page_views", [{"page": "/"}, {"page": 3}], names=["line 1", "line 2"]
                )
            )
        with pytest.raises(
            EncodeError,
            match=r"record 0: field 'header.seq': a record that gives producer_id must give seq",
        ):
            producer.prepare("page_views", [{"header": {"producer_id": "x"}, "page": "/"}])
        assert producer.headers.next_seq == 0
        batch = producer.prepare("page_views", [{"page": "/"}])
        producer.send_prepared(batch)
    assert [read_header(p).seq for p in read_topic(broker, "page_views")] == [0]
    totals, _ = audit_counts(broker, registry)
    assert totals == {("page_views", T0): 1}
