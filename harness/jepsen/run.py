"""A fault run from the first broker to the verdict; `python -m harness.jepsen.run`.

    with Network(directory, host_names(3, 2, 1)) as net:
        outcome = run(net, Settings(seed=1), results_dir)
    outcome.verdict["valid"]

    python -m harness.jepsen.run --seeds 1,2,3 --duration 120 --results DIR

What a run does, in order:

1. ZooKeeper and three brokers on hosts of their own (cluster.py), a topic of `partitions`
   partitions with three replicas each;
2. the clients (workload.py), each a process on its own host: `producers` producers of
   `threads` threads (acks=-1, unique values), `acks1_producers` more with acks=1 (named on
   from them: by default p1 and p2 write with acks=-1, p3 with acks=1), and `readers`
   readers of every partition;
3. once every producer has had a write acknowledged, `warmup_s`, then the nemesis
   (nemesis.py): one round of every kind of fault (`duration_s` 0) or rounds until
   `duration_s` has passed;
4. healing: every fault undone, every broker running; then it waits up to
   `recovery_timeout_s` for every ISR to be whole again, lets the producers write for
   `cooldown_s` more, and stops them (SIGTERM: the send in flight is finished);
5. once every replica has its leader's whole log, the final read of every partition from
   its leader, from offset 0 to its high watermark; then the readers are stopped once they
   have read as far (or after READERS_CATCH_UP_S);
6. what the checker needs from the disks and the logs: each replica's bytes below the high
   watermark (hashed, and compared with the leader's), its leader epochs, the leaderships
   the brokers took (their logs);
7. the history (history.py), the verdict (checker.py) and the timeline (timeline.py) in
   the results directory:

    <results>/history.json     history.py's layout
    <results>/verdict.json     checker.check's answer
    <results>/summary.txt      the verdict, the figures and the faults, for people
    <results>/timeline.png     faults and throughput, when matplotlib is installed
                               (pip install -r bench/requirements.txt)

The run's own progress goes to `log` (print by default), one line per step and per fault.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from logbroker.client.leaders import Leaders
from logbroker.client.partition_reader import PartitionReader
from logbroker.protocol.errors import LogbrokerError, describe_exception

from ..hosts import HostProcess, Network
from . import checker, timeline
from .cluster import BROKER_SETTINGS, ReplCluster, host_names, is_running
from .history import VERSION, History, merge_client_history, save
from .nemesis import Nemesis, Schedule

# The clients run `-m harness.jepsen.workload` from the checkout's root: harness/ is imported
# from there (as `make chaos-replication` does), never installed.
CHECKOUT = Path(__file__).resolve().parents[2]
READERS_CATCH_UP_S = 15.0
CLIENT_STOP_S = 30.0  # a producer finishes its send in flight (retries included) by then


@dataclass
class Settings:
    seed: int = 1
    duration_s: float = 0.0  # 0: one round of every kind of fault
    partitions: int = 3
    brokers: int = 3
    producers: int = 2  # acks=-1
    acks1_producers: int = 1  # acks=1, beside them: their losses are counted, not checked
    threads: int = 3  # per producer; thread i writes partition i % partitions
    rate: float = 20.0  # sends a second per producer thread
    readers: int = 1
    warmup_s: float = 2.0
    cooldown_s: float = 2.0
    recovery_timeout_s: float = 60.0
    request_timeout_ms: int = 3000
    retries: int = 3
    topic: str = "jepsen"

    def hosts(self) -> list[str]:
        return host_names(self.brokers, self.producers + self.acks1_producers, self.readers)


@dataclass
class Outcome:
    history: History
    verdict: dict[str, Any]
    results: Path
    files: dict[str, Path] = field(default_factory=dict)


@dataclass
class _Client:
    name: str
    process: HostProcess
    history: Path


def run(
    net: Network, settings: Settings, results: Path, log: Callable[[str], object] = print
) -> Outcome:
    """One fault run on a started network made with `settings.hosts()` (see the module doc)."""
    results.mkdir(parents=True, exist_ok=True)
    history: History = {
        "version": VERSION,
        "meta": {
            "seed": settings.seed,
            "topic": settings.topic,
            "partitions": settings.partitions,
            "brokers": list(range(1, settings.brokers + 1)),
            "started": time.time(),
            "settings": {**asdict(settings), "broker": BROKER_SETTINGS},
        },
        "ops": [],
        "reads": [],
        "read_errors": [],
    }
    cluster = ReplCluster(net, settings.brokers, settings.topic)
    nemesis = Nemesis(cluster, log=log)
    producers: list[_Client] = []
    readers: list[_Client] = []
    try:
        log(f"seed {settings.seed}: starting ZooKeeper and {settings.brokers} brokers")
        cluster.start()
        cluster.create_topic(settings.partitions)
        producers = [
            _start_client(
                net,
                cluster,
                settings,
                "produce",
                f"p{i}",
                acks=-1 if i <= settings.producers else 1,
            )
            for i in range(1, settings.producers + settings.acks1_producers + 1)
        ]
        readers = [
            _start_client(net, cluster, settings, "read", f"c{i}")
            for i in range(1, settings.readers + 1)
        ]
        if not cluster.wait(lambda: all(_acknowledged(c) for c in producers), 60.0):
            raise RuntimeError(
                "a producer had no write acknowledged within 60 s: see "
                + ", ".join(str(c.process.log_path) for c in producers)
            )
        time.sleep(settings.warmup_s)
        log(f"nemesis: {'one round' if settings.duration_s <= 0 else f'{settings.duration_s:g} s'}")
        for step in Schedule.seeded(settings.seed, settings.partitions).steps(settings.duration_s):
            nemesis.inject(step)
        history["meta"]["nemesis_ended"] = time.time()

        net.heal_all()
        for broker in cluster.brokers.values():
            if not is_running(broker):
                broker.start()
        recovered = cluster.wait(cluster.healthy, settings.recovery_timeout_s)
        history["recovered"] = recovered
        history["recovery"] = (
            f"every ISR whole {time.time() - history['meta']['nemesis_ended']:.1f} s after the healing"
            if recovered
            else _unhealthy(cluster, settings.recovery_timeout_s)
        )
        log(history["recovery"])
        time.sleep(settings.cooldown_s)
        for client in producers:
            client.process.terminate(CLIENT_STOP_S)

        history["final"] = _final_read(cluster, log)
        _stop_readers(readers, history["final"])
        history["replicas"] = _replicas(cluster, history["final"])
        history["leader_claims"] = [list(c) for c in cluster.leader_claims()]
    finally:
        for client in producers + readers:
            client.process.terminate(CLIENT_STOP_S)
        cluster.stop_watching()
        history["meta"]["ended"] = time.time()
        history["faults"] = [e.as_dict() for e in nemesis.events]
        history["network"] = [
            {"t": e.time, "action": e.action, "hosts": list(e.hosts)} for e in net.history
        ]
        watcher = cluster.watcher
        history["states"] = [asdict(s) for s in watcher.states]
        history["controllers"] = [list(c) for c in watcher.controllers]
        history["live"] = [[t, list(ids)] for t, ids in watcher.live]
        for client in producers + readers:
            merge_client_history(history, client.name, client.history)
        history["ops"].sort(key=lambda op: op["invoke"])
        save(history, results / "history.json")

    verdict = checker.check(history)
    outcome = Outcome(history, verdict, results)
    outcome.files["history"] = results / "history.json"
    (results / "verdict.json").write_text(json.dumps(verdict, indent=1) + "\n")
    outcome.files["verdict"] = results / "verdict.json"
    text = checker.summary(verdict) + "\n" + _fault_lines(history) + "\n"
    (results / "summary.txt").write_text(text)
    outcome.files["summary"] = results / "summary.txt"
    if timeline.plot(history, verdict, results / "timeline.png"):
        outcome.files["timeline"] = results / "timeline.png"
    log(text.rstrip())
    return outcome


def _start_client(
    net: Network, cluster: ReplCluster, settings: Settings, role: str, name: str, acks: int = -1
) -> _Client:
    host = net.host(name)
    path = host.directory / f"{name}.jsonl"
    argv = [
        sys.executable, "-m", "harness.jepsen.workload", role,
        "--zookeeper", cluster.connect, "--topic", settings.topic,
        "--partitions", str(settings.partitions), "--name", name, "--out", str(path),
        "--threads", str(settings.threads), "--rate", str(settings.rate),
        "--request-timeout-ms", str(settings.request_timeout_ms),
        "--retries", str(settings.retries),
    ]  # fmt: skip
    if role == "produce":
        argv += ["--acks", str(acks)]
    return _Client(name, host.run(argv, name=f"{role}-{name}", cwd=CHECKOUT), path)


def _acknowledged(client: _Client) -> bool:
    if not client.process.running:
        raise RuntimeError(f"client {client.name} exited: see {client.process.log_path}")
    return client.history.exists() and b'"f":"ok"' in client.history.read_bytes()


def _unhealthy(cluster: ReplCluster, waited: float) -> str:
    states = {p: cluster.state(p) for p in range(cluster.partitions)}
    return (
        f"not recovered {waited:g} s after the healing: live brokers {sorted(cluster.live())}, "
        + ", ".join(
            f"p{p} leader {s.leader} ISR {list(s.isr)}" if s else f"p{p} no state"
            for p, s in states.items()
        )
    )


def _final_read(cluster: ReplCluster, log: Callable[[str], object]) -> dict[str, Any]:
    """Every partition from its leader, 0 to the high watermark, once every replica holds the
    leader's whole log (the producers have stopped: nothing moves any more)."""

    def settled(p: int) -> bool:
        ends = {b: len(cluster.replica_bytes(b, p)) for b in cluster.replicas[p]}
        return len(set(ends.values())) == 1

    cluster.wait(lambda: all(settled(p) for p in range(cluster.partitions)), 30.0, poll=0.2)
    out: dict[str, Any] = {}
    leaders = Leaders(cluster.client)
    for p in range(cluster.partitions):
        reader = PartitionReader(leaders, cluster.topic, p, timeout=10.0, leader_timeout_ms=30000)
        try:
            hw = reader.latest_offset()
            messages = [
                [m.offset, m.next_offset, m.payload.decode(errors="replace")]
                for m in reader.iter_messages(0)
            ]
            # the high watermark does not move without producers, but it is read again in
            # case a follower's catching up moved it meanwhile
            hw = max(hw, reader.latest_offset())
        except LogbrokerError as exc:  # no leader answers: the checker says p was not read
            log(f"final read of p{p} failed: {describe_exception(exc)}")
            continue
        finally:
            reader.close()
        out[str(p)] = {"leader": cluster.leader(p), "high_watermark": hw, "messages": messages}
        log(
            f"final read of p{p} from broker {cluster.leader(p)}: {len(messages)} messages, high watermark {hw}"
        )
    leaders.close()
    return out


