"""The rebalance thread of a group consumer, and the ZooKeeper work it serialises.

Watches on the group's ids, on `/brokers/ids`, on `/brokers/topics/<t>` and
`/replication/topics/<t>` of every subscribed topic (and on `/brokers/topics` and
`/replication/topics` themselves for a filter) signal the rebalance thread; kazoo's
callbacks never do ZooKeeper work themselves. The thread runs, one at a time under one lock
(which `commit_offsets()` and `close()` take too): rebalances, session renewals, regroups of
the replicated partitions' fetchers when their leaders moved (rebalance.py), and autocommits
(every `autocommit_interval_ms`, with autocommit on).

A rebalance, exactly as 0.7.2's `syncedRebalance`: attempt it (see `rebalance.py`); when an
attempt fails (a partition still owned by another member, or an error), give everything up
(commit with autocommit, release the owner nodes), wait `rebalance_backoff_ms` and start
over, at most `rebalance_retries_max` times. One deviation from 0.7: after
`rebalance_retries_max` failed attempts, 0.7 threw and stayed idle until the next watch
fired; here the failure is logged (`stats.rebalance_failures`) and the rebalance tried again
after `rebalance_backoff_ms`.

Session expiry: kazoo's listener only notes a LOST session and the new one; the thread then
stops the fetchers, commits (only for partitions nobody else has taken meanwhile), writes the
ids node again and rebalances, resuming from the committed offsets.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping

from kazoo.client import KazooState
from kazoo.exceptions import KazooException
from kazoo.protocol.states import EventType, WatchedEvent

from ...coordination.errors import ZooKeeperUnavailableError
from ...coordination.rebalance import Subscription, WildcardSubscription
from ...protocol.errors import LogbrokerError
from .context import ConsumerContext
from .membership import GroupMembership
from .rebalance import Rebalancer
from .stream import ChunkQueue

log = logging.getLogger("logbroker.client.group_consumer")  # one logger for the whole consumer


class Coordinator:
    """Joins the group, runs the rebalance thread, and commits and closes under its lock."""

    def __init__(self, context: ConsumerContext, membership: GroupMembership) -> None:
        self.context = context
        self.membership = membership
        self.rebalancer = Rebalancer(
            context, membership, self._on_watch, self._on_topics_watch, self._on_leaders_change
        )
        self._zk_lock = threading.RLock()  # rebalances, commits, close: one at a time
        self._cond = threading.Condition()  # wakes the rebalance thread
        self._rebalance_requested = False
        self._topics_changed = False
        self._leaders_changed = False
        self._new_session = False
        self._closing = False
        self._closed = False
        self._first_rebalance = threading.Event()
        self._thread: threading.Thread | None = None

    # -- used by the consumer ----------------------------------------------------------

    def start(
        self,
        subscription: Subscription,
        feeds: list[ChunkQueue],
        feed_of: dict[tuple[str | None, str], ChunkQueue],
    ) -> None:
        """Register in the group, start the rebalance thread, wait for its first rebalance."""
        with self._cond:
            if self._closing:
                raise RuntimeError("the consumer is closed")
            if self.membership.subscription is not None:
                raise RuntimeError("a consumer creates its message streams once")
            self.membership.subscription = subscription
            self.rebalancer.feeds = feeds
            # only now: a refused second call must not repoint the streams already handed out
            self.rebalancer.feed_of.update(feed_of)
        with self._zk_lock:
            self.membership.register()
        self._thread = threading.Thread(
            target=self._run, name=f"group-rebalance-{self.context.consumer_id}", daemon=True
        )
        with self._cond:
            self._rebalance_requested = True
        self._thread.start()
        while not self._first_rebalance.wait(0.5):
            if not self._thread.is_alive():
                break

    def commit_offsets(self, offsets: Mapping[tuple[str, str], int] | None = None) -> None:
        """The consumer's `commit_offsets()`."""
        with self._zk_lock:
            if self._closed:
                return
            try:
                self.membership.commit(
                    list(self.rebalancer.registry.values()),
                    check_owner=self.membership.session_lost,
                    offsets=offsets,
                )
            except KazooException as exc:
                raise ZooKeeperUnavailableError(f"committing offsets failed: {exc!r}") from exc

    def owned_partitions(self) -> dict[str, list[str]]:
        """The consumer's `owned_partitions()`."""
        with self._zk_lock:
            owned: dict[str, list[str]] = defaultdict(list)
            for topic, name in sorted(self.rebalancer.registry):
                owned[topic].append(name)
            return dict(owned)

    def close(self) -> bool:
        """Stop the rebalance thread and the fetchers, commit (with autocommit), delete the
        owner and ids nodes, end the streams; False when closing already."""
        with self._cond:
            if self._closing:
                return False
            self._closing = True
            self._cond.notify_all()
        context, membership, rebalancer = self.context, self.membership, self.rebalancer
        if self._thread is not None and self._thread is not threading.current_thread():
            # a ZooKeeper call can hang while the server is unreachable: do not wait forever
            self._thread.join(context.zk_session_timeout_ms / 1000 + 5)
        with self._zk_lock:
            infos = rebalancer.stop_consuming()
            if context.autocommit_enable and membership.client.connected:
                try:
                    membership.commit(infos, check_owner=membership.session_lost)
                except Exception:
                    log.exception("committing offsets at close failed")
            rebalancer.registry = {}
            if membership.client.connected:
                try:
                    membership.release()
                    membership.unregister()
                except Exception:
                    log.exception("releasing partitions at close failed")
            for feed in rebalancer.feeds:
                feed.end()
            for client in rebalancer.offset_clients.values():
                client.close()
            if rebalancer.leaders is not None:
                rebalancer.leaders.close()
            self._closed = True
        return True

    # -- kazoo's callbacks: flags only -------------------------------------------------

    def on_state(self, state: str) -> None:
        """kazoo's state listener: only flags (runs on kazoo's connection thread)."""
        if self._closing:
            return
        if state == KazooState.LOST:
            self.membership.session_lost = True
            log.warning("consumer %s: ZooKeeper session lost", self.context.consumer_id)
        elif state == KazooState.CONNECTED and self.membership.session_lost:
            with self._cond:
                self._new_session = True
                self._cond.notify_all()

    def _on_watch(self, event: WatchedEvent) -> None:
        """A group, broker or topic change: ask the rebalance thread for a rebalance."""
        if event.type == EventType.NONE:
            return  # a session event; a new session brings its own rebalance
        with self._cond:
            self._rebalance_requested = True
            self._cond.notify_all()

    def _on_topics_watch(self, event: WatchedEvent) -> None:
        """A topic came or went under /brokers/topics (topic filters only)."""
        if event.type == EventType.NONE:
            return
        with self._cond:
            self._topics_changed = True
            self._cond.notify_all()

    def _on_leaders_change(self) -> None:
        """A replicated partition's leader may have moved (kazoo's or a fetcher's thread)."""
        with self._cond:
            self._leaders_changed = True
            self._cond.notify_all()

    # -- the rebalance thread ----------------------------------------------------------

    def _run(self) -> None:
        """The rebalance thread: rebalances, session changes and autocommits, one at a time."""
        context = self.context
        interval = context.autocommit_interval_ms / 1000
        next_commit = self.context.clock() + interval
        retry_at: float | None = None
        while True:
            with self._cond:
                while not (
                    self._closing
                    or self._rebalance_requested
                    or self._new_session
                    or self._topics_changed
                    or self._leaders_changed
                ):
                    now = self.context.clock()
                    wake = [
                        t
                        for t in (retry_at, next_commit if context.autocommit_enable else None)
                        if t
                    ]
                    timeout = min(wake) - now if wake else None
                    if timeout is not None and timeout <= 0:
                        break
                    self._cond.wait(timeout)
                if self._closing:
                    return
                new_session, self._new_session = self._new_session, False
                topics_changed, self._topics_changed = self._topics_changed, False
                leaders_changed, self._leaders_changed = self._leaders_changed, False
                rebalance = self._rebalance_requested or new_session
            if retry_at is not None and self.context.clock() >= retry_at:
                rebalance, retry_at = True, None
            try:
                if new_session:
                    self._on_new_session()
                if topics_changed and not rebalance:
                    rebalance = self._topics_differ()
                if rebalance:
                    retry_at = None
                    if not self._synced_rebalance():
                        retry_at = self.context.clock() + context.rebalance_backoff_ms / 1000
                elif leaders_changed:
                    with self._zk_lock:
                        self.rebalancer.regroup()
            except Exception:
                if self._closing:
                    return
                log.exception("consumer %s: rebalance failed", context.consumer_id)
                context.stats.add(rebalance_failures=1)
                retry_at = self.context.clock() + context.rebalance_backoff_ms / 1000
            finally:
                self._first_rebalance.set()
            if context.autocommit_enable and self.context.clock() >= next_commit:
                next_commit = self.context.clock() + interval
                if not self.membership.session_lost:
                    try:
                        with self._zk_lock:
                            self.membership.commit(
                                list(self.rebalancer.registry.values()), check_owner=False
                            )
                    except Exception as exc:
                        log.warning("consumer %s: autocommit failed: %r", context.consumer_id, exc)

    def _synced_rebalance(self) -> bool:
        """0.7's syncedRebalance: up to rebalance_retries_max attempts; True when one worked."""
        context, membership, rebalancer = self.context, self.membership, self.rebalancer
        for attempt in range(1, context.rebalance_retries_max + 1):
            with self._cond:
                if self._closing:
                    return True
                self._rebalance_requested = False
            context.stats.add(rebalance_attempts=1)
            try:
                with self._zk_lock:
                    if rebalancer.rebalance():
                        context.stats.add(rebalances=1)
                        return True
            except Exception as exc:
                expected = isinstance(exc, KazooException | LogbrokerError)
                log.warning(
                    "consumer %s: rebalance attempt %d failed: %r",
                    context.consumer_id,
                    attempt,
                    exc,
                    exc_info=not expected,
                )
            with self._zk_lock:  # consume nothing while the others catch up
                infos = rebalancer.stop_consuming()
                rebalancer.registry = {}
                try:
                    if context.autocommit_enable and infos:
                        membership.commit(infos, check_owner=True)
                    membership.release()
                except Exception as exc:
                    log.warning(
                        "consumer %s: commit or release failed: %r", context.consumer_id, exc
                    )
            with self._cond:
                if self._cond.wait_for(lambda: self._closing, context.rebalance_backoff_ms / 1000):
                    return True
        context.stats.add(rebalance_failures=1)
        log.error(
            "consumer %s could not rebalance after %d attempts; trying again in %d ms",
            context.consumer_id,
            context.rebalance_retries_max,
            context.rebalance_backoff_ms,
        )
        return False

    def _topics_differ(self) -> bool:
        subscription = self.membership.subscription
        if not isinstance(subscription, WildcardSubscription):
            return False
        with self._zk_lock:
            topics = set(subscription.topics(self.membership.all_topics(self._on_topics_watch)))
        return topics != self.rebalancer.known_topics

    def _on_new_session(self) -> None:
        """After a LOST session: commit what is still ours, register again (then rebalance)."""
        context, membership, rebalancer = self.context, self.membership, self.rebalancer
        with self._zk_lock:
            membership.remember_session()
            log.warning(
                "consumer %s: new ZooKeeper session; registering again", context.consumer_id
            )
            infos = rebalancer.stop_consuming()
            rebalancer.registry = {}
            try:
                if context.autocommit_enable:
                    membership.commit(infos, check_owner=True)
                membership.release()
            except KazooException as exc:
                log.warning(
                    "consumer %s: commit after the session loss failed: %r",
                    context.consumer_id,
                    exc,
                )
            membership.session_lost = False
            membership.register()
            context.stats.add(sessions_reestablished=1)
