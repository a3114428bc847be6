"""The replication requests between brokers (docs/replication.md), values and codec.

Two request types above 0.7's, sent by a follower to its partition's leader (all integers
big-endian, signed; Topic := int16 N | N bytes of UTF-8, as in requests.py):

    type  name                      Body
    9     REPLICA_FETCH             int32 replica id | int32 max wait ms | int32 min bytes
                                      | int16 count | ReplicaFetch × count
    10    OFFSETS_FOR_LEADER_EPOCH  int16 count | EpochQuery × count

    ReplicaFetch := Topic | int32 partition | int64 fetch offset | int32 max bytes
                      | int32 leader epoch (the follower's view of the leader's epoch)
    EpochQuery   := Topic | int32 partition | int32 epoch

Responses (after the int32 size; error 0 from a healthy leader, as for the extensions):

    REPLICA_FETCH             int16 error (0) | int16 count | ReplicaSet × count, request order
    ReplicaSet := Topic | int32 partition | int16 error | int64 high watermark | int64 log end
                    | int16 epoch count | (int32 epoch | int64 start offset) × epoch count
                    | int32 messages | int32 data size N | N bytes of log data (verbatim)
    OFFSETS_FOR_LEADER_EPOCH  int16 error (0) | int16 count | EpochEnd × count
    EpochEnd   := Topic | int32 partition | int16 error | int32 epoch | int64 end offset

A ReplicaSet's epochs are the leader's epochs that start at or after the fetch offset, so a
follower records, before appending, which epoch wrote which of the bytes it copies (epochs.py).
`messages` >= 0 says that the data is whole messages, that many (as the leader's appends
counted them, through compression: Log.read_whole): a follower appends it as it comes, with no
per-message work. -1 says that the leader did not count them (the follower is further behind
than the leader remembers its appends): the last message may be cut off, and the follower
finds where the whole ones end. The high watermark is the leader's: the end of what every
in-sync replica holds.
An EpochEnd answers "where does epoch e end in the leader's log": the largest epoch the
leader has that is not above e, and the start of the epoch after it (or the leader's log end
for its current epoch); epoch -1 and end -1 when the leader has no epoch that old.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Generic, NamedTuple, TypeVar

from .errors import InvalidRequestError, LogbrokerError, error_for_code
from .topics import validate_topic
from .wire import (
    INT16,
    INT16_MAX,
    INT32,
    INT32_MAX,
    INT64,
    INT64_MAX,
    INT64_MIN,
    Buffer,
    Reader,
    byte_view,
    check_int,
    encode_string,
)

REPLICA_FETCH = 9
OFFSETS_FOR_LEADER_EPOCH = 10

# A follower fetches every partition it copies from a leader in one request, and the leader
# answers each of them, data or not: these are per partition and per fetch, so they go as a
# few packs and unpacks of fixed groups of fields (the checks of ranges stay).
_FETCH = struct.Struct(">iqii")  # ReplicaFetch after its topic
_SET_HEAD = struct.Struct(">ihqqh")  # ReplicaSet after its topic, up to its epoch count
_EPOCH = struct.Struct(">iq")
_SET_SIZES = struct.Struct(">ii")  # messages, data size
_SET_HEAD_FIELDS = struct.Struct(">ihqq")  # _SET_HEAD without the count (read by Reader.count)

T = TypeVar("T")


class MalformedReplicaResponseError(LogbrokerError):
    """A replication response that does not decode; the message names the field and byte."""


class ReplicaFetch(NamedTuple):
    topic: str
    partition: int
    offset: int  # the follower's log end: the leader learns the follower's progress from it
    max_bytes: int
    leader_epoch: int  # the leader epoch the follower follows


class ReplicaFetchRequest(NamedTuple):
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    fetches: tuple[ReplicaFetch, ...]

    @property
    def request_type(self) -> int:
        return REPLICA_FETCH


class EpochQuery(NamedTuple):
    topic: str
    partition: int
    epoch: int


class OffsetsForLeaderEpochRequest(NamedTuple):
    queries: tuple[EpochQuery, ...]

    @property
    def request_type(self) -> int:
        return OFFSETS_FOR_LEADER_EPOCH


class ReplicaSet(NamedTuple, Generic[T]):
    """One partition's part of a REPLICA_FETCH response; `data` is bytes or a file region."""

    topic: str
    partition: int
    error: int
    high_watermark: int
    log_end: int
    epochs: tuple[tuple[int, int], ...]  # (epoch, start offset), increasing
    size: int
    data: T
    messages: int = -1  # whole messages in data; -1: not counted, the last may be cut off


