"""Which partitions a query reads, where they are, and their earliest and latest offsets.

Two ways in, as the options say: `zookeeper` (live brokers from /brokers/ids, through
logbroker.client.cluster) or `brokers` (the listed brokers). Either way each broker's own
METADATA says its id, its topics and partitions, and their earliest and latest offsets: a
0.7 topic's partition i on broker b is `(b, i)`, named `b-i`.

A replicated topic (docs/replication.md) is found in ZooKeeper (/replication/topics, read
by the library's Leaders): its partition p is `(REPLICATED, p)` (broker id -1), named `p`,
wherever its leader is, and its offsets come from its leader (PartitionReader, which waits
for a leader during a failover): the latest is the leader's high watermark, the end of what
consumers may read. A broker's METADATA of every topic lists its 0.7 topics only; named, a
replicated topic is listed by each of its replicas, which does not say who leads it. So with
`brokers`, a replicated topic named in `subscribe` or `assign` is an error naming it (it
needs `zookeeper`), and `subscribePattern` matches the 0.7 topics the brokers list.
Segment starts, where a range can be split without reading it, come from OFFSETS.

A 0.8-format topic (issue 44: always replicated, created with --message-format 0.8) is found
the same way; its offsets are logical (message numbers), from its leader's 0.8 listener
(PartitionReader08, Offsets v0), and its states say so (`logical`). `format08_topics` says
which topics of a query are of that format (their rows get a `key` column).
"""

from __future__ import annotations

import logging
import time
from contextlib import suppress
from typing import NamedTuple

from logbroker.client.brokers import BrokerEndpoint, parse_broker_list
from logbroker.client.cluster import Cluster
from logbroker.client.partition_reader import PartitionReader
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.coordination.paths import partition_name
from logbroker.coordination.replication_state import REPLICATED
from logbroker.protocol.errors import LogbrokerError
from logbroker.protocol.requests import LATEST_TIME
from logbroker.protocol.responses import Metadata, TopicMetadata
from logbroker.security.client import ClientCredentials
from spark_apps.source.consumers import LEADER_TIMEOUT_MS, open_reads
from spark_apps.source.options import SourceOptions

log = logging.getLogger(__name__)


class DiscoveryError(LogbrokerError):
    """The cluster cannot be reached or does not have what the options ask for."""


class BrokerNotAnsweringError(DiscoveryError):
    """A broker that is listed (registered in ZooKeeper, or given) did not answer METADATA:
    down, or registered while it starts or stops."""


class PartitionState(NamedTuple):
    topic: str
    broker_id: int
    partition: int
    host: str
    port: int
    earliest: int
    latest: int
    logical: bool = False  # a 0.8-format topic's: offsets are message numbers

    @property
    def name(self) -> str:
        """`<broker_id>-<partition>`, or `<p>` for a replicated topic's (broker_id -1)."""
        return partition_name(self.broker_id, self.partition)


def discover(options: SourceOptions, timeout: float = 30.0) -> list[PartitionState]:
    """Every selected partition of every selected topic, sorted (topic, broker_id, partition)."""
    if options.zookeeper:
        states = _from_zookeeper(options, timeout)
    else:
        assert options.brokers is not None
        states = _from_brokers(parse_broker_list(options.brokers), options, timeout)
    states = [s for s in states if options.partition_selected(s.topic, s.name)]
    if options.assign is not None:
        found = {(s.topic, s.name) for s in states}
        missing = [
            f"{t} {n}" for t, names in options.assign.items() for n in names if (t, n) not in found
        ]
        if missing:
            raise DiscoveryError(
                f"assigned partitions not served by any live broker: {', '.join(missing)}"
            )
    return sorted(states, key=lambda s: (s.topic, s.broker_id, s.partition))


def _from_zookeeper(options: SourceOptions, timeout: float) -> list[PartitionState]:
    assert options.zookeeper is not None
    try:
        cluster = Cluster(options.zookeeper, timeout=timeout, credentials=options.credentials)
    except Exception as exc:
        raise DiscoveryError(f"cannot reach ZooKeeper at {options.zookeeper}: {exc}") from exc
    try:
        live = cluster.live_brokers()
        registered = cluster.topics()
        for topic, counts in sorted(registered.items()):
            if options.topic_matches(topic):
                for broker_id in sorted(set(counts) - set(live)):
                    log.warning("broker %d has topic %s but is not live: skipped", broker_id, topic)
        named = _named(options)
        replicated = set(cluster.replicated_topics())
        per_broker = []
        if named is None or not set(named) <= replicated:  # 0.7 topics wanted too
            # Every live broker's own METADATA, not only /brokers/topics: a broker registers
            # a topic in ZooKeeper just after its first append, and that data is readable
            # already. Replicated topics are listed again after it: a topic's assignment is
            # written before any broker holds a replica, so none is taken for a 0.7 topic.
            per_broker = _from_brokers(list(live.values()), options, timeout, probe=False)
            replicated = set(cluster.replicated_topics())
        states = [s for s in per_broker if s.topic not in replicated]
        wanted = [t for t in replicated if options.topic_matches(t)]
        return states + _replicated_states(cluster, wanted, timeout)
    finally:
        cluster.close()


def _named(options: SourceOptions) -> list[str] | None:
    """The topics `subscribe` or `assign` name; None for `subscribePattern`."""
    if options.subscribe is not None:
        return list(options.subscribe)
    return sorted(options.assign) if options.assign is not None else None


