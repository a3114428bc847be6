"""The three jobs of the pipeline's users, done in the Airflow UI the way a person does them.

One stack for the module, shaped like `make up`: Airflow on its own PostgreSQL (LocalExecutor),
the live and analysis clusters, and Airflow's login form (no all-admins mode). The loads and
audits run Spark in local mode: what the journeys look at is the same on either master, and
`make up`'s standalone master is tests/deploy/test_up.py's (each application there starts
executors on the workers, ~12 more JVMs over this module's run). Headless Chromium
(harness.browser, the DevTools protocol) logs in with the stack's admin password and
clicks through:

1. schedule: the three DAGs listed; `logbroker_hourly_load` unpaused (its schedule and next run
   shown); `logbroker_mirror` triggered and seen to succeed;
2. backfill from stored offsets: Airflow's own Backfill dialog, "All Runs", over the two past
   hours; the runs succeed; the Pipeline page shows the hours audited and closed again and the
   hour page the same rows_sha256 as before;
3. review: from the Pipeline page, an hour's audit report and the Great Expectations Data Docs
   (served by the plugin behind the login); the hour with a seeded loss shows its lost window
   in red with the missing count; from the report back to the hour's load run and task log;

and, without a login, every plugin page and report answers 401 (plain requests, and once in
the browser). Each step asserts on the rendered page and saves a screenshot: `make screenshots`
(UPDATE_SCREENSHOTS=1) writes them to docs/images/ for the README.

Two simulated hours, A and B (the two last whole hours; lateness grace 0, so both can close),
of one topic: A's traffic, then B's with events counted but never sent (the seeded loss). The
hourly load is paused at first, with a backfill of A waiting: unpausing it (journey 1) lets the
scheduler run A, then the hour the clock schedules (B), in order (depends_on_past).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.browser import Browser, BrowserError
from logbroker.stack.pipeline_stack import PipelineStack, wait_for

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

LOAD, MIRROR, AUDIT = "logbroker_hourly_load", "logbroker_mirror", "logbroker_audit"
TOPIC = "page_views"
LOADED = (TOPIC, "_audit")
EVENTS = 400  # per hour: small, the journeys are about the UI
LOST = 25  # events of hour B counted by the producer, never sent

# The module's stack and the journeys' waits for the loads count against one test: ~5 min.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def hour_name(hour: datetime) -> str:
    return f"{hour:%Y-%m-%dT%H}"


def past_hours(margin: timedelta = timedelta(minutes=5)) -> tuple[datetime, datetime]:
    """The two last whole hours, A and B. Unpausing the load (journey 1) makes the scheduler
    run the last whole hour, which must be B (its load needs A committed, in order): an hour
    that ends within `margin` is waited out first, so the clock does not pass an hour between
    here and the unpause."""
    now = datetime.now(UTC)
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    if end - now < margin:
        time.sleep((end - now).total_seconds() + 1)
        now = datetime.now(UTC)
    last = now.replace(minute=0, second=0, microsecond=0)
    return last - timedelta(hours=2), last - timedelta(hours=1)


class Journey:
    """The stack, the two hours, and what the journeys learn on the way."""

    def __init__(self, stack: PipelineStack, a: datetime, b: datetime) -> None:
        self.stack = stack
        self.a, self.b = a, b
        self.sha_before: dict[tuple[str, str], str] = {}

    @property
    def url(self) -> str:
        return self.stack.airflow.url

    @property
    def hours(self) -> tuple[str, str]:
        return hour_name(self.a), hour_name(self.b)

    def checkpoint(self, topic: str, hour: str) -> dict[str, Any] | None:
        path = self.stack.warehouse / "_checkpoints" / topic / f"{hour}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def states(self) -> dict[tuple[str, str], tuple[str, bool, bool]]:
        """(topic, hour) -> (state, failed, reopened), from the Pipeline page's cells."""
        page = self.get(f"/logbroker/pipeline?until={self.hours[1]}&hours=2")
        cells = re.findall(
            r'data-topic="(\w+)" data-hour="([\dT-]+)" data-state="(\w+)"\s+'
            r'data-failed="(\w+)" data-reopened="(\w+)"',
            page,
        )
        return {(t, h): (s, f == "true", r == "true") for t, h, s, f, r in cells}

    def get(self, path: str) -> str:
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {self.stack.airflow.token()}"}
        )
        with urllib.request.urlopen(request, timeout=60) as page:
            return str(page.read().decode())

    def run_of(self, dag_id: str, hour: str) -> dict[str, Any] | None:
        start = f"{hour}:00:00"
        found = [
            r
            for r in self.stack.runs(dag_id)
            if (r.get("data_interval_start") or "").startswith(start)
        ]
        return found[-1] if found else None

    def wait_hours_settled(self, since: dict[str, str] | None = None) -> None:
        """Both hours loaded (after `since`: hour -> the end of their previous load run), and
        audited since: A closed, B audited with its lost window; no audit still running."""

        def settled() -> bool:
            for hour in self.hours:
                run = self.run_of(LOAD, hour)
                if run is None or run["state"] not in ("success", "failed"):
                    return False
                assert run["state"] == "success", self.stack.failure_details(
                    LOAD, run["dag_run_id"]
                )
                if since and run.get("end_date") == since.get(hour):
                    return False
            audits = self.stack.runs(AUDIT)
            if any(r["state"] not in ("success", "failed") for r in audits):
                return False
            states = self.states()
            a, b = self.hours
            # (the producers' counts, `_audit`, are loaded and read by the audit, not audited)
            return states.get((TOPIC, a)) == ("closed", False, False) and states.get(
                (TOPIC, b)
            ) == ("audited", True, False)

        wait_for(settled, 1200, f"the hours {self.hours} loaded and audited", sleep=5)


