"""Separate hosts on one machine: Linux network namespaces on a private bridge, for tests.

Brokers on one loopback cannot be cut off from each other. A `Network` gives each of them (and
ZooKeeper) a host of its own, a network namespace with its own address, so that a test can cut
one off, or only the link between two, pause or kill one, and watch what the others do.

    with Network(tmp_path / "net", ["zk", "b1", "b2"]) as net:
        zk_host, b1, b2 = net.hosts
        zk = zk_host.zookeeper()                                  # started, on zk_host:2181
        target = zk.create_chroot("/cluster")                     # the test reaches every host
        broker = b1.broker(1, target.connect)                     # started, on b1:9092
        net.cut(b1); net.heal(b1)                                 # b1 alone, then back
        net.cut_between(b1, zk_host); net.heal_between(b1, zk_host)
        net.pause(b1); net.resume(b1); net.kill(b1); broker.start()
        net.history                                               # every fault, with its time

Layout of one network (its id is 6 random hex digits, say 1a2b3c; names are short because an
interface name has at most 15 characters):

    bridge lbh1a2b3c       in the root namespace, address 10.X.Y.1/24: the test process itself
    netns  lbh1a2b3c-n<i>  host i: `eth0` with 10.X.Y.<i+2>/24, `lo` up, nothing else
    veth   lbh1a2b3c-v<i>  the root end of host i's cable, a port of the bridge (the other end
                           is the host's eth0)
    state  /run/logbroker-hosts/lbh1a2b3c.json   owner PID and start time, the names above
    files  <directory>/<host name>/              logs and data of what runs on the host

10.X.Y.0/24 is drawn at random among the /24s that no route and no address of the root
namespace overlaps (under a lock, so that two networks never draw the same). There is no
default route in a host, no NAT and no forwarding set up: a host reaches the other hosts and
the test process, nothing else, and its 127.0.0.1 is its own loopback. Interfaces get no IPv6
address (`addrgenmode none`). The machine's firewall must let bridged IPv4 through (with
`br_netfilter` loaded, a FORWARD policy of DROP, as Docker sets it, would cut every host off).

Processes: `Host.run` starts a command under `ip netns exec <netns>` (which execs it: `pid` is
the command's own) in its own process group, output appended to `<host dir>/<name>.log`, and
returns once the process is in the host's namespace (a kill right after it finds it);
`Host.zookeeper` and `Host.broker` start the ZooKeeperServer and BrokerProcess of this package
bound to the host's address. The processes "on a host" are every process whose network namespace
is the host's (found in /proc), whoever started them.

Faults, each one call, undone by its pair, recorded in `history` (wall and monotonic time):

    cut(h) / heal(h)        `ip link set lbh..-v<i> down` / `up`: h's bridge port is down, every
                            frame to or from h is dropped, silently (senders time out; after the
                            ARP entry expires they get "no route to host"), h's sockets stay open
    cut_between(a, b)       in a's namespace `ip rule add pref 10 from <b> blackhole`, in b's the
      / heal_between(a, b)  same for a: each drops what arrives from the other before it is
                            delivered (established connections stall, new ones time out); the
                            rest of the network is untouched. Each host's `lookup local` rule is
                            moved from pref 0 to 100 at setup so that these rules come first.
                            Either side may be `net.tester` (the test process): only the host's
                            side then drops, which stops every TCP connection between them
    pause(h) / resume(h)    SIGSTOP / SIGCONT to every process on h (processes started on h
                            later are not paused)
    kill(h)                 SIGKILL to every process on h; its files stay, so a broker started
                            again (`broker.start()`) finds its log.dir

Cleanup cannot be forgotten: `close()` (the context manager's exit, or the pytest fixture's
teardown) heals, resumes, stops every process it started (SIGTERM, then SIGKILL by PID), kills
whatever else is left on its hosts, deletes the veths, the namespaces and the bridge, then the
state file; nothing of it is left when it returns. At interpreter exit a network not closed is removed the same
way (without the graceful stop). A run that died before either (SIGKILL, a crash) leaves its state
file, with a dead owner: `sweep()` (run by every `Network.start()`, or
`python -m harness.hosts sweep` from the checkout) removes what such files name, and never touches a
network whose owner lives, nor any name that no state file of ours lists.

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip`; `start()` raises
HostsUnavailableError when they are missing, and tests skip on it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import ipaddress
import json
import logging
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZooKeeperServer

log = logging.getLogger(__name__)

PREFIX = "lbh"  # every name this module makes starts with it, then 6 hex digits
STATE_DIR = Path("/run/logbroker-hosts")
NETNS_DIR = Path("/run/netns")  # where `ip netns add` mounts the namespaces
ZOOKEEPER_PORT = 2181  # every host has its own ports: the usual ones are free
BROKER_PORT = 9092
MAX_HOSTS = 250  # .2 .. .251 of the /24
_PARTIAL_CUT_PREF = 10  # `ip rule` preference of a cut_between: before `lookup local` (100)
_LOCAL_PREF = 100
_NAME = re.compile(rf"^{PREFIX}[0-9a-f]{{6}}$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_NOT_PERMITTED = ("Operation not permitted", "Permission denied")


class HostsError(RuntimeError):
    """An `ip` command or a cleanup step failed: the message names the command and its output."""


class HostsUnavailableError(HostsError):
    """Network namespaces cannot be made here (not root, no `ip`): tests skip with this reason."""


@dataclass(frozen=True)
class NetworkEvent:
    """One fault or its undoing, as it took effect (recorded after the call did its work)."""

    time: float  # time.time()
    monotonic: float  # time.monotonic(), comparable with a test's own readings
    action: str  # cut, heal, cut_between, heal_between, pause, resume, kill
    hosts: tuple[str, ...]
    pids: tuple[int, ...] = ()  # the processes signalled (pause, resume, kill)


@dataclass(frozen=True)
class Tester:
    """The test process's end of the network (the bridge's address), for `cut_between`."""

    name: str
    address: str


# -- the `ip` command ---------------------------------------------------------------------------


@functools.cache
def _ip_binary() -> str:
    found = shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if os.access(p, os.X_OK)), None
    )
    if found is None:
        raise HostsUnavailableError(
            "iproute2's `ip` command is not installed (apt-get install iproute2)"
        )
    return found


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [_ip_binary(), *args]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        message = f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}"
        if any(text in done.stderr for text in _NOT_PERMITTED):
            raise HostsUnavailableError(
                f"network namespaces are not permitted here (run as root): {message}"
            )
        raise HostsError(message)
    return done


# -- processes in a namespace -------------------------------------------------------------------


def namespace_pids(namespace: str) -> list[int]:
    """PIDs of the processes whose network namespace is ``namespace`` (like `ip netns pids`)."""
    try:
        target = os.stat(NETNS_DIR / namespace)
    except FileNotFoundError:
        return []
    me = os.getpid()
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            ns = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:  # gone, or a zombie (no namespaces any more)
            continue
        if (ns.st_dev, ns.st_ino) == (target.st_dev, target.st_ino):
            pids.append(int(entry.name))
    return sorted(pids)


def _signal_all(namespace: str, sig: signal.Signals, rounds: int = 5) -> list[int]:
    """Send ``sig`` to every process in the namespace, again to any that appeared meanwhile
    (a fork between the scan and the signal); return the PIDs signalled."""
    signalled: set[int] = set()
    for _ in range(rounds):
        new = [pid for pid in namespace_pids(namespace) if pid not in signalled]
        if not new:
            break
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            signalled.add(pid)
    return sorted(signalled)


def _kill_all(namespace: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process in the namespace until none is left; return the PIDs killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while pids := namespace_pids(namespace):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed.update(pids)
        if time.monotonic() > deadline:
            raise HostsError(f"processes {pids} of {namespace} survived SIGKILL for {timeout:g} s")
        time.sleep(0.01)
    return sorted(killed)


def _wait_in_namespace(
    proc: subprocess.Popen[bytes], namespace: str, timeout: float = 10.0
) -> None:
    """Wait until ``proc`` is in the network namespace (or has exited)."""
    target = os.stat(NETNS_DIR / namespace)
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        with contextlib.suppress(OSError):
            ns = os.stat(f"/proc/{proc.pid}/ns/net")
            if (ns.st_dev, ns.st_ino) == (target.st_dev, target.st_ino):
                return
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise HostsError(f"pid {proc.pid} did not enter {namespace} within {timeout:g} s")
        time.sleep(0.001)


def _process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): a PID
    and its start time name one process, even after the PID is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


class HostProcess:
    """A command running on a host, in its own process group, output to ``log_path``."""

    def __init__(
        self,
        host: Host,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.host = host
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            out.write(f"==== on {host.name} ({host.address}): {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                [*host.command_prefix, *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                start_new_session=True,  # its own process group
            )
        # Popen returns once `ip` runs, still in the root namespace; until it has entered the
        # host's, a kill(host) or a sweep would not find it, and it would enter a namespace
        # nobody lists any more and run on there. So return only once it is on the host.
        _wait_in_namespace(self.proc, host.namespace)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit; return the exit code (negative: killed by that signal)."""
        return self.proc.wait(timeout)

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM the process group, wait up to ``timeout`` s, then SIGKILL; return the code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)  # a paused process cannot handle TERM
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL the process group and reap the process."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def __repr__(self) -> str:
        return f"HostProcess({self.host.name}, pid={self.pid}, {self.argv[:3]}...)"


