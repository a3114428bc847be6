"""Faults for the chaos run: kill -9, a ZooKeeper session expired for real, by a seeded plan.

    plan = FaultPlan.seeded(seed, hours, per_kind)   which faults hit which simulated hour
    faults = Faults(stack, rng)                      inject them into a PipelineStack
    faults.kill_broker("live")                       kill -9, restart after a pause
    faults.expire_broker_session("live")             SIGSTOP past the session timeout, SIGCONT
    faults.kill_task_process("logbroker.cli mirror") kill -9 a task's process (mirror, spark)
    faults.kill_loading_leader(["searches"], 300)    kill -9 a partition's leader mid-load
    faults.kill_scheduler()                          kill -9 the scheduler, start it again

On a stack with replicated topics (PipelineStack(replicated=...)) a broker fault hits the
leader of one of their partitions (picked at random), so that every kill moves leadership.

A session expires the way it does in production: the process stops answering ZooKeeper's
pings (SIGSTOP) for longer than its session timeout, the server expires the session and
deletes its ephemeral nodes, and the process, resumed, finds its session gone. Every fault
is recorded with its time for the report's timeline.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from logbroker.client.cluster import Cluster
from logbroker.stack.airflow_stack import process_running
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.pipeline_stack import PipelineStack

KINDS = (
    "live_broker",  # kill -9 a live broker while producers send
    "broker_session",  # expire a live broker's ZooKeeper session while producers send
    "analysis_broker",  # kill -9 an analysis broker while the mirror copies
    "mirror",  # kill -9 the mirror task's process
    "consumer_session",  # expire the mirror's (a group consumer's) ZooKeeper session
    "spark_load",  # kill -9 a spark-submit of the hourly load during its write
    "scheduler",  # kill -9 Airflow's scheduler (restarted)
    "load_leader",  # kill -9 a replicated partition's analysis leader while its topic loads
)
SESSION_TIMEOUT_S = (
    6.0  # at least the brokers' (4 s, logbroker.stack.broker) and the mirror's zk.sessiontimeout.ms
)


@dataclass
class FaultPlan:
    """hour index -> the kinds of fault that hit it."""

    by_hour: dict[int, list[str]]

    @classmethod
    def seeded(cls, seed: int, hours: int, per_kind: int) -> FaultPlan:
        rng = random.Random(seed)
        by_hour: dict[int, list[str]] = {h: [] for h in range(hours)}
        for kind in KINDS:
            for hour in rng.sample(range(hours), min(per_kind, hours)):
                by_hour[hour].append(kind)
        return cls(by_hour)


@dataclass
class Faults:
    stack: PipelineStack
    rng: random.Random
    log: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    injected: Counter[str] = field(default_factory=Counter)
    timeline: list[tuple[float, str, str]] = field(default_factory=list)  # (t, kind, what)
    started: float = field(default_factory=time.monotonic)
    killed: set[int] = field(default_factory=set)  # pids of task processes this plan killed

    def _record(self, kind: str, what: str) -> None:
        self.injected[kind] += 1
        self.timeline.append((self.clock() - self.started, kind, what))
        self.log(f"  FAULT {kind}: {what}")

    def kill_broker(self, cluster: str) -> None:
        broker, led = self._victim(cluster, sorted(self.stack.replicated))
        broker.kill()
        self._record(f"{cluster}_broker", f"kill -9 broker {broker.broker_id} of {cluster}{led}")
        time.sleep(self.rng.uniform(1.0, 4.0))
        broker.start()

    def _victim(self, cluster: str, topics: list[str]) -> tuple[BrokerProcess, str]:
        """The broker of `cluster` leading a random partition of `topics` (replicated), and
        words saying so; a random broker when there is none."""
        brokers = self.stack.brokers[cluster]
        if topics:
            topic = self.rng.choice(topics)
            with Cluster(self.stack.connect(cluster)) as c:
                assignment = c.assignment(topic)
                partition = self.rng.randrange(assignment.partitions if assignment else 1)
                leader = c.leaders.leader(topic, partition)
            for broker in brokers:
                if broker.broker_id == leader:
                    return broker, f" (the leader of {topic}-{partition})"
        return self.rng.choice(brokers), ""

    def kill_loading_leader(self, topics: list[str], timeout: float) -> bool:
        """Once the hourly load of one of `topics` (replicated) reads and writes (its staging
        directory has rows), kill -9 the analysis broker leading one of the topic's
        partitions, and start it again after a pause: the load reads on from the new
        leader. Skipped if no such load shows up within `timeout`."""
        topic = self.rng.choice(sorted(topics))
        staging = self.stack.warehouse / "_staging" / topic

        def loading() -> bool:  # a live spark-submit of the topic (not one killed) writes
            running = [p for p in self.load_processes(topic) if p not in self.killed]
            return bool(running) and any(staging.glob("*/rows"))

        deadline = self.clock() + timeout
        while not loading():
            if self.clock() >= deadline:
                self.log(f"  (no load of {topic} wrote in {timeout:g} s: load_leader skipped)")
                return False
            time.sleep(0.1)
        time.sleep(self.rng.uniform(0.0, 1.5))
        broker, led = self._victim("analysis", [topic])
        broker.kill()
        self._record("load_leader", f"kill -9 analysis broker {broker.broker_id}{led}")
        time.sleep(self.rng.uniform(1.0, 4.0))
        broker.start()
        return True

    def _expire(self, pid: int, kind: str, what: str) -> bool:
        """SIGSTOP `pid` past the ZooKeeper session timeout, then SIGCONT; False (nothing
        injected) if it is gone before it could be stopped."""
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        self._record(kind, what)
        try:
            time.sleep(SESSION_TIMEOUT_S * 1.5 + 1)
        finally:
            with contextlib.suppress(ProcessLookupError):  # killed meanwhile by another fault
                os.kill(pid, signal.SIGCONT)
        return True

    def expire_broker_session(self, cluster: str) -> None:
        broker = self.rng.choice(self.stack.brokers[cluster])
        assert broker.pid is not None
        self._expire(
            broker.pid, "broker_session", f"expire the session of broker {broker.broker_id}"
        )

    def task_processes(self, marker: str) -> list[int]:
        """This stack's processes whose command line holds `marker`."""
        home = f"AIRFLOW_HOME={self.stack.airflow.home}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if marker.encode() not in (entry / "cmdline").read_bytes().replace(b"\0", b" "):
                    continue
                if home in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def load_processes(self, topic: str) -> list[int]:
        """This stack's hourly loads whose `--topics` holds `topic`: a load takes a batch of
        topics (`--topics a,b,c`, pipeline.json's topics_per_load)."""
        found = []
        for pid in self.task_processes("hourly_load.py"):
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(
                flag == b"--topics" and topic.encode() in value.split(b",")
                for flag, value in itertools.pairwise(args)
            ):
                found.append(pid)
        return found

    def wait_task_process(self, marker: str, timeout: float) -> int | None:
        """The first live process matching `marker`, not one this plan killed (it may linger
        in /proc until reaped), within `timeout`."""
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            found = [
                pid
                for pid in self.task_processes(marker)
                if pid not in self.killed and process_running(pid)
            ]
            if found:
                return found[0]
            time.sleep(0.1)
        return None

    def kill_task_process(self, kind: str, marker: str, timeout: float, delay: float) -> bool:
        """kill -9 the first process matching `marker` (and its group) within `timeout`."""
        pid = self.wait_task_process(marker, timeout)
        if pid is None:
            self.log(f"  (no {marker!r} process showed up in {timeout:g} s: {kind} skipped)")
            return False
        time.sleep(delay)
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.killed.add(pid)
        self._record(kind, f"kill -9 {marker} (pid {pid})")
        return True

    def expire_consumer_session(self, marker: str, timeout: float) -> bool:
        pid = self.wait_task_process(marker, timeout)
        if pid is None:
            self.log(f"  (no {marker!r} process showed up: consumer_session skipped)")
            return False
        if not self._expire(pid, "consumer_session", f"expire the session of {marker} (pid {pid})"):
            self.log(f"  ({marker!r} pid {pid} was gone: consumer_session skipped)")
            return False
        return True

    def kill_scheduler(self) -> bool:
        """kill -9 the scheduler and start a new one; skipped if the stack already stopped."""
        process = self.stack.airflow.processes.get("scheduler")
        if process is None or process.poll() is not None:
            self.log("  (the scheduler was not running: scheduler fault skipped)")
            return False
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            self.log(f"  (scheduler pid {process.pid} was gone: scheduler fault skipped)")
            return False
        process.wait()
        self._record("scheduler", f"kill -9 the scheduler (pid {process.pid})")
        time.sleep(self.rng.uniform(1.0, 3.0))
        if "scheduler" not in self.stack.airflow.processes:
            return True  # the stack was stopped meanwhile: starting one would leak it
        self.stack.airflow.start(("scheduler",))
        return True
