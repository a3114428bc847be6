"""Request handlers: what the broker does for each request (`server/KafkaRequestHandlers`).

A handler returns the response as parts to send in order (header bytes, and FileRegions the
connection sends with sendfile), None for the requests 0.7 never answers (PRODUCE,
MULTIPRODUCE), a `WaitingFetch` for a FETCH_WAIT that has to wait (answered from the append
that brings the data, see waiters.py), or an awaitable of parts for the requests that wait
otherwise (PRODUCE_ACK with fsync, produces with compressed sets). A handler raises only for
what 0.7 answered by closing the connection; everything else becomes an error code here, at
the edge (`error_code`).

| request      | bad topic / partition        | damaged set, first entry cut | payload > max.message.size |
|--------------|------------------------------|------------------------------|----------------------------|
| PRODUCE(S)   | close, nothing appended      | close, nothing appended      | set dropped, logged, kept  |
| FETCH(ES)    | code -1 / 3 in the set       |                              |                            |
| OFFSETS      | close                        |                              |                            |
| PRODUCE_ACK  | code 6 / 3 per result        | code 2 per result            | code 5 per result          |
| FETCH_WAIT   | code 6 / 3 per set           |                              |                            |
| METADATA     | code 6 per topic             |                              |                            |
| CREATE_TOPIC | code 6 / 3 and the reason    |                              |                            |

Replicated partitions are the ReplicaManager's (replication/replicas.py): the handlers ask it
for a partition's leader replica (a produce's target, a consumer's log and high watermark),
the acks=-1 checks and waits, a follower's fetch and an epoch's end, and keep the bytes, the
waiting fetches and the answers. A produce's target is a 0.7 topic's Log or a leader Replica:
both append the same way, and the Replica refuses once it no longer leads.

Compressed sets are inflated and checked in a worker thread (`_inflate`), within
`max.inflated.set.size` per set and `max.inflated.request.size` per request, one level deep:
PRODUCE(S) past a limit close the connection, PRODUCE_ACK answers code 5 (code 2 for nesting).
A set that cannot be written (a full disk: StorageError) is never kept in part: PRODUCE_ACK
answers code 7 for it; PRODUCE(S), which get no answer, have their connection closed so that
the producer learns that something was lost, and the failure is counted either way.

With an authorizer (`authorizer.class.name`), `handle` asks it first what the request needs
(server/authorization.py): a refused produce, OFFSETS or replica request closes the
connection, a refused fetch or acked produce is rewritten into a denied one that
`_fetch_set` and `_try_check` answer with code 29 (-1 in a plain 0.7 fetch), and nothing of it
is stored.

REPLICA_FETCH and OFFSETS_FOR_LEADER_EPOCH come in through `replication()`, with the
connection's principal: when `replication.require.authenticated.brokers` is on (security/listeners.py)
one from anyone but a broker (for REPLICA_FETCH: the broker its replica id names) is answered
code 31 (ClusterAuthorizationFailed) per partition and logged, and the replica manager never
sees it: no follower offset, ISR or high watermark moves.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Union

from ..config import BrokerConfig
from ..protocol.errors import (
    AuthorizationError,
    ClusterAuthorizationFailedError,
    InflatedSizeTooLargeError,
    InvalidFetchSizeError,
    InvalidMessageError,
    InvalidTopicError,
    LeaderNotAvailableError,
    LogbrokerError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    StorageError,
    TopicAuthorizationFailedError,
    UnknownError,
    WrongMessageFormatError,
    WrongPartitionError,
    error_code,
    error_for_code,
)
from ..protocol.message_formats import FORMAT_07
from ..protocol.message_set import (
    PRODUCE_MAX_NESTING,
    Buffer,
    InflateBudget,
    Validation,
    validate,
)
from ..protocol.replication import (
    EpochEnd,
    OffsetsForLeaderEpochRequest,
    ReplicaFetchRequest,
    ReplicaSet,
    encode_offsets_for_leader_epoch_response,
    encode_replica_fetch_response,
)
from ..protocol.requests import (
    EARLIEST_TIME,
    LATEST_TIME,
    RANDOM_PARTITION,
    AckedProduceRequest,
    CreateTopicRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    ProduceRun,
    Request,
    WaitingFetchRequest,
)
from ..protocol.responses import (
    FetchedSet,
    PartitionMetadata,
    ProduceResult,
    TopicMetadata,
    encode_acked_produce_response,
    encode_fetch_response_header,
    encode_metadata_response,
    encode_multifetch_response,
    encode_offsets_response,
    encode_refusal,
)
from ..protocol.topics import is_legal_topic, validate_topic
from ..replication.replicas import Replica, ReplicaManager
from ..security.acls import ANONYMOUS, Operation
from ..security.listeners import broker_id_of, require_authenticated_brokers
from ..storage.log import Log
from ..storage.log_manager import LogManager, PartitionLog
from ..storage.segment import FileRegion, empty_region
from .authorization import RequestAuthorizer, TopicCheck, no_check
from .log_limiter import RateLimitedLog
from .metrics import BrokerMetrics, error_kind
from .waiters import AppendWaiters, WaitingFetch

log = logging.getLogger(__name__)

_UNANSWERED = (ProduceRequest, MultiProduceRequest)  # 0.7 sends nothing back for these
_new_tuple = tuple.__new__
MAX_07_CODE = 4  # a 0.7 client knows codes -1 to 4: a later code is Unknown to it
Part = Union[bytes, FileRegion]  # noqa: UP007 - a runtime alias
Response = list[Part]
Outcome = Response | Awaitable[Response] | None
_Check = tuple[int, Validation | LogbrokerError]  # a produce's partition and its check
Target = Union[Log, Replica]  # noqa: UP007 - what a produce appends to: a 0.7 log, a leader


class ProduceRejected(LogbrokerError):
    """A produce 0.7 answered by closing the connection; nothing of it was appended."""


class _DeniedFetch(FetchRequest):
    """A fetch of a topic the principal may not Read: answered code 29 (`_fetch_set`)."""

    __slots__ = ()


class _DeniedProduce(ProduceRequest):
    """An acked produce to a topic the principal may not Write: code 29 (`_try_check`)."""

    __slots__ = ()


class RequestHandlers:
    """Dispatches decoded requests to the logs."""

    def __init__(
        self,
        logs: LogManager,
        config: BrokerConfig,
        metrics: BrokerMetrics,
        waiters: AppendWaiters,
        run_blocking: Callable[[Callable[[], None]], Awaitable[None]] | None = None,
        warnings: RateLimitedLog | None = None,
        replicas: ReplicaManager | None = None,
        replica_waiters: AppendWaiters | None = None,
    ) -> None:
        self.logs = logs
        self.replicas = replicas
        # what a client can make us log: at most a line per cause per interval
        self.warnings = warnings or RateLimitedLog(log, config.connection_log_interval_ms / 1000)
        self.config = config
        self.metrics = metrics
        self.waiters = waiters
        self.authenticated_brokers_only = require_authenticated_brokers(config)
        # Followers' REPLICA_FETCHes wait apart from consumers' fetches: a follower wants
        # the leader's appends, a consumer of a replicated partition the high watermark's
        # moves, and neither is woken by what only the other wants.
        self.replica_waiters = replica_waiters if replica_waiters is not None else AppendWaiters()
        self._run_blocking = run_blocking or _in_thread
        self._deferred: dict[Target, list[tuple[Buffer, Validation]]] = {}
        # Compressed sets are inflated and checked here; the loop never inflates.
        self._inflater = ThreadPoolExecutor(max_workers=2, thread_name_prefix="inflate")
        self._batching = False
        self._batched = _BatchedAppends(self)
        self._dispatch: dict[type, Callable[[object, str], Outcome]] = {
            ProduceRequest: self.produce,  # type: ignore[dict-item]
            MultiProduceRequest: self.multiproduce,  # type: ignore[dict-item]
            FetchRequest: self.fetch,  # type: ignore[dict-item]
            MultiFetchRequest: self.multifetch,  # type: ignore[dict-item]
            OffsetsRequest: self.offsets,  # type: ignore[dict-item]
            AckedProduceRequest: self.acked_produce,  # type: ignore[dict-item]
            WaitingFetchRequest: self.waiting_fetch,  # type: ignore[dict-item]
            MetadataRequest: self.metadata,  # type: ignore[dict-item]
            CreateTopicRequest: self.create_topic,  # type: ignore[dict-item]
            ReplicaFetchRequest: self.replica_fetch,  # type: ignore[dict-item]
            OffsetsForLeaderEpochRequest: self.offsets_for_leader_epoch,  # type: ignore[dict-item]
        }
        if replicas is not None:  # the high watermark moved outside a request: wake readers
            replicas.on_high_watermark = self._high_watermark_moved
        # None: no authorizer, anyone may do anything (the broker sets it when configured)
        self.authorizer: RequestAuthorizer | None = None

    def handle(self, request: Request, client: str, principal: str = ANONYMOUS) -> Outcome:
        if self._deferred and type(request) not in _UNANSWERED:
            self.flush_appends()  # whatever comes next sees the produces before it
        if self.authorizer is not None:
            return self._handle_authorized(request, client, principal, self.authorizer)
        return self._dispatch[type(request)](request, client)

    # -- authorization (server/authorization.py) ----------------------------------------

    def _handle_authorized(
        self, request: Request, client: str, principal: str, auth: RequestAuthorizer
    ) -> Outcome:
        """`request` as far as `principal` may make it; refusals as the module's doc says."""
        kind = type(request)  # a denied fetch's is its own: dispatched as the original
        if isinstance(request, (ProduceRequest, MultiProduceRequest)):
            produces = request.produces if isinstance(request, MultiProduceRequest) else (request,)
            for p in produces:
                refusal = self._produce_refusal(p, client, principal, auth)
                if refusal is not None:
                    self.metrics.error(error_kind(refusal), p.topic)
                    raise type(refusal)(f"{kind.__name__} refused, nothing appended: {refusal}")
        elif isinstance(request, AckedProduceRequest):
            request = request._replace(
                produces=tuple(
                    _DeniedProduce(*p) if self._produce_refusal(p, client, principal, auth) else p
                    for p in request.produces
                )
            )
        elif isinstance(request, FetchRequest):
            if auth.topic(client, principal, Operation.READ, request.topic):
                request = _DeniedFetch(*request)
        elif isinstance(request, (MultiFetchRequest, WaitingFetchRequest)):
            check = auth.topics(client, principal, Operation.READ)
            fetches = tuple(_DeniedFetch(*f) if check(f.topic) else f for f in request.fetches)
            request = request._replace(fetches=fetches)
        elif isinstance(request, OffsetsRequest):
            refusal = auth.topic(client, principal, Operation.DESCRIBE, request.topic)
            if refusal is not None:
                raise refusal  # OFFSETS has no error code: the connection closes
        elif isinstance(request, MetadataRequest):
            return self.metadata(
                request, client, auth.topics(client, principal, Operation.DESCRIBE)
            )
        elif isinstance(request, CreateTopicRequest):
            refusal = auth.cluster(client, principal, Operation.CREATE)
            if refusal is not None:
                self.metrics.error(error_kind(refusal))
                return [encode_refusal(error_code(refusal), str(refusal))]
        elif isinstance(request, (ReplicaFetchRequest, OffsetsForLeaderEpochRequest)):
            refusal = auth.cluster(client, principal, Operation.CLUSTER_ACTION)
            if refusal is not None:
                self.metrics.error(error_kind(refusal))
                raise refusal  # nothing of the follower's state is recorded
        return self._dispatch[kind](request, client)

    def _produce_refusal(
        self,
        produce: ProduceRequest | ProduceRun,
        client: str,
        principal: str,
        auth: RequestAuthorizer,
    ) -> AuthorizationError | None:
        """Write on the topic, and Create on the cluster for a 0.7 topic a produce creates."""
        topic = produce.topic
        refusal = auth.topic(client, principal, Operation.WRITE, topic)
        if (
            refusal is None
            and self.logs.lookup(topic, produce.partition) is None  # the usual: it is there
            and topic not in self.logs.topics()
            and not self._replicated(topic)
        ):
            return auth.cluster(client, principal, Operation.CREATE)
        return refusal

    # -- replica requests: only from brokers (security/listeners.py) -------------------

    def replication(
        self, request: ReplicaFetchRequest | OffsetsForLeaderEpochRequest, client: str, who: str
    ) -> Outcome:
        """A request only brokers make, from a connection whose principal is `who`: handled,
        or refused with code 31 when brokers must authenticate and `who` is not that broker."""
        if self.authenticated_brokers_only:
            broker = broker_id_of(self.config, who)
            if isinstance(request, ReplicaFetchRequest):
                allowed = broker is not None and broker == request.replica_id
                what = f"REPLICA_FETCH as broker {request.replica_id}"
            else:
                allowed = broker is not None
                what = "OFFSETS_FOR_LEADER_EPOCH"
            if not allowed:
                return self._unauthorized(request, client, who, what)
        return self.handle(request, client, who)

    def _unauthorized(
        self,
        request: ReplicaFetchRequest | OffsetsForLeaderEpochRequest,
        client: str,
        who: str,
        what: str,
    ) -> Response:
        code = ClusterAuthorizationFailedError.code
        self.metrics.error("cluster_authorization_failed")
        self.warnings.warning(
            "unauthorized",
            "refused %s from %s (principal %s): only a broker (its certificate or SASL "
            "login) may replicate (replication.require.authenticated.brokers)",
            what,
            client,
            who,
        )
        if isinstance(request, ReplicaFetchRequest):
            return encode_replica_fetch_response(
                [
                    ReplicaSet(f.topic, f.partition, code, -1, -1, (), 0, empty_region(0))
                    for f in request.fetches
                ]
            )
        return [
            encode_offsets_for_leader_epoch_response(
                [EpochEnd(q.topic, q.partition, code, -1, -1) for q in request.queries]
            )
        ]

    def batched_appends(self) -> _BatchedAppends:
        """Within this block, produces that get no answer are appended together at its end
        (or before the next request of another kind): one write per log per socket read."""
        return self._batched

    def flush_appends(self) -> None:
        """Append the deferred produces. A log that cannot write (a full disk) keeps none of
        its failed write, is counted, and StorageError is raised once the other logs are
        done: the produces got no answer, so the caller closes the connection to tell."""
        deferred, self._deferred = self._deferred, {}
        if self.replicas is not None:
            self.replicas.check_pause()  # a leader paused for long holds back its logs
        failed: list[LogbrokerError] = []
        for target, sets in deferred.items():
            try:
                messages, nbytes = target.append_many(sets)
            except NotLeaderForPartitionError as exc:  # its leadership ended meanwhile
                self.metrics.error("not_leader_for_partition", target.topic)
                failed.append(exc)
                continue
            except StorageError as exc:
                self.metrics.error("storage", target.topic)
                failed.append(exc)
                self.appended(target)  # a roll may have kept some
                continue
            # A waiting fetch is answered first: counting is not on its way.
            self.appended(target)
            self.metrics.produced(target.topic, messages, nbytes)
        if failed:
            more = f" (and {len(failed) - 1} more logs)" if len(failed) > 1 else ""
            raise type(failed[0])(f"{failed[0]}{more}")

    # -- produce ----------------------------------------------------------------------

    def _check_produce(
        self, req: ProduceRequest, validated: Validation | None = None
    ) -> tuple[int, Validation]:
        """The partition to append to and the set's validation; raises LogbrokerError
        (InvalidTopicError, WrongPartitionError, InvalidMessageError) naming what is wrong.

        Compressed wrappers are checked here only as far as their CRC (`check.compressed`
        counts them): inflating runs in a worker thread (`_inflate`), never on the loop."""
        partition = req.partition
        if self.logs.lookup(req.topic, partition) is None:  # an existing 0.7 log: no checks
            validate_topic(req.topic)
            if self._replicated(req.topic):
                partition = self._leader(req.topic, partition).partition
            else:
                if partition == RANDOM_PARTITION:
                    partition = self.logs.choose_partition(req.topic)
                self.logs.check_partition(req.topic, partition)
        check = validate(req.messages, inflate=False) if validated is None else validated
        return partition, self._checked(req, partition, check)

    def _replicated(self, topic: str) -> bool:
        """Whether `topic` is a replicated topic's (its partitions are not 0.7's)."""
        if self.replicas is not None:
            return self.replicas.is_replicated(topic)
        return topic in self.logs.replicated_topics()

    def _leader(self, topic: str, partition: int) -> Replica:
        """The replica of a replicated partition this broker leads (partition -1, a 0.7
        producer's "any": one it leads); else the refusal that says who does."""
        if self.replicas is None:
            raise LeaderNotAvailableError(f"{topic} is replicated and replication is not running")
        replica = self.replicas.leader(topic, partition)
        if replica.log.message_format is not FORMAT_07:
            raise WrongMessageFormatError(
                f"{topic} is a {replica.log.message_format.name}-format topic: the Kafka 0.8 "
                "listener (port.08) serves it, not the 0.7 port"
            )
        return replica

    @staticmethod
    def _checked(req: ProduceRequest, partition: int, check: Validation) -> Validation:
        if check.error is not None:
            error = check.error
            kind = type(error) if isinstance(error, InflatedSizeTooLargeError) else None
            raise (kind or InvalidMessageError)(f"produce to {req.topic}-{partition}: {error}")
        if check.valid_bytes == 0 and len(req.messages):
            raise InvalidMessageError(
                f"produce to {req.topic}-{partition}: the first entry of the "
                f"{len(req.messages)}-byte message set is incomplete"
            )
        return check

    def _too_large(self, req: ProduceRequest, partition: int, check: Validation) -> str | None:
        if check.largest_payload > self.config.max_message_size:
            return (
                f"a message of {check.largest_payload} bytes for {req.topic}-{partition} is over "
                f"max.message.size ({self.config.max_message_size})"
            )
        return None

    # -- inflating compressed sets, off the event loop --------------------------------

    async def _inflate(
        self, produces: Sequence[ProduceRequest], checks: list[_Check]
    ) -> list[_Check]:
        """`checks` with every set that holds compressed wrappers checked whole, in a
        worker thread: other connections are served meanwhile. One budget for the request:
        a set inflates to `max.inflated.set.size` at most, all of them together to
        `max.inflated.request.size`, and a wrapper holds plain messages only."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._inflater, self._inflate_all, produces, checks)

    def _inflate_all(
        self, produces: Sequence[ProduceRequest], checks: list[_Check]
    ) -> list[_Check]:
        budget = InflateBudget(
            self.config.inflated_set_limit,
            self.config.inflated_request_limit,
            PRODUCE_MAX_NESTING,
        )
        out: list[_Check] = []
        for req, (partition, check) in zip(produces, checks, strict=True):
            if isinstance(check, Validation) and check.compressed:
                try:
                    check = self._checked(req, partition, validate(req.messages, budget=budget))
                except LogbrokerError as exc:
                    check = exc
            out.append((partition, check))
        return out

    def close(self) -> None:
        """Stop the inflating workers (sets being inflated finish, bounded by the limits)."""
        self._inflater.shutdown(wait=False, cancel_futures=True)

    # -- produce ----------------------------------------------------------------------

    def _target(self, topic: str, partition: int) -> Target:
        """What a checked produce appends to: the 0.7 log, created if new, or the leader
        replica (refused if it stopped leading since the check)."""
        found = self.logs.lookup(topic, partition)
        if found is not None:
            return found
        if self._replicated(topic):
            return self._leader(topic, partition)
        return self.logs.get_or_create_log(topic, partition)

    def produce(self, req: ProduceRequest, client: str) -> Outcome:
        part_log = self.logs.lookup(req.topic, req.partition)
        if part_log is None:  # new, or a replicated partition
            self.metrics.request("produce")
            return self._produce_all((req,), client, "PRODUCE")
        # The usual produce, in a few steps (a one-message produce's latency is mostly
        # Python calls): an existing log needs no name checks, and a plain, valid set
        # within max.message.size is deferred as _defer would. Anything else: _produce_all,
        # with the set's validation done here.
        check = validate(req.messages, inflate=False)
        if (
            check.error is not None
            or not check.valid_bytes
            or check.compressed
            or check.largest_payload > self.config.max_message_size
        ):
            self.metrics.request("produce")
            return self._produce_all((req,), client, "PRODUCE", (check,))
        self._deferred.setdefault(part_log, []).append((req.messages, check))
        if not self._batching:
            try:
                self.flush_appends()  # a waiting consumer is answered in here
            finally:
                self.metrics.request("produce")  # counted after, off the answer's way
        else:
            self.metrics.request("produce")
        return None

    def produce_run(self, run: ProduceRun, client: str = "?", principal: str = ANONYMOUS) -> bool:
        """The PRODUCEs of a run (requests.produce_run: whole frames to one partition, each
        set valid and within max.message.size), deferred as `produce` defers each of them;
        only within `batched_appends`. False, with nothing done, if their log does not exist,
        this broker does not lead it or the principal may not write it: the caller then
        hands them to `handle` one by one."""
        part_log = self.logs.lookup(run.topic, run.partition)
        if part_log is None or not self._batching:
            return False
        if self.authorizer is not None and self._produce_refusal(
            run, client, principal, self.authorizer
        ):
            return False
        sets = run.sets
        self.metrics.request("produce", len(sets))
        deferred = self._deferred.get(part_log)
        if deferred is None:
            self._deferred[part_log] = sets
        else:
            deferred += sets
        return True

    def multiproduce(self, req: MultiProduceRequest, client: str) -> Outcome:
        self.metrics.request("multiproduce")
        return self._produce_all(req.produces, client, "MULTIPRODUCE")

    def _produce_all(
        self,
        produces: tuple[ProduceRequest, ...],
        client: str,
        kind: str,
        validated: tuple[Validation, ...] | None = None,
    ) -> Outcome:
        # Check every set before appending any, so a rejected request appends nothing.
        try:
            checked = [
                self._check_produce(p, v)
                for p, v in zip(produces, validated or (None,) * len(produces), strict=True)
            ]
        except LogbrokerError as exc:
            raise ProduceRejected(f"{kind} refused, nothing appended: {exc}") from exc
        for _, check in checked:
            if check.compressed:
                self.flush_appends()  # this connection's earlier produces go first
                return self._produce_inflated(produces, list(checked), client, kind)
        self._defer(produces, checked, client)
        if not self._batching:
            self.flush_appends()
        return None

    async def _produce_inflated(
        self, produces: tuple[ProduceRequest, ...], checks: list[_Check], client: str, kind: str
    ) -> Response:
        """A produce with compressed sets: inflated in a worker, then appended. It still
        gets no answer (an empty response); the connection reads its next request after."""
        inflated = await self._inflate(produces, checks)
        for _, check in inflated:
            if isinstance(check, LogbrokerError):
                raise ProduceRejected(f"{kind} refused, nothing appended: {check}") from check
        self._defer(produces, inflated, client)  # type: ignore[arg-type]
        self.flush_appends()
        return []

    def _defer(
        self,
        produces: Sequence[ProduceRequest],
        checked: Sequence[tuple[int, Validation]],
        client: str,
    ) -> None:
        for req, (partition, check) in zip(produces, checked, strict=True):
            too_large = self._too_large(req, partition, check)
            if too_large:
                self.metrics.error("message_too_large", req.topic)
                self.warnings.warning(
                    "message_too_large", "dropped a produce from %s: %s", client, too_large
                )
                continue
            if check.valid_bytes:
                target = self._target(req.topic, partition)
                self._deferred.setdefault(target, []).append((req.messages, check))

    def acked_produce(self, req: AckedProduceRequest, client: str) -> Outcome:
        self.metrics.request("produce_ack")
        checks = [self._try_check(p) for p in req.produces]
        if any(isinstance(c, Validation) and c.compressed for _, c in checks):
            return self._acked_inflated(req, checks, client)
        return self._acked_append(req, checks, client)

    def _try_check(self, p: ProduceRequest) -> _Check:
        try:
            if type(p) is _DeniedProduce:
                raise TopicAuthorizationFailedError(f"not authorized to Write to {p.topic}")
            partition, check = self._check_produce(p)
            too_large = self._too_large(p, partition, check)  # before inflating anything
            if too_large:
                raise MessageSizeTooLargeError(too_large)
            return partition, check
        except LogbrokerError as exc:
            return p.partition, exc

    async def _acked_inflated(
        self, req: AckedProduceRequest, checks: list[_Check], client: str
    ) -> Response:
        outcome = self._acked_append(req, await self._inflate(req.produces, checks), client)
        if outcome is None:  # never: an acked produce is always answered
            return []
        return await outcome if inspect.isawaitable(outcome) else outcome

    def _acked_append(self, req: AckedProduceRequest, checks: list[_Check], client: str) -> Outcome:
        if self.replicas is not None:
            self.replicas.check_pause()  # a leader paused for long holds back its logs
        results: list[ProduceResult] = []
        touched: dict[int, PartitionLog] = {}
        in_sync: list[tuple[int, Replica, int]] = []  # acks=-1: (result, replica, its end)
        for p, (partition, check) in zip(req.produces, checks, strict=True):
            try:
                if isinstance(check, LogbrokerError):
                    raise check
                target = self._target(p.topic, partition)
                replica = target if isinstance(target, Replica) else None
                if req.all_in_sync and replica is not None:
                    self.replicas.check_enough_replicas(replica)  # type: ignore[union-attr]
                offset, next_offset = target.append(p.messages, check)
                self.metrics.produced(p.topic, check.messages, check.valid_bytes)
                self.appended(target)
                part_log = target.log if isinstance(target, Replica) else target
                touched[id(part_log)] = part_log
                if req.all_in_sync and replica is not None and next_offset > replica.high_watermark:
                    in_sync.append((len(results), replica, next_offset))
                results.append(ProduceResult(p.topic, partition, 0, offset, next_offset))
            except LogbrokerError as exc:
                self.metrics.error(error_kind(exc), p.topic if is_legal_topic(p.topic) else None)
                self.warnings.warning(
                    "produce_ack_refused", "acked produce from %s refused: %s", client, exc
                )
                results.append(ProduceResult(p.topic, partition, error_code(exc), -1, -1))
        if in_sync:
            return self._after_in_sync(req, results, in_sync, list(touched.values()))
        response: Response = [encode_acked_produce_response(results)]
        if not req.fsync or not touched:
            return response
        return self._after_fsync(list(touched.values()), response)

    async def _after_fsync(self, logs: list[PartitionLog], response: Response) -> Response:
        for part_log in logs:
            await self._run_blocking(part_log.flush)
        return response

    async def _after_in_sync(
        self,
        req: AckedProduceRequest,
        results: list[ProduceResult],
        in_sync: list[tuple[int, Replica, int]],
        logs: list[PartitionLog],
    ) -> Response:
        """acks=-1: the answer once every in-sync replica has the sets (or why not)."""
        assert self.replicas is not None
        codes = await self.replicas.wait_for_isr(
            [(r, end) for _, r, end in in_sync], req.timeout_ms / 1000
        )
        for (index, replica, _), code in zip(in_sync, codes, strict=True):
            if code:
                failed = results[index]
                results[index] = failed._replace(error=code)
                self.metrics.error(error_kind(error_for_code(code)), replica.topic)
        if req.fsync:
            for part_log in logs:
                await self._run_blocking(part_log.flush)
        return [encode_acked_produce_response(results)]

    # -- replication ------------------------------------------------------------------

    def appended(self, target: Target) -> None:
        """Wake who waits for an append: a 0.7 log's consumers; a replicated log's followers,
        and its consumers only when the high watermark moved (with no follower in the ISR,
        it moves now: the replica manager's hook, `_high_watermark_moved`)."""
        if type(target) is Log:
            self.waiters.appended(target.topic, target.partition)
            return
        assert isinstance(target, Replica) and self.replicas is not None
        self.replica_waiters.appended(target.topic, target.partition)
        self.replicas.appended(target)

    def _high_watermark_moved(self, replica: Replica) -> None:
        """Consumers waiting on the partition see the newly committed messages (followers
        learn the high watermark with the data their next fetch brings)."""
        self.waiters.appended(replica.topic, replica.partition)

    def _replica_set(self, req: ReplicaFetchRequest, i: int) -> ReplicaSet[FileRegion]:
        fetch = req.fetches[i]
        try:
            if self.replicas is None:
                raise self._replica_refusal(fetch.topic, fetch.partition)
            answer = self.replicas.follower_fetch(req.replica_id, fetch)
        except LogbrokerError as exc:
            self.metrics.error(error_kind(exc), fetch.topic)
            return ReplicaSet(
                fetch.topic, fetch.partition, error_code(exc), -1, -1, (), 0, empty_region(0)
            )
        if answer.size:
            self.metrics.fetched(fetch.topic, answer.size)
        return answer

    def replica_fetch(self, req: ReplicaFetchRequest, client: str) -> Outcome:
        """A follower's fetch: held until the leader has something past its offset."""
        self.metrics.request("replica_fetch")
        sets = [self._replica_set(req, i) for i in range(len(req.fetches))]
        if (
            req.max_wait_ms == 0
            or not req.fetches
            or self.replica_waiters.closed
            or any(s.error or s.size for s in sets)
        ):
            return encode_replica_fetch_response(sets)

        def look(final: bool) -> Response | None:
            # Woken by an append: only the partitions whose log moved past the fetch (or whose
            # leadership ended) are read again; the others' sets stand, their high watermark
            # as it was (the follower takes the newer one with its next data). The timer's
            # last look reads them all again.
            if final:
                sets[:] = [self._replica_set(req, i) for i in range(len(req.fetches))]
                return encode_replica_fetch_response(sets)
            found = False
            for i, f in enumerate(req.fetches):
                replica = self.replicas.replica(f.topic, f.partition) if self.replicas else None
                if (
                    replica is None
                    or not replica.named_leader
                    or replica.log.end_offset != f.offset
                ):
                    sets[i] = again = self._replica_set(req, i)
                    found = found or bool(again.error or again.size)
            return encode_replica_fetch_response(sets) if found else None

        keys = [(f.topic, f.partition) for f in req.fetches]
        loop = asyncio.get_running_loop()
        return WaitingFetch(self.replica_waiters, keys, look, req.max_wait_ms / 1000, loop)

    def offsets_for_leader_epoch(self, req: OffsetsForLeaderEpochRequest, client: str) -> Response:
        """Where each asked epoch ends in this leader's log (replication/epochs.py)."""
        self.metrics.request("offsets_for_leader_epoch")
        answers = []
        for q in req.queries:
            try:
                if self.replicas is None:
                    raise self._replica_refusal(q.topic, q.partition)
                answers.append(self.replicas.epoch_end(q))
            except LogbrokerError as exc:
                answers.append(EpochEnd(q.topic, q.partition, error_code(exc), -1, -1))
        return [encode_offsets_for_leader_epoch_response(answers)]

    # -- fetch ------------------------------------------------------------------------

    def _fetch_set(self, req: FetchRequest, extension: bool) -> FetchedSet[FileRegion]:
        try:
            if req.max_size < 0:
                raise InvalidFetchSizeError(f"fetch size {req.max_size} is negative")
            if type(req) is _DeniedFetch:  # never with no authorizer
                raise TopicAuthorizationFailedError(f"not authorized to Read {req.topic}")
            # an existing log's name and partition need no checks (as for produces)
            part_log = self.logs.lookup(req.topic, req.partition)
            if part_log is not None:
                region = part_log.read(req.offset, req.max_size)
            else:
                validate_topic(req.topic)
                if self._replicated(req.topic):
                    # consumers read from the leader, what the whole ISR has (below the high
                    # watermark: docs/replication.md)
                    replica = self._leader(req.topic, req.partition)
                    region = replica.log.read(req.offset, req.max_size, replica.high_watermark)
                elif (found := self.logs.get_log(req.topic, req.partition)) is not None:
                    region = found.read(req.offset, req.max_size)
                else:
                    region = empty_region(req.offset)
        except LogbrokerError as exc:
            self.metrics.error(error_kind(exc), req.topic if is_legal_topic(req.topic) else None)
            code = error_code(exc)
            if not extension and (isinstance(exc, InvalidTopicError) or code > MAX_07_CODE):
                code = UnknownError.code  # 0.7 answered an illegal name with Unknown
            return FetchedSet(code, 0, empty_region(req.offset))
        if region.length:
            self.metrics.fetched(req.topic, region.length)
        return _new_tuple(FetchedSet, (0, region.length, region))  # no Python-level __new__

    def fetch(self, req: FetchRequest, client: str) -> Response:
        self.metrics.request("fetch")
        fetched = self._fetch_set(req, extension=False)
        header = encode_fetch_response_header(fetched.error, fetched.size)
        return [header, fetched.data] if fetched.size else [header]

    def multifetch(self, req: MultiFetchRequest, client: str) -> Response:
        self.metrics.request("multifetch")
        return encode_multifetch_response([self._fetch_set(f, False) for f in req.fetches])

    def waiting_fetch(self, req: WaitingFetchRequest, client: str) -> Outcome:
        self.metrics.request("fetch_wait")
        sets = [self._fetch_set(f, True) for f in req.fetches]
        # Nothing to wait for when nothing is asked: an empty FETCH_WAIT is answered at once,
        # and so is every fetch once the broker is stopping.
        if (
            req.max_wait_ms == 0
            or not req.fetches
            or self.waiters.closed
            or self._enough(sets, req.min_bytes)
        ):
            return encode_multifetch_response(sets)

        fetches, min_bytes = req.fetches, req.min_bytes
        only = fetches[0] if len(fetches) == 1 else None

        def look(final: bool) -> Response | None:
            # Called from inside the append that woke it: on the answer's way.
            if only:
                one = self._fetch_set(only, True)
                if final or one.error or one.size >= max(1, min_bytes):  # _enough, for one
                    return encode_multifetch_response([one])
                return None
            sets = [self._fetch_set(f, True) for f in fetches]
            if final or self._enough(sets, min_bytes):
                return encode_multifetch_response(sets)
            return None

        keys = [(f.topic, f.partition) for f in req.fetches]
        loop = asyncio.get_running_loop()  # not kept: handlers may outlive a loop (tests)
        return WaitingFetch(self.waiters, keys, look, req.max_wait_ms / 1000, loop)

    @staticmethod
    def _enough(sets: list[FetchedSet[FileRegion]], min_bytes: int) -> bool:
        total = 0
        for s in sets:
            if s.error:
                return True
            total += s.size
        return total >= max(1, min_bytes)

    # -- offsets and metadata ---------------------------------------------------------

    def _replica_refusal(self, topic: str, partition: int) -> LogbrokerError:
        if self.replicas is None:
            return LeaderNotAvailableError(f"{topic} is replicated and replication is not running")
        return self.replicas.refusal(topic, partition)

    def offsets(self, req: OffsetsRequest, client: str) -> Response:
        self.metrics.request("offsets")
        validate_topic(req.topic)  # 0.7 did not catch these: the connection closes
        if self.logs.lookup(req.topic, req.partition) is None and self._replicated(req.topic):
            replica = self._leader(req.topic, req.partition)  # the leader answers
            offsets = replica.log.offsets_before(req.time, req.max_offsets)
            mark = replica.high_watermark  # nothing past it
            offsets = sorted({min(o, mark) for o in offsets}, reverse=True)
            return [encode_offsets_response(offsets)]
        part_log = self.logs.get_log(req.topic, req.partition)
        if part_log is None:
            offsets = [0] if req.time in (LATEST_TIME, EARLIEST_TIME) else []
            offsets = offsets[: max(0, req.max_offsets)]
        else:
            offsets = part_log.offsets_before(req.time, req.max_offsets)
        return [encode_offsets_response(offsets)]

    def create_topic(self, req: CreateTopicRequest, client: str) -> Response:
        self.metrics.request("create_topic")
        try:
            if self._replicated(req.topic):
                raise WrongPartitionError(
                    f"topic {req.topic!r} is replicated: its partitions are assigned in "
                    "ZooKeeper (logbroker topics create --replication-factor), not per broker"
                )
            self.logs.create_topic(req.topic, req.partitions)
        except LogbrokerError as exc:
            self.metrics.error(error_kind(exc))
            self.warnings.warning(
                "create_topic_refused", "create topic from %s refused: %s", client, exc
            )
            # The reason names this broker's own limit (max.partitions.per.topic)
            return [encode_refusal(error_code(exc), str(exc))]
        log.info("%s created topic %s with %d partitions", client, req.topic, req.partitions)
        return self.metadata(MetadataRequest((req.topic,)), client)

    def metadata(
        self, req: MetadataRequest, client: str, denied: TopicCheck = no_check
    ) -> Response:
        """`denied`: the authorizer's Describe check (a topic refused: code 29; the list of
        all topics leaves it out, as Kafka's does)."""
        self.metrics.request("metadata")
        topics = req.topics or tuple(t for t in self.logs.topics() if denied(t) is None)
        answer = []
        for topic in topics:
            try:
                validate_topic(topic)
                refusal = denied(topic)
                if refusal is not None:
                    raise refusal
            except (InvalidTopicError, AuthorizationError) as exc:
                answer.append(TopicMetadata(topic, error_code(exc), ()))
                continue
            partitions = []
            if self.replicas is not None and self.replicas.is_replicated(topic):
                for replica in sorted(self.replicas.replicas(), key=lambda r: r.partition):
                    if replica.topic == topic:
                        partitions.append(
                            PartitionMetadata(
                                replica.partition,
                                replica.log.start_offset,
                                replica.high_watermark,  # what consumers can read
                                replica.log.size_in_bytes,
                            )
                        )
            elif topic in self.logs.topics():
                for partition in range(self.logs.partition_count(topic)):
                    part_log = self.logs.get_log(topic, partition)
                    if part_log is None:
                        partitions.append(PartitionMetadata(partition, 0, 0, 0))
                    else:
                        partitions.append(
                            PartitionMetadata(
                                partition,
                                part_log.start_offset,
                                part_log.end_offset,
                                part_log.size_in_bytes,
                            )
                        )
            answer.append(TopicMetadata(topic, 0, tuple(partitions)))
        return [encode_metadata_response(self.config.brokerid, answer)]


async def _in_thread(fn: Callable[[], None]) -> None:
    await asyncio.get_running_loop().run_in_executor(None, fn)


class _BatchedAppends:
    """RequestHandlers.batched_appends' block (a plain class: entered on every socket read)."""

    __slots__ = ("_handlers",)

    def __init__(self, handlers: RequestHandlers) -> None:
        self._handlers = handlers

    def __enter__(self) -> None:
        self._handlers._batching = True

    def __exit__(self, *exc: object) -> None:
        self._handlers._batching = False
        self._handlers.flush_appends()
