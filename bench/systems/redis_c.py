"""redis_c: the same Redis server driven by its C client (redis-benchmark): the server's ceiling.

A reference row, as the paper kept one for its peers, not a peer: no Python client parses
anything here, so what it measures is what redis-server itself does on this machine with a
client whose cost is near zero (redis-benchmark sends with hiredis' protocol writer and reads
every reply with hiredis' reader, in C).

Server: exactly redis's (systems/redis.py: AOF, appendfsync everysec, no RDB).

  produce  `redis-benchmark -c 1 -P B -n N XADD <stream> * d <200 bytes>`: one connection,
           B commands per write (B = the batch: 1 or 50), as redis-py's pipeline does
  consume  `redis-benchmark -c 1 -n N/1000 XRANGE <stream> - + COUNT 1000`: 1000 entries of
           the pre-loaded stream per request, parsed by hiredis' reader. Unlike XREAD from the
           last id, every request reads the same first 1000 entries (redis-benchmark cannot
           carry an id from one reply to the next request); Redis finds the start of a range in
           its radix tree in about the same time either way, so this is the read ceiling.
Other workloads (latency, groups, growth) have no C-client row.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from common import BenchError

from .redis import SETTINGS, Server  # noqa: F401
from .redis import versions as _redis_versions

# No disk row: its payloads are all the same 200 bytes, which an AOF rewrite (RDB preamble,
# LZF) compresses, so its bytes on disk would say nothing about redis's.
WORKLOADS = ("produce_batch50", "consume", "produce_batch1")
BATCHING = {
    1: "redis-benchmark -c 1 -P 1: one XADD per round trip",
    50: "redis-benchmark -c 1 -P 50: 50 XADDs per write",
}
CONSUMING = "redis-benchmark XRANGE - + COUNT 1000 (C client, hiredis reader)"


def available() -> tuple[bool, str]:
    if not shutil.which("redis-server") or not shutil.which("redis-benchmark"):
        return False, "redis-server / redis-benchmark are not installed (bench/install-peers.sh)"
    try:
        import redis  # noqa: F401  (versions() and drop() use redis-py)
    except ImportError:
        return False, "redis-py is not installed (bash bench/install-peers.sh)"
    return True, ""


def versions() -> dict[str, str]:
    out = _redis_versions()
    bench = subprocess.run(["redis-benchmark", "--version"], capture_output=True, text=True)
    out["client"] = f"redis-benchmark ({bench.stdout.strip() or 'C, hiredis'})"
    return out


def _rps(endpoint: dict[str, Any], requests: int, pipeline: int, command: list[str]) -> float:
    argv = [
        "redis-benchmark",
        "-h",
        endpoint["host"],
        "-p",
        str(endpoint["port"]),
        "-c",
        "1",
        "-n",
        str(requests),
        "-P",
        str(pipeline),
        "--csv",
        *command,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    rows = list(csv.reader(io.StringIO(done.stdout)))
    if done.returncode or len(rows) < 2:
        raise BenchError(f"redis-benchmark failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    return float(rows[-1][1])


class Client:
    def __init__(self, endpoint: dict[str, Any]) -> None:
        self.ep = endpoint

    def close(self) -> None:
        pass

    def produce(
        self,
        topic: str,
        n: int,
        size: int,
        batch: int,
        ready: Callable[[], None],
        wait_stored: bool = True,
    ) -> dict[str, Any]:
        n = n // batch * batch
        ready()
        t0 = time.perf_counter()
        rps = _rps(self.ep, n, batch, ["XADD", topic, "*", "d", "x" * size])
        return {"messages": n, "seconds": n / rps, "wall_seconds": time.perf_counter() - t0}

    def consume(
        self, topic: str, n: int, batch_bytes: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        requests = max(1, n // 1000)
        ready()
        rps = _rps(self.ep, requests, 1, ["XRANGE", topic, "-", "+", "COUNT", "1000"])
        return {"messages": requests * 1000, "seconds": requests / rps}

    def drop(self, topic: str) -> None:
        import redis

        r = redis.Redis(host=self.ep["host"], port=self.ep["port"])
        r.delete(topic)
        r.close()
