"""The chaos plan's faults against processes that are already gone (seed 2 of `make chaos`
killed the mirror and expired its session at the same moment: the second fault found the
dying process and crashed the run on SIGCONT)."""

from __future__ import annotations

import random
import subprocess
from typing import Any

from logbroker.testing.faults import Faults


def test_a_session_fault_on_a_process_that_is_gone_is_skipped_not_fatal() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process
    lines: list[str] = []
    stack: Any = None  # not reached: the fault needs only the pid
    faults = Faults(stack, random.Random(1), log=lines.append)
    assert faults._expire(gone.pid, "consumer_session", "expire a gone process") is False
    assert not faults.injected and not faults.timeline and not lines
