"""`MirrorCaughtUpTrigger`: waits, in the triggerer, until a mirror has copied given offsets.

The mirror commits a source partition's offset only after the target cluster acknowledged
every message before it (docs/mirror.md), so "the mirror group's committed offset on the
live cluster >= the offset the live partition had at time T" means the analysis cluster
holds everything the live cluster had at T. The trigger polls those committed offsets from
the live cluster's ZooKeeper every `poll_interval` seconds. kazoo is a threaded client, so
each poll runs in a worker thread (`asyncio.to_thread`): the triggerer's event loop never
blocks, and no worker slot is held while the mirror catches up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

# BaseTrigger.__init__ and TriggerEvent have no annotations: the no-untyped-call ignores below
from airflow.triggers.base import BaseTrigger, TriggerEvent

from .logbroker_hook import (
    LogbrokerHook,
    Offsets,
    connection_settings,
    group_committed_offsets,
    settings_cluster,
)


def partitions_behind(targets: Offsets, committed: Offsets) -> dict[str, int]:
    """ "topic/<broker>-<partition>" -> bytes still to copy, for every partition whose
    committed offset has not reached its target (an empty dict: caught up)."""
    behind = {}
    for topic, partitions in targets.items():
        for name, target in partitions.items():
            done = committed.get(topic, {}).get(name, 0)
            if done < target:
                behind[f"{topic}/{name}"] = target - done
    return behind


def read_committed(settings: dict[str, Any], group: str) -> Offsets:
    """The group's committed offsets, from the cluster of connection_settings() (its brokers
    reached with the connection's credentials)."""
    with settings_cluster(settings) as cluster:
        return group_committed_offsets(cluster, group)


async def settings_of(conn_id: str) -> dict[str, Any]:
    """A `logbroker` connection's settings (connection_settings), read without blocking; the
    credentials stay in this process (the trigger serializes only the connection's id)."""
    conn = await LogbrokerHook.aget_connection(conn_id)
    extra = await conn.aextra_dejson()
    return connection_settings(
        conn.host, conn.port, conn.schema, extra, conn_id, login=conn.login, password=conn.password
    )


class MirrorCaughtUpTrigger(BaseTrigger):
    def __init__(
        self, logbroker_conn_id: str, group: str, targets: Offsets, poll_interval: float = 10.0
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.logbroker_conn_id = logbroker_conn_id
        self.group = group
        self.targets = targets
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "logbroker_conn_id": self.logbroker_conn_id,
                "group": self.group,
                "targets": self.targets,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                settings = await settings_of(self.logbroker_conn_id)
            except Exception as exc:  # missing, or no host: waiting will not fix it
                yield TriggerEvent(  # type: ignore[no-untyped-call]
                    {
                        "status": "error",
                        "group": self.group,
                        "message": f"connection {self.logbroker_conn_id!r}: {exc}",
                    }
                )
                return
            try:
                committed = await asyncio.to_thread(read_committed, settings, self.group)
            except Exception as exc:  # ZooKeeper away: say so and keep polling
                self.log.warning("could not read the offsets of group %s: %s", self.group, exc)
            else:
                behind = partitions_behind(self.targets, committed)
                if not behind:
                    yield TriggerEvent({"status": "caught_up", "group": self.group})  # type: ignore[no-untyped-call]
                    return
                self.log.info(
                    "mirror group %s: %d partition(s) behind, %d bytes to copy",
                    self.group,
                    len(behind),
                    sum(behind.values()),
                )
            await asyncio.sleep(self.poll_interval)
