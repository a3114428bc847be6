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

The lock node's czxid (the zxid that created it) is the load's fencing token: contenders'
nodes are created in sequence, so a later holder's token is always larger. The load writes it
into `_COMMIT` and `fence` checks it when a publish starts and again right before its switch
(commit.py): a load that lost its lock after its check, or a recovery holding an older token
than the `_COMMIT`'s, does not publish. The files cannot check a token themselves: a load
paused between its last fence and its switch, for longer than its session and the next load,
would still switch (as with any token the store does not check).
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
        self.token: int | None = None  # the lock node's czxid, once acquired

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
            stat = self._client.exists(f"{self.path}/{self._lock.node}")
            if stat is None:  # the session expired while it was being acquired
                raise LoadLockError(self._lost_message())
            self.token = int(stat.czxid)
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
            raise LoadLockError(self._lost_message() + "; nothing committed")

    def _lost_message(self) -> str:
        return (
            f"topic {self.topic!r}: this load lost its lock (its ZooKeeper session expired "
            "or the connection is gone), another load may hold it now"
        )

    def fence(self, token: int | None) -> None:
        """LoadLockError unless this load may publish a `_COMMIT` decided under `token`: it
        still holds the lock, and `token` is not newer than its own (a newer one was decided
        by a load that held the lock after this one; None: a `_COMMIT` written before tokens)."""
        try:
            self.check()
        except LoadLockError:
            raise LoadLockError(
                self._lost_message() + "; not published (decided: the next load of the topic "
                "publishes it, or drops it if its staged files are gone)"
            ) from None
        if token is not None and self.token is not None and token > self.token:
            raise LoadLockError(
                f"topic {self.topic!r}: a _COMMIT decided under lock token {token} is newer "
                f"than this load's {self.token}; not published (this load no longer holds "
                "the lock)"
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
