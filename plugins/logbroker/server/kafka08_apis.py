"""What the broker does for each request on its Kafka 0.8 listener (0.8.2's `KafkaApis`).

    key  API                  answered with
    0    Produce v0           appended to the partitions this broker leads; acks 0: no answer;
                              1: once the leader appended; -1: once the ISR holds it (7 after
                              the request's timeout, 19 and 20 for too few in-sync replicas)
    1    Fetch v0             bytes below the high watermark, from the entry that holds the
                              offset; held up to max_wait_time for min_bytes (replication's
                              waiters wake it when the high watermark moves)
    2    Offsets v0           -1: the high watermark; -2: the log's start; a time: the starts
                              of the segments last written before it, newest first (0.8's)
    3    Metadata v0          the live brokers' 0.8 listeners; every 0.8-format topic asked
                              for (all of them for an empty list), its partitions' leaders,
                              replicas and ISRs (replication/metadata_cache.py)
    8    OffsetCommit v0, v1  a group's offsets, kept in ZooKeeper (group_offsets.py)
    9    OffsetFetch v0, v1   read back from there (-1 where none was committed)
    10   ConsumerMetadata v0  this broker: any broker serves any group's offsets

Only 0.8-format topics are served here; a 0.7-format topic's name is answered
UnknownTopicOrPartition (3), and the 0.7 port answers the same for 0.8-format topics
(docs/protocol.md, "Message formats"). Errors are 0.8's codes (protocol/kafka08/errors.py).
Replicated partitions go through the ReplicaManager, as on the 0.7 port; the appends it makes
wake the followers and, once the high watermark moves, the fetches waiting here.

With an authorizer (`authorizer.class.name`), `handle` gives each handler the check its
request needs (server/authorization.py: Write for Produce, Read for Fetch, Describe for
Offsets and Metadata, Read on the group and the topics for OffsetCommit and OffsetFetch): a
refused topic's partitions are answered 29 (TopicAuthorizationFailed) or, for a refused
group, 30, and nothing of them is stored; a list of all topics leaves out those the principal
may not Describe. Without one, the check allows everything (`no_check`).

A handler returns the answer as parts (bytes, and file regions the connection sends with
sendfile), None for a Produce with acks 0, an awaitable of parts (acks=-1, the ZooKeeper
calls of the offset APIs, run in a thread), or a WaitingFetch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Union

from ..config import BrokerConfig
from ..coordination.replication_state import NO_LEADER
from ..protocol.errors import (
    InvalidFetchSizeError,
    InvalidTopicError,
    LogbrokerError,
    MessageSizeTooLargeError,
    WrongMessageFormatError,
    WrongPartitionError,
    error_for_code,
)
from ..protocol.kafka08 import fetch as fetch08
from ..protocol.kafka08 import group_offsets as groups08
from ..protocol.kafka08 import metadata as metadata08
from ..protocol.kafka08 import offsets as offsets08
from ..protocol.kafka08 import produce as produce08
from ..protocol.kafka08.apis import Request, encode_response_parts
from ..protocol.kafka08.errors import Code, code08
from ..protocol.kafka08.header import ApiKey
from ..protocol.kafka08.message_set import Validation
from ..protocol.kafka08.message_set import validate as validate08
from ..protocol.message_formats import FORMAT_08
from ..protocol.message_set import InflateBudget
from ..protocol.requests import EARLIEST_TIME, LATEST_TIME
from ..protocol.topics import validate_topic
from ..protocol.wire import Buffer
from ..replication.metadata_cache import MetadataCache
from ..replication.replicas import Replica, ReplicaManager
from ..security.acls import ANONYMOUS, Operation
from ..storage.segment import FileRegion, empty_region
from .authorization import RequestAuthorizer, TopicCheck, no_check
from .group_offsets import GroupOffsets
from .log_limiter import RateLimitedLog
from .metrics import BrokerMetrics, error_kind
from .waiters import AppendWaiters, WaitingFetch

log = logging.getLogger(__name__)

Part = Union[bytes, FileRegion]  # noqa: UP007 - a runtime alias
Response = list[Part]
Outcome = Response | Awaitable[Response] | WaitingFetch[Response] | None


class Kafka08Apis:
    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        offsets: GroupOffsets,
        metrics: BrokerMetrics,
        waiters: AppendWaiters,
        appended: Callable[[Replica], None],
        advertised: tuple[str, int],
        warnings: RateLimitedLog | None = None,
    ) -> None:
        """`waiters`: the consumers' waits, shared with the 0.7 port's handlers (they are
        woken when a high watermark moves); `appended(replica)`: what follows an append
        (RequestHandlers.appended: followers woken, the high watermark moved when it can);
        `advertised`: this broker's own 0.8 listener (host, port)."""
        self.config = config
        self.replicas = replicas
        self.metadata_cache = metadata
        self.group_offsets = offsets
        self.metrics = metrics
        self.waiters = waiters
        self._appended = appended
        self.advertised = advertised
        self.warnings = warnings or RateLimitedLog(log, config.connection_log_interval_ms / 1000)
        # None: no authorizer, anyone may do anything (the broker sets it when configured)
        self.authorizer: RequestAuthorizer | None = None
        self._dispatch: dict[int, Callable[[Request, str, TopicCheck], Outcome]] = {
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.OFFSETS: self.offsets,
            ApiKey.METADATA: self.metadata,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.CONSUMER_METADATA: self.consumer_metadata,
        }

    def handle(self, request: Request, client: str, principal: str = ANONYMOUS) -> Outcome:
        self.metrics.request(f"kafka08_{request.api.name.lower()}")
        key = request.header.api_key
        check: TopicCheck = no_check
        if self.authorizer is not None:
            check = self._check(request, client, principal, self.authorizer)
        return self._dispatch[key](request, client, check)

    def _check(
        self, request: Request, client: str, principal: str, auth: RequestAuthorizer
    ) -> TopicCheck:
        """What `principal` may not do to each topic of `request` (module doc)."""
        key = request.header.api_key
        if key == ApiKey.PRODUCE:
            return auth.topics(client, principal, Operation.WRITE)
        if key == ApiKey.FETCH:
            return auth.topics(client, principal, Operation.READ)
        if key in (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH):
            # decided here, on the loop's thread (the offsets are read and written in another)
            refused = auth.group(client, principal, Operation.READ, request.body.group)
            names = [t.topic for t in request.body.topics]
            refusals = {
                n: refused or auth.topic(client, principal, Operation.READ, n) for n in names
            }
            return lambda name: refusals.get(name)
        if key in (ApiKey.OFFSETS, ApiKey.METADATA):
            return auth.topics(client, principal, Operation.DESCRIBE)
        return no_check

    def _answer(self, request: Request, body: Any) -> Response:
        return encode_response_parts(request.api, request.header.correlation_id, body)  # type: ignore[return-value]

    # -- which partitions are served here ---------------------------------------------

    def _leader(self, topic: str, partition: int) -> Replica:
        """The replica of a 0.8-format topic's partition that this broker leads, or the
        error to answer with (UnknownTopicOrPartition for a topic of the other format)."""
        validate_topic(topic)  # InvalidTopic, 17
        if partition < 0:
            raise WrongPartitionError(f"partition {partition} of {topic} does not exist")
        if not self.replicas.is_replicated(topic):
            raise WrongPartitionError(f"no 0.8-format topic {topic!r} in this cluster")
        replica = self.replicas.leader(topic, partition)
        if replica.log.message_format is not FORMAT_08:
            raise WrongMessageFormatError(
                f"{topic} is a 0.7-format topic: the 0.7 port serves it, not the 0.8 listener"
            )
        return replica

    # -- produce ------------------------------------------------------------------------

    def produce(self, request: Request, client: str, denied: TopicCheck = no_check) -> Outcome:
        body: produce08.ProduceRequest = request.body
        self.replicas.check_pause()  # a leader paused for long holds back its writes
        budget = InflateBudget(
            self.config.inflated_set_limit, self.config.inflated_request_limit, 1
        )
        results: list[tuple[str, produce08.ProduceResult]] = []
        pending: list[tuple[int, Replica, int]] = []  # acks=-1: (result, replica, its end)
        for topic in body.topics:
            refusal = denied(topic.topic)
            for p in topic.partitions:
                try:
                    if refusal is not None:
                        raise refusal
                    replica = self._leader(topic.topic, p.partition)
                    check = self._checked(topic.topic, p, budget)
                    if body.required_acks == -1:
                        self.replicas.check_enough_replicas(replica)
                    first, end = replica.append(p.messages, check)
                    self._appended(replica)
                    self.metrics.produced(topic.topic, end - first, check.valid_bytes)
                    if body.required_acks == -1 and end > replica.high_watermark:
                        pending.append((len(results), replica, end))
                    results.append((topic.topic, produce08.ProduceResult(p.partition, 0, first)))
                except LogbrokerError as exc:
                    self._refused("produce", topic.topic, client, exc)
                    results.append(
                        (topic.topic, produce08.ProduceResult(p.partition, code08(exc), -1))
                    )
        if body.required_acks == 0:
            return None  # 0.8 sends nothing back: a failure shows only in the broker's log
        if pending:
            return self._after_isr(request, results, pending, body.timeout_ms / 1000)
        return self._answer(request, _produce_response(results))

    def _checked(
        self, topic: str, p: produce08.ProducePartition, budget: InflateBudget
    ) -> Validation:
        """A produced set's validation; its damage, or an entry over max.message.size,
        raised as the error to answer with."""
        check = validate08(p.messages, budget=budget)
        if check.error is not None:
            raise check.error
        if check.largest_entry > self.config.max_message_size:
            raise MessageSizeTooLargeError(
                f"an entry of {check.largest_entry} bytes for {topic}-{p.partition} is over "
                f"max.message.size ({self.config.max_message_size})"
            )
        return check

    def produce_unanswered(
        self, requests: list[Request], client: str, principal: str = ANONYMOUS
    ) -> None:
        """Produce requests with required_acks 0 that came in a row on one connection
        (Kafka08Connection gathers them): each set checked and refused as `produce` does,
        and each partition's sets appended in order by one `append_many` (the log's next
        offsets per set, as `append` gives them, but one write per segment for all of them
        instead of two per set). Nothing is answered, as for one such request."""
        self.replicas.check_pause()
        denied: TopicCheck = no_check
        if self.authorizer is not None:
            denied = self.authorizer.topics(client, principal, Operation.WRITE)
        batches: dict[tuple[str, int], tuple[Replica, list[tuple[Buffer, Validation]]]] = {}
        for request in requests:
            self.metrics.request("kafka08_produce")
            body: produce08.ProduceRequest = request.body
            budget = InflateBudget(
                self.config.inflated_set_limit, self.config.inflated_request_limit, 1
            )
            for topic in body.topics:
                refusal = denied(topic.topic)
                for p in topic.partitions:
                    try:
                        if refusal is not None:
                            raise refusal
                        replica = self._leader(topic.topic, p.partition)
                        check = self._checked(topic.topic, p, budget)
                        if not check.valid_bytes:  # empty, or a cut first entry: refused alone
                            replica.append(p.messages, check)
                            continue
                        key = (topic.topic, p.partition)
                        batches.setdefault(key, (replica, []))[1].append((p.messages, check))
                    except LogbrokerError as exc:
                        self._refused("produce", topic.topic, client, exc)
        for (topic_name, _), (replica, sets) in batches.items():
            try:
                messages, nbytes = replica.append_many(sets)
            except LogbrokerError as exc:
                self._refused("produce", topic_name, client, exc)
                continue
            self._appended(replica)
            self.metrics.produced(topic_name, messages, nbytes)

    async def _after_isr(
        self,
        request: Request,
        results: list[tuple[str, produce08.ProduceResult]],
        pending: list[tuple[int, Replica, int]],
        timeout_s: float,
    ) -> Response:
        codes = await self.replicas.wait_for_isr([(r, end) for _, r, end in pending], timeout_s)
        for (index, _, _), code in zip(pending, codes, strict=True):
            if code:
                topic, result = results[index]
                results[index] = (topic, result._replace(error_code=code08(error_for_code(code))))
        return self._answer(request, _produce_response(results))

    # -- fetch ----------------------------------------------------------------------------

    def _fetched(
        self, topic: str, p: fetch08.FetchPartition, denied: TopicCheck = no_check
    ) -> fetch08.FetchedPartition:
        try:
            refusal = denied(topic)
            if refusal is not None:
                raise refusal
            if p.max_bytes < 0:
                raise InvalidFetchSizeError(f"max_bytes {p.max_bytes} is negative")
            replica = self._leader(topic, p.partition)
            mark = replica.high_watermark
            region = replica.log.read(p.fetch_offset, p.max_bytes, mark)
        except LogbrokerError as exc:
            self.metrics.error(error_kind(exc), topic if _legal(topic) else None)
            return fetch08.FetchedPartition(p.partition, code08(exc), -1, empty_region(0))
        if region.length:
            self.metrics.fetched(topic, region.length)
        return fetch08.FetchedPartition(p.partition, 0, mark, region)

    def fetch(self, request: Request, client: str, denied: TopicCheck = no_check) -> Outcome:
        body: fetch08.FetchRequest = request.body
        if body.replica_id >= 0:
            # 0.8's followers fetch this way; logbroker's copy through REPLICA_FETCH on the
            # 0.7 port (docs/replication.md): a broker id here is a client's mistake
            raise LogbrokerError(
                f"a Fetch with replica id {body.replica_id} (a follower's): replicas copy "
                "through the 0.7 port's REPLICA_FETCH; clients send -1"
            )
        wanted = [(t.topic, p) for t in body.topics for p in t.partitions]
        fetched = [self._fetched(topic, p, denied) for topic, p in wanted]
        if (
            body.max_wait_ms <= 0
            or not wanted
            or self.waiters.closed
            or _enough(fetched, body.min_bytes)
        ):
            return self._answer(request, _fetch_response(wanted, fetched))

        def look(final: bool) -> Response | None:
            again = [self._fetched(topic, p, denied) for topic, p in wanted]
            if final or _enough(again, body.min_bytes):
                return self._answer(request, _fetch_response(wanted, again))
            return None

        keys = [(topic, p.partition) for topic, p in wanted]
        loop = asyncio.get_running_loop()
        return WaitingFetch(self.waiters, keys, look, body.max_wait_ms / 1000, loop)

    # -- offsets and metadata ---------------------------------------------------------------

    def offsets(self, request: Request, client: str, denied: TopicCheck = no_check) -> Response:
        body: offsets08.OffsetsRequest = request.body
        topics = []
        for topic in body.topics:
            answers = []
            refusal = denied(topic.topic)
            for p in topic.partitions:
                try:
                    if refusal is not None:
                        raise refusal
                    replica = self._leader(topic.topic, p.partition)
                    mark = replica.high_watermark  # a consumer sees nothing past it
                    if p.time == LATEST_TIME:
                        found = [mark]
                    elif p.time == EARLIEST_TIME:
                        found = [replica.log.start_offset]
                    else:
                        before = replica.log.offsets_before(p.time, p.max_offsets)
                        found = sorted({min(o, mark) for o in before}, reverse=True)
                    answers.append(
                        offsets08.PartitionOffsets(p.partition, 0, tuple(found[: p.max_offsets]))
                    )
                except LogbrokerError as exc:
                    self._refused("offsets", topic.topic, client, exc)
                    answers.append(offsets08.PartitionOffsets(p.partition, code08(exc), ()))
            topics.append(offsets08.OffsetsResponseTopic(topic.topic, tuple(answers)))
        return self._answer(request, offsets08.OffsetsResponse(tuple(topics)))

    def metadata(self, request: Request, client: str, denied: TopicCheck = no_check) -> Response:
        body: metadata08.MetadataRequest = request.body
        cache = self.metadata_cache
        brokers = tuple(metadata08.Broker(b.broker_id, b.host, b.port) for b in cache.brokers())
        served = {b.node_id for b in brokers}
        names = body.topics or tuple(
            t
            for t in cache.topics()
            if (view := cache.topic(t))
            and view.assignment.message_format == "0.8"
            and denied(t) is None  # all topics: those the principal may Describe
        )
        topics = []
        for name in names:
            view = cache.topic(name)
            if not _legal(name):
                topics.append(metadata08.TopicMetadata(int(Code.INVALID_TOPIC), name, ()))
            elif (refusal := denied(name)) is not None:
                topics.append(metadata08.TopicMetadata(int(code08(refusal)), name, ()))
            elif view is None or view.assignment.message_format != "0.8":
                topics.append(
                    metadata08.TopicMetadata(int(Code.UNKNOWN_TOPIC_OR_PARTITION), name, ())
                )
            else:
                partitions = []
                for p, replicas in enumerate(view.assignment.replicas):
                    state = view.states[p]
                    leader = state.leader if state is not None else NO_LEADER
                    isr = state.isr if state is not None else ()
                    error = 0
                    if leader == NO_LEADER or leader not in served:
                        error = int(Code.LEADER_NOT_AVAILABLE)
                    elif any(r not in served for r in replicas):
                        error = int(Code.REPLICA_NOT_AVAILABLE)  # 0.8's, for a dead replica
                    partitions.append(
                        metadata08.PartitionMetadata(error, p, leader, tuple(replicas), tuple(isr))
                    )
                topics.append(metadata08.TopicMetadata(0, name, tuple(partitions)))
        return self._answer(request, metadata08.MetadataResponse(brokers, tuple(topics)))

    # -- a group's offsets ----------------------------------------------------------------

    def consumer_metadata(
        self, request: Request, client: str, denied: TopicCheck = no_check
    ) -> Response:
        host, port = self.advertised
        answer = groups08.ConsumerMetadataResponse(0, self.config.brokerid, host, port)
        return self._answer(request, answer)

    def offset_commit(
        self, request: Request, client: str, denied: TopicCheck = no_check
    ) -> Awaitable[Response]:
        body = request.body  # v0 or v1: the same topics, partitions and offsets
        return self._in_thread(lambda: self._commit(request, body, client, denied))

    def _commit(self, request: Request, body: Any, client: str, denied: TopicCheck) -> Response:
        topics = []
        for topic in body.topics:
            results = []
            try:
                validate_topic(topic.topic)
                refusal = denied(topic.topic)
                if refusal is not None:
                    raise refusal
                self.group_offsets.commit(
                    body.group, [(topic.topic, p.partition, p.offset) for p in topic.partitions]
                )
                code = 0
            except (LogbrokerError, ValueError) as exc:
                self._refused("offset_commit", topic.topic, client, exc)
                code = int(code08(exc)) if isinstance(exc, LogbrokerError) else int(Code.UNKNOWN)
            for p in topic.partitions:
                results.append(groups08.CommitResult(p.partition, code))
            topics.append(groups08.CommitResponseTopic(topic.topic, tuple(results)))
        return self._answer(request, groups08.OffsetCommitResponse(tuple(topics)))

    def offset_fetch(
        self, request: Request, client: str, denied: TopicCheck = no_check
    ) -> Awaitable[Response]:
        body: groups08.OffsetFetchRequest = request.body
        return self._in_thread(lambda: self._fetch_offsets(request, body, client, denied))

    def _fetch_offsets(
        self,
        request: Request,
        body: groups08.OffsetFetchRequest,
        client: str,
        denied: TopicCheck,
    ) -> Response:
        topics = []
        for topic in body.topics:
            try:
                validate_topic(topic.topic)
                refusal = denied(topic.topic)
                if refusal is not None:
                    raise refusal
                found = self.group_offsets.fetch(
                    body.group, [(topic.topic, p) for p in topic.partitions]
                )
                answers = [
                    groups08.FetchedOffset(p, offset, "", 0)
                    for p, offset in zip(topic.partitions, found, strict=True)
                ]
            except (LogbrokerError, ValueError) as exc:
                self._refused("offset_fetch", topic.topic, client, exc)
                code = int(code08(exc)) if isinstance(exc, LogbrokerError) else int(Code.UNKNOWN)
                answers = [groups08.FetchedOffset(p, -1, "", code) for p in topic.partitions]
            topics.append(groups08.OffsetFetchResponseTopic(topic.topic, tuple(answers)))
        return self._answer(request, groups08.OffsetFetchResponse(tuple(topics)))

    async def _in_thread(self, work: Callable[[], Response]) -> Response:
        return await asyncio.get_running_loop().run_in_executor(None, work)

    def _refused(self, what: str, topic: str, client: str, exc: BaseException) -> None:
        self.metrics.error(error_kind(exc), topic if _legal(topic) else None)
        self.warnings.warning(
            f"kafka08_{what}_refused", "0.8 %s from %s refused: %s", what, client, exc
        )