@pytest.fixture(scope="module")
def journey() -> Iterator[Journey]:
    yield from journey_stack()


def journey_stack() -> Iterator[Journey]:
    # PostgreSQL runs as the `postgres` user under root: it must be able to enter the stack's
    # directory (pytest's tmp_path is 0700).
    parent = Path(tempfile.mkdtemp(prefix="logbroker-journeys-"))
    parent.chmod(0o755)
    stack = PipelineStack(
        parent / "stack",
        topics=(TOPIC,),
        grace_hours=0,
        postgres=True,
        # Paused at first, as a team finds a new deployment: the schedule journey unpauses.
        extra_airflow_env={"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"},
        log=lambda line: None,
    )
    try:
        stack.start()
        a, b = past_hours()
        journey = Journey(stack, a, b)
        wait_for(
            lambda: (
                {d["dag_id"] for d in stack.airflow.api("GET", "/dags")["dags"]}
                >= {LOAD, MIRROR, AUDIT}
            ),
            180,
            "the three DAGs parsed",
            sleep=2,
        )
        for dag_id in (MIRROR, AUDIT):
            stack.airflow.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        stack.produce_hour(int(a.timestamp() * 1000), {TOPIC: EVENTS})
        stack.produce_hour(int(b.timestamp() * 1000), {TOPIC: EVENTS}, unsent={TOPIC: LOST})
        run = stack.wait_run(MIRROR, stack.trigger(MIRROR))
        assert run["state"] == "success", stack.failure_details(MIRROR, run["dag_run_id"])
        # Hour A waits in a backfill for the load to be unpaused; B is the scheduler's own.
        a_name = hour_name(a)
        stack.backfill(LOAD, a_name, a_name, reprocess=False)
        yield journey
    finally:
        stack.stop()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(journey: Journey) -> Iterator[Browser]:
    with Browser(journey.stack.workdir) as browser:
        yield browser


def shot(browser: Browser, name: str, full_page: bool = False) -> None:
    path = browser.screenshot(IMAGES / name, full_page=full_page)
    assert path.stat().st_size > 10_000, f"{name}: an empty page?"


def log_in(browser: Browser, journey: Journey) -> None:
    """Through Airflow's login form, with the admin's password (`make up` prints it)."""
    browser.goto(journey.url + "/")
    browser.wait_for("input[name=username]")
    assert "/auth/login" in browser.url
    browser.fill("input[name=username]", journey.stack.airflow.username)
    browser.fill("input[name=password]", journey.stack.airflow.password)
    browser.click("button[type=submit]", text="Sign in")
    browser.wait_text("Welcome")


def ensure_logged_in(browser: Browser, journey: Journey) -> None:
    cookies = browser.send("Network.getCookies", {"urls": [journey.url]})["cookies"]
    if not any(c["name"] == "_token" for c in cookies):
        log_in(browser, journey)


# -- 1. schedule ------------------------------------------------------------------------


