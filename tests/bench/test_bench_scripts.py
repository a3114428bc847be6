"""Every benchmark script starts as its docstring and docs/performance.md say, `python
bench/NAME.py`, from any working directory: its imports resolve against the installed project
and the script's own directory, which Python puts first on the import path (nothing edits it:
tests/test_layers.py). `--help` runs every import at the top of a script, the test-suite
modules bench/suite.py loads by path included, and stops.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(
    path.name
    for path in BENCH.glob("*.py")
    if '__name__ == "__main__"' in (text := path.read_text()) and "argparse" in text
)


def test_the_scripts_are_found() -> None:
    assert {"run.py", "worker.py", "spark_load.py", "audit_bench.py"} <= set(SCRIPTS), SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_runs_from_another_directory(name: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / name), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
