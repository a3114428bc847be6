"""Fixtures of the audit's tests: the shared SparkSession, warehouses of synthetic events.

spark       (session) the suite's one SparkSession: the shared builder of the Spark tests
            (spark_apps.session, issue 11) when it is there, else the same settings here;
            getOrCreate() either way, so the suite never holds two sessions.
chromium    chromium(url, *flags) -> stdout: Debian's headless Chromium, a fresh profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        from spark_apps.session import build_session  # type: ignore[import-not-found]
    except ImportError:
        build_session = None
    if build_session is not None:
        session = build_session("logbroker tests", master="local[2]", conf={"spark.sql.shuffle.partitions": "4"})
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        session = (
            SparkSession.builder.master("local[2]")
            .appName("logbroker tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "4")
            .getOrCreate()
        )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def chromium(tmp_path: Path) -> Callable[..., str]:
    def run(url: str, *flags: str) -> str:
        assert Path(CHROMIUM).exists(), "chromium is installed by scripts/install-system-deps.sh"
        done = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,1600",
             "--virtual-time-budget=15000", *flags, url],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    return run
