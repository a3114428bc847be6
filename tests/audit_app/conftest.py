"""Fixtures of the audit's tests (the SparkSession is the suite's one, tests/fixtures_spark.py).

chromium    chromium(url, *flags) -> stdout: Debian's headless Chromium, a fresh profile.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


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
