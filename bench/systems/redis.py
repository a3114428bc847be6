"""redis: Redis Streams, Debian's redis-server, append-only file fsynced every second.

Server: `redis-server --bind 127.0.0.1 --port N --dir W --appendonly yes --appendfsync
everysec --save ""`: the AOF is the persistence (the closest relative of a 0.7 log, which
also fsyncs on a timer); RDB snapshots are off so that no fork writes the whole dataset in
the middle of a measurement. Everything else is Redis' default, AOF rewrites included.

Client: redis-py with hiredis (its C reply parser, which redis-py uses whenever it is
installed and recommends: redis.utils.HIREDIS_AVAILABLE must be true or redis is skipped),
one XADD per message with the field "d" = the payload.
  produce  batch 1: `xadd` per message (one round trip each); batch 50: a non-transactional
           `pipeline()` of 50 XADDs, one round trip per 50
  consume  XREAD COUNT 1000 from the last id
  latency  one way: a producer process XADDs, a consumer process waits in XREAD BLOCK
  group    XREADGROUP ... NOACK (auto-acknowledge), COUNT 1000, one consumer per process
  sizes    pipelines of 50 XADDs of 10 B to 100 KB for a few seconds, as produce at batch 50
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    LOOPBACK,
    batches,
    cycled,
    free_port,
    one_way_consumer,
    one_way_producer,
    payload,
    payloads,
    pool_count,
    spawn,
    stop_pid,
    wait_for,
)

BATCHING = {
    1: "r.xadd(stream, {'d': payload}) per message, one round trip each",
    50: "r.pipeline(transaction=False) of 50 XADDs, one round trip per 50",
}
CONSUMING = "XREAD COUNT 1000 (~200 KB) from the last id"
SETTINGS = {
    "appendonly": "yes",
    "appendfsync": "everysec",
    "save": '"" (no RDB snapshots; the AOF is the persistence)',
    "auto-aof-rewrite-percentage / min-size": "100 / 64mb (defaults)",
    "maxmemory": "0 (default: no limit)",
}


def available() -> tuple[bool, str]:
    if not shutil.which("redis-server"):
        return False, "redis-server is not installed (bash bench/install-peers.sh)"
    try:
        import redis.utils
    except ImportError:
        return False, "redis-py is not installed (bash bench/install-peers.sh)"
    if not redis.utils.HIREDIS_AVAILABLE:
        # Without it redis-py parses every reply in Python and measures itself, not Redis.
        return False, "hiredis is not installed for redis-py (bash bench/install-peers.sh)"
    return True, ""


def versions() -> dict[str, str]:
    import redis

    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    return {
        "server": out.split(" sha=")[0].strip(),
        "client": f"redis-py {redis.__version__} with hiredis {_hiredis_version()}",
        "debian": _dpkg("redis-server"),
    }


def _hiredis_version() -> str:
    import hiredis

    return str(hiredis.__version__)


def _dpkg(package: str) -> str:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True
    )
    return out.stdout.strip()


class Server:
    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.proc: Any = None
        self.port = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = self.workdir / "redis.log"
        self.proc = spawn(
            [
                "redis-server",
                "--bind",
                LOOPBACK,
                "--port",
                str(self.port),
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                str(log),
            ],
            self.workdir / "redis.out",
        )

        def ping() -> bool:
            import redis

            return bool(redis.Redis(host=LOOPBACK, port=self.port).ping())

        wait_for(ping, 30, "redis-server", self.proc, log)

    @property
    def endpoint(self) -> dict[str, Any]:
        return {"host": LOOPBACK, "port": self.port}

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def stop(self) -> None:
        stop_pid(self.proc, timeout=30)


class Client:
    def __init__(self, endpoint: dict[str, Any]) -> None:
        import redis

        self._redis = redis
        self.ep = endpoint
        self._conns: list[Any] = []

    def _conn(self) -> Any:
        r = self._redis.Redis(host=self.ep["host"], port=self.ep["port"])
        self._conns.append(r)
        return r

    def close(self) -> None:
        for r in self._conns:
            r.close()

    def produce(
        self,
        topic: str,
        n: int,
        size: int,
        batch: int,
        ready: Callable[[], None],
        wait_stored: bool = True,
    ) -> dict[str, Any]:
        r = self._conn()
        r.ping()
        pool = [{b"d": p} for p in payloads(size)]
        ready()
        t0 = time.perf_counter()
        if batch == 1:
            xadd = r.xadd
            for fields in cycled(pool, n):
                xadd(topic, fields)
        else:
            pipe = r.pipeline(transaction=False)
            for group in cycled(batches(pool, batch), n // batch):  # type: ignore[arg-type]
                for fields in group:
                    pipe.xadd(topic, fields)
                pipe.execute()
        return {"messages": n // batch * batch, "seconds": time.perf_counter() - t0}

    def produce_for(
        self, topic: str, size: int, batch: int, seconds: float, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """The size sweep: pipelines of `batch` XADDs of `size` bytes for about `seconds`
        (as `produce` at batch 50; a 100 KB pipeline is 5 MB, far under Redis's limits)."""
        r = self._conn()
        r.ping()
        groups = batches([{b"d": p} for p in payloads(size, pool_count(size))], batch)  # type: ignore[arg-type]
        count = len(groups)
        pipe = r.pipeline(transaction=False)
        clock = time.perf_counter
        ready()
        t0 = clock()
        deadline = t0 + seconds
        sent = 0
        while True:
            for fields in groups[sent % count]:
                pipe.xadd(topic, fields)
            pipe.execute()
            sent += 1
            if clock() >= deadline:
                break
        t1 = clock()
        return {"messages": sent * batch, "seconds": t1 - t0, "payload_bytes": sent * batch * size}

    def load(self, topic: str, n: int, size: int, partitions: int = 1) -> dict[str, Any]:
        return self.produce(topic, n, size, 50, lambda: None)

    def consume(
        self,
        topic: str,
        n: int,
        batch_bytes: int,
        ready: Callable[[], None],
        count_per_read: int = 1000,
    ) -> dict[str, Any]:
        r = self._conn()
        r.ping()
        ready()
        last = b"0"
        count = nbytes = 0
        t0 = time.perf_counter()
        while count < n:
            reply = r.xread({topic: last}, count=count_per_read, block=1000)
            if not reply:
                continue
            entries = reply[0][1]
            for _id, fields in entries:
                count += 1
                nbytes += len(fields[b"d"])
            last = entries[-1][0]
        return {"messages": count, "seconds": time.perf_counter() - t0, "payload_bytes": nbytes}

    def latency_consume(
        self, topic: str, total: int, warmup: int, ack_path: str, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """The one-way latency's consumer: XREAD BLOCK 0 COUNT 1 from the last id seen."""
        r = self._conn()
        last = r.xadd(topic, {b"d": payload(64)})

        def receive() -> bytes:
            nonlocal last
            reply = r.xread({topic: last}, count=1, block=0)
            last, fields = reply[0][1][0]
            return fields[b"d"]  # type: ignore[no-any-return]

        return one_way_consumer(total, warmup, receive, ack_path, ready)

    def latency_produce(self, topic: str, total: int, size: int, ack_path: str) -> dict[str, Any]:
        r = self._conn()
        xadd = r.xadd
        return one_way_producer(total, size, lambda data: xadd(topic, {b"d": data}), ack_path)

    def group_consume(
        self,
        topic: str,
        group: str,
        members: int,
        expect: int,
        idle_s: float,
        ready: Callable[[], None],
        batch_bytes: int = 0,
    ) -> dict[str, Any]:
        r = self._conn()
        try:
            r.xgroup_create(topic, group, id="0", mkstream=True)
        except self._redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        name = f"c{id(self)}"
        ready()
        count = nbytes = 0
        t0 = time.perf_counter()
        t_last = t0
        while count < expect:
            reply = r.xreadgroup(group, name, {topic: ">"}, count=1000, noack=True)
            if not reply or not reply[0][1]:
                break  # preloaded: nothing left for anyone
            for _id, fields in reply[0][1]:
                count += 1
                nbytes += len(fields[b"d"])
            t_last = time.perf_counter()
        return {"messages": count, "seconds": t_last - t0, "payload_bytes": nbytes}

    def growth(
        self, topic: str, total_bytes: int, size: int, batch: int, window_bytes: int
    ) -> dict[str, Any]:
        r = self._conn()
        pool = [{b"d": p} for p in payloads(size)]
        pipe = r.pipeline(transaction=False)
        per_window = max(1, window_bytes // (size * batch))
        window_groups = list(cycled(batches(pool, batch), per_window))  # type: ignore[arg-type]
        windows = []
        stored = 0
        clock = time.perf_counter
        t_prev = clock()
        while stored < total_bytes:
            for group in window_groups:
                for fields in group:
                    pipe.xadd(topic, fields)
                pipe.execute()
            stored += per_window * batch * size
            now = clock()
            windows.append([stored, per_window * batch / (now - t_prev)])
            t_prev = now
        return {"windows": windows, "message_bytes": size}

    def drop(self, topic: str) -> None:
        r = self._conn()
        r.delete(topic)
        deadline = time.monotonic() + 5
        while r.exists(topic) and time.monotonic() < deadline:
            time.sleep(0.01)
