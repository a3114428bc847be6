"""Requests of Kafka 0.7 (`api/*Request.scala`) and of our extensions: values and codec.

Every request is one frame; all integers big-endian, signed (see wire.py for the types):

    Frame    := int32 size (= 2 + len(Body)) | int16 type | Body
    Topic    := int16 N | N bytes of UTF-8          N counts bytes; -1 (null) is refused

    type  name          Body
    0     PRODUCE       Produce                                          no response
    1     FETCH         Fetch
    2     MULTIFETCH    int16 count | Fetch × count
    3     MULTIPRODUCE  int16 count | Produce × count                    no response
    4     OFFSETS       Topic | int32 partition | int64 time | int32 max offsets
    5     PRODUCE_ACK   int8 flags | [int32 timeout ms, if flag bit 1] | int16 count
                          | Produce × count                                          extension
    6     FETCH_WAIT    int32 max wait ms | int32 min bytes | int16 count | Fetch × count  ext.
    7     METADATA      int16 count | Topic × count (0 = every topic)               extension
    8     CREATE_TOPIC  Topic | int32 partitions  (answered like METADATA for the topic) ext.
    9, 10 REPLICA_FETCH, OFFSETS_FOR_LEADER_EPOCH: between brokers (protocol/replication.py)

    Produce (T = topic bytes)              Fetch
    offset  size  field                    offset  size  field
    0       2     topic length T           0       2     topic length T
    2       T     topic                    2       T     topic
    2+T     4     partition (-1 = random)  2+T     4     partition
    6+T     4     message set size N       6+T     8     offset (a byte position)
    10+T    N     message set              14+T    4     max size (bytes of log data)

    OFFSETS time: -1 = latest, -2 = earliest, else ms since the epoch.
    PRODUCE_ACK flags: bit 0 = fsync the appended sets before answering; bit 1 = answer only
    once every in-sync replica has the sets (acks=-1; an int32 timeout in ms follows the
    flags); other bits must be 0.

The extensions have ids above 0.7's, so a 0.7 client never sends them. `decode_request`
takes the frame after its int32 size (starting at the int16 type) and is hardened: any
malformed frame raises InvalidRequestError (an illegal topic name InvalidTopicError) whose
message names the field and its byte position, counted from the first byte of the type.
The broker answers either by closing the connection, as 0.7 did.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from enum import IntEnum
from typing import NamedTuple

from . import native
from .errors import InvalidRequestError, InvalidTopicError
from .message_set import Validation, build_message_set, validate_python
from .replication import (
    OffsetsForLeaderEpochRequest,
    ReplicaFetchRequest,
    decode_replication_request,
    encode_replication_request,
)
from .topics import validate_topic
from .wire import (
    INT8,
    INT16,
    INT16_MAX,
    INT32,
    INT32_MAX,
    INT32_MIN,
    INT64,
    INT64_MAX,
    INT64_MIN,
    SHORT_STRING_OVERHEAD,
    Buffer,
    Reader,
    byte_view,
    check_int,
    encode_string,
)

DEFAULT_MAX_SOCKET_REQUEST_BYTES = 104857600  # max.socket.request.bytes, 100 MiB
LATEST_TIME = -1
EARLIEST_TIME = -2
RANDOM_PARTITION = -1
FLAG_FSYNC = 0x01
FLAG_ALL_IN_SYNC = 0x02  # acks=-1: answered once the whole ISR has the sets

FRAME_SIZE_BYTES = 4  # the int32 size in front of every frame
REQUEST_TYPE_BYTES = 2
_PRODUCE_MIN = SHORT_STRING_OVERHEAD + 4 + 4  # topic length, partition, set size
_FETCH_MIN = SHORT_STRING_OVERHEAD + 4 + 8 + 4  # topic length, partition, offset, max size


class RequestType(IntEnum):
    """The int16 after the size of every request frame (`api/RequestKeys.scala`)."""

    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4
    PRODUCE_ACK = 5  # extension: acknowledged produce
    FETCH_WAIT = 6  # extension: fetch that waits for data
    METADATA = 7  # extension: topics, partitions and their offsets
    CREATE_TOPIC = 8  # extension: create a topic's partitions on this broker
    REPLICA_FETCH = 9  # replication: a follower's fetch (protocol/replication.py)
    OFFSETS_FOR_LEADER_EPOCH = 10  # replication: where an epoch ends in the leader's log


class ProduceRequest(NamedTuple):
    """Append one message set to one partition (type 0; also an item of 3 and 5)."""

    topic: str
    "The topic name."
    partition: int
    "The partition, or RANDOM_PARTITION (-1) to let the broker pick one."
    messages: Buffer
    "The message set bytes, stored verbatim; decoded requests hold a slice of the frame."

    @property
    def request_type(self) -> RequestType:
        return RequestType.PRODUCE


class FetchRequest(NamedTuple):
    """Read raw log data from one partition (type 1; also an item of 2 and 6)."""

    topic: str
    "The topic name."
    partition: int
    "The partition."
    offset: int
    "The byte position in the partition to read from."
    max_size: int
    "The most bytes of log data to return (a partial last message included)."

    @property
    def request_type(self) -> RequestType:
        return RequestType.FETCH


class MultiFetchRequest(NamedTuple):
    """Several fetches in one request, answered in request order (type 2)."""

    fetches: tuple[FetchRequest, ...]
    "The fetches, at most 32767."

    @property
    def request_type(self) -> RequestType:
        return RequestType.MULTIFETCH


class MultiProduceRequest(NamedTuple):
    """Several produces in one request, unanswered (type 3)."""

    produces: tuple[ProduceRequest, ...]
    "The produces, at most 32767."

    @property
    def request_type(self) -> RequestType:
        return RequestType.MULTIPRODUCE


class OffsetsRequest(NamedTuple):
    """Offsets of segment starts before a time, newest first (type 4)."""

    topic: str
    "The topic name."
    partition: int
    "The partition."
    time: int
    "LATEST_TIME (-1), EARLIEST_TIME (-2), or milliseconds since the epoch."
    max_offsets: int
    "The most offsets to return."

    @property
    def request_type(self) -> RequestType:
        return RequestType.OFFSETS


class AckedProduceRequest(NamedTuple):
    """Produces answered with each set's offsets after the append (type 5, extension)."""

    fsync: bool
    "Whether the broker fsyncs the appended sets before it answers (flags bit 0)."
    produces: tuple[ProduceRequest, ...]
    "The produces, at most 32767; answered in this order."
    all_in_sync: bool = False
    "acks=-1: answer once every in-sync replica has the sets (flags bit 1)."
    timeout_ms: int = 0
    "With all_in_sync: the longest the leader waits for the ISR before it answers code 12."

    @property
    def request_type(self) -> RequestType:
        return RequestType.PRODUCE_ACK


