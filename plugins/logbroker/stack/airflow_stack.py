"""Airflow 3 as separate processes on 127.0.0.1, for the demo, `make up` and the tests.

    AirflowStack(home, port).migrate().start()     api-server, scheduler, dag-processor,
                                                    triggerer; each its own process group,
                                                    its output in <home>/logs/<name>.out
    stack.api(...)                                  the REST API (v2) with a JWT
    stack.stop()                                    SIGTERM each group, SIGKILL stragglers
    AirflowStack(..., auth_manager="fab")           Airflow's FAB auth manager, users `admin`
    stack.use_fab(users_file)                       (Admin) and `viewer` (VIEWER_ROLE: reads,
                                                    never triggers); `make up`'s

The home is the stack's private state (its SQLite database, unless `sql_alchemy_conn` names
another, such as `make up`'s PostgreSQL; passwords.json the admin's password for Airflow's
simple auth manager, the demo's and the tests'): the directory is 0700 and every Airflow
process runs with umask 077, so whatever it creates there (airflow.db, airflow.cfg, logs) is
the user's only. The virtualenv's `bin/` comes first on every process's PATH: the Spark
provider runs `spark-submit` from PATH, and pyspark's launcher runs `python3` from PATH.

Not `airflow standalone`: it starts log servers bound to 0.0.0.0 (docs/design.md §7 P2). Here the
scheduler and triggerer skip their log servers (the api-server reads task logs from the
local files), the executor is LocalExecutor with `parallelism` workers, and the
dag-processor rescans often so a new DAG file shows up in seconds. This module runs the
`airflow` command; it never imports Airflow, so the library stays free of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from .zookeeper import find_free_port

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
# How Airflow is stopped (`make down`, and every stack here): first the running tasks, by
# SIGTERM to their own processes (their on_kill stops the spark-submit; the supervisor, in the
# scheduler's group and still up, reports the try as ended, up_for_retry, through the
# api-server); then the scheduler, dag-processor and triggerer; then what is left of the tasks;
# the api-server last: it serves the Execution API through which tasks report. In the other
# order `make down` took 30-65 s while a load ran: a SIGTERM to the scheduler's group reaches
# the supervisors too, the LocalExecutor waits for tasks whose supervisor is gone (their report
# fails with a broken pipe), and with the api-server stopped first the supervisors retry their
# connection; each stage ran into its 30 s grace and the SIGKILL.
LAST = ("api-server",)
# The api-server logs "Finished server process" within 0.1 s of its SIGTERM and then does not
# exit for the whole 30 s grace (cause not found; measured twice, 30.1 s). Last to stop, with
# no client left and all its state in the database, it is killed after this instead.
API_SERVER_GRACE = 5.0
# Started once the api-server answers: they start tasks and triggers, which report through its
# Execution API. Started together with it, a scheduler with runs to do at once (`make up`
# catching up, or resetting the tasks a `down` interrupted) queued tasks that failed on
# "connection refused" while the api-server was still starting, each losing a try.
AFTER_API = ("scheduler", "triggerer")
UMASK = 0o077  # what Airflow creates in its home (airflow.db, airflow.cfg, logs): ours only
# Set (to the home) on the components only, so on every task and everything a task starts
# (inherited through process groups and sessions of their own): how a stop finds them. env.sh
# does not export it: a shell that sourced env.sh (and `make down` run from it) holds
# AIRFLOW_HOME=<home> as the tasks do, and must not be taken for one of them.
STACK_MARKER = "LOGBROKER_AIRFLOW_STACK"
# The auth managers a stack runs: Airflow's simple one (the demo and the tests: one admin,
# its password in <home>/passwords.json), or the FAB provider's, with users and roles in
# Airflow's database (`make up`; docs/security.md): FAB_USERS, made at the first migration,
# their passwords generated once into the users file (0600).
AUTH_MANAGERS = ("simple", "fab")
FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
SIMPLE_AUTH_MANAGER = (
    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
)
# FAB's Viewer (reads DAGs, runs, task instances and their logs; creates, edits and clears
# nothing) plus "can read on Plugins": the UI lists the plugins' pages in its navigation from
# GET /api/v2/plugins, so without it the Pipeline page is missing from a viewer's menu.
VIEWER_ROLE = "PipelineViewer"
FAB_USERS = {"admin": "Admin", "viewer": VIEWER_ROLE}  # user -> role


class AirflowStackError(RuntimeError):
    pass


class AirflowStack:
    def __init__(
        self,
        home: Path,
        *,
        dags_folder: Path,
        plugins_folder: Path,
        port: int | None = None,
        parallelism: int = 4,
        all_admins: bool = False,
        auth_manager: str = "simple",
        users_file: Path | None = None,
        sql_alchemy_conn: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        request_timeout: float = 60.0,
    ) -> None:
        self.home = home
        self.request_timeout = request_timeout
        self.port = port or find_free_port()
        # The log servers the scheduler (LocalExecutor) and the triggerer start, on ports of
        # their own: Airflow's 8793 and 8794 are taken by the second stack on one machine
        self.worker_log_port = find_free_port()
        self.trigger_log_port = find_free_port()
        while self.trigger_log_port == self.worker_log_port:
            self.trigger_log_port = find_free_port()
        self.dags_folder = dags_folder
        self.plugins_folder = plugins_folder
        self.parallelism = parallelism
        self.all_admins = all_admins
        self.sql_alchemy_conn = sql_alchemy_conn  # None: SQLite in the home
        self.extra_env = dict(extra_env or {})
        self.clock = clock
        self.sleep = sleep
        self.username = "admin"  # the user the stack's own API calls log in as
        if auth_manager not in AUTH_MANAGERS:
            raise ValueError(f"auth_manager {auth_manager!r} is not one of {AUTH_MANAGERS}")
        self.auth_manager = auth_manager
        self.users_file = users_file  # FAB's passwords; None: <home>/airflow-users.json
        self.password = self._password()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def use_fab(self, users_file: Path | None = None) -> AirflowStack:
        """Run on the FAB auth manager (before migrate() and start()): as
        `AirflowStack(..., auth_manager="fab", users_file=users_file)`."""
        self.auth_manager = "fab"
        self.users_file = users_file
        self.password = self._password()
        return self

    @property
    def passwords_path(self) -> Path:
        """Where the users' passwords are: {user: password}, 0600."""
        if self.auth_manager == "simple":
            return self.home / "passwords.json"  # the simple auth manager reads it itself
        return self.users_file or self.home / "airflow-users.json"

    def logins(self) -> dict[str, str]:
        """user -> password, of every user the stack made (the simple manager: admin only)."""
        return {str(k): str(v) for k, v in json.loads(self.passwords_path.read_text()).items()}

    def _password(self) -> str:
        """The admin's password; every user's is made once and kept in passwords_path, so
        `make up` can print them again."""
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.home.chmod(0o700)  # also when an older run made it readable to others
        path = self.passwords_path
        users = FAB_USERS if self.auth_manager == "fab" else {self.username: "admin"}
        if path.exists():
            path.chmod(0o600)
            known = json.loads(path.read_text())
            if set(users) <= set(known):
                return str(known[self.username])
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, json.dumps({user: secrets.token_urlsafe(12) for user in users}))
        return str(json.loads(path.read_text())[self.username])

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        venv_bin = str(Path(sys.executable).parent)  # not resolved: a venv's python is a link
        env.update(
            {
                "PATH": os.pathsep.join([venv_bin, env.get("PATH", os.defpath)]),
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.plugins_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.worker_log_port),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.trigger_log_port),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                STACK_MARKER: str(self.home),
            }
        )
        if self.auth_manager == "fab":
            env["AIRFLOW__CORE__AUTH_MANAGER"] = FAB_AUTH_MANAGER
        else:  # named, not left to the default: a shell that sourced a FAB stack's env.sh
            env["AIRFLOW__CORE__AUTH_MANAGER"] = SIMPLE_AUTH_MANAGER
            env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"{self.username}:admin"
            env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(self.passwords_path)
            env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = str(self.all_admins)
        if self.sql_alchemy_conn is not None:
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self.sql_alchemy_conn
        else:  # SQLite: wait for another component's write lock instead of failing at 5 s
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] = (
                "logbroker.stack.airflow_sqlite.CONNECT_ARGS"
            )
        env.update(self.extra_env)
        return env

    def airflow(self, *args: str, timeout: float = 300) -> str:
        """Run one `airflow` CLI command in this home; its output, or an error with it."""
        cmd = [str(Path(sys.executable).with_name("airflow")), *args]
        return self._run(cmd, f"airflow {' '.join(args)}", timeout=timeout)

    def _run(self, cmd: list[str], what: str, timeout: float, stdin: str | None = None) -> str:
        """One process in this home's environment and umask; its output, or an error naming
        `what` with the output's end."""
        done = subprocess.run(
            cmd,
            input=stdin,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            umask=UMASK,
        )
        if done.returncode != 0:
            raise AirflowStackError(
                f"{what} exited with {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
            )
        return done.stdout

    def migrate(self) -> AirflowStack:
        """Airflow's database, and with FAB its users: `airflow db migrate` migrates FAB's
        tables too (the auth manager's DB manager), then sync_fab_users()."""
        self.airflow("db", "migrate")
        if self.auth_manager == "fab":
            self.sync_fab_users()
        self.make_private()
        return self

    def sync_fab_users(self, timeout: float = 300) -> None:
        """VIEWER_ROLE, and FAB_USERS with the users file's passwords: made when missing, and
        an existing user's role and password set again (the file is what `up` prints). One
        Python process, the passwords on its stdin: `airflow users create --password` would
        show them to every local user's `ps`."""
        users = {u: [r, self.logins()[u]] for u, r in FAB_USERS.items()}
        self._run(
            [sys.executable, "-c", _FAB_USERS_SCRIPT],
            "the FAB users' script",
            timeout=timeout,
            stdin=json.dumps({"viewer_role": VIEWER_ROLE, "users": users}),
        )

    def make_private(self) -> None:
        """The home 0700 and the files directly in it 0600: also those an older run (before
        the umask) left readable to others, such as airflow.db with its connections."""
        self.home.chmod(0o700)
        for path in self.home.iterdir():
            if path.is_file():
                path.chmod(0o600)

    def write_env_file(self) -> Path:
        """<home>/env.sh: `. env.sh` gives a shell the settings of this stack, so that the
        `airflow` command there (backfill, dags, tasks) talks to the same home and DAGs; not
        STACK_MARKER, which only the stack's own processes carry."""
        path = self.home / "env.sh"
        lines = [
            f"export {key}={shlex.quote(value)}\n"
            for key, value in sorted(self.env().items())
            if key.startswith(("AIRFLOW", "LOGBROKER_")) and key != STACK_MARKER
        ]
        write_private(path, "# written by logbroker.stack.airflow_stack\n" + "".join(lines))
        return path

    def start(self, components: tuple[str, ...] = COMPONENTS, timeout: float = 180) -> AirflowStack:
        """Start `components`; the scheduler and the triggerer only once the api-server is
        healthy (AFTER_API says why)."""
        logs = self.home / "logs"
        logs.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.write_env_file()
        first = [n for n in components if n not in AFTER_API or "api-server" not in components]
        for name in first:
            self._start(name, logs)
        if "api-server" in components:
            self.wait_healthy(timeout)
        for name in components:
            if name not in first:
                self._start(name, logs)
        return self

    def _start(self, name: str, logs: Path) -> None:
        args = [str(Path(sys.executable).with_name("airflow")), name]
        if name == "api-server":
            args += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        elif name in ("scheduler", "triggerer"):
            args += ["--skip-serve-logs"]
        with open(logs / f"{name}.out", "ab", opener=_private) as out:
            self.processes[name] = subprocess.Popen(
                args,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                umask=UMASK,
            )

    def exited(self) -> dict[str, int]:
        """The components started here that are no longer running: name -> exit code."""
        return {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}

    def wait_healthy(self, timeout: float = 180) -> None:
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AirflowStackError(
                        f"airflow {name} exited with {process.returncode} at start; "
                        f"see {self.home / 'logs' / (name + '.out')}"
                    )
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            self.sleep(0.5)
        raise AirflowStackError(f"the api-server at {self.url} was not healthy in {timeout:.0f} s")

    def stop(self, grace: float = 30) -> None:
        """Stop the running tasks, the components, what is left of the tasks, and the
        api-server last (`stop_in_order`)."""
        groups = [p.pid for p in self.processes.values() if p.poll() is None]
        stop_task_processes(self.home, grace, self.clock, self.sleep, spare=groups)
        first = {n: p for n, p in self.processes.items() if n not in LAST}
        self._stop_groups(first, grace)
        stop_task_processes(self.home, grace, self.clock, self.sleep)
        last = {n: p for n, p in self.processes.items() if n in LAST}
        self._stop_groups(last, min(grace, API_SERVER_GRACE))
        self.processes.clear()

    def _stop_groups(self, processes: Mapping[str, subprocess.Popen[bytes]], grace: float) -> None:
        for process in processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = self.clock() + grace
        for process in processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    # -- the REST API -----------------------------------------------------------------

    def token(self) -> str:
        if self._token is None:
            body = json.dumps({"username": self.username, "password": self.password}).encode()
            request = urllib.request.Request(
                f"{self.url}/auth/token",
                data=body,
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                self._token = str(json.loads(response.read())["access_token"])
        return self._token

    def api(self, method: str, path: str, body: Any = None, locked_timeout: float = 120) -> Any:
        """Call /api/v2<path>; a JSON answer, or an error with the server's message.

        On SQLite, Airflow answers 503 "Database is locked" when another component holds the
        write lock (e.g. a scheduler restarting); nothing was written then, so the call is
        repeated for up to `locked_timeout` seconds."""
        deadline = self.clock() + locked_timeout
        while True:
            request = urllib.request.Request(
                f"{self.url}/api/v2{path}",
                data=None if body is None else json.dumps(body).encode(),
                headers={
                    "Content-Type": "application/json",
                    "Authorization": f"Bearer {self.token()}",
                },
                method=method,
            )
            try:
                with urllib.request.urlopen(request, timeout=self.request_timeout) as response:
                    text = response.read()
            except TimeoutError as exc:  # the server took the request and did not answer
                raise AirflowStackError(
                    f"{method} /api/v2{path}: no answer in {self.request_timeout:g} s"
                ) from exc
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:1000]
                if exc.code == 503 and b"locked" in detail and self.clock() < deadline:
                    self.sleep(1.0)
                    continue
                raise AirflowStackError(
                    f"{method} /api/v2{path}: HTTP {exc.code}: {detail!r}"
                ) from exc
            return json.loads(text) if text else None

    def trigger_dag_run(
        self,
        dag_id: str,
        conf: dict[str, Any] | None = None,
        run_id: str | None = None,
        db_timeout: float = 120,
    ) -> Any:
        """POST a manual run of `dag_id` under a run id of our own, and return it.

        On SQLite a write lock held longer than the busy timeout fails the request with 500
        "Database error" (CI saw it on the first trigger of the end-to-end test), or leaves it
        unanswered past the request timeout (CI saw that too, on the same trigger). The call
        is repeated for up to `db_timeout` seconds with the same run id: if the failed try had
        created the run after all, the repeat meets 409 and the run is read back."""
        run_id = run_id or f"manual__{uuid.uuid4().hex[:16]}"
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}}
        deadline = self.clock() + db_timeout
        repeated = False
        while True:
            try:
                return self.api("POST", f"/dags/{dag_id}/dagRuns", body)
            except AirflowStackError as exc:
                text = str(exc)
                if repeated and "HTTP 409" in text:
                    return self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
                database = "HTTP 500" in text and "Database error" in text
                if not (database or "no answer in" in text) or self.clock() >= deadline:
                    raise
                repeated = True
            self.sleep(1.0)

    def create_backfill(self, body: dict[str, Any], busy_timeout: float = 300) -> Any:
        """POST /backfills; while the DAG's previous backfill is still open, wait for it.

        Airflow allows one running backfill per DAG and closes one a scheduler loop or more
        after its last run finished: a backfill asked for right after the previous one's runs
        ended meets 409 "There is already a running backfill". Nothing was created then, so
        the call is repeated for up to `busy_timeout` seconds.

        On SQLite a request can also fail with 500 "Database error" (CI saw one 25 ms into
        POST /backfills: a write that SQLite refuses at once rather than wait for, when the
        reading transaction it would upgrade meets another writer). That is repeated too; if
        the failed try had created the backfill after all, it is the DAG's open backfill of
        the same dates, and that one is returned instead of asking for a second."""
        deadline = self.clock() + busy_timeout
        failed_once = False
        while True:
            if failed_once:
                created = self._open_backfill(body)
                if created is not None:
                    return created
            try:
                return self.api("POST", "/backfills", body)
            except AirflowStackError as exc:
                text = str(exc)
                busy = "HTTP 409" in text and "already a running backfill" in text
                database = "HTTP 500" in text and "Database error" in text
                if not (busy or database) or self.clock() >= deadline:
                    raise
                failed_once = failed_once or database
            self.sleep(1.0)

    def _open_backfill(self, body: dict[str, Any]) -> Any:
        """The DAG's backfill of `body`'s dates that has not completed, or None."""

        def same(a: Any, b: Any) -> bool:  # the API may write +00:00 as Z
            return a is not None and b is not None and _instant(a) == _instant(b)

        listed = self.api("GET", f"/backfills?dag_id={body['dag_id']}&limit=100") or {}
        for backfill in listed.get("backfills", []):
            if (
                backfill.get("completed_at") is None
                and same(backfill.get("from_date"), body.get("from_date"))
                and same(backfill.get("to_date"), body.get("to_date"))
            ):
                return backfill
        return None


