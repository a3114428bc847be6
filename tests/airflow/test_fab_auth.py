"""Airflow on the FAB auth manager, as `make up` runs it: users and roles, not one admin.

One api-server for the module (SQLite, no scheduler: a triggered run stays queued), on
AirflowStack(auth_manager="fab"): its migration makes the users `admin` (Admin) and `viewer`
(VIEWER_ROLE), their passwords generated into a 0600 users file. Both log in as the REST API's
clients do (POST /auth/token, a JWT); the viewer reads DAG runs, the plugin list the UI builds
its menu from, the Pipeline page and the reports, and is refused every write (trigger,
backfill, clear); the admin triggers. The Pipeline page's warehouse is warehouse_files'.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest
from warehouse_files import make_warehouse

from logbroker.stack.airflow_stack import FAB_AUTH_MANAGER, VIEWER_ROLE, AirflowStack

try:
    metadata.version("apache-airflow-providers-fab")
except metadata.PackageNotFoundError:
    pytest.skip(
        "apache-airflow-providers-fab is not installed (make setup)", allow_module_level=True
    )

DAG_ID = "fab_probe"
PROBE_DAG = f"""
from datetime import datetime
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("{DAG_ID}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    EmptyOperator(task_id="nothing")
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    base = tmp_path_factory.mktemp("fab")
    dags = base / "dags"
    dags.mkdir()
    (dags / "probe.py").write_text(PROBE_DAG)
    warehouse = make_warehouse(base / "warehouse")
    (warehouse / "_reports").mkdir()
    (warehouse / "_reports" / "index.html").write_text("<html>the audit's docs</html>")
    pipeline = {
        "live_clusters": [{"name": "live", "conn_id": "logbroker_live"}],
        "analysis_conn_id": "logbroker_analysis",
        "topics": ["page_views", "searches"],
        "warehouse": warehouse.as_uri(),
    }
    (base / "pipeline.json").write_text(json.dumps(pipeline))
    airflow = AirflowStack(
        base / "airflow",
        dags_folder=dags,
        plugins_folder=dags,
        auth_manager="fab",
        users_file=base / "security" / "airflow-users.json",
        extra_env={"LOGBROKER_PIPELINE": str(base / "pipeline.json")},
    )
    try:
        airflow.migrate()
        airflow.airflow("dags", "reserialize")  # the DAG in the database, with no dag-processor
        airflow.start(("api-server",))
        yield airflow
    finally:
        airflow.stop()


def call(
    stack: AirflowStack, method: str, path: str, token: str | None = None, body: Any = None
) -> tuple[int, bytes]:
    """An HTTP call to the api-server: (status, body), errors included."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        stack.url + path,
        data=None if body is None else json.dumps(body).encode(),
        headers=headers,
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def login(stack: AirflowStack, user: str, password: str) -> tuple[int, str | None]:
    status, body = call(stack, "POST", "/auth/token", body={"username": user, "password": password})
    return status, json.loads(body).get("access_token") if status == 201 else None


def token_of(stack: AirflowStack, user: str) -> str:
    status, token = login(stack, user, stack.logins()[user])
    assert status == 201 and token, (user, status)
    return token


def test_the_stack_runs_fab_with_two_users_whose_passwords_only_the_owner_reads(
    stack: AirflowStack,
) -> None:
    assert stack.env()["AIRFLOW__CORE__AUTH_MANAGER"] == FAB_AUTH_MANAGER
    assert not any(k.startswith("AIRFLOW__CORE__SIMPLE_AUTH") for k in stack.env())
    users_file = stack.passwords_path
    assert users_file == stack.home.parent / "security" / "airflow-users.json"
    assert users_file.stat().st_mode & 0o777 == 0o600
    assert users_file.parent.stat().st_mode & 0o777 == 0o700
    logins = stack.logins()
    assert set(logins) == {"admin", "viewer"} and logins["admin"] != logins["viewer"]
    # made once: the next `up` (a new stack on the same files) has the same passwords
    again = AirflowStack(
        stack.home,
        dags_folder=stack.dags_folder,
        plugins_folder=stack.plugins_folder,
        port=stack.port,
    ).use_fab(users_file)
    assert again.logins() == logins and again.password == logins["admin"]


def test_a_wrong_password_or_an_unknown_user_gets_no_token(stack: AirflowStack) -> None:
    assert login(stack, "viewer", stack.logins()["viewer"])[0] == 201  # the right one does
    assert login(stack, "viewer", stack.logins()["viewer"] + "x") == (401, None)
    assert login(stack, "admin", stack.logins()["viewer"]) == (401, None)
    assert login(stack, "nobody", "secret") == (401, None)
    assert call(stack, "GET", "/logbroker/pipeline")[0] == 401  # the plugin: no token, no page


def test_the_viewer_reads_runs_the_pipeline_page_and_reports(stack: AirflowStack) -> None:
    token = token_of(stack, "viewer")
    status, runs = call(stack, "GET", f"/api/v2/dags/{DAG_ID}/dagRuns", token)
    assert status == 200 and "dag_runs" in json.loads(runs)
    # the UI's menu lists the plugin's pages from here: FAB's Viewer alone may not read it
    status, plugins = call(stack, "GET", "/api/v2/plugins", token)
    assert status == 200, plugins
    views = [v for p in json.loads(plugins)["plugins"] for v in p["external_views"]]
    assert {"Pipeline", "Cluster"} <= {v["name"] for v in views}
    status, page = call(stack, "GET", "/logbroker/pipeline?hours=4&until=2026-11-22T14", token)
    assert status == 200
    assert 'data-topic="page_views" data-hour="2026-11-22T11" data-state="closed"' in page.decode()
    assert call(stack, "GET", "/logbroker/reports/index.html", token) == (
        200,
        b"<html>the audit's docs</html>",
    )
    assert call(stack, "GET", "/api/v2/connections", token)[0] == 403  # not its business


def test_the_viewer_logs_in_through_the_form_and_opens_the_pipeline_page(
    stack: AirflowStack,
) -> None:
    """The UI's way: FAB's login form (its CSRF token, the session cookie), which sets the
    `_token` cookie the plugin's pages read."""
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with browser.open(f"{stack.url}/auth/login/", timeout=60) as form:
        csrf = re.search(r'name="csrf_token"[^>]*value="([^"]+)"', form.read().decode())
    assert csrf, "no CSRF token in FAB's login form"
    fields = {"username": "viewer", "password": stack.logins()["viewer"], "csrf_token": csrf[1]}
    with browser.open(
        f"{stack.url}/auth/login/", urllib.parse.urlencode(fields).encode(), timeout=60
    ):
        pass
    assert "_token" in {cookie.name for cookie in jar}
    pipeline = f"{stack.url}/logbroker/pipeline?hours=4&until=2026-11-22T14"
    with browser.open(pipeline, timeout=60) as page:
        assert page.status == 200 and 'data-state="closed"' in page.read().decode()


def test_the_viewer_cannot_trigger_backfill_or_clear_and_the_admin_can_trigger(
    stack: AirflowStack,
) -> None:
    viewer = token_of(stack, "viewer")
    run = {"dag_run_id": "by_viewer", "logical_date": None}
    assert call(stack, "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", viewer, run)[0] == 403
    backfill = {
        "dag_id": DAG_ID,
        "from_date": "2026-01-01T00:00:00Z",
        "to_date": "2026-01-02T00:00:00Z",
    }
    assert call(stack, "POST", "/api/v2/backfills", viewer, backfill)[0] == 403
    clear = {"dry_run": True, "only_failed": False}
    assert call(stack, "POST", f"/api/v2/dags/{DAG_ID}/clearTaskInstances", viewer, clear)[0] == 403
    status, runs = call(stack, "GET", f"/api/v2/dags/{DAG_ID}/dagRuns", viewer)
    assert status == 200 and json.loads(runs)["total_entries"] == 0  # nothing was made

    admin = token_of(stack, "admin")
    run = {"dag_run_id": "by_admin", "logical_date": None}
    status, made = call(stack, "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", admin, run)
    assert status == 200, made
    assert json.loads(made)["dag_run_id"] == "by_admin"
    assert stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"] == 1  # as `admin`
    assert VIEWER_ROLE in call(stack, "GET", "/auth/fab/v1/roles", admin)[1].decode()