class WaitingFetchRequest(NamedTuple):
    """Fetches answered once `min_bytes` are available or `max_wait_ms` passed (type 6)."""

    max_wait_ms: int
    "The longest the broker holds the request, in milliseconds (>= 0)."
    min_bytes: int
    "Answer as soon as the fetches together have at least this many bytes (>= 0)."
    fetches: tuple[FetchRequest, ...]
    "The fetches, at most 32767; answered in this order, in MULTIFETCH's format."

    @property
    def request_type(self) -> RequestType:
        return RequestType.FETCH_WAIT


class MetadataRequest(NamedTuple):
    """Partitions of topics with their offsets and sizes (type 7, extension)."""

    topics: tuple[str, ...]
    "The topics to describe; empty means every topic on the broker."

    @property
    def request_type(self) -> RequestType:
        return RequestType.METADATA


class CreateTopicRequest(NamedTuple):
    """Create partitions 0..partitions-1 of a topic on this broker (type 8, extension)."""

    topic: str
    "The topic to create."
    partitions: int
    "How many partitions it has on this broker (at least 1)."

    @property
    def request_type(self) -> RequestType:
        return RequestType.CREATE_TOPIC


Request = (
    ProduceRequest
    | FetchRequest
    | MultiFetchRequest
    | MultiProduceRequest
    | OffsetsRequest
    | AckedProduceRequest
    | WaitingFetchRequest
    | MetadataRequest
    | CreateTopicRequest
    | ReplicaFetchRequest
    | OffsetsForLeaderEpochRequest
)


