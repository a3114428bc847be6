"""The cluster of a fault run: ZooKeeper and the brokers on hosts of their own, and a watcher.

    cluster = ReplCluster(net, brokers=3).start()      # net: a started hosts.Network with
    cluster.create_topic("jepsen", partitions=3)       #   HOSTS(brokers, producers, readers)
    cluster.state(0); cluster.controller(); cluster.healthy()
    cluster.replica_bytes(2, 0); cluster.leader_claims()
    cluster.stop_watching()

Hosts, by name: `zk` (ZooKeeper, port 2181, chroot /jepsen), `b1`..`b<n>` (broker i on `b<i>`,
port 9092), `p1`.. (producers), `c1`.. (readers). A broker's files live in
`<network dir>/b<i>/broker-<i>/`: `logs/<topic>-<p>/*.kafka` (its replica of partition p, one
file per segment, named by base offset), `logs/<topic>-<p>/leader-epoch-checkpoint`
(replication/epochs.py), `broker.log`; they stay across kill -9 and start.

The brokers run with BROKER_SETTINGS: short ZooKeeper sessions and lag times, so that every
fault takes effect within seconds, `min.insync.replicas` 2 with a replication factor of 3,
so that an acks=-1 write is acknowledged only when at least two replicas hold it, and
segments of SEGMENT_BYTES, so that a replica is several files (the disk faults hit any).

The watcher is a ZooKeeper session of the test process (never cut off: the faults cut brokers
only) that writes down every version it sees of each partition's state
(`/replication/topics/<topic>/partitions/<p>`), of `/replication/controller` and of the live
brokers (`/brokers/ids`), with the time. A data watch sees the latest version when it fires,
so two changes close together may show as one: the brokers' logs (`leader_claims`) fill in.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import ZnodeStat

from logbroker.client.cluster import Cluster
from logbroker.coordination import paths
from logbroker.coordination import replication_state as zk
from logbroker.coordination.replication_state import ControllerInfo, PartitionState
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget

from ..hosts import Host, Network

SESSION_MS = 2000
LAG_MS = 1500
CHROOT = "/jepsen"
SEGMENT_BYTES = 4096  # a replica spans many segments (~230 messages each): the disk faults hit any
BROKER_SETTINGS = {
    "zk.sessiontimeout.ms": str(SESSION_MS),
    "replica.lag.time.max.ms": str(LAG_MS),
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "replica.fetch.wait.max.ms": "200",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "unclean.leader.election.enable": "false",
    "log.file.size": str(SEGMENT_BYTES),
}
# "replica jepsen-0 on broker 2: leader (leader 2, epoch 5, ISR [2, 3])" (replication/replicas.py)
_ROLE_LINE = re.compile(
    r"replica (?P<topic>\S+)-(?P<partition>\d+) on broker (?P<broker>\d+): "
    r"(?P<role>leader|follower|offline) \(leader (?P<leader>-?\d+), epoch (?P<epoch>\d+)"
)


def is_running(broker: BrokerProcess) -> bool:
    return broker.proc is not None and broker.proc.poll() is None


def host_names(brokers: int, producers: int, readers: int) -> list[str]:
    """The hosts of a run, in the order the network is made with."""
    return [
        "zk",
        *(f"b{i}" for i in range(1, brokers + 1)),
        *(f"p{i}" for i in range(1, producers + 1)),
        *(f"c{i}" for i in range(1, readers + 1)),
    ]


@dataclass(frozen=True)
class StateSeen:
    """A version of a partition's state, as the watcher saw it."""

    t: float
    partition: int
    version: int
    leader: int
    epoch: int
    isr: tuple[int, ...]


