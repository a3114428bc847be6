"""The mirror's side of the target cluster: acknowledged writes of message sets as they came.

One `TargetWriter` per mirror stream (a broker connection serves one request at a time);
they share one `TargetCluster` (where the target's brokers, partitions and leaders are). A
write is a list of `OutgoingSet`s, each the stored bytes of whole source messages
(compressed wrappers untouched) for one topic; the writer maps each to a target partition
(`partition_map`), sends one PRODUCE_ACK request per target broker and returns only when
every set was acknowledged. A failed request (broker unreachable, connection broken, an
error code) is retried, the partition looked up again each time, with a doubling back-off
(`retry.backoff.ms` up to `retry.backoff.max.ms`); when one write has gone on failing for
`delivery.timeout.ms` the writer raises TargetUnavailableError naming the broker and topic.
A retried request may have been appended before the failure: the target may then hold
duplicates (at-least-once), never a gap.

A replicated target topic (docs/replication.md) is written to its partitions' leaders with
acks=-1: a write counts as acknowledged only once the partition's whole ISR has it
(`request.timeout.ms` bounds the leader's wait). A refusal (NotLeaderForPartition, no
leader, too few in-sync replicas, not acknowledged in time) is retried as any failure, after
the topic's leaders are read again. A topic the target does not have yet is created there by
the first write: replicated, with the source's partitions in all, when the target cluster's
controller publishes a `default.replication.factor` above 1 (needs zk.connect); else 0.7's
way, on every live broker with the source's count per broker.

A 0.8-format source topic's sets (`OutgoingSet.format08`: 0.8's entries, keys included) go
to a 0.8-format target topic, created there by the first write as a 0.8-format topic with
the source's partitions in all and the target's default replication factor (1 included;
needs zk.connect), and are sent to its leaders' Kafka 0.8 listeners in one Produce v0 per
leader, with required_acks -1 (the leader assigns the offsets; each message keeps its key).
A topic whose format differs between source and target, a 0.8-format topic without
zk.connect, and acks=fsync (0.8 has no such answer) end the mirror with TargetFormatError:
no retry can mend them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ..client.brokers import BrokerPartition, BrokerSource, StaticBrokers
from ..client.cluster import Cluster
from ..client.connection import BrokerConnection, BrokerUnavailableError
from ..client.connection08 import Kafka08Connection
from ..client.leaders import Leaders
from ..coordination import paths
from ..coordination.replication_state import NO_LEADER, REPLICATED
from ..protocol.errors import LogbrokerError, error_for_code
from ..protocol.kafka08.errors import error_for_code08
from ..protocol.requests import AckedProduceRequest, CreateTopicRequest, ProduceRequest
from ..protocol.responses import (
    MalformedResponseError,
    decode_acked_produce_response,
    decode_create_topic_response,
)
from .partition_map import target_partition
from .settings import TargetSettings

log = logging.getLogger(__name__)


class TargetUnavailableError(LogbrokerError):
    """The target could not take a write for longer than `delivery.timeout.ms`."""


class TargetFormatError(TargetUnavailableError):
    """The target cannot take a topic's format (see the module's doc): not retried."""


class OutgoingSet(NamedTuple):
    """Whole source messages of one source partition, as one message set for the target."""

    topic: str
    source_partition: str  # "<brokerId>-<partId>" of the source
    data: bytes  # entries (int32 size + stored message), wrappers untouched
    messages: int  # top-level messages (a compressed wrapper counts once)
    format08: bool = False  # 0.8's entries (int64 offset + int32 size + message, keyed)


class TargetCluster:
    """The target's brokers, partitions and leaders, shared by the writers; creates each
    topic once (see the module's doc) so that partitions map 1:1."""

    def __init__(self, settings: TargetSettings) -> None:
        self.settings = settings
        self.describe = settings.zk_connect or settings.broker_list or "?"
        self.cluster: Cluster | None = None
        self.brokers: BrokerSource
        self.leaders: Leaders | None = None  # none with a broker list: every topic is 0.7's
        if settings.zk_connect:
            self.cluster = Cluster(
                settings.zk_connect,
                timeout=settings.socket_timeout_ms / 1000,
                zk_auth=settings.zk_auth,
                credentials=settings.credentials,
            )
            self.brokers = self.cluster.brokers
            self.leaders = self.cluster.leaders
        else:
            assert settings.broker_list is not None
            self.brokers = StaticBrokers(settings.broker_list, 1)
        # every writer's connections: TLS made once, a SASL login on each new socket
        self.tls = self.cluster.tls if self.cluster is not None else settings.credentials.context()
        self.sasl = settings.credentials.sasl
        self._lock = threading.Lock()
        self._created: dict[str, int] = {}  # topic -> partitions per broker asked for

    def wanted_partitions(self, topic: str) -> int | None:
        with self._lock:
            return self._created.get(topic)

    def created(self, topic: str, partitions: int) -> None:
        with self._lock:
            self._created[topic] = partitions

    def replicated_partitions(self, topic: str) -> list[BrokerPartition] | None:
        """A replicated target topic's partitions, `(REPLICATED, p)`; None for a 0.7 one."""
        return self.leaders.partitions(topic) if self.leaders is not None else None

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()


class TargetWriter:
    """Acknowledged writes for one mirror stream; see the module's docstring."""

    def __init__(
        self,
        cluster: TargetCluster,
        *,
        partitions_per_topic: Callable[[str], int],
        partitions_in_all: Callable[[str], int] | None = None,
        on_retry: Callable[[str], None] = lambda topic: None,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`partitions_per_topic(topic)`: the source's partition count per broker, to create
        a 0.7 topic with; `partitions_in_all(topic)`: the source's partitions in all, to
        create a replicated one with (default: the count per broker); `on_retry(topic)`
        counts a failed request; `stop` cuts a back-off short (the write then fails with
        TargetUnavailableError at once)."""
        self.cluster = cluster
        self.settings = cluster.settings
        self.partitions_per_topic = partitions_per_topic
        self.partitions_in_all = partitions_in_all or partitions_per_topic
        self.on_retry = on_retry
        self.stop = stop if stop is not None else threading.Event()
        self.clock = clock
        self._connections: dict[int, tuple[tuple[str, int], BrokerConnection]] = {}
        self._connections08: dict[int, tuple[tuple[str, int], Kafka08Connection]] = {}

    def write(self, sets: list[OutgoingSet]) -> None:
        """Return once every set is acknowledged; TargetUnavailableError after the limit."""
        pending = list(sets)
        first_failure: float | None = None
        backoff = self.settings.retry_backoff_ms / 1000
        while pending:
            failures: list[tuple[OutgoingSet, int | None, str]] = []
            by_broker: dict[tuple[int, bool], list[tuple[OutgoingSet, BrokerPartition]]] = (
                defaultdict(list)
            )
            for s in pending:
                targets = self._partitions(s.topic, s.format08)
                if not targets:
                    failures.append(
                        (s, None, f"no live broker in the target cluster {self.cluster.describe}")
                    )
                    continue
                bp = target_partition(s.source_partition, targets)
                broker_id = bp.broker_id
                if broker_id == REPLICATED:
                    assert self.cluster.leaders is not None
                    broker_id = self.cluster.leaders.leader(s.topic, bp.partition)
                    if broker_id == NO_LEADER:
                        failures.append((s, None, f"{s.topic}-{bp.partition} has no leader now"))
                        continue
                by_broker[(broker_id, s.format08)].append((s, bp))
            for (broker_id, format08), group in by_broker.items():
                send = self._send08 if format08 else self._send
                try:
                    failures += [(s, broker_id, why) for s, why in send(broker_id, group)]
                except (BrokerUnavailableError, LogbrokerError, OSError) as exc:
                    failures += [(s, broker_id, str(exc)) for s, _ in group]
            if not failures:
                return
            now = self.clock()
            if first_failure is None:
                first_failure = now
            s, failed_broker, reason = failures[0]
            for failed, _, _ in failures:
                self.on_retry(failed.topic)
            waited_ms = (now - first_failure) * 1000
            if waited_ms >= self.settings.delivery_timeout_ms or self.stop.is_set():
                raise TargetUnavailableError(
                    f"the target cluster ({self.cluster.describe}) did not take topic "
                    f"{s.topic!r} from {self._broker_name(failed_broker)} for {waited_ms / 1000:.1f} s "
                    f"(delivery.timeout.ms={self.settings.delivery_timeout_ms}): {reason}"
                )
            log.warning(
                "target %s, topic %s: %s; %d sets retried in %.2f s",
                self._broker_name(failed_broker),
                s.topic,
                reason,
                len(failures),
                backoff,
            )
            self.stop.wait(backoff)
            backoff = min(backoff * 2, self.settings.retry_backoff_max_ms / 1000)
            pending = [f for f, _, _ in failures]
            if self.cluster.leaders is not None:
                for topic in {f.topic for f in pending}:
                    if self.cluster.replicated_partitions(topic) is not None:
                        self.cluster.leaders.refresh(topic)  # its watch may lag behind

    def close(self) -> None:
        for _, conn in self._connections.values():
            conn.close()
        self._connections.clear()
        for _, conn08 in self._connections08.values():
            conn08.close()
        self._connections08.clear()

    # -- internals ------------------------------------------------------------------------

    def _broker_name(self, broker_id: int | None) -> str:
        if broker_id is None:
            seen = ", ".join(
                f"{b} ({h}:{p})" for b, ((h, p), _) in sorted(self._connections.items())
            )
            return (
                f"any broker (none is live; last seen: broker {seen})"
                if seen
                else "any broker (none is live)"
            )
        known = self._connections.get(broker_id)
        if known is not None:
            return f"broker {broker_id} ({known[0][0]}:{known[0][1]})"
        endpoint = self.cluster.brokers.brokers().get(broker_id)
        return f"broker {broker_id}" + (f" ({endpoint.address})" if endpoint else "")

    def _partitions(self, topic: str, format08: bool = False) -> list[BrokerPartition]:
        # replicated first: brokers.partitions() would register the name as a 0.7 topic
        replicated = self.cluster.replicated_partitions(topic)
        if format08:
            return self._partitions08(topic, replicated)
        if replicated is not None:
            assert self.cluster.leaders is not None
            if self.cluster.leaders.is_format08(topic):
                raise self._format_mismatch(topic, "0.7", "0.8")
            return replicated
        wanted = self.cluster.wanted_partitions(topic)
        live = self.cluster.brokers.brokers()
        if wanted is None and live:
            wanted = self._create(topic, live)
            replicated = self.cluster.replicated_partitions(topic)
            if replicated is not None:
                return replicated
        listed = self.cluster.brokers.partitions(topic)
        if wanted:
            extra = {BrokerPartition(b, p) for b in live for p in range(wanted)}
            return sorted(set(listed) | extra)
        return listed

    def _partitions08(
        self, topic: str, replicated: list[BrokerPartition] | None
    ) -> list[BrokerPartition]:
        """A 0.8-format source topic's target partitions: its 0.8-format target topic's,
        created with the first write."""
        admin, leaders = self.cluster.cluster, self.cluster.leaders
        if admin is None or leaders is None:
            raise TargetFormatError(
                f"{topic!r} is a 0.8-format topic in the source: the mirror creates and writes "
                f"it in the target through the target's ZooKeeper, and the target is given as "
                f"broker.list={self.settings.broker_list}: give its zk.connect"
            )
        if self.settings.fsync:
            raise TargetFormatError(
                f"{topic!r} is a 0.8-format topic: acks=fsync has no Kafka 0.8 equivalent; "
                "mirror it with acks=ack (written with acks=-1: every in-sync replica has it)"
            )
        if replicated is None:
            if admin.zk.exists(paths.broker_topic_path(topic)):
                raise self._format_mismatch(topic, "0.8", "0.7")
            if self._create_replicated(admin, topic, "0.8") is None:
                return []  # retried: "no live broker" until the creation goes through
            replicated = self.cluster.replicated_partitions(topic) or []
        if not leaders.is_format08(topic):
            raise self._format_mismatch(topic, "0.8", "0.7")
        return replicated

    def _format_mismatch(self, topic: str, source: str, target: str) -> TargetFormatError:
        return TargetFormatError(
            f"{topic!r} is a {source}-format topic in the source and a {target}-format topic in "
            f"the target cluster ({self.cluster.describe}): a topic keeps its format, and the "
            f"mirror copies messages as they are stored; delete the target's {topic!r} or "
            f"create it with --message-format {source}, or leave it out of the whitelist"
        )

    def _create(self, topic: str, live: Mapping[int, object]) -> int | None:
        """Create `topic` with the source's partition count on every live target broker, or
        as a replicated topic when the target's default replication factor says so."""
        admin = self.cluster.cluster
        if admin is not None and admin.default_replication_factor() > 1:
            return self._create_replicated(admin, topic)
        partitions = max(1, self.partitions_per_topic(topic))
        for broker_id in sorted(live):
            try:
                body = self._connection(broker_id).request(CreateTopicRequest(topic, partitions))
                decode_create_topic_response(body)  # a refusal raises, with the reason
            except (LogbrokerError, OSError) as exc:
                log.warning("creating %s on target broker %s: %s", topic, broker_id, exc)
                return None  # asked again with the next write
        log.info("topic %s: %d partitions per target broker", topic, partitions)
        self.cluster.created(topic, partitions)
        return partitions

    def _create_replicated(
        self, admin: Cluster, topic: str, message_format: str = "0.7"
    ) -> int | None:
        partitions = max(1, self.partitions_in_all(topic))
        factor = max(1, admin.default_replication_factor())
        try:
            admin.create_replicated_topic(topic, partitions, factor, message_format=message_format)
        except LogbrokerError as exc:
            if admin.assignment(topic) is None:  # not made by another mirror meanwhile
                log.warning("creating replicated %s on the target: %s", topic, exc)
                return None
        assert self.cluster.leaders is not None
        self.cluster.leaders.refresh(topic)
        log.info(
            "topic %s: %d partitions, replication factor %d, %s format",
            topic,
            partitions,
            factor,
            message_format,
        )
        self.cluster.created(topic, partitions)
        return partitions

    def _connection(self, broker_id: int) -> BrokerConnection:
        endpoint = self.cluster.brokers.brokers().get(broker_id)
        if endpoint is None:
            raise BrokerUnavailableError(f"target broker {broker_id} is not live")
        address = (endpoint.host, endpoint.port)
        known = self._connections.get(broker_id)
        if known is not None and known[0] == address:
            return known[1]
        if known is not None:
            known[1].close()
        conn = BrokerConnection(
            endpoint.host,
            endpoint.port,
            timeout=self.settings.socket_timeout_ms / 1000,
            tls=self.cluster.tls,
            sasl=self.cluster.sasl,
        )
        self._connections[broker_id] = (address, conn)
        return conn

    def _send(
        self, broker_id: int, group: list[tuple[OutgoingSet, BrokerPartition]]
    ) -> list[tuple[OutgoingSet, str]]:
        """Send the sets in one request; the refused ones, with why (the others are
        acknowledged: sending them again would only duplicate them)."""
        # acks=-1 when a replicated partition is in the request (a 0.7 topic's broker is its
        # whole ISR: it answers those sets as it did)
        in_sync = any(bp.broker_id == REPLICATED for _, bp in group)
        request = AckedProduceRequest(
            self.settings.fsync,
            tuple(ProduceRequest(s.topic, bp.partition, s.data) for s, bp in group),
            all_in_sync=in_sync,
            timeout_ms=self.settings.request_timeout_ms if in_sync else 0,
        )
        answers = decode_acked_produce_response(self._connection(broker_id).request(request))
        return [
            (
                s,
                f"target broker {broker_id} refused {s.messages} messages for "
                f"{s.topic}-{bp.partition}: {type(error_for_code(answer.error)).__name__} "
                f"(error code {answer.error})",
            )
            for (s, bp), answer in zip(group, answers, strict=True)
            if answer.error
        ]

    def _connection08(self, broker_id: int) -> Kafka08Connection:
        assert self.cluster.leaders is not None
        endpoint = self.cluster.leaders.listeners.endpoint(broker_id)
        if endpoint is None:
            raise BrokerUnavailableError(
                f"target broker {broker_id} has no live Kafka 0.8 listener (port.08) registered"
            )
        address = (endpoint.host, endpoint.port)
        known = self._connections08.get(broker_id)
        if known is not None and known[0] == address:
            return known[1]
        if known is not None:
            known[1].close()
        conn = Kafka08Connection(
            endpoint.host,
            endpoint.port,
            timeout=self.settings.socket_timeout_ms / 1000,
            tls=self.cluster.tls,
            sasl=self.cluster.sasl,
        )
        self._connections08[broker_id] = (address, conn)
        return conn

    def _send08(
        self, broker_id: int, group: list[tuple[OutgoingSet, BrokerPartition]]
    ) -> list[tuple[OutgoingSet, str]]:
        """_send for 0.8-format topics: one Produce v0 (acks=-1) to the leader's 0.8
        listener, the sets' 0.8 entries as they came (the leader assigns their offsets)."""
        by_topic: dict[str, list[tuple[OutgoingSet, BrokerPartition]]] = {}
        for s, bp in group:  # each topic's sets together: the answer lists them so
            by_topic.setdefault(s.topic, []).append((s, bp))
        ordered = [entry for found in by_topic.values() for entry in found]
        conn = self._connection08(broker_id)
        try:
            answer = conn.produce(
                -1,
                self.settings.request_timeout_ms,
                [(s.topic, bp.partition, s.data) for s, bp in ordered],
            )
        except MalformedResponseError as exc:  # the connection is closed: sent again
            raise BrokerUnavailableError(f"target broker {broker_id}: {exc}") from exc
        found = [(t.topic, p) for t in answer.topics for p in t.partitions]
        if [(t, r.partition) for t, r in found] != [(s.topic, bp.partition) for s, bp in ordered]:
            raise BrokerUnavailableError(
                f"target broker {broker_id} answered {len(found)} partitions that are not the "
                f"{len(ordered)} sent"
            )
        return [
            (
                s,
                f"target broker {broker_id} refused {s.messages} messages for "
                f"{s.topic}-{bp.partition}: {type(error_for_code08(code)).__name__} "
                f"(0.8 error code {code})",
            )
            for (s, bp), (_, result) in zip(ordered, found, strict=True)
            if (code := result.error_code)
        ]
