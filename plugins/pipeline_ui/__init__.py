"""The pipeline's pages in the Airflow UI (an Airflow 3 plugin: a FastAPI app and nav links).

    plugin.py         the Airflow plugin: the app and the nav entries
    app.py            the FastAPI app Airflow's api-server mounts at /logbroker; every route
                      requires an Airflow login (the `_token` cookie the UI already holds)
    cluster_view.py   the "Cluster" page's facts: brokers, topics, partitions, group lag
    templates/        Jinja2 pages; read-only, no JavaScript needed to read them

The "Pipeline" page's facts (topics x hours and their states, one hour) come from
plugins/pipeline_warehouse/overview.py, which the audit DAG's announcements share.

plugin.py registers the app and the nav entries with Airflow (the package's entry point).
"""