# ---------------------------------------------------------------------------------------
# Encoding (clients and tests). Out-of-range fields raise ValueError naming the field; an
# illegal topic name raises InvalidTopicError unless validate_topics=False.


def encode_request(req: Request, *, validate_topics: bool = True) -> bytes:
    """The whole frame of `req`: int32 size | int16 type | body."""
    parts: list[Buffer] = [b"", INT16.pack(req.request_type)]
    if isinstance(req, ProduceRequest):
        _encode_produce(req, parts, validate_topics)
    elif isinstance(req, FetchRequest):
        _encode_fetch(req, parts, validate_topics)
    elif isinstance(req, MultiFetchRequest):
        parts.append(INT16.pack(_count(req.fetches, "fetches")))
        for fetch in req.fetches:
            _encode_fetch(fetch, parts, validate_topics)
    elif isinstance(req, MultiProduceRequest):
        parts.append(INT16.pack(_count(req.produces, "produces")))
        for produce in req.produces:
            _encode_produce(produce, parts, validate_topics)
    elif isinstance(req, OffsetsRequest):
        parts.append(_encode_topic(req.topic, validate_topics))
        parts.append(INT32.pack(check_int(req.partition, INT32_MIN, INT32_MAX, "partition")))
        parts.append(INT64.pack(check_int(req.time, INT64_MIN, INT64_MAX, "time")))
        parts.append(INT32.pack(check_int(req.max_offsets, INT32_MIN, INT32_MAX, "max_offsets")))
    elif isinstance(req, AckedProduceRequest):
        flags = (FLAG_FSYNC if req.fsync else 0) | (FLAG_ALL_IN_SYNC if req.all_in_sync else 0)
        parts.append(INT8.pack(flags))
        if req.all_in_sync:
            parts.append(INT32.pack(check_int(req.timeout_ms, 0, INT32_MAX, "timeout_ms")))
        parts.append(INT16.pack(_count(req.produces, "produces")))
        for produce in req.produces:
            _encode_produce(produce, parts, validate_topics)
    elif isinstance(req, WaitingFetchRequest):
        parts.append(INT32.pack(check_int(req.max_wait_ms, 0, INT32_MAX, "max_wait_ms")))
        parts.append(INT32.pack(check_int(req.min_bytes, 0, INT32_MAX, "min_bytes")))
        parts.append(INT16.pack(_count(req.fetches, "fetches")))
        for fetch in req.fetches:
            _encode_fetch(fetch, parts, validate_topics)
    elif isinstance(req, MetadataRequest):
        parts.append(INT16.pack(_count(req.topics, "topics")))
        for topic in req.topics:
            parts.append(_encode_topic(topic, validate_topics))
    elif isinstance(req, CreateTopicRequest):
        parts.append(_encode_topic(req.topic, validate_topics))
        parts.append(INT32.pack(check_int(req.partitions, 1, INT32_MAX, "partitions")))
    elif isinstance(req, (ReplicaFetchRequest, OffsetsForLeaderEpochRequest)):
        return encode_replication_request(req)
    else:
        raise ValueError(f"not a request: {req!r}")
    size = sum(len(p) for p in parts)
    check_int(size, 0, INT32_MAX, "request size")
    parts[0] = INT32.pack(size)
    return b"".join(parts)


def produce_frame_prefix(topic: str) -> bytes:
    """The bytes of a PRODUCE frame that depend only on the topic: type | topic (checked)."""
    return INT16.pack(RequestType.PRODUCE) + _encode_topic(topic, True)


_PRODUCE_TAIL = struct.Struct(">ii")  # partition, message set size


