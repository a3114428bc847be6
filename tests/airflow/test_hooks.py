"""The Airflow hooks and the mirror sensor's trigger, against a real ZooKeeper and brokers.

Connections are given the way Airflow users give them in deployments, as AIRFLOW_CONN_<ID>
environment variables in JSON. No Airflow scheduler is needed: hooks resolve connections
from the environment, and the trigger's async generator runs on an asyncio loop here as it
would in the triggerer.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from logbroker.client.group_consumer import GroupConsumer


@pytest.fixture
def cluster(zk_chroot, broker_factory, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    broker_factory(0, zk=zk_chroot)
    broker_factory(1, zk=zk_chroot)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LB_TEST",
        json.dumps({"conn_type": "logbroker", "host": zk_chroot.connect,
                    "extra": {"schema_registry": "127.0.0.1:2181/registry", "acks": "ack"}}),
    )  # fmt: skip
    return zk_chroot


def test_connection_settings_and_test_button(cluster) -> None:  # type: ignore[no-untyped-def]
    from hooks.logbroker_hook import LogbrokerHook

    hook = LogbrokerHook("lb_test")
    assert hook.zk_connect == cluster.connect
    assert hook.schema_registry == "127.0.0.1:2181/registry"
    ok, message = hook.test_connection()
    assert ok, message
    assert message.startswith("2 live broker(s): 0 at 127.0.0.1:")


def test_test_button_says_why_when_no_broker(zk_chroot, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from hooks.logbroker_hook import LogbrokerHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_LB_EMPTY", json.dumps({"conn_type": "logbroker", "host": zk_chroot.connect})
    )
    ok, message = LogbrokerHook("lb_empty").test_connection()
    assert not ok and "no broker is registered" in message


def test_bad_connection_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from hooks.logbroker_hook import LogbrokerHook

    monkeypatch.setenv("AIRFLOW_CONN_LB_BAD", json.dumps({"conn_type": "logbroker", "extra": {}}))
    with pytest.raises(ValueError, match="'lb_bad' has no host"):
        _ = LogbrokerHook("lb_bad").zk_connect
    monkeypatch.setenv(
        "AIRFLOW_CONN_LB_ACKS",
        json.dumps({"conn_type": "logbroker", "host": "h:1", "extra": {"acks": "maybe"}}),
    )
    with pytest.raises(ValueError, match="acks must be none, ack or fsync"):
        _ = LogbrokerHook("lb_acks").zk_connect


def test_end_offsets_lag_and_the_mirror_trigger(cluster) -> None:  # type: ignore[no-untyped-def]
    from hooks.logbroker_hook import LogbrokerHook
    from hooks.triggers import MirrorCaughtUpTrigger, partitions_behind

    hook = LogbrokerHook("lb_test")
    with hook.producer() as producer:
        for i in range(20):
            producer.send("events", [b"m%03d" % i], key=str(i))
    # a broker registers a new topic in ZooKeeper just after its first append: wait for both
    deadline = time.monotonic() + 30
    while True:
        targets = hook.end_offsets(["events"])
        total = sum(targets.get("events", {}).values())
        if total == 20 * (10 + 4) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert total == 20 * (10 + 4)  # 10 bytes of header per message
    assert hook.committed_offsets("mirror-x") == {}

    trigger = MirrorCaughtUpTrigger("lb_test", "mirror-x", targets, poll_interval=0.2)
    path, kwargs = trigger.serialize()
    assert path == "hooks.triggers.MirrorCaughtUpTrigger" and kwargs["targets"] == targets
    # What the trigger table stores names the connection; the address stays in the connection.
    assert kwargs["logbroker_conn_id"] == "lb_test"
    assert cluster.connect not in json.dumps(kwargs)

    async def first_event():  # type: ignore[no-untyped-def]
        async for event in trigger.run():
            return event.payload
        return None

    async def consume_then_wait():  # type: ignore[no-untyped-def]
        waiting = asyncio.create_task(first_event())
        await asyncio.sleep(0.5)
        assert not waiting.done(), "nothing was consumed yet: the trigger must keep waiting"
        await asyncio.to_thread(consume_all)
        return await asyncio.wait_for(waiting, 60)

    def consume_all() -> None:
        consumer = GroupConsumer(
            group_id="mirror-x", zk_connect=cluster.connect, consumer_timeout_ms=2000
        )
        try:
            stream = consumer.create_message_streams({"events": 1})["events"][0]
            assert len(list(stream)) == 20
            consumer.commit_offsets()
        finally:
            consumer.close()

    assert asyncio.run(consume_then_wait()) == {"status": "caught_up", "group": "mirror-x"}
    assert partitions_behind(targets, hook.committed_offsets("mirror-x")) == {}
    assert hook.lag("mirror-x") == 0


def test_end_offsets_of_every_topic_include_replicated_ones_named_p(cluster) -> None:  # type: ignore[no-untyped-def]
    """What the mirror sensor waits for (`end_offsets()` of every topic) includes replicated
    topics, named `<p>` as a group's offsets name them, with their high watermarks."""
    from hooks.logbroker_hook import LogbrokerHook
    from hooks.triggers import partitions_behind
    from logbroker.client.cluster import Cluster
    from logbroker.client.producer import Producer

    hook = LogbrokerHook("lb_test")
    with Cluster(cluster.connect) as c:
        c.create_replicated_topic("orders", 2, 2)
    with Producer(zk_connect=cluster.connect, request_required_acks=-1) as producer:
        for i in range(20):
            producer.send("orders", [b"o%03d" % i], key=str(i))  # keys 0..19: both partitions
    targets = hook.end_offsets()
    assert targets["orders"] == {"0": 10 * 14, "1": 10 * 14}  # 10 messages of 4 + 10 bytes
    ok, message = hook.test_connection()
    assert ok and message.endswith("; 1 topic(s)"), message
    assert partitions_behind(targets, hook.committed_offsets("mirror-r")) == {
        "orders/0": 140,
        "orders/1": 140,
    }
    consumer = GroupConsumer(
        group_id="mirror-r", zk_connect=cluster.connect, consumer_timeout_ms=2000
    )
    try:
        stream = consumer.create_message_streams({"orders": 1})["orders"][0]
        assert len(list(stream)) == 20
        consumer.commit_offsets()
    finally:
        consumer.close()
    assert partitions_behind(targets, hook.committed_offsets("mirror-r")) == {}


