"""The Spark applications' entry points: one thin file per job, run by spark-submit.

    hourly_load.py   spark-submit spark_apps/jobs/hourly_load.py ...   (spark_apps.load.cli)
    audit.py         spark-submit spark_apps/jobs/audit.py ...         (spark_apps.audit.cli)

Each only calls its package's `main`; the packages are installed with the project (and
shipped to executors as an archive, `--py-files`), so no entry point touches `sys.path`.
"""
