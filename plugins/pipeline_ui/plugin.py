"""Registers the logbroker pipeline's pages with Airflow, through the package's entry point.

Two entries in Airflow's navigation, "Pipeline" and "Cluster", shown inside the UI as
external views of the FastAPI app that the api-server mounts at /logbroker (app.py).
pyproject.toml names this class in the `airflow.plugins` entry points, so Airflow loads it
wherever the project is installed (a checkout's `pip install -e .`, a wheel), whatever its
plugins folder holds: Airflow's documented way for a plugin in an installed package. A copy
of this class in a plugins folder would register the plugin twice.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from .app import create_app


class LogbrokerPipelinePlugin(AirflowPlugin):
    name = "logbroker_pipeline"
    # Airflow types these as instance variables: a ClassVar would not match its declaration
    fastapi_apps: list[Any] = [  # noqa: RUF012
        {"app": create_app(), "url_prefix": "/logbroker", "name": "logbroker pages"}
    ]
    external_views: list[Any] = [  # noqa: RUF012
        {
            "name": "Pipeline",
            "href": "/logbroker/pipeline",
            "destination": "nav",
            "url_route": "logbroker_pipeline",
            "nav_top_level": True,
        },
        {
            "name": "Cluster",
            "href": "/logbroker/cluster",
            "destination": "nav",
            "category": "browse",
            "url_route": "logbroker_cluster",
        },
    ]