def encode_produce_frame(prefix: bytes, partition: int, messages: bytes) -> bytes:
    """A whole PRODUCE frame from `produce_frame_prefix(topic)`: the producer's hot path.

    Same bytes as encode_request(ProduceRequest(...)), without re-checking the topic.
    """
    return b"".join(
        (
            INT32.pack(len(prefix) + 8 + len(messages)),
            prefix,
            _PRODUCE_TAIL.pack(partition, len(messages)),
            messages,
        )
    )


def encode_produce_set_python(
    prefix: bytes, partition: int, payloads: Iterable[bytes], codec: int = 0
) -> bytes:
    """The PRODUCE frame of `payloads` as one message set (magic 1, compressed into one
    wrapper if `codec`): encode_produce_frame over message_set.build_message_set, the
    producer's hot path. The reference of `encode_produce_set`, which is its compiled twin
    (_native.pyx, one bytes object for the whole frame) unless native.py chose pure Python.
    """
    return encode_produce_frame(prefix, partition, build_message_set(payloads, codec))


encode_produce_set = encode_produce_set_python
if native.IN_USE is not None:
    encode_produce_set = native.IN_USE.encode_produce_set


def decode_produce_fast_python(frame_body: Buffer) -> ProduceRequest | None:
    """A well-formed PRODUCE frame decoded in a few operations (the broker's hot path).

    None for anything else, including a malformed PRODUCE: `decode_request` then decodes
    it or explains what is wrong. Topic names are not validated here (as with
    decode_request(validate_topics=False)). The reference of `decode_produce_fast`, which
    is its compiled twin (_native.pyx) unless native.py chose pure Python.
    """
    view = (
        frame_body
        if type(frame_body) is memoryview
        and frame_body.format == "B"
        and frame_body.ndim == 1
        and frame_body.c_contiguous
        else byte_view(frame_body)  # the connection's frames are byte views already
    )
    if len(view) < 12 or view[0] or view[1]:
        return None
    topic_end = 4 + ((view[2] << 8) | view[3])
    if view[2] & 0x80 or topic_end + 8 > len(view):
        return None
    partition, size = _PRODUCE_TAIL.unpack_from(view, topic_end)
    if size < 0 or topic_end + 8 + size != len(view):
        return None
    try:
        topic = str(view[4:topic_end], "utf-8")
    except UnicodeDecodeError:
        return None
    return ProduceRequest(topic, partition, view[topic_end + 8 :])


decode_produce_fast = decode_produce_fast_python
if native.IN_USE is not None:
    decode_produce_fast = native.IN_USE.decode_produce_fast


class ProduceRun(NamedTuple):
    """Whole PRODUCE frames in a row, to one partition, that the broker appends as they are
    (`produce_run`)."""

    topic: str
    partition: int
    end: int
    "Where the first frame after the run starts."
    sets: list[tuple[Buffer, Validation]]
    "Each frame's message set (a slice of the frames) and its validate(inflate=False)."


_FRAME_SIZE = struct.Struct(">i")


def produce_run_python(
    frames: memoryview, pos: int, end: int, max_request_bytes: int, max_message_size: int
) -> ProduceRun | None:
    """The run of frames from `frames[pos:end]` that the broker's produce appends without
    a second look, one socket read's worth at a time; None if the first frame is not one.

    A frame is in the run while it is whole, its size within 2..`max_request_bytes`, it
    decodes with `decode_produce_fast` to the first frame's topic and partition, and its
    set, checked with validate(inflate=False), has no error, a valid prefix, no compressed
    wrapper and no payload over `max_message_size`. The first frame that is not stops the
    run: the broker handles it one request at a time, as before (its errors, its logging).
    `frames` is a flat memoryview of bytes (the connection's receive buffer). The reference
    of `produce_run`, which is its compiled twin (_native.pyx) unless native.py chose pure
    Python.
    """
    sets: list[tuple[Buffer, Validation]] = []
    topic, partition = "", 0
    while end - pos >= 4:
        (size,) = _FRAME_SIZE.unpack_from(frames, pos)
        if size < REQUEST_TYPE_BYTES or size > max_request_bytes or end - pos - 4 < size:
            break
        request = decode_produce_fast_python(frames[pos + 4 : pos + 4 + size])
        if request is None:
            break
        if not sets:
            topic, partition = request.topic, request.partition
        elif request.topic != topic or request.partition != partition:
            break
        messages = request.messages
        check = validate_python(messages, inflate=False)
        if (
            check.error is not None
            or not check.valid_bytes
            or check.compressed
            or check.largest_payload > max_message_size
        ):
            break
        sets.append((messages, check))
        pos += 4 + size
    return ProduceRun(topic, partition, pos, sets) if sets else None