def _from_brokers(
    brokers: list[BrokerEndpoint],
    options: SourceOptions,
    timeout: float,
    *,
    probe: bool = True,
) -> list[PartitionState]:
    """Each broker's partitions of the matching topics, from its METADATA. With `probe` (the
    `brokers` option: no ZooKeeper says which topics are replicated) the topics named are
    asked for, and a replicated one is an error."""
    named = _named(options) if probe else None
    states = []
    tls, sasl = options.credentials.context(), options.credentials.sasl
    for listed in brokers:
        try:
            with SimpleConsumer(
                listed.host, listed.port, timeout=timeout, tls=tls, sasl=sasl
            ) as consumer:
                meta = consumer.metadata(named or [])
                if named:
                    _refuse_replicated(consumer, meta)
                matching = [t for t in meta.topics if options.topic_matches(t.topic)]
        except (OSError, LogbrokerError) as exc:
            if isinstance(exc, DiscoveryError):
                raise
            raise BrokerNotAnsweringError(
                f"broker {listed.address} did not answer METADATA: {exc}"
            ) from exc
        broker = BrokerEndpoint(meta.broker_id, listed.host, listed.port)
        for t in matching:
            states += _states(broker, meta.topics, t.topic)
    return states


def _refuse_replicated(consumer: SimpleConsumer, named: Metadata) -> None:
    """A topic the broker lists when named but not among all its topics is replicated."""
    plain = {t.topic for t in consumer.metadata([]).topics}
    found = sorted(t.topic for t in named.topics if t.partitions and t.topic not in plain)
    if found:
        raise DiscoveryError(
            f"topic(s) {', '.join(map(repr, found))} on broker {named.broker_id} are "
            "replicated: their partitions are read from their leaders, which only ZooKeeper "
            "names; give the option 'zookeeper' (the cluster's connect string, e.g. "
            "127.0.0.1:2181/analysis) instead of 'brokers'"
        )


def _states(
    broker: BrokerEndpoint, topics: tuple[TopicMetadata, ...], topic: str
) -> list[PartitionState]:
    out = []
    for t in topics:
        if t.topic != topic or t.error:
            continue
        for p in t.partitions:
            out.append(
                PartitionState(
                    topic,
                    broker.id,
                    p.partition,
                    broker.host,
                    broker.port,
                    p.earliest_offset,
                    p.latest_offset,
                )
            )
    return out


def _replicated_states(cluster: Cluster, topics: list[str], timeout: float) -> list[PartitionState]:
    """Each partition of replicated `topics` as its leader sees it: the earliest offset and
    the high watermark. A partition that has no leader (no live in-sync replica) is skipped,
    as a dead broker's partitions are; one whose leader is being replaced is waited for, at
    most LEADER_TIMEOUT_MS for all of them."""
    deadline = time.monotonic() + LEADER_TIMEOUT_MS / 1000
    states = []
    for topic in sorted(topics):
        assignment = cluster.leaders.assignment(topic)
        if assignment is None:  # deleted since it was listed
            continue
        logical = assignment.message_format == "0.8"
        kind = PartitionReader08 if logical else PartitionReader
        for p in range(assignment.partitions):
            state = cluster.leaders.state(topic, p)
            if state is not None and not state.online:
                log.warning(
                    "topic %s partition %d has no leader (no live in-sync replica of %s): skipped",
                    topic,
                    p,
                    list(state.isr),
                )
                continue
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            reader = kind(
                cluster.leaders,
                topic,
                p,
                timeout=timeout,
                leader_timeout_ms=left_ms,
                sasl=cluster.credentials.sasl,
                tls=cluster.tls,
            )
            try:
                earliest, latest = reader.earliest_offset(), reader.latest_offset()
                leader = reader.leader
            except LogbrokerError as exc:
                log.warning(
                    "topic %s partition %d: no leader answered (%s): skipped", topic, p, exc
                )
                continue
            finally:
                reader.close()
            assert leader is not None
            states.append(
                PartitionState(
                    topic, REPLICATED, p, leader.host, leader.port, earliest, latest, logical
                )
            )
    return states


def segment_starts(
    state: PartitionState,
    zookeeper: str | None = None,
    timeout: float = 30.0,
    credentials: ClientCredentials | None = None,
) -> list[int]:
    """Offsets where the partition's segments start (message boundaries), ascending: from
    its broker, or a replicated partition's leader (found through `zookeeper`). None for a
    0.8-format topic: every logical offset is a message boundary."""
    if state.logical:
        return []
    with suppress(LogbrokerError, OSError):
        reads = open_reads(
            zookeeper,
            state.topic,
            state.broker_id,
            state.partition,
            state.host,
            state.port,
            timeout=timeout,
            credentials=credentials,
        )
        with reads:
            if isinstance(reads, SimpleConsumer):
                starts = reads.offsets_before(state.topic, state.partition, LATEST_TIME, 1 << 20)
            else:
                starts = reads.offsets_before(LATEST_TIME, 1 << 20)
            return sorted(starts)
    return []


def format08_topics(options: SourceOptions, topics: list[str], timeout: float = 30.0) -> set[str]:
    """Which of `topics` are 0.8-format topics (ZooKeeper's assignments say; with `brokers`,
    none can be: they are replicated, and need `zookeeper`)."""
    if not options.zookeeper or not topics:
        return set()
    try:
        cluster = Cluster(options.zookeeper, timeout=timeout, credentials=options.credentials)
    except Exception as exc:
        raise DiscoveryError(f"cannot reach ZooKeeper at {options.zookeeper}: {exc}") from exc
    try:
        return {t for t in topics if cluster.leaders.is_format08(t)}
    finally:
        cluster.close()
