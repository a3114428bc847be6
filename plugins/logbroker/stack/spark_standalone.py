"""A Spark standalone cluster on this machine, for `make up`: a master and its workers.

    cluster = SparkStandalone(workdir / "spark", master_port=7077, ui_port=8180, workers=2)
    cluster.start()         the master, then the workers; returns once every worker is ALIVE
    cluster.master_url      spark://127.0.0.1:7077, what the `spark` connection's host is
    cluster.status()        the master's JSON (http://127.0.0.1:<ui_port>/json/)
    cluster.stop()          by PID: the workers (and their executors), then the master

They run the installed pyspark's own classes through its launcher,
`<pyspark>/bin/spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`, each
in a process group of its own (the launcher execs the JVM: the PID is the JVM's). The web UIs
are on ui_port (the master) and the next ports (worker i on ui_port + i), away from Airflow's
8080 and from Spark's own 8080/8081 defaults. Everything binds 127.0.0.1: `--host` for the
RPC ports, SPARK_LOCAL_IP for the web UIs (Spark binds them to 0.0.0.0 otherwise), which the
executors a worker starts inherit. The master's REST submission server (6066) is off: it
serves only cluster deploy mode, which Spark refuses for Python applications on a standalone
master.

Layout under the directory (logs appended to across restarts):

    master.log              the master's output
    worker-<i>.log          worker i's output
    worker-<i>/             worker i's work dir: app-<id>/<executor>/stdout, stderr
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .airflow_stack import process_running

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(RuntimeError):
    pass


def spark_home() -> Path:
    """The installed pyspark's directory: its bin/ and jars/ are a Spark distribution's."""
    spec = importlib.util.find_spec("pyspark")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SparkClusterError("pyspark is not installed in this Python: run `make setup`")
    return Path(next(iter(spec.submodule_search_locations)))


class SparkStandalone:
    def __init__(
        self,
        directory: Path,
        *,
        master_port: int = 7077,
        ui_port: int = 8180,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        daemon_memory: str = "256m",
        timeout: float = 90.0,
    ) -> None:
        self.directory = Path(directory).absolute()
        self.master_port = master_port
        self.ui_port = ui_port
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.timeout = timeout
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def ports(self) -> dict[int, str]:
        """Every fixed port the cluster binds, and what binds it."""
        ports = {self.master_port: "the Spark master", self.ui_port: "the Spark master's UI"}
        for i in range(1, self.workers + 1):
            ports[self.ui_port + i] = f"Spark worker {i}'s UI"
        return ports

    def log_path(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def env(self) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        return {
            **os.environ,
            "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", os.defpath)]),
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "PYSPARK_PYTHON": sys.executable,
        }

    def commands(self) -> dict[str, list[str]]:
        spark_class = str(spark_home() / "bin" / "spark-class")
        commands = {
            "master": [spark_class, MASTER_CLASS, "--host", "127.0.0.1",
                       "--port", str(self.master_port), "--webui-port", str(self.ui_port)],
        }  # fmt: skip
        for i in range(1, self.workers + 1):
            commands[f"worker-{i}"] = [
                spark_class, WORKER_CLASS, "--host", "127.0.0.1",
                "--webui-port", str(self.ui_port + i), "--cores", str(self.worker_cores),
                "--memory", self.worker_memory, "--work-dir", str(self.directory / f"worker-{i}"),
                self.master_url,
            ]  # fmt: skip
        return commands

    def start(self) -> SparkStandalone:
        """launch() then wait_alive(): a caller with more to start does its work between
        the two, while the JVMs come up."""
        self.launch()
        self.wait_alive()
        return self

    def launch(self) -> SparkStandalone:
        self.directory.mkdir(parents=True, exist_ok=True)
        env = self.env()
        try:
            for name, argv in self.commands().items():
                with open(self.log_path(name), "ab") as out:
                    self.processes[name] = subprocess.Popen(
                        argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, start_new_session=True,
                    )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def wait_alive(self) -> None:
        try:
            self._wait_alive()
        except BaseException:
            self.stop()
            raise

    def _wait_alive(self) -> None:
        deadline = time.monotonic() + self.timeout
        alive = 0
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise SparkClusterError(
                        f"Spark {name} exited with {process.returncode} at start; see "
                        f"{self.log_path(name)}"
                    )
            with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
                alive = int(self.status().get("aliveworkers", 0))
                if alive >= self.workers:
                    return
            time.sleep(0.5)
        raise SparkClusterError(
            f"the Spark master at {self.ui_url} had {alive} of {self.workers} workers alive "
            f"after {self.timeout:g} s; see {self.directory}/*.log"
        )

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as response:
            return dict(json.loads(response.read()))

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    def stop(self, grace: float = 20.0) -> None:
        """The workers first (they stop their executors), then the master."""
        workers = [p for n, p in self.processes.items() if n != "master"]
        master = [p for n, p in self.processes.items() if n == "master"]
        for group in (workers, master):
            stop_groups([p.pid for p in group], grace)
            for process in group:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
        self.processes.clear()


def stop_groups(pids: list[int], grace: float = 20.0) -> None:
    """SIGTERM each process group, SIGKILL what still runs after `grace` seconds."""
    running = [pid for pid in pids if process_running(pid)]
    for pid in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(process_running(pid) for pid in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in running:
        if process_running(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