produce_run = produce_run_python
if native.IN_USE is not None:
    produce_run = native.IN_USE.produce_run


def _count(items: tuple[object, ...], what: str) -> int:
    return check_int(len(items), 0, INT16_MAX, f"number of {what}")


def _encode_topic(topic: str, validate_topics: bool) -> bytes:
    if validate_topics:
        validate_topic(topic)
    return encode_string(topic)


def _encode_produce(req: ProduceRequest, parts: list[Buffer], validate_topics: bool) -> None:
    messages = byte_view(req.messages)
    parts.append(_encode_topic(req.topic, validate_topics))
    parts.append(INT32.pack(check_int(req.partition, INT32_MIN, INT32_MAX, "partition")))
    parts.append(INT32.pack(check_int(len(messages), 0, INT32_MAX, "message set size")))
    parts.append(messages)


def _encode_fetch(req: FetchRequest, parts: list[Buffer], validate_topics: bool) -> None:
    parts.append(_encode_topic(req.topic, validate_topics))
    parts.append(INT32.pack(check_int(req.partition, INT32_MIN, INT32_MAX, "partition")))
    parts.append(INT64.pack(check_int(req.offset, INT64_MIN, INT64_MAX, "offset")))
    parts.append(INT32.pack(check_int(req.max_size, INT32_MIN, INT32_MAX, "max_size")))


# ---------------------------------------------------------------------------------------
# Decoding (the broker).


def decode_request_size(
    prefix: Buffer, max_request_bytes: int = DEFAULT_MAX_SOCKET_REQUEST_BYTES
) -> int:
    """The int32 size in the 4 bytes in front of a request, checked as 0.7 does.

    A size under 2 (no room for the type) or over `max_request_bytes` raises
    InvalidRequestError: the broker closes the connection without reading further.
    """
    view = byte_view(prefix)
    if len(view) != FRAME_SIZE_BYTES:
        raise InvalidRequestError(
            f"request size prefix is {len(view)} bytes, not {FRAME_SIZE_BYTES}"
        )
    (size,) = INT32.unpack_from(view, 0)
    if size < REQUEST_TYPE_BYTES:
        raise InvalidRequestError(f"request size {size} is under {REQUEST_TYPE_BYTES}")
    if size > max_request_bytes:
        raise InvalidRequestError(
            f"request size {size} is over max.socket.request.bytes ({max_request_bytes})"
        )
    return int(size)