def test_schedule_unpause_the_load_and_trigger_the_mirror(
    journey: Journey, browser: Browser
) -> None:
    log_in(browser, journey)
    browser.goto(journey.url + "/dags")
    for dag_id in (MIRROR, LOAD, AUDIT):
        browser.wait_for("a", text=dag_id)
    shot(browser, "ui-dags.png")

    browser.goto(f"{journey.url}/dags/{LOAD}")
    toggle = "[data-testid=toggle-pause]"
    browser.wait_for(toggle)
    assert browser.evaluate(f"document.querySelector('{toggle}').dataset.state") == "unchecked"
    for attempt in range(3):
        browser.click(toggle)
        try:
            browser.wait_for(f"{toggle}[data-state=checked]", timeout=40)
            break
        except BrowserError:
            # The page re-rendered under the click (a refetch replaced the switch), so it
            # never reached the DAG: a person clicks again once the switch shows no change.
            if attempt == 2 or not journey.stack.airflow.api("GET", f"/dags/{LOAD}")["is_paused"]:
                raise
    dag = wait_for(
        lambda: (
            (d := journey.stack.airflow.api("GET", f"/dags/{LOAD}"))["next_dagrun_run_after"]
            and not d["is_paused"]
            and d
        ),
        60,
        f"{LOAD} unpaused with a next run",
    )
    # The schedule and the next run, as the DAG's page shows them.
    browser.goto(f"{journey.url}/dags/{LOAD}")
    browser.wait_text("0 * * * *")
    next_run = datetime.fromisoformat(dag["next_dagrun_run_after"]).astimezone(UTC)
    browser.wait_text(f"{next_run:%Y-%m-%d %H:%M}")
    assert "Next Run" in browser.text()
    shot(browser, "ui-schedule.png")

    before = {r["dag_run_id"] for r in journey.stack.runs(MIRROR)}
    browser.goto(f"{journey.url}/dags/{MIRROR}")
    browser.click("button", text="Trigger")
    browser.wait_for("[role=dialog]", text="Single Run")
    browser.click("[role=dialog] button", text="Trigger")

    def triggered() -> dict[str, Any] | None:
        # (the mirror's own schedule, every 5 minutes, may add a run at the same moment)
        new = [
            r
            for r in journey.stack.runs(MIRROR)
            if r["dag_run_id"] not in before and r["run_type"] == "manual"
        ]
        assert len(new) <= 1, f"one click, {len(new)} manual runs: {new}"
        return new[0] if new and new[0]["state"] in ("success", "failed") else None

    run = wait_for(triggered, 300, "the mirror run the Trigger button made", sleep=2)
    assert run["state"] == "success", journey.stack.failure_details(MIRROR, run["dag_run_id"])
    browser.goto(f"{journey.url}/dags/{MIRROR}/runs/{run['dag_run_id']}")
    browser.wait_text(run["dag_run_id"])
    browser.wait_text("Success")
    shot(browser, "ui-mirror-run.png")


# -- 2. backfill from stored offsets ----------------------------------------------------


def pick_datetime(browser: Browser, index: int, hour: datetime) -> None:
    """Fill the dialog's index-th date-time field (From 0, To 1) through its popover."""
    popover_date = "input[placeholder='YYYY/MM/DD']"
    browser.wait_gone(popover_date)  # the other field's popover, still closing, took the typing
    browser.evaluate(
        f"document.querySelectorAll('[data-testid=datetime-input]')[{index}].click() || true"
    )
    browser.fill(popover_date, f"{hour:%Y/%m/%d}")
    browser.fill("input[placeholder='HH:mm']", f"{hour:%H:%M}")
    browser.click("[role=dialog] p", text="Date Range")  # closes the popover
    field = f"document.querySelectorAll('[data-testid=datetime-input]')[{index}]"
    wait_for(
        lambda: f"{hour:%H:%M}" in str(browser.evaluate(f"{field}.innerText || {field}.value")),
        30,
        f"the date-time field {index} to show {hour:%H:%M}",
        sleep=0.25,
    )


