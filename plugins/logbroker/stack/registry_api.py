"""`logbroker schema-registry` as a process of a stack (`make up`): Confluent's REST API over
the stack's registry chroot, on 127.0.0.1:8081 (Confluent's port), or a free port if that is
taken. Its log is `<directory>/schema-registry.log`; its first line says where it listens."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path

from .spark_standalone import stop_groups
from .zookeeper import taken_port

DEFAULT_PORT = 8081
_SERVING = re.compile(r"serving the Confluent Schema Registry API on (http://\S+)")


class RegistryApiError(RuntimeError):
    """The process did not start (its log says why)."""


class RegistryApiProcess:
    def __init__(self, directory: Path, zk_connect: str, port: int = DEFAULT_PORT) -> None:
        self.directory = Path(directory)
        self.zk_connect = zk_connect
        self.port = port  # wanted; 0 (or taken): a free one, in `url` once started
        self.log_path = self.directory / "schema-registry.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, timeout: float = 30.0) -> RegistryApiProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        taken = not self.port or taken_port({self.port: "Confluent's registry API"}) is not None
        port = 0 if taken else self.port
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "logbroker.cli", "schema-registry",
                 "--zookeeper", self.zk_connect, "--listeners", f"http://127.0.0.1:{port}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own group: stop_recorded signals groups
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[start:].decode(errors="replace")
            found = _SERVING.search(text)
            if found:
                self.url = found.group(1)
                return self
            if self.proc.poll() is not None:
                raise RegistryApiError(
                    f"logbroker schema-registry exited with {self.proc.returncode}: "
                    f"{text.strip()[-500:]}"
                )
            time.sleep(0.05)
        self.stop()
        raise RegistryApiError(
            f"logbroker schema-registry did not start in {timeout:g} s (see {self.log_path})"
        )

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is not None:
            stop_groups([self.proc.pid], grace)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(1)
            self.proc = None
