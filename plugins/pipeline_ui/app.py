"""The FastAPI app behind the Pipeline and Cluster pages, mounted by Airflow at /logbroker.

Every route requires what Airflow's own UI requires to see the site (`AccessView.WEBSITE`):
the api-server resolves the user from the `_token` cookie the Airflow UI set at login, so
the pages open inside the UI (as external views) without a second login, and are refused
to anyone who is not logged in. Read-only: nothing here writes to a cluster or warehouse.

The audit's hour reports are served with a bar on top linking back into Airflow: the hour's
run of `logbroker_hourly_load` and each topic's load task log, through `/runs/<hour>`, which
redirects to the Airflow UI's page of the hour's latest load run (found in Airflow's
database: the run whose data interval starts at the hour).
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request, params
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from hooks.pipeline import Pipeline, load_pipeline
from logbroker.coordination.replication_state import REPLICATED
from pipeline_warehouse.filesystem import FsspecFS, join
from pipeline_warehouse.overview import WarehouseView
from pipeline_warehouse.time_format import parse_hour, recent_hours

from .cluster_view import read_clusters

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
BASE = "/logbroker"  # where Airflow mounts the app (plugin.py)
SAFE_PATH = re.compile(r"^(?!.*\.\.)[\w./@-]+$")  # "@": the vendored assets (name@version)
LOAD_DAG = "logbroker_hourly_load"
HOUR_REPORT = re.compile(r"^hours/(\d{4}-\d\d-\d\dT\d\d)\.html$")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _require_login() -> list[params.Depends]:
    """Airflow's check for 'may see the website', as a route dependency."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return [Depends(requires_access_view(AccessView.WEBSITE))]


def create_app(
    pipeline: Pipeline | None = None,
    *,
    require_login: bool = True,
    now: Callable[[], datetime] = _utcnow,
) -> FastAPI:
    settings = pipeline or load_pipeline()
    grace = timedelta(hours=settings.grace_hours)
    files = FsspecFS()
    app = FastAPI(
        title="logbroker pipeline",
        dependencies=_require_login() if require_login else [],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.get("/cluster", response_class=HTMLResponse)
    def cluster(request: Request) -> HTMLResponse:
        return TEMPLATES.TemplateResponse(
            request, "cluster.html", {"clusters": read_clusters(settings)}
        )

    @app.get("/pipeline", response_class=HTMLResponse)
    def pipeline_page(request: Request, hours: int = 12, until: str | None = None) -> HTMLResponse:
        """`hours` hours, oldest first, ending with the last whole hour (or with `until`)."""
        at = now()
        end = at
        if until:
            try:
                end = parse_hour(until) + timedelta(hours=1)
            except ValueError:
                raise HTTPException(404, f"{until!r} is not an hour (YYYY-MM-DDTHH)") from None
        shown = list(reversed(recent_hours(end, max(1, min(hours, 24 * 14)))))
        view = WarehouseView(settings.warehouse_reader, grace, files)
        context = {
            "grid": view.grid(settings.loaded_topics, shown, at),
            "hours": shown,
            "now": at,
            "warehouse": settings.warehouse,
            "grace_hours": settings.grace_hours,
            "base": BASE,
        }
        return TEMPLATES.TemplateResponse(request, "pipeline.html", context)

    @app.get("/pipeline/{topic}/{hour}", response_class=HTMLResponse)
    def hour(request: Request, topic: str, hour: str) -> HTMLResponse:
        try:
            parse_hour(hour)
        except ValueError:
            raise HTTPException(404, f"{hour!r} is not an hour (YYYY-MM-DDTHH)") from None
        if topic not in settings.loaded_topics:
            raise HTTPException(404, f"{topic!r} is not a topic of this pipeline")
        cell = WarehouseView(settings.warehouse_reader, grace, files).cell(topic, hour, now())
        context = {
            "cell": cell,
            "warehouse": settings.warehouse,
            "base": BASE,
            "replicated": REPLICATED,  # a replicated topic's partitions' broker id
        }
        return TEMPLATES.TemplateResponse(request, "hour.html", context)

    @app.get("/reports/{path:path}")
    def reports(path: str) -> Response:
        """The audit's Data Docs, from wherever the reports live (any fsspec filesystem)."""
        if not SAFE_PATH.match(path):
            raise HTTPException(404, "no such report")
        try:
            body = files.read_bytes(join(settings.reports_reader, path))
        except (FileNotFoundError, IsADirectoryError, OSError):
            raise HTTPException(404, f"no report {path}") from None
        media = mimetypes.guess_type(path)[0] or "application/octet-stream"
        report_of = HOUR_REPORT.match(path)
        if report_of is not None:
            body = _with_airflow_links(body, report_of.group(1), settings.loaded_topics)
        return Response(body, media_type=media)

    @app.get("/runs/{hour}")
    def load_run(hour: str, topic: str | None = None) -> RedirectResponse:
        """To the Airflow UI's page of the hour's latest `logbroker_hourly_load` run; with
        `topic`, to that topic's load task (its log)."""
        try:
            start = parse_hour(hour)
        except ValueError:
            raise HTTPException(404, f"{hour!r} is not an hour (YYYY-MM-DDTHH)") from None
        if topic is not None and topic not in settings.loaded_topics:
            raise HTTPException(404, f"{topic!r} is not a topic of this pipeline")
        run_id = _latest_run(LOAD_DAG, start)
        if run_id is None:
            raise HTTPException(404, f"no run of {LOAD_DAG} for the hour {hour}")
        target = f"/dags/{LOAD_DAG}/runs/{quote(run_id, safe='')}"
        if topic is not None:
            # the load is mapped over the pipeline's batches of topics, in their order (the
            # DAG, topics_per_load): the topic's task is its batch's
            batch = next(i for i, b in enumerate(settings.load_batches) if topic in b)
            target += f"/tasks/load/mapped/{batch}"
        return RedirectResponse(target, status_code=302)

    return app


def _latest_run(dag_id: str, start: datetime) -> str | None:
    """The run id of the latest run of `dag_id` whose data interval starts at `start`."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        found = session.scalars(
            select(DagRun.run_id)
            .where(DagRun.dag_id == dag_id, DagRun.data_interval_start == start)
            .order_by(DagRun.id.desc())
            .limit(1)
        ).first()
    return None if found is None else str(found)


def _with_airflow_links(page: bytes, hour: str, topics: tuple[str, ...]) -> bytes:
    """An hour report with a bar on top: the Pipeline page's hour, the hour's load run and
    each topic's load task log in Airflow (the report's own links stay relative to it)."""
    links = [f'<a id="load-run" href="{BASE}/runs/{hour}">the load run of {hour}</a>'] + [
        f'<a class="load-log" data-topic="{t}" href="{BASE}/runs/{hour}?topic={t}">{t} load log</a>'
        for t in topics
    ]
    bar = (
        '<nav id="airflow-links" class="alert alert-secondary small-links">In Airflow: '
        f'<a href="{BASE}/pipeline">Pipeline</a> ' + " ".join(links) + "</nav>"
    ).encode()
    marker = b'<div class="container-fluid">'
    if marker not in page:
        return page
    return page.replace(marker, marker + b"\n" + bar, 1)
