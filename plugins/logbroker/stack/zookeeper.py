"""A real ZooKeeper server in a subprocess: `make up`, the demo, `logbroker quickstart`, the tests.

It runs Debian's ZooKeeper (package ``zookeeper``, ``/usr/share/java/zookeeper.jar``) directly as

    java -Xmx256m -cp zookeeper.jar:netty-codec.jar:slf4j-simple.jar \\
        org.apache.zookeeper.server.ZooKeeperServerMain <data_dir>/zoo.cfg

(not through ``zkServer.sh``, which hard-codes /etc/zookeeper and /var/log/zookeeper), standalone,
listening on 127.0.0.1 only (or on ``host``), on a free port unless one is given. The server is
ready in well under a second. ``command_prefix`` runs it under another command, e.g.
``["ip", "netns", "exec", NAME]`` for a host of the tests' ``harness.hosts`` (which then gives
the host's address as ``host`` and a port). Everything lives in the given directory:

    <data_dir>/zoo.cfg          generated configuration (tickTime 500 ms: sessions 1 s .. 10 s)
    <data_dir>/zookeeper.log    the server's stdout and stderr (INFO), appended to on restart
    <data_dir>/data/            ZooKeeper's snapshots and transaction log

Use it as a context manager, or call ``start()`` and ``stop()``::

    with ZooKeeperServer(tmp_path / "zk") as zk:
        client = KazooClient(hosts=zk.connect_string + "/live")
        ...

    target = zk.create_chroot("/t/my-test")      # a ZkTarget: target.connect is "127.0.0.1:PORT/t/my-test"

``stop()`` ends the Java process by its PID (SIGTERM, then SIGKILL) and is idempotent; a server
that is never stopped is killed when the Python interpreter exits. Run one from a shell (demo) with
``python -m logbroker.stack.zookeeper --data-dir DIR [--port 2181]``; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from kazoo.client import KazooClient

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
# zookeeper.jar's manifest Class-Path brings in jute, netty-handler/transport, slf4j-api, ...
# but not netty-codec (needed by the Netty connection factory) nor an slf4j binding.
OPTIONAL_JARS = ("netty-codec.jar",)
LOGGING_JARS = ("slf4j-simple.jar", "slf4j-nop.jar")  # the first that exists; simple logs to stderr
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
FOUR_LETTER_WORDS = ("srvr", "stat", "ruok", "mntr", "envi", "cons", "conf", "dump")

_LOG_NAME = "zookeeper.log"
_CONFIG_NAME = "zoo.cfg"
_BIND_ERRORS = ("Address already in use", "BindException")


class ZooKeeperStartError(RuntimeError):
    """The server did not start: the message says why and ends with the tail of its log."""


class ZooKeeperPortInUseError(ZooKeeperStartError):
    """The client port was already taken by another process."""


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now (the kernel's pick for port 0).

    Another process may take it before the server binds it; ``ZooKeeperServer.start`` retries
    with a new port in that case when the port was not given.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def find_free_ports(count: int, host: str = "127.0.0.1") -> int:
    """The first of `count` consecutive ports free on ``host`` (a Spark master's and its
    workers' UIs take consecutive ports); as racy as ``find_free_port``."""
    for _ in range(50):
        first = find_free_port(host)
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return first
    raise OSError(f"no {count} consecutive free ports on {host}")


def taken_port(ports: dict[int, str], host: str = "127.0.0.1") -> tuple[int, str] | None:
    """The first of `ports` (in their order) that cannot be bound on ``host``, and what it is
    for (the values); None if all are free. For fixed ports, checked before anything starts."""
    for port, what in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                return port, what
    return None


def four_letter_word(host: str, port: int, command: str, timeout: float = 5.0) -> str:
    """Send a ZooKeeper four-letter command (``srvr``, ``ruok``, ``dump``, ...); return the reply.

    Raises ``OSError`` when the server cannot be reached. A command that is not whitelisted is
    answered with a sentence saying so, not with an error.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(command.encode("ascii"))
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


class ZooKeeperServer:
    """One standalone ZooKeeper server, a Java subprocess with its own process group.

    ``data_dir`` holds the config, the log and the data (created if missing; reused on restart, so
    the znodes survive a stop/start). ``port`` None picks a free port at the first start and keeps
    it on restarts, so that clients can reconnect.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        tick_time_ms: int = 500,
        java: str | None = None,
        heap: str = "256m",
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        self.tick_time_ms = tick_time_ms
        self._port = port
        self._port_given = port is not None
        self._java = java
        self._heap = heap
        self.command_prefix = list(command_prefix)  # a launcher that then execs java (same PID)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._finalizer: weakref.finalize[..., ZooKeeperServer] | None = None

    # -- what clients need -------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The client port (known once the server was started, or when it was given)."""
        if self._port is None:
            raise RuntimeError("the port is chosen at start(); start the server first")
        return self._port

    @property
    def connect_string(self) -> str:
        """``"127.0.0.1:PORT"``, for KazooClient(hosts=...); append a chroot as needed."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The Java process id while the server runs, else None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the Java process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.data_dir / _LOG_NAME

    @property
    def config_path(self) -> Path:
        return self.data_dir / _CONFIG_NAME

    def command(self, word: str, timeout: float = 5.0) -> str:
        """Send a four-letter command to this server (see FOUR_LETTER_WORDS for the whitelist)."""
        return four_letter_word(self.host, self.port, word, timeout)

    def create_chroot(self, path: str) -> ZkTarget:
        """Create the znode ``path`` (and its parents) and return it as a ZkTarget."""
        if not path.startswith("/") or path.endswith("/") or len(path) < 2:
            raise ValueError(f"a chroot is an absolute znode path like /t/name, got {path!r}")
        client = KazooClient(hosts=self.connect_string, timeout=10)
        client.start(timeout=10)
        try:
            client.ensure_path(path)
        finally:
            client.stop()
            client.close()
        return ZkTarget(server=self, chroot=path)

    # -- life cycle --------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> Self:
        """Launch the server and wait until it serves requests; return self.

        Raises ZooKeeperPortInUseError if a given port is taken, ZooKeeperStartError if the
        process exits or is not serving within ``timeout`` seconds (the process is then killed).
        """
        if self.running:
            return self
        self.stop()  # reap a process that died on its own
        attempts = 1 if self._port_given or self._port is not None else 3
        for attempt in range(1, attempts + 1):
            if self._port is None:
                self._port = find_free_port(self.host)
            try:
                self._launch(timeout)
                return self
            except ZooKeeperPortInUseError:
                # Somebody took the free port between our probe and the server's bind: pick another.
                if attempt == attempts:
                    raise
                self._port = None
        raise AssertionError("unreachable")

    def keep_running(self) -> None:
        """Leave the server running after this process exits (`make up`): no stop at exit;
        stop it later by its PID."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server by its PID: SIGTERM, wait up to ``timeout`` s, then SIGKILL. Idempotent."""
        proc, self._proc = self._proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if proc is not None:
            _terminate(proc, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        port = self._port if self._port is not None else "?"
        return f"ZooKeeperServer({self.host}:{port}, pid={self.pid}, data_dir={self.data_dir})"

    # -- internals ---------------------------------------------------------------------------

    def _launch(self, timeout: float) -> None:
        self._write_config()
        argv = [*self.command_prefix, *self._command_line()]
        self._log = self.log_path.open("ab")
        log_start = self._log.tell()
        self._log.write(f"==== starting on {self.connect_string}: {' '.join(argv)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=True,  # own process group: a Ctrl-C in the terminal is not for it
        )
        self._finalizer = weakref.finalize(self, _terminate, self._proc, 5.0)
        try:
            self._wait_until_serving(timeout, log_start)
        except BaseException:
            self.stop()
            raise

    def _wait_until_serving(self, timeout: float, log_start: int) -> None:
        # `ruok` answers `imok` before the server serves requests, so ask for `conf` instead: it
        # answers only once serving, and its dataDir proves that this is our server, not another
        # one that already had the port.
        assert self._proc is not None
        expected = f"dataDir={self.data_dir / 'data' / 'version-2'}"
        deadline = time.monotonic() + timeout
        while True:
            returncode = self._proc.poll()
            if returncode is not None:
                tail = self._log_tail(log_start)
                if any(marker in tail for marker in _BIND_ERRORS):
                    raise ZooKeeperPortInUseError(
                        f"ZooKeeper could not listen on {self.connect_string}: address already in "
                        f"use (another process has port {self.port}).\n{self._tail_text(tail)}"
                    )
                raise ZooKeeperStartError(
                    f"ZooKeeper (pid {self._proc.pid}) exited with code {returncode} while "
                    f"starting on {self.connect_string}.\n{self._tail_text(tail)}"
                )
            try:
                if expected in self.command("conf", timeout=1.0).splitlines():
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                tail = self._log_tail(log_start)
                raise ZooKeeperStartError(
                    f"ZooKeeper (pid {self._proc.pid}) was not serving on {self.connect_string} "
                    f"after {timeout:g} s; it was killed.\n{self._tail_text(tail)}"
                )
            time.sleep(0.05)

    def _write_config(self) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time_ms}",  # session timeouts: 2x .. 20x tickTime
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "maxClientCnxns=0",  # no per-IP limit: every broker and client comes from 127.0.0.1
            "admin.enableServer=false",  # no Jetty admin server on port 8080
            f"4lw.commands.whitelist={','.join(FOUR_LETTER_WORDS)}",
            "forceSync=no",  # no fsync per transaction: a killed server still loses nothing
        ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _command_line(self) -> list[str]:
        java = self._java or _find_java()
        if not ZOOKEEPER_JAR.exists():
            raise ZooKeeperStartError(
                f"{ZOOKEEPER_JAR} not found: install Debian's ZooKeeper "
                "(apt-get install -y --no-install-recommends zookeeper)"
            )
        jars = [ZOOKEEPER_JAR] + [JAVA_DIR / name for name in OPTIONAL_JARS]
        jars += [jar for jar in (JAVA_DIR / name for name in LOGGING_JARS) if jar.exists()][:1]
        classpath = ":".join(str(jar) for jar in jars if jar.exists())
        return [
            java,
            f"-Xmx{self._heap}",
            "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(self.config_path),
        ]

    def _log_tail(self, start: int, max_bytes: int = 64 * 1024) -> str:
        if self._log is not None:
            self._log.flush()
        try:
            with self.log_path.open("rb") as log:
                size = log.seek(0, os.SEEK_END)
                log.seek(max(start, size - max_bytes))
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _tail_text(self, tail: str, lines: int = 30) -> str:
        last = tail.rstrip("\n").splitlines()[-lines:]
        return f"Last lines of {self.log_path}:\n" + "\n".join(f"  | {line}" for line in last)


@dataclass(frozen=True)
class ZkTarget:
    """A chroot on a running server: what a broker or a client needs to find its cluster."""

    server: ZooKeeperServer
    chroot: str  # "/t/test_name-1a2b3c4d"

    @property
    def connect(self) -> str:
        """The connect string with the chroot, ``"127.0.0.1:PORT/t/test_name-1a2b3c4d"``."""
        return self.server.connect_string + self.chroot

    def client(self, timeout: float = 10.0) -> KazooClient:
        """A new, not yet started KazooClient inside the chroot."""
        return KazooClient(hosts=self.connect, timeout=timeout)


def _find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperStartError("no `java` on PATH and no JAVA_HOME: install a JRE (17)")
    return java


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM the process by its PID, wait, then SIGKILL; always reap it."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
        except ProcessLookupError:
            pass
    proc.wait()


def main(argv: list[str] | None = None) -> None:
    """Run a server in the foreground until Ctrl-C or SIGTERM (for the demo)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with ZooKeeperServer(args.data_dir, args.port, host=args.host) as server:
        print(
            f"ZooKeeper serving on {server.connect_string} (pid {server.pid}, log {server.log_path})"
        )
        try:
            while server.running and not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
    print("ZooKeeper stopped")


if __name__ == "__main__":
    main()
