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
| `flip_byte`       | an in-sync follower of p       | stopped (`stop`: clean, or kill -9), one bit of one entry of its replica of p flipped (`where`, `byte`, `bit`), started again after `hold` s | its replica is byte-identical to the other in-sync replicas' again, at least as long as before, and it is back in p's ISR |
| `torn_end`        | an in-sync follower of p       | the same, but its newest segment cut inside its last entry (`where`: how far in) | the same |

The disk faults damage the files of a stopped broker, as a disk or an operator's tool would: a
broker never sees its files change under it. The start-up check (storage/recovery.py) is to
cut the log at the first bad entry, every segment after a kill -9, the files changed since
the clean stop after a clean one; replication then refills it. In each round one of the two is
done after a clean stop and the other after a kill -9 (which one is drawn from the seed). The
event says which field of the entry was hit (size, magic, attributes, CRC, payload: 0.7's CRC
covers the payload only) and what the start-up check cut, from the broker's log.

The schedule fixes each step's kind, partition, `hold` and `gap` (and for the disk faults
`stop`, `where`, `byte` and `bit`) from the seed; which broker is hit depends on who leads
when the step starts, and the damaged entry on the replica's length then. A step whose effect
does not show within EFFECT_TIMEOUT_S is undone all the same and its event says "no effect"
(a disk fault: what still differs); a step with no target (no leader, no in-sync follower) is
skipped and says why. Every event carries wall-clock times (time.time(), as the clients'
histories).
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from logbroker.protocol.errors import CorruptMessageError, describe_exception
from logbroker.protocol.message_set import iter_entries
from logbroker.storage.segment import parse_segment_file_name

from .cluster import ReplCluster

DISK_KINDS = ("flip_byte", "torn_end")
KINDS = ("kill_leader", "kill_controller", "pause", "cut_follower", "cut_leader_zk", *DISK_KINDS)
EFFECT_TIMEOUT_S = 15.0
# a flip hits one of an entry's first FLIP_SPAN bytes: the 10 of a magic-1 header and the
# shortest payload a producer of workload.py sends ("p1.0.0"), so the seed alone fixes the field
FLIP_SPAN = 16
_FIELDS = ((4, "size"), (5, "magic"), (6, "attributes"), (10, "CRC"))
# "jepsen-0: recovery of files changed while down cut 57 bytes (...) at offset 1234: ..."
_RECOVERY_LINE = re.compile(r"(?P<name>\S+): recovery (?P<what>.*)")
_SET_ASIDE = re.compile(r"set aside whole \((?P<names>[^)]*)\)")


