"""What the benchmark's engine (run.py), its workers (worker.py) and the systems share.

Nothing here is imported by the library: bench/ is a harness beside the project, not part
of it. Throughput is timed with `time.perf_counter()`; the one-way latency with
`time.monotonic_ns()` (CLOCK_MONOTONIC: one clock for every process of the machine, so a
producer's send time and a consumer's receive time compare).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
LOOPBACK = "127.0.0.1"


class BenchError(RuntimeError):
    """A server would not start, a workload failed, a result does not add up."""


# -- payloads -------------------------------------------------------------------------------


POOL = 1000  # distinct payloads, cycled


def payload(size: int) -> bytes:
    """Filler bytes (text) for frames and headers that carry no message."""
    return (b"logbroker-bench " * (size // 16 + 1))[:size]


def payloads(size: int, count: int = POOL) -> list[bytes]:
    """`count` distinct random payloads of `size` bytes, the same in every process.

    Random, so that no system's storage can compress them (Redis' RDB compresses stream
    nodes with LZF: identical payloads would shrink to almost nothing on its disk), and
    distinct within any run of 1000 messages. Producers cycle through them.
    """
    rng = random.Random(size)
    return [rng.randbytes(size) for _ in range(count)]


def pool_count(size: int) -> int:
    """How many distinct payloads of `size` bytes a size-sweep producer cycles: 1000, or
    fewer for large messages (at most ~20 MB of them, never fewer than 50: one batch)."""
    return max(50, min(POOL, 20_000_000 // size))


def batches(pool: list[bytes], batch: int) -> list[list[bytes]]:
    """The pool cut into consecutive batches (the pool's size is a multiple of 50)."""
    return [pool[i : i + batch] for i in range(0, len(pool) - batch + 1, batch)]


def cycled(items: Sequence[T], n: int) -> Iterator[T]:
    """The first n items of items, items, items, ..."""
    return itertools.islice(itertools.cycle(items), n)


# -- one-way latency (the 2014 post's end-to-end latency) -----------------------------------
#
# A producer process and a consumer process; the consumer is already waiting on the system
# (XREAD BLOCK, a push consumer, a STOMP subscription, a waiting FETCH) before each send.
# The producer stamps the payload with time.monotonic_ns() just before its send call; the
# consumer subtracts it from its own monotonic_ns() the moment its client hands the payload
# over. CLOCK_MONOTONIC is one clock for every process of a Linux machine, so the two
# readings compare. One message in flight: the consumer acknowledges each message over a
# Unix socket (untimed) and the producer sends the next one a short pause after that, so that
# the consumer has asked the system for the next message again by then.

STAMP = struct.Struct(">qq")  # sequence number, send time (monotonic ns)
ONE_WAY_PAUSE_S = 0.0003  # after an ack: the consumer is back waiting before the next send


def stamped(template: bytearray, seq: int) -> bytes:
    """The payload for message `seq`, stamped with the time now (call just before send)."""
    STAMP.pack_into(template, 0, seq, time.monotonic_ns())
    return bytes(template)


def stamp_template(size: int) -> bytearray:
    return bytearray(_FILL[size])


def one_way_consumer(
    total: int,
    warmup: int,
    receive: Callable[[], bytes | memoryview | tuple[bytes, int]],
    ack_path: str,
    ready: Callable[[], None],
) -> dict[str, list[float]]:
    """The consumer's side: `receive` blocks until the next message is handed over (or
    returns (payload, monotonic_ns) read in the callback a client's own thread called)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(ack_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(ack_path)
    listener.listen(1)
    ready()  # subscribed and listening: the engine starts the producer now
    listener.settimeout(120)
    ack, _ = listener.accept()
    ack.settimeout(None)
    now = time.monotonic_ns
    unpack = STAMP.unpack_from
    out: list[float] = []
    try:
        for i in range(total):
            got = receive()
            t1 = now()
            # a client that hands messages to a callback in its own thread: the callback's time
            data, t1 = got if isinstance(got, tuple) else (got, t1)
            seq, t0 = unpack(data, 0)
            if seq != i:
                raise BenchError(f"latency: expected message {i}, got {seq}")
            if i >= warmup:
                out.append((t1 - t0) / 1e6)
            ack.send(b"k")
    finally:
        ack.close()
        listener.close()
    return {"latencies_ms": out}


def one_way_producer(
    total: int, size: int, send: Callable[[bytes], object], ack_path: str
) -> dict[str, int]:
    """The producer's side: one stamped message at a time, the next after the consumer's ack."""
    ack = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ack.connect(ack_path)
    template = stamp_template(size)
    pause = ONE_WAY_PAUSE_S
    try:
        for i in range(total):
            send(stamped(template, i))
            if not ack.recv(1):
                raise BenchError("latency: the consumer went away")
            time.sleep(pause)
    finally:
        ack.close()
    return {"messages": total}


class _Fill(dict[int, bytes]):
    def __missing__(self, size: int) -> bytes:
        self[size] = value = random.Random(-size).randbytes(size)
        return value


_FILL = _Fill()


_PAGES = (
    "/feed",
    "/jobs/view",
    "/in/profile",
    "/groups",
    "/search/results",
    "/messaging",
    "/notifications",
    "/company",
    "/learning/course",
    "/pulse/article",
)
_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 13_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/16.6 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0",
)
_EVENTS = ("page_view", "page_view", "page_view", "click", "search", "impression", "share")


def activity_events(count: int, seed: int = 7) -> list[bytes]:
    """`count` realistic JSON activity events (page views, clicks, searches), 250-450 bytes.

    What LinkedIn's activity stream carried (the paper's §4): who, what page, when, from
    where, with which browser; ids and times vary, keys and most strings repeat, so the text
    compresses the way real event logs do.
    """
    rng = random.Random(seed)
    t0 = 1_700_000_000_000
    out = []
    for i in range(count):
        kind = rng.choice(_EVENTS)
        event: dict[str, object] = {
            "header": {
                "time": t0 + i * 3 + rng.randrange(3),
                "server": f"app{rng.randrange(1, 40):03d}.prod",
                "service": "frontend",
                "guid": f"{rng.getrandbits(128):032x}",
            },
            "event": kind,
            "member_id": rng.randrange(1, 300_000_000),
            "page_key": rng.choice(_PAGES),
            "session_id": f"{rng.getrandbits(64):016x}",
            "ip": f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}",
            "user_agent": rng.choice(_AGENTS),
            "locale": rng.choice(("en_US", "en_GB", "de_DE", "fr_FR", "pt_BR")),
        }
        if kind == "search":
            event["query"] = " ".join(
                rng.choice(
                    ("data", "engineer", "python", "kafka", "remote", "senior", "manager", "sales")
                )
                for _ in range(3)
            )
        elif kind in ("click", "impression"):
            event["item"] = {"type": rng.choice(("job", "post", "ad")), "id": rng.randrange(10**9)}
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


# -- statistics -----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


# -- files, ports, processes ----------------------------------------------------------------


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (st_blocks, as `du`): preallocated, sparse
    journal files (KahaDB's) count only what was written."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


# The one-way latency's "apart" placement: the server on its own core, the producer and the
# consumer (which take turns: one message in flight) on another. Redis's benchmark notes say
# results are non-deterministic while the scheduler moves client and server between cores,
# and that process placement (taskset) is needed for deterministic results.
SERVER_CPUS = frozenset({0})
CLIENT_CPUS = frozenset({1})


def can_place() -> bool:
    cpus = os.sched_getaffinity(0)
    return (SERVER_CPUS | CLIENT_CPUS) <= cpus  # noqa: SIM300 (a subset, read as one)


def place(pid: int, cpus: Iterable[int]) -> None:
    """Bind every thread of `pid` and of its descendants to `cpus` (taskset -a -p); threads
    started later inherit it. A process or thread that ended meanwhile is skipped."""
    import psutil

    wanted = set(cpus)
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            threads = proc.threads()
        except psutil.NoSuchProcess:
            continue
        for thread in threads:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(thread.id, wanted)


def settled_disk_bytes(path: Path, timeout: float = 20.0, interval: float = 0.5) -> int:
    """`disk_bytes(path)` once it stopped changing for three looks in a row (servers write
    behind: RabbitMQ's queue index, KahaDB's journal, the page cache's delayed allocation)."""
    deadline = time.monotonic() + timeout
    last, same = -1, 0
    while True:
        size = disk_bytes(path)
        same = same + 1 if size == last else 0
        if same >= 2 or time.monotonic() > deadline:
            return size
        last = size
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
    interval: float = 0.05,
) -> None:
    """Poll `check` until true; BenchError naming `what` (and the log's tail) on timeout or
    when `proc` exited."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            if check():
                return
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{what}: the process exited with {proc.returncode}{tail(log)}")
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not ready after {timeout:g} s{tail(log)}")
        time.sleep(interval)


def port_open(port: int, host: str = LOOPBACK) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def tail(log: Path | None, lines: int = 20) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- last lines of {log}:\n" + "\n".join(text)


def spawn(
    argv: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a server in its own session (process group), output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def stop_pid(
    proc: subprocess.Popen | None, timeout: float = 30.0, sig: int = signal.SIGTERM
) -> int | None:
    """Stop one process we started, by its PID: `sig`, wait, then SIGKILL to its process
    group (it was started in a session of its own, so the group is only its children)."""
    if proc is None:
        return None
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    # Children left in its group (Erlang's inet_gethost, a JVM's helpers): end them too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def chunks(items: Sequence[bytes], size: int) -> Iterable[Sequence[bytes]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
