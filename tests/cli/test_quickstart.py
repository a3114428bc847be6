"""`logbroker quickstart` refusing what it cannot do, in one line, before anything runs.

Starting and stopping the servers for real is README's walk-through
(test_readme_walkthrough.py); these cost a second each.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def quickstart(action: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logbroker.cli", "quickstart", action],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_start_outside_the_checkout_says_where_to_run_it(tmp_path: Path) -> None:
    ran = quickstart("start", tmp_path)
    assert ran.returncode == 1
    assert ran.stderr == (
        "logbroker quickstart: run it from the repository's root: no "
        f"include/config/server.properties in {tmp_path}\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_taken_port_stops_start_before_anything_runs(
    tmp_path: Path, quickstart_ports: None
) -> None:
    shutil.copytree(REPO / "include" / "config", tmp_path / "include" / "config")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 9095))  # the analysis broker's
        holder.listen()
        ran = quickstart("start", tmp_path)
    assert ran.returncode == 1
    assert ran.stderr.startswith(
        "logbroker quickstart: port 9095 (broker analysis-0) is taken on 127.0.0.1"
    )
    assert len(ran.stderr.splitlines()) == 1
    assert not (tmp_path / "var").exists()  # no ZooKeeper, no broker, nothing recorded


def test_stop_with_nothing_started_says_so(tmp_path: Path) -> None:
    ran = quickstart("stop", tmp_path)
    assert (ran.returncode, ran.stdout) == (
        0,
        "nothing to stop (no var/quickstart/quickstart.json)\n",
    )
