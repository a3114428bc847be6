"""The faults of a fault run (the nemesis), on a schedule drawn from a seed.

    schedule = Schedule.seeded(seed, partitions=3)        # rounds of every kind, shuffled
    nemesis = Nemesis(cluster, log=print)                 # cluster: a started ReplCluster
    for step in schedule.steps(duration_s=0): nemesis.inject(step)   # 0: one round
    nemesis.events                                        # what was done, when, and its effect

One step is one fault, undone before the next step starts (after the step's `gap`):

| kind              | target                         | fault                          | held until (then `hold` s more)         |
|-------------------|--------------------------------|--------------------------------|-----------------------------------------|
| `kill_leader`     | the leader of partition p      | kill -9 (`Network.kill`), then `broker.start()` on the same files | (`hold` s)           |
| `kill_controller` | the controller                 | the same                       | (`hold` s)                              |
| `pause`           | the leader of partition p      | SIGSTOP, then SIGCONT          | its registration is gone: its ZooKeeper session expired |
| `cut_follower`    | an in-sync follower of p       | `cut_between(follower, leader)`| the follower is out of p's ISR          |
| `cut_leader_zk`   | the leader of p                | `cut_between(leader, zk)`: producers and followers still reach it | p has another leader (or none) |

The schedule fixes each step's kind, partition, `hold` and `gap` from the seed; which broker is
hit depends on who leads when the step starts. A step whose effect does not show within
EFFECT_TIMEOUT_S is undone all the same and its event says "no effect"; a step with no
target (no leader, no in-sync follower) is skipped and says why. Every event carries
wall-clock times (time.time(), as the clients' histories).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ...protocol.errors import describe_exception
from .cluster import ReplCluster

KINDS = ("kill_leader", "kill_controller", "pause", "cut_follower", "cut_leader_zk")
EFFECT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Step:
    kind: str
    partition: int
    hold: float  # seconds the fault stays after its effect showed (a kill: the time down)
    gap: float  # seconds after the step, before the next one


@dataclass
class Schedule:
    seed: int
    partitions: int

    @classmethod
    def seeded(cls, seed: int, partitions: int) -> Schedule:
        return cls(seed, partitions)

    def steps(
        self, duration_s: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> Iterator[Step]:
        """Rounds of every kind once, each round shuffled; with `duration_s` 0 one round,
        else rounds until `duration_s` has passed (the last step started before that ends)."""
        rng = random.Random(self.seed)
        started = clock()
        while True:
            kinds = list(KINDS)
            rng.shuffle(kinds)
            for kind in kinds:
                hold = rng.uniform(1.0, 3.0) if kind.startswith("kill") else rng.uniform(0.5, 2.0)
                yield Step(
                    kind,
                    rng.randrange(self.partitions),
                    round(hold, 2),
                    round(rng.uniform(0.5, 2.0), 2),
                )
            if duration_s <= 0 or clock() - started >= duration_s:
                return


@dataclass
class FaultEvent:
    kind: str
    partition: int
    start: float  # time.time() when the fault took effect on the network or the process
    end: float = 0.0  # when it was undone (a kill: the broker listens again)
    target: int = -1  # the broker hit
    detail: str = ""  # what was done
    effect: str = ""  # what the cluster did about it, as ZooKeeper showed it
    took_effect: bool = False
    skipped: str = ""  # why nothing was done

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Nemesis:
    cluster: ReplCluster
    log: Callable[[str], object] = print
    events: list[FaultEvent] = field(default_factory=list)

    def inject(self, step: Step) -> FaultEvent:
        event = FaultEvent(step.kind, step.partition, time.time())
        try:
            getattr(self, f"_{step.kind}")(step, event)
        except Exception as exc:  # a harness failure is the run's failure, said with the step
            event.skipped = event.skipped or f"failed: {describe_exception(exc)}"
            self.log(f"  FAULT {step.kind} p{step.partition}: {event.skipped}")
            raise
        finally:
            event.end = event.end or time.time()
            self.events.append(event)
        self.log(
            f"  FAULT {step.kind} p{step.partition}: "
            + (f"skipped ({event.skipped})" if event.skipped else f"{event.detail}; {event.effect}")
        )
        time.sleep(step.gap)
        return event

    # -- the kinds --------------------------------------------------------------------------

    def _kill_leader(self, step: Step, event: FaultEvent) -> None:
        leader = self.cluster.leader(step.partition)
        if leader is None:
            event.skipped = f"partition {step.partition} has no leader"
            return
        self._kill(leader, step, event, f"kill -9 broker {leader}, the leader of p{step.partition}")

    def _kill_controller(self, step: Step, event: FaultEvent) -> None:
        controller = self.cluster.controller()
        if controller is None:
            event.skipped = "no controller"
            return
        self._kill(controller, step, event, f"kill -9 broker {controller}, the controller")

    def _kill(self, broker_id: int, step: Step, event: FaultEvent, detail: str) -> None:
        before = self.cluster.state(step.partition)
        host = self.cluster.hosts[broker_id]
        event.start = time.time()
        self.cluster.net.kill(host)
        event.target, event.detail = broker_id, detail
        gone = self.cluster.wait(lambda: broker_id not in self.cluster.live(), EFFECT_TIMEOUT_S)
        time.sleep(step.hold)
        after = self.cluster.state(step.partition)
        controller = self.cluster.controller()
        event.took_effect = gone
        event.effect = (
            ("its session ended; " if gone else "its session did not end; ")
            + _moved(before, after, step.partition)
            + f"; controller {controller}"
        )
        self.cluster.brokers[broker_id].start()
        event.end = time.time()
        event.detail += f", restarted {event.end - event.start:.1f} s later"

    def _pause(self, step: Step, event: FaultEvent) -> None:
        leader = self.cluster.leader(step.partition)
        if leader is None:
            event.skipped = f"partition {step.partition} has no leader"
            return
        before = self.cluster.state(step.partition)
        host = self.cluster.hosts[leader]
        event.start = time.time()
        self.cluster.net.pause(host)
        event.target, event.detail = (
            leader,
            f"SIGSTOP broker {leader}, the leader of p{step.partition}",
        )
        try:
            event.took_effect = self.cluster.wait(
                lambda: leader not in self.cluster.live(), EFFECT_TIMEOUT_S
            )
            time.sleep(step.hold)
            after = self.cluster.state(step.partition)
        finally:
            self.cluster.net.resume(host)
        event.end = time.time()
        event.effect = (
            "its session expired; " if event.took_effect else "its session did not expire; "
        ) + _moved(before, after, step.partition)
        event.detail += f", SIGCONT {event.end - event.start:.1f} s later"

    def _cut_follower(self, step: Step, event: FaultEvent) -> None:
        before = self.cluster.state(step.partition)
        if before is None or not before.online:
            event.skipped = f"partition {step.partition} has no leader"
            return
        leader = before.leader
        followers = [r for r in before.isr if r != leader and r in self.cluster.running()]
        if not followers:
            event.skipped = (
                f"partition {step.partition} has no in-sync follower (ISR {list(before.isr)})"
            )
            return
        follower = followers[0]
        a, b = self.cluster.hosts[follower], self.cluster.hosts[leader]
        event.start = time.time()
        self.cluster.net.cut_between(a, b)
        event.target = follower
        event.detail = (
            f"cut broker {follower} from broker {leader}, the leader of p{step.partition}"
        )

        def out_of_isr() -> bool:
            state = self.cluster.state(step.partition)
            return state is not None and follower not in state.isr

        try:
            event.took_effect = self.cluster.wait(out_of_isr, EFFECT_TIMEOUT_S)
            time.sleep(step.hold)
            after = self.cluster.state(step.partition)
        finally:
            self.cluster.net.heal_between(a, b)
        event.end = time.time()
        event.effect = (
            f"ISR {list(before.isr)} -> {list(after.isr) if after else '?'}"
            if event.took_effect
            else f"broker {follower} stayed in the ISR"
        )
        event.detail += f", healed {event.end - event.start:.1f} s later"

    def _cut_leader_zk(self, step: Step, event: FaultEvent) -> None:
        before = self.cluster.state(step.partition)
        if before is None or not before.online:
            event.skipped = f"partition {step.partition} has no leader"
            return
        leader = before.leader
        host = self.cluster.hosts[leader]
        event.start = time.time()
        self.cluster.net.cut_between(host, self.cluster.zk_host)
        event.target = leader
        event.detail = f"cut broker {leader}, the leader of p{step.partition}, from ZooKeeper"

        def moved() -> bool:
            state = self.cluster.state(step.partition)
            return state is not None and state.leader != leader

        try:
            event.took_effect = self.cluster.wait(moved, EFFECT_TIMEOUT_S)
            time.sleep(step.hold)  # producers that have not noticed still write to it
            after = self.cluster.state(step.partition)
        finally:
            self.cluster.net.heal_between(host, self.cluster.zk_host)
        event.end = time.time()
        event.effect = _moved(before, after, step.partition)
        event.detail += f", healed {event.end - event.start:.1f} s later"


def _moved(before: Any, after: Any, partition: int) -> str:
    """How a partition's leadership changed, in a few words."""
    if before is None or after is None:
        return f"p{partition}: state unknown"
    if (before.leader, before.leader_epoch) == (after.leader, after.leader_epoch):
        return f"p{partition}: leader {before.leader} kept (epoch {before.leader_epoch})"
    return (
        f"p{partition}: leader {before.leader} -> "
        + (str(after.leader) if after.online else "none")
        + f", epoch {before.leader_epoch} -> {after.leader_epoch}, ISR {list(after.isr)}"
    )
