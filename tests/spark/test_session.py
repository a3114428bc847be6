"""spark_apps.session.build_session run by spark-submit: spark-submit's --master and --conf
are the session's; the project's defaults fill in only what spark-submit left unset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_apps.class_archive import with_archive

from .helpers import SMALL_JOB_JAVA

APP = """
import json, sys
from spark_apps.session import build_session

spark = build_session("session-check", master="local[2]")
json.dump(
    {
        "master": spark.sparkContext.master,
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "time_zone": spark.conf.get("spark.sql.session.timeZone"),
    },
    open(sys.argv[1], "w"),
)
spark.stop()
"""


@pytest.mark.slow
def test_spark_submit_settings_win_over_the_defaults(tmp_path: Path) -> None:
    app, out = tmp_path / "app.py", tmp_path / "seen.json"
    app.write_text(APP)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),  # pyspark's launcher
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [str(Path(venv_bin) / "spark-submit"), "--master", "local[1]",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=3",
         # as the tests' other drivers: C1 only, Spark's classes from the class archive
         "--conf", f"spark.driver.extraJavaOptions={with_archive(SMALL_JOB_JAVA)}",
         str(app), str(out)],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(out.read_text())
    # Before the session read spark-submit's JVM, both were the defaults' (local[2], 8): a
    # load submitted to a standalone master ran in local mode in its driver.
    assert seen["master"] == "local[1]"
    assert seen["shuffle_partitions"] == "3"
    assert seen["time_zone"] == "UTC"  # a default spark-submit did not set
