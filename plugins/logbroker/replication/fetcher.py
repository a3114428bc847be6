"""A follower's copy of its leaders' logs: one fetcher thread per leader broker.

A fetcher sends REPLICA_FETCH (protocol/replication.py) for every partition this broker
follows on that leader, each from its log's end, in the leader epoch it follows. The leader
holds the request until it has something new (or `replica.fetch.wait.max.ms`), and answers
with its bytes from there: the follower records the leader's epochs that start in them
(epochs.py) and appends the messages verbatim (Log.append_verbatim). The leader cuts the bytes
where one of its appends ended and says how many messages they hold (Log.read_whole); only
when the leader could not say (a follower far behind) does the follower walk the sizes to find
the whole messages, and fetch a cut-off last one again from its new end. Before appending, the
follower checks every entry's size, magic, codec and CRC (message_set.validate, compiled;
compressed wrappers as far as their own CRC, as Kafka 0.8's followers did): bytes damaged on
the leader's disk or on the way are not copied. Such an answer appends nothing; it is logged
(once per offset) and counted (`on_damaged`), and the partition is fetched again after a
pause, from the same offset. Its next fetch, from its new end, is how the leader learns that the follower has the
data. Bytes are appended only at the offset they were fetched from: an answer that cannot be
this fetch's (see `_take`) is dropped with the connection, and the fetch is made again from
the log's end.

The follower's high watermark is the leader's, capped at its own end: never above what it
holds. A partition whose leader answers that it does not lead it (codes 8, 9, 13) waits for
its new state; the replica manager moves it to its new leader's fetcher.

Before it copies anything in a new leader epoch, a follower truncates its log to where it
agrees with the leader (docs/replication.md, "Truncation by leader epoch"; KIP-101 with
KIP-279's loop): it asks the leader where its own latest epoch ends in the leader's log
(OFFSETS_FOR_LEADER_EPOCH), forgets its epochs the leader never had, cuts its log at the
smaller of the two ends, and asks again until its log is a prefix of the leader's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from ..coordination.replication_state import PartitionState
from ..protocol.errors import LogbrokerError, describe_exception
from ..protocol.message_formats import FORMAT_07
from ..protocol.replication import (
    EpochQuery,
    OffsetsForLeaderEpochRequest,
    ReplicaFetch,
    ReplicaFetchRequest,
    ReplicaSet,
    decode_offsets_for_leader_epoch_response,
    decode_replica_fetch_response,
)
from ..storage.log_manager import PartitionLog
from .epochs import UNDEFINED, EpochFileError, LeaderEpochs

log = logging.getLogger(__name__)

Address = Callable[[int], tuple[str, int] | None]  # broker id -> host, port (None: not live)


class LeaderConnection(Protocol):
    """A blocking request/answer connection to the leader (client/connection.py's
    BrokerConnection, which the broker hands in: replication does not import the client)."""

    def request(self, request: ReplicaFetchRequest | OffsetsForLeaderEpochRequest) -> bytes: ...

    def close(self) -> None: ...


Connect = Callable[[str, int, float], LeaderConnection]  # host, port, timeout (s)


class Follower(Protocol):
    """What a fetcher needs of a replica it copies (replicas.Replica)."""

    topic: str
    partition: int
    log: PartitionLog
    epochs: LeaderEpochs
    state: PartitionState | None
    high_watermark: int

    @property
    def name(self) -> str: ...


RETRY_S = 0.2  # after a failed exchange, before the next try


class ReplicaFetcher(threading.Thread):
    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        address: Address,
        *,
        max_bytes: int,
        max_wait_ms: int,
        connect: Connect | None = None,
        on_damaged: Callable[[str], None] | None = None,
    ) -> None:
        """`connect(host, port, timeout)`: a connection to the leader (None: this fetcher is
        never started, a test's). `on_damaged(topic)`: called (on this thread) for each answer
        not appended because an entry in it failed its check."""
        super().__init__(name=f"replica-fetcher-{broker_id}-from-{leader_id}", daemon=True)
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.address = address
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self._partitions: dict[tuple[str, int], Follower] = {}
        self._fetch_size: dict[tuple[str, int], int] = {}
        self._to_truncate: set[tuple[str, int]] = set()  # new in this leader epoch
        self._lock = threading.Lock()  # held while a response is appended
        self._changed = threading.Condition(self._lock)
        self._stopped = threading.Event()
        self.connect = connect
        self._connection: LeaderConnection | None = None
        self.fetched_bytes = 0
        self.on_damaged = on_damaged
        self._damaged_at: dict[tuple[str, int], int] = {}  # partition -> offset it was said at
        self._pause_next = False  # a damaged answer: the next fetch waits RETRY_S

    # -- the replica manager's calls ------------------------------------------------------

    def add(self, replica: Follower, new_epoch: bool = True) -> None:
        """Copy `replica` from this leader; `new_epoch`: it follows a leader epoch it has not
        copied in yet, so it first truncates to where it agrees with the leader."""
        key = (replica.topic, replica.partition)
        with self._changed:
            self._partitions[key] = replica
            if new_epoch:
                self._to_truncate.add(key)
            self._changed.notify_all()

    def remove(self, replica: Follower) -> None:
        """Stop copying `replica`; returns once no append of it is in progress."""
        key = (replica.topic, replica.partition)
        with self._lock:
            self._partitions.pop(key, None)
            self._fetch_size.pop(key, None)
            self._to_truncate.discard(key)

    def empty(self) -> bool:
        with self._lock:
            return not self._partitions

    def stop(self) -> None:
        self._stopped.set()
        with self._changed:
            self._changed.notify_all()
        connection = self._connection
        if connection is not None:
            connection.close()

    # -- the thread -----------------------------------------------------------------------

    def run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            with self._changed:
                while not self._partitions and not self._stopped.is_set():
                    self._changed.wait(1.0)
                replicas = list(self._partitions.values())
            if self._stopped.is_set():
                break
            try:
                self._fetch_once(replicas)
                failures = 0
            except (OSError, LogbrokerError) as exc:
                failures += 1
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning(
                        "broker %d fetching from leader %d: %s (try %d)",
                        self.broker_id,
                        self.leader_id,
                        describe_exception(exc),
                        failures,
                    )
                self._stopped.wait(RETRY_S)
        if self._connection is not None:
            self._connection.close()

    def _fetch_once(self, replicas: list[Follower]) -> None:
        if self._connection is None:
            where = self.address(self.leader_id)
            if where is None:
                raise LogbrokerError(f"leader {self.leader_id} is not registered")
            wait_s = self.max_wait_ms / 1000
            if self.connect is None:
                raise LogbrokerError("this replica fetcher was given no way to connect")
            self._connection = self.connect(where[0], where[1], wait_s + 10)
        with self._lock:
            truncating = [r for r in replicas if (r.topic, r.partition) in self._to_truncate]
        for r in truncating:
            self._truncate(r)
        fetches = []
        for r in replicas:
            state = r.state
            if state is None or (r.topic, r.partition) in self._to_truncate:
                continue
            fetches.append(
                ReplicaFetch(
                    r.topic,
                    r.partition,
                    r.log.end_offset,
                    self._fetch_size.get((r.topic, r.partition), self.max_bytes),
                    state.leader_epoch,
                )
            )
        if not fetches:
            self._stopped.wait(RETRY_S)
            return
        body = self._connection.request(
            ReplicaFetchRequest(self.broker_id, self.max_wait_ms, 1, tuple(fetches))
        )
        asked = {(f.topic, f.partition): f.offset for f in fetches}
        for answer in decode_replica_fetch_response(body):
            with self._lock:  # the manager's remove() waits for this append to finish
                replica = self._partitions.get((answer.topic, answer.partition))
                if replica is not None:
                    self._take(replica, answer, asked.get((answer.topic, answer.partition)))
        if self._pause_next:  # not at once: the leader would send the same bytes again
            self._pause_next = False
            self._stopped.wait(RETRY_S)

    def _truncate(self, r: Follower) -> None:
        """Cut `r`'s log to where it agrees with the leader's (see the module doc)."""
        assert self._connection is not None
        key = (r.topic, r.partition)
        for _round in range(64):
            epoch = r.epochs.latest_epoch
            if epoch == UNDEFINED:
                target = r.log.start_offset if r.log.end_offset else 0  # nothing is known good
            else:
                body = self._connection.request(
                    OffsetsForLeaderEpochRequest((EpochQuery(r.topic, r.partition, epoch),))
                )
                [answer] = decode_offsets_for_leader_epoch_response(body)
                if answer.error in (8, 9, 13):
                    return  # not the leader (any more): the next state says who is
                if answer.error:
                    raise LogbrokerError(
                        f"leader {self.leader_id} could not say where epoch {epoch} of {r.name} "
                        f"ends: error {answer.error}"
                    )
                if answer.epoch == UNDEFINED:  # the leader has no epoch this old
                    target = r.log.start_offset
                else:
                    _, mine = r.epochs.end_offset_for(answer.epoch, r.log.end_offset)
                    target = min(answer.end_offset, mine if mine >= 0 else r.log.end_offset)
                    if answer.epoch < epoch:
                        r.epochs.drop_above(answer.epoch)
            with self._lock:
                if key not in self._partitions:
                    return
                if target < r.log.end_offset:
                    log.warning(
                        "%s: truncating from %d to %d to agree with leader %d (epoch %d)",
                        r.name,
                        r.log.end_offset,
                        target,
                        self.leader_id,
                        epoch,
                    )
                    r.log.truncate_to(max(target, r.log.start_offset))
                    r.epochs.truncate_after(r.log.end_offset)
                r.high_watermark = min(r.high_watermark, r.log.end_offset)
                if epoch == UNDEFINED or r.epochs.latest_epoch == epoch:
                    self._to_truncate.discard(key)  # agreed: copy from here
                    return
        raise LogbrokerError(f"{r.name}: no agreement with leader {self.leader_id} in 64 rounds")

    def _refuse_damaged(self, r: Follower, offset: int, reason: str) -> None:
        key = (r.topic, r.partition)
        if self._damaged_at.get(key) != offset:
            self._damaged_at[key] = offset
            log.error(
                "%s: the bytes from leader %d at offset %d fail their check (%s): nothing "
                "appended; fetching them again",
                r.name,
                self.leader_id,
                offset,
                reason,
            )
        if self.on_damaged is not None:
            self.on_damaged(r.topic)
        self._pause_next = True

    def _take(self, r: Follower, answer: ReplicaSet[memoryview], asked: int | None) -> None:
        """Append an answer's bytes, which the leader read at `asked` (the offset this fetch
        asked from), there and nowhere else. REPLICA_FETCH has no correlation id, so what
        shows that an answer is not this fetch's, or that the log moved meanwhile, drops
        the connection instead: a log that no longer ends at `asked`, or bytes that would
        end past the leader's log end sent with them (the leader reads that end after the
        bytes: an answer read at `asked` never does; one read at an earlier offset, for an
        earlier fetch, does unless it was cut short by max bytes or a segment's end)."""
        key = (answer.topic, answer.partition)
        if answer.error:
            if answer.error in (8, 9, 13):  # not the leader (any more): wait for the new state
                return
            raise LogbrokerError(
                f"leader {self.leader_id} refused to copy {answer.topic}-{answer.partition} "
                f"to broker {self.broker_id}: error {answer.error}"
            )
        entries = r.log.message_format  # how this topic's entries are framed and checked
        if asked != r.log.end_offset or (
            entries is FORMAT_07 and asked + len(answer.data) > answer.log_end
        ):
            raise LogbrokerError(
                f"{r.name}: {len(answer.data)} bytes from leader {self.leader_id} (its log "
                f"ending at {answer.log_end}) for a fetch from offset {asked}, with this log "
                f"ending at {r.log.end_offset}: not this fetch's answer, not appended"
            )
        data = answer.data
        if answer.messages >= 0:  # whole messages, counted by the leader
            end, count = len(data), answer.messages
        else:
            end, count = entries.whole_entries(data)
        if end == 0 and len(data):
            needed = entries.first_entry_size(data) or self.max_bytes
            self._fetch_size[key] = max(self._fetch_size.get(key, self.max_bytes), needed)
            return
        self._fetch_size.pop(key, None)
        if end:  # most answers of a fetch of several partitions bring nothing: no work
            start = r.log.end_offset
            damage = entries.check(data[:end], start)
            if damage is not None:
                self._refuse_damaged(r, start, str(damage))
                return
            self._damaged_at.pop(key, None)
            copied_end = entries.next_offset(data[:end], start)
            for epoch, epoch_start in answer.epochs:
                if epoch_start <= copied_end:  # the epochs that wrote what is copied now
                    try:
                        r.epochs.assign(epoch, max(epoch_start, r.epochs.latest_start))
                    except EpochFileError as exc:
                        log.error("%s: %s", r.name, exc)
            r.log.append_verbatim(data[:end], count)
            self.fetched_bytes += end
        r.high_watermark = max(r.high_watermark, min(answer.high_watermark, r.log.end_offset))
