"""Where a producer finds brokers and partitions (`producer/*BrokerPartitionInfo.scala`).

Two sources, one interface (`brokers()`, `partitions(topic)`):

- `StaticBrokers`, from a `broker.list` of `id:host:port` (0.7's form) or plain `host:port`
  entries: each broker serves `num_partitions` partitions of every topic (-1 lets the
  broker pick one at random, as 0.7's config-based producer did).
- `ZooKeeperBrokers`, which watches `/brokers/ids` (live brokers, value
  `creatorId:host:port`) and `/brokers/topics/<topic>` (brokers that have the topic, value =
  partition count) and keeps the answer current. A topic no broker has registered yet goes
  to partition 0 of every live broker, as 0.7 did; the first produce creates it there.

A partition of the cluster is `(broker id, partition)`, listed sorted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from ..coordination import paths
from ..coordination.zk_acl import watch_children

if TYPE_CHECKING:
    from .listeners import Listeners

log = logging.getLogger(__name__)


class BrokerEndpoint(NamedTuple):
    id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class BrokerPartition(NamedTuple):
    broker_id: int
    partition: int


class BrokerSource(Protocol):
    version: int  # changes whenever brokers() or partitions() may answer differently

    def brokers(self) -> dict[int, BrokerEndpoint]: ...

    def partitions(self, topic: str) -> list[BrokerPartition]: ...

    def close(self) -> None: ...


def parse_broker_list(text: str) -> list[BrokerEndpoint]:
    """'0:127.0.0.1:9092,1:127.0.0.1:9093' or '127.0.0.1:9092,127.0.0.1:9093'."""
    brokers = []
    for i, item in enumerate(x.strip() for x in text.split(",") if x.strip()):
        fields = item.split(":")
        try:
            if len(fields) == 3:
                brokers.append(BrokerEndpoint(int(fields[0]), fields[1], int(fields[2])))
            elif len(fields) == 2:
                brokers.append(BrokerEndpoint(i, fields[0], int(fields[1])))
            else:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"broker list entry {item!r} is not 'id:host:port' or 'host:port'"
            ) from None
    if not brokers:
        raise ValueError("the broker list is empty")
    return brokers


class StaticBrokers:
    def __init__(self, broker_list: str | list[BrokerEndpoint], num_partitions: int = 1) -> None:
        listed = parse_broker_list(broker_list) if isinstance(broker_list, str) else broker_list
        self._brokers = {b.id: b for b in listed}
        self.num_partitions = num_partitions
        self.version = 0

    def brokers(self) -> dict[int, BrokerEndpoint]:
        return dict(self._brokers)

    def partitions(self, topic: str) -> list[BrokerPartition]:
        return [
            BrokerPartition(b, p) for b in sorted(self._brokers) for p in range(self.num_partitions)
        ]

    def close(self) -> None:
        pass


class ZooKeeperBrokers:
    """Live brokers and topic partitions from ZooKeeper, kept current by watches."""

    def __init__(
        self,
        client: KazooClient,
        on_change: Callable[[], None] | None = None,
        listener: str | None = None,
    ) -> None:
        """`listener`: reach each broker at this listener of /replication/endpoints (SSL
        for security.protocol=SSL) instead of its 0.7 port in /brokers/ids; a broker
        without one counts as not live."""
        self.client = client
        self.on_change = on_change
        self._lock = threading.Lock()
        self._brokers: dict[int, BrokerEndpoint] = {}
        self._topics: dict[str, dict[int, int]] = {}  # topic -> broker id -> partitions
        self._watched: set[str] = set()
        self._listeners: Listeners | None = None
        self.version = 0  # before Listeners: its first notice comes in its constructor
        if listener is not None:
            from .listeners import Listeners  # it imports BrokerEndpoint from here

            self._listeners = Listeners(client, listener, on_change=self._endpoints_changed)
        client.ensure_path(paths.BROKER_IDS)
        client.ensure_path(paths.BROKER_TOPICS)
        ChildrenWatch(client, paths.BROKER_IDS, self._brokers_changed)

    def _brokers_changed(self, children: list[str]) -> None:
        brokers = {}
        for child in children:
            try:
                data, _ = self.client.get(f"{paths.BROKER_IDS}/{child}")
                host, port = paths.parse_broker_value(data)
                brokers[int(child)] = BrokerEndpoint(int(child), host, port)
            except NoNodeError:
                continue  # gone between the listing and the read
            except ValueError as exc:
                log.warning("ignoring broker registration %s: %s", child, exc)
            except KazooException as exc:
                _kept("live brokers", exc)
                return
        with self._lock:
            changed = brokers != self._brokers
            self._brokers = brokers
            self.version += 1
        if changed:
            log.info("live brokers: %s", ", ".join(b.address for b in brokers.values()) or "none")
            self._notify()

    def _endpoints_changed(self) -> None:
        with self._lock:
            self.version += 1
        self._notify()

    def _watch_topic(self, topic: str) -> None:
        with self._lock:
            if topic in self._watched:
                return
            self._watched.add(topic)
        # made by the brokers only where ZooKeeper is locked down: then watched once made
        watch_children(
            self.client,
            paths.broker_topic_path(topic),
            lambda children: self._topic_changed(topic, children),
        )

    def _topic_changed(self, topic: str, children: list[str]) -> None:
        counts = {}
        for child in children:
            try:
                data, _ = self.client.get(paths.broker_topic_broker_path(topic, int(child)))
                counts[int(child)] = paths.parse_topic_value(data)
            except (NoNodeError, ValueError):
                continue
            except KazooException as exc:
                _kept(f"partitions of {topic!r}", exc)
                return
        with self._lock:
            self._topics[topic] = counts
            self.version += 1
        self._notify()

    def _notify(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:
                log.exception("broker change callback failed")

    def brokers(self) -> dict[int, BrokerEndpoint]:
        with self._lock:
            live = dict(self._brokers)
        if self._listeners is None:
            return live
        found = {b: self._listeners.endpoint(b) for b in live}
        return {b: endpoint for b, endpoint in found.items() if endpoint is not None}

    def partitions(self, topic: str) -> list[BrokerPartition]:
        self._watch_topic(topic)
        with self._lock:
            live = self._brokers
            counts = {b: n for b, n in self._topics.get(topic, {}).items() if b in live}
            if not counts:  # nobody has the topic yet: partition 0 of every live broker
                return [BrokerPartition(b, 0) for b in sorted(live)]
            return [BrokerPartition(b, p) for b in sorted(counts) for p in range(counts[b])]

    def close(self) -> None:
        if self._listeners is not None:  # watches die with the client, the caller's
            self._listeners.close()


def _kept(what: str, exc: KazooException) -> None:
    """The ZooKeeper connection went while a watch read its nodes (the client is closing,
    or its session is moving): the last view stands, and the watch fires again once the
    session is back. Raising here would print kazoo's traceback and end the watch."""
    log.debug("kept the last view of the %s: ZooKeeper read failed (%s)", what, type(exc).__name__)
