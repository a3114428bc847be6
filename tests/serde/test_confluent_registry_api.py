"""The Confluent Schema Registry API (serde/confluent_api.py) against confluent-kafka's own
SchemaRegistryClient and AvroSerializer, over a real ZooKeeper; one test runs the real
`logbroker schema-registry` process, the others serve from a thread on a free port."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from logbroker.cli import main
from logbroker.serde import EventCodec, SchemaRegistry, schema_id_of
from logbroker.serde.confluent_api import CONTENT_TYPE, RegistryApiServer


def event(*fields: dict, name: str = "PageView") -> dict:
    return {
        "type": "record",
        "name": name,
        "namespace": "demo",
        "fields": [{"name": "header", "type": "logbroker.EventHeader"}, *fields],
    }


V1 = json.dumps(event({"name": "page", "type": "string"}))
# compatible: the added field has a default
V2 = json.dumps(
    event(
        {"name": "page", "type": "string"},
        {"name": "ref", "type": ["null", "string"], "default": None},
    )
)
# incompatible with V1: added without a default
BAD = json.dumps(event({"name": "page", "type": "string"}, {"name": "member_id", "type": "long"}))
HEADER = {
    "type": "record",
    "name": "EventHeader",
    "namespace": "logbroker",
    "fields": [
        {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "server", "type": "string"},
        {"name": "producer_id", "type": "string"},
        {"name": "seq", "type": "long"},
    ],
}


@pytest.fixture
def registry(zk_chroot):
    with SchemaRegistry(zk_chroot.connect + "/registry") as reg:
        yield reg


@pytest.fixture
def url(registry):
    """The API on a free port, served from a thread."""
    server = RegistryApiServer(registry, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def client(url):
    return SchemaRegistryClient({"url": url})


def http(method: str, url: str, body: dict | None = None) -> tuple[int, str, object]:
    """(status, Content-Type, JSON) of one plain request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", CONTENT_TYPE)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], json.loads(exc.read())


def test_register_and_look_up_with_confluents_client(client, registry):
    schema_id = client.register_schema("page_views", Schema(V1, "AVRO"))
    # logbroker's own registry holds it: the same subject, version and id
    assert registry.latest("page_views").id == schema_id
    assert registry.latest("page_views").version == 1

    # the same schema again (laid out differently, header inline) answers the same id
    inline = json.loads(V1)
    inline["fields"][0]["type"] = HEADER
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})  # no cache
    assert fresh.register_schema("page_views", Schema(json.dumps(inline, indent=2))) == schema_id
    assert registry.versions("page_views") == [1]

    v2_id = fresh.register_schema("page_views", Schema(V2, "AVRO"))
    assert v2_id != schema_id
    fresh.register_schema("searches", Schema(V1, "AVRO"))  # another subject keeps V1's id

    by_id = fresh.get_schema(schema_id)
    assert json.loads(by_id.schema_str) == json.loads(registry.schema(schema_id).canonical)
    assert json.loads(by_id.schema_str)["name"] == "demo.PageView"

    latest = fresh.get_latest_version("page_views")
    assert (latest.subject, latest.version, latest.schema_id) == ("page_views", 2, v2_id)
    first = fresh.get_version("page_views", 1)
    assert (first.version, first.schema_id) == (1, schema_id)
    assert sorted(fresh.get_subjects()) == ["page_views", "searches"]
    assert fresh.get_versions("page_views") == [1, 2]
    assert fresh.get_versions("searches") == [1]
    assert sorted((v.subject, v.version) for v in fresh.get_schema_versions(schema_id)) == [
        ("page_views", 1),
        ("searches", 1),
    ]

    found = fresh.lookup_schema("page_views", Schema(V2, "AVRO"))
    assert (found.version, found.schema_id) == (2, v2_id)
    with pytest.raises(SchemaRegistryError) as missing:
        fresh.lookup_schema("page_views", Schema(BAD, "AVRO"))
    assert missing.value.error_code == 40403


def test_compatibility_check_and_the_fixed_level(client, url):
    client.register_schema("page_views", Schema(V1, "AVRO"))
    assert client.test_compatibility("page_views", Schema(V2, "AVRO")) is True
    assert client.test_compatibility("page_views", Schema(BAD, "AVRO")) is False
    assert client.test_compatibility("page_views", Schema(V2, "AVRO"), version=1) is True
    # verbose: the field that breaks it is named
    status, content_type, answer = http(
        "POST",
        f"{url}/compatibility/subjects/page_views/versions/latest?verbose=true",
        {"schema": BAD},
    )
    assert (status, content_type) == (200, CONTENT_TYPE)
    assert answer["is_compatible"] is False
    assert "member_id" in answer["messages"][0]

    assert client.get_compatibility() == "BACKWARD"
    assert client.get_compatibility("page_views") == "BACKWARD"
    assert client.set_compatibility(level="BACKWARD") == {"compatibility": "BACKWARD"}
    with pytest.raises(SchemaRegistryError) as level:
        client.set_compatibility("page_views", "NONE")
    assert level.value.error_code == 42203


