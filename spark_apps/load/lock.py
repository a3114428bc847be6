"""One load per topic at a time, for real: a lock per (warehouse, topic) in ZooKeeper.

The layout, under the analysis cluster's chroot (beside 0.7's /brokers and /consumers, which no
0.7 client reads here):

    /pipeline/load-locks/<warehouse key>              persistent; data: the warehouse's URI
    /pipeline/load-locks/<warehouse key>/<topic>/     persistent: kazoo's Lock recipe
        <uuid>__lock__<sequence>                      ephemeral sequential, one per contender;
                                                      data: who (host, pid, hour, run id)

`<warehouse key>` is the first 16 hex digits of the SHA-256 of the warehouse's URI: two
warehouses loaded from one cluster lock apart. The lowest sequence holds the lock; the others
wait in line (kazoo's fair Lock). A load takes the lock before it touches the warehouse (its
recovery deletes unfinished staging, which would be another live load's) and holds it to the
end of its publish. Right before it decides to commit, it checks that its lock node still
exists and belongs to its own session: a load whose session expired (a pause, a partition)
has lost the lock to the next one and must not commit beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
from typing import Any

from spark_apps.load.errors import LoadLockError

LOCKS_ROOT = "/pipeline/load-locks"


def lock_path(warehouse: str, topic: str) -> str:
    return f"{LOCKS_ROOT}/{warehouse_key(warehouse)}/{topic}"


def warehouse_key(warehouse: str) -> str:
    return hashlib.sha256(warehouse.encode()).hexdigest()[:16]


class TopicLock:
    """The lock of one topic's loads into one warehouse (see the module doc).

    with TopicLock(zk_connect, warehouse, topic, who="2026-11-22T10 run 1a2b") as lock:
        ...                   # recover, read, write, stage
        lock.check()          # right before deciding: still ours, or LoadLockError
        ...                   # decide and publish
    """

    def __init__(
        self,
        zk_connect: str,
        warehouse: str,
        topic: str,
        who: str,
        timeout: float = 600.0,
        session_timeout: float = 10.0,
    ) -> None:
        self.zk_connect = zk_connect
        self.warehouse = warehouse
        self.topic = topic
        self.identifier = f"{socket.gethostname()} pid {os.getpid()} {who}"
        self.timeout = timeout
        self.session_timeout = session_timeout
        self.path = lock_path(warehouse, topic)
        self._client: Any = None
        self._lock: Any = None

    def __enter__(self) -> TopicLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        from kazoo.client import KazooClient
        from kazoo.exceptions import LockTimeout, NodeExistsError

        self._client = KazooClient(hosts=self.zk_connect, timeout=self.session_timeout)
        try:
            self._client.start(timeout=self.session_timeout)
            parent = self.path.rsplit("/", 1)[0]
            with contextlib.suppress(NodeExistsError):
                self._client.create(parent, self.warehouse.encode(), makepath=True)
            self._lock = self._client.Lock(self.path, self.identifier)
            if not self._lock.acquire(blocking=False):
                holders = self.holders()
                if self.timeout <= 0:
                    raise LoadLockError(self._held_message(holders))
                try:
                    self._lock.acquire(timeout=self.timeout)
                except LockTimeout:
                    raise LoadLockError(
                        self._held_message(self.holders() or holders)
                        + f"; waited {self.timeout:g} s"
                    ) from None
        except BaseException:
            self._stop()
            raise

    def _held_message(self, holders: list[str]) -> str:
        who = holders[0] if holders else "another load"
        return (
            f"topic {self.topic!r}: another load of this topic into {self.warehouse} holds its "
            f"lock ({who}; ZooKeeper {self.zk_connect}{self.path})"
        )

    def holders(self) -> list[str]:
        """Who holds the lock and who waits, first the holder (their identifiers)."""
        if self._lock is None:
            return []
        return [c for c in self._lock.contenders() if c != self.identifier]

    def check(self) -> None:
        """LoadLockError unless this load still holds the lock through its own session."""
        lock, client = self._lock, self._client
        held = False
        if lock is not None and client is not None and lock.is_acquired and lock.node:
            try:
                stat = client.exists(f"{self.path}/{lock.node}")
                held = stat is not None and stat.ephemeralOwner == client.client_id[0]
            except Exception:  # connection lost: cannot prove it
                held = False
        if not held:
            raise LoadLockError(
                f"topic {self.topic!r}: this load lost its lock (its ZooKeeper session expired "
                "or the connection is gone); nothing committed, another load may hold it now"
            )

    def release(self) -> None:
        try:
            if self._lock is not None and self._lock.is_acquired:
                self._lock.release()
        except Exception:  # the session is gone: so is the ephemeral node
            pass
        finally:
            self._stop()

    def _stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.stop()
                client.close()
            except Exception:
                pass
