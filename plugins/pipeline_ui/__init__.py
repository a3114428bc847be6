"""The pipeline's pages in the Airflow UI (an Airflow 3 plugin: a FastAPI app and nav links).

    app.py            the FastAPI app Airflow's api-server mounts at /logbroker; every route
                      requires an Airflow login (the `_token` cookie the UI already holds)
    cluster_view.py   the "Cluster" page's facts: brokers, topics, partitions, group lag
    templates/        Jinja2 pages; read-only, no JavaScript needed to read them

The "Pipeline" page's facts (topics x hours and their states, one hour) come from
plugins/pipeline_warehouse/hour_view.py, which the audit DAG's announcements share.

plugins/pipeline_ui_plugin.py registers the app and the nav entries with Airflow.
"""
