"""Registers the logbroker pipeline's pages with Airflow (plugins_folder is plugins/).

Two entries in Airflow's navigation, "Pipeline" and "Cluster", shown inside the UI as
external views of the FastAPI app that the api-server mounts at /logbroker (pipeline_ui/).
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin

from pipeline_ui.app import create_app


class LogbrokerPipelinePlugin(AirflowPlugin):
    name = "logbroker_pipeline"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": create_app(), "url_prefix": "/logbroker", "name": "logbroker pages"}
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [
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
