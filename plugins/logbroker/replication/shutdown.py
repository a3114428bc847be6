"""Controlled shutdown, the broker's side: hand its leaderships over before it stops.

A broker stopping (SIGTERM, `controlled.shutdown.enable`) first stops taking writes on every
partition it leads that another live in-sync replica could lead (NotLeaderForPartition: its
producers retry to the next leader), and waits, up to half of
`controlled.shutdown.timeout.ms`, for those replicas to have fetched everything it has: an
acks=1 write it acknowledged just before is then on the next leader too. Then it creates the
ephemeral `/replication/admin/shutdown/<id>` (coordination/replication_state.py) in its own
session; the controller (controller.py) answers by electing another live ISR member for every
partition it leads and taking it out of the ISRs it follows. The broker serves its followers
and consumers meanwhile, and waits until it leads no partition that another live in-sync
replica could lead, or until the timeout; then it stops as usual, and the node goes with its
session. A partition whose only live ISR member is this broker stays led by it, taking writes,
until it stops.

Runs in a thread of its own (ZooKeeper calls block; each waits at most until the timeout, so
a ZooKeeper that is away cannot hold the stop): the replicas' states it reads are replaced
whole by their worker, never changed in place (replicas.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult

from ..coordination import paths
from ..coordination import replication_state as zk
from .replicas import ReplicaManager

log = logging.getLogger(__name__)

POLL_S = 0.05


def hand_over_leaderships(
    client: KazooClient, replicas: ReplicaManager, timeout_ms: int
) -> list[str]:
    """Ask the controller to move this broker's leaderships and wait for it; the names of the
    partitions still waiting when `timeout_ms` passed ([] when every move is done)."""
    broker_id = replicas.broker_id
    started = time.monotonic()
    deadline = started + timeout_ms / 1000

    def wait(pending: IAsyncResult) -> Any:
        return pending.get(timeout=max(0.1, deadline - time.monotonic()))

    try:
        children = wait(client.get_children_async(paths.BROKER_IDS))
        moving = replicas.hand_over({int(c) for c in children if c.isdigit()})
        caught_up = started + timeout_ms / 2000
        while not all(r.followers_have_all() for r in moving) and time.monotonic() < caught_up:
            time.sleep(POLL_S)
        with contextlib.suppress(NodeExistsError):  # asked already, in this session
            path = zk.shutdown_path(broker_id)
            wait(client.create_async(path, b"", ephemeral=True, makepath=True))
        while True:
            children = wait(client.get_children_async(paths.BROKER_IDS))
            live = {int(c) for c in children if c.isdigit()}
            waiting = [r.name for r in replicas.leaderships_to_move(live)]
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
    except (KazooException, KazooTimeoutError) as exc:
        log.warning(
            "controlled shutdown of broker %d: ZooKeeper failed (%s): stopping without it",
            broker_id,
            exc,
        )
        return [r.name for r in replicas.replicas() if r.named_leader]
    took = (time.monotonic() - started) * 1000
    if waiting:
        log.warning(
            "controlled shutdown of broker %d: still leading %s after %.0f ms "
            "(controlled.shutdown.timeout.ms): stopping anyway",
            broker_id,
            waiting,
            took,
        )
        return waiting
    kept = [r.name for r in replicas.replicas() if r.named_leader]
    log.info(
        "controlled shutdown of broker %d: leaderships handed over in %.0f ms%s",
        broker_id,
        took,
        f"; still leading {kept} until it stops (no other live in-sync replica)" if kept else "",
    )
    return []
