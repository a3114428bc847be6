"""The FastAPI app behind the Pipeline and Cluster pages, mounted by Airflow at /logbroker.

Every route requires what Airflow's own UI requires to see the site (`AccessView.WEBSITE`):
the api-server resolves the user from the `_token` cookie the Airflow UI set at login, so
the pages open inside the UI (as external views) without a second login, and are refused
to anyone who is not logged in. Read-only: nothing here writes to a cluster or warehouse.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from hooks.pipeline import Pipeline, load_pipeline

from .cluster_view import read_clusters

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))


def _require_login() -> list[object]:
    """Airflow's check for 'may see the website', as a route dependency."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return [Depends(requires_access_view(AccessView.WEBSITE))]


def create_app(pipeline: Pipeline | None = None, *, require_login: bool = True) -> FastAPI:
    settings = pipeline or load_pipeline()
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

    return app