@dataclass
class Watcher:
    """The test process's record of the cluster's ZooKeeper state (see the module doc)."""

    states: list[StateSeen] = field(default_factory=list)
    controllers: list[tuple[float, int, int]] = field(default_factory=list)  # t, broker, epoch
    live: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)  # t, broker ids
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def state(self, partition: int, data: bytes | None, stat: ZnodeStat | None) -> None:
        if data is None or stat is None:
            return
        try:
            found = PartitionState.decode(data, stat.version)
        except ValueError:
            return
        with self._lock:
            self.states.append(
                StateSeen(
                    time.time(),
                    partition,
                    stat.version,
                    found.leader,
                    found.leader_epoch,
                    found.isr,
                )
            )

    def controller(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        info = None
        if data:
            with contextlib.suppress(ValueError):
                info = ControllerInfo.decode(data)
        with self._lock:
            self.controllers.append(
                (time.time(), info.broker if info else -1, info.epoch if info else -1)
            )

    def brokers(self, children: list[str]) -> None:
        with self._lock:
            self.live.append((time.time(), tuple(sorted(int(c) for c in children if c.isdigit()))))


class ReplCluster:
    """ZooKeeper on host `zk` and broker i on host `b<i>` of a started network."""

    def __init__(self, net: Network, brokers: int = 3, topic: str = "jepsen") -> None:
        self.net = net
        self.topic = topic
        self.zk_host = net.host("zk")
        self.broker_ids = list(range(1, brokers + 1))
        self.hosts: dict[int, Host] = {i: net.host(f"b{i}") for i in self.broker_ids}
        self.brokers: dict[int, BrokerProcess] = {}
        self.target: ZkTarget | None = None
        self.partitions = 0
        self.replicas: dict[int, tuple[int, ...]] = {}
        self.watcher = Watcher()
        self._client: KazooClient | None = None
        self._cluster: Cluster | None = None

    @property
    def connect(self) -> str:
        assert self.target is not None, "start() the cluster first"
        return self.target.connect

    @property
    def client(self) -> KazooClient:
        assert self._client is not None, "start() the cluster first"
        return self._client

    def start(self) -> ReplCluster:
        """ZooKeeper, then every broker (started side by side), then the watcher's session."""
        self.target = self.zk_host.zookeeper().create_chroot(CHROOT)
        for i, host in self.hosts.items():
            self.brokers[i] = host.broker(
                i, self.target.connect, overrides=BROKER_SETTINGS, start=False
            )
        starting = [threading.Thread(target=b.start) for b in self.brokers.values()]
        for thread in starting:
            thread.start()
        for thread in starting:
            thread.join()
        for broker in self.brokers.values():
            if not is_running(broker):
                broker.start()  # raises BrokerStartError with the broker's log
        self._client = self.target.client()
        self._client.start(timeout=10)
        self._client.DataWatch(zk.CONTROLLER, lambda d, s, e=None: self.watcher.controller(d, s))
        self._client.ChildrenWatch(paths.BROKER_IDS, self.watcher.brokers)
        self._cluster = Cluster(self.target.connect)
        return self

    def create_topic(self, partitions: int) -> None:
        """The replicated topic, on every broker, and the watches of its partitions' states."""
        assert self._cluster is not None
        created = self._cluster.create_replicated_topic(self.topic, partitions, len(self.brokers))
        self.partitions = partitions
        self.replicas = {p.partition: p.replicas for p in created}
        for p in range(partitions):
            self.client.DataWatch(
                zk.partition_path(self.topic, p),
                lambda d, s, e=None, p=p: self.watcher.state(p, d, s),
            )

    def stop_watching(self) -> None:
        for closing in (self._cluster, self._client):
            if closing is not None:
                try:
                    if isinstance(closing, KazooClient):
                        closing.stop()
                    closing.close()
                except KazooException:
                    pass
        self._cluster = self._client = None

    # -- what the nemesis and the run ask -------------------------------------------------

    def state(self, partition: int) -> PartitionState | None:
        path = zk.partition_path(self.topic, partition)
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            return None
        return PartitionState.decode(data, stat.version, path)

    def leader(self, partition: int) -> int | None:
        found = self.state(partition)
        return found.leader if found is not None and found.online else None

    def controller(self) -> int | None:
        try:
            data, _ = self.client.get(zk.CONTROLLER)
        except NoNodeError:
            return None
        return ControllerInfo.decode(data).broker

    def live(self) -> set[int]:
        return {int(c) for c in self.client.get_children(paths.BROKER_IDS) if c.isdigit()}

    def running(self) -> set[int]:
        """Brokers whose process runs (paused ones included)."""
        return {i for i, b in self.brokers.items() if is_running(b)}

    def healthy(self) -> bool:
        """Every broker registered, every partition led, every ISR whole."""
        if self.live() != set(self.broker_ids):
            return False
        for p in range(self.partitions):
            found = self.state(p)
            if found is None or not found.online or set(found.isr) != set(self.replicas[p]):
                return False
        return True

    def wait(self, check: Any, timeout: float, poll: float = 0.1) -> bool:
        """Whether `check()` came true within `timeout` seconds (ZooKeeper hiccups count as
        not yet)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return True
            except (KazooException, ValueError):
                pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)

    # -- what the checker is given --------------------------------------------------------

    def partition_dir(self, broker_id: int, partition: int) -> Path:
        return self.brokers[broker_id].log_dir / f"{self.topic}-{partition}"

    def segments(self, broker_id: int, partition: int) -> list[Path]:
        """Broker `broker_id`'s segment files of `partition`, oldest first (their names are
        their base offsets, zero-padded; what recovery set aside is named otherwise)."""
        return sorted(self.partition_dir(broker_id, partition).glob("*.kafka"))

    def replica_bytes(self, broker_id: int, partition: int) -> bytes:
        """Broker `broker_id`'s replica of `partition` as stored: its segments, in order (no
        retention runs in a fault run, so the first segment starts at offset 0)."""
        return b"".join(p.read_bytes() for p in self.segments(broker_id, partition))

    def replica_epochs(self, broker_id: int, partition: int) -> list[tuple[int, int]]:
        from logbroker.replication.epochs import LeaderEpochs

        return LeaderEpochs(self.partition_dir(broker_id, partition)).entries

    def leader_claims(self) -> list[tuple[int, int, int]]:
        """(partition, leader epoch, broker) for every time a broker took the leadership of a
        partition of the topic, from the brokers' logs."""
        claims = []
        for broker in self.brokers.values():
            text = broker.log_since(0)
            for match in _ROLE_LINE.finditer(text):
                if match["topic"] == self.topic and match["role"] == "leader":
                    claims.append(
                        (int(match["partition"]), int(match["epoch"]), int(match["broker"]))
                    )
        return sorted(set(claims))