def _produce_response(
    results: list[tuple[str, produce08.ProduceResult]],
) -> produce08.ProduceResponse:
    topics: dict[str, list[produce08.ProduceResult]] = {}
    for topic, result in results:
        topics.setdefault(topic, []).append(result)
    return produce08.ProduceResponse(
        tuple(produce08.ProduceResponseTopic(t, tuple(r)) for t, r in topics.items())
    )


def _fetch_response(
    wanted: list[tuple[str, fetch08.FetchPartition]], fetched: list[fetch08.FetchedPartition]
) -> fetch08.FetchResponse:
    topics: dict[str, list[fetch08.FetchedPartition]] = {}
    for (topic, _), answer in zip(wanted, fetched, strict=True):
        topics.setdefault(topic, []).append(answer)
    return fetch08.FetchResponse(
        tuple(fetch08.FetchResponseTopic(t, tuple(p)) for t, p in topics.items())
    )


def _enough(fetched: list[fetch08.FetchedPartition], min_bytes: int) -> bool:
    total = 0
    for answer in fetched:
        if answer.error_code:
            return True
        total += answer.messages.length
    return total >= max(1, min_bytes)


def _legal(topic: str) -> bool:
    try:
        validate_topic(topic)
    except InvalidTopicError:
        return False
    return True
