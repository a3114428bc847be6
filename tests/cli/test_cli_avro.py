"""`logbroker schemas`, `produce --format avro` and `consume --format avro`, as a user runs them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCHEMAS = Path(__file__).resolve().parents[2] / "include" / "schemas"


def logbroker(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logbroker.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def page_view(i: int) -> dict:
    return {
        "member_id": i,
        "session_id": f"s{i % 7}",
        "page": f"/jobs/view/{i}",
        "referrer": None if i % 2 else "/feed",
        "user_agent": "Mozilla/5.0",
        "duration_ms": 10 + i % 90,
    }


@pytest.fixture
def cluster(zk_chroot, broker_factory):
    broker_factory(0, zk=zk_chroot)
    return zk_chroot.connect, zk_chroot.connect + "/registry"


def test_schemas_register_list_get(cluster, tmp_path):
    _, registry = cluster
    page_views = str(SCHEMAS / "page_views.avsc")
    first = logbroker(
        "schemas",
        "register",
        "--zookeeper",
        registry,
        "--subject",
        "page_views",
        "--file",
        page_views,
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == "subject page_views version 1: schema id 1 (logbroker.demo.PageView)\n"
    again = logbroker(
        "schemas",
        "register",
        "--zookeeper",
        registry,
        "--subject",
        "page_views",
        "--file",
        page_views,
    )
    assert again.stdout == first.stdout

    breaking = json.loads((SCHEMAS / "page_views.avsc").read_text())
    breaking["fields"].append({"name": "country", "type": "string"})
    (tmp_path / "v2.avsc").write_text(json.dumps(breaking))
    refused = logbroker(
        "schemas",
        "register",
        "--zookeeper",
        registry,
        "--subject",
        "page_views",
        "--file",
        str(tmp_path / "v2.avsc"),
    )
    assert refused.returncode == 1
    assert "field 'country': added without a default" in refused.stderr

    (tmp_path / "bad.avsc").write_text(
        '{"type": "record", "name": "X", "fields": [{"name": "header", "type": "nope"}]}'
    )
    invalid = logbroker(
        "schemas",
        "register",
        "--zookeeper",
        registry,
        "--subject",
        "x",
        "--file",
        str(tmp_path / "bad.avsc"),
    )
    assert (
        invalid.returncode == 1
        and "bad.avsc is not a valid Avro schema at header: unknown type 'nope'" in invalid.stderr
    )

    listed = logbroker("schemas", "list", "--zookeeper", registry)
    assert listed.stdout.splitlines()[1].split() == [
        "page_views",
        "1",
        "1",
        "logbroker.demo.PageView",
    ]
    by_id = logbroker("schemas", "get", "--zookeeper", registry, "--id", "1")
    assert json.loads(by_id.stdout)["name"] == "logbroker.demo.PageView"
    by_subject = logbroker("schemas", "get", "--zookeeper", registry, "--subject", "page_views")
    assert by_subject.stdout.startswith("# subject page_views version 1: schema id 1\n")
    missing = logbroker("schemas", "get", "--zookeeper", registry, "--id", "9")
    assert missing.returncode == 1 and "unknown schema id 9" in missing.stderr
    assert logbroker("schemas", "get", "--zookeeper", registry).returncode == 2


def test_produce_and_consume_avro_round_trip_with_audit(cluster, tmp_path):
    zk, registry = cluster
    register = logbroker(
        "schemas",
        "register",
        "--zookeeper",
        registry,
        "--subject",
        "page_views",
        "--file",
        str(SCHEMAS / "page_views.avsc"),
    )
    assert register.returncode == 0, register.stderr
    records = [page_view(i) for i in range(250)]
    records[3] = {**records[3], "header": {"timestamp": 1_763_805_600_000}}  # event time given
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    produced = logbroker(
        "produce",
        "--zookeeper",
        zk,
        "--topic",
        "page_views",
        "--file",
        str(source),
        "--acks",
        "--batch-size",
        "100",
        "--format",
        "avro",
        "--schema-registry",
        registry,
    )
    assert produced.returncode == 0, produced.stderr
    assert "sent 250 events to page_views (subject page_views, schema id 1)" in produced.stderr

    consumed = logbroker(
        "consume",
        "--zookeeper",
        zk,
        "--topic",
        "page_views",
        "--from-beginning",
        "--format",
        "avro",
        "--schema-registry",
        registry,
        "--max-messages",
        "250",
        "--timeout-ms",
        "10000",
    )
    assert consumed.returncode == 0, consumed.stderr
    events = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted(
        ({k: v for k, v in e.items() if k != "header"} for e in events),
        key=lambda e: e["member_id"],
    ) == [{k: v for k, v in r.items() if k != "header"} for r in records]
    headers = {e["member_id"]: e["header"] for e in events}
    event_seqs = sorted(h["seq"] for h in headers.values())
    assert len({h["producer_id"] for h in headers.values()}) == 1
    assert headers[3]["timestamp"] == 1_763_805_600_000

    audit = logbroker(
        "consume",
        "--zookeeper",
        zk,
        "--topic",
        "_audit",
        "--from-beginning",
        "--format",
        "avro",
        "--schema-registry",
        registry,
        "--timeout-ms",
        "3000",
    )
    counts = [json.loads(line) for line in audit.stdout.splitlines()]
    assert sum(c["count"] for c in counts) == 250
    assert {c["topic"] for c in counts} == {"page_views"} and {c["tier"] for c in counts} == {
        "producer"
    }
    assert {c["header"]["producer_id"] for c in counts} == {headers[0]["producer_id"]}
    # one seq counter for the events and the audit's own events (record 3's window, long
    # closed, was published right after the first batch)
    assert sorted(event_seqs + [c["header"]["seq"] for c in counts]) == list(
        range(250 + len(counts))
    )


def test_a_bad_line_names_line_and_field_and_sends_nothing_of_its_batch(cluster, tmp_path):
    zk, registry = cluster
    logbroker(
        "schemas",
        "register",
        "--zookeeper",
        registry,
        "--subject",
        "page_views",
        "--file",
        str(SCHEMAS / "page_views.avsc"),
    )
    lines = [json.dumps(page_view(i)) for i in range(30)]
    lines[14] = json.dumps({**page_view(14), "duration_ms": "slow"})  # line 15, in the 2nd batch
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    args = [
        "produce",
        "--zookeeper",
        zk,
        "--topic",
        "page_views",
        "--acks",
        "--batch-size",
        "10",
        "--format",
        "avro",
        "--schema-registry",
        registry,
        "--no-audit",
        "--file",
    ]
    produced = logbroker(*args, str(source))
    assert produced.returncode == 1
    assert (
        "line 15: record does not fit 'page_views' schema logbroker.demo.PageView (id 1): field 'duration_ms': expected int, got 'slow'"
        in produced.stderr
    )
    assert "sent 10 events" in produced.stderr and "audit off" in produced.stderr

    lines[14] = '{"member_id": 14, '
    source.write_text("\n".join(lines) + "\n")
    produced = logbroker(*args, str(source))
    assert produced.returncode == 1 and "line 15: not JSON" in produced.stderr

    consumed = logbroker(
        "consume",
        "--zookeeper",
        zk,
        "--topic",
        "page_views",
        "--from-beginning",
        "--format",
        "avro",
        "--schema-registry",
        registry,
        "--timeout-ms",
        "3000",
    )
    assert sorted(json.loads(x)["member_id"] for x in consumed.stdout.splitlines()) == sorted(
        list(range(10)) * 2
    )
    # a plain-text message on an event topic is reported with where it is, and skipped
    logbroker("produce", "--zookeeper", zk, "--topic", "mixed", "--acks", "--file", str(source))
    mixed = logbroker(
        "consume",
        "--zookeeper",
        zk,
        "--topic",
        "mixed",
        "--from-beginning",
        "--format",
        "avro",
        "--schema-registry",
        registry,
        "--timeout-ms",
        "3000",
        "--max-messages",
        "1",
    )
    assert (
        "skipped: mixed 0-0 offset 0: payload starts with byte 0x7b, not the event magic"
        in mixed.stderr
    )


def test_ctrl_c_keeps_the_count_of_what_was_printed(cluster):
    """consume --format avro stopped by Ctrl-C after one event said "consumed 0 events,
    skipped 0 payloads that were not": the count was lost with the interrupt."""
    zk, registry = cluster
    register = logbroker(
        "schemas", "register", "--zookeeper", registry, "--subject", "page_views",
        "--file", str(SCHEMAS / "page_views.avsc"),
    )  # fmt: skip
    assert register.returncode == 0, register.stderr
    produced = subprocess.run(
        [sys.executable, "-m", "logbroker.cli", "produce", "--zookeeper", zk, "--topic",
         "page_views", "--acks", "--format", "avro", "--schema-registry", registry],
        input=json.dumps(page_view(1)) + "\n", capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert "sent 1 event to page_views (subject page_views, schema id 1)" in produced.stderr
    consumer = subprocess.Popen(
        [sys.executable, "-m", "logbroker.cli", "consume", "--zookeeper", zk, "--topic",
         "page_views", "--from-beginning", "--format", "avro", "--schema-registry", registry],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert consumer.stdout is not None
        first = json.loads(consumer.stdout.readline())  # printed: now the user presses Ctrl-C
        assert first["member_id"] == 1
        consumer.send_signal(signal.SIGINT)
        _, stderr = consumer.communicate(timeout=60)
    finally:
        consumer.kill()
    assert consumer.returncode == 0, stderr
    assert stderr.splitlines()[-1] == "consumed 1 event, skipped 0 payloads that were not events"