@dataclass(eq=False)
class Host:
    """One host: a network namespace with one address on the network's bridge."""

    network: Network = field(repr=False)
    index: int
    name: str
    address: str
    namespace: str
    veth: str  # the root namespace's end of its cable
    directory: Path

    @property
    def command_prefix(self) -> list[str]:
        """Run a command on this host: ``[*host.command_prefix, program, args...]``."""
        return [_ip_binary(), "netns", "exec", self.namespace]

    def pids(self) -> list[int]:
        """Every process on this host right now."""
        return namespace_pids(self.namespace)

    def run(
        self,
        argv: Sequence[str],
        *,
        name: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> HostProcess:
        """Start ``argv`` on this host; output goes to ``<host dir>/<name>.log``."""
        self.network._check_open()
        process = HostProcess(self, argv, self.directory / f"{name}.log", env=env, cwd=cwd)
        self.network._own(lambda: process.terminate(5.0))
        return process

    def zookeeper(
        self, port: int = ZOOKEEPER_PORT, *, tick_time_ms: int = 500, start: bool = True
    ) -> ZooKeeperServer:
        """A ZooKeeperServer on this host's address, data in ``<host dir>/zookeeper``
        (sessions of 2 to 20 ticks)."""
        self.network._check_open()
        server = ZooKeeperServer(
            self.directory / "zookeeper",
            port,
            host=self.address,
            tick_time_ms=tick_time_ms,
            command_prefix=self.command_prefix,
        )
        self.network._own(lambda: server.stop(5.0))
        return server.start() if start else server

    def broker(
        self,
        broker_id: int,
        zk_connect: str | None,
        *,
        port: int = BROKER_PORT,
        overrides: Mapping[str, str] | None = None,
        start: bool = True,
    ) -> BrokerProcess:
        """A BrokerProcess bound to, and registering, this host's address; its files in
        ``<host dir>/broker-<id>``, kept across kill and start."""
        self.network._check_open()
        broker = BrokerProcess(
            self.directory / f"broker-{broker_id}",
            broker_id=broker_id,
            zk_connect=zk_connect,
            port=port,
            overrides=overrides,
            host=self.address,
            command_prefix=self.command_prefix,
        )
        self.network._own(lambda: broker.stop(timeout=5.0))
        return broker.start() if start else broker


# -- the network --------------------------------------------------------------------------------


class Network:
    """A bridge, ``hosts`` network namespaces on it, and the faults between them.

    ``hosts`` is a count (hosts named h0, h1, ...) or a list of names (letters, digits, ``._-``).
    Nothing is made before ``start()``.
    """

    def __init__(self, directory: Path, hosts: int | Sequence[str] = 3) -> None:
        names = [f"h{i}" for i in range(hosts)] if isinstance(hosts, int) else list(hosts)
        if not 1 <= len(names) <= MAX_HOSTS:
            raise ValueError(f"a network has 1 to {MAX_HOSTS} hosts, got {len(names)}")
        for name in names:
            if not _HOST_NAME.match(name) or name == "test":
                raise ValueError(
                    f"host name {name!r}: letters, digits, '.', '_', '-' (at most 32), not 'test'"
                )
        if len(set(names)) != len(names):
            raise ValueError(f"host names must differ, got {names}")
        self.directory = Path(directory).absolute()
        self.id = secrets.token_hex(3)
        self.bridge = f"{PREFIX}{self.id}"
        self._names = names
        self.hosts: list[Host] = []
        self.subnet: ipaddress.IPv4Network | None = None
        self.tester: Tester | None = None
        self.history: list[NetworkEvent] = []
        self._lock = threading.RLock()
        self._cut: set[str] = set()  # host names
        self._cut_between: set[frozenset[str]] = set()  # pairs of names (one may be "test")
        self._paused: set[str] = set()
        self._stoppers: list[Callable[[], object]] = []
        self._state_path = STATE_DIR / f"{self.bridge}.json"
        self._finalizer: weakref.finalize[..., Network] | None = None
        self._started = False
        self._closed = False

    # -- names ---------------------------------------------------------------------------------

    @property
    def namespaces(self) -> list[str]:
        return [f"{self.bridge}-n{i}" for i in range(len(self._names))]

    @property
    def veths(self) -> list[str]:
        return [f"{self.bridge}-v{i}" for i in range(len(self._names))]

    @property
    def test_address(self) -> str:
        """The test process's address on the bridge (every host reaches it)."""
        if self.tester is None:
            raise RuntimeError("the network is made at start(); start it first")
        return self.tester.address

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no host {name!r} in this network (hosts: {', '.join(self._names)})")

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> Self:
        """Make the bridge, the namespaces and the cables; return self.

        Removes leftovers of crashed runs first (`sweep`). Raises HostsUnavailableError when
        namespaces cannot be made here; on any other failure, undoes what it made and raises.
        """
        if self._started:
            return self
        _ip_binary()
        if os.geteuid() != 0:
            raise HostsUnavailableError(
                f"network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); euid is {os.geteuid()}"
            )
        sweep()
        self._started = True
        self._write_state()
        # From here on, a crash leaves the state file for the next sweep, and an exit without
        # close() removes everything.
        self._finalizer = weakref.finalize(
            self, _remove_network, self.bridge, self.namespaces, self._state_path
        )
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every process, delete every namespace, cable and the bridge. Idempotent.

        Raises HostsError at the end if something could not be removed (after trying all)."""
        with self._lock:
            if self._closed or not self._started:
                self._closed = True
                return
            self._closed = True
        problems: list[str] = []
        # Heal and resume first, so that processes can shut down cleanly (a broker deletes its
        # ZooKeeper nodes on the way out).
        try:
            self._heal_everything()
        except HostsError as exc:
            problems.append(str(exc))
        for namespace in self.namespaces:
            _signal_all(namespace, signal.SIGCONT)
        for stop in reversed(self._stoppers):
            try:
                stop()
            except Exception as exc:  # one stuck process must not keep the others running
                problems.append(f"stopping a process: {exc!r}")
        self._stoppers.clear()
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        problems += _remove_network(self.bridge, self.namespaces, self._state_path)
        if problems:
            raise HostsError("cleanup of network " + self.bridge + ": " + "; ".join(problems))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Network({self.bridge}, {self.subnet}, hosts={self._names})"

    # -- faults --------------------------------------------------------------------------------

    def cut(self, host: Host) -> None:
        """Cut ``host`` off from every other host and from the test process (link down)."""
        with self._lock:
            self._check_host(host)
            if host.name in self._cut:
                raise ValueError(f"host {host.name} is already cut")
            _ip("link", "set", "dev", host.veth, "down")
            self._cut.add(host.name)
            self._record("cut", host.name)

    def heal(self, host: Host) -> None:
        """Undo `cut(host)`: its cable is up again."""
        with self._lock:
            self._check_host(host)
            if host.name not in self._cut:
                raise ValueError(f"host {host.name} is not cut")
            _ip("link", "set", "dev", host.veth, "up")
            self._cut.discard(host.name)
            self._record("heal", host.name)

    def cut_between(self, a: Host | Tester, b: Host | Tester) -> None:
        """Drop the traffic between ``a`` and ``b`` only (either may be ``net.tester``)."""
        with self._lock:
            pair = self._pair(a, b)
            if pair in self._cut_between:
                raise ValueError(f"{a.name} and {b.name} are already cut from each other")
            for here, there in ((a, b), (b, a)):
                if isinstance(here, Host):
                    _ip("-n", here.namespace, "rule", "add", *self._blackhole(there))
            self._cut_between.add(pair)
            self._record("cut_between", a.name, b.name)

    def heal_between(self, a: Host | Tester, b: Host | Tester) -> None:
        """Undo `cut_between(a, b)`."""
        with self._lock:
            pair = self._pair(a, b)
            if pair not in self._cut_between:
                raise ValueError(f"{a.name} and {b.name} are not cut from each other")
            for here, there in ((a, b), (b, a)):
                if isinstance(here, Host):
                    _ip("-n", here.namespace, "rule", "del", *self._blackhole(there))
            self._cut_between.discard(pair)
            self._record("heal_between", a.name, b.name)

    def pause(self, host: Host) -> list[int]:
        """SIGSTOP every process on ``host``; return their PIDs."""
        with self._lock:
            self._check_host(host)
            if host.name in self._paused:
                raise ValueError(f"host {host.name} is already paused")
            pids = _signal_all(host.namespace, signal.SIGSTOP)
            self._paused.add(host.name)
            self._record("pause", host.name, pids=pids)
            return pids

    def resume(self, host: Host) -> list[int]:
        """SIGCONT every process on ``host``; return their PIDs."""
        with self._lock:
            self._check_host(host)
            if host.name not in self._paused:
                raise ValueError(f"host {host.name} is not paused")
            pids = _signal_all(host.namespace, signal.SIGCONT)
            self._paused.discard(host.name)
            self._record("resume", host.name, pids=pids)
            return pids

    def kill(self, host: Host) -> list[int]:
        """SIGKILL every process on ``host`` (paused or not) and wait until they are gone;
        return their PIDs. Files stay; the process objects can be started again."""
        with self._lock:
            self._check_host(host)
            pids = _kill_all(host.namespace)
            self._paused.discard(host.name)
            self._record("kill", host.name, pids=pids)
            return pids

    def heal_all(self) -> None:
        """Undo every cut, partial cut and pause in force (each recorded as usual)."""
        with self._lock:
            for name in sorted(self._paused):
                self.resume(self.host(name))
            for pair in sorted(self._cut_between, key=sorted):
                a, b = (self._party(name) for name in sorted(pair))
                self.heal_between(a, b)
            for name in sorted(self._cut):
                self.heal(self.host(name))

    @property
    def faults(self) -> dict[str, list[str]]:
        """The faults in force: {"cut": [...], "cut_between": ["a|b", ...], "paused": [...]}."""
        with self._lock:
            return {
                "cut": sorted(self._cut),
                "cut_between": sorted("|".join(sorted(pair)) for pair in self._cut_between),
                "paused": sorted(self._paused),
            }

    # -- internals -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._started or self._closed:
            raise RuntimeError(f"network {self.bridge} is not running (start() it; not closed)")

    def _check_host(self, host: Host) -> None:
        self._check_open()
        if host.network is not self:
            raise ValueError(f"host {host.name} belongs to another network")

    def _pair(self, a: Host | Tester, b: Host | Tester) -> frozenset[str]:
        for party in (a, b):
            if isinstance(party, Host):
                self._check_host(party)
            elif party != self.tester:
                raise ValueError(f"{party!r} is neither a host of this network nor its tester")
        if a.name == b.name:
            raise ValueError(f"cut_between needs two different parties, got {a.name} twice")
        if not (isinstance(a, Host) or isinstance(b, Host)):
            raise ValueError("cut_between needs at least one host")
        return frozenset((a.name, b.name))

    def _party(self, name: str) -> Host | Tester:
        if self.tester is not None and name == self.tester.name:
            return self.tester
        return self.host(name)

    @staticmethod
    def _blackhole(source: Host | Tester) -> list[str]:
        return ["pref", str(_PARTIAL_CUT_PREF), "from", f"{source.address}/32", "blackhole"]

    def _record(self, action: str, *hosts: str, pids: Sequence[int] = ()) -> None:
        event = NetworkEvent(time.time(), time.monotonic(), action, hosts, tuple(pids))
        self.history.append(event)
        log.info("network %s: %s %s %s", self.bridge, action, " ".join(hosts), list(pids) or "")

    def _own(self, stop: Callable[[], object]) -> None:
        with self._lock:
            self._stoppers.append(stop)

    def _heal_everything(self) -> None:
        """What close() does first: every fault off, nothing recorded."""
        with self._lock:
            for name in self._cut:
                _ip("link", "set", "dev", self.host(name).veth, "up", check=False)
            for pair in self._cut_between:
                parties = [self._party(name) for name in pair]
                for here, there in (parties, parties[::-1]):
                    if isinstance(here, Host):
                        _ip(
                            "-n",
                            here.namespace,
                            "rule",
                            "del",
                            *self._blackhole(there),
                            check=False,
                        )
            self._cut.clear()
            self._cut_between.clear()
            self._paused.clear()

    def _write_state(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        state = {
            "owner_pid": os.getpid(),
            "owner_start": _process_start_time(os.getpid()),
            "bridge": self.bridge,
            "namespaces": self.namespaces,
            "directory": str(self.directory),
            "created": time.time(),
        }
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        tmp.replace(self._state_path)

    def _make(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with _state_lock():  # two networks must not draw the same subnet
            self.subnet = _free_subnet()
            bridge_address = self.subnet.network_address + 1
            _ip("link", "add", "name", self.bridge, "type", "bridge")
            _ip("link", "set", "dev", self.bridge, "addrgenmode", "none")
            _ip("address", "add", f"{bridge_address}/24", "dev", self.bridge)
            _ip("link", "set", "dev", self.bridge, "up")
        self.tester = Tester("test", str(bridge_address))
        for i, (name, namespace, veth) in enumerate(
            zip(self._names, self.namespaces, self.veths, strict=True)
        ):
            address = str(self.subnet.network_address + 2 + i)
            _ip("netns", "add", namespace)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _ip("link", "set", "dev", veth, "addrgenmode", "none")
            _ip("link", "set", "dev", veth, "master", self.bridge, "up")
            inside = ("-n", namespace)
            _ip(*inside, "link", "set", "dev", "eth0", "addrgenmode", "none")
            _ip(*inside, "address", "add", f"{address}/24", "dev", "eth0")
            _ip(*inside, "link", "set", "dev", "eth0", "up")
            _ip(*inside, "link", "set", "dev", "lo", "up")
            _ip(*inside, "rule", "add", "pref", str(_LOCAL_PREF), "lookup", "local")
            _ip(*inside, "rule", "del", "pref", "0", "lookup", "local")
            directory = self.directory / name
            directory.mkdir(parents=True, exist_ok=True)
            self.hosts.append(Host(self, i, name, address, namespace, veth, directory))


@contextlib.contextmanager
def _state_lock() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _free_subnet(attempts: int = 200) -> ipaddress.IPv4Network:
    """A random 10.X.Y.0/24 that no route (any table) and no address of this namespace overlaps."""
    taken: list[ipaddress.IPv4Network] = []
    routes = json.loads(_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]")
    for route in routes:
        if route.get("dst") not in (None, "default"):
            taken.append(ipaddress.IPv4Network(route["dst"], strict=False))
    for link in json.loads(_ip("-j", "-4", "address", "show").stdout or "[]"):
        for info in link.get("addr_info", []):
            taken.append(
                ipaddress.IPv4Network(f"{info['local']}/{info.get('prefixlen', 32)}", strict=False)
            )
    rng = random.SystemRandom()
    for _ in range(attempts):
        candidate = ipaddress.IPv4Network(f"10.{rng.randrange(256)}.{rng.randrange(256)}.0/24")
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise HostsError(f"no free 10.X.Y.0/24 after {attempts} draws (routes: {taken})")


def _remove_network(bridge: str, namespaces: Sequence[str], state_path: Path) -> list[str]:
    """Kill what runs in the namespaces, delete the veths, the namespaces and the bridge, then the
    state file; return what could not be done (empty when all went)."""
    problems = []
    for namespace in namespaces:
        try:
            _kill_all(namespace)
        except HostsError as exc:
            problems.append(str(exc))
        # A namespace is torn down in the background after `ip netns delete`, its end of the
        # veth with it: delete the veth first, so that nothing of ours is left on return.
        bridge_name, _, index = namespace.rpartition("-n")
        veth = f"{bridge_name}-v{index}"
        if Path(f"/sys/class/net/{veth}").exists():
            done = _ip("link", "delete", "dev", veth, check=False)
            if done.returncode != 0:
                problems.append(f"ip link delete {veth}: {done.stderr.strip()}")
        if (NETNS_DIR / namespace).exists():
            done = _ip("netns", "delete", namespace, check=False)
            if done.returncode != 0:
                problems.append(f"ip netns delete {namespace}: {done.stderr.strip()}")
    if Path(f"/sys/class/net/{bridge}").exists():
        done = _ip("link", "delete", "dev", bridge, check=False)
        if done.returncode != 0:
            problems.append(f"ip link delete {bridge}: {done.stderr.strip()}")
    if not problems:
        state_path.unlink(missing_ok=True)
    return problems


def sweep() -> list[str]:
    """Remove the networks of runs that died without cleaning up; return their bridge names.

    Only networks with a state file in STATE_DIR whose owner process is gone (its PID dead or
    reused by another process) are removed, and only the names that file lists with this
    module's prefix."""
    removed: list[str] = []
    if not STATE_DIR.is_dir():
        return removed
    for path in sorted(STATE_DIR.glob(f"{PREFIX}*.json")):
        try:
            state = json.loads(path.read_text())
            bridge = str(state["bridge"])
            namespaces = [str(ns) for ns in state["namespaces"]]
            owner, started = int(state["owner_pid"]), state.get("owner_start")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("sweep: skipping unreadable %s: %s", path, exc)
            continue
        if _process_start_time(owner) == started and started is not None:
            continue  # its owner runs: not a leftover
        if not _NAME.match(bridge) or not all(
            re.fullmatch(rf"{re.escape(bridge)}-n\d+", ns) for ns in namespaces
        ):
            log.warning(
                "sweep: %s names something not ours (%s, %s); left alone", path, bridge, namespaces
            )
            continue
        problems = _remove_network(bridge, namespaces, path)
        if problems:
            log.warning("sweep: could not remove all of %s: %s", bridge, "; ".join(problems))
        else:
            log.info("sweep: removed %s (owner pid %d is gone)", bridge, owner)
            removed.append(bridge)
    return removed


def our_names() -> dict[str, list[str]]:
    """Namespaces and links with this module's prefix that exist now (for checks and sweeps)."""
    namespaces = (
        sorted(
            p.name
            for p in NETNS_DIR.glob(f"{PREFIX}*")
            if re.match(rf"^{PREFIX}[0-9a-f]{{6}}-", p.name)
        )
        if NETNS_DIR.is_dir()
        else []
    )
    links = sorted(
        p.name
        for p in Path("/sys/class/net").iterdir()
        if re.match(rf"^{PREFIX}[0-9a-f]{{6}}", p.name)
    )
    return {"namespaces": namespaces, "links": links}


def main(argv: list[str] | None = None) -> None:
    """`sweep`: remove networks of dead runs; `list`: show what exists with our prefix."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("command", choices=("sweep", "list"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "sweep":
        removed = sweep()
        print(f"removed {len(removed)} network(s) of dead runs: {' '.join(removed) or '-'}")
    print(json.dumps(our_names(), indent=1))


if __name__ == "__main__":
    main()
