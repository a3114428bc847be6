"""The FastAPI app behind the Pipeline and Cluster pages, mounted by Airflow at /logbroker.

Every route requires what Airflow's own UI requires to see the site (`AccessView.WEBSITE`):
the api-server resolves the user from the `_token` cookie the Airflow UI set at login, so
the pages open inside the UI (as external views) without a second login, and are refused
to anyone who is not logged in. Read-only: nothing here writes to a cluster or warehouse.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException, Request, params
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from hooks.pipeline import Pipeline, load_pipeline
from spark_apps.warehouse.filesystem import FsspecFS, join
from spark_apps.warehouse.hour_view import WarehouseView
from spark_apps.warehouse.hours import parse_hour, recent_hours

from .cluster_view import read_clusters

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
BASE = "/logbroker"  # where Airflow mounts the app (pipeline_ui_plugin.py)
SAFE_PATH = re.compile(r"^(?!.*\.\.)[\w./-]+$")


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
        context = {"cell": cell, "warehouse": settings.warehouse, "base": BASE}
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
        return Response(body, media_type=media)

    return app
