"""Audited events mirrored while the mirror is kill -9'd three times: nothing lost, duplicates
only from the uncommitted tails it announced, and the producers' `_audit` counts all copied.

MIRROR_TEST_EVENTS (default 30,000; the issue's full size: 200000) sets the number of events.
"""

from __future__ import annotations

import os
import random
import re
import signal
from collections import Counter

from conftest import wait_until

from logbroker.audit import AuditedProducer, window_start
from logbroker.client.producer import Producer
from logbroker.serde import EventCodec, SchemaRegistry, parse_event_schema
from logbroker.serde.header import read_header

EVENTS = int(os.environ.get("MIRROR_TEST_EVENTS", "30000"))
TOPICS = {"t-gzip": "gzip", "t-snappy": "snappy", "t-plain": "none"}
BATCH = 500
TAIL = re.compile(r"resuming from the committed offsets; (\d+) messages")


def _ids(payloads: list[bytes]) -> list[tuple[str, int]]:
    return [(h.producer_id, h.seq) for h in map(read_header, payloads)]


def test_kill_9_three_times_loses_nothing_and_copies_every_producer_count(two_clusters):
    c = two_clusters
    registry_zk = c.live.connect.rsplit("/", 1)[0] + "/registry"
    schema = parse_event_schema(
        {
            "type": "record",
            "name": "Tick",
            "fields": [
                {"name": "header", "type": "logbroker.EventHeader"},
                {"name": "n", "type": "long"},
            ],
        }
    )
    for topic in TOPICS:
        c.create_topic(topic, 2)
    rng = random.Random(20261123)
    per_topic = EVENTS // len(TOPICS) // BATCH * BATCH
    kill_after = sorted(rng.randrange(1, per_topic // BATCH) for _ in range(3))
    source = f"0:127.0.0.1:{c.source.address[1]}"
    with SchemaRegistry(registry_zk) as registry:
        for topic in TOPICS:
            registry.register(topic, schema)
        producers = {
            topic: AuditedProducer(
                Producer(broker_list=source, num_partitions=2, compression_codec=codec, acks="ack"),
                registry,
            )
            for topic, codec in TOPICS.items()
        }
        mirror = c.start_mirror("--whitelist", "t-.*", schema_registry_zk=registry_zk)
        for b in range(per_topic // BATCH):
            for topic, producer in producers.items():
                producer.send(topic, [{"n": b * BATCH + j} for j in range(BATCH)])
            while kill_after and b >= kill_after[0]:
                kill_after.pop(0)
                wait_until(lambda: c.target_count("t-plain") > 0, what="the mirror copying")
                mirror.kill()
                mirror = c.start_mirror("--whitelist", "t-.*", schema_registry_zk=registry_zk)
        for producer in producers.values():
            producer.close()  # publishes the producers' counts to the source's _audit
        sent = {t: _ids(c.source_payloads(t)) for t in TOPICS}
        assert all(len(ids) == per_topic for ids in sent.values())
        wait_until(
            lambda: all(set(_ids(c.target_payloads(t))) == set(sent[t]) for t in TOPICS),
            timeout=180,
            what="every event in the target",
        )
        # a partition that never got an AuditCount has no offset to commit (ends at 0)
        audit_ends = {name: end for name, end in c.source_ends("_audit").items() if end}

        def audit_committed() -> bool:
            committed = c.committed("_audit")
            return {name: committed.get(name) for name in audit_ends} == audit_ends

        wait_until(audit_committed, what="_audit copied")
        mirror.signal(signal.SIGTERM)
        assert mirror.wait() == 0, mirror.output()
        codec = EventCodec(registry)
        audit = codec.decode_many(c.target_payloads("_audit"))
    outputs = [m.output() for m in c.mirrors]
    assert len(outputs) == 4  # the first run and three restarts
    announced = sum(int(n) for o in outputs for n in TAIL.findall(o))
    duplicates = 0
    for topic in TOPICS:
        got = _ids(c.target_payloads(topic))
        duplicates += len(got) - len(set(got))
    print(f"duplicates {duplicates}, announced tails {announced}")
    assert duplicates <= announced, (duplicates, announced)
    # the producers' counts, deduplicated by their own header, add up per topic and window
    unique = {(a["header"]["producer_id"], a["header"]["seq"]): a for a in audit}
    produced: Counter[tuple[str, int]] = Counter()
    for a in unique.values():
        if a["tier"] == "producer":
            produced[(a["topic"], a["window_start"])] += a["count"]
    expected: Counter[tuple[str, int]] = Counter()
    for topic in TOPICS:
        for payload in c.source_payloads(topic):
            expected[(topic, window_start(read_header(payload).timestamp))] += 1
    assert produced == expected
    assert {a["tier"] for a in unique.values()} == {"producer", "mirror"}