def test_backfill_past_hours_from_their_stored_offsets(journey: Journey, browser: Browser) -> None:
    ensure_logged_in(browser, journey)
    if journey.stack.airflow.api("GET", f"/dags/{LOAD}")["is_paused"]:  # journey 1 failed early
        journey.stack.airflow.api("PATCH", f"/dags/{LOAD}", {"is_paused": False})
    browser.goto("about:blank")  # Airflow's pages poll the API: idle while the loads run
    journey.wait_hours_settled()
    a, b = journey.hours
    for topic in LOADED:
        for hour in (a, b):
            checkpoint = journey.checkpoint(topic, hour)
            assert checkpoint is not None, (topic, hour)
            journey.sha_before[(topic, hour)] = checkpoint["rows_sha256"]
    ends = {h: str((journey.run_of(LOAD, h) or {}).get("end_date")) for h in (a, b)}
    backfills_before = {
        x["id"] for x in journey.stack.airflow.api("GET", f"/backfills?dag_id={LOAD}")["backfills"]
    }

    browser.goto(f"{journey.url}/dags/{LOAD}")
    browser.click("button", text="Trigger")
    browser.click("[role=dialog] label", text="Backfill")
    browser.wait_text("Reprocess Behavior")
    pick_datetime(browser, 0, journey.a)
    pick_datetime(browser, 1, journey.b)
    browser.click("[role=dialog] label", text="All Runs")
    browser.wait_for("[role=dialog] input[value=completed]:checked")
    browser.wait_text("2 runs will be triggered")  # the dialog's dry run of the range
    shot(browser, "ui-backfill-dialog.png")
    browser.click("[role=dialog] button", text="Run Backfill")

    created = wait_for(
        lambda: [
            x
            for x in journey.stack.airflow.api("GET", f"/backfills?dag_id={LOAD}")["backfills"]
            if x["id"] not in backfills_before
        ],
        60,
        "the backfill the dialog created",
    )
    assert created[0]["reprocess_behavior"] == "completed"
    browser.goto("about:blank")
    journey.wait_hours_settled(since=ends)
    browser.goto(f"{journey.url}/dags/{LOAD}/runs")
    browser.wait_text("backfill")
    shot(browser, "ui-backfill-runs.png")

    browser.goto(f"{journey.url}/logbroker/pipeline?until={b}&hours=2")
    browser.wait_for(f'td[data-topic="{TOPIC}"][data-hour="{a}"][data-state=closed]')
    browser.wait_for(f'td[data-topic="{TOPIC}"][data-hour="{b}"][data-failed=true]')
    shot(browser, "pipeline.png")
    for topic in LOADED:
        for hour in (a, b):
            browser.goto(f"{journey.url}/logbroker/pipeline/{topic}/{hour}")
            browser.wait_for("code", text=journey.sha_before[(topic, hour)])
            checkpoint = journey.checkpoint(topic, hour)
            assert checkpoint is not None
            assert checkpoint["rows_sha256"] == journey.sha_before[(topic, hour)]
    browser.goto(f"{journey.url}/logbroker/pipeline/{TOPIC}/{a}")
    browser.wait_for("#hour-state[data-state=closed]")
    shot(browser, "hour.png")


# -- 3. review data quality -------------------------------------------------------------


