"""bench/common.place: the latency workload's process placement binds every thread of a
process tree (a real child process with a second thread, and its own child), and gives
the cores back after."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_common", Path(__file__).resolve().parents[2] / "bench" / "common.py"
)
assert _spec is not None and _spec.loader is not None
bench_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_common)
place = bench_common.place

# A parent with a second thread and a child process, each printing its thread ids.
TREE = r"""
import os, subprocess, sys, threading, time
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
sys.stdin.readline()
child.kill()
"""


def _affinities(pid: int) -> dict[int, set[int]]:
    return {int(tid): os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
def test_place_binds_every_thread_of_the_tree_and_gives_the_cores_back() -> None:
    everything = os.sched_getaffinity(0)
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        child = int(proc.stdout.readline())
        assert len(_affinities(proc.pid)) >= 2  # the main thread and the waiting one

        place(proc.pid, {1})
        for pid in (proc.pid, child):
            assert all(a == {1} for a in _affinities(pid).values()), _affinities(pid)

        place(proc.pid, everything)
        for pid in (proc.pid, child):
            assert all(a == everything for a in _affinities(pid).values())
        proc.stdin.write("done\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_place_skips_a_process_that_is_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    place(proc.pid, {0})  # no error: the latency workload's server may have stopped