# Run by sync_fab_users() in Airflow's environment (this module never imports Airflow).
_FAB_USERS_SCRIPT = """
import json, sys
from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder
from airflow.utils.providers_configuration_loader import providers_configuration_loaded

asked = json.load(sys.stdin)

@providers_configuration_loaded
def sync():
    with get_application_builder() as appbuilder:
        sm = appbuilder.sm
        viewer = sm.find_role(asked["viewer_role"]) or sm.add_role(asked["viewer_role"])
        wanted = [*sm.find_role("Viewer").permissions, sm.create_permission("can_read", "Plugins")]
        for permission in wanted:
            if permission not in viewer.permissions:
                sm.add_permission_to_role(viewer, permission)
        for name, (role_name, password) in asked["users"].items():
            role = sm.find_role(role_name)
            user = sm.find_user(username=name)
            if user is None:
                made = sm.add_user(name, name, "-", name + "@localhost", role, password)
                if not made:
                    sys.exit("could not add the user " + name)
            else:
                user.roles = [role]
                sm.update_user(user)
                sm.reset_password(user.id, password)

sync()
"""


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def write_private(path: Path, text: str) -> None:
    """Write `path` readable by its owner only, from its first byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(0o600)  # O_CREAT's mode applies only to a new file


def _instant(value: Any) -> datetime:
    return datetime.fromisoformat(str(value))


def stop_task_processes(
    home: Path,
    grace: float = 30,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    spare: Collection[int] = (),
) -> list[int]:
    """Stop the task processes of the Airflow stack whose home is `home`.

    Task processes (and the spark-submits they run) live in process groups and sessions of
    their own, which outlive a scheduler stopped mid-task: they are found by the stack's
    marker in their environment (STACK_MARKER, which no shell that sourced env.sh holds).
    Never this process nor any of its ancestors (the `make`, `timeout` and shell it runs
    from). The processes in `spare` and their children are left alone: given the running
    components, that spares the LocalExecutor's workers (each a task's supervisor, which
    reports the task's end) and stops the task processes and what they started.
    """
    import psutil  # Airflow's own dependency: there wherever a stack runs

    this = psutil.Process()
    ancestors = {this.pid, *(p.pid for p in this.parents())}
    found = []
    for process in psutil.process_iter():
        if process.pid in ancestors:
            continue
        with contextlib.suppress(psutil.Error):  # gone, a zombie, or another user's
            if process.environ().get(STACK_MARKER) != str(home):
                continue
            if not {process.pid, process.ppid()} & set(spare):
                found.append(process)
    stopped = [p.pid for p in found]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in found:
            with contextlib.suppress(psutil.Error):  # checks the PID was not reused
                process.send_signal(sig)
        deadline = clock() + grace
        while found and clock() < deadline:
            found = [p for p in found if _running(p)]
            sleep(0.2)
    return stopped


def _running(process: Any) -> bool:
    """A psutil.Process alive and not a zombie (an orphan's zombie stays until init reaps it)."""
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def process_running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie stays until init reaps it)."""
    try:
        return b") Z " not in Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
