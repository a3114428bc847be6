"""mypy --strict passes over what pyproject.toml's [tool.mypy] names (the library and the
pipeline), run as `make typecheck` runs it: a type error there fails the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # from scratch it checks every file; .mypy_cache makes later runs quick
def test_mypy_strict_passes() -> None:
    env = {**os.environ, "MYPYPATH": "plugins"}  # the checked-out plugins/, as the Makefile
    done = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"mypy (make typecheck) failed:\n{done.stdout}{done.stderr}"
