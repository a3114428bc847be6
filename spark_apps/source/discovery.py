"""Which broker partitions a query reads, where they are, and their earliest and latest offsets.

Two ways in, as the options say: `zookeeper` (live brokers from /brokers/ids, through
logbroker.client.cluster) or `brokers` (the listed brokers). Either way each broker's own
METADATA says its id, its topics and partitions, and their earliest and latest offsets.
Segment starts, where a range can be split without reading it, come from OFFSETS.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from typing import NamedTuple

from logbroker.client.brokers import BrokerEndpoint, parse_broker_list
from logbroker.client.cluster import Cluster
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.protocol.errors import LogbrokerError
from logbroker.protocol.requests import LATEST_TIME
from logbroker.protocol.responses import TopicMetadata
from spark_apps.source.options import SourceOptions

log = logging.getLogger(__name__)


class DiscoveryError(LogbrokerError):
    """The cluster cannot be reached or does not have what the options ask for."""


class PartitionState(NamedTuple):
    topic: str
    broker_id: int
    partition: int
    host: str
    port: int
    earliest: int
    latest: int

    @property
    def name(self) -> str:
        return f"{self.broker_id}-{self.partition}"


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
        cluster = Cluster(options.zookeeper, timeout=timeout)
    except Exception as exc:
        raise DiscoveryError(f"cannot reach ZooKeeper at {options.zookeeper}: {exc}") from exc
    try:
        live = cluster.live_brokers()
        registered = cluster.topics()
        for topic, counts in sorted(registered.items()):
            if options.topic_matches(topic):
                for broker_id in sorted(set(counts) - set(live)):
                    log.warning("broker %d has topic %s but is not live: skipped", broker_id, topic)
        # Every live broker's own METADATA, not only /brokers/topics: a broker registers a
        # topic in ZooKeeper just after its first append, and that data is readable already.
        return _from_brokers(list(live.values()), options, timeout)
    finally:
        cluster.close()


def _from_brokers(
    brokers: list[BrokerEndpoint], options: SourceOptions, timeout: float
) -> list[PartitionState]:
    states = []
    for listed in brokers:
        try:
            with SimpleConsumer(listed.host, listed.port, timeout=timeout) as consumer:
                meta = consumer.metadata([])
        except (OSError, LogbrokerError) as exc:
            raise DiscoveryError(f"broker {listed.address} did not answer METADATA: {exc}") from exc
        broker = BrokerEndpoint(meta.broker_id, listed.host, listed.port)
        for t in meta.topics:
            if options.topic_matches(t.topic):
                states += _states(broker, meta.topics, t.topic)
    return states


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


def segment_starts(state: PartitionState, timeout: float = 30.0) -> list[int]:
    """Offsets where the partition's segments start (message boundaries), ascending."""
    with (
        suppress(LogbrokerError, OSError),
        SimpleConsumer(state.host, state.port, timeout=timeout) as c,
    ):
        return sorted(c.offsets_before(state.topic, state.partition, LATEST_TIME, 1 << 20))
    return []
