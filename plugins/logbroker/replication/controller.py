"""The controller: one broker of the cluster elects the leaders of replicated partitions.

Every broker runs a Controller; the one that creates the ephemeral `/replication/controller`
(replication_state.py) is the controller until its ZooKeeper session ends, and the others wait for that
node to go. Becoming controller and incrementing `/replication/controller_epoch` are one
ZooKeeper transaction, so two controllers never share an epoch.

What the controller decides, always as a transaction that also checks that the controller
epoch is still its own (a deposed controller's write fails), and that the state's znode is
at the version it read (a leader's ISR change in between is never overwritten):

- a new topic (a child of `/replication/topics` without partition states): each partition's
  first leader is the first live broker of its replica list, its ISR the live replicas;
- a broker whose registration (`/brokers/ids/<id>`) is gone: every partition it led gets a
  new leader, the first replica in the list that is alive and in the ISR, with the leader
  epoch incremented; it leaves the ISR of every partition it followed. With no live ISR
  member, the partition gets no leader (`-1`) and keeps its last ISR, so that one of those
  replicas, and only one of those, can lead it when it comes back (unless
  `unclean.leader.election.enable`: then any live replica leads, with an ISR of itself,
  and what only the lost ISR had is gone: that is what "unclean" means);
- a broker that comes back: partitions without a leader whose ISR names it get it as leader;
- a broker that restarted (its registration's czxid, the broker epoch of Kafka's KIP-380, is
  new): it is handled as gone and back, in two rounds, so that every partition it led gets a
  new leader epoch (another in-sync replica leads if one is alive) and it leaves every ISR
  until it has caught up again. A restart can be quicker than the controller's watch (its
  node deleted and made again between two reads of `/brokers/ids`, or while the controller
  was disconnected), so the czxids are compared at every look at the brokers, and after
  every reconnection. A controller that starts knows no earlier czxids: a leader registered
  after its partition's state was written (czxid above the state's mzxid) restarted since,
  and is handled the same way;
- a broker asking to shut down (`/replication/admin/shutdown/<id>`, controlled shutdown): every
  partition it leads gets the next live ISR member as leader (epoch + 1), and it leaves every
  ISR but those where it is the only live member: such a partition keeps it as leader until it
  stops (the log says so). While it is there, it is nobody's choice as a new leader when
  another ISR member can lead;
- a preferred replica election (`/replication/admin/preferred_replica_election`, written by
  `logbroker preferred-replica-election`): each named partition whose first replica is alive,
  in the ISR and not shutting down, but not the leader, gets it as leader (epoch + 1); then the
  node is deleted, which is how the command knows it is done.

Threads: kazoo's callbacks only enqueue; one worker thread does every read and write in order.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.protocol.states import KazooState, ZnodeStat

from ..coordination import paths
from ..coordination import replication_state as zk
from ..coordination.replication_state import (
    Assignment,
    ClusterDefaults,
    ControllerInfo,
    PartitionState,
)

log = logging.getLogger(__name__)

Elected = Callable[[str, int, PartitionState], None]  # a hook for tests and metrics


class _Deposed(Exception):
    """A newer controller epoch exists: this broker stopped being the controller."""


class Controller:
    """This broker's part in the controller election, and the controller's work when it won."""

    def __init__(
        self,
        client: KazooClient,
        broker_id: int,
        *,
        unclean_leader_election: bool = False,
        defaults: ClusterDefaults | None = None,
        on_elected: Elected | None = None,
    ) -> None:
        self.client = client
        self.broker_id = broker_id
        self.unclean = unclean_leader_election
        self.defaults = defaults or ClusterDefaults(1, 1)
        self.on_elected = on_elected
        self.epoch = 0  # while active: this controller's epoch
        self._epoch_version = -1  # the version of /replication/controller_epoch we wrote
        self._active = False
        self._live: set[int] = set()
        self._registered: dict[int, int] = {}  # live broker -> its registration's czxid
        self._shutting: set[int] = set()  # brokers asking for a controlled shutdown
        self._kept: set[str] = set()  # led by a shutting broker alone: said once
        self._known_topics: set[str] = set()
        self._tasks: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def active(self) -> bool:
        return self._active

    def start(self) -> None:
        for parent in (zk.TOPICS, zk.SHUTDOWN):
            self.client.ensure_path(parent)
        self._worker = threading.Thread(
            target=self._run, name=f"controller-{self.broker_id}", daemon=True
        )
        self._worker.start()
        self.client.DataWatch(zk.CONTROLLER, self._controller_changed)
        self.client.add_listener(self._connection_changed)

    def stop(self) -> None:
        """Stop working; resign if controller (the node goes, and another broker takes over)."""
        self._stopped.set()
        self._tasks.put(None)
        if self._worker is not None:
            self._worker.join(timeout=10)
        if self._active:
            self._active = False
            with contextlib.suppress(KazooException):  # else it goes with the session
                self.client.delete(zk.CONTROLLER)

    # -- kazoo's callbacks: enqueue only ----------------------------------------------------

    def _controller_changed(
        self, data: bytes | None, stat: ZnodeStat | None, event: object = None
    ) -> bool:
        if self._stopped.is_set():
            return False
        self._tasks.put(("controller", None if stat is None else data))
        return True

    def _connection_changed(self, state: str) -> None:
        # kazoo's ChildrenWatch calls nobody when the children read after a reconnection are
        # those it saw before: a broker that restarted meanwhile would go unseen
        if state == KazooState.CONNECTED and self._active and not self._stopped.is_set():
            self._tasks.put(("brokers", None))

    def _brokers_changed(self, children: list[str]) -> bool:
        if self._stopped.is_set() or not self._active:
            return False
        self._tasks.put(("brokers", children))
        return True

    def _topics_changed(self, children: list[str]) -> bool:
        if self._stopped.is_set() or not self._active:
            return False
        self._tasks.put(("topics", children))
        return True

    def _shutdowns_changed(self, children: list[str]) -> bool:
        if self._stopped.is_set() or not self._active:
            return False
        self._tasks.put(("shutdown", children))
        return True

    def _election_changed(
        self, data: bytes | None, stat: ZnodeStat | None, event: object = None
    ) -> bool:
        if self._stopped.is_set() or not self._active:
            return False
        if stat is not None:
            self._tasks.put(("election", data))
        return True

    # -- the worker ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None or self._stopped.is_set():
                return
            kind, value = task
            try:
                if kind == "controller":
                    self._on_controller(value)
                elif kind == "brokers" and self._active:
                    self._on_brokers(value)
                elif kind == "topics" and self._active:
                    self._on_topics(set(value))
                elif kind == "shutdown" and self._active:
                    self._on_shutdowns({int(c) for c in value if c.isdigit()})
                elif kind == "election" and self._active:
                    self._on_election(value)
            except _Deposed:
                self._deposed()
            except KazooException as exc:
                # The session is gone or ZooKeeper is away: the watches fire again when it
                # is back, and the new controller (maybe this one) starts from the states.
                log.warning("controller %d: %s while handling %s", self.broker_id, exc, kind)
            except Exception:  # a bug: said loudly, and the controller goes on
                log.exception("controller %d failed handling %s", self.broker_id, kind)

    def _on_controller(self, data: bytes | None) -> None:
        if data is not None:
            current = ControllerInfo.decode(data)
            if current.broker != self.broker_id and self._active:
                log.warning("broker %d is no longer the controller", self.broker_id)
                self._active = False
            return
        self._active = False
        epoch_data, epoch_stat = self._epoch()
        epoch = int(epoch_data) + 1
        transaction = self.client.transaction()
        transaction.create(
            zk.CONTROLLER, ControllerInfo(self.broker_id, epoch).encode(), ephemeral=True
        )
        transaction.set_data(zk.CONTROLLER_EPOCH, str(epoch).encode(), version=epoch_stat.version)
        results = transaction.commit()
        if any(isinstance(r, Exception) for r in results):
            if not any(isinstance(r, NodeExistsError) for r in results):
                log.info(
                    "controller election: %s", [r for r in results if isinstance(r, Exception)]
                )
            return  # another broker won (or raised the epoch first): its node is watched
        self.epoch, self._epoch_version = epoch, epoch_stat.version + 1
        self._active = True
        log.info("broker %d is the controller, epoch %d", self.broker_id, epoch)
        try:  # what the tools read: `topics create` without --replication-factor
            self.client.set(zk.CONFIG, self.defaults.encode())
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self.client.create(zk.CONFIG, self.defaults.encode(), makepath=True)
        self.client.ChildrenWatch(paths.BROKER_IDS, self._brokers_changed)
        self.client.ChildrenWatch(zk.TOPICS, self._topics_changed)
        self.client.ChildrenWatch(zk.SHUTDOWN, self._shutdowns_changed)
        self.client.DataWatch(zk.PREFERRED_REPLICA_ELECTION, self._election_changed)

    def _epoch(self) -> tuple[bytes, ZnodeStat]:
        try:
            data, stat = self.client.get(zk.CONTROLLER_EPOCH)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self.client.create(zk.CONTROLLER_EPOCH, b"0", makepath=True)
            data, stat = self.client.get(zk.CONTROLLER_EPOCH)
        return data, stat

    def _on_brokers(self, children: list[str] | None) -> None:
        """The live brokers changed, or may have (None: read them). A broker whose
        registration is new since the last look restarted: gone, then back (module doc)."""
        registered = self._read_registrations(children)
        live = set(registered)
        bounced = {
            b for b in live if b in self._registered and registered[b] != self._registered[b]
        }
        gone, back = self._live - live, live - self._live
        self._registered = registered
        if gone:
            log.info("controller: broker(s) %s gone", sorted(gone))
        if back:
            log.info("controller: broker(s) %s live", sorted(back))
        if bounced:
            log.warning(
                "controller: broker(s) %s restarted (a new registration): handled as gone, then "
                "back, in new leader epochs",
                sorted(bounced),
            )
            self._live = live - bounced
            self._elect_everywhere()
        self._live = live
        self._elect_everywhere()

    def _read_registrations(self, children: list[str] | None) -> dict[int, int]:
        """Each live broker's registration czxid (its broker epoch)."""
        if children is None:
            children = self.client.get_children(paths.BROKER_IDS)
        registered = {}
        for child in children:
            if child.isdigit():
                stat = self.client.exists(paths.broker_id_path(int(child)))
                if stat is not None:  # gone since the list was read
                    registered[int(child)] = stat.czxid
        return registered

    def _on_shutdowns(self, shutting: set[int]) -> None:
        new = shutting - self._shutting
        self._shutting = shutting
        self._kept.clear()
        if new:
            log.info(
                "controller: broker(s) %s shutting down: moving their leaderships", sorted(new)
            )
            self._elect_everywhere()

    def _on_election(self, data: bytes | None) -> None:
        """A preferred replica election: move each named partition's leadership to its first
        replica where it may lead, then delete the node (the command waits for that)."""
        try:
            named = zk.decode_election(data or b"")
        except ValueError as exc:
            log.warning("controller: %s ignored: %s", zk.PREFERRED_REPLICA_ELECTION, exc)
            named = []
        self._ensure_live()
        assignments: dict[str, Assignment | None] = {}
        for topic, partition in named:
            if topic not in assignments:
                try:
                    data, _ = self.client.get(zk.topic_path(topic))
                    assignments[topic] = Assignment.decode(topic, data)
                except (NoNodeError, ValueError) as exc:
                    log.warning("controller: preferred election of %s skipped: %s", topic, exc)
                    assignments[topic] = None
            assignment = assignments[topic]
            if assignment is not None and partition < assignment.partitions:
                self._settle(topic, partition, assignment.replicas[partition], preferred=True)
        with contextlib.suppress(NoNodeError):
            self.client.delete(zk.PREFERRED_REPLICA_ELECTION)

    def _on_topics(self, topics: set[str]) -> None:
        new = topics - self._known_topics
        self._known_topics = topics
        if new:
            self._elect_everywhere(only=new)

    # -- elections ------------------------------------------------------------------------

    def _ensure_live(self) -> None:
        if not self._live:
            self._registered = self._read_registrations(None)
            self._live = set(self._registered)

    def _elect_everywhere(self, only: set[str] | None = None) -> None:
        """Bring every partition's state in line with the live brokers (see the module doc)."""
        self._ensure_live()
        topics = only if only is not None else set(self.client.get_children(zk.TOPICS))
        for topic in sorted(topics):
            try:
                data, _ = self.client.get(zk.topic_path(topic))
                assignment = Assignment.decode(topic, data)
            except (NoNodeError, ValueError) as exc:
                log.warning("controller: topic %s skipped: %s", topic, exc)
                continue
            for partition, replicas in enumerate(assignment.replicas):
                self._settle(topic, partition, replicas)

    def _settle(
        self, topic: str, partition: int, replicas: tuple[int, ...], preferred: bool = False
    ) -> None:
        path = zk.partition_path(topic, partition)
        for _attempt in range(5):
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                if self._create_first(topic, partition, replicas):
                    return
                continue  # created meanwhile: read it
            current = PartitionState.decode(data, stat.version, path)
            if preferred:
                wanted = self._prefer(current, replicas)
            else:
                # a leader registered after this state was written restarted since (a
                # controller that just started has not seen its earlier registration)
                restarted = (
                    current.leader in self._live
                    and self._registered.get(current.leader, -1) > stat.mzxid
                )
                wanted = self._decide(current, replicas, f"{topic}-{partition}", restarted)
            if wanted is None or self._write(path, wanted, stat.version):
                if wanted is not None:
                    self._announce(topic, partition, wanted, current)
                return
        log.warning("controller: could not settle %s (its state kept changing)", path)

    def _decide(
        self,
        current: PartitionState,
        replicas: tuple[int, ...],
        name: str,
        leader_restarted: bool = False,
    ) -> PartitionState | None:
        live = self._live
        shutting = self._shutting & live
        isr_live = tuple(r for r in current.isr if r in live)
        ready = [r for r in replicas if r in isr_live and r not in shutting]  # may lead
        if leader_restarted:
            # never the same leader epoch across a restart: another in-sync replica leads,
            # or the restarted one does, in the next epoch
            others = [r for r in ready if r != current.leader]
            log.warning(
                "controller: %s's leader %d restarted since its state was written: leader "
                "epoch %d ends",
                name,
                current.leader,
                current.leader_epoch,
            )
            if others:
                isr = tuple(r for r in isr_live if r != current.leader and r not in shutting)
                return PartitionState(others[0], current.leader_epoch + 1, isr, self.epoch)
            return PartitionState(current.leader, current.leader_epoch + 1, isr_live, self.epoch)
        if current.leader in live and (current.leader not in shutting or not ready):
            if current.leader in shutting and name not in self._kept:
                self._kept.add(name)
                log.warning(
                    "controller: %s stays led by broker %d, which is shutting down, until it "
                    "stops: no other live in-sync replica (ISR %s)",
                    name,
                    current.leader,
                    list(current.isr),
                )
            # followers that died or are shutting down leave the ISR; the leader and its epoch
            # stay
            isr = tuple(r for r in isr_live if r == current.leader or r not in shutting)
            if isr == current.isr:
                return None  # nothing to do
            return PartitionState(current.leader, current.leader_epoch, isr, self.epoch)
        candidates = ready or [r for r in replicas if r in isr_live]
        if candidates:
            leader = candidates[0]
            isr = tuple(r for r in isr_live if r == leader or r not in shutting)
            return PartitionState(leader, current.leader_epoch + 1, isr, self.epoch)
        if self.unclean:
            alive = [r for r in replicas if r in live]
            if alive:
                log.error(
                    "UNCLEAN leader election: no in-sync replica of %s is alive; broker %d "
                    "leads it from what it has (messages only the old ISR held are lost)",
                    current,
                    alive[0],
                )
                return PartitionState(alive[0], current.leader_epoch + 1, (alive[0],), self.epoch)
        if current.leader == zk.NO_LEADER:
            return None  # still no live ISR member: it stays offline
        # offline: no leader, and the last ISR kept so that only one of them can lead later
        return PartitionState(zk.NO_LEADER, current.leader_epoch + 1, current.isr, self.epoch)

    def _prefer(self, current: PartitionState, replicas: tuple[int, ...]) -> PartitionState | None:
        """The preferred replica as leader, when it is not already and may lead."""
        first = replicas[0]
        if (
            current.leader == first
            or first not in current.isr
            or first not in self._live
            or first in self._shutting
        ):
            return None
        return PartitionState(first, current.leader_epoch + 1, current.isr, self.epoch)

    def _create_first(self, topic: str, partition: int, replicas: tuple[int, ...]) -> bool:
        """Write a new partition's first state; False when it exists already (read it)."""
        # a broker shutting down leads a new partition only when no other replica is alive
        live = sorted((r for r in replicas if r in self._live), key=lambda r: r in self._shutting)
        first = PartitionState(
            live[0] if live else zk.NO_LEADER, 0, tuple(live) or replicas, self.epoch
        )
        self.client.ensure_path(zk.partitions_path(topic))
        transaction = self.client.transaction()
        transaction.check(zk.CONTROLLER_EPOCH, self._epoch_version)
        transaction.create(zk.partition_path(topic, partition), first.encode())
        results = transaction.commit()
        if isinstance(results[0], BadVersionError):
            raise _Deposed
        if any(isinstance(r, Exception) for r in results):
            return False
        self._announce(topic, partition, first, None)
        return True

    def _write(self, path: str, wanted: PartitionState, version: int) -> bool:
        transaction = self.client.transaction()
        transaction.check(zk.CONTROLLER_EPOCH, self._epoch_version)
        transaction.set_data(path, wanted.encode(), version=version)
        results = transaction.commit()
        if isinstance(results[0], BadVersionError):
            raise _Deposed  # stop this round: another controller decides now
        return not any(isinstance(r, Exception) for r in results)

    def _deposed(self) -> None:
        if self._active:
            log.warning("controller %d was deposed (a newer controller epoch)", self.broker_id)
        self._active = False

    def _announce(
        self, topic: str, partition: int, wanted: PartitionState, before: PartitionState | None
    ) -> None:
        if before is None or wanted.leader != before.leader:
            log.info(
                "controller: %s-%d leader %s, epoch %d, ISR %s",
                topic,
                partition,
                wanted.leader if wanted.online else "none (offline)",
                wanted.leader_epoch,
                list(wanted.isr),
            )
        if self.on_elected is not None:
            self.on_elected(topic, partition, wanted)
