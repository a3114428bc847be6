"""Spark's JVM classes parsed once, not at every spark-submit: a HotSpot class-data archive.

A Spark application's JVM loads, parses and verifies some 10,000 classes from Spark's jars
before the application's first query runs, and every hourly load and audit is a new JVM
(docs/performance.md, "A Spark application's fixed cost"). JDK 13+ can dump the classes an
application loaded into an archive (AppCDS, `-XX:ArchiveClassesAtExit`) that later JVMs map
instead of parsing the jars again (`-XX:SharedArchiveFile`).

    <sys.prefix>/share/logbroker/spark-classes.jsa    one archive per environment: made by
        `python -m spark_apps.class_archive` (`make setup` runs it after installing Spark),
        from a short local application that touches what the loads and audits touch (SQL,
        Parquet, a Python data source, Arrow)

The JVM checks the archive against its own build and the class path when it starts, and maps
nothing if either changed (another JDK, Spark reinstalled, extra jars first on the path): the
application then starts as it would without it. `-Xshare:auto` makes that the rule and the
`cds` log tags stay quiet, so a stale archive only costs the time it was meant to save.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
ARCHIVE = Path(sys.prefix) / "share" / "logbroker" / "spark-classes.jsa"
_QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"

# What the archive is made from: a local session through the same spark-submit launcher as
# the jobs (same class path), running the kinds of work the jobs run.
_WORKLOAD = """
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader

class Numbers(DataSource):
    @classmethod
    def name(cls):
        return "archive_numbers"
    def schema(self):
        return "n long"
    def reader(self, schema):
        return NumbersReader()

class NumbersReader(DataSourceReader):
    def read(self, partition):
        for n in range(100):
            yield (n,)

spark = SparkSession.builder.getOrCreate()
spark.dataSource.register(Numbers)
out = __import__("sys").argv[1]
frame = spark.read.format("archive_numbers").load().selectExpr("n", "n % 7 AS k")
frame.groupBy("k").count().write.mode("overwrite").parquet(out + "/counts")
spark.read.parquet(out + "/counts").toPandas()
frame.mapInArrow(lambda batches: batches, frame.schema).count()
spark.stop()
"""


def java_options(archive: Path = ARCHIVE) -> str:
    """The driver JVM's options that map the archive, or '' when there is none."""
    return f"-XX:SharedArchiveFile={archive} {_QUIET}" if archive.is_file() else ""


def with_archive(options: str | None, archive: Path = ARCHIVE) -> str | None:
    """`options` (a spark.*.extraJavaOptions value, or None) with the archive's options in
    front: a deployment's own options are kept, and win where they set the same flag."""
    ours = java_options(archive)
    if not ours or (options and "SharedArchiveFile" in options):
        return options
    return f"{ours} {options}" if options else ours


def build(archive: Path = ARCHIVE, timeout: float = 900) -> Path:
    """Run the workload with `-XX:ArchiveClassesAtExit` and put the archive in place (the
    file appears whole or not at all); an error naming the step when Spark could not run."""
    from pyspark.find_spark_home import _find_spark_home

    archive.parent.mkdir(parents=True, exist_ok=True)
    # (beside the archive: the rename stays on one filesystem)
    with tempfile.TemporaryDirectory(prefix=".building-", dir=archive.parent) as work:
        script = Path(work) / "workload.py"
        script.write_text(_WORKLOAD)
        partial = Path(work) / "spark-classes.jsa"
        command = [
            str(Path(_find_spark_home()) / "bin" / "spark-submit"),
            "--master",
            "local[2]",
            "--driver-java-options",
            f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.driver.bindAddress=127.0.0.1",
            str(script),
            str(Path(work) / "out"),
        ]
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0 or not partial.is_file():
            raise RuntimeError(
                f"the Spark class archive: spark-submit exited with {done.returncode}"
                f"{'' if partial.is_file() else ' and wrote no archive'}:\n{done.stderr[-3000:]}"
            )
        os.replace(partial, archive)
    return archive


def main() -> int:
    archive = build()
    print(f"Spark class archive: {archive} ({archive.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
