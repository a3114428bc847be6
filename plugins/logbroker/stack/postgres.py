"""PostgreSQL for `make up`: a cluster of the project's own, run from Debian's `postgresql`.

    server = PostgresServer(workdir / "postgres")
    server.start()          initdb at the first start (a generated password, a free port),
                            then `pg_ctl start`; returns once the server takes connections
    server.sqlalchemy_url   postgresql+psycopg2://airflow:<password>@127.0.0.1:<port>/airflow
    server.stop()           by the postmaster's PID (SIGINT: PostgreSQL's fast shutdown)

Layout under the directory (kept across stops: a restart serves the same databases):

    data/           the cluster (PGDATA, 0700), owned by the user the server runs as; our
                    settings are appended to data/postgresql.conf at initdb: listen_addresses
                    127.0.0.1 only, the port (chosen free at initdb, then kept), the socket
                    directory
    run/            the server's Unix socket (not /var/run/postgresql, Debian's own cluster's)
    password        the password of the role `airflow` (0600, the caller's): the cluster's
                    superuser, which owns the database `airflow`
    postgres.log    the server's log

Logins over TCP take the password (scram-sha-256), never `trust`. PostgreSQL refuses to run
as root: under root the server runs as the `postgres` user Debian's package creates (the
owner of data/, run/ and the log), everything else stays the caller's; that user must be able
to enter the directory (`preflight()` names the parent in the way, e.g. a 0700 home). The
binaries are the
newest under /usr/lib/postgresql/*/bin (scripts/install-system-deps.sh installs them). This
module runs commands only; it imports no database driver.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

from .airflow_stack import process_running, write_private
from .zookeeper import find_free_port

DEBIAN_BINARIES = Path("/usr/lib/postgresql")
ROLE = "airflow"
DATABASE = "airflow"
_SETTINGS_MARK = "# logbroker.stack.postgres"


class PostgresError(RuntimeError):
    pass


def postgres_bin() -> Path:
    """The bin/ directory of the newest PostgreSQL Debian installed."""
    found = sorted(
        (p.parent for p in DEBIAN_BINARIES.glob("*/bin/initdb")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not found:
        raise PostgresError(
            f"PostgreSQL is not installed (no {DEBIAN_BINARIES}/*/bin/initdb): run "
            "`make setup` (scripts/install-system-deps.sh installs Debian's postgresql)"
        )
    return found[-1]


class PostgresServer:
    def __init__(self, directory: Path, *, startup_timeout: float = 60.0) -> None:
        self.directory = Path(directory).absolute()
        self.data = self.directory / "data"
        self.run_dir = self.directory / "run"
        self.log_path = self.directory / "postgres.log"
        self.password_path = self.directory / "password"
        self.startup_timeout = startup_timeout

    # -- where it is ------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return (self.data / "PG_VERSION").exists()

    @property
    def port(self) -> int | None:
        """The port written at initdb, or None before the first start."""
        conf = self.data / "postgresql.conf"
        if not conf.exists():
            return None
        ports = re.findall(r"(?m)^port = (\d+)", conf.read_text())
        return int(ports[-1]) if ports else None

    @property
    def password(self) -> str:
        return self.password_path.read_text().strip()

    @property
    def sqlalchemy_url(self) -> str:
        return f"postgresql+psycopg2://{ROLE}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def pid(self) -> int | None:
        """The postmaster's PID while it runs (first line of data/postmaster.pid)."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
            if process_running(pid):
                return pid
        return None

    # -- start and stop ---------------------------------------------------------------

    def preflight(self) -> None:
        """Raise PostgresError if the server's user could not enter the directory."""
        owner = _server_user()
        blocked = _not_searchable(self.directory, owner)
        if blocked is not None:
            raise PostgresError(
                f"PostgreSQL runs as {owner.pw_name!r}, which cannot enter {blocked} (mode "
                f"{stat.S_IMODE(blocked.stat().st_mode):o}) on the way to {self.directory}: "
                "choose a work directory it can reach, or give others search access "
                f"(chmod o+x {blocked})"
            )

    def start(self) -> PostgresServer:
        if self.pid is not None:
            return self
        self.preflight()
        self.directory.mkdir(parents=True, exist_ok=True)
        fresh = not self.initialized
        if fresh:
            self._initdb()
        self._server_command(
            "pg_ctl", "start", "-D", str(self.data), "-l", str(self.log_path),
            "-w", "-t", str(int(self.startup_timeout)),
        )  # fmt: skip
        if fresh:
            self.psql("postgres", f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """SIGINT to the postmaster (a fast shutdown: sessions end, data is flushed)."""
        pid = self.pid
        if pid is None:
            return
        stop_postmaster(pid, timeout)

    def psql(self, database: str, sql: str) -> str:
        """Run `sql` as the role `airflow` over TCP (the password, as Airflow logs in)."""
        env = {**os.environ, "PGPASSWORD": self.password, "PGCONNECT_TIMEOUT": "10"}
        done = subprocess.run(
            [str(postgres_bin() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", ROLE,
             "-d", database, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise PostgresError(f"psql {sql!r} on {database}: {done.stderr.strip()}")
        return done.stdout

    # -- internals --------------------------------------------------------------------

    def _initdb(self) -> None:
        if self.data.exists() and any(self.data.iterdir()):  # an interrupted initdb's
            raise PostgresError(
                f"{self.data} exists but holds no cluster: remove it to start afresh"
            )
        owner = _server_user()
        for path in (self.data, self.run_dir):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chown(path, owner.pw_uid, owner.pw_gid)
        self.log_path.touch(mode=0o600, exist_ok=True)
        os.chown(self.log_path, owner.pw_uid, owner.pw_gid)
        password = secrets.token_urlsafe(18)
        write_private(self.password_path, password + "\n")
        # initdb reads the password from a file the server's user can open (not a pipe of
        # ours: under root it runs as `postgres`); it lives in run/ for the call only.
        pwfile = self.run_dir / "initdb-password"
        write_private(pwfile, password + "\n")
        os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        try:
            self._server_command(
                "initdb", "-D", str(self.data), "-U", ROLE, f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8",
                "--no-instructions",
            )  # fmt: skip
        finally:
            pwfile.unlink()
        port = find_free_port()
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\n{_SETTINGS_MARK}: loopback only, a port and a socket of its own\n"
                f"listen_addresses = '127.0.0.1'\nport = {port}\n"
                f"unix_socket_directories = '{self.run_dir}'\n"
            )

    def _server_command(self, name: str, *args: str) -> None:
        owner = _server_user()
        kwargs: dict[str, Any] = {}
        if os.geteuid() != owner.pw_uid:
            kwargs = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
        done = subprocess.run(
            [str(postgres_bin() / name), *args],
            capture_output=True, text=True, check=False, cwd="/", umask=0o077,
            timeout=self.startup_timeout + 30, **kwargs,
        )  # fmt: skip
        if done.returncode != 0:
            tail = ""
            if name == "pg_ctl" and self.log_path.exists():
                tail = "\n" + "\n".join(self.log_path.read_text().splitlines()[-10:])
            raise PostgresError(
                f"{name} exited with {done.returncode}: {done.stderr.strip()}{tail}"
            )


def _server_user() -> pwd.struct_passwd:
    """Who runs the server: the caller, or Debian's `postgres` under root."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresError(
            "PostgreSQL does not run as root and there is no `postgres` user: install "
            "Debian's postgresql (scripts/install-system-deps.sh)"
        ) from None


def _not_searchable(path: Path, user: pwd.struct_passwd) -> Path | None:
    """The first existing directory on the way to `path` that `user` may not enter, or None."""
    groups = {user.pw_gid, *os.getgrouplist(user.pw_name, user.pw_gid)}
    for directory in [*reversed(path.parents), path]:
        try:
            info = directory.stat()
        except FileNotFoundError:
            return None  # made later, by us, 0755
        if user.pw_uid == 0:
            continue
        if info.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return directory
    return None


def stop_postmaster(pid: int, timeout: float = 30.0) -> None:
    """A fast shutdown by PID; SIGQUIT (immediate) if it is still running after `timeout`."""
    for sig, wait in ((signal.SIGINT, timeout), (signal.SIGQUIT, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while process_running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not process_running(pid):
            return