class EpochEnd(NamedTuple):
    topic: str
    partition: int
    error: int
    epoch: int
    end_offset: int


# -- requests ------------------------------------------------------------------------------


def encode_replication_request(req: ReplicaFetchRequest | OffsetsForLeaderEpochRequest) -> bytes:
    """The whole frame: int32 size | int16 type | body."""
    parts = [INT16.pack(req.request_type)]
    if isinstance(req, ReplicaFetchRequest):
        parts.append(INT32.pack(check_int(req.replica_id, 0, INT32_MAX, "replica id")))
        parts.append(INT32.pack(check_int(req.max_wait_ms, 0, INT32_MAX, "max wait ms")))
        parts.append(INT32.pack(check_int(req.min_bytes, 0, INT32_MAX, "min bytes")))
        parts.append(INT16.pack(check_int(len(req.fetches), 0, INT16_MAX, "fetches")))
        for f in req.fetches:
            parts.append(_topic_bytes(f.topic))
            parts.append(
                _FETCH.pack(
                    check_int(f.partition, 0, INT32_MAX, "partition"),
                    check_int(f.offset, 0, INT64_MAX, "offset"),
                    check_int(f.max_bytes, 0, INT32_MAX, "max bytes"),
                    check_int(f.leader_epoch, -1, INT32_MAX, "leader epoch"),
                )
            )
    else:
        parts.append(INT16.pack(check_int(len(req.queries), 0, INT16_MAX, "queries")))
        for q in req.queries:
            parts.append(encode_string(validate_topic(q.topic)))
            parts.append(INT32.pack(check_int(q.partition, 0, INT32_MAX, "partition")))
            parts.append(INT32.pack(check_int(q.epoch, -1, INT32_MAX, "epoch")))
    body = b"".join(parts)
    return INT32.pack(len(body)) + body


def decode_replication_request(
    kind: int, reader: Reader
) -> ReplicaFetchRequest | OffsetsForLeaderEpochRequest:
    """The body after the int16 type (requests.decode_request hands these types here)."""
    if kind == REPLICA_FETCH:
        replica_id = reader.non_negative_int32("replica id")
        max_wait_ms = reader.non_negative_int32("max wait ms")
        min_bytes = reader.non_negative_int32("min bytes")
        fetches = []
        for _ in range(reader.count("fetches", 2 + _FETCH.size)):
            topic = _topic(reader)
            pos = reader.pos
            partition, offset, max_bytes, epoch = reader.unpack(
                _FETCH, "partition, offset, max bytes, leader epoch"
            )
            for value, what, at in (
                (partition, "partition", pos),
                (offset, "offset", pos + 4),
                (max_bytes, "max bytes", pos + 12),
            ):
                if value < 0:
                    reader.fail(f"{what} {value} at byte {at} is negative")
            fetches.append(ReplicaFetch(topic, partition, offset, max_bytes, epoch))
        return ReplicaFetchRequest(replica_id, max_wait_ms, min_bytes, tuple(fetches))
    queries = []
    for _ in range(reader.count("queries", 2 + 4 + 4)):
        topic = _topic(reader)
        queries.append(
            EpochQuery(topic, reader.non_negative_int32("partition"), reader.int32("epoch"))
        )
    return OffsetsForLeaderEpochRequest(tuple(queries))


