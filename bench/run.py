"""The broker benchmark: logbroker against RabbitMQ, ActiveMQ, Redis Streams and raw TCP.

    .venv/bin/python bench/run.py                 # the full run (make bench), ~30 minutes
    .venv/bin/python bench/run.py --quick         # seconds: the test suite's smoke run
    .venv/bin/python bench/run.py --systems logbroker,redis --reps 5 --growth-gb 1

Reproduces the paper's §5 (producer and consumer tests against ActiveMQ and RabbitMQ) and
the 2014 benchmark post on one machine, every system measured in the same invocation:

  1  produce_batch1, produce_batch50        a single producer, 200-byte messages (msgs/s)
  2  consume                                one consumer of pre-loaded messages, ~1000
                                            messages / 200 KB per pull (msgs/s)
  3  produce_and_consume                    one producer and one consumer at once; the
                                            consumer's rate (msgs/s)
  4  latency_p50, latency_p99, latency_p999 one-way (the 2014 post's end-to-end latency):
                                            from just before a producer process's send
                                            to a consumer process, already waiting, having
                                            the message; one in flight (ms); the server on
                                            CPU 0, producer and consumer on CPU 1 (taskset,
                                            as Redis's benchmark notes advise)
     latency_unpinned_{p50,p99,p999}        the same where the kernel's scheduler puts them
  5  disk_bytes_per_message,                bytes on disk per 200-byte message after
     disk_overhead_per_message              produce_batch50 settled, and that minus 200
  6  growth_first_100mb, growth_final,      producer throughput (batch 50) as stored data
     growth_ratio                           grows to --growth-gb (logbroker; tcp: plain
                                            file appends, the machine's limit) or
                                            --growth-peer-gb (peers)
  7  group_consume_1, group_consume_2       a consumer group of 1 and of 2 processes
                                            (peers: competing consumers on one queue)
  8  json_produce_{none,gzip,snappy},       logbroker only (no peer compresses): JSON
     json_consume_{none,gzip,snappy},       activity events, batch 50
     compression_ratio_{gzip,snappy}
  9  intake_first_100mb, intake_last_10pct, the broker's intake against the floor of its job:
     intake_overall, intake_ratio           prebuilt PRODUCE frames (sets of 50 x 200 B) over
                                            one socket until the log holds --intake-gb
                                            (logbroker), and the same frames to tcp's relay,
                                            which appends what it reads to a file on the same
                                            disk (MB/s of frames; overall: the whole run;
                                            intake_ratio: logbroker's last 10 % / the
                                            relay's, in the same repetition)
 10  size_{10,100,1000,10000,100000}b_      the 2014 post's "effect of message size":
     {records,mb,vs_relay}                  produce at batch 50 for --sweep-seconds per size
                                            (logbroker, redis; tcp: the relay); records/s,
                                            MB/s of payload, and MB/s / the relay's in the
                                            same repetition
 11  produce_batch50_{ssl,sasl_ssl},        logbroker only: 1 and 2 again over its SSL listener
     consume_{ssl,sasl_ssl}, and each       and over SASL_SSL (SCRAM-SHA-256 inside TLS, a
     as *_ratio                             broker of its own), right after PLAINTEXT's; the
                                            ratio: the rate / PLAINTEXT's in the same
                                            repetition (issue 46: ≥ 0.7 and ≥ 0.5 over SASL_SSL)

Systems: logbroker (its broker and ZooKeeper), rabbitmq, activemq, redis (each started from
Debian's package as our own process on 127.0.0.1 with data in the work directory; see
bench/systems/*.py for the exact settings and what "batch" means for each client), and tcp
(two Python processes and a socket: the machine's limit). Peers that are not installed are
skipped with a note (bash bench/install-peers.sh installs them).

Method: every workload runs in a fresh client process (bench/worker.py); the repetitions
are interleaved (rep 1 of every system, then rep 2, ...; the order rotates), each system's
servers are started fresh for each repetition and stopped by PID after it; growth runs once
per system at the end. Intake and the size sweep run after the blocks, in repetitions of
their own (interleaved, the order rotating, fresh servers for each repetition; the sweep
starts every system's server and then takes each size on each system in turn).
Reported: the median of the repetitions, min and max.

Writes to --output-dir (default bench/results; --quick: a new directory under $TMPDIR):
  summary.json   [{"system", "workload", "unit", "median", "min", "max", "reps", "run_id",
                   ...}], one run_id for the whole invocation
  summary.md     the table, ratios to the best peer, the goals; machine, versions, settings
  run.json       machine, versions, settings, parameters, raw values, series for the plots
  producer_throughput.png, consumer_throughput.png, latency.png, growth.png, intake.png,
  sizes.png
Nothing is asserted about speed anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import systems
from common import (
    BENCH_DIR,
    CLIENT_CPUS,
    SERVER_CPUS,
    BenchError,
    can_place,
    median,
    percentile,
    place,
    settled_disk_bytes,
)
from outputs import Run, spread, start_py_spy, stop_py_spy

SIZE = 200
ALL_CPUS = frozenset(os.sched_getaffinity(0))  # what the servers get back after a placement
ENTRY = SIZE + 10  # a logbroker entry: 10 bytes of header
FETCH_BYTES = 1000 * ENTRY  # "up to 1000 messages or about 200KB" per pull
THROUGHPUT = "msgs/s"
SKIPPABLE = (
    "produce_batch50",
    "consume",
    "disk",
    "produce_batch1",
    "produce_and_consume",
    "latency",
    "latency_unpinned",
    "group",
    "json",
    "secure",
)

# The size sweep (workload 10): the 2014 post's message sizes, every one at batch 50 (a
# 100 KB batch is a 5 MB request: logbroker's max.message.size is 1,000,000 bytes a payload,
# its max.socket.request.bytes 100 MiB; Redis takes 512 MB a bulk string).
SWEEP_SIZES = (10, 100, 1000, 10_000, 100_000)
SWEEP_BATCH = 50
INTAKE_SIZE, INTAKE_BATCH = 200, 50
RELAY = "tcp"  # the system whose intake and size rows are the relay's

# Messages per run, per system: each run lasts a few seconds on a 2-core machine (the
# paper's 10 million per run would take hours for the slower peers).
FULL = {
    "n": {
        "logbroker": 1_000_000,
        "tcp": 10_000_000,
        "redis": 500_000,
        "redis_c": 2_000_000,
        "rabbitmq": 200_000,
        "activemq": 150_000,
    },
    "n_batch1": {
        "logbroker": 300_000,
        "redis_c": 300_000,
        "tcp": 1_000_000,
        "redis": 150_000,
        "rabbitmq": 100_000,
        "activemq": 100_000,
    },
    "n_group": {"logbroker": 1_000_000, "redis": 500_000, "rabbitmq": 200_000, "activemq": 150_000},
    "latency": 10_000,
    "latency_warmup": 500,
    "json_messages": 300_000,
    "json_events": 20_000,
    "reps": 3,
    "growth_gb": 4.0,
    "growth_peer_gb": 1.0,
    "window_mb": 32,
    "peer_window_mb": 8,
    "intake_gb": 2.0,
    "intake_window_mb": 32,
    "sweep_seconds": 2.0,
    "sweep_sizes": SWEEP_SIZES,
    "sweep_batch": SWEEP_BATCH,
}
QUICK = {
    "n": {
        "logbroker": 20_000,
        "tcp": 20_000,
        "redis": 5_000,
        "redis_c": 5_000,
        "rabbitmq": 2_000,
        "activemq": 2_000,
    },
    "n_batch1": {
        "redis_c": 2_000,
        "logbroker": 5_000,
        "tcp": 5_000,
        "redis": 2_000,
        "rabbitmq": 1_000,
        "activemq": 1_000,
    },
    "n_group": {"logbroker": 10_000, "redis": 4_000, "rabbitmq": 2_000, "activemq": 2_000},
    "latency": 200,
    "latency_warmup": 20,
    "json_messages": 5_000,
    "json_events": 1_000,
    "reps": 1,
    "growth_gb": 0.01,
    "growth_peer_gb": 0.002,
    "window_mb": 1,
    "peer_window_mb": 0.5,
    "intake_gb": 0.01,
    "intake_window_mb": 1,
    "sweep_seconds": 0.05,
    "sweep_sizes": SWEEP_SIZES,
    "sweep_batch": SWEEP_BATCH,
}
WORKER_TIMEOUT_S = 1800


class Engine:
    def __init__(self, args: argparse.Namespace, cfg: dict[str, Any], run_id: str) -> None:
        self.args = args
        self.cfg = cfg
        self.run_id = run_id
        self.workdir: Path = args.workdir
        self.values: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.units: dict[str, str] = {}
        self.extra: dict[tuple[str, str], dict[str, Any]] = {}
        self.series: dict[str, Any] = {
            "latency": {},
            "latency_unpinned": {},
            "growth": {},
            "intake": {},
        }
        self.intake_final: dict[int, dict[str, float]] = {}
        self.size_mb: dict[tuple[int, int], dict[str, float]] = {}
        self.errors: list[str] = []
        self.running: list[Any] = []
        self.profile_dir: Path | None = None
        self.broker_pid: int | None = None

    # -- workers --------------------------------------------------------------------------

    def _spawn(
        self,
        system: str,
        action: str,
        endpoint: dict[str, Any],
        params: dict[str, Any],
        barrier: bool,
        tag: str,
    ) -> subprocess.Popen[str]:
        argv = [
            sys.executable,
            str(BENCH_DIR / "worker.py"),
            system,
            action,
            "--endpoint",
            json.dumps(endpoint),
            "--params",
            json.dumps(params),
        ]
        if barrier:
            argv.append("--barrier")
        if self.profile_dir is not None and system == "logbroker":
            argv += ["--profile", str(self.profile_dir / f"client-{tag}.pstats")]
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=BENCH_DIR,
        )

    @staticmethod
    def _wait_line(proc: subprocess.Popen[str], want: str) -> str:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(want):
                return line
        raise BenchError(f"worker exited before {want.strip()}")

    def _finish(self, proc: subprocess.Popen[str], what: str) -> dict[str, Any]:
        try:
            out, err = proc.communicate(timeout=WORKER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise BenchError(f"{what}: no result after {WORKER_TIMEOUT_S} s") from None
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        if not lines:
            raise BenchError(f"{what}: exit {proc.returncode}, no result\n{err[-3000:]}")
        result: dict[str, Any] = json.loads(lines[-1][7:])
        if "error" in result:
            raise BenchError(f"{what}: {result['error']}\n{err[-2000:]}")
        return result

    def together(
        self,
        system: str,
        endpoint: dict[str, Any],
        jobs: list[tuple[str, dict[str, Any]]],
        tag: str,
        at_go: Callable[[], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Start every job's process, wait until all are READY, say go to all at once
        (`at_go()` runs just before: bench/replication.py reads the brokers' CPU there)."""
        spy = self._spy(system, tag)
        procs = [
            self._spawn(system, action, endpoint, params, True, f"{tag}-{i}")
            for i, (action, params) in enumerate(jobs)
        ]
        try:
            for proc in procs:
                self._wait_line(proc, "READY")
            if at_go is not None:
                at_go()
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            return [self._finish(p, f"{system} {tag}") for p in procs]
        finally:
            stop_py_spy(spy)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def one_way(
        self, system: str, server: Any, topic: str, tag: str, apart: bool
    ) -> dict[str, Any]:
        """The one-way latency: a consumer process waiting on the system first, then a
        producer process; the consumer's result holds the latencies (common.one_way_*).
        `apart`: the server's processes on SERVER_CPUS and both clients on CLIENT_CPUS for
        the workload (the server is given every core back after it)."""
        endpoint = server.endpoint
        total = self.cfg["latency"] + self.cfg["latency_warmup"]
        ack_dir = Path(tempfile.mkdtemp(prefix="lbl-"))  # a Unix socket path stays short
        ack_path = str(ack_dir / "ack")
        spy = self._spy(system, tag)
        consumer = self._spawn(
            system,
            "latency_consume",
            endpoint,
            dict(topic=topic, total=total, warmup=self.cfg["latency_warmup"], ack_path=ack_path),
            False,
            f"{tag}-consumer",
        )
        producer = None
        server_pid = server.pids()[0]
        try:
            if apart:
                place(server_pid, SERVER_CPUS)
                place(consumer.pid, CLIENT_CPUS)
            self._wait_line(consumer, "READY")
            producer = self._spawn(
                system,
                "latency_produce",
                endpoint,
                dict(topic=topic, total=total, size=SIZE, ack_path=ack_path),
                False,
                f"{tag}-producer",
            )
            if apart:
                place(producer.pid, CLIENT_CPUS)
            self._finish(producer, f"{system} {tag} producer")
            return self._finish(consumer, f"{system} {tag} consumer")
        finally:
            stop_py_spy(spy)
            for p in (consumer, producer):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
            shutil.rmtree(ack_dir, ignore_errors=True)
            if apart:
                place(server_pid, ALL_CPUS)

    def one(
        self, system: str, action: str, endpoint: dict[str, Any], tag: str, **params: Any
    ) -> dict[str, Any]:
        spy = self._spy(system, tag) if action != "drop" else None
        try:
            proc = self._spawn(system, action, endpoint, params, False, tag)
            return self._finish(proc, f"{system} {tag}")
        finally:
            stop_py_spy(spy)

    def _spy(self, system: str, tag: str) -> subprocess.Popen[bytes] | None:
        """With --profile: py-spy samples the logbroker broker while a workload runs."""
        if self.profile_dir is None or system != "logbroker" or not self.broker_pid:
            return None
        spy = start_py_spy(self.broker_pid, self.profile_dir / f"broker-{tag}.txt")
        if spy is None:
            return None
        time.sleep(0.3)  # attached before the workload starts
        return spy

    # -- bookkeeping ----------------------------------------------------------------------

    def add(self, system: str, workload: str, unit: str, value: float, **extra: Any) -> None:
        self.values[(system, workload)].append(value)
        self.units[workload] = unit
        if extra:
            self.extra.setdefault((system, workload), {}).update(extra)
        shown = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"
        print(f"    {system:10} {workload:28} {shown:>14} {unit}", flush=True)

    def attempt(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BenchError as exc:
            msg = f"{what}: {exc}"
            self.errors.append(msg)
            print(f"    FAILED {msg}", flush=True)
            return None

    # -- one system, one repetition -------------------------------------------------------

    def block(self, system: str, rep: int) -> None:
        module = systems.load(system)
        server = module.Server(self.workdir / f"rep{rep}-{system}")
        t_start = time.monotonic()
        load = os.getloadavg()[0]
        self.series.setdefault("load", []).append([rep, system, round(load, 2)])
        print(f"  [{system}] starting (load average {load:.2f})", flush=True)
        server.start()
        self.running.append(server)
        self.broker_pid = server.pids()[0] if system == "logbroker" else None
        try:
            print(
                f"  [{system}] pids {server.pids()}, up in {time.monotonic() - t_start:.1f} s",
                flush=True,
            )
            self._workloads(system, module, server, rep)
        finally:
            server.stop()
            self.running.remove(server)
            if not self.args.keep:
                shutil.rmtree(server.workdir, ignore_errors=True)
        print(f"  [{system}] stopped after {time.monotonic() - t_start:.0f} s", flush=True)

    def _workloads(self, system: str, module: Any, server: Any, rep: int) -> None:
        cfg, ep = self.cfg, server.endpoint
        n = int(cfg["n"][system] * self.args.scale)
        n1 = int(cfg["n_batch1"][system] * self.args.scale)
        skip = set(self.args.skip)
        only = getattr(module, "WORKLOADS", None)
        if only is not None:
            skip |= {w for w in SKIPPABLE if w not in only}
        tag = f"r{rep}"

        # 1 and 5: produce at batch 50 into a fresh server; what it added on disk.
        if "produce_batch50" not in skip:
            base = settled_disk_bytes(server.data_dir) if server.data_dir else None
            r = self.attempt(
                f"{system} produce_batch50",
                self.together,
                system,
                ep,
                [("produce", dict(topic="b50", n=n, size=SIZE, batch=50))],
                f"produce50-{tag}",
            )
            if r:
                self.add(system, "produce_batch50", THROUGHPUT, r[0]["messages"] / r[0]["seconds"])
                if base is not None and "disk" not in skip:
                    per = (settled_disk_bytes(server.data_dir) - base) / r[0]["messages"]
                    self.add(system, "disk_bytes_per_message", "bytes", per)
                    self.add(system, "disk_overhead_per_message", "bytes", per - SIZE)
                # 2: one consumer of the pre-loaded messages.
                if "consume" not in skip:
                    c = self.attempt(
                        f"{system} consume",
                        self.together,
                        system,
                        ep,
                        [
                            (
                                "consume",
                                dict(topic="b50", n=r[0]["messages"], batch_bytes=FETCH_BYTES),
                            )
                        ],
                        f"consume-{tag}",
                    )
                    if c:
                        self.add(system, "consume", THROUGHPUT, c[0]["messages"] / c[0]["seconds"])
            self.attempt(f"{system} drop", self.one, system, "drop", ep, "drop", topic="b50")
            if system == "logbroker" and "secure" not in skip and r:
                self._secure(system, ep, n, tag, r[0]["messages"] / r[0]["seconds"])

        if "produce_batch1" not in skip:
            r = self.attempt(
                f"{system} produce_batch1",
                self.together,
                system,
                ep,
                [("produce", dict(topic="b1", n=n1, size=SIZE, batch=1))],
                f"produce1-{tag}",
            )
            if r:
                self.add(system, "produce_batch1", THROUGHPUT, r[0]["messages"] / r[0]["seconds"])
            self.attempt(f"{system} drop", self.one, system, "drop", ep, "drop", topic="b1")

        # 3: producer (batch 50) and consumer at once; the consumer's rate.
        if "produce_and_consume" not in skip:
            r = self.attempt(
                f"{system} produce_and_consume",
                self.together,
                system,
                ep,
                [
                    ("consume", dict(topic="pc", n=n, batch_bytes=FETCH_BYTES)),
                    ("produce", dict(topic="pc", n=n, size=SIZE, batch=50, wait_stored=False))
                    if system != "logbroker"
                    else ("produce", dict(topic="pc", n=n, size=SIZE, batch=50)),
                ],
                f"pc-{tag}",
            )
            if r:
                self.add(
                    system,
                    "produce_and_consume",
                    THROUGHPUT,
                    r[0]["messages"] / r[0]["seconds"],
                    producer_msgs_per_s=r[1]["messages"] / r[1]["seconds"],
                )
            self.attempt(f"{system} drop", self.one, system, "drop", ep, "drop", topic="pc")

        # 4: one-way latency, one message in flight, producer and consumer processes: the
        # server on its own core (Redis's advice for deterministic results), then wherever
        # the scheduler puts them. Multi-threaded servers may do better unpinned: the goal
        # takes each system at its better placement (report.goals).
        for workload, apart, topic in (
            ("latency", True, "lat"),
            ("latency_unpinned", False, "latu"),
        ):
            if workload in skip or not hasattr(module.Client, "latency_consume"):
                continue
            if apart and not can_place():
                continue  # one core: main() noted why
            r = self.attempt(
                f"{system} {workload}",
                self.one_way,
                system,
                server,
                topic,
                f"{workload}-{tag}",
                apart,
            )
            if r:
                lat = r["latencies_ms"]
                for suffix, q in (("p50", 50), ("p99", 99), ("p999", 99.9)):
                    self.add(
                        system, f"{workload}_{suffix}", "ms", percentile(lat, q), messages=len(lat)
                    )
                self.series[workload].setdefault(system, []).append(
                    [round(x, 4) for x in sorted(lat)[:: max(1, len(lat) // 2000)]]
                )
            self.attempt(f"{system} drop", self.one, system, "drop", ep, "drop", topic=topic)

        # 7: a consumer group of 1 and of 2 processes.
        if "group" not in skip and hasattr(module.Client, "group_consume"):
            self._groups(system, module, ep, tag)

        # 8: compression (logbroker only).
        if "json" not in skip and hasattr(module.Client, "produce_json"):
            self._compression(system, ep, tag)

    def _secure(self, system: str, ep: dict[str, Any], n: int, tag: str, plain: float) -> None:
        """1 and 2 again over SSL and SASL_SSL (bench/systems/logbroker.py's listeners), right
        after PLAINTEXT's in the same repetition; each also as its ratio to PLAINTEXT's."""
        plain_consume = self.values.get((system, "consume"), [])
        for protocol in ("SSL", "SASL_SSL"):
            name, secure = protocol.lower(), {**ep, "security": protocol}
            topic = f"b50-{name}"
            r = self.attempt(
                f"{system} produce_batch50 {protocol}",
                self.together,
                system,
                secure,
                [("produce", dict(topic=topic, n=n, size=SIZE, batch=50))],
                f"produce50-{name}-{tag}",
            )
            if not r:
                continue
            rate = r[0]["messages"] / r[0]["seconds"]
            self.add(system, f"produce_batch50_{name}", THROUGHPUT, rate)
            self.add(system, f"produce_batch50_{name}_ratio", "x", rate / plain)
            if "consume" in self.args.skip:
                continue
            c = self.attempt(
                f"{system} consume {protocol}",
                self.together,
                system,
                secure,
                [("consume", dict(topic=topic, n=r[0]["messages"], batch_bytes=FETCH_BYTES))],
                f"consume-{name}-{tag}",
            )
            if c:
                rate = c[0]["messages"] / c[0]["seconds"]
                self.add(system, f"consume_{name}", THROUGHPUT, rate)
                if plain_consume:  # this repetition's PLAINTEXT consume: the last one added
                    self.add(system, f"consume_{name}_ratio", "x", rate / plain_consume[-1])

    def _groups(self, system: str, module: Any, ep: dict[str, Any], tag: str) -> None:
        n = int(self.cfg["n_group"][system] * self.args.scale)
        partitioned = system == "logbroker"  # a member's share is its partitions' messages
        retains = system in ("logbroker", "redis")  # a log or stream keeps what was read
        loaded = 0
        for members in (1, 2):
            if loaded == 0 or not retains:
                r = self.attempt(
                    f"{system} load",
                    self.one,
                    system,
                    "load",
                    ep,
                    f"load-{tag}",
                    topic="grp",
                    n=n,
                    size=SIZE,
                    partitions=2,
                )
                if not r:
                    return
                loaded = r["messages"]
            expect = loaded // members if partitioned else loaded
            job = (
                "group_consume",
                dict(
                    topic="grp",
                    group=f"bench{members}",
                    members=members,
                    expect=expect,
                    idle_s=1.0,
                    batch_bytes=FETCH_BYTES,
                ),
            )
            rs = self.attempt(
                f"{system} group_consume_{members}",
                self.together,
                system,
                ep,
                [job] * members,
                f"group{members}-{tag}",
            )
            if not rs:
                continue
            total = sum(x["messages"] for x in rs)
            if total < loaded:
                self.errors.append(f"{system} group_consume_{members}: {total} of {loaded}")
            self.add(
                system,
                f"group_consume_{members}",
                THROUGHPUT,
                total / max(x["seconds"] for x in rs),
                per_member=[x["messages"] for x in rs],
            )

    def _compression(self, system: str, ep: dict[str, Any], tag: str) -> None:
        n = int(self.cfg["json_messages"] * self.args.scale) // 50 * 50
        stored: dict[str, float] = {}
        for codec in ("none", "gzip", "snappy"):
            topic = f"json-{codec}"
            r = self.attempt(
                f"{system} json_produce_{codec}",
                self.together,
                system,
                ep,
                [
                    (
                        "produce_json",
                        dict(
                            topic=topic,
                            event_count=self.cfg["json_events"],
                            n=n,
                            batch=50,
                            codec=codec,
                        ),
                    )
                ],
                f"json-{codec}-{tag}",
            )
            if not r:
                continue
            r0 = r[0]
            self.add(
                system,
                f"json_produce_{codec}",
                THROUGHPUT,
                r0["messages"] / r0["seconds"],
                mean_event_bytes=round(r0["payload_bytes"] / r0["messages"], 1),
            )
            stored[codec] = r0["stored_bytes"]
            if codec != "none":
                self.add(
                    system,
                    f"compression_ratio_{codec}",
                    "x",
                    r0["uncompressed_bytes"] / r0["stored_bytes"],
                )
            c = self.attempt(
                f"{system} json_consume_{codec}",
                self.together,
                system,
                ep,
                [("consume_json", dict(topic=topic, n=r0["messages"], batch_bytes=FETCH_BYTES))],
                f"jsonc-{codec}-{tag}",
            )
            if c:
                self.add(
                    system, f"json_consume_{codec}", THROUGHPUT, c[0]["messages"] / c[0]["seconds"]
                )

    # -- 6: throughput as stored data grows -----------------------------------------------

    def growth(self, system: str) -> None:
        module = systems.load(system)
        if not hasattr(module.Client, "growth"):
            return
        gb = self.args.growth_gb if system in ("logbroker", "tcp") else self.args.growth_peer_gb
        if gb <= 0:
            return
        window = (
            self.cfg["window_mb"] if system in ("logbroker", "tcp") else self.cfg["peer_window_mb"]
        )
        server = module.Server(self.workdir / f"growth-{system}")
        print(f"  [{system}] growth to {gb:g} GB", flush=True)
        os.environ["BENCH_WORKDIR"] = str(self.workdir)  # tcp's file baseline writes here
        server.start()
        self.running.append(server)
        try:
            r = self.attempt(
                f"{system} growth",
                self.one,
                system,
                "growth",
                server.endpoint,
                "growth",
                topic="growth",
                total_bytes=int(gb * 1e9),
                size=SIZE,
                batch=50,
                window_bytes=int(window * 1e6),
            )
            if r:
                windows = r["windows"]
                self.series["growth"][system] = windows
                first = [rate for x, rate in windows if x <= 100e6] or [windows[0][1]]
                end = windows[-1][0]
                final = [rate for x, rate in windows if x > 0.9 * end] or [windows[-1][1]]
                # every window a sample: median, min and max over the windows
                for name, rates in (("growth_first_100mb", first), ("growth_final", final)):
                    self.values[(system, name)] = list(rates)
                    self.units[name] = THROUGHPUT
                    self.extra[(system, name)] = {"windows": len(rates), "stored_gb": end / 1e9}
                ratio = median(final) / median(first)
                self.values[(system, "growth_ratio")] = [ratio]
                self.units["growth_ratio"] = "x"
                self.extra[(system, "growth_ratio")] = {"stored_gb": end / 1e9}
                print(
                    f"    {system:10} growth: first 100 MB {median(first):,.0f}, at "
                    f"{end / 1e9:.2f} GB {median(final):,.0f} msgs/s (x{ratio:.2f})",
                    flush=True,
                )
                if server.data_dir:
                    self.extra[(system, "growth_ratio")]["disk_gb"] = round(
                        settled_disk_bytes(server.data_dir, timeout=5) / 1e9, 3
                    )
        finally:
            server.stop()
            self.running.remove(server)
            if not self.args.keep:
                shutil.rmtree(server.workdir, ignore_errors=True)

    # -- 9 and 10: the broker against the relay ------------------------------------------

    def _fresh(self, system: str, tag: str) -> Any:
        server = systems.load(system).Server(self.workdir / tag)
        server.start()
        self.running.append(server)
        if system == "logbroker":
            self.broker_pid = server.pids()[0]
        return server

    def _done(self, server: Any) -> None:
        server.stop()
        self.running.remove(server)
        if not self.args.keep:
            shutil.rmtree(server.workdir, ignore_errors=True)

    def intake(self, system: str, rep: int) -> None:
        """Prebuilt frames until the log (or the relay's file) holds --intake-gb; windows of
        intake_window_mb; the rates in MB/s of frames (what the socket carried)."""
        server = self._fresh(system, f"intake{rep}-{system}")
        try:
            r = self.attempt(
                f"{system} intake",
                self.one,
                system,
                "intake",
                server.endpoint,
                f"intake-r{rep}",
                topic="intake",
                total_bytes=int(self.args.intake_gb * 1e9),
                size=INTAKE_SIZE,
                batch=INTAKE_BATCH,
                window_bytes=int(self.cfg["intake_window_mb"] * 1e6),
            )
        finally:
            self._done(server)
        if not r:
            return
        from intake import rates, tail

        windows = rates(r["windows"], 1e-6 * r["frame_bytes"] / r["set_bytes"])
        s = tail(windows)
        # Constant per run (the extras of a row are its last repetition's): messages/s =
        # MB/s * 1e6 / frame_bytes * messages_per_frame.
        per = {"frame_bytes": r["frame_bytes"], "messages_per_frame": INTAKE_BATCH}
        self.add(system, "intake_first_100mb", "MB/s", s["first_100mb"], **per)
        self.add(
            system,
            "intake_last_10pct",
            "MB/s",
            s["final"],
            stored_gb=round(s["stored_gb"], 3),
            **per,
        )
        # The whole run's rate: on a busy machine the relay's last 10 % lasts a fraction of
        # a second, and one writeback stall decides it; this says whether the run agrees.
        seconds = sum(w[1] for w in r["windows"])
        mb = r["windows"][-1][0] * r["frame_bytes"] / r["set_bytes"] / 1e6
        self.add(system, "intake_overall", "MB/s", mb / seconds, **per)
        self.intake_final.setdefault(rep, {})[system] = s["final"]
        self.series["intake"].setdefault(system, []).append(
            [[round(x), round(v, 2)] for x, v in windows]
        )

    def intake_ratios(self) -> None:
        """logbroker's last 10 % over the relay's, each repetition's own pair."""
        for _rep, finals in sorted(self.intake_final.items()):
            if "logbroker" in finals and finals.get(RELAY):
                self.add("logbroker", "intake_ratio", "x", finals["logbroker"] / finals[RELAY])

    def sizes(self, order: list[str], rep: int) -> None:
        """One repetition of the sweep: a fresh server for every system, then each message
        size for --sweep-seconds on each system in turn (a fresh worker each; the order
        rotates with the size), so that a size's points are seconds apart, not minutes."""
        servers: dict[str, Any] = {}
        try:
            for system in order:
                try:
                    servers[system] = self._fresh(system, f"sizes{rep}-{system}")
                except BenchError as exc:
                    self.errors.append(f"{system} sizes rep {rep + 1}: {exc}")
                    print(f"  [{system}] sizes FAILED: {exc}", flush=True)
            started = [s for s in order if s in servers]
            for i, size in enumerate(self.cfg["sweep_sizes"]):
                for system in started[i % len(started) :] + started[: i % len(started)]:
                    self._size(system, servers[system].endpoint, size, rep)
        finally:
            for server in servers.values():
                self._done(server)

    def _size(self, system: str, ep: dict[str, Any], size: int, rep: int) -> None:
        topic = f"size{size}"
        r = self.attempt(
            f"{system} size {size}",
            self.together,
            system,
            ep,
            [
                (
                    "produce_for",
                    dict(
                        topic=topic,
                        size=size,
                        batch=self.cfg["sweep_batch"],
                        seconds=self.args.sweep_seconds,
                    ),
                )
            ],
            f"size{size}-r{rep}",
        )
        if r:
            seconds = r[0]["seconds"]
            mb = r[0]["payload_bytes"] / seconds / 1e6
            self.add(system, f"size_{size}b_records", THROUGHPUT, r[0]["messages"] / seconds)
            self.add(system, f"size_{size}b_mb", "MB/s", mb)
            self.size_mb.setdefault((rep, size), {})[system] = mb
        self.attempt(f"{system} drop", self.one, system, "drop", ep, "drop", topic=topic)

    def size_ratios(self) -> None:
        """Each system's MB/s over the relay's at the same size in the same repetition."""
        for (_rep, size), found in sorted(self.size_mb.items()):
            for system, mb in found.items():
                if system != RELAY and found.get(RELAY):
                    self.add(system, f"size_{size}b_vs_relay", "x", mb / found[RELAY])

    def stop_all(self) -> None:
        for server in list(self.running):
            try:
                server.stop()
            except Exception:
                traceback.print_exc()
            self.running.remove(server)

    # -- results --------------------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        out = []
        for (system, workload), vals in sorted(self.values.items()):
            growth = workload.startswith("growth")
            rec = {
                "system": system,
                "workload": workload,
                "unit": self.units[workload],
                **spread(vals),
                "reps": 1 if growth else len(vals),
                "run_id": self.run_id,
            }
            if growth and workload != "growth_ratio":
                rec["windows"] = len(vals)
            rec.update(self.extra.get((system, workload), {}))
            out.append(rec)
        return out


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=os.environ.get("BENCH_PROG", "bench/run.py"),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny counts, 1 repetition, tiny growth: seconds (the test suite)",
    )
    p.add_argument(
        "--systems",
        default="",
        help="comma-separated subset of "
        + ",".join(systems.NAMES)
        + " (default: every one installed)",
    )
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 3; quick 1)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every message count")
    p.add_argument(
        "--growth-gb",
        type=float,
        default=None,
        help="logbroker's (and tcp's file-append) growth run, GB of payload "
        "(default 4; quick 0.01; 0 = off)",
    )
    p.add_argument(
        "--growth-peer-gb",
        type=float,
        default=None,
        help="the peers' growth runs, GB (default 0.5; quick 0.002; 0 = off)",
    )
    p.add_argument(
        "--intake-gb",
        type=float,
        default=None,
        help="the intake workload: GB the broker's log (and the relay's file) grows to "
        "(default 2; quick 0.01; 0 = off)",
    )
    p.add_argument(
        "--sweep-seconds",
        type=float,
        default=None,
        help="the size sweep: seconds of producing per system and message size "
        "(default 2; quick 0.05; 0 = off)",
    )
    p.add_argument(
        "--skip",
        default="",
        help="comma-separated: produce_batch50,consume,disk,produce_batch1,"
        "produce_and_consume,latency,group,json,secure,growth,intake,sizes",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="default bench/results (quick: a new directory under $TMPDIR)",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="servers' data (default: a new directory under $TMPDIR)",
    )
    p.add_argument(
        "--latency-messages",
        type=int,
        default=None,
        help="messages timed by the one-way latency workload (default 10000; quick 200)",
    )
    p.add_argument("--keep", action="store_true", help="keep the servers' data")
    p.add_argument(
        "--profile",
        action="store_true",
        help="profile logbroker: cProfile in its client processes, py-spy on its broker; "
        "summary in <output>/profile/summary.md",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs (no matplotlib)")
    args = p.parse_args(argv)
    args.skip = {s for s in args.skip.split(",") if s}
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    args.reps = args.reps or cfg["reps"]
    if args.latency_messages:
        cfg["latency"] = args.latency_messages
    args.growth_gb = cfg["growth_gb"] if args.growth_gb is None else args.growth_gb
    args.growth_peer_gb = (
        cfg["growth_peer_gb"] if args.growth_peer_gb is None else (args.growth_peer_gb)
    )
    args.intake_gb = cfg["intake_gb"] if args.intake_gb is None else args.intake_gb
    args.sweep_seconds = cfg["sweep_seconds"] if args.sweep_seconds is None else args.sweep_seconds
    invocation = Run(
        "bench/run.py",
        args,
        argv,
        results=BENCH_DIR / "results",
        prefix="logbroker-bench",
    )

    wanted = [s for s in args.systems.split(",") if s] or list(systems.NAMES)
    chosen, skipped = [], {}
    for name in wanted:
        ok, why = systems.load(name).available()
        if ok:
            chosen.append(name)
        else:
            skipped[name] = why
            print(f"skipping {name}: {why}", flush=True)
    if not chosen:
        print("nothing to measure", file=sys.stderr)
        return 2
    if "latency" not in args.skip and not can_place():
        skipped["latency"] = (
            f"needs CPUs {sorted(SERVER_CPUS | CLIENT_CPUS)} to place the server apart from its "
            "clients; latency_unpinned is measured"
        )

    run_id = invocation.id
    engine = Engine(args, cfg, run_id)
    engine.profile_dir = invocation.profile_dir
    info = invocation.header(
        systems=chosen,
        skipped=skipped,
        versions={s: systems.load(s).versions() for s in chosen},
        settings={s: getattr(systems.load(s), "SETTINGS", {}) for s in chosen},
        batching={s: {str(k): v for k, v in systems.load(s).BATCHING.items()} for s in chosen},
        consuming={s: systems.load(s).CONSUMING for s in chosen},
        parameters={
            "message_bytes": SIZE,
            "fetch_bytes": FETCH_BYTES,
            "latency_placement": {
                "server_cpus": sorted(SERVER_CPUS),
                "client_cpus": sorted(CLIENT_CPUS),
            },
            "reps": args.reps,
            "scale": args.scale,
            "growth_gb": args.growth_gb,
            "growth_peer_gb": args.growth_peer_gb,
            "intake_gb": args.intake_gb,
            "intake_message_bytes": INTAKE_SIZE,
            "intake_batch": INTAKE_BATCH,
            "sweep_seconds": args.sweep_seconds,
            **{
                k: v
                for k, v in cfg.items()
                if k not in ("reps", "growth_gb", "growth_peer_gb", "intake_gb", "sweep_seconds")
            },
        },
    )
    print(
        f"run {run_id}: {', '.join(chosen)}; {args.reps} repetitions; work dir {args.workdir}",
        flush=True,
    )
    try:
        for rep in range(args.reps):
            order = chosen[rep % len(chosen) :] + chosen[: rep % len(chosen)]
            print(f"repetition {rep + 1} of {args.reps}: {' '.join(order)}", flush=True)
            for system in order:
                try:
                    engine.block(system, rep)
                except BenchError as exc:
                    engine.errors.append(f"{system} rep {rep + 1}: {exc}")
                    print(f"  [{system}] FAILED: {exc}", flush=True)
        for phase, has, wanted in (
            ("intake", "intake", args.intake_gb > 0),
            ("sizes", "produce_for", args.sweep_seconds > 0),
        ):
            among = [s for s in chosen if hasattr(systems.load(s).Client, has)]
            if phase in args.skip or not wanted or not among:
                continue
            for rep in range(args.reps):
                order = among[rep % len(among) :] + among[: rep % len(among)]
                print(
                    f"{phase}, repetition {rep + 1} of {args.reps}: {' '.join(order)}", flush=True
                )
                if phase == "sizes":
                    engine.sizes(order, rep)
                    continue
                for system in order:
                    try:
                        engine.intake(system, rep)
                    except BenchError as exc:
                        engine.errors.append(f"{system} intake rep {rep + 1}: {exc}")
                        print(f"  [{system}] intake FAILED: {exc}", flush=True)
        engine.intake_ratios()
        engine.size_ratios()
        if "growth" not in args.skip:
            print("growth", flush=True)
            for system in chosen:
                try:
                    engine.growth(system)
                except BenchError as exc:
                    engine.errors.append(f"{system} growth: {exc}")
                    print(f"  [{system}] growth FAILED: {exc}", flush=True)
    finally:
        engine.stop_all()
    invocation.ended(info)
    info["errors"] = engine.errors
    info["values"] = {f"{s}/{w}": v for (s, w), v in engine.values.items()}
    info["series"] = engine.series

    records = engine.records()
    import report

    return invocation.finish(
        records, info, engine.errors, markdown=report.markdown, plots=report.plots,
        table_text=report.table(records, info),
        no_plots_hint="bash bench/install-peers.sh installs matplotlib",
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