def test_an_incompatible_schema_is_refused_with_confluents_409(client, registry):
    client.register_schema("page_views", Schema(V1, "AVRO"))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("page_views", Schema(BAD, "AVRO"))
    assert refused.value.http_status_code == 409
    assert refused.value.error_code == 409
    assert "member_id" in refused.value.error_message  # the field that breaks it
    assert registry.versions("page_views") == [1]  # nothing registered


def test_errors_in_confluents_codes(client, url):
    client.register_schema("page_views", Schema(V1, "AVRO"))

    def code(call) -> int:
        with pytest.raises(SchemaRegistryError) as failed:
            call()
        return failed.value.error_code

    assert code(lambda: client.get_latest_version("nope")) == 40401
    assert code(lambda: client.get_version("page_views", 7)) == 40402
    assert code(lambda: client.get_schema(999)) == 40403
    assert code(lambda: client.register_schema("j", Schema('{"type": "object"}', "JSON"))) == 42201
    not_an_event = json.dumps({"type": "record", "name": "X", "fields": []})
    assert code(lambda: client.register_schema("x", Schema(not_an_event, "AVRO"))) == 42201
    assert code(lambda: client.register_schema("x", Schema('{"type": "recor', "AVRO"))) == 42201
    assert code(lambda: client.delete_subject("page_views")) == 405
    assert client.get_versions("page_views") == [1]  # not deleted

    status, content_type, answer = http("GET", f"{url}/subjects/page_views/versions/one")
    assert (status, content_type, answer["error_code"]) == (422, CONTENT_TYPE, 42202)
    status, _, answer = http(
        "POST", f"{url}/subjects/page_views/versions", {"schema": V2, "schemaType": "PROTOBUF"}
    )
    assert (status, answer["error_code"]) == (422, 42201)
    assert "PROTOBUF" in answer["message"]


def test_confluents_avro_serializer_writes_logbroker_events(client, registry):
    record = {
        "header": {"timestamp": 1_700_000_000_123, "server": "web1", "producer_id": "p", "seq": 7},
        "page": "/jobs",
    }
    # Confluent's serializer knows no logbroker.EventHeader by name: the header inline
    inline = json.loads(V1)
    inline["fields"][0]["type"] = HEADER
    # the defaults: auto.register.schemas, and confluent-kafka's default subject name strategy,
    # which asks the registry for the topic's subject (logbroker's: the topic's name)
    serializer = AvroSerializer(client, json.dumps(inline), conf={"auto.register.schemas": True})
    payload = serializer(record, SerializationContext("page_views", MessageField.VALUE))

    assert registry.subjects() == ["page_views"]  # not page_views-value
    assert schema_id_of(payload) == registry.latest("page_views").id
    codec = EventCodec(registry)
    assert codec.decode(payload) == record
    assert codec.encode("page_views", record) == payload  # byte for byte logbroker's event

    # the strategy docs/events.md gives clients that use topic-value outright
    by_topic = AvroSerializer(
        client,
        json.dumps(inline),
        conf={"subject.name.strategy": lambda ctx, record_name: ctx.topic},
    )
    by_topic(record, SerializationContext("searches", MessageField.VALUE))
    assert registry.subjects() == ["page_views", "searches"]

    # a schema registered the logbroker way (header by name) serves as the latest version
    v2 = registry.register("page_views", V2)
    latest = AvroSerializer(
        client, None, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    newer = latest(
        {**record, "ref": "/home"}, SerializationContext("page_views", MessageField.VALUE)
    )
    assert schema_id_of(newer) == v2.id
    assert codec.decode(newer) == {**record, "ref": "/home"}


def test_the_command_serves_and_stops_on_sigterm(registry):
    registry.register("page_views", V1)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "logbroker.cli",
            "schema-registry",
            "--zookeeper",
            registry.connect,
            "--listeners",
            "http://127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving the Confluent Schema Registry API on http://127.0.0.1:")
        url = line.split()[7]
        client = SchemaRegistryClient({"url": url})
        assert client.get_subjects() == ["page_views"]
        assert client.get_latest_version("page_views").schema_id == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, proc.stderr.read()


def test_the_command_says_in_one_line_what_is_wrong(registry, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["schema-registry", "--zookeeper", registry.connect, "--listeners"]
        assert main([*argv, f"http://127.0.0.1:{port}"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert f"cannot listen on 127.0.0.1:{port}" in err
    assert main([*argv, "https://127.0.0.1:8081"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only http://HOST:PORT" in err
