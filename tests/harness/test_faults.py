"""The chaos plan's faults against processes that are already gone (seed 2 of `make chaos`
killed the mirror and expired its session at the same moment: the second fault found the
dying process and crashed the run on SIGCONT)."""

from __future__ import annotations

import random
import subprocess
from types import SimpleNamespace
from typing import Any, cast

from harness.faults import Faults


def test_a_session_fault_on_a_process_that_is_gone_is_skipped_not_fatal() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process
    lines: list[str] = []
    stack: Any = None  # not reached: the fault needs only the pid
    faults = Faults(stack, random.Random(1), log=lines.append)
    assert faults._expire(gone.pid, "consumer_session", "expire a gone process") is False
    assert not faults.injected and not faults.timeline and not lines


def test_the_scheduler_fault_after_the_stack_stopped_starts_no_scheduler() -> None:
    """CI: the chaos run failed, the stack stopped, then the scheduler fault's thread woke up
    and crashed on a process group that was gone (and would have started a scheduler that
    nobody stops)."""
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    lines: list[str] = []
    airflow = SimpleNamespace(processes={"scheduler": gone}, start=lines.append)
    faults = Faults(cast(Any, SimpleNamespace(airflow=airflow)), random.Random(1), log=lines.append)
    assert faults.kill_scheduler() is False
    airflow.processes.clear()  # what AirflowStack.stop() leaves
    assert faults.kill_scheduler() is False
    assert (
        not faults.injected
        and lines == ["  (the scheduler was not running: scheduler fault skipped)"] * 2
    )