def decode_request(frame_body: Buffer, *, validate_topics: bool = True) -> Request:
    """The request in a frame without its size prefix (first byte = the int16 type).

    Raises InvalidRequestError (or InvalidTopicError for an illegal topic name) on any
    malformed input, naming the field and its byte position. A produce's `messages` is a
    zero-copy slice of `frame_body` (so it keeps that buffer alive, and a bytearray cannot
    be resized while the slice exists). With validate_topics=False topic names are only
    required to be UTF-8, for a broker that answers a bad name with an error code instead.
    """
    reader = Reader(byte_view(frame_body), InvalidRequestError, "request", "request")
    type_id = reader.int16("request type")
    try:
        kind = RequestType(type_id)
    except ValueError:
        reader.fail(f"unknown request type {type_id} at byte 0")
    reader.context = kind.name
    req: Request
    if kind is RequestType.PRODUCE:
        req = _read_produce(reader, validate_topics)
    elif kind is RequestType.FETCH:
        req = _read_fetch(reader, validate_topics)
    elif kind is RequestType.MULTIFETCH:
        req = MultiFetchRequest(_read_fetches(reader, validate_topics))
    elif kind is RequestType.MULTIPRODUCE:
        req = MultiProduceRequest(_read_produces(reader, validate_topics))
    elif kind is RequestType.OFFSETS:
        req = OffsetsRequest(
            _read_topic(reader, validate_topics),
            reader.int32("partition"),
            reader.int64("time"),
            reader.int32("max offsets"),
        )
    elif kind is RequestType.PRODUCE_ACK:
        pos = reader.pos
        flags = reader.int8("flags")
        if flags & ~(FLAG_FSYNC | FLAG_ALL_IN_SYNC):
            reader.fail(f"flags {flags & 0xFF:#04x} at byte {pos} set unknown bits")
        timeout_ms = reader.non_negative_int32("timeout ms") if flags & FLAG_ALL_IN_SYNC else 0
        req = AckedProduceRequest(
            bool(flags & FLAG_FSYNC),
            _read_produces(reader, validate_topics),
            bool(flags & FLAG_ALL_IN_SYNC),
            timeout_ms,
        )
    elif kind is RequestType.FETCH_WAIT:
        max_wait_ms = reader.non_negative_int32("max wait ms")
        min_bytes = reader.non_negative_int32("min bytes")
        req = WaitingFetchRequest(max_wait_ms, min_bytes, _read_fetches(reader, validate_topics))
    elif kind is RequestType.METADATA:
        req = MetadataRequest(_read_topics(reader, validate_topics))
    elif kind in (RequestType.REPLICA_FETCH, RequestType.OFFSETS_FOR_LEADER_EPOCH):
        req = decode_replication_request(kind, reader)
    else:
        topic = _read_topic(reader, validate_topics)
        pos = reader.pos
        partitions = reader.int32("partitions")
        if partitions < 1:
            reader.fail(f"partitions {partitions} at byte {pos} is under 1")
        req = CreateTopicRequest(topic, partitions)
    reader.done()
    return req


def _read_topic(reader: Reader, validate_topics: bool) -> str:
    pos = reader.pos
    topic = reader.string("topic")
    if validate_topics:
        try:
            validate_topic(topic)
        except InvalidTopicError as exc:
            raise InvalidTopicError(f"{reader.context}: topic at byte {pos}: {exc}") from None
    return topic


def _read_produce(reader: Reader, validate_topics: bool) -> ProduceRequest:
    return ProduceRequest(
        _read_topic(reader, validate_topics),
        reader.int32("partition"),
        reader.sized_bytes("message set"),
    )


def _read_fetch(reader: Reader, validate_topics: bool) -> FetchRequest:
    return FetchRequest(
        _read_topic(reader, validate_topics),
        reader.int32("partition"),
        reader.int64("offset"),
        reader.int32("max size"),
    )


def _read_produces(reader: Reader, validate_topics: bool) -> tuple[ProduceRequest, ...]:
    count = reader.count("produce count", _PRODUCE_MIN)
    outer = reader.context
    produces = []
    for i in range(count):
        reader.context = f"{outer}, produce {i + 1} of {count}"
        produces.append(_read_produce(reader, validate_topics))
    reader.context = outer
    return tuple(produces)


def _read_fetches(reader: Reader, validate_topics: bool) -> tuple[FetchRequest, ...]:
    count = reader.count("fetch count", _FETCH_MIN)
    outer = reader.context
    fetches = []
    for i in range(count):
        reader.context = f"{outer}, fetch {i + 1} of {count}"
        fetches.append(_read_fetch(reader, validate_topics))
    reader.context = outer
    return tuple(fetches)


def _read_topics(reader: Reader, validate_topics: bool) -> tuple[str, ...]:
    count = reader.count("topic count", SHORT_STRING_OVERHEAD)
    outer = reader.context
    topics = []
    for i in range(count):
        reader.context = f"{outer}, topic {i + 1} of {count}"
        topics.append(_read_topic(reader, validate_topics))
    reader.context = outer
    return tuple(topics)
