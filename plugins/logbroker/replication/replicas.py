"""This broker's replicas of replicated partitions: their logs, roles, high watermarks and ISR.

The broker watches `/replication/topics` (replication_state.py). For each replicated topic it reads the
assignment once; for each partition whose replica list names this broker it makes the
replica's log (its epoch file first, which marks the directory, then LogManager.open_replica:
`<topic>-<p>`) and watches the partition's state. The role follows the state
(docs/replication.md, "Leaders and followers"):

- leader: the replica takes produces (`Replica.leading`, checked by its `append`); the epoch it
  leads in is written to its epoch file before its first append. It learns each follower's log end from the offsets the
  follower fetches (`record_fetch`); the high watermark is the smallest log end in the ISR,
  and consumers see only what is below it. A follower is caught up when it fetches from the
  leader's end, or from at least the end the leader had at its previous fetch (as of that
  fetch); one not caught up for `replica.lag.time.max.ms` leaves the ISR; one whose end
  reaches the high watermark rejoins it, its lag counted from then, unless it is shutting
  down (`/replication/admin/shutdown/<id>`: the controller took it out for good). The leader
  writes those ISR changes itself, as a conditional write of the state (the version it read,
  its leader and epoch kept): a stale leader's write fails.
  acks=-1 produces wait here (`wait_in_sync`) until the high watermark passes them;
- follower: a ReplicaFetcher (fetcher.py) copies the leader's bytes into the log;
- offline: nobody takes produces; every request about it says so.

Holding leaderships back: a leader that cannot know it still leads takes no writes at any
acks (NotLeaderForPartition; its state is kept, and consumers and followers are refused too)
until ZooKeeper has confirmed it. That is when its ZooKeeper session is suspended or lost
(kazoo's state listener), when its event loop did not tick for `pause_limit_ms` (the broker
was paused: SIGSTOP, a stalled machine; checked before every append, since the requests read
at the wake-up run before the loop's timers), and when a state that names it leader was
written before this broker's registration (its czxid: the broker restarted, or registered
again after a lost session; the controller writes a new leader epoch once it sees that).
Confirming, on the worker once connected, reads this broker's registration in the current
session and every partition's state again, and applies them. Kafka 0.8 went on taking writes
in all these cases and lost them when the new leader took over (Jepsen, 2013).

The high watermarks are written to `<log.dir>/replication-offset-checkpoint` (highwater.py)
every `replica.high.watermark.checkpoint.interval.ms` and at stop, and read back at start.

Threads: kazoo calls the watches on its event thread; they only enqueue. One worker thread
reads ZooKeeper, creates logs, starts and stops the fetchers and writes ISR changes, in
order, and runs the periodic checks (laggards, checkpoints). The broker's event loop serves
requests: it updates a leader's follower ends and high watermark and settles acks=-1 waits.
A new partition state is taken on the event loop too (the worker hands it over and waits),
together with what the acks=-1 waits owe it, so that no request runs between a smaller ISR
and the failing of the waits it can no longer acknowledge; and a wait is settled as a success
only while the ISR is at least min.insync.replicas (Kafka's checkEnoughReplicasReachOffset).
A role is one attribute (`Replica.leading`), and a state one object, each replaced whole: the
worker and the fetchers read them without a lock.

What the request handlers ask of replication goes through the ReplicaManager (as Kafka's
KafkaApis hands produces and fetches to its ReplicaManager): the leader of a partition
(`leader`), the acks=-1 check before an append (`check_enough_replicas`) and the waits after it
(`wait_for_isr`), what an append means for the high watermark (`appended`), a follower's fetch
(`follower_fetch`: its claimed offset counted, what it is sent) and where an epoch ends
(`epoch_end`). The handlers keep the bytes, the waiting fetches and the answers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import queue
import random
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError
from kazoo.protocol.states import KazooState, ZnodeStat

from ..coordination import paths
from ..coordination import replication_state as zk
from ..coordination.replication_state import Assignment, PartitionState
from ..protocol.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    LogbrokerError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
    WrongPartitionError,
)
from ..protocol.message_set import Buffer
from ..protocol.replication import EpochEnd, EpochQuery, ReplicaFetch, ReplicaSet
from ..protocol.requests import RANDOM_PARTITION
from ..storage.log_manager import LogManager, PartitionLog
from ..storage.segment import FileRegion
from .epochs import LeaderEpochs
from .fetcher import Connect, ReplicaFetcher
from .highwater import read_high_watermarks, write_high_watermarks

log = logging.getLogger(__name__)

Clock = Callable[[], int]  # milliseconds
TICK_S = 0.1  # the event loop's tick, against which a pause of the whole broker is seen
HANDING_OVER = "this broker is shutting down: its leadership is being handed over"


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Replica:
    """This broker's replica of one replicated partition."""

    def __init__(
        self,
        topic: str,
        partition: int,
        replicas: tuple[int, ...],
        part_log: PartitionLog,
        broker_id: int,
        high_watermark: int = 0,
        min_insync_replicas: int = 1,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.replicas = replicas
        self.log = part_log
        self.broker_id = broker_id
        self.min_insync_replicas = min_insync_replicas
        self.epochs = LeaderEpochs(part_log.directory)
        self.state: PartitionState | None = None
        self.leading = False  # takes produces: leads in its state, and is not held back
        self.high_watermark = min(high_watermark, part_log.end_offset)
        # leader only: each follower's log end; the leader's end and the time at its last
        # fetch; and the last time it held everything the leader had (record_fetch)
        self.follower_end: dict[int, int] = {}
        self.last_fetch: dict[int, tuple[int, int]] = {}
        self.caught_up_ms: dict[int, int] = {}
        # followers whose addition to the ISR this leader is writing -> the state version the
        # write makes: counted in the high watermark from before the write (from then on the
        # controller may elect them) until a state that new is applied (replaced whole)
        self.joining: dict[int, int] = {}
        self._waiting: list[tuple[int, asyncio.Future[int]]] = []  # acks=-1: (offset, answer)
        # why this broker takes no writes although the state names it leader (the manager's
        # hold, see "Holding leaderships back"); None when it does not hold back
        self.held_back: str | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def named_leader(self) -> bool:
        """The state names this broker leader (it may be holding back: `leading` says whether
        it takes produces). A leader holding back still serves its followers, so that what it
        acknowledged before reaches them."""
        current = self.state
        return current is not None and current.leader == self.broker_id

    def followers_have_all(self) -> bool:
        """Every follower in the ISR has fetched up to this leader's log end."""
        end = self.log.end_offset
        return all(self.follower_end.get(m, -1) >= end for m in self.isr if m != self.broker_id)

    @property
    def isr(self) -> tuple[int, ...]:
        current = self.state
        return current.isr if current is not None else ()

    def not_leader(self) -> LogbrokerError:
        """The error for a request that needs the leader, as this replica sees the partition."""
        current = self.state
        if self.held_back is not None and current is not None and current.leader == self.broker_id:
            return NotLeaderForPartitionError(
                f"broker {self.broker_id} cannot confirm that it still leads {self.name} "
                f"(leader epoch {current.leader_epoch}): {self.held_back}"
            )
        if current is None or not current.online:
            return LeaderNotAvailableError(
                f"replicated partition {self.name} has no leader now"
                + ("" if current is None else f" (no live in-sync replica of {list(current.isr)})")
            )
        return NotLeaderForPartitionError(
            f"broker {self.broker_id} does not lead {self.name}: broker {current.leader} does "
            f"(leader epoch {current.leader_epoch})"
        )

    # -- the leader's appends and bookkeeping (the event loop) ---------------------------

    def append(self, message_set: Buffer, validation: Any) -> tuple[int, int]:
        """A produce's set, appended while this broker leads (the log's `append`: first
        offset and new end; `validation` is the check of the topic's format's walks)."""
        if not self.leading:  # the role may change between a check and an inflated append
            raise self.not_leader()
        return self.log.append(message_set, validation)

    def append_many(self, sets: list[tuple[Buffer, Any]]) -> tuple[int, int]:
        """Produces that get no answer, appended while this broker leads (the log's
        `append_many`: messages and bytes)."""
        if not self.leading:
            raise self.not_leader()
        return self.log.append_many(sets)

    def record_fetch(self, follower: int, offset: int, now_ms: int) -> bool:
        """A follower fetched from `offset`: it holds everything before it. True when the
        high watermark moved.

        It is caught up now if it has the leader's end, and as of its previous fetch if it has
        what the leader had then: under steady produces a follower that fetches promptly is
        always a little behind the end, yet never falls behind for longer than between two of
        its fetches. A claim past this leader's own end counts for nothing: no follower can
        hold what the leader does not (the fetch is answered OffsetOutOfRange)."""
        end = self.log.end_offset
        if offset > end:
            return False
        self.follower_end[follower] = offset
        previous = self.last_fetch.get(follower)
        if offset >= end:
            self._caught_up(follower, now_ms)
        elif previous is not None and offset >= previous[0]:
            self._caught_up(follower, previous[1])
        self.last_fetch[follower] = (end, now_ms)
        return self.advance_high_watermark()

    def _caught_up(self, follower: int, at_ms: int) -> None:
        self.caught_up_ms[follower] = max(at_ms, self.caught_up_ms.get(follower, at_ms))

    def advance_high_watermark(self) -> bool:
        """The smallest log end in the ISR, if it is above the high watermark (True then);
        settles the acks=-1 waits it passes."""
        current = self.state
        if current is None or current.leader != self.broker_id:
            return False
        mark = self.log.end_offset
        for member in current.isr:
            if member != self.broker_id:
                mark = min(mark, self.follower_end.get(member, -1))
        for member in self.joining:
            mark = min(mark, self.follower_end.get(member, -1))
        if mark <= self.high_watermark:
            return False
        self.high_watermark = mark
        if self._waiting:
            # Kafka's checkEnoughReplicasReachOffset: what the ISR holds is acknowledged only
            # while the ISR is as large as min.insync.replicas asks; an ISR that shrank after
            # the append answers NotEnoughReplicasAfterAppend, never a success.
            code = (
                0
                if len(current.isr) >= self.min_insync_replicas
                else NotEnoughReplicasAfterAppendError.code
            )
            still = []
            for offset, future in self._waiting:
                if offset <= mark:
                    if not future.done():
                        future.set_result(code)
                else:
                    still.append((offset, future))
            self._waiting = still
        return True

    def wants_in(self, follower: int, offset: int) -> bool:
        """Whether a follower outside the ISR has caught up enough to rejoin it: its end has
        reached the high watermark and this leader's epoch."""
        return (
            follower not in self.isr
            and follower in self.replicas
            and offset >= self.high_watermark
            and offset >= self.epochs.latest_start
        )

    def laggards(self, now_ms: int, lag_ms: int) -> list[int]:
        """ISR members (but the leader) that have not caught up for `lag_ms`."""
        return [
            f
            for f in self.isr
            if f != self.broker_id and now_ms - self.caught_up_ms.get(f, now_ms) > lag_ms
        ]

    def wait_in_sync(self, offset: int, timeout_s: float) -> asyncio.Future[int]:
        """A future settled with 0 once the high watermark reaches `offset` (the end of an
        acks=-1 produce), or with an error code: 12 after `timeout_s`, 11 when the ISR
        shrinks below min.insync.replicas, 8 when this broker stops leading."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        if offset <= self.high_watermark:
            future.set_result(0)
            return future
        if not self.leading:  # it stopped leading between the append and this wait, whose
            future.set_result(NotLeaderForPartitionError.code)  # fail_waiting ran already
            return future
        self._waiting.append((offset, future))
        loop.call_later(timeout_s, _settle, future, RequestTimedOutError.code)
        return future

    def fail_waiting(self, code: int) -> None:
        waiting, self._waiting = self._waiting, []
        for _, future in waiting:
            _settle(future, code)

    # -- roles (the worker thread) -----------------------------------------------------------

    def become(self, new: PartitionState, now_ms: int, held_back: str | None = None) -> str | None:
        """Take the role `new` gives this broker; the role's name when it changed.
        `held_back`: why it may not lead now although `new` says it does (it then takes no
        produces and serves nothing until a later call without it)."""
        old = self.state
        leads = new.leader == self.broker_id
        changed = old is None or (old.leader, old.leader_epoch) != (new.leader, new.leader_epoch)
        if leads and changed:
            # Before the first append of the epoch: its start is the log's end now.
            self.epochs.assign(new.leader_epoch, self.log.end_offset)
            self.follower_end = {}
            self.last_fetch = {}
            self.caught_up_ms = {f: now_ms for f in new.isr}  # a grace for every member
        elif leads and old is not None:
            for f in set(new.isr) - set(old.isr):
                # back in the ISR: its lag counts from now, not from before it left
                self.caught_up_ms[f] = now_ms
        if self.joining:  # the additions this state (or a later one) settled
            self.joining = (
                {} if changed else {f: v for f, v in self.joining.items() if v > new.version}
            )
        self.state = new
        self.held_back = held_back if leads else None
        self.leading = leads and held_back is None
        if not changed:
            return None
        return "leader" if leads else ("follower" if new.online else "offline")

    def hold_back(self, reason: str) -> None:
        """Take no more writes as leader (the state is kept); the acks=-1 waits fail."""
        current = self.state
        if current is None or current.leader != self.broker_id:
            return
        self.held_back = reason
        self.leading = False
        self.fail_waiting(NotLeaderForPartitionError.code)


def open_replica_log(
    logs: LogManager, topic: str, partition: int, message_format: str = "0.7"
) -> PartitionLog:
    """The log of this broker's replica of a partition, in its topic's message format: its
    epoch file written first (it is what marks the directory as a replica's), then the log
    opened. A new directory appears whole, its epoch file inside: made under a hidden name
    and renamed. A broker killed between a plain mkdir and the epoch file left a directory
    that its next start loaded as a 0.7 topic's partition, and then refused to start."""
    directory = logs.partition_dir(topic, partition)
    if not directory.exists():
        building = directory.with_name(f".{directory.name}.new")
        shutil.rmtree(building, ignore_errors=True)  # left by a broker killed while making it
        building.mkdir(parents=True)
        LeaderEpochs.create(building)
        os.replace(building, directory)
    LeaderEpochs.create(directory)
    return logs.open_replica(topic, partition, message_format)


def _settle(future: asyncio.Future[int], code: int) -> None:
    if not future.done():
        future.set_result(code)


class ReplicaManager:
    """Every replica this broker holds, kept in the role ZooKeeper's states give them."""

    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        *,
        lag_time_max_ms: int = 10000,
        min_insync_replicas: int = 1,
        fetch_max_bytes: int = 1024 * 1024,
        fetch_wait_max_ms: int = 500,
        checkpoint_interval_ms: int = 5000,
        pause_limit_ms: int = 4000,
        clock_ms: Clock = monotonic_ms,
        connect: Connect | None = None,
        leader_listener: str | None = None,
    ) -> None:
        """`connect(host, port, timeout)`: a connection to a leader, for this broker's
        fetchers (the broker hands in client/connection.py's BrokerConnection);
        `leader_listener`: the name of the leaders' listener to fetch from, in
        /replication/endpoints (security.inter.broker.protocol=SSL), or None for the 0.7 port
        of /brokers/ids."""
        self.broker_id = broker_id
        self.connect = connect
        self.leader_listener = leader_listener
        self.logs = logs
        self.lag_time_max_ms = lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.fetch_max_bytes = fetch_max_bytes
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.pause_limit_s = pause_limit_ms / 1000
        self.clock_ms = clock_ms
        # Holding leaderships back (see the module doc), the event loop's view: why, or None
        self._hold: str | None = None
        self._last_tick = time.monotonic()  # the event loop's last tick (`_tick`)
        self._registered_czxid = 0  # this broker's registration: states older lead nothing
        self._handing_over: set[tuple[str, int]] = set()  # a controlled shutdown's (hand_over)
        self.on_high_watermark: Callable[[Replica], None] | None = None  # the handlers' hook
        # the metrics' hook, on the event loop: (shrank, expanded) for a change of the ISR of a
        # partition this broker leads, whoever wrote it
        self.on_isr_change: Callable[[bool, bool], None] | None = None
        # the metrics' hook, on the event loop: a fetched answer refused as damaged (its topic)
        self.on_damaged_fetch: Callable[[str], None] | None = None
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._replicas: dict[tuple[str, int], Replica] = {}
        self._topics: set[str] = set(logs.replicated_topics())
        self._topics_read = threading.Event()  # /replication/topics read once (is_replicated)
        self._checkpointed = read_high_watermarks(logs.log_dir)
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._asked_in: set[tuple[str, int, int]] = set()  # ISR additions asked for, not done
        self._tasks: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._stopped = threading.Event()

    # -- what the handlers ask ----------------------------------------------------------

    def is_replicated(self, topic: str) -> bool:
        """Whether `topic` is replicated. Until this broker has read `/replication/topics`
        (start), a topic it has no replica of yet cannot be told from a new 0.7 topic: that
        raises LeaderNotAvailable rather than let a produce create a 0.7 log of its name."""
        if topic in self._topics:
            return True
        if not self._topics_read.is_set():
            raise LeaderNotAvailableError(
                f"broker {self.broker_id} is starting: it does not know yet whether {topic!r} is "
                "a replicated topic"
            )
        return False

    def replica(self, topic: str, partition: int) -> Replica | None:
        return self._replicas.get((topic, partition))

    def replicas(self) -> list[Replica]:
        return list(self._replicas.values())

    def leaderships_to_move(self, live: set[int]) -> list[Replica]:
        """The partitions this broker leads that another live in-sync replica could lead: what
        a controlled shutdown waits for the controller to move."""
        return [
            r
            for r in self.replicas()
            if r.named_leader and any(m != self.broker_id and m in live for m in r.isr)
        ]

    def hand_over(self, live: set[int]) -> list[Replica]:
        """A controlled shutdown's first step: the leaderships another live in-sync replica
        can take stop taking writes (their producers retry to the next leader), and stay so
        (`_take_state`) until the broker stops; followers still fetch what they lack."""
        moving = self.leaderships_to_move(live)
        self._handing_over = {(r.topic, r.partition) for r in moving}
        self._in_loop_and_wait(self._hold_back_each, moving, HANDING_OVER)
        return moving

    @staticmethod
    def _hold_back_each(replicas: list[Replica], reason: str) -> None:
        for replica in replicas:
            replica.hold_back(reason)

    def refusal(self, topic: str, partition: int) -> LogbrokerError:
        """Why a request about replicated `topic`'s `partition` cannot be served here."""
        found = self._replicas.get((topic, partition))
        if found is not None:
            return found.not_leader()
        return NotLeaderForPartitionError(
            f"broker {self.broker_id} has no replica of {topic}-{partition}: ask its leader"
        )

    def leader(self, topic: str, partition: int) -> Replica:
        """This broker's replica of the partition, if it leads it (partition -1, a 0.7
        producer's "any": one it leads); else the refusal that says who does, raised."""
        if partition == RANDOM_PARTITION:
            led = [r for r in self._replicas.values() if r.topic == topic and r.leading]
            if not led:
                raise NotLeaderForPartitionError(f"this broker leads no partition of {topic}")
            return random.choice(led)
        found = self._replicas.get((topic, partition))
        if found is None or not found.leading:
            raise self.refusal(topic, partition)
        return found

    def check_enough_replicas(self, replica: Replica) -> None:
        """Before an acks=-1 append: an ISR under min.insync.replicas refuses it."""
        isr = replica.isr
        if len(isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{replica.name} has {len(isr)} in-sync replicas {list(isr)}, fewer than "
                f"min.insync.replicas ({self.min_insync_replicas}): refused before the append"
            )

    def appended(self, replica: Replica) -> None:
        """After an append to a replica this broker leads: with no follower in the ISR the
        high watermark moves now (the hook wakes the consumers)."""
        if replica.advance_high_watermark() and self.on_high_watermark is not None:
            self.on_high_watermark(replica)

    async def wait_for_isr(self, pending: list[tuple[Replica, int]], timeout_s: float) -> list[int]:
        """acks=-1: for each (replica, end of its append), 0 once its whole ISR holds it, or
        the error code that says why not (Replica.wait_in_sync)."""
        return list(await asyncio.gather(*(r.wait_in_sync(end, timeout_s) for r, end in pending)))

    def follower_fetch(self, follower: int, fetch: ReplicaFetch) -> ReplicaSet[FileRegion]:
        """A follower's REPLICA_FETCH of one partition: the leader's bytes from its offset, with
        the epochs that wrote them; the offset counted as what the follower holds once this
        log holds it (the read comes first: an offset past its end is refused). Raises the
        error to answer with."""
        replica = self._replicas.get((fetch.topic, fetch.partition))
        if replica is None or not replica.named_leader:
            raise self.refusal(fetch.topic, fetch.partition)
        state = replica.state
        assert state is not None
        if fetch.leader_epoch < state.leader_epoch:
            raise FencedLeaderEpochError(
                f"{replica.name}: broker {follower} fetches in leader epoch "
                f"{fetch.leader_epoch}, the current one is {state.leader_epoch}"
            )
        if fetch.leader_epoch > state.leader_epoch:  # this broker has not heard of it yet
            raise NotLeaderForPartitionError(f"{replica.name}: epoch {fetch.leader_epoch}")
        if follower not in replica.replicas:
            raise WrongPartitionError(f"broker {follower} is not a replica of {replica.name}")
        region, messages = replica.log.read_whole(fetch.offset, fetch.max_bytes)
        moved = replica.record_fetch(follower, fetch.offset, self.clock_ms())
        if moved and self.on_high_watermark is not None:
            self.on_high_watermark(replica)
        if follower not in state.isr and replica.wants_in(follower, fetch.offset):
            self.ask_in(replica, follower)
        epochs = replica.epochs.entries
        # the epoch that wrote `fetch.offset`, and those that start after it (the follower
        # records those that start in what it copies: offsets are bytes or messages, the
        # topic's format says, and the region's length is bytes either way)
        covering = [e for e in epochs if e[1] <= fetch.offset][-1:]
        later = [e for e in epochs if fetch.offset < e[1] <= replica.log.end_offset]
        return ReplicaSet(
            fetch.topic,
            fetch.partition,
            0,
            replica.high_watermark,
            replica.log.end_offset,
            tuple(covering + later),
            region.length,
            region,
            messages,
        )

    def epoch_end(self, query: EpochQuery) -> EpochEnd:
        """Where `query.epoch` ends in the log of a partition this broker leads (epochs.py);
        raises the refusal when it does not lead it."""
        replica = self._replicas.get((query.topic, query.partition))
        if replica is None or not replica.named_leader:
            raise self.refusal(query.topic, query.partition)
        epoch, end = replica.epochs.end_offset_for(query.epoch, replica.log.end_offset)
        return EpochEnd(query.topic, query.partition, 0, epoch, end)

    def ask_in(self, replica: Replica, follower: int) -> None:
        """A follower caught up: add it to the ISR (the worker writes it; asked once)."""
        key = (replica.topic, replica.partition, follower)
        if key not in self._asked_in:
            self._asked_in.add(key)
            self._tasks.put(("expand", (replica, follower)))

    # -- life cycle ---------------------------------------------------------------------

    def start(self, client: KazooClient, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._client = client
        self._loop = loop
        client.ensure_path(zk.TOPICS)
        self._registered_czxid = self._own_registration() or 0
        # Every replica this broker has is known before start() returns (their states come
        # through the worker): a request in between never takes one for a 0.7 topic's
        # partition, nor is told that this broker has no replica of it.
        self._adopt_topics(client.get_children(zk.TOPICS))
        self._topics_read.set()
        self._worker = threading.Thread(
            target=self._run, name=f"replicas-{self.broker_id}", daemon=True
        )
        self._worker.start()
        client.add_listener(self._connection_changed)
        if loop is not None:
            loop.call_soon_threadsafe(self._tick)
        client.ChildrenWatch(zk.TOPICS, self._topics_changed)

    def stop(self) -> None:
        self._stopped.set()
        self._tasks.put(None)
        if self._worker is not None:
            self._worker.join(timeout=10)
        for fetcher in self._fetchers.values():
            fetcher.stop()
        for fetcher in self._fetchers.values():
            fetcher.join(timeout=10)
        self.checkpoint()

    def checkpoint(self) -> None:
        """Write every replica's high watermark to log.dir (highwater.py)."""
        marks = dict(self._checkpointed)
        marks.update({(r.topic, r.partition): r.high_watermark for r in self.replicas()})
        try:
            write_high_watermarks(self.logs.log_dir, marks)
        except OSError as exc:
            log.warning("could not write the high watermarks: %s", exc)

    # -- kazoo's callbacks: enqueue only --------------------------------------------------

    def _topics_changed(self, children: list[str]) -> bool:
        if self._stopped.is_set():
            return False
        # known at once (kazoo calls this the first time inside start()); adopted by the worker
        self._topics.update(children)
        self._topics_read.set()
        self._tasks.put(("topics", children))
        return True

    def _state_changed(
        self, replica: Replica, data: bytes | None, stat: ZnodeStat | None, event: object = None
    ) -> bool:
        if self._stopped.is_set():
            return False
        if data is not None and stat is not None:
            self._tasks.put(("state", (replica, data, stat.version, stat.mzxid)))
        return True

    def _connection_changed(self, state: str) -> None:
        if self._stopped.is_set():
            return
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            why = "its ZooKeeper session is " + (
                "lost" if state == KazooState.LOST else "suspended"
            )
            self._in_loop(self._hold_back, why)
        elif state == KazooState.CONNECTED:
            self._tasks.put(("confirm", None))

    # -- the worker -----------------------------------------------------------------------

    def _run(self) -> None:
        period = min(self.lag_time_max_ms / 2, self.checkpoint_interval_ms) / 1000
        next_check = next_checkpoint = time.monotonic()
        while True:
            try:
                task = self._tasks.get(timeout=max(0.01, next_check - time.monotonic()))
            except queue.Empty:
                task = ("tick", None)
            if task is None or self._stopped.is_set():
                return
            kind, value = task
            try:
                if kind == "topics":
                    self._adopt_topics(value)
                elif kind == "state":
                    replica, data, version, mzxid = value
                    path = zk.partition_path(replica.topic, replica.partition)
                    self._apply(replica, PartitionState.decode(data, version, path), mzxid)
                elif kind == "confirm":
                    self._confirm()
                elif kind == "expand":
                    replica, follower = value
                    self._asked_in.discard((replica.topic, replica.partition, follower))
                    self._change_isr(replica, add=follower)
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + period
                    self._shrink_laggards()
                if now >= next_checkpoint:
                    next_checkpoint = now + self.checkpoint_interval_ms / 1000
                    self.checkpoint()
            except (KazooException, ValueError, LogbrokerError) as exc:
                log.warning(
                    "replicas of broker %d: %s while handling %s", self.broker_id, exc, kind
                )
            except Exception:  # a bug: said loudly, and the replicas go on
                log.exception("replicas of broker %d failed handling %s", self.broker_id, kind)

    def _adopt_topics(self, topics: list[str]) -> None:
        assert self._client is not None
        for topic in sorted(set(topics) - {t for t, _ in self._replicas}):
            try:
                data, _ = self._client.get(zk.topic_path(topic))
            except NoNodeError:
                continue
            assignment = Assignment.decode(topic, data)
            self._topics.add(topic)
            for partition, replicas in enumerate(assignment.replicas):
                if self.broker_id not in replicas or (topic, partition) in self._replicas:
                    continue
                replica = Replica(
                    topic,
                    partition,
                    replicas,
                    open_replica_log(self.logs, topic, partition, assignment.message_format),
                    self.broker_id,
                    self._checkpointed.get((topic, partition), 0),
                    self.min_insync_replicas,
                )
                self._replicas[(topic, partition)] = replica
                self._client.DataWatch(
                    zk.partition_path(topic, partition),
                    functools.partial(self._state_changed, replica),
                )

    def _apply(self, replica: Replica, new: PartitionState, mzxid: int = 0) -> None:
        """Take a partition's new state (the worker thread). The follower's copying stops
        first, so that no append runs across the change; the state itself is taken on the
        event loop (`_take_state`), between two requests, so that no request sees a new ISR
        before the waits for acks have followed it; copying from a new leader starts after."""
        old = replica.state
        leads = new.leader == self.broker_id
        new_epoch = old is None or (old.leader, old.leader_epoch) != (new.leader, new.leader_epoch)
        if (
            old is not None
            and old.online
            and old.leader != self.broker_id
            and (not new.online or new.leader != old.leader)
        ):
            self._fetcher(old.leader).remove(replica)
        self._in_loop_and_wait(self._take_state, replica, new, mzxid)
        if not leads and new.online:
            self._fetcher(new.leader).add(replica, new_epoch=new_epoch)

    def _take_state(self, replica: Replica, new: PartitionState, mzxid: int = 0) -> None:
        """In the event loop: the new state and role, and the acks=-1 waits following them
        in the same step (a fetch between the two would settle them against the new ISR)."""
        old = replica.state
        was_leader = replica.leading
        leads = new.leader == self.broker_id
        held_back = self._hold
        if leads and (replica.topic, replica.partition) in self._handing_over:
            held_back = HANDING_OVER
        if leads and held_back is None and mzxid < self._registered_czxid:
            # decided before this broker registered: it restarted (or its session was lost)
            # since, and leads only in a state the controller writes after it has seen that
            held_back = "it registered again after the partition's state was written"
        if (
            self.on_isr_change is not None
            and old is not None
            and leads
            and (old.leader, old.leader_epoch) == (new.leader, new.leader_epoch)
        ):
            shrank, expanded = bool(set(old.isr) - set(new.isr)), bool(set(new.isr) - set(old.isr))
            if shrank or expanded:
                self.on_isr_change(shrank, expanded)
        role = replica.become(new, self.clock_ms(), held_back)
        if held_back is not None and leads and (old is None or old.leader != self.broker_id):
            log.warning(
                "replica %s on broker %d: named leader (epoch %d) but holds back: %s",
                replica.name,
                self.broker_id,
                new.leader_epoch,
                held_back,
            )
        if role is not None:
            log.info(
                "replica %s on broker %d: %s (leader %s, epoch %d, ISR %s)",
                replica.name,
                self.broker_id,
                role,
                new.leader,
                new.leader_epoch,
                list(new.isr),
            )
        if was_leader and not replica.leading:
            replica.fail_waiting(NotLeaderForPartitionError.code)
            return
        if replica.leading:
            if len(replica.isr) < self.min_insync_replicas:  # what waits can be acked no more
                replica.fail_waiting(NotEnoughReplicasAfterAppendError.code)
            # an ISR without a slow follower may commit more now
            if replica.advance_high_watermark() and self.on_high_watermark is not None:
                self.on_high_watermark(replica)

    def _in_loop(self, fn: Callable[..., None], *args: object) -> None:
        loop = self._loop
        if loop is None:
            fn(*args)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    def _in_loop_and_wait(self, fn: Callable[..., None], *args: object) -> None:
        """Run `fn` on the event loop and return once it has run (directly when there is no
        running loop: a broker stopping, or a test without one)."""
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            fn(*args)
            return
        done = threading.Event()

        def run() -> None:
            try:
                fn(*args)
            finally:
                done.set()

        loop.call_soon_threadsafe(run)
        while not done.wait(0.5):
            if self._stopped.is_set() or loop.is_closed() or not loop.is_running():
                return  # stopping: the state is not taken, nothing is served any more

    # -- holding leaderships back -------------------------------------------------------

    def check_pause(self) -> None:
        """Before appending to a replicated log (the event loop): if the loop has not ticked
        for `pause_limit_s`, the broker was paused (SIGSTOP, a stalled VM) and may have been
        replaced meanwhile: hold every leadership back until ZooKeeper confirms it. The
        requests read at the wake-up are served before the loop's timers run, so the tick
        alone would come too late for them."""
        now = time.monotonic()
        if now - self._last_tick > self.pause_limit_s:
            self._paused(now)

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last_tick > self.pause_limit_s:
            self._paused(now)
        self._last_tick = now
        loop = self._loop
        if loop is not None and not self._stopped.is_set() and not loop.is_closed():
            loop.call_later(TICK_S, self._tick)

    def _paused(self, now: float) -> None:
        gap = now - self._last_tick
        self._last_tick = now
        if any(r.leading for r in self.replicas()):
            self._hold_back(f"this broker was paused for {gap:.1f} s")
            self._tasks.put(("confirm", None))

    def _hold_back(self, reason: str) -> None:
        """The event loop: no replica takes writes, whatever its state says, until
        `_confirm` has read this broker's registration and every state again."""
        if self._hold is None and any(r.leading for r in self.replicas()):
            log.warning(
                "broker %d holds back its leaderships: %s; it takes no writes until ZooKeeper "
                "confirms that it still leads",
                self.broker_id,
                reason,
            )
        self._hold = reason
        for replica in self.replicas():
            replica.hold_back(reason)

    def _own_registration(self) -> int | None:
        """This broker's `/brokers/ids/<id>` czxid, when it is registered in the client's
        current session (None: not, or not yet)."""
        client = self._client
        assert client is not None
        session = client.client_id
        stat = client.exists(paths.broker_id_path(self.broker_id))
        if stat is None or session is None or stat.ephemeralOwner != session[0]:
            return None
        return int(stat.czxid)

    def _confirm(self) -> None:
        """The worker, once connected again: read this broker's registration, then every
        state, and lead again where they say so (the hold lifted first, in the loop)."""
        client = self._client
        assert client is not None
        czxid = self._own_registration()
        if czxid is None:
            # a new session that the registration has not written yet: look again when it has
            path = paths.broker_id_path(self.broker_id)
            if client.exists(path, watch=lambda _event: self._tasks.put(("confirm", None))):
                time.sleep(0.1)  # another session's node (our old one, expiring): soon again
                self._tasks.put(("confirm", None))
            return
        if client.state != KazooState.CONNECTED:
            return  # disconnected again: the next CONNECTED confirms
        self._registered_czxid = czxid
        states = []
        for replica in self.replicas():
            path = zk.partition_path(replica.topic, replica.partition)
            data, stat = client.get(path)
            states.append((replica, PartitionState.decode(data, stat.version, path), stat.mzxid))
        self._in_loop_and_wait(self._lift_hold)
        for replica, new, mzxid in states:
            self._apply(replica, new, mzxid)
        log.info("broker %d: ZooKeeper confirmed its partition states", self.broker_id)

    def _lift_hold(self) -> None:
        if self._client is not None and self._client.state == KazooState.CONNECTED:
            self._hold = None

    def _fetcher(self, leader: int) -> ReplicaFetcher:
        fetcher = self._fetchers.get(leader)
        if fetcher is None or not fetcher.is_alive():
            fetcher = ReplicaFetcher(
                self.broker_id,
                leader,
                self._address,
                max_bytes=self.fetch_max_bytes,
                max_wait_ms=self.fetch_wait_max_ms,
                connect=self.connect,
                on_damaged=self._damaged_fetch,
            )
            fetcher.start()
            self._fetchers[leader] = fetcher
        return fetcher

    def _damaged_fetch(self, topic: str) -> None:
        hook = self.on_damaged_fetch
        if hook is not None:
            self._in_loop(hook, topic)

    def _address(self, broker_id: int) -> tuple[str, int] | None:
        client = self._client
        if client is None:
            return None
        try:
            if self.leader_listener is not None:
                data, _ = client.get(zk.endpoints_path(broker_id))
                return zk.decode_endpoints(data, broker_id).get(self.leader_listener)
            data, _ = client.get(paths.broker_id_path(broker_id))
        except (NoNodeError, KazooException, zk.StateFormatError):
            return None
        return paths.parse_broker_value(data)

    # -- the ISR ----------------------------------------------------------------------------

    def _shrink_laggards(self) -> None:
        now = self.clock_ms()
        for replica in self.replicas():
            if replica.leading:
                slow = replica.laggards(now, self.lag_time_max_ms)
                if slow:
                    log.warning(
                        "replica %s: followers %s have not caught up for %d ms: out of the ISR",
                        replica.name,
                        slow,
                        self.lag_time_max_ms,
                    )
                    self._change_isr(replica, remove=slow)

    def _change_isr(
        self, replica: Replica, add: int | None = None, remove: list[int] | None = None
    ) -> None:
        """The leader's conditional write of a new ISR: its leader and epoch kept; nothing
        when this broker no longer leads in that epoch (the write's version says so)."""
        assert self._client is not None
        path = zk.partition_path(replica.topic, replica.partition)
        data, stat = self._client.get(path)
        current = PartitionState.decode(data, stat.version, path)
        if current.leader != self.broker_id:
            return
        isr = [m for m in current.isr if m not in (remove or ())]
        if add is not None and add not in isr:
            if self._client.exists(zk.shutdown_path(add)):
                return  # shutting down: the controller took it out, and it stays out
            if not self._client.exists(paths.broker_id_path(add)):
                return  # died since its fetch was queued: a dead broker never rejoins the ISR
            isr.append(add)
        if tuple(isr) == current.isr or not isr:
            return
        wanted = PartitionState(
            current.leader, current.leader_epoch, tuple(isr), current.controller_epoch
        )
        joining = add if add is not None and add in isr else None
        if joining is not None:
            # Counted in the high watermark before ZooKeeper says it is in sync: from the write
            # on, the controller may elect it, so nothing it lacks may be acknowledged, also
            # before this broker's watch brings the new state back (a shrink needs no such
            # care: the old, larger ISR counts until then).
            replica.joining = {**replica.joining, joining: stat.version + 1}
        written = False
        try:
            self._client.set(path, wanted.encode(), version=stat.version)
            written = True
        except BadVersionError:
            return  # changed meanwhile (by the controller): the watch brings the new state
        finally:
            if joining is not None and not written:  # it counts as the ISR says again
                replica.joining = {f: v for f, v in replica.joining.items() if f != joining}
        log.info("replica %s: ISR %s -> %s", replica.name, list(current.isr), isr)
