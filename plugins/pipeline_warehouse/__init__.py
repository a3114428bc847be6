"""The warehouse: its files and what they mean, for everyone who reads or writes them, without
Spark (docs/design.md §3.6, docs/warehouse.md).

    layout.py        where everything lives under the warehouse's URI: the one place that
                     names its paths
    filesystem.py    the one interface the rest goes through (WarehouseFS), and fsspec's
                     implementation for Python readers; the Spark jobs plug in Hadoop's
                     (spark_apps.hadoop_fs)
    topics.py        which topic names may become paths
    time_format.py   hours, windows, durations and instants as the warehouse writes them
    checkpoint.py    the one model of a committed load (Checkpoint: its commit record) and
                     the one reader of the committed hours (Warehouse)
    load_index.py    which event hours each load holds (the audit's index of it), and a
                     topic's loads with their indexes
    load_summary.py  what a committed load holds, in a small file beside its rows
    hour_states.py   the one model of an hour's state: open, loaded, audited, closed
    overview.py      each topic's hours at a glance (state, checkpoint, audit windows), as the
                     Pipeline page and the audit DAG's completeness assets show them

Used by the hourly load and the audit (spark_apps), the Airflow hooks and the Pipeline page.
It imports the library (`logbroker`) and nothing of Spark or Airflow (tests/test_layers.py).
"""