def test_mirror_trigger_ends_with_an_error_naming_a_missing_connection() -> None:
    from hooks.triggers import MirrorCaughtUpTrigger

    async def first_event():  # type: ignore[no-untyped-def]
        trigger = MirrorCaughtUpTrigger("lb_nowhere", "mirror-x", {"t": {"0-0": 1}}, 0.1)
        async for event in trigger.run():
            return event.payload
        return None

    payload = asyncio.run(asyncio.wait_for(first_event(), 30))
    assert payload["status"] == "error"
    assert "connection 'lb_nowhere'" in payload["message"]


def test_pipeline_settings_parquet_writer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from hooks.pipeline import DEFAULT_FILE, load_pipeline

    settings = json.loads(DEFAULT_FILE.read_text())
    assert load_pipeline(DEFAULT_FILE).parquet_writer == "auto"  # absent: auto
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps({**settings, "parquet_writer": "spark"}))
    assert load_pipeline(path).parquet_writer == "spark"
    path.write_text(json.dumps({**settings, "parquet_writer": "pyarrow"}))
    with pytest.raises(ValueError, match=r"pipeline.json: .*'pyarrow': one of auto, arrow, spark"):
        load_pipeline(path)


def test_pipeline_settings_mirror_target_and_audit_conn_ids(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The analysis cluster under the mirror's and the audit's own users: optional ids,
    analysis_conn_id's when absent; the mirror DAG writes with mirror_target_conn_id."""
    from hooks.pipeline import DEFAULT_FILE, load_pipeline

    settings = json.loads(DEFAULT_FILE.read_text())
    default = load_pipeline(DEFAULT_FILE)
    assert default.mirror_target_conn_id == default.audit_conn_id == default.analysis_conn_id
    path = tmp_path / "pipeline.json"
    path.write_text(
        json.dumps({**settings, "mirror_target_conn_id": "lb_mirror", "audit_conn_id": "lb_audit"})
    )
    pipeline = load_pipeline(path)
    assert (pipeline.mirror_target_conn_id, pipeline.audit_conn_id) == ("lb_mirror", "lb_audit")
    assert pipeline.analysis_conn_id == settings["analysis_conn_id"]
    path.write_text(json.dumps({**settings, "audit_conn_id": ""}))
    with pytest.raises(ValueError, match=r"audit_conn_id '': an Airflow connection id"):
        load_pipeline(path)
    dag = (Path(__file__).resolve().parents[2] / "dags" / "logbroker_mirror.py").read_text()
    assert "target_conn_id=PIPELINE.mirror_target_conn_id" in dag


def test_every_pipeline_file_in_git_loads_and_is_named_where_a_reader_looks() -> None:
    """Issue 43 finding 10: the pipeline files a checkout carries (the checkout's and
    docker-compose's) each load, hold the same keys but the warehouse's, each says in its
    `_comment` which it is, and include/pipeline/README.md and the loader's doc name them all:
    a new one, or a key added to one only, fails here."""
    import subprocess

    import hooks.pipeline
    from hooks.pipeline import load_pipeline

    root = Path(hooks.pipeline.__file__).resolve().parents[2]
    listed = subprocess.run(
        ["git", "ls-files", "*pipeline.json"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(listed) == ["include/compose/pipeline.json", "include/pipeline/pipeline.json"]
    readme = (root / "include" / "pipeline" / "README.md").read_text()
    keys = {}
    for name in listed:
        assert f"`{name}`" in readme, f"include/pipeline/README.md does not name {name}"
        assert name in (hooks.pipeline.__doc__ or ""), f"hooks/pipeline.py's doc: no {name}"
        settings = json.loads((root / name).read_text())
        other = next(n for n in listed if n != name)
        assert other in settings["_comment"], f"{name}'s _comment does not name {other}"
        load_pipeline(root / name)  # the loader takes it, _comment and all
        keys[name] = set(settings) - {"warehouse_reader", "reports"}
    assert keys["include/compose/pipeline.json"] == keys["include/pipeline/pipeline.json"]


def test_a_scheduled_run_does_not_load_a_committed_hour_again(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A try that committed and was stopped before reporting (make down) is not followed by a
    second load of the hour when the run is scheduled; a backfill or a manual run loads it."""
    from types import SimpleNamespace

    from warehouse_files import make_warehouse

    from hooks.operators import committed_by_schedule

    warehouse = make_warehouse(tmp_path / "wh").as_uri()
    said: list[str] = []

    def context(run_type: str) -> dict[str, object]:
        return {"dag_run": SimpleNamespace(run_type=run_type)}

    def say(message: str, *args: object) -> None:
        said.append(message % args)

    assert committed_by_schedule(
        context("scheduled"), warehouse, "page_views", "2026-11-22T11", say
    )
    assert "page_views 2026-11-22T11 is committed already" in said[0]
    assert not committed_by_schedule(
        context("scheduled"), warehouse, "page_views", "2026-11-22T13", say
    )
    for run_type in ("backfill", "manual"):
        assert not committed_by_schedule(
            context(run_type), warehouse, "page_views", "2026-11-22T11", say
        )
    assert len(said) == 1


def test_a_scheduled_load_reads_the_committed_hours_where_python_reads_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Spark's URI (viewfs, hdfs on a port WebHDFS does not answer) may be one this process
    cannot read: the committed hours are read at `warehouse_reader` (test_dagbag: the DAG
    passes it)."""
    from types import SimpleNamespace

    from warehouse_files import make_warehouse

    from hooks.operators import HourlyLoadOperator

    reader = make_warehouse(tmp_path / "wh").as_uri()
    load = HourlyLoadOperator(
        task_id="load",
        topics=["page_views", "searches"],
        analysis_conn_id="lb_analysis",
        warehouse="viewfs://cluster/wh",  # fsspec has no viewfs: read there, it raises
        warehouse_reader=reader,
    )
    scheduled: dict[str, object] = {"dag_run": SimpleNamespace(run_type="scheduled")}
    hour = "2026-11-22T14"  # page_views committed it (warehouse_files), searches did not
    assert load.topics_to_load(scheduled, ["page_views", "searches"], hour) == ["searches"]  # type: ignore[arg-type]


def test_pipeline_settings_topics_per_load(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from hooks.pipeline import DEFAULT_FILE, load_pipeline

    settings = json.loads(DEFAULT_FILE.read_text())
    default = load_pipeline(DEFAULT_FILE)  # absent: every topic and _audit in one load task
    assert default.load_batches == [["page_views", "searches", "ad_clicks", "_audit"]]
    path = tmp_path / "pipeline.json"
    topics = [f"t{i:02d}" for i in range(50)]
    path.write_text(json.dumps({**settings, "topics": topics, "topics_per_load": 25}))
    batches = load_pipeline(path).load_batches  # 51 loaded topics: three of 17, in order
    assert [len(b) for b in batches] == [17, 17, 17]
    assert [t for b in batches for t in b] == [*topics, "_audit"]
    path.write_text(json.dumps({**settings, "topics_per_load": 1}))
    assert load_pipeline(path).load_batches == [[t] for t in load_pipeline(path).loaded_topics]
    for bad in (0, "5", 2.5, True):
        path.write_text(json.dumps({**settings, "topics_per_load": bad}))
        with pytest.raises(ValueError, match=r"pipeline.json: .*topics_per_load .*at least 1"):
            load_pipeline(path)


def test_a_batch_label_fits_airflows_rendered_map_index() -> None:
    from hooks.operators import load_name, topics_label

    # PostgreSQL refuses a rendered_map_index over 250 characters: the task's end is lost
    topics = [f"{'x' * 60}_{i:02d}" for i in range(26)]
    assert len(topics_label(topics)) <= 200
    assert topics_label(["page_views", "_audit"]) == "page_views,_audit"
    assert topics_label([f"t{i}" for i in range(26)]) == "t0,t1,t2,+23"
    assert load_name(["page_views", "_audit"], "2026-11-22T10") == (
        "hourly_load page_views,_audit 2026-11-22T10"
    )
