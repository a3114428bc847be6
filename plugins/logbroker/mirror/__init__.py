"""The mirror (`logbroker mirror`): copies a source cluster's topics into a target cluster.

    settings.py       the two .properties files and the mirror's own keys
    partition_map.py  which target partition a source partition goes to
    target.py         acknowledged writes of stored message sets, retries, the give-up limit
    progress.py       the `sent` marks in ZooKeeper and the uncommitted tail at a restart
    metrics.py        Prometheus metrics
    mirror_maker.py   the stream threads, commits, stopping (SIGTERM, --until-caught-up)

docs/mirror.md explains it for users.
"""

from __future__ import annotations

from pathlib import Path

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
    target = TargetSettings.from_properties(load_properties(producer_config, "--producer.config"))
    return MirrorMaker(
        consumer,
        target,
        mirror_filter(whitelist, blacklist),
        num_streams=num_streams,
        until_caught_up=until_caught_up,
    )