@dataclass(frozen=True)
class Step:
    kind: str
    partition: int
    hold: float  # seconds the fault stays after its effect showed (a kill: the time down)
    gap: float  # seconds after the step, before the next one
    # the disk faults (DISK_KINDS) only:
    stop: str = ""  # "clean" (SIGTERM, a clean shutdown) or "kill" (kill -9) before the damage
    # flip_byte: which entry (a fraction of them); torn_end: how far into the last one
    where: float = 0.0
    byte: int = 0  # flip_byte: which byte of the entry (0 to FLIP_SPAN - 1)
    bit: int = 0  # flip_byte: which bit of that byte


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
        else rounds until `duration_s` has passed (the last step started before that ends).
        In a round one disk fault follows a clean stop, the other a kill -9."""
        rng = random.Random(self.seed)
        started = clock()
        while True:
            kinds = list(KINDS)
            rng.shuffle(kinds)
            after_clean_stop = rng.choice(DISK_KINDS)
            for kind in kinds:
                hold = rng.uniform(1.0, 3.0) if kind.startswith("kill") else rng.uniform(0.5, 2.0)
                step = Step(
                    kind,
                    rng.randrange(self.partitions),
                    round(hold, 2),
                    round(rng.uniform(0.5, 2.0), 2),
                )
                if kind in DISK_KINDS:
                    where, byte, bit = rng.random(), rng.randrange(FLIP_SPAN), rng.randrange(8)
                    flips = kind == "flip_byte"
                    step = replace(
                        step,
                        stop="clean" if kind == after_clean_stop else "kill",
                        where=round(where, 4),
                        byte=byte if flips else 0,
                        bit=bit if flips else 0,
                    )
                yield step
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

    def _flip_byte(self, step: Step, event: FaultEvent) -> None:
        self._damage_stopped(step, event, flip_bit)

    def _torn_end(self, step: Step, event: FaultEvent) -> None:
        self._damage_stopped(step, event, tear_end)

    def _damage_stopped(
        self, step: Step, event: FaultEvent, damage: Callable[[list[Path], Step], str]
    ) -> None:
        """Stop an in-sync follower of the step's partition (`step.stop`), damage its replica
        with `damage`, start it again after `step.hold` s, and wait until it is healed."""
        p = step.partition
        before = self.cluster.state(p)
        if before is None or not before.online:
            event.skipped = f"partition {p} has no leader"
            return
        followers = [r for r in before.isr if r != before.leader and r in self.cluster.running()]
        if not followers:
            event.skipped = f"partition {p} has no in-sync follower (ISR {list(before.isr)})"
            return
        target = followers[0]
        broker = self.cluster.brokers[target]
        event.target = target
        event.start = time.time()
        if step.stop == "clean":
            code = broker.stop()
            how = f"stopped broker {target} " + ("cleanly" if code == 0 else f"(exit {code})")
        else:
            self.cluster.net.kill(self.cluster.hosts[target])
            how = f"kill -9 broker {target}"
        segments = self.cluster.segments(target, p)
        length = sum(path.stat().st_size for path in segments)
        event.detail = f"{how}, a follower of p{p}; {damage(segments, step)}"
        time.sleep(step.hold)
        log_start = broker.log_path.stat().st_size if broker.log_path.exists() else 0
        broker.start()
        event.end = time.time()
        event.detail += f"; started again {event.end - event.start:.1f} s later"
        event.took_effect = self.cluster.wait(
            lambda: self._identical_again(target, p, length), EFFECT_TIMEOUT_S, poll=0.2
        )
        healed = time.time() - event.end
        cut = _recovery_said(broker.log_since(log_start), f"{self.cluster.topic}-{p}")
        event.effect = (
            (f"at start: recovery {'; '.join(cut)}" if cut else f"at start: nothing of p{p} cut")
            + "; "
            + (
                f"byte-identical to the in-sync replicas and in the ISR {healed:.1f} s after "
                "the start"
                if event.took_effect
                else self._difference(target, p, length)
            )
        )

    def _identical_again(self, broker_id: int, partition: int, length: int) -> bool:
        """In the ISR, at least `length` bytes long, and each other in-sync replica's bytes
        equal to its own as far as both reach (at least `length`: they still grow)."""
        state = self.cluster.state(partition)
        if state is None or not state.online or broker_id not in state.isr:
            return False
        mine = self.cluster.replica_bytes(broker_id, partition)
        for other in state.isr:
            if other != broker_id:
                theirs = self.cluster.replica_bytes(other, partition)
                n = min(len(mine), len(theirs))
                if n < length or mine[:n] != theirs[:n]:
                    return False
        return len(mine) >= length

    def _difference(self, broker_id: int, partition: int, length: int) -> str:
        """Why a damaged replica is not healed yet, in a few words."""
        state = self.cluster.state(partition)
        mine = self.cluster.replica_bytes(broker_id, partition)
        if state is None or not state.online:
            return f"not healed: p{partition} has no leader"
        theirs = self.cluster.replica_bytes(state.leader, partition)
        n = min(len(mine), len(theirs))
        first = next((i for i in range(n) if mine[i] != theirs[i]), None)
        return (
            f"not healed {EFFECT_TIMEOUT_S:g} s after the start: "
            + ("in" if broker_id in state.isr else "not in")
            + f" the ISR {list(state.isr)}, {len(mine)} bytes (before the damage {length}), "
            + (
                f"first differs from leader {state.leader}'s at byte {first}"
                if first is not None
                else f"a prefix of leader {state.leader}'s {len(theirs)} bytes"
            )
        )


def _recovery_said(text: str, name: str) -> list[str]:
    """What a broker's log says its start-up check cut of the log `name` ("jepsen-0"), short:
    where and why, and how many later segments it set aside (storage/log.py's warning)."""
    said = []
    for match in map(_RECOVERY_LINE.search, text.splitlines()):
        if match is None or match["name"] != name:
            continue
        what = match["what"].split("; the cut bytes")[0]
        aside = _SET_ASIDE.search(match["what"])
        if aside is not None:
            what += f", {len(aside['names'].split(', '))} later segment(s) set aside"
        said.append(what)
    return said


def _entries(segments: list[Path]) -> list[tuple[Path, int, int, int]]:
    """(segment, position in it, length with the size field, partition offset) of every whole
    entry, oldest first; a segment's walk stops at an entry that cannot be framed."""
    out = []
    for path in segments:
        base = parse_segment_file_name(path.name) or 0
        try:
            for position, message in iter_entries(path.read_bytes()):
                out.append((path, position, 4 + len(message), base + position))
        except CorruptMessageError:
            continue
    return out


def flip_bit(segments: list[Path], step: Step) -> str:
    """Flip bit `step.bit` of byte `step.byte` of the entry at fraction `step.where` of the
    replica's entries (segments: its files, oldest first); say what was hit."""
    entries = _entries(segments)
    if not entries:
        return "no entry to damage"
    path, position, length, offset = entries[min(int(step.where * len(entries)), len(entries) - 1)]
    k = min(step.byte, length - 1)
    with open(path, "r+b") as f:
        f.seek(position + k)
        old = f.read(1)[0]
        f.seek(position + k)
        f.write(bytes([old ^ (1 << step.bit)]))
    field = next((name for end, name in _FIELDS if k < end), "payload")
    return f"flipped bit {step.bit} of byte {k} (the {field}) of its entry at offset {offset}, in {path.name}"


def tear_end(segments: list[Path], step: Step) -> str:
    """Cut the newest segment that holds an entry inside its last entry, keeping a fraction
    `step.where` of it (at least 1 byte, at most all but 1); say where."""
    entries = _entries(segments)
    if not entries:
        return "no entry to tear"
    path, position, length, offset = entries[-1]
    keep = 1 + int(step.where * (length - 1))
    os.truncate(path, position + keep)
    return f"cut {path.name} {keep} bytes into its last entry (at offset {offset}, {length} bytes)"


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
