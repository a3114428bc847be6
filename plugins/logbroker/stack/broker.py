"""Broker processes for tests and demos: `logbroker broker` as a real subprocess.

    with BrokerProcess(tmp_path / "b0", broker_id=0, zk_connect=zk.connect) as broker:
        sock = socket.create_connection(broker.address)
        ...
    broker.kill()      # kill -9, to test recovery
    broker.start()     # the same log.dir again

The process runs in its own process group with its log in `<directory>/broker.log`;
`stop()` sends SIGTERM and waits for exit code 0, `kill()` sends SIGKILL. Ports are picked
free on 127.0.0.1 unless given. `host` is the address it binds and registers in ZooKeeper, and
`command_prefix` a launcher it runs under: a host of the tests' `harness.hosts` passes its
address and `["ip", "netns", "exec", NAME]` (see `Host.broker`). `rlimits` starts it under resource limits (a descriptor
limit, a file size limit), set by a small launcher that then execs the broker, so the
limits hold from its first instruction and `pid` is the broker's own:

    BrokerProcess(path, rlimits={resource.RLIMIT_NOFILE: (128, 128)})

`listeners` adds Kafka's listeners by name, each on a free port chosen now unless given
(`listener_ports` has them): `listeners={"SSL": 0, "SSL08": 0}`. `config_file` is a
properties file read before the overrides (--config): where secrets go (a SASL login, a
ZooKeeper digest), kept off the command line that `ps` shows.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from .zookeeper import find_free_port

# Set resource limits, then become the broker (argv: "RESOURCE:soft:hard,...", program, args).
_WITH_RLIMITS = """\
import os, sys, resource
for spec in sys.argv[1].split(","):
    number, soft, hard = (int(x) for x in spec.split(":"))
    resource.setrlimit(number, (soft, hard))
os.execv(sys.argv[2], sys.argv[2:])
"""


class BrokerStartError(RuntimeError):
    pass


class BrokerProcess:
    def __init__(
        self,
        directory: Path,
        broker_id: int = 0,
        zk_connect: str | None = None,
        port: int | None = None,
        overrides: Mapping[str, str] | None = None,
        rlimits: Mapping[int, tuple[int, int]] | None = None,
        *,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
        port_08: int | None = None,
        listeners: Mapping[str, int] | None = None,
        config_file: Path | None = None,
    ) -> None:
        """`port_08`: the Kafka 0.8 listener's port (0: a free one, chosen now; None: no 0.8
        listener)."""
        self.directory = Path(directory)
        self.host = host
        self.command_prefix = list(command_prefix)  # execs the rest: `pid` stays the broker's
        self.rlimits = dict(rlimits or {})
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.port = port or find_free_port(host)
        self.port_08 = None if port_08 is None else (port_08 or find_free_port(host))
        # listener name -> its port on `host` (0 given: a free one, chosen now)
        self.listener_ports = {n: p or find_free_port(host) for n, p in (listeners or {}).items()}
        self.config_file = config_file
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_dir = self.directory / "logs"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def settings(self) -> dict[str, str]:
        settings = {
            "brokerid": str(self.broker_id),
            "hostname": self.host,
            "port": str(self.port),
            "log.dir": str(self.log_dir),
            "enable.zookeeper": "true" if self.zk_connect else "false",
            "zk.sessiontimeout.ms": "4000",
            "log.cleanup.interval.mins": "60",
        }
        if self.zk_connect:
            settings["zk.connect"] = self.zk_connect
        if self.port_08 is not None:
            settings["port.08"] = str(self.port_08)
        if self.listener_ports:
            settings["listeners"] = ",".join(
                f"{name}://{self.host}:{port}" for name, port in self.listener_ports.items()
            )
        settings.update(self.overrides)
        return settings

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "logbroker.cli", "broker"]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for key, value in self.settings().items():
            cmd += ["--override", f"{key}={value}"]
        if self.rlimits:
            limits = ",".join(f"{r}:{soft}:{hard}" for r, (soft, hard) in self.rlimits.items())
            cmd = [sys.executable, "-c", _WITH_RLIMITS, limits, *cmd]
        return [*self.command_prefix, *cmd]

    def start(self, timeout: float = 30.0) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"broker {self.broker_id} exited with {self.proc.returncode}:\n"
                    + self.log_since(log_start)
                )
            if b"listening on" in self.log_since(log_start).encode():
                try:
                    socket.create_connection(self.address, timeout=1).close()
                    return self
                except OSError:
                    pass
            time.sleep(0.02)
        self.kill()
        raise BrokerStartError(f"broker {self.broker_id} did not start in {timeout:g} s")

    def log_since(self, start: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(start)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code (0 after a clean shutdown)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()  # forgets the process
                return -signal.SIGKILL
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        """kill -9 the broker (and anything in its process group)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
