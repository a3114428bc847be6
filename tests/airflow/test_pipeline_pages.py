"""The Pipeline and Cluster pages, rendered by the plugin's FastAPI app.

The warehouse is written here in the exact layout of docs/design.md §3.6 (checkpoints as JSON,
audit results as Parquet); the cluster is a real ZooKeeper and real broker processes. The
pages are asserted on their rendered HTML (data-* attributes carry each cell's state).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from warehouse_files import NOW, make_warehouse, pipeline_settings

from logbroker.client.producer import Producer


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return make_warehouse(tmp_path / "warehouse")


def cell_states(html: str) -> dict[tuple[str, str], str]:
    return {
        (m[0], m[1]): m[2]
        for m in re.findall(r'data-topic="([^"]+)" data-hour="([^"]+)" data-state="([^"]+)"', html)
    }


def test_pipeline_grid_shows_each_hours_state(warehouse: Path) -> None:
    from fastapi.testclient import TestClient

    from pipeline_ui.app import create_app

    app = create_app(pipeline_settings(warehouse), require_login=False, now=lambda: NOW)
    page = TestClient(app).get("/pipeline", params={"hours": 4})
    assert page.status_code == 200
    states = cell_states(page.text)
    assert states[("page_views", "2026-11-22T11")] == "closed"
    assert states[("searches", "2026-11-22T12")] == "closed"
    assert states[("page_views", "2026-11-22T12")] == "audited"
    assert 'data-hour="2026-11-22T12" data-state="audited"\n        data-failed="true"' in page.text
    assert states[("page_views", "2026-11-22T13")] == "open"
    assert states[("page_views", "2026-11-22T14")] == "loaded"
    assert states[("_audit", "2026-11-22T14")] == "open"


def test_hour_page_shows_offsets_and_the_failed_window(warehouse: Path) -> None:
    from fastapi.testclient import TestClient

    from pipeline_ui.app import create_app

    client = TestClient(
        create_app(pipeline_settings(warehouse), require_login=False, now=lambda: NOW)
    )
    page = client.get("/pipeline/page_views/2026-11-22T12")
    assert page.status_code == 200
    assert 'id="hour-state" data-state="audited">failed<' in page.text
    assert "41,230" in page.text  # the end offset from the checkpoint
    lost = re.search(r'<tr data-status="lost">(.*?)</tr>', page.text, re.S)
    assert lost and "12:00–12:10" in lost.group(1) and ">3<" in lost.group(1)
    assert client.get("/pipeline/nope/2026-11-22T12").status_code == 404
    assert client.get("/pipeline/page_views/yesterday").status_code == 404


def test_hour_page_names_no_broker_for_a_replicated_topics_partition(warehouse: Path) -> None:
    """A replicated topic's partition is loaded from whichever replica leads (its offsets are
    the same on all): the page says so, not the internal broker id -1."""
    from fastapi.testclient import TestClient
    from warehouse_files import write_checkpoint

    from pipeline_ui.app import create_app

    write_checkpoint(warehouse, "searches", "2026-11-22T14", 80, broker_id=-1)
    client = TestClient(
        create_app(pipeline_settings(warehouse), require_login=False, now=lambda: NOW)
    )

    def first_offset_row(html: str) -> list[str]:
        table = re.search(r'<table class="partitions">(.*?)</table>', html, re.S)
        assert table, html
        rows = re.findall(r"<tr><td>(.*?)</tr>", table.group(1), re.S)
        return re.findall(r"<td[^>]*>([^<]*)</td>", "<td>" + rows[0])

    replicated = client.get("/pipeline/searches/2026-11-22T14")
    assert replicated.status_code == 200
    assert first_offset_row(replicated.text) == ["any replica", "0", "0", "41,230", "80"]
    assert ">-1<" not in replicated.text
    # a 0.7 topic's partition lives on one broker: named by its id
    plain = client.get("/pipeline/page_views/2026-11-22T14").text
    assert first_offset_row(plain)[:2] == ["0", "0"]


def test_reports_are_served_and_paths_cannot_escape(warehouse: Path) -> None:
    from fastapi.testclient import TestClient

    from pipeline_ui.app import create_app

    (warehouse / "_reports").mkdir()
    (warehouse / "_reports" / "index.html").write_text("<html>docs</html>")
    (warehouse / "secret.txt").write_text("no")
    client = TestClient(create_app(pipeline_settings(warehouse), require_login=False))
    page = client.get("/reports/index.html")
    assert page.status_code == 200 and page.text == "<html>docs</html>"
    assert page.headers["content-type"].startswith("text/html")
    assert client.get("/reports/../secret.txt").status_code == 404
    # the reports' vendored assets live under name@version directories (report_assets)
    css = warehouse / "_reports" / "assets" / "bootstrap@4.3.1" / "dist" / "b.min.css"
    css.parent.mkdir(parents=True)
    css.write_text(".badge {}")
    styled = client.get("/reports/assets/bootstrap@4.3.1/dist/b.min.css")
    assert styled.status_code == 200 and styled.headers["content-type"].startswith("text/css")
    assert client.get("/reports/missing.html").status_code == 404


def test_an_hour_report_links_back_to_its_load_run_and_task_logs(warehouse: Path) -> None:
    from fastapi.testclient import TestClient

    from pipeline_ui.app import create_app

    hours = warehouse / "_reports" / "hours"
    hours.mkdir(parents=True)
    report = '<html><body><div class="container-fluid"><h1>Audit</h1></div></body></html>'
    (hours / "2026-11-22T12.html").write_text(report)
    (hours / "notes.html").write_text(report)
    client = TestClient(create_app(pipeline_settings(warehouse), require_login=False))
    page = client.get("/reports/hours/2026-11-22T12.html").text
    bar = re.search(r'<nav id="airflow-links".*?</nav>', page)
    assert bar is not None and page.index(bar.group()) < page.index("<h1>Audit</h1>")
    links = dict(re.findall(r'data-topic="(\w+)" href="([^"]+)"', bar.group()))
    assert links == {
        topic: f"/logbroker/runs/2026-11-22T12?topic={topic}"
        for topic in ("page_views", "searches", "_audit")
    }
    assert 'id="load-run" href="/logbroker/runs/2026-11-22T12"' in bar.group()
    assert client.get("/reports/hours/notes.html").text == report  # not an hour's report
    # The redirect itself reads Airflow's database (the journeys test it against a real one);
    # what it refuses needs none.
    assert client.get("/runs/yesterday").status_code == 404
    assert client.get("/runs/2026-11-22T12?topic=nope").status_code == 404


def test_cluster_page_lists_brokers_topics_and_sizes(  # type: ignore[no-untyped-def]
    tmp_path: Path, zk_chroot, broker_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from pipeline_ui.app import create_app

    broker_factory(0, zk=zk_chroot)
    broker_factory(1, zk=zk_chroot)
    with Producer(zk_connect=zk_chroot.connect, acks="ack") as producer:
        producer.send("page_views", [b"x" * 100] * 10)
    conn = json.dumps({"conn_type": "logbroker", "host": zk_chroot.connect})
    monkeypatch.setenv("AIRFLOW_CONN_LB_LIVE", conn)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LB_ANALYSIS",
        json.dumps(
            {"conn_type": "logbroker", "host": "127.0.0.1:1/nothing", "extra": {"timeout_s": 1}}
        ),
    )
    client = TestClient(create_app(pipeline_settings(tmp_path), require_login=False))
    # the broker registers the new topic in ZooKeeper just after its first append: wait for it
    deadline = time.monotonic() + 30
    while True:
        page = client.get("/cluster")
        if ">page_views<" in page.text or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert page.status_code == 200
    live = page.text.split('data-cluster="analysis"')[0]
    assert re.search(r"0 at 127\.0\.0\.1:\d+, 1 at 127\.0\.0\.1:\d+", live)
    assert ">page_views<" in live and "1,100 bytes" in live  # 10 messages of 100 + 10 bytes
    analysis = page.text.split('data-cluster="analysis"')[1]
    assert "could not read analysis" in analysis  # a dead cluster is a message, not a 500


def test_cluster_page_shows_replicated_partitions_and_marks_the_under_replicated(  # type: ignore[no-untyped-def]
    tmp_path: Path, zk_chroot, broker_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from logbroker.client.cluster import Cluster
    from pipeline_ui.app import create_app

    brokers = [broker_factory(i, zk=zk_chroot, zk_sessiontimeout_ms=2000) for i in (0, 1)]
    with Cluster(zk_chroot.connect) as cluster:
        created = cluster.create_replicated_topic("orders", 2, 2)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LB_LIVE", json.dumps({"conn_type": "logbroker", "host": zk_chroot.connect})
    )
    client = TestClient(create_app(pipeline_settings(tmp_path), require_login=False))

    def rows() -> list[tuple[str, ...]]:
        html = client.get("/cluster").text.split('data-cluster="analysis"')[0]
        return re.findall(
            r'data-partition="(\d)" data-under-replicated="(\w+)">.*?<td class="num">\d</td>\s*'
            r"<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>",
            html,
            re.S,
        )

    def ids(members: tuple[int, ...]) -> str:
        return ",".join(map(str, members))

    assert rows() == [
        (str(p.partition), "false", str(p.leader), ids(p.replicas), ids(p.isr)) for p in created
    ]
    brokers[1].kill()
    deadline = time.monotonic() + 30
    while any(r[1] == "false" for r in rows()) and time.monotonic() < deadline:
        time.sleep(0.1)
    after = rows()  # broker 0 leads both, alone in their ISR
    assert [(under, leader) for _, under, leader, _, _ in after] == [("true", "0")] * 2
    assert all(isr.startswith("0 <span") and "under-replicated" in isr for *_, isr in after)


def test_the_pages_read_a_warehouse_through_a_non_file_fsspec_uri(warehouse: Path) -> None:
    """The same warehouse behind `memory://` (any fsspec filesystem: WebHDFS for an hdfs://
    warehouse, s3://, ...): the same states, the same hour page, the same reports."""
    import dataclasses

    import fsspec
    from fastapi.testclient import TestClient

    from pipeline_ui.app import create_app

    (warehouse / "_reports").mkdir()
    (warehouse / "_reports" / "index.html").write_text("<html>docs</html>")
    memory = fsspec.filesystem("memory")
    for path in warehouse.rglob("*"):
        if path.is_file():
            memory.pipe(f"/ui-warehouse/{path.relative_to(warehouse)}", path.read_bytes())
    on_disk = pipeline_settings(warehouse)
    in_memory = dataclasses.replace(
        on_disk, warehouse="memory://ui-warehouse", reports="memory://ui-warehouse/_reports"
    )
    try:
        disk = TestClient(create_app(on_disk, require_login=False, now=lambda: NOW))
        mem = TestClient(create_app(in_memory, require_login=False, now=lambda: NOW))
        grid = mem.get("/pipeline", params={"hours": 4})
        assert grid.status_code == 200
        assert cell_states(grid.text) == cell_states(
            disk.get("/pipeline", params={"hours": 4}).text
        )
        assert cell_states(grid.text)[("page_views", "2026-11-22T11")] == "closed"
        hour = mem.get("/pipeline/page_views/2026-11-22T12").text
        assert "41,230" in hour and 'data-status="lost"' in hour
        assert mem.get("/reports/index.html").text == "<html>docs</html>"
    finally:
        memory.rm("/ui-warehouse", recursive=True)
