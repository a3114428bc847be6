"""The mirror (`logbroker mirror`): copies a source cluster's topics into a target cluster.

    settings.py       the two .properties files and the mirror's own keys
    partition_map.py  which target partition a source partition goes to
    target.py         acknowledged writes of stored message sets, retries, the give-up limit
    progress.py       the `sent` marks in ZooKeeper and the uncommitted tail at a restart
    events.py         counting forwarded events for the audit (tier "mirror")
    metrics.py        Prometheus metrics
    mirror_maker.py   the stream threads, commits, stopping (SIGTERM, --until-caught-up)

docs/mirror.md explains it for users.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from .metrics import MirrorMetrics
from .mirror_maker import EventCounter, MirrorMaker, MirrorResult, mirror_filter
from .settings import TargetSettings, consumer_properties, load_properties

__all__ = ["EventCounter", "MirrorMaker", "MirrorResult", "build_mirror", "mirror_filter"]


def build_mirror(
    consumer_config: str | Path,
    producer_config: str | Path,
    *,
    whitelist: str | None = None,
    blacklist: str | None = None,
    num_streams: int = 1,
    until_caught_up: bool = False,
) -> MirrorMaker:
    """A MirrorMaker from the command line's files and flags (MirrorConfigError, ValueError)."""
    consumer = consumer_properties(load_properties(consumer_config, "--consumer.config"))
    producer_props = load_properties(producer_config, "--producer.config")
    target = TargetSettings.from_properties(producer_props)
    topic_filter = mirror_filter(whitelist, blacklist)
    metrics = MirrorMetrics()
    registry_zk = producer_props.get("schema.registry.zk") or consumer.get("schema.registry.zk")
    return MirrorMaker(
        consumer,
        target,
        topic_filter,
        num_streams=num_streams,
        until_caught_up=until_caught_up,
        metrics=metrics,
        events=audited_events(target, registry_zk, metrics),
    )


def audited_events(
    target: TargetSettings, registry_zk: str | None, metrics: MirrorMetrics
) -> EventCounter:
    """The mirror's audit counting: AuditCount deltas (tier mirror) to the target's `_audit`
    when the schema registry is configured (`schema.registry.zk`), else the metrics only."""
    from ..audit import AuditPublisher
    from ..client.producer import Producer
    from ..serde.registry import SchemaRegistry
    from .events import AuditedEvents

    if not registry_zk:
        logging.getLogger(__name__).warning(
            "no schema.registry.zk in the configs: forwarded events are counted in the metrics "
            "but no AuditCount (tier mirror) is published"
        )
        return AuditedEvents(None, metrics)
    registry = SchemaRegistry(registry_zk)
    producer = Producer(
        zk_connect=target.zk_connect,
        broker_list=target.broker_list,
        acks="ack",
        socket_timeout_ms=target.socket_timeout_ms,
    )
    closers: list[Callable[[], object]] = [producer.close, registry.close]
    try:
        publisher = AuditPublisher(producer, registry, tier="mirror")
    except BaseException:
        for close in closers:
            close()
        raise
    return AuditedEvents(publisher, metrics, closers)
