"""A child process whose output goes, line by line as it comes, into an Airflow task log.

Used by the spark-submit hook and the mirror operator. The child runs in its own process
group so that stopping a task (`on_kill`) stops it and everything it started (spark-submit's
JVM, for one); SIGTERM first, because the mirror and Spark both drain and clean up on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Protocol


class LineLog(Protocol):
    """Where the lines go: a logging.Logger, or a task's `self.log` (Airflow's structlog)."""

    def info(self, event: str, /, *args: object) -> object: ...


class StreamedProcess:
    def __init__(self, cmd: Sequence[str], env: Mapping[str, str], log: LineLog) -> None:
        self.cmd = list(cmd)
        self.env = dict(env)
        self.log = log
        self.tail: deque[str] = deque(maxlen=20)  # what a failure message quotes
        self._process: subprocess.Popen[str] | None = None

    def run(self) -> int:
        """Start the child, stream its output into the log, return its exit code."""
        self._process = subprocess.Popen(
            self.cmd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        assert self._process.stdout is not None
        for line in self._process.stdout:
            line = line.rstrip("\n")
            self.tail.append(line)
            self.log.info("%s", line)
        return self._process.wait()

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM the child's process group, SIGKILL it after `grace` seconds."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        self.log.info("stopping %s (process group %d)", self.cmd[0], process.pid)
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def last_lines(self) -> str:
        return "\n".join(self.tail)
