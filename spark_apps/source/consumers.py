"""Which consumer reads a partition: its broker's (0.7's layout), or one that follows its leader
(a replicated partition).

A topic of replication factor 1 keeps 0.7's layout: partition i of broker b, named `b-i`, is
read from broker b with SimpleConsumer. A replicated topic's partition p (docs/replication.md)
carries the broker id REPLICATED (-1) and is named `p` (logbroker.coordination.paths
.partition_name names both kinds); it is read from its leader with the library's
PartitionReader, which finds the leader in ZooKeeper and, after NotLeaderForPartition,
LeaderNotAvailable or a lost connection, resumes at the same offset on the next leader
(replicas are byte-identical, and consumers see only what is below the high watermark, which
every in-sync replica holds). So a range planned on one leader is read on another. A
0.8-format topic (always replicated; its ranges `logical`) is read from its leader's 0.8
listener with PartitionReader08, which follows the leader the same way; it starts at the 0.8
listener the plan found leading (`host:port`) and opens a ZooKeeper session only if that
broker refuses or goes (a session per range cost more than reading a small range).

    with open_reads(zookeeper, r.topic, r.broker_id, r.partition, host, port) as reads: ...
    with ClusterReads(cluster) as reads_for: digest_ranges(reads_for, ranges)
"""

from __future__ import annotations

from logbroker.client.brokers import BrokerEndpoint
from logbroker.client.cluster import Cluster
from logbroker.client.partition_reader import PartitionReader
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.coordination.replication_state import REPLICATED
from logbroker.protocol.errors import LogbrokerError
from logbroker.security.client import ClientCredentials
from spark_apps.source.ranges import DEFAULT_FETCH_SIZE, PartitionRange

# How long a read waits for a replicated partition's next leader: the controller elects one
# once the dead leader's ZooKeeper session expired (zk.sessiontimeout.ms, 6 s by default).
LEADER_TIMEOUT_MS = 60_000

Reads = SimpleConsumer | PartitionReader | PartitionReader08


class NeedsZooKeeperError(LogbrokerError):
    """A replicated partition was to be read without ZooKeeper, where its leader is named."""


def open_reads(
    zookeeper: str | None,
    topic: str,
    broker_id: int,
    partition: int,
    host: str,
    port: int,
    *,
    fetch_size: int = DEFAULT_FETCH_SIZE,
    timeout: float = 30.0,
    logical: bool = False,
    credentials: ClientCredentials | None = None,
) -> Reads:
    """What reads one partition: broker `host:port`'s SimpleConsumer for a 0.7 partition, a
    PartitionReader with its own ZooKeeper session for a replicated one (`host:port`, its
    leader when it was planned, is not needed: the reader asks ZooKeeper); a PartitionReader08
    for a 0.8-format topic's (`logical` offsets), reading first from `host:port` (its leader's
    0.8 listener when it was planned) and asking ZooKeeper only once that one refuses or goes.
    `credentials`: how to log in (the source's security.protocol, ssl.* and sasl.* options;
    over TLS, `host:port` is the broker's SSL listener). Close it."""
    credentials = credentials or ClientCredentials()
    tls, sasl = credentials.context(), credentials.sasl
    if broker_id != REPLICATED:
        return SimpleConsumer(
            host, port, fetch_size=fetch_size, timeout=timeout, tls=tls, sasl=sasl
        )
    if not zookeeper:
        raise NeedsZooKeeperError(
            f"topic {topic!r} is replicated: reading its partitions from their leaders needs "
            "the option 'zookeeper' (the cluster's connect string), not 'brokers'"
        )
    if logical:
        return PartitionReader08.at(
            zookeeper,
            topic,
            partition,
            BrokerEndpoint(REPLICATED, host, port),
            fetch_size=fetch_size,
            timeout=timeout,
            leader_timeout_ms=LEADER_TIMEOUT_MS,
            tls=tls,
            sasl=sasl,
        )
    return PartitionReader.connect(
        zookeeper,
        topic,
        partition,
        fetch_size=fetch_size,
        timeout=timeout,
        leader_timeout_ms=LEADER_TIMEOUT_MS,
        tls=tls,
        sasl=sasl,
    )


class ClusterReads:
    """`reads_for(range)` over one Cluster, for many ranges (digest_ranges): a 0.7 range's
    broker (the cluster's consumer), a replicated range's leader (a PartitionReader on the
    cluster's leaders). The readers are closed with this; the consumers with the cluster."""

    def __init__(self, cluster: Cluster, fetch_size: int = DEFAULT_FETCH_SIZE) -> None:
        self.cluster = cluster
        self.fetch_size = fetch_size
        self._readers: dict[tuple[str, int, bool], PartitionReader | PartitionReader08] = {}

    def __call__(self, r: PartitionRange) -> Reads:
        if r.broker_id != REPLICATED:
            return self.cluster.consumer(r.broker_id)
        key = (r.topic, r.partition, r.logical)
        if key not in self._readers:
            kind = PartitionReader08 if r.logical else PartitionReader
            self._readers[key] = kind(
                self.cluster.leaders,
                r.topic,
                r.partition,
                fetch_size=self.fetch_size,
                timeout=self.cluster.timeout,
                leader_timeout_ms=LEADER_TIMEOUT_MS,
                sasl=self.cluster.credentials.sasl,
                tls=self.cluster.tls,
            )
        return self._readers[key]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def __enter__(self) -> ClusterReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