def _stop_readers(readers: list[_Client], final: dict[str, Any]) -> None:
    """Stop the readers once each has read every partition up to its final high watermark."""
    ends = {int(p): f["high_watermark"] for p, f in final.items()}

    def caught_up(client: _Client) -> bool:
        reached: dict[int, int] = {}
        if client.history.exists():
            for line in client.history.read_text().splitlines():
                if '"f":"read"' in line:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    reached[record["partition"]] = record["next"]
        return all(reached.get(p, 0) >= end for p, end in ends.items())

    deadline = time.monotonic() + READERS_CATCH_UP_S
    while time.monotonic() < deadline and not all(caught_up(c) for c in readers):
        time.sleep(0.2)
    for client in readers:
        client.process.terminate(CLIENT_STOP_S)


def _replicas(cluster: ReplCluster, final: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, read in final.items():
        p, hw, leader = int(key), read["high_watermark"], read["leader"]
        leader_bytes = cluster.replica_bytes(leader, p)[:hw] if leader is not None else b""
        replicas = {}
        for broker in cluster.replicas[p]:
            data = cluster.replica_bytes(broker, p)
            below = data[:hw]
            replicas[str(broker)] = {
                "end": len(data),
                "sha256": hashlib.sha256(below).hexdigest(),
                "first_difference": _first_difference(below, leader_bytes, hw),
                "epochs": [list(e) for e in cluster.replica_epochs(broker, p)],
            }
        out[key] = replicas
    return out


def _first_difference(a: bytes, b: bytes, length: int) -> int | None:
    if a == b and len(a) == length:
        return None
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return min(len(a), len(b))


def _fault_lines(history: History) -> str:
    start = history["meta"]["started"]
    lines = ["faults (seconds into the run):"]
    for e in history.get("faults", []):
        when = f"  {e['start'] - start:7.1f}-{e['end'] - start:7.1f}"
        if e.get("skipped"):
            lines.append(f"{when} {e['kind']} p{e['partition']}: skipped ({e['skipped']})")
        else:
            lines.append(f"{when} {e['kind']}: {e['detail']}; {e['effect']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run fault runs at one or more seeds on hosts of their own (needs root); exit 0 only when
    every verdict is valid."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--seeds", default="1", help="space- or comma-separated seeds")
    parser.add_argument(
        "--duration", type=float, default=120.0, help="seconds of faults per seed (0: one round)"
    )
    parser.add_argument("--results", type=Path, default=Path("var/chaos-replication"))
    parser.add_argument("--rate", type=float, default=Settings.rate)
    parser.add_argument("--partitions", type=int, default=Settings.partitions)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.replace(",", " ").split()]
    if not seeds:
        parser.error("--seeds names no seed")
    verdicts: dict[int, str] = {}
    for seed in seeds:
        settings = Settings(
            seed=seed, duration_s=args.duration, rate=args.rate, partitions=args.partitions
        )
        results = (args.results / f"seed-{seed}").resolve()
        shutil.rmtree(results, ignore_errors=True)  # a seed's results are its last run's
        try:
            with Network(results / "hosts", settings.hosts()) as net:
                outcome = run(net, settings, results)
        except Exception as exc:  # the harness failed: no verdict; the next seed runs all the same
            verdicts[seed] = f"NO VERDICT: the run failed: {describe_exception(exc)}"
            traceback.print_exc()
        else:
            verdicts[seed] = "VALID" if outcome.verdict["valid"] else "INVALID"
        print(f"seed {seed}: {verdicts[seed]} ({results})", flush=True)
    for seed, verdict in verdicts.items():
        print(f"seed {seed}: {verdict}")
    return 0 if all(v == "VALID" for v in verdicts.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
