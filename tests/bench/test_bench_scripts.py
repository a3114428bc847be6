"""Every benchmark script starts as its docstring and docs/performance.md say, `python
bench/NAME.py`, from any working directory: its imports resolve against the installed project
and the script's own directory, which Python puts first on the import path (nothing edits it:
tests/test_layers.py). `--help` runs every import at the top of a script, the test-suite
modules bench/suite.py loads by path included, and stops.

bench/replication.py (three brokers and replicated topics, docs/performance.md's Replication
section) also runs its quick mode here, from another directory: every workload writes its
records and the report; nothing is compared with any speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(
    path.name
    for path in BENCH.glob("*.py")
    if '__name__ == "__main__"' in (text := path.read_text()) and "argparse" in text
)


def test_the_scripts_are_found() -> None:
    assert {"run.py", "worker.py", "spark_load.py", "audit_bench.py", "replication.py"} <= set(
        SCRIPTS
    ), SCRIPTS


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


# -- bench/replication.py's quick mode (the 2014 post's replication table) ------------------

REPLICATION_METRICS = {
    "produce": {"throughput", "cpu_broker0", "cpu_broker1", "cpu_broker2", "cpu_brokers"},
    "consume": {"throughput", "cpu_broker0", "cpu_broker1", "cpu_broker2", "cpu_brokers"},
    "latency": {"p50", "p99", "p999"},
}
ONE_LEADER = {"follower1_vs_leader_cpu_per_byte", "follower2_vs_leader_cpu_per_byte"}


def run_replication(
    tmp_path: Path, *args: str
) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "replication.py"),
            "--quick",
            "--output-dir",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
            *args,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    records = json.loads((out / "summary.json").read_text())
    run = json.loads((out / "run.json").read_text())
    assert run["errors"] == [] and {r["run_id"] for r in records} == {run["run_id"]}
    for r in records:
        assert r["min"] <= r["median"] <= r["max"] and r["reps"] == 1, r
    return records, run, out


@pytest.mark.slow
def test_replication_quick_run_writes_every_workload(tmp_path: Path) -> None:
    records, run, out = run_replication(tmp_path)
    found: dict[str, set[str]] = {}
    for r in records:
        assert r["brokers"] == "current"
        found.setdefault(r["workload"], set()).add(r["metric"])
    kinds = {w["name"]: (w["kind"], w["layout"]) for w in run["workloads"]}
    assert set(found) == set(kinds) and len(kinds) == 15
    for name, (kind, layout) in kinds.items():
        # a one-leader layout's per-byte ratios, unless the quick run's leader CPU read 0 ticks
        extra = ONE_LEADER if layout == "one_leader" else set()
        assert found[name] - extra == REPLICATION_METRICS[kind], name
        assert found[name] & extra in (set(), extra), name
    summary = (out / "summary.md").read_text()
    assert run["run_id"] in summary and "## Goals (issue 30)" in summary
    assert "## CPU seconds per million messages" in summary
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # the plots need bench/requirements.txt
    for name in ("replication_throughput", "replication_cpu", "replication_latency"):
        assert (out / f"{name}.png").stat().st_size > 1000


@pytest.mark.slow
def test_replication_baseline_runs_the_same_workload_on_other_brokers(tmp_path: Path) -> None:
    records, run, out = run_replication(tmp_path, "--only", "rf1", "--baseline", "HEAD")
    assert {(r["workload"], r["brokers"]) for r in records} == {
        ("rf1", "current"),
        ("baseline:rf1", "baseline"),
    }
    assert run["baseline"]["ref"] == "HEAD"
    assert "## Before and after" in (out / "summary.md").read_text()
