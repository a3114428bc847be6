"""Spark's class archive (spark_apps.class_archive): the options that map it, and a session's
JVM that maps it. `make setup` makes the archive; without it every Spark application here
would start as before, only slower, so its absence is reported as a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_apps.class_archive import ARCHIVE, java_options, with_archive


def test_the_options_map_an_archive_that_exists_and_keep_the_deployments(tmp_path: Path) -> None:
    missing = tmp_path / "none.jsa"
    assert java_options(missing) == ""
    assert with_archive(None, missing) is None
    assert with_archive("-Xss4m", missing) == "-Xss4m"

    archive = tmp_path / "spark-classes.jsa"
    archive.write_bytes(b"\0")
    ours = java_options(archive)
    assert ours.startswith(f"-XX:SharedArchiveFile={archive} ")
    assert "-Xshare:auto" in ours  # a stale archive is ignored, never fatal
    assert with_archive(None, archive) == ours
    # The deployment's options come last: where they set the same flag, theirs win.
    assert with_archive("-Xss4m -Xlog:cds=info", archive) == f"{ours} -Xss4m -Xlog:cds=info"
    # A deployment that names its own archive keeps it alone.
    own = "-XX:SharedArchiveFile=/opt/theirs.jsa"
    assert with_archive(own, archive) == own


def test_a_session_started_here_maps_the_archive(spark: Any) -> None:
    assert ARCHIVE.is_file(), f"no {ARCHIVE}: `make setup` makes it"
    jvm = spark.sparkContext._jvm
    pid = jvm.java.lang.ProcessHandle.current().pid()
    assert str(ARCHIVE) in Path(f"/proc/{pid}/maps").read_text()
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    # after the JVM flags Spark itself adds, before the session's own (the tests' C1 only)
    assert f"{java_options()} -XX:TieredStopAtLevel=1" in options