def test_review_the_audit_report_data_docs_and_the_load_log(
    journey: Journey, browser: Browser
) -> None:
    ensure_logged_in(browser, journey)
    b = journey.hours[1]
    # The Pipeline page inside Airflow's UI (an external view of the plugin).
    browser.goto(f"{journey.url}/plugin/logbroker_pipeline")
    browser.wait_for("iframe")
    browser.wait_text("Pipeline")
    shot(browser, "pipeline-in-airflow.png")

    browser.goto(f"{journey.url}/logbroker/pipeline?until={b}&hours=2")
    browser.click(f'td[data-topic="{TOPIC}"][data-hour="{b}"] a')
    browser.wait_for("#hour-state", text="failed")
    lost = browser.evaluate(
        "Array.from(document.querySelectorAll('tr[data-status=lost]'))"
        ".map(r => Number(r.children[6].innerText))"
    )
    # (at most the seeded loss: the audit's own tests hold it to the exact number)
    assert lost and 0 < sum(lost) <= LOST, lost
    browser.click("a", text="This hour's audit report")
    browser.wait_for("body[data-styled=yes][data-scripts=yes]")
    assert browser.url.endswith(f"/logbroker/reports/hours/{b}.html")
    browser.wait_for("#failed-windows .status-lost", text="lost")
    red = browser.evaluate(
        "getComputedStyle(document.querySelector('#failed-windows .status-lost')).backgroundColor"
    )
    assert red == "rgb(220, 53, 69)", red  # bootstrap's danger: red
    missing = browser.evaluate(
        "Array.from(document.querySelectorAll('#failed-windows tbody tr'))"
        ".filter(r => r.querySelector('.status-lost'))"
        ".map(r => Number(r.querySelector('strong').innerText))"
    )
    assert sum(missing) == sum(lost), (missing, lost)  # the report and the hour page agree
    shot(browser, "ui-audit-report.png", full_page=True)

    browser.click("a", text="all hours")
    browser.wait_for("a", text=b)
    browser.click("a", text="Great Expectations Data Docs")
    browser.wait_text("Validation Results", timeout=60)
    assert "/logbroker/reports/data_docs/" in browser.url
    shot(browser, "ui-data-docs.png")

    # Back from the report to the hour's load run, and to the topic's load task log.
    run = journey.run_of(LOAD, b)
    assert run is not None
    browser.goto(f"{journey.url}/logbroker/reports/hours/{b}.html")
    browser.click("#airflow-links #load-run")
    browser.wait_text(run["dag_run_id"])
    assert f"/dags/{LOAD}/runs/" in browser.url
    browser.goto(f"{journey.url}/logbroker/reports/hours/{b}.html")
    browser.click(f'#airflow-links a.load-log[data-topic="{TOPIC}"]')
    # the mapped load task's page, on its log (a virtualized view: some of its lines only)
    browser.wait_text("HourlyLoadOperator")
    browser.wait_text(" INFO - ")
    assert browser.url.endswith("/tasks/load/mapped/0"), browser.url
    shot(browser, "ui-load-log.png")

    browser.goto(f"{journey.url}/logbroker/cluster")
    browser.wait_text("live")
    assert re.search(r"0 at 127\.0\.0\.1:\d+, 1 at 127\.0\.0\.1:\d+", browser.text())


# -- without a login --------------------------------------------------------------------


def test_without_a_login_no_plugin_page_or_report_shows_content(
    journey: Journey, tmp_path: Path
) -> None:
    from pipeline_ui.app import create_app

    a, b = journey.hours
    paths = {
        "/cluster": "/logbroker/cluster",
        "/pipeline": "/logbroker/pipeline",
        "/pipeline/{topic}/{hour}": f"/logbroker/pipeline/{TOPIC}/{b}",
        "/reports/{path:path}": f"/logbroker/reports/hours/{b}.html",
        "/runs/{hour}": f"/logbroker/runs/{b}?topic={TOPIC}",
    }
    from hooks.pipeline import load_pipeline

    app = create_app(load_pipeline(journey.stack.workdir / "pipeline.json"), require_login=False)
    routes = {getattr(r, "path", "") for r in app.routes}
    assert routes == set(paths), "a page of the plugin without a check here"
    urls = [
        *paths.values(),
        "/logbroker/reports/index.html",
        "/logbroker/reports/data_docs/index.html",
        f"/logbroker/pipeline/_audit/{a}",
    ]
    no_redirects = urllib.request.build_opener(NoRedirect)
    for path in urls:
        for headers in ({}, {"Cookie": "_token=not-a-token"}):
            request = urllib.request.Request(journey.url + path, headers=headers)
            with pytest.raises(urllib.error.HTTPError) as refused:
                no_redirects.open(request, timeout=30)
            code = refused.value.code
            body = refused.value.read()
            # no credentials: 401 (or to the login); a forged token: refused too (Airflow: 403)
            allowed = (401,) if not headers else (401, 403)
            assert code in allowed or (
                code in (302, 303, 307) and "/auth/login" in refused.value.headers["Location"]
            ), (path, headers, code)
            assert b"rows_sha256" not in body and b"<table" not in body, path
    # The same page with a login answers (the refusals above are not a broken page).
    assert 'class="grid"' in journey.get("/logbroker/pipeline")

    with Browser(tmp_path) as anonymous:
        anonymous.goto(f"{journey.url}/logbroker/pipeline")
        assert "Not authenticated" in anonymous.text()
        assert anonymous.evaluate("document.querySelectorAll('td.cell').length") == 0
        anonymous.goto(f"{journey.url}/plugin/logbroker_pipeline")
        anonymous.wait_for("input[name=password]")
        assert "/auth/login" in anonymous.url


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