def _topic(reader: Reader) -> str:
    pos = reader.pos
    topic = reader.string("topic")
    try:
        return validate_topic(topic)
    except ValueError as exc:
        raise InvalidRequestError(f"{reader.context}: topic at byte {pos}: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _topic_bytes(topic: str) -> bytes:
    """A legal topic's short string (raises ValueError for an illegal one, never cached)."""
    return encode_string(validate_topic(topic))


# -- responses -----------------------------------------------------------------------------


def encode_replica_fetch_response(sets: Sequence[ReplicaSet[T]]) -> list[bytes | T]:
    """Parts to send in order: header bytes, and each set's data (a file region, sent with
    sendfile, or bytes) where it has some."""
    parts: list[bytes | T] = []
    header = [INT16.pack(0), INT16.pack(check_int(len(sets), 0, INT16_MAX, "sets"))]
    total = 4
    for s in sets:
        piece = [
            _topic_bytes(s.topic),
            _SET_HEAD.pack(
                s.partition,
                s.error,
                check_int(s.high_watermark, -1, INT64_MAX, "high watermark"),
                check_int(s.log_end, -1, INT64_MAX, "log end"),
                check_int(len(s.epochs), 0, INT16_MAX, "epochs"),
            ),
        ]
        for epoch, start in s.epochs:
            piece.append(
                _EPOCH.pack(
                    check_int(epoch, 0, INT32_MAX, "epoch"),
                    check_int(start, 0, INT64_MAX, "epoch start"),
                )
            )
        piece.append(
            _SET_SIZES.pack(
                check_int(s.messages, -1, INT32_MAX, "messages"),
                check_int(s.size, 0, INT32_MAX, "data size"),
            )
        )
        header.extend(piece)
        total += sum(len(p) for p in piece) + s.size
        if s.size:
            parts.append(b"".join(header))
            parts.append(s.data)
            header = []
    if header:
        parts.append(b"".join(header))
    check_int(total, 0, INT32_MAX, "response size")
    return [INT32.pack(total), *parts]


def encode_offsets_for_leader_epoch_response(ends: Sequence[EpochEnd]) -> bytes:
    parts = [INT16.pack(0), INT16.pack(check_int(len(ends), 0, INT16_MAX, "answers"))]
    for e in ends:
        parts.append(encode_string(e.topic))
        parts.append(INT32.pack(e.partition))
        parts.append(INT16.pack(e.error))
        parts.append(INT32.pack(check_int(e.epoch, -1, INT32_MAX, "epoch")))
        parts.append(INT64.pack(check_int(e.end_offset, INT64_MIN, INT64_MAX, "end offset")))
    body = b"".join(parts)
    return INT32.pack(len(body)) + body


def _reader(body: Buffer, context: str) -> Reader:
    reader = Reader(byte_view(body), MalformedReplicaResponseError, "response", context)
    error = reader.int16("error")
    if error:
        raise error_for_code(error, f"{context}: the whole request failed with error {error}")
    return reader


def decode_replica_fetch_response(body: Buffer) -> list[ReplicaSet[memoryview]]:
    reader = _reader(body, "REPLICA_FETCH response")
    sets = []
    for _ in range(reader.count("sets", 2 + _SET_HEAD.size + _SET_SIZES.size)):
        topic = reader.string("topic")
        partition, error, high_watermark, log_end = reader.unpack(
            _SET_HEAD_FIELDS, "partition, error, high watermark, log end"
        )
        epochs = []
        for _ in range(reader.count("epochs", _EPOCH.size)):
            epoch, start = reader.unpack(_EPOCH, "epoch, epoch start")
            epochs.append((epoch, start))
        (messages,) = reader.unpack(INT32, "messages")
        data = reader.sized_bytes("data")
        sets.append(
            ReplicaSet(
                topic,
                partition,
                error,
                high_watermark,
                log_end,
                tuple(epochs),
                len(data),
                data,
                messages,
            )
        )
    reader.done()
    return sets


def decode_offsets_for_leader_epoch_response(body: Buffer) -> list[EpochEnd]:
    reader = _reader(body, "OFFSETS_FOR_LEADER_EPOCH response")
    ends = []
    for _ in range(reader.count("answers", 2 + 4 + 2 + 4 + 8)):
        ends.append(
            EpochEnd(
                reader.string("topic"),
                reader.int32("partition"),
                reader.int16("error"),
                reader.int32("epoch"),
                reader.int64("end offset"),
            )
        )
    reader.done()
    return ends
