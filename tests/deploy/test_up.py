"""`make up` (scripts/up.py) as a user runs it: Airflow on its PostgreSQL, a Spark standalone
master with two workers, nothing listening beyond loopback; `down` leaves no process behind
and `up` again resumes on the same data.

The UI's port is set the one way a user sets it (UI_PORT), to a free port rather than 8080,
and the stack runs in a temporary directory, so a `make up` of the user's own is untouched.
That directory is one others may enter (not pytest's 0700 tmp_path): under root, PostgreSQL
runs as the `postgres` user.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from logbroker.testing.airflow_stack import AirflowStack, process_running
from logbroker.testing.pipeline_stack import wait_for
from logbroker.testing.postgres import PostgresServer

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "scripts" / "up.py"
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
DAGS = {"logbroker_mirror", "logbroker_hourly_load", "logbroker_audit"}

pytestmark = pytest.mark.slow


@pytest.fixture
def workdir() -> Iterator[Path]:
    parent = Path(tempfile.mkdtemp(prefix="logbroker-up-"))
    parent.chmod(0o755)
    try:
        yield parent / "up"
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1 (the Spark UIs take three)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise AssertionError(f"no {count} consecutive free ports")


class Up:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        while True:  # picks that do not overlap
            ui, spark, spark_ui = (free_ports(n) for n in (1, 1, 3))
            taken = [ui, spark, *range(spark_ui, spark_ui + 3)]
            if len(set(taken)) == len(taken):
                break
        self.ui_port, self.spark_port, self.spark_ui_port = ui, spark, spark_ui

    def run(
        self, command: str, *extra: str, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, str(UP), command, "--workdir", str(self.workdir), *extra]
        if command == "up":
            args += [
                "--spark-port",
                str(self.spark_port),
                "--spark-ui-port",
                str(self.spark_ui_port),
            ]
            args += ["--rate", "5"]
        env = {**os.environ, "UI_PORT": str(self.ui_port)}
        return subprocess.run(
            args, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def state(self) -> dict[str, Any]:
        return dict(json.loads((self.workdir / "stack.json").read_text()))

    def airflow(self) -> AirflowStack:
        return AirflowStack(
            self.workdir / "airflow",
            dags_folder=REPO / "dags",
            plugins_folder=REPO / "plugins",
            port=self.ui_port,
        )


def started_processes(state: dict[str, Any]) -> list[psutil.Process]:
    """Every process the stack recorded, and everything they started."""
    pids = [
        state["zookeeper"]["pid"],
        state["postgres"]["pid"],
        state["traffic"]["pid"],
        *state["spark"]["pids"].values(),
        *state["airflow"]["pids"].values(),
        *(b["pid"] for brokers in state["brokers"].values() for b in brokers),
    ]
    found: dict[int, psutil.Process] = {}
    for pid in pids:
        process = psutil.Process(pid)
        for p in (process, *process.children(recursive=True)):
            found[p.pid] = p
    return list(found.values())


def listening(processes: list[psutil.Process]) -> list[tuple[str, str, int]]:
    sockets = []
    for process in processes:
        try:
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    sockets.append((process.name(), conn.laddr.ip, conn.laddr.port))
        except psutil.NoSuchProcess:
            continue
    return sockets


def processes_naming(workdir: Path) -> list[str]:
    """Processes whose command line or environment names `workdir` (ours, under /tmp)."""
    marker = str(workdir)
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            named = any(marker in part for part in process.info["cmdline"] or [])
            named = named or any(marker in value for value in process.environ().values())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if named:
            found.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])[:200]}")
    return found


def spark_status(ui_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=10) as response:
        return dict(json.loads(response.read()))


def dag_runs(postgres: PostgresServer) -> set[str]:
    return set(postgres.psql("airflow", "SELECT run_id FROM dag_run").split())


def test_up_runs_on_postgres_and_spark_standalone_and_resumes_after_down(workdir: Path) -> None:
    up = Up(workdir)
    postgres = PostgresServer(up.workdir / "postgres")
    try:
        first = up.run("up")
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        out = first.stdout
        assert f"Airflow UI at http://127.0.0.1:{up.ui_port}  (login: admin / " in out, out
        assert f"PostgreSQL on 127.0.0.1:{postgres.port}" in out, out
        for log in (
            "postgres.log",
            "master.log",
            "zookeeper.log",
            "traffic.log",
            "<component>.out",
        ):
            assert log in out, (log, out)
        state = up.state()

        # Airflow's database is this PostgreSQL: its DAGs are there, and a run made through
        # the API is a row of its dag_run table.
        assert (postgres.directory / "password").stat().st_mode & 0o777 == 0o600
        found = wait_for(
            lambda: set(postgres.psql("airflow", "SELECT dag_id FROM dag").split()) >= DAGS,
            90,
            "the DAGs in PostgreSQL",
        )
        assert found
        run_id = up.airflow().trigger_dag_run("logbroker_mirror")["dag_run_id"]
        assert run_id in dag_runs(postgres)
        env_sh = (up.workdir / "airflow" / "env.sh").read_text()
        assert re.search(r"SQL_ALCHEMY_CONN='?postgresql\+psycopg2://airflow:", env_sh)
        assert "spark://127.0.0.1:" + str(up.spark_port) in env_sh  # the load's and audit's master

        # A standalone master with two workers, all on loopback.
        spark = spark_status(up.spark_ui_port)
        assert spark["url"] == f"spark://127.0.0.1:{up.spark_port}"
        workers = [w for w in spark["workers"] if w["state"] == "ALIVE"]
        assert len(workers) == 2 and {w["host"] for w in workers} == {"127.0.0.1"}, spark

        processes = started_processes(state)
        sockets = listening(processes)
        ports = {port for _, _, port in sockets}
        assert {up.ui_port, up.spark_port, up.spark_ui_port, postgres.port} <= ports, sockets
        assert [s for s in sockets if s[1] not in LOOPBACK] == [], sockets

        down = up.run("down")
        assert down.returncode == 0, down.stderr
        assert [p.pid for p in processes if process_running(p.pid)] == []
        assert processes_naming(up.workdir) == []
        assert not (up.workdir / "stack.json").exists()

        # Up again: the same database (the run from before), the same cluster.
        second = up.run("up")
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert run_id in dag_runs(postgres)
        assert spark_status(up.spark_ui_port)["aliveworkers"] == 2
    finally:
        up.run("down")
    assert processes_naming(up.workdir) == []


def test_up_names_a_taken_port_and_starts_nothing(tmp_path: Path) -> None:
    up = Up(tmp_path / "up")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", up.ui_port))
        holder.listen()
        done = up.run("up", timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"port {up.ui_port} on 127.0.0.1 (the Airflow UI) is taken" in lines[0]
    assert "UI_PORT=" in lines[0]
    assert not up.workdir.exists() or not any(up.workdir.iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL runs as another user only under root")
def test_up_names_a_directory_postgres_cannot_enter_and_starts_nothing(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)  # pytest's own: others may not enter
    up = Up(tmp_path / "up")
    done = up.run("up", timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    named = re.search(r"'postgres', which cannot enter (\S+) \(mode 700\)", lines[0])
    assert named is not None, lines[0]
    assert Path(named.group(1)) in (tmp_path, *tmp_path.parents), lines[0]
    assert not (tmp_path / "up").exists()
