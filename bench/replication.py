"""The 2014 benchmark post's replication table, rebuilt on this machine (issue 30).

    .venv/bin/python bench/replication.py                # the full run (make bench-replication)
    .venv/bin/python bench/replication.py --quick        # seconds: the test suite's smoke run
    .venv/bin/python bench/replication.py --reps 5 --only rf1,rf3_acks1 --profile

Three brokers (`logbroker broker` processes) and a ZooKeeper on this machine; a topic of six
partitions, 100-byte messages, the library's own clients (bench/systems/replicated.py):

  rf1                      one producer, replication factor 1 (0.7's layout: two partitions
                           on each broker), request.required.acks=1
  rf3_acks1                one producer, replication factor 3 (Kafka's assignment: each
                           broker leads two partitions, follows four), acks=1
  rf3_acks_all             the same with acks=-1 (every in-sync replica has it)
  rf3_acks1_3_producers    three producer processes at once, rf 3, acks=1 (aggregate rate)
  rf3_acks1_one_leader     rf 3 with broker 0 leading all six partitions, brokers 1 and 2
  rf3_acks_all_one_leader  following them all: the leader's and the followers' CPU apart
  consume_rf1, consume_rf3 one consumer of a pre-loaded topic, the six partitions in turn
  latency_rf3_acks_all     one-way latency (the post's end-to-end latency), rf 3, acks=-1:
                           from just before the producer's send to a consumer waiting at the
                           high watermark having it; one message in flight
  latency_rf1              the same on a 0.7 topic with acks=1 (a reference)

Every one-producer produce workload runs twice: at 100 messages per request (11,000 bytes;
the post's batch.size was 8,196) and, named <workload>_b1000, at 1,000 (a synchronous
producer's bytes in flight about the post's five 8 KB requests per partition; the fixed
cost of a request, and of each follower's fetch of it, spread over ten times the messages).

Three brokers share the machine's cores here, so every produce and consume workload also
reports the CPU seconds each broker process used per million messages (utime + stime from
/proc/<pid>/stat, from the moment the engine says go until every message is below the high
watermark on every in-sync replica), and in the one-leader layouts the CPU a follower
spends per byte it copies against the leader's per byte produced.

Method (bench/run.py's): every workload runs in fresh client processes (bench/worker.py) on
a fresh cluster: a ZooKeeper per repetition, three new brokers per workload (a topic of an
earlier workload would add its idle partitions to every follower's fetch). Repetitions are
interleaved (rep 1 of every workload, then rep 2, ...; the order rotates). Reported: the
median of the repetitions, min and max; ratios to rf1 are ratios of medians.

Writes to --output-dir (default bench/results/replication; --quick: a new directory under
$TMPDIR): summary.json ([{"workload", "metric", "unit", "median", "min", "max", "reps",
"run_id", ...}]), run.json (machine, settings, raw values, the latency samples),
summary.md (the table, goals, CPU), replication_throughput.png, replication_cpu.png,
replication_latency.png. With --profile, py-spy samples every broker during the produce
workloads: <output>/profile/summary.md. Nothing is asserted about speed anywhere.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import run
from common import BENCH_DIR, REPO_DIR, BenchError, percentile
from outputs import (
    COLORS,
    Run,
    cdf_axes,
    cell,
    errors_section,
    fmt,
    md_table,
    plot_cdf,
    pyplot,
    run_line,
    save,
    spread,
    start_py_spy,
    stop_py_spy,
    text_table,
    value_label,
)

SYSTEM = "replicated"  # bench/systems/replicated.py: the workers' client
BASELINE = "baseline:"  # the workloads run on --baseline's brokers: "baseline:rf1", ...
SIZE = 100  # the post's 100-byte messages
ENTRY = SIZE + 10
PARTITIONS = 6
BROKERS = (0, 1, 2)
BATCH = 100  # messages per produce request: 11,000 bytes (the post's batch.size was 8,196)
LARGE = 1000  # ... and ten times that: the fixed cost of a request (and of a follower's fetch
# of it, in Python) spread over more messages; a synchronous producer with this much in each
# request has about as many bytes in flight as the post's (5 requests of 8 KB per partition)
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # produce, consume, latency
    layout: str  # rf1, rf3, one_leader
    acks: int = 1
    producers: int = 1
    label: str = ""
    batch: int = BATCH  # messages per produce request

    @property
    def base(self) -> str:
        """The rf 1 workload its throughput is compared with."""
        if self.kind == "consume":
            return "consume_rf1"
        return "rf1" if self.batch == BATCH else f"rf1_b{self.batch}"


def _produce(name: str, layout: str, acks: int, label: str, producers: int = 1) -> list[Workload]:
    """A produce workload at BATCH messages per request, and (one producer) at LARGE."""
    out = [Workload(name, "produce", layout, acks, producers, label)]
    if producers == 1:
        big = f"{label}, {LARGE:,} per request"
        out.append(Workload(f"{name}_b{LARGE}", "produce", layout, acks, 1, big, LARGE))
    return out


WORKLOADS = (
    *_produce("rf1", "rf1", 1, "rf 1"),
    *_produce("rf3_acks1", "rf3", 1, "rf 3, acks=1"),
    *_produce("rf3_acks_all", "rf3", -1, "rf 3, acks=-1"),
    *_produce("rf3_acks1_3_producers", "rf3", 1, "rf 3, acks=1, 3 producers", 3),
    *_produce("rf3_acks1_one_leader", "one_leader", 1, "rf 3, acks=1, one leader"),
    *_produce("rf3_acks_all_one_leader", "one_leader", -1, "rf 3, acks=-1, one leader"),
    Workload("consume_rf1", "consume", "rf1", 1, 1, "consumer, rf 1"),
    Workload("consume_rf3", "consume", "rf3", 1, 1, "consumer, rf 3"),
    Workload("latency_rf3_acks_all", "latency", "rf3", -1, 1, "latency, rf 3, acks=-1"),
    Workload("latency_rf1", "latency", "rf1", 1, 1, "latency, rf 1, acks=1"),
)
BY_NAME = {w.name: w for w in WORKLOADS}
# The post's figures (three machines, Kafka 0.8.1, 2014), for the table.
POST = {
    "rf1": "821,557",
    "rf3_acks1": "786,980 (0.96×)",
    "rf3_acks_all": "421,823 (0.51×)",
    "rf3_acks1_3_producers": "2,024,032",
    "consume_rf3": "940,521",
    "latency_rf3_acks_all": "2 / 3 / 14 ms",
}

FULL = {
    "n": 400_000,  # messages per producer, BATCH per request
    "n_large": 2_000_000,  # LARGE per request
    "n_consume": 1_200_000,
    "latency": 10_000,
    "latency_warmup": 500,
    "reps": 3,
}
QUICK = {
    "n": 3_000,
    "n_large": 6_000,
    "n_consume": 6_000,
    "latency": 100,
    "latency_warmup": 10,
    "reps": 1,
}
BROKER_SETTINGS = {
    # bench/systems/logbroker.py's broker: the sample flush settings (every 10,000 messages
    # or 1,000 ms); the replication keys at their defaults, written out for the report
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.wait.max.ms": "500",
    "replica.lag.time.max.ms": "10000",
    "min.insync.replicas": "1",
    "zk.sessiontimeout.ms": "6000",
}


# -- CPU of a process ----------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid`, every thread, from /proc/<pid>/stat (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    # after "pid (comm)": state is field 3, utime field 14, stime field 15 (proc(5))
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# -- the cluster ---------------------------------------------------------------------------


class Cluster:
    """Three brokers on a fresh chroot of the repetition's ZooKeeper, one topic."""

    def __init__(self, workdir: Path, zk: Any, name: str, code: Path | None = None) -> None:
        self.workdir = workdir
        self.zk = zk
        self.name = name
        self.code = code  # another checkout's plugins/ to run the brokers from (--baseline)
        self.target: Any = None
        self.brokers: dict[int, Any] = {}

    def start(self) -> None:
        from logbroker.stack.broker import BrokerProcess

        self.target = self.zk.create_chroot(f"/{self.name}")
        self.brokers = {
            b: BrokerProcess(
                self.workdir / f"broker-{b}",
                broker_id=b,
                zk_connect=self.target.connect,
                overrides=BROKER_SETTINGS,
                # env execs the broker: its pid stays the one measured
                command_prefix=["env", f"PYTHONPATH={self.code}"] if self.code else (),
            )
            for b in BROKERS
        }
        errors: list[BaseException] = []

        def start(broker: Any) -> None:
            try:
                broker.start(timeout=90)
            except BaseException as exc:  # reported below, once every broker stopped
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(b,)) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise BenchError(f"{self.name}: a broker did not start: {errors[0]}")

    @property
    def connect(self) -> str:
        return str(self.target.connect)

    def pids(self) -> dict[int, int]:
        return {b: broker.pid for b, broker in self.brokers.items() if broker.pid}

    def cpu(self) -> dict[int, float]:
        return {b: cpu_seconds(pid) for b, pid in self.pids().items()}

    def create(self, topic: str, layout: str) -> None:
        """The workload's topic: six partitions in `layout`, every one with its leader."""
        from logbroker.client.cluster import Cluster as Admin
        from logbroker.coordination import replication_state as state

        with Admin(self.connect) as admin:
            if layout == "rf1":  # 0.7's layout: N partitions on every live broker
                created = admin.create_topic(topic, PARTITIONS // len(BROKERS))
                if sorted(created) != list(BROKERS):
                    raise BenchError(f"{topic}: created on brokers {sorted(created)} only")
                return
            if layout == "rf3":
                admin.create_replicated_topic(topic, PARTITIONS, len(BROKERS))
                return
            # one_leader: every partition's first (preferred) replica is broker 0
            assignment = state.Assignment(topic, len(BROKERS), (BROKERS,) * PARTITIONS)
            admin.zk.create(state.topic_path(topic), assignment.encode(), makepath=True)
            deadline = time.monotonic() + 30
            while True:
                described = admin.describe_replicated(topic)
                if all(p.state is not None and p.state.leader == 0 for p in described):
                    return
                if time.monotonic() > deadline:
                    raise BenchError(f"{topic}: broker 0 does not lead every partition")
                time.sleep(0.05)

    def states(self, topic: str) -> list[tuple[int, int, tuple[int, ...]]]:
        """(leader, leader epoch, ISR) of each replicated partition of `topic`."""
        from logbroker.client.cluster import Cluster as Admin

        with Admin(self.connect) as admin:
            return [
                (p.state.leader, p.state.leader_epoch, tuple(sorted(p.state.isr)))
                if p.state is not None
                else (-1, -1, ())
                for p in admin.describe_replicated(topic)
            ]

    def stop(self) -> None:
        """Every broker at once, as start() starts them (after the workload: nothing of it is
        measured); one after the other took ~1 s more a workload, 15 s of a --quick run."""

        def stop(broker: Any) -> None:
            try:
                broker.stop(timeout=30)
            except Exception:
                traceback.print_exc()

        threads = [threading.Thread(target=stop, args=(b,)) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


# -- the engine ----------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, cfg: dict[str, Any], run_id: str) -> None:
        self.args = args
        self.cfg = cfg
        self.run_id = run_id
        self.engine = run.Engine(args, cfg, run_id)  # its worker processes and barriers
        self.values: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.units: dict[str, str] = {}
        self.latencies: dict[str, list[list[float]]] = defaultdict(list)
        self.loads: list[list[Any]] = []
        self.notes: list[str] = []
        self.errors: list[str] = []
        self.profile_dir: Path | None = None
        # ("", None): this checkout's brokers; ("baseline:", its plugins/): --baseline's
        self.variants: list[tuple[str, Path | None]] = [("", None)]

    def add(self, workload: str, metric: str, unit: str, value: float) -> None:
        self.values[(workload, metric)].append(value)
        self.units[metric] = unit
        shown = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"
        print(f"    {workload:26} {metric:30} {shown:>12} {unit}", flush=True)

    def repetition(self, rep: int, order: list[Workload]) -> None:
        from logbroker.stack.zookeeper import ZooKeeperServer

        zk = ZooKeeperServer(self.args.workdir / f"rep{rep}" / "zookeeper").start()
        # with --baseline, each workload on the baseline's brokers too, right after (or
        # before: the order alternates) the current ones
        variants = self.variants if rep % 2 == 0 else self.variants[::-1]
        try:
            for w in order:
                for prefix, code in variants:
                    key = prefix + w.name
                    try:
                        self.block(rep, w, key, zk, code)
                    except BenchError as exc:
                        self.errors.append(f"{key} rep {rep + 1}: {exc}")
                        print(f"  [{key}] FAILED: {exc}", flush=True)
        finally:
            zk.stop()

    def block(self, rep: int, w: Workload, key: str, zk: Any, code: Path | None) -> None:
        """One workload on a fresh cluster; its values are recorded under `key`."""
        name = key.replace(":", "-")
        workdir = self.args.workdir / f"rep{rep}" / name
        load = os.getloadavg()[0]
        self.loads.append([rep, key, round(load, 2)])
        t_start = time.monotonic()
        cluster = Cluster(workdir, zk, f"{name.replace('_', '-')}-{rep}", code)
        cluster.start()
        try:
            topic = "bench"
            cluster.create(topic, w.layout)
            before = cluster.states(topic) if w.layout != "rf1" else []
            print(
                f"  [{key}] brokers {cluster.pids()} up in "
                f"{time.monotonic() - t_start:.1f} s (load average {load:.2f})",
                flush=True,
            )
            endpoint = {"zk": cluster.connect, "acks": w.acks, "replicated": w.layout != "rf1"}
            if w.kind == "produce":
                self.produce(rep, w, key, cluster, endpoint, topic)
            elif w.kind == "consume":
                self.consume(rep, w, key, cluster, endpoint, topic)
            else:
                self.latency(rep, key, cluster, endpoint, topic)
            if before:
                after = cluster.states(topic)
                if after != before:
                    note = (
                        f"{key} rep {rep + 1}: leaders or ISR changed during the workload "
                        f"({before} -> {after}); its values are kept"
                    )
                    self.notes.append(note)
                    print(f"    NOTE {note}", flush=True)
        finally:
            cluster.stop()
            if not self.args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
        print(f"  [{key}] done in {time.monotonic() - t_start:.0f} s", flush=True)

    # -- the workloads ------------------------------------------------------------------

    def _measured(
        self,
        cluster: Cluster,
        endpoint: dict[str, Any],
        jobs: list[tuple[str, dict[str, Any]]],
        tag: str,
    ) -> tuple[list[dict[str, Any]], dict[int, float]]:
        """Run the jobs together; the CPU seconds each broker used from go to their end."""
        start: dict[int, float] = {}
        spies = self._spies(cluster, tag)
        try:
            results = self.engine.together(
                SYSTEM, endpoint, jobs, tag, at_go=lambda: start.update(cluster.cpu())
            )
        finally:
            for spy in spies:
                stop_py_spy(spy)
        end = cluster.cpu()
        return results, {b: end[b] - start[b] for b in start}

    def produce(
        self,
        rep: int,
        w: Workload,
        key: str,
        cluster: Cluster,
        endpoint: dict[str, Any],
        topic: str,
    ) -> None:
        n = int(self.cfg["n" if w.batch == BATCH else "n_large"] * self.args.scale)
        job = ("produce", dict(topic=topic, n=n, size=SIZE, batch=w.batch))
        tag = f"{key.replace(':', '-')}-r{rep}"
        results, cpu = self._measured(cluster, endpoint, [job] * w.producers, tag)
        messages = sum(r["messages"] for r in results)
        seconds = max(r["acked_at"] for r in results) - min(r["started_at"] for r in results)
        self.add(key, "throughput", "msgs/s", messages / seconds)
        self._cpu(w, key, cpu, messages, messages * ENTRY)
        retried = sum(r["retried_sets"] for r in results)
        if retried:
            self.notes.append(f"{key} rep {rep + 1}: the producer retried {retried} sets")

    def consume(
        self,
        rep: int,
        w: Workload,
        key: str,
        cluster: Cluster,
        endpoint: dict[str, Any],
        topic: str,
    ) -> None:
        n = int(self.cfg["n_consume"] * self.args.scale)
        tag = f"{key.replace(':', '-')}-r{rep}"
        self.engine.one(SYSTEM, "load", endpoint, f"load-{tag}", topic=topic, n=n, size=SIZE)
        job = ("consume", dict(topic=topic, n=n // 1000 * 1000, batch_bytes=1000 * ENTRY))
        [r], cpu = self._measured(cluster, endpoint, [job], tag)
        self.add(key, "throughput", "msgs/s", r["messages"] / r["seconds"])
        self._cpu(w, key, cpu, r["messages"], 0)

    def latency(
        self, rep: int, key: str, cluster: Cluster, endpoint: dict[str, Any], topic: str
    ) -> None:
        server = _Server(endpoint, cluster)
        tag = f"{key.replace(':', '-')}-r{rep}"
        r = self.engine.one_way(SYSTEM, server, topic, tag, apart=False)
        lat = r["latencies_ms"]
        self.latencies[key].append(lat)
        for q, name in ((50, "p50"), (99, "p99"), (99.9, "p999")):
            self.add(key, name, "ms", percentile(lat, q))

    def _cpu(
        self, w: Workload, key: str, cpu: dict[int, float], messages: int, nbytes: int
    ) -> None:
        per_m = {b: s / (messages / 1e6) for b, s in cpu.items()}
        for b, s in sorted(per_m.items()):
            self.add(key, f"cpu_broker{b}", "s/M msgs", s)
        self.add(key, "cpu_brokers", "s/M msgs", sum(per_m.values()))
        if w.layout == "one_leader" and nbytes:
            # broker 0 took every produced byte; 1 and 2 each copied every one of them
            leader = cpu[0] / nbytes
            if not leader:  # a run shorter than a clock tick of the leader's (--quick)
                self.notes.append(f"{key}: the leader's CPU read 0 ticks; no per-byte ratio")
                return
            for b in (1, 2):
                self.add(key, f"follower{b}_vs_leader_cpu_per_byte", "x", cpu[b] / nbytes / leader)

    def _spies(self, cluster: Cluster, tag: str) -> list[subprocess.Popen[bytes]]:
        """With --profile: py-spy on every broker while the workload runs."""
        if self.profile_dir is None:
            return []
        spies = []
        for b, pid in cluster.pids().items():
            spy = start_py_spy(pid, self.profile_dir / f"broker-{tag}-b{b}.txt", threads=True)
            if spy is not None:
                spies.append(spy)
        time.sleep(0.5)  # attached before the workload starts
        return spies

    # -- results ------------------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        out = []
        order = {w.name: i for i, w in enumerate(WORKLOADS)}

        def place(key: tuple[str, str]) -> tuple[int, bool, str]:
            prefix, _, name = key[0].rpartition(":")
            return order[name], bool(prefix), key[1]

        for (workload, metric), vals in sorted(self.values.items(), key=lambda kv: place(kv[0])):
            out.append(
                {
                    "workload": workload,
                    "brokers": "baseline" if workload.startswith(BASELINE) else "current",
                    "metric": metric,
                    "unit": self.units[metric],
                    **spread(vals),
                    "reps": len(vals),
                    "run_id": self.run_id,
                }
            )
        return out


class _Server:
    """What run.Engine.one_way needs of a server: its endpoint and its processes."""

    def __init__(self, endpoint: dict[str, Any], cluster: Cluster) -> None:
        self.endpoint = endpoint
        self.cluster = cluster

    def pids(self) -> list[int]:
        return list(self.cluster.pids().values())


# -- the report ----------------------------------------------------------------------------


def _get(idx: dict[tuple[str, str], dict[str, Any]], w: str, m: str) -> float | None:
    r = idx.get((w, m))
    return None if r is None else float(r["median"])


def rep_ratios(info: dict[str, Any], workload: str, base: str) -> list[float]:
    """workload / base throughput, repetition by repetition (they ran in the same rep)."""
    mine = info["values"].get(f"{workload}/throughput", [])
    ref = info["values"].get(f"{base}/throughput", [])
    return [a / b for a, b in zip(mine, ref, strict=False) if b]


def goals(idx: dict[tuple[str, str], dict[str, Any]]) -> list[list[str]]:
    out: list[list[str]] = []

    def row(goal: str, measured: float | None, target: str, met: bool | None, fmt: str) -> None:
        shown = "-" if measured is None else fmt.format(measured)
        out.append([goal, shown, target, "n/a" if met is None else ("yes" if met else "**no**")])

    for suffix in ("", f"_b{LARGE}"):
        for w, factor, post in (("rf3_acks1", 0.75, "0.96×"), ("rf3_acks_all", 0.5, "0.51×")):
            mine = _get(idx, w + suffix, "throughput")
            rf1 = _get(idx, "rf1" + suffix, "throughput")
            ratio = mine / rf1 if mine and rf1 else None
            row(
                f"{BY_NAME[w + suffix].label}: ≥ {factor}× rf 1 (the post: {post})",
                ratio,
                f"≥ {factor}×",
                None if ratio is None else ratio >= factor,
                "{:.2f}×",
            )
    for w in (
        "rf3_acks1_one_leader",
        "rf3_acks_all_one_leader",
        f"rf3_acks1_one_leader_b{LARGE}",
        f"rf3_acks_all_one_leader_b{LARGE}",
    ):
        worst = max(
            (x for b in (1, 2) if (x := _get(idx, w, f"follower{b}_vs_leader_cpu_per_byte"))),
            default=None,
        )
        row(
            f"follower CPU per replicated byte ≤ 0.15× the leader's per produced byte "
            f"({BY_NAME[w].label}; the higher follower)",
            worst,
            "≤ 0.15×",
            None if worst is None else worst <= 0.15,
            "{:.2f}×",
        )
    c1, c3 = _get(idx, "consume_rf1", "throughput"), _get(idx, "consume_rf3", "throughput")
    ratio = c3 / c1 if c1 and c3 else None
    row(
        "consuming rf 3 within 10 % of rf 1",
        ratio,
        "0.90–1.10×",
        None if ratio is None else abs(ratio - 1) <= 0.10,
        "{:.2f}×",
    )
    for m, target in (("p50", 1.0), ("p99", 3.0)):
        mine = _get(idx, "latency_rf3_acks_all", m)
        row(
            f"end-to-end latency, rf 3, acks=-1: {m} ≤ {target:g} ms (the post: "
            f"{'2' if m == 'p50' else '3'} ms)",
            mine,
            f"≤ {target:g} ms",
            None if mine is None else mine <= target,
            "{:.3f} ms",
        )
    return out


def markdown(records: list[dict[str, Any]], info: dict[str, Any]) -> str:
    idx = {(r["workload"], r["metric"]): r for r in records}
    m = info["machine"]
    loads = [x[2] for x in info["loads"]]
    p = info["parameters"]
    parts = [
        "# Replication benchmark: the 2014 post's table on one machine",
        "",
        run_line(info),
        "",
        f"Machine: {m['nproc']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, {m['filesystem']}, "
        f"Linux {m['kernel']}, Python {m['python']}, logbroker at {m.get('git', '?')}. Three "
        "brokers, their ZooKeeper and the clients share the cores. Load average (1 min) "
        f"{m['loadavg_start'][0]:.2f} at the start, {m['loadavg_end'][0]:.2f} at the end, "
        f"{min(loads, default=0):.2f}–{max(loads, default=0):.2f} as the workloads started "
        "(other engineers' tests run on this machine too).",
        "",
        f"Six partitions, {SIZE}-byte messages; {p['batch']} messages per produce request "
        f"({p['n']:,} per producer), and {p['large_batch']:,} in the `_b{p['large_batch']}` "
        f"workloads ({p['n_large']:,}): one set to one partition per request, the library's "
        "`Producer.send`, synchronous (the next request after the answer); "
        f"{p['n_consume']:,} messages consumed. Each cell: median of the repetitions "
        "(min–max); ratios are of medians, with the range of the per-repetition ratios.",
        "",
    ]
    rows = [["workload", "msgs/s", "× its rf 1", "per-rep ratios", "the post (3 machines)"]]
    for w in WORKLOADS:
        if w.kind == "latency":
            continue
        r = idx.get((w.name, "throughput"))
        if r is None:
            continue
        base = _get(idx, w.base, "throughput")
        ratio = f"{r['median'] / base:.2f}×" if base else ""
        reps = rep_ratios(info, w.name, w.base)
        spread = f"{min(reps):.2f}–{max(reps):.2f}" if len(reps) > 1 else ""
        rows.append([f"`{w.name}` ({w.label})", cell(r), ratio, spread, POST.get(w.name, "")])
    parts += [md_table(rows), ""]

    lrows = [["workload", "p50 ms", "p99 ms", "p99.9 ms", "the post"]]
    for w in ("latency_rf3_acks_all", "latency_rf1"):
        if (w, "p50") in idx:
            lrows.append(
                [
                    f"`{w}` ({BY_NAME[w].label})",
                    *(cell(idx.get((w, q))) for q in ("p50", "p99", "p999")),
                    POST.get(w, ""),
                ]
            )
    parts += [
        "One-way latency (the post's end-to-end latency): from just before the producer "
        "process's send to a consumer process, waiting at the high watermark of partition 0 on "
        "its leader, having the message; one message in flight; "
        f"{info['parameters']['latency']:,} messages after {info['parameters']['latency_warmup']} "
        "warm-up; CLOCK_MONOTONIC in both.",
        "",
        md_table(lrows),
        "",
        "## Goals (issue 30)",
        "",
        md_table([["goal", "measured", "target", "met"], *goals(idx)]),
        "",
        "## CPU seconds per million messages",
        "",
        "utime + stime of each broker process (every thread) from /proc/<pid>/stat, from the "
        "moment the producers (consumer) were told to go until every message was below the "
        "high watermark on every in-sync replica, divided by the messages produced "
        "(consumed). In `rf1` each broker leads two partitions; in the `rf3` layouts each "
        "leads two and follows four; in the one-leader layouts broker 0 leads all six and "
        "brokers 1 and 2 only follow, so their CPU is the followers' alone.",
        "",
    ]
    crows = [["workload", "broker 0", "broker 1", "broker 2", "all brokers"]]
    for w in WORKLOADS:
        if (w.name, "cpu_brokers") not in idx:
            continue
        names = ("leader", "follower", "follower") if w.layout == "one_leader" else ("", "", "")
        crows.append(
            [
                f"`{w.name}`",
                *(
                    (f"{names[b]}: " if names[b] else "")
                    + cell(idx.get((w.name, f"cpu_broker{b}")))
                    for b in BROKERS
                ),
                cell(idx.get((w.name, "cpu_brokers"))),
            ]
        )
    parts += [md_table(crows), ""]
    frows = [["workload", "follower 1 / leader", "follower 2 / leader"]]
    for w in (x.name for x in WORKLOADS if x.layout == "one_leader"):
        if (w, "follower1_vs_leader_cpu_per_byte") in idx:
            frows.append(
                [
                    f"`{w}`",
                    *(cell(idx.get((w, f"follower{b}_vs_leader_cpu_per_byte"))) for b in (1, 2)),
                ]
            )
    if len(frows) > 1:
        parts += [
            "A follower's CPU per byte it copied against the leader's per byte produced (one "
            "leader: both figures are over the same bytes):",
            "",
            md_table(frows),
            "",
        ]
    if info.get("baseline"):
        parts += [before_after(idx, info), ""]
    parts += ["## Plots", ""]
    if info.get("baseline"):
        parts.append("![Before and after](replication_before_after.png)")
    for name, title in (
        ("replication_throughput", "Throughput by replication factor and acks"),
        ("replication_cpu", "Broker CPU per million messages"),
        ("replication_latency", "One-way latency"),
    ):
        parts.append(f"![{title}]({name}.png)")
    parts += [
        "",
        "## Settings",
        "",
        "Brokers: `logbroker broker` (logbroker.stack.broker.BrokerProcess) with 0.7's sample flush "
        "settings (every 10,000 messages or 1,000 ms) and "
        + ", ".join(f"`{k}={v}`" for k, v in BROKER_SETTINGS.items())
        + "; a standalone ZooKeeper per repetition (tickTime 500, forceSync=no), a fresh "
        "chroot and three fresh brokers per workload. Clients: bench/systems/replicated.py.",
        "",
    ]
    if info.get("notes"):
        parts += ["## Notes", "", *(f"- {n}" for n in info["notes"]), ""]
    parts += errors_section(info)
    return "\n".join(parts) + "\n"


BEFORE_AFTER = (
    ("throughput", "msgs/s", False),
    ("cpu_brokers", "CPU s/M, all brokers", True),
    ("cpu_broker0", "CPU s/M, broker 0", True),
    ("cpu_broker1", "CPU s/M, broker 1", True),
    ("follower1_vs_leader_cpu_per_byte", "follower 1 / leader per byte", True),
    ("p50", "p50 ms", True),
    ("p99", "p99 ms", True),
)


def before_after(idx: dict[tuple[str, str], dict[str, Any]], info: dict[str, Any]) -> str:
    """The workloads on the baseline's brokers and on this checkout's, side by side."""
    rows = [["workload", "metric", "before", "after", "after / before"]]
    for w in WORKLOADS:
        for metric, label, _lower in BEFORE_AFTER:
            before, after = idx.get((BASELINE + w.name, metric)), idx.get((w.name, metric))
            if before is None or after is None:
                continue
            change = f"{after['median'] / before['median']:.2f}×" if before["median"] else ""
            rows.append([f"`{w.name}`", label, cell(before), cell(after), change])
    base = info["baseline"]
    return "\n".join(
        [
            f"## Before and after: brokers at `{base['ref']}` ({base['commit']}) and at this "
            "checkout, in the same run",
            "",
            "Each workload ran on both, one right after the other (the order alternating by "
            "repetition), with the same clients; only the broker processes' code differs "
            f"(the baseline's plugins/ from `git archive {base['ref']}`).",
            "",
            md_table(rows),
        ]
    )


def table(records: list[dict[str, Any]]) -> str:
    rows = [["workload", "metric", "unit", "median", "min", "max"]]
    for r in records:
        rows.append(
            [
                r["workload"],
                r["metric"],
                r["unit"],
                *(fmt(r[k]) for k in ("median", "min", "max")),
            ]
        )
    return text_table(rows, left=3)


def plots(records: list[dict[str, Any]], info: dict[str, Any], outdir: Path) -> None:
    plt = pyplot()
    idx = {(r["workload"], r["metric"]): r for r in records}
    stamp = (
        f"run {info['run_id']}, {info['machine']['nproc']} cores shared by three brokers, "
        "ZooKeeper and the clients"
    )
    blue = COLORS["logbroker"]

    def bars(ax: Any, names: list[str], metric: str, color: Any, ratios: bool) -> None:
        found = [w for w in names if (w, metric) in idx]
        med = [idx[(w, metric)]["median"] for w in found]
        lo = [idx[(w, metric)]["median"] - idx[(w, metric)]["min"] for w in found]
        hi = [idx[(w, metric)]["max"] - idx[(w, metric)]["median"] for w in found]
        drawn = ax.bar(
            range(len(found)),
            med,
            0.7,
            yerr=[lo, hi],
            capsize=3,
            color=color,
            edgecolor="black",
            linewidth=0.5,
        )
        for b, v, w in zip(drawn, med, found, strict=True):
            base = _get(idx, BY_NAME[w].base, metric) if ratios else None
            label = fmt(v) + (f"\n{v / base:.2f}×" if base else "")
            value_label(ax, b.get_x() + b.get_width() / 2, v, label, 7, 3)
        ax.set_xticks(
            range(len(found)), [BY_NAME[w].label.replace(", ", "\n") for w in found], fontsize=7
        )
        ax.grid(axis="y", alpha=0.3)

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5), gridspec_kw={"width_ratios": [6, 5, 2]})
    for ax, batch in zip(axes, (BATCH, LARGE), strict=False):
        produce = [w.name for w in WORKLOADS if w.kind == "produce" and w.batch == batch]
        bars(ax, produce, "throughput", blue, True)
        rf1 = _get(idx, BY_NAME[produce[0]].base, "throughput")
        if rf1:
            for factor, style in ((0.75, "--"), (0.5, ":")):
                ax.axhline(factor * rf1, color="gray", linestyle=style, linewidth=0.8)
                ax.annotate(
                    f"{factor}× rf 1",
                    (len(produce) - 0.5, factor * rf1),
                    fontsize=7,
                    color="gray",
                    ha="right",
                    va="bottom",
                )
        ax.set_ylabel("messages/s (acknowledged)")
        ax.set_title(f"Producer, {batch:,} messages per request (× rf 1 under each)", fontsize=9)
    consume = [w.name for w in WORKLOADS if w.kind == "consume"]
    bars(axes[2], consume, "throughput", "#2ca02c", True)
    axes[2].set_ylabel("messages/s")
    axes[2].set_title("One consumer", fontsize=9)
    fig.suptitle(f"Throughput, {SIZE}-byte messages, 6 partitions, three brokers on 2 cores")
    save(fig, outdir, "replication_throughput", stamp)

    cpu = [w.name for w in WORKLOADS if (w.name, "cpu_brokers") in idx]
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.26
    shades = ("#1f77b4", "#ff7f0e", "#2ca02c")
    for b in BROKERS:
        xs = [i + (b - 1) * width for i in range(len(cpu))]
        vals = [idx.get((w, f"cpu_broker{b}"), {}).get("median", 0) for w in cpu]
        ax.bar(
            xs,
            vals,
            width * 0.95,
            color=shades[b],
            edgecolor="black",
            linewidth=0.5,
            label=f"broker {b}",
        )
        for x, v in zip(xs, vals, strict=True):
            value_label(ax, x, v, fmt(v), 6, 2)
    ax.set_xticks(range(len(cpu)), [BY_NAME[w].label.replace(", ", "\n") for w in cpu], fontsize=7)
    ax.set_ylabel("CPU seconds per million messages")
    ax.set_title(
        "Broker CPU (utime + stime) per million messages; one leader: broker 0 leads, 1 and 2 follow"
    )
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    save(fig, outdir, "replication_cpu", stamp)

    if info.get("baseline"):
        fig, axes = plt.subplots(1, 3, figsize=(16, 5.5))
        for ax, (metric, title) in zip(
            axes,
            (
                ("throughput", "messages/s"),
                ("cpu_brokers", "CPU s per M messages, all brokers"),
                ("p50", "one-way latency p50, ms"),
            ),
            strict=True,
        ):
            names = [w.name for w in WORKLOADS if (w.name, metric) in idx]
            names = [w for w in names if (BASELINE + w, metric) in idx]
            for j, (prefix, label, shade) in enumerate(
                ((BASELINE, f"before ({info['baseline']['commit']})", 0.45), ("", "after", 1.0))
            ):
                xs = [i + (j - 0.5) * 0.38 for i in range(len(names))]
                vals = [idx[(prefix + w, metric)]["median"] for w in names]
                ax.bar(xs, vals, 0.36, color=blue, alpha=shade, edgecolor="black", linewidth=0.5)
                ax.bar([], [], color=blue, alpha=shade, label=label)
                for x, v in zip(xs, vals, strict=True):
                    value_label(ax, x, v, fmt(v), 6, 2)
            labels = [BY_NAME[w].label.replace(", ", "\n") for w in names]
            ax.set_xticks(range(len(names)), labels, fontsize=6)
            ax.set_title(title, fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle("The same workloads on the baseline's brokers and on this checkout's")
        save(fig, outdir, "replication_before_after", stamp)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    names = [w for w in ("latency_rf3_acks_all", "latency_rf1") if (w, "p50") in idx]
    for j, (q, label) in enumerate((("p50", "median"), ("p99", "p99"), ("p999", "p99.9"))):
        xs = [i + (j - 1) * 0.26 for i in range(len(names))]
        vals = [idx[(w, q)]["median"] for w in names]
        ax1.bar(
            xs,
            vals,
            0.25,
            color=blue,
            alpha=(1.0, 0.6, 0.3)[j],
            edgecolor="black",
            linewidth=0.5,
            label=label,
        )
        for x, v in zip(xs, vals, strict=True):
            value_label(ax1, x, v, fmt(v), 7, 2)
    ax1.set_xticks(range(len(names)), [BY_NAME[w].label for w in names], fontsize=8)
    ax1.set_yscale("log")
    ax1.set_ylabel("ms (log)")
    ax1.set_title("One-way latency, producer process to waiting consumer, one in flight")
    ax1.grid(axis="y", alpha=0.3, which="both")
    ax1.legend(fontsize=8)
    for w, style in zip(names, ("-", ":"), strict=False):
        samples = [x for rep in info.get("latencies", {}).get(w, []) for x in rep]
        plot_cdf(ax2, samples, style, BY_NAME[w].label, blue)
    cdf_axes(ax2)
    save(fig, outdir, "replication_latency", stamp)


# -- main ----------------------------------------------------------------------------------


def checkout(ref: str, where: Path) -> dict[str, Any]:
    """plugins/ of git `ref` extracted under `where` (git archive: the repository untouched)."""
    git = ["git", "-C", str(REPO_DIR)]
    found = subprocess.run([*git, "rev-parse", "--short", ref], capture_output=True, text=True)
    if found.returncode:
        raise SystemExit(f"--baseline {ref}: not a commit here: {found.stderr.strip()}")
    where.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        [*git, "archive", "--format=tar", ref, "plugins"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return {"ref": ref, "commit": found.stdout.strip(), "plugins": where / "plugins"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/replication.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--quick", action="store_true", help="tiny counts, 1 repetition (the test suite)"
    )
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 3; quick 1)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every message count")
    p.add_argument(
        "--only",
        default="",
        help="comma-separated workloads (default: all): " + ",".join(BY_NAME),
    )
    p.add_argument(
        "--latency-messages",
        type=int,
        default=None,
        help="messages timed by each latency workload (default 10000; quick 100)",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="default bench/results/replication (quick: a new directory under $TMPDIR)",
    )
    p.add_argument("--workdir", type=Path, default=None, help="servers' data (default: $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the servers' data")
    p.add_argument(
        "--baseline",
        metavar="GIT_REF",
        help="also run every workload on brokers from GIT_REF's plugins/ (git archive into "
        "the work dir; only the broker processes run it), each right beside this checkout's: "
        "before/after figures from one run",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="py-spy on every broker during the produce and consume workloads; "
        "summary in <output>/profile/summary.md",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs (no matplotlib)")
    args = p.parse_args(argv)
    unknown = [w for w in args.only.split(",") if w and w not in BY_NAME]
    if unknown:
        p.error(f"unknown workloads {', '.join(unknown)} (known: {', '.join(BY_NAME)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    args.reps = args.reps or cfg["reps"]
    if args.latency_messages:
        cfg["latency"] = args.latency_messages
    ok, why = run.systems.load(SYSTEM).available()
    if not ok:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    chosen = [w for w in WORKLOADS if not args.only or w.name in args.only.split(",")]
    invocation = Run(
        "bench/replication.py",
        args,
        argv,
        results=BENCH_DIR / "results" / "replication",
        prefix="logbroker-repl-bench",
    )
    run_id = invocation.id
    bench = Bench(args, cfg, run_id)
    baseline = None
    if args.baseline:
        baseline = checkout(args.baseline, args.workdir / "baseline")
        bench.variants.append((BASELINE, baseline["plugins"]))
    bench.profile_dir = invocation.profile_dir
    info = invocation.header(
        versions=run.systems.load(SYSTEM).versions(),
        workloads=[w.__dict__ for w in chosen],
        settings=BROKER_SETTINGS,
        baseline=None
        if baseline is None
        else {"ref": baseline["ref"], "commit": baseline["commit"]},
        parameters={
            "message_bytes": SIZE,
            "partitions": PARTITIONS,
            "batch": BATCH,
            "large_batch": LARGE,
            "reps": args.reps,
            "scale": args.scale,
            "n": int(cfg["n"] * args.scale),
            "n_large": int(cfg["n_large"] * args.scale),
            "n_consume": int(cfg["n_consume"] * args.scale),
            "latency": cfg["latency"],
            "latency_warmup": cfg["latency_warmup"],
        },
    )
    print(
        f"run {run_id}: {len(chosen)} workloads, {args.reps} repetitions; work dir "
        f"{args.workdir}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for rep in range(args.reps):
        order = chosen[rep % len(chosen) :] + chosen[: rep % len(chosen)]
        print(f"repetition {rep + 1} of {args.reps}: {' '.join(w.name for w in order)}", flush=True)
        bench.repetition(rep, order)
    invocation.ended(info)
    info["loads"] = bench.loads
    info["notes"] = bench.notes
    info["errors"] = bench.errors
    info["values"] = {f"{w}/{m}": v for (w, m), v in bench.values.items()}
    info["latencies"] = bench.latencies

    records = bench.records()
    return invocation.finish(
        records, info, bench.errors, markdown=markdown, plots=plots, table_text=table(records),
        no_plots_hint="pip install -r bench/requirements.txt installs matplotlib",
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
