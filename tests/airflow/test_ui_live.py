"""The Airflow UI with the plugin, for real: an api-server process and headless Chromium.

One stack for the module (api-server only, the DAGs serialized by `airflow dags reserialize`
instead of a running dag-processor). Chromium (Debian's package) renders the pages; the
assertions read the rendered DOM; `make screenshots` puts the screenshots in docs/images/,
so that the README shows what the code draws today.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from warehouse_files import make_warehouse

from logbroker.testing.airflow_stack import AirflowStack
from logbroker.testing.broker import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
# `make screenshots` (UPDATE_SCREENSHOTS=1) refreshes the README's pictures; a plain test run
# keeps its screenshots in a temporary directory, so it never dirties the work tree.
IMAGES = (
    ROOT / "docs" / "images"
    if os.environ.get("UPDATE_SCREENSHOTS")
    else Path(tempfile.mkdtemp(prefix="logbroker-screenshots-"))
)
if not os.environ.get("UPDATE_SCREENSHOTS"):
    atexit.register(shutil.rmtree, IMAGES, ignore_errors=True)
CHROMIUM = shutil.which("chromium")

pytestmark = pytest.mark.slow


def pipeline_file(tmp: Path, warehouse: Path) -> Path:
    path = tmp / "pipeline.json"
    path.write_text(json.dumps({
        "live_clusters": [{"name": "live", "conn_id": "logbroker_live"}],
        "analysis_conn_id": "logbroker_analysis",
        "topics": ["page_views", "searches"],
        "warehouse": warehouse.as_uri(),
    }))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # type: ignore[no-untyped-def]
    target = zookeeper.create_chroot("/ui-live")
    brokers = [
        BrokerProcess(
            tmp_path_factory.mktemp(f"broker{i}"), broker_id=i, zk_connect=target.connect
        ).start()
        for i in (0, 1)
    ]
    try:
        yield target.connect
    finally:
        for broker in brokers:
            broker.stop(timeout=15)


def stack_for(home: Path, pipeline: Path, cluster: str, all_admins: bool) -> AirflowStack:
    connection = json.dumps({"conn_type": "logbroker", "host": cluster})
    return AirflowStack(
        home,
        dags_folder=ROOT / "dags",
        plugins_folder=ROOT / "plugins",
        all_admins=all_admins,
        extra_env={
            "LOGBROKER_PIPELINE": str(pipeline),
            "AIRFLOW_CONN_LOGBROKER_LIVE": connection,
            "AIRFLOW_CONN_LOGBROKER_ANALYSIS": connection,
        },
    )


@pytest.fixture(scope="module")
def stack(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    tmp = tmp_path_factory.mktemp("ui")
    pipeline = pipeline_file(tmp, make_warehouse(tmp / "warehouse"))
    stack = stack_for(tmp / "airflow", pipeline, cluster, all_admins=True)
    stack.migrate()
    stack.airflow("dags", "reserialize")
    stack.start(("api-server",))
    try:
        yield stack
    finally:
        stack.stop()


def chromium(url: str, *args: str, tmp: Path) -> str:
    assert CHROMIUM, "chromium is installed by scripts/install-system-deps.sh"
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp}", "--window-size=1400,800", "--virtual-time-budget=15000",
         *args, url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def logged_in(stack: AirflowStack, path: str) -> str:
    """A URL that logs the browser in (all-admins mode) and lands on `path`."""
    return f"{stack.url}/auth/token/login?next={path}"


def test_dag_list_shows_the_three_dags(stack: AirflowStack, tmp_path: Path) -> None:
    dom = chromium(logged_in(stack, "/dags"), "--dump-dom", tmp=tmp_path)
    for dag_id in ("logbroker_mirror", "logbroker_hourly_load", "logbroker_audit"):
        assert dag_id in dom


def test_pipeline_page_in_the_airflow_ui(stack: AirflowStack, tmp_path: Path) -> None:
    dom = chromium(
        logged_in(stack, "/logbroker/pipeline?until=2026-11-22T14%26hours=6"),
        "--dump-dom",
        tmp=tmp_path,
    )
    states = dict(
        re.findall(r'data-topic="page_views" data-hour="([\dT-]+)" data-state="(\w+)"', dom)
    )
    assert states == {"2026-11-22T09": "open", "2026-11-22T10": "open",
                      "2026-11-22T11": "closed", "2026-11-22T12": "audited",
                      "2026-11-22T13": "open", "2026-11-22T14": "loaded"}  # fmt: skip
    assert re.search(r'data-hour="2026-11-22T12" data-state="audited"\s+data-failed="true"', dom)
    assert 'class="grid"' in dom and ">page_views<" in dom and ">_audit<" in dom
    IMAGES.mkdir(parents=True, exist_ok=True)
    history = logged_in(stack, "/logbroker/pipeline?until=2026-11-22T14%26hours=6")
    chromium(
        history, "--window-size=1000,400", f"--screenshot={IMAGES / 'pipeline.png'}", tmp=tmp_path
    )
    in_airflow = logged_in(stack, "/plugin/logbroker_pipeline")
    chromium(in_airflow, f"--screenshot={IMAGES / 'pipeline-in-airflow.png'}", tmp=tmp_path)
    assert (IMAGES / "pipeline.png").stat().st_size > 10_000
    assert (IMAGES / "pipeline-in-airflow.png").stat().st_size > 10_000


def test_hour_page_and_cluster_page(stack: AirflowStack, tmp_path: Path) -> None:
    dom = chromium(
        logged_in(stack, "/logbroker/pipeline/page_views/2026-11-22T12"), "--dump-dom", tmp=tmp_path
    )
    assert re.search(r'id="hour-state" data-state="audited">failed<', dom)
    assert re.search(r'<tr data-status="lost">', dom)
    chromium(
        logged_in(stack, "/logbroker/pipeline/page_views/2026-11-22T12"),
        f"--screenshot={IMAGES / 'hour.png'}",
        tmp=tmp_path,
    )
    dom = chromium(logged_in(stack, "/logbroker/cluster"), "--dump-dom", tmp=tmp_path)
    assert re.search(r"0 at 127\.0\.0\.1:\d+, 1 at 127\.0\.0\.1:\d+", dom)


def test_pages_require_an_airflow_login(cluster: str, tmp_path: Path) -> None:
    pipeline = pipeline_file(tmp_path, make_warehouse(tmp_path / "warehouse"))
    stack = stack_for(tmp_path / "airflow", pipeline, cluster, all_admins=False)
    stack.migrate().start(("api-server",))
    try:
        for path in ("/logbroker/pipeline", "/logbroker/cluster", "/logbroker/reports/index.html"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(stack.url + path, timeout=30)
            assert refused.value.code == 401, path
        request = urllib.request.Request(
            stack.url + "/logbroker/pipeline", headers={"Authorization": f"Bearer {stack.token()}"}
        )
        with urllib.request.urlopen(request, timeout=60) as page:
            assert page.status == 200 and b'class="grid"' in page.read()
    finally:
        stack.stop()
