"""The Pipeline page in Airflow's UI, rendered by headless Chromium, over a warehouse that
holds every state an hour can be in (open, loaded, audited and failed, closed).

An api-server process alone (the DAGs serialized by `airflow dags reserialize` instead of a
running dag-processor), logged in through the all-admins mode. The users' journeys through
the UI (the login form, the DAG list, the hour and cluster pages, the reports, and the
refusals without a login) are tests/deploy/test_ui_journeys.py, on a stack shaped like
`make up`; it also takes the README's pictures.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from warehouse_files import make_warehouse

from logbroker.testing.airflow_stack import AirflowStack
from logbroker.testing.broker import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
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
