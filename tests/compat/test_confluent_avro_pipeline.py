"""One hour of a 0.8-format topic written by logbroker's AuditedProducer and by confluent-kafka's
Producer with its AvroSerializer, then loaded and audited (issue 45).

The stack, one per module: a real ZooKeeper chroot, one broker with a Kafka 0.8 listener
(port.08), `logbroker schema-registry` (the Confluent Schema Registry API that `make up`
runs) over the registry chroot, the suite's SparkSession. In hour 10:00 of 2026-11-22:

    lb-web-1       AuditedProducer: 7 events in each of the six windows, counts to `_audit`
    cf-checkout-1  confluent-kafka, AvroSerializer: 5 events in 10:10, no counts
    cf-checkout-2  confluent-kafka, AvroSerializer: 3 events in 10:10, 4 in 10:40, no counts

confluent-kafka fills the header itself (producer_id, seq, timestamp, server), registers the
schema through the API under the topic's own subject (the project's: subject = topic) and
talks to the 0.8 listener with api.version.request=false, broker.version.fallback=0.8.2.2.
What a user relies on: every event of both producers is loaded, the Confluent ones' fields
decoded; the audit finds lb-web-1's windows complete, 10:10 and 10:40 `unaccounted` by
exactly the Confluent events, and names cf-checkout-1 and cf-checkout-2 there, in
_summary.json and on the hour's page.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from logbroker.audit.producer import AuditedProducer
from logbroker.client.cluster import Cluster
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.producer import Producer as LogbrokerProducer
from logbroker.serde import schema_id_of
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.registry_api import RegistryApiProcess
from logbroker.stack.zookeeper import ZooKeeperServer
from pipeline_warehouse.filesystem import as_uri
from pipeline_warehouse.layout import AUDIT_TOPIC, summary_file
from pipeline_warehouse.time_format import HOUR_MS, hour_ms, parse_hour
from spark_apps.audit.outcome import AuditOptions, AuditOutcome
from spark_apps.audit.report import write_reports
from spark_apps.audit.run import run_audit
from spark_apps.hadoop_fs import HadoopFS, open_warehouse
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings
from tests.spark.helpers import PAGE_VIEW, AnalysisCluster

pytestmark = pytest.mark.slow

TOPIC = "checkout08"
HOUR = "2026-11-22T10"
TEN = hour_ms(parse_hour(HOUR))
LATE = datetime(2026, 11, 22, 16, tzinfo=UTC)  # the audit's clock: every grace has passed
CONFLUENT = {"api.version.request": False, "broker.version.fallback": "0.8.2.2"}
AUDITED = "lb-web-1"
SENT_BY_CONFLUENT = {  # producer_id -> (window minute, events)
    "cf-checkout-1": [(10, 5)],
    "cf-checkout-2": [(10, 3), (40, 4)],
}
PER_WINDOW = 7  # lb-web-1's events in each window


def at(minute: int, i: int) -> int:
    """An event time (ms) in the window starting `minute` past 10:00."""
    return TEN + minute * 60_000 + 1_000 + i * 17_000


def record(producer_id: str, seq: int, timestamp: int) -> dict[str, Any]:
    return {
        "header": {
            "timestamp": timestamp,
            "server": f"{producer_id}.example",
            "producer_id": producer_id,
            "seq": seq,
        },
        "user_id": seq * 11,
        "page": f"/checkout/{producer_id}/{seq}",
        "referrer": None if seq % 2 else "https://example.com/cart",
        "tags": ["cf", str(seq)][: seq % 3],
    }


@dataclass
class Stack:
    cluster: AnalysisCluster
    registry_url: str
    schema_id: int
    payloads: list[bytes]  # what confluent-kafka's serializer made
    confluent: list[dict[str, Any]]  # the records it was given
    audited_sent: int
    subjects: list[str]
    wh: Path
    outcome: AuditOutcome


def produce_with_confluent(
    bootstrap: str, url: str
) -> tuple[list[bytes], list[dict[str, Any]], list[str]]:
    """confluent-kafka as its users write it: the serializer registers the schema and frames
    each record; the producer sends it, keyed, and every delivery is checked."""
    client = SchemaRegistryClient({"url": url})
    # the header inline (Confluent's clients know no logbroker.EventHeader by name); no subject
    # configuration: the registry answers the topic's own name (docs/events.md)
    serializer = AvroSerializer(client, json.dumps(PAGE_VIEW))
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **CONFLUENT})
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(err)

    payloads, records = [], []
    for producer_id, windows in SENT_BY_CONFLUENT.items():
        seq = 0
        for minute, n in windows:
            for i in range(n):
                rec = record(producer_id, seq, at(minute, i))
                value = serializer(rec, SerializationContext(TOPIC, MessageField.VALUE))
                producer.produce(
                    TOPIC, key=f"{producer_id}-{seq}", value=value, on_delivery=delivered
                )
                payloads.append(value)
                records.append(rec)
                seq += 1
    assert producer.flush(60) == 0
    assert failed == []
    return payloads, records, sorted(client.get_subjects())


@pytest.fixture(scope="module")
def stack(
    spark: Any, zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("confluent-avro")
    live = zookeeper.create_chroot("/confluent-avro/analysis")
    registry = zookeeper.create_chroot("/confluent-avro/registry")
    broker = BrokerProcess(directory / "broker-0", broker_id=0, zk_connect=live.connect, port_08=0)
    cluster = AnalysisCluster(zookeeper, live, registry, [broker])
    api = RegistryApiProcess(directory / "registry-api", registry.connect, port=0)
    try:
        broker.start()
        api.start()
        schema_id = cluster.register(TOPIC, PAGE_VIEW)  # as the project registers subjects
        with Cluster(live.connect) as c:
            c.create_replicated_topic(TOPIC, 2, 1, message_format="0.8")
        for p in range(2):  # the leader's 0.8 listener serves the topic
            with PartitionReader08.connect(live.connect, TOPIC, p) as reader:
                assert reader.latest_offset() == 0

        # logbroker's audited producer: its clock past the hour, so it publishes every count
        clock = (TEN + HOUR_MS + 120_000) / 1000
        lb = LogbrokerProducer(zk_connect=live.connect, acks="ack", request_required_acks=1)
        with AuditedProducer(
            lb, cluster.codec().registry, producer_id=AUDITED, clock=lambda: clock
        ) as audited:
            for minute in range(0, 60, 10):
                batch = [
                    {**record(AUDITED, 0, at(minute, i)), "header": {"timestamp": at(minute, i)}}
                    for i in range(PER_WINDOW)
                ]
                audited.send(TOPIC, batch, key=f"w{minute}")
            audited_sent = audited.sent_events

        payloads, confluent, subjects = produce_with_confluent(
            f"127.0.0.1:{broker.port_08}", api.url
        )

        wh = directory / "wh"
        settings = LoadSettings(zookeeper=live.connect, schema_registry=registry.connect)
        warehouse = open_warehouse(as_uri(str(wh)), spark)
        for topic in (TOPIC, AUDIT_TOPIC):
            load_hour(spark, warehouse, settings, topic, HOUR)
        # the audit as the hourly DAG runs it, without its Great Expectations (5 s here; they
        # check the results this test checks itself), then the hour's page
        opts = AuditOptions(as_uri(str(wh)), [parse_hour(HOUR)], LATE, quality=False)
        outcome = run_audit(spark, opts)
        reports = as_uri(str(directory / "reports"))
        outcome.report_pages = write_reports(
            HadoopFS(spark), reports, opts.warehouse, outcome, opts
        )
        yield Stack(
            cluster, api.url, schema_id, payloads, confluent, audited_sent, subjects, wh, outcome
        )
    finally:
        api.stop()
        cluster.stop()


def test_confluents_serializer_frames_logbroker_events_under_the_topics_subject(
    stack: Stack,
) -> None:
    # the API served the registration under the topic's subject, not checkout08-value
    assert stack.subjects == [AUDIT_TOPIC, TOPIC]
    assert stack.cluster.codec().registry.versions(TOPIC) == [1]  # the same schema: no new one
    assert {p[0] for p in stack.payloads} == {0}  # magic byte 0 ...
    assert {schema_id_of(p) for p in stack.payloads} == {stack.schema_id}  # ... the registry's id
    decoded = [stack.cluster.codec().decode(p) for p in stack.payloads]
    assert decoded == stack.confluent


def test_the_hourly_load_holds_every_event_of_both_producers(spark: Any, stack: Stack) -> None:
    cp = json.loads((stack.wh / "_checkpoints" / TOPIC / f"{HOUR}.json").read_text())
    confluent = len(stack.confluent)
    assert stack.audited_sent == 6 * PER_WINDOW
    assert (cp["offsets"], cp["rows"], cp["bad_records"]) == (
        "logical",
        stack.audited_sent + confluent,
        0,
    )
    warehouse = open_warehouse(as_uri(str(stack.wh)), spark)
    loaded = warehouse.checkpoint(TOPIC, HOUR)
    assert loaded is not None
    # the hour's files as they are, read by pyarrow (a Spark job would cost seconds here)
    files = [uri.removeprefix("file://") for uri in warehouse.data_files(loaded)]
    rows = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()
    assert Counter(r["producer_id"] for r in rows) == {
        AUDITED: 6 * PER_WINDOW,
        "cf-checkout-1": 5,
        "cf-checkout-2": 7,
    }
    # the Confluent events' fields, decoded: header, schema id, the record's own fields, key
    got = {
        (r["producer_id"], r["seq"]): (
            int(r["event_time"].replace(tzinfo=UTC).timestamp() * 1000),
            r["server"],
            r["schema_id"],
            r["user_id"],
            r["page"],
            r["referrer"],
            r["tags"],
            r["key"].decode(),
        )
        for r in rows
        if r["producer_id"].startswith("cf-")
    }
    want = {
        (h["producer_id"], h["seq"]): (
            h["timestamp"],
            h["server"],
            stack.schema_id,
            rec["user_id"],
            rec["page"],
            rec["referrer"],
            rec["tags"],
            f"{h['producer_id']}-{h['seq']}",
        )
        for rec in stack.confluent
        for h in [rec["header"]]
    }
    assert got == want


def test_the_audit_names_the_producers_that_published_no_counts(stack: Stack) -> None:
    res = stack.outcome.results
    res = res[res["topic"] == TOPIC].set_index("window")
    minute = {TEN + m * 60_000: m for m in range(0, 60, 10)}
    statuses = {minute[w]: (r.status, r.produced, r.loaded_unique, r.unaccounted)
                for w, r in res.iterrows()}  # fmt: skip
    assert statuses == {
        0: ("complete", 7, 7, 0),
        10: ("unaccounted", 7, 15, 8),
        20: ("complete", 7, 7, 0),
        30: ("complete", 7, 7, 0),
        40: ("unaccounted", 7, 11, 4),
        50: ("complete", 7, 7, 0),
    }
    # _summary.json as the audit wrote it
    written = json.loads(
        Path(summary_file(str(stack.wh), parse_hour(HOUR)).removeprefix("file://")).read_text()
    )
    named = [(u["topic"], u["window_start"], u["status"], u["unaccounted"], u["producer_ids"])
             for u in written["uncounted_producers"]]  # fmt: skip
    assert named == [
        (TOPIC, "2026-11-22T10:10:00Z", "unaccounted", 8, ["cf-checkout-1", "cf-checkout-2"]),
        (TOPIC, "2026-11-22T10:40:00Z", "unaccounted", 4, ["cf-checkout-2"]),
    ]
    # the hour's page: each unaccounted window with its producers
    page = Path(stack.outcome.report_pages[HOUR].removeprefix("file://")).read_text()
    failed = page[page.index('id="failed-windows"') :]
    failed = failed[: failed.index("</table>")]
    cells = [row.split('class="uncounted-producers">')[1].split("</td>")[0]
             for row in failed.split("<tr>")[2:]]  # fmt: skip
    assert cells == ["cf-checkout-1, cf-checkout-2", "cf-checkout-2"]
    assert AUDITED not in failed
