"""Spark fixtures: ONE SparkSession for the whole test session (Spark is slow to start).

spark         (session) local[2], no UI, bound to 127.0.0.1, PYSPARK_PYTHON = this
              interpreter, whose installed `spark_apps` and `logbroker` the workers import
              (built by spark_apps.session.build_session); the `logbroker` data source is
              registered.
              Stopped at the end of the session. Every Spark test (load, audit) shares it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from logbroker.stack.pipeline_stack import SMALL_JOB_CONF


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from spark_apps.session import build_session

    session = build_session(
        "logbroker tests",
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            # the tests' jobs are small, as the demo's: C1 only and the serial GC (the JVM's
            # JIT threads otherwise take the CPU the other xdist worker needs)
            **SMALL_JOB_CONF,
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
