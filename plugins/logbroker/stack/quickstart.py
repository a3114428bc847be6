"""`logbroker quickstart`: the README's local clusters, in the background, under var/quickstart/.

    start(root)     ZooKeeper on 127.0.0.1:2181, the live cluster (brokers 0, 1 and 2 on
                    9092-9094, their Kafka 0.8 listeners on 9192-9194, chroot /live) and the
                    analysis cluster (broker 0 on 9095 and 9195, chroot /analysis), each broker `logbroker broker --config include/config/...` in a
                    process group of its own; returns once every broker is registered
    stop(root)      all of them, by the PIDs recorded at start: brokers first, then ZooKeeper

Everything is relative to `root`, the checkout's root (the README runs from there, and the
sample configs' log.dirs are relative to it):

    var/quickstart/quickstart.json    the PIDs, addresses, commands and logs; `stop` reads it
    var/quickstart/zookeeper/         zoo.cfg, data/, zookeeper.log (logbroker.stack.zookeeper)
    var/quickstart/<cluster>-<id>/    a broker: broker.log (its output) and logs/ (its log.dir)

The ports are the README's, fixed: a taken one stops `start` before anything runs, with one
line naming it. The data stays after `stop`, and a later `start` resumes on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from .airflow_stack import process_running
from .spark_standalone import stop_groups
from .zookeeper import ZooKeeperServer, ZooKeeperStartError, taken_port

WORKDIR = Path("var") / "quickstart"
STATE = "quickstart.json"
ZK_PORT = 2181
CONFIGS = Path("include") / "config"


@dataclass(frozen=True)
class Broker:
    cluster: str  # its chroot's name: live or analysis
    broker_id: int
    config: str  # in include/config/
    port: int
    metrics_port: int
    port_08: int  # its Kafka 0.8 listener (port.08)
    overrides: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.cluster}-{self.broker_id}"

    def argv(self) -> list[str]:
        """What a user would type (after `logbroker`) to run this broker by hand."""
        argv = ["broker", "--config", str(CONFIGS / self.config)]
        for key, value in self.overrides:
            argv += ["--override", f"{key}={value}"]
        return argv


def _own_dir(name: str) -> tuple[str, str]:
    return ("log.dir", f"{WORKDIR}/{name}/logs")


# The sample configs hold brokers 0 and 1 of the live cluster; the third broker of `live` and
# the analysis cluster's broker are the same files with what must differ overridden.
BROKERS = (
    Broker("live", 0, "server.properties", 9092, 9100, 9192),
    Broker("live", 1, "server-1.properties", 9093, 9101, 9193),
    Broker(
        "live",
        2,
        "server-1.properties",
        9094,
        9102,
        9194,
        (
            ("brokerid", "2"),
            ("port", "9094"),
            ("metrics.port", "9102"),
            ("port.08", "9194"),
            _own_dir("live-2"),
        ),
    ),
    Broker(
        "analysis",
        0,
        "server.properties",
        9095,
        9103,
        9195,
        (
            ("zk.connect", f"127.0.0.1:{ZK_PORT}/analysis"),
            ("port", "9095"),
            ("metrics.port", "9103"),
            ("port.08", "9195"),
            _own_dir("analysis-0"),
        ),
    ),
)


class QuickstartError(RuntimeError):
    """Said in one line by the command (the tail of a log may follow)."""


def running(root: Path) -> list[int]:
    """The recorded processes that still run (none when nothing was started)."""
    state = _read_state(root)
    return [pid for pid in _pids(state) if _is_ours(pid)] if state else []


def start(root: Path, say: Callable[[str], None], timeout: float = 60.0) -> dict[str, Any]:
    """Start ZooKeeper and every broker of BROKERS; return the recorded state."""
    root = root.resolve()
    if not (root / CONFIGS / "server.properties").is_file():
        raise QuickstartError(
            f"run it from the repository's root: no {CONFIGS / 'server.properties'} in {root}"
        )
    if running(root):
        raise QuickstartError(
            f"already running (see {WORKDIR / STATE}); `logbroker quickstart stop` first"
        )
    ports = {ZK_PORT: "ZooKeeper"}
    for b in BROKERS:
        ports |= {
            b.port: f"broker {b.name}",
            b.metrics_port: f"broker {b.name}'s metrics",
            b.port_08: f"broker {b.name}'s Kafka 0.8 listener",
        }
    taken = taken_port(ports)
    if taken is not None:
        raise QuickstartError(
            f"port {taken[0]} ({taken[1]}) is taken on 127.0.0.1: stop what holds it "
            f"(`ss -ltnp 'sport = :{taken[0]}'` names it)"
        )
    started_at = time.monotonic()
    zookeeper = ZooKeeperServer(root / WORKDIR / "zookeeper", ZK_PORT)
    try:
        zookeeper.start()
    except ZooKeeperStartError as exc:
        raise QuickstartError(str(exc)) from None
    zookeeper.keep_running()
    assert zookeeper.pid is not None
    state: dict[str, Any] = {
        "zookeeper": {
            "pid": zookeeper.pid,
            "address": zookeeper.connect_string,
            "log": str(zookeeper.log_path.relative_to(root)),
        },
        "brokers": {},
    }
    procs = {b.name: _launch(root, b) for b in BROKERS}
    for b in BROKERS:
        state["brokers"][b.name] = {
            "pid": procs[b.name].pid,
            "address": f"127.0.0.1:{b.port}",
            "zookeeper": f"127.0.0.1:{ZK_PORT}/{b.cluster}",
            "command": "logbroker " + " ".join(b.argv()),
            "log": str(WORKDIR / b.name / "broker.log"),
        }
    _write_state(root, state)  # before waiting: a `stop` finds them even if this fails
    try:
        _wait_registered(root, procs, timeout)
    except BaseException:
        stop(root, lambda _: None)
        raise
    zk = state["zookeeper"]
    say(f"ZooKeeper   {zk['address']}  pid {zk['pid']:<7}  log {zk['log']}")
    for name, b in state["brokers"].items():
        say(f"{name:<11} {b['address']}  pid {b['pid']:<7}  log {b['log']}")
        say(f"{'':<11} {b['command']}")
    say(
        f"started in {time.monotonic() - started_at:.1f} s; "
        "`logbroker quickstart stop` stops them all"
    )
    return state


def stop(root: Path, say: Callable[[str], None], grace: float = 20.0) -> list[int]:
    """Stop by PID what `start` recorded, brokers before ZooKeeper; return the PIDs stopped."""
    root = root.resolve()
    state = _read_state(root)
    if state is None:
        say(f"nothing to stop (no {WORKDIR / STATE})")
        return []
    started = time.monotonic()
    brokers = [b["pid"] for b in state["brokers"].values() if _is_ours(b["pid"])]
    stop_groups(brokers, grace)
    zookeeper = [state["zookeeper"]["pid"]] if _is_ours(state["zookeeper"]["pid"]) else []
    stop_groups(zookeeper, grace)
    (root / WORKDIR / STATE).unlink()
    say(
        f"stopped {len(brokers)} brokers and {len(zookeeper)} ZooKeeper in "
        f"{time.monotonic() - started:.1f} s; the data stays in {WORKDIR}/"
    )
    return brokers + zookeeper


def _launch(root: Path, broker: Broker) -> subprocess.Popen[bytes]:
    directory = root / WORKDIR / broker.name
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "broker.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "logbroker.cli", *broker.argv()],
            cwd=root,  # the configs' log.dirs are relative to the checkout
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal is not for it
        )


def _wait_registered(root: Path, procs: dict[str, subprocess.Popen[bytes]], timeout: float) -> None:
    """Until every broker's id is in its cluster's /brokers/ids (what `topics create` needs)."""
    zk = KazooClient(hosts=f"127.0.0.1:{ZK_PORT}", timeout=10)
    zk.start(timeout=10)
    try:
        deadline = time.monotonic() + timeout
        waiting = {b.name: b for b in BROKERS}
        while waiting:
            for name, b in list(waiting.items()):
                if zk.exists(f"/{b.cluster}/brokers/ids/{b.broker_id}"):
                    del waiting[name]
                elif procs[name].poll() is not None:
                    raise QuickstartError(
                        f"broker {name} exited with code {procs[name].returncode}; the end of "
                        f"{WORKDIR / name / 'broker.log'}:\n{_tail(root / WORKDIR / name / 'broker.log')}"
                    )
            if waiting and time.monotonic() > deadline:
                raise QuickstartError(
                    f"brokers {', '.join(waiting)} not registered after {timeout:g} s "
                    f"(their logs: {WORKDIR}/<name>/broker.log)"
                )
            time.sleep(0.1)
    finally:
        zk.stop()
        zk.close()


def _tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(f"  | {line}" for line in text.splitlines()[-lines:])


def _read_state(root: Path) -> dict[str, Any] | None:
    path = root / WORKDIR / STATE
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def _write_state(root: Path, state: dict[str, Any]) -> None:
    path = root / WORKDIR / STATE
    path.write_text(json.dumps(state, indent=1) + "\n")


def _pids(state: dict[str, Any]) -> list[int]:
    return [b["pid"] for b in state["brokers"].values()] + [state["zookeeper"]["pid"]]


def _is_ours(pid: int) -> bool:
    """Running, and still a broker or ZooKeeper (not a process that reused a stale PID)."""
    if not process_running(pid):
        return False
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"logbroker.cli" in command or b"ZooKeeperServerMain" in command
