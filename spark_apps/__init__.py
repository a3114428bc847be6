"""The pipeline's Spark side: the broker's data source, the hourly load, the audit.

    source/       the `logbroker` Spark data source (batch and streaming): options, discovery,
                  planning, reading offset ranges from brokers, rows_sha256, Avro decoding
    load/         the hourly load: plan, lock, read and write, deduplicate, commit, verify
    audit/        the audit: inputs, producer counts, reconciliation, results, quality, reports
    hadoop_fs.py  the warehouse through Hadoop's FileSystem, in Spark's JVM: what the jobs plug
                  into the warehouse package (`pipeline_warehouse`, which needs no Spark)
    summary_counts.py  the Spark queries that count a load summary's groups and names from
                  rows (the load's own summary, the audit's of a load without one)
    session.py    a SparkSession with what the Python workers need
    pyfiles.py    the archive of our packages that spark-submit ships to executors
    jobs/         the thin files spark-submit runs: hourly_load.py, audit.py

Imports point down (docs/design.md §2, tests/test_layers.py): source depends only on the
library (`logbroker`); load on the warehouse package and source; audit on the warehouse
package; jobs on load and audit. The warehouse's files and their model (hours, layout, topic
names, checkpoints, load summaries, hour states) are `pipeline_warehouse`
(plugins/pipeline_warehouse/), which the Airflow hooks and pages read without Spark.
"""
