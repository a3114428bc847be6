"""A SparkSession with what this project's Python workers need (docs/design.md, "Running it").

- Python workers run `PYSPARK_PYTHON` (else `python3` from PATH, which may lack pyarrow and
  our packages): it defaults to this interpreter.
- Workers import `spark_apps` and `logbroker` (the data source is pickled by reference): both
  are installed with the project, and spark-submit ships them as an archive (`--py-files`,
  spark_apps.pyfiles) to executors that do not have them.
- Bound to 127.0.0.1, no UI, UTC session time zone: unless the caller (spark-submit --conf,
  or `conf`) says otherwise.
- A JVM this function starts maps Spark's class archive (spark_apps.class_archive), when
  `make setup` made one: the driver's start is ~40 % shorter. spark-submit's JVM is started
  before this code runs: the hooks pass the same options on its command line.
The `logbroker` data source is registered on the session it returns.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from spark_apps.class_archive import DRIVER_JAVA_OPTIONS, with_archive

DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",  # hour loads are small; AQE coalesces further
    # Parquet's standard timestamp (INT64 micros, UTC), not Spark's default INT96, which
    # Parquet deprecated: what pyarrow and other readers expect, and 6-14 % cheaper to write
    # (2,000,000 rows of the load's columns, four alternations).
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def prepare_environment() -> None:
    """Set the variables Spark's JVM and Python workers inherit (idempotent)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def build_session(
    app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None
) -> Any:
    """getOrCreate() a session (spark-submit's, or a new one on `master`), source registered."""
    prepare_environment()
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    from spark_apps.source import register

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Run by spark-submit: its --master and --conf are system properties of its JVM, which
        # a SparkConf reads only once connected to it; unconnected, a SparkConf is an empty
        # dict, and `master` and DEFAULTS would override spark-submit's (a spark:// master
        # became local[2]).
        SparkContext._ensure_initialized()
    given = SparkConf()  # spark-submit's --conf and --master arrive here
    builder = SparkSession.builder.appName(app_name)
    if master and not given.contains("spark.master"):
        builder = builder.master(master)
    settings = dict(DEFAULTS)
    settings["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"]
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # the JVM is started here: map the archive
        java_options = with_archive((conf or {}).get(DRIVER_JAVA_OPTIONS))
        if java_options:
            settings[DRIVER_JAVA_OPTIONS] = java_options
    for key, value in settings.items():
        if not given.contains(key):
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        if key == DRIVER_JAVA_OPTIONS and key in settings:
            continue  # already in settings, after the archive's options
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
