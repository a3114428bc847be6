"""PySpark applications of the pipeline, and the Spark data source for the broker.

    logbroker_source/   the `logbroker` data source (batch and streaming), Python Data Source API
    hourly_load.py      the hourly, offset-checkpointed load into the warehouse (spark-submit)
    warehouse.py        the warehouse's layout, checkpoints and hour states (DESIGN.md §3.6)
    filesystem.py       Hadoop's FileSystem through Spark's JVM, and a local twin for readers
    ranges.py           reading offset ranges from brokers; rows_sha256
    session.py          a SparkSession with what Python workers need (PYTHONPATH, interpreter)
    audit.py            the audit (spark-submit): producer counts against the warehouse, per
                        window; audit_*.py, load_profile.py, hour_states.py, report_assets.py
                        are its parts (docs/audit.md)

Imports point down: spark_apps -> logbroker (the library) -> nothing of Spark.
"""
