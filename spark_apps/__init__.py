"""The pipeline's Spark side: the broker's data source, the hourly load, the audit.

    warehouse/   the warehouse's files, read and written without Spark: hours, the layout,
                 topic names, checkpoints, load summaries, hour states, the filesystem layer
                 (fsspec for Python readers; Hadoop's FileSystem through Spark for the jobs)
    source/      the `logbroker` Spark data source (batch and streaming): options, discovery,
                 planning, reading offset ranges from brokers, rows_sha256, Avro decoding
    load/        the hourly load: plan, lock, read and write, deduplicate, commit, verify
    audit/       the audit: inputs, producer counts, reconciliation, results, quality, reports
    session.py   a SparkSession with what the Python workers need
    pyfiles.py   the archive of our packages that spark-submit ships to executors
    jobs/        the thin files spark-submit runs: hourly_load.py, audit.py

Imports point down (docs/design.md §2, tests/test_layers.py): warehouse and source depend only
on the library (`logbroker`); load on warehouse and source; audit on warehouse; jobs on load and
audit. The Airflow hooks and pages read the warehouse through `spark_apps.warehouse` only.
"""
