"""Responses of Kafka 0.7 (`server/MessageSetSend.scala`, `MultiMessageSetSend.scala`,
`api/OffsetRequest.scala`) and of our extensions: values and codec.

Every response starts with int32 size (the bytes after it) and an int16 error code; all
integers big-endian, signed (see wire.py for the types):

    request                 response
    PRODUCE, MULTIPRODUCE   none
    FETCH                   int32 size (= 2 + N) | int16 error | N bytes of raw log data
    MULTIFETCH, FETCH_WAIT  int32 size | int16 error (0) | Set × one per fetch, request order
                            Set := int32 size (= 2 + N) | int16 error | N bytes of log data
    OFFSETS                 int32 size | int16 error (0) | int32 count | int64 offset × count
    PRODUCE_ACK             int32 size | int16 error (0) | int16 count | Result × count
    METADATA                int32 size | int16 error (0) | int32 broker id
                              | int16 count | TopicMeta × count
    CREATE_TOPIC            METADATA's, for that one topic; or, refused:
                            int32 size | int16 error (≠ 0) | Reason
    error only (extensions) int32 size = 2 | int16 error

    Reason := int16 N | N bytes of UTF-8: why, in words, as the broker logged it, e.g. "a
              topic has 1 to 1024 partitions per broker (max.partitions.per.topic), not 5000"
              (at most REASON_MAX_BYTES; the limit in it is that broker's own)

    Result (T = topic bytes; one per produce, request order)
    offset  size  field
    0       2     topic length T
    2       T     topic
    2+T     4     partition (the one appended to, also when -1 was asked)
    6+T     2     error
    8+T     8     offset the set was appended at (-1 on error)
    16+T    8     next offset = the new end of the log (-1 on error)

    TopicMeta := Topic | int16 error | int32 count | PartitionMeta × count
    PartitionMeta
    offset  size  field
    0       4     partition
    4       8     earliest offset
    12      8     latest offset
    20      8     bytes on disk

The error code of a FETCH response and of each set is data: decoders return it. The outer
code of the other responses is 0 from a healthy broker; when it is not, nothing follows it
but a CREATE_TOPIC refusal's Reason, and the decoders raise `error_for_code(code)`.

A refused CREATE_TOPIC carries its Reason after a non-zero outer code because every decoder
reads that code first and raises before looking further: a client older than the Reason
still raises the right exception (code 3 or 6) and, the frame being sized, reads past it.
Brokers older than it answered METADATA's layout with the code in the topic's entry and no
Reason; `decode_create_topic_response` reads both, and words an old broker's code itself. The broker sends log data with sendfile, so
the fetch encoders produce headers only (see `encode_multifetch_response`). Decoders take
the response after its int32 size and raise MalformedResponseError, naming the field and
its byte position (counted from the first byte of the error code), on malformed input.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Generic, NamedTuple, TypeVar

from .errors import LogbrokerError, error_for_code
from .topics import LEGAL_CHARACTERS, MAX_TOPIC_LENGTH
from .wire import (
    INT16,
    INT16_MAX,
    INT16_MIN,
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

T = TypeVar("T")

ERROR_CODE_BYTES = 2
SET_HEADER_BYTES = 4 + ERROR_CODE_BYTES  # int32 size | int16 error, in front of each set
_RESULT_MIN = SHORT_STRING_OVERHEAD + 4 + 2 + 8 + 8
_TOPIC_META_MIN = SHORT_STRING_OVERHEAD + 2 + 4
_PARTITION_META_SIZE = 4 + 8 + 8 + 8
_MAX_DATA = INT32_MAX - ERROR_CODE_BYTES  # the most log data one size field can count
# a one-set MULTIFETCH body's head: outer error | set size | set error (the set's data after)
ONE_SET_HEAD = _ONE_SET = struct.Struct(">hih")
_ONE_SET_HEADER = struct.Struct(">ihih")  # the same, after the response's int32 size
REASON_MAX_BYTES = 1024  # a longer reason is cut, at a character boundary


class MalformedResponseError(LogbrokerError):
    """A response that cannot be decoded; the client drops the connection."""


class FetchResponse(NamedTuple):
    """A FETCH response, or one set of a MULTIFETCH or FETCH_WAIT response."""

    error: int
    "The error code (0 = none); the data is empty when it is not 0."
    messages: memoryview
    "The raw log data: a message set, possibly ending in a partial message."


class FetchedSet(NamedTuple, Generic[T]):
    """One fetch's answer as the broker will send it (input to encode_multifetch_response)."""

    error: int
    "The error code for this fetch (0 = none)."
    size: int
    "How many bytes of log data follow its header (0 on error)."
    data: T
    "Where those bytes come from: the caller's own handle (a file region, or bytes)."


class ProduceResult(NamedTuple):
    """The answer to one produce of a PRODUCE_ACK request."""

    topic: str
    "The topic name."
    partition: int
    "The partition appended to (the chosen one when the request asked for -1)."
    error: int
    "The error code (0 = appended)."
    offset: int
    "The offset the set was appended at; -1 on error."
    next_offset: int
    "The offset after the set, the new end of the log; -1 on error."


class PartitionMetadata(NamedTuple):
    """One partition in a METADATA response."""

    partition: int
    "The partition."
    earliest_offset: int
    "The start of the first retained segment."
    latest_offset: int
    "The end of the log that readers see."
    size: int
    "Bytes on disk, all segments."


class TopicMetadata(NamedTuple):
    """One topic in a METADATA response."""

    topic: str
    "The topic name."
    error: int
    "The error code for this topic (0 = none); no partitions when it is not 0."
    partitions: tuple[PartitionMetadata, ...]
    "Its partitions on this broker."


class Metadata(NamedTuple):
    """A decoded METADATA response."""

    broker_id: int
    "The id of the broker that answered."
    topics: tuple[TopicMetadata, ...]
    "The topics asked for, or every topic when none was named."


# ---------------------------------------------------------------------------------------
# Encoding (the broker). Out-of-range fields raise ValueError naming the field.


def encode_fetch_response_header(error: int, size: int) -> bytes:
    """int32 size (= 2 + `size`) | int16 error: the broker then sends `size` bytes of data."""
    check_int(error, INT16_MIN, INT16_MAX, "error code")
    check_int(size, 0, _MAX_DATA, "fetch data size")
    return INT32.pack(ERROR_CODE_BYTES + size) + INT16.pack(error)


def encode_error_response(error: int) -> bytes:
    """A response that is only an error code (int32 2 | int16 error), for the extensions."""
    return encode_fetch_response_header(error, 0)


def encode_refusal(error: int, reason: str) -> bytes:
    """int32 size | int16 error (not 0) | Reason: a CREATE_TOPIC refused, and why."""
    if error == 0:
        raise ValueError("a refusal's error code is not 0")
    check_int(error, INT16_MIN, INT16_MAX, "error code")
    cut = reason.encode("utf-8", "replace")[:REASON_MAX_BYTES].decode("utf-8", "ignore")
    return _frame([INT16.pack(error), encode_string(cut, "reason")])


def encode_multifetch_response(sets: Sequence[FetchedSet[T]]) -> list[bytes | T]:
    """A MULTIFETCH (or FETCH_WAIT) response as parts to send in order.

    Every `bytes` part is header bytes made here (adjacent headers already joined); every
    other part is the `data` of a FetchedSet with size > 0, which the caller sends itself
    (e.g. with sendfile) and which must be exactly its `size` bytes. Sets with size 0 add no
    data part. When `data` is itself bytes the parts can simply be joined.
    """
    total = ERROR_CODE_BYTES
    for i, s in enumerate(sets):
        if not (INT16_MIN <= s.error <= INT16_MAX and 0 <= s.size <= _MAX_DATA):  # hot path
            check_int(s.error, INT16_MIN, INT16_MAX, f"error code of set {i}")
            check_int(s.size, 0, _MAX_DATA, f"size of set {i}")
        total += SET_HEADER_BYTES + s.size
    if not 0 <= total <= INT32_MAX:  # hot path: no call when it fits
        check_int(total, 0, INT32_MAX, "multifetch response size")
    if len(sets) == 1:  # a consumer's usual fetch: one header in one pack
        (only,) = sets
        header = _ONE_SET_HEADER.pack(total, 0, ERROR_CODE_BYTES + only.size, only.error)
        return [header, only.data] if only.size else [header]
    parts: list[bytes | T] = []
    header = INT32.pack(total) + INT16.pack(0)
    for s in sets:
        header += INT32.pack(ERROR_CODE_BYTES + s.size) + INT16.pack(s.error)
        if s.size:
            parts.append(header)
            parts.append(s.data)
            header = b""
    if header:
        parts.append(header)
    return parts


def encode_offsets_response(offsets: Sequence[int]) -> bytes:
    """int32 size | int16 0 | int32 count | int64 offset × count."""
    check_int(len(offsets), 0, (INT32_MAX - 6) // 8, "number of offsets")
    body = [INT16.pack(0), INT32.pack(len(offsets))]
    body += [INT64.pack(check_int(o, INT64_MIN, INT64_MAX, "offset")) for o in offsets]
    return _frame(body)


def encode_acked_produce_response(results: Sequence[ProduceResult]) -> bytes:
    """int32 size | int16 0 | int16 count | (topic | partition | error | offset | next) × count."""
    body = [INT16.pack(0), INT16.pack(check_int(len(results), 0, INT16_MAX, "number of results"))]
    for r in results:
        body.append(encode_string(r.topic))
        body.append(INT32.pack(check_int(r.partition, INT32_MIN, INT32_MAX, "partition")))
        body.append(INT16.pack(check_int(r.error, INT16_MIN, INT16_MAX, "error code")))
        body.append(INT64.pack(check_int(r.offset, INT64_MIN, INT64_MAX, "offset")))
        body.append(INT64.pack(check_int(r.next_offset, INT64_MIN, INT64_MAX, "next offset")))
    return _frame(body)


def encode_metadata_response(broker_id: int, topics: Sequence[TopicMetadata]) -> bytes:
    """int32 size | int16 0 | int32 broker id | int16 count | TopicMeta × count."""
    body = [
        INT16.pack(0),
        INT32.pack(check_int(broker_id, INT32_MIN, INT32_MAX, "broker id")),
        INT16.pack(check_int(len(topics), 0, INT16_MAX, "number of topics")),
    ]
    for t in topics:
        body.append(encode_string(t.topic))
        body.append(INT16.pack(check_int(t.error, INT16_MIN, INT16_MAX, "error code")))
        body.append(INT32.pack(check_int(len(t.partitions), 0, INT32_MAX, "number of partitions")))
        for p in t.partitions:
            body.append(INT32.pack(check_int(p.partition, INT32_MIN, INT32_MAX, "partition")))
            for value, what in (
                (p.earliest_offset, "earliest offset"),
                (p.latest_offset, "latest offset"),
                (p.size, "size"),
            ):
                body.append(INT64.pack(check_int(value, INT64_MIN, INT64_MAX, what)))
    return _frame(body)


def _frame(body: list[bytes]) -> bytes:
    size = sum(len(b) for b in body)
    check_int(size, 0, INT32_MAX, "response size")
    return INT32.pack(size) + b"".join(body)


# ---------------------------------------------------------------------------------------
# Decoding (clients). `body` is the response after its int32 size.


def decode_response_size(prefix: Buffer, max_size: int = INT32_MAX) -> int:
    """The int32 size in the 4 bytes in front of a response; under 2 or over max fails."""
    view = byte_view(prefix)
    if len(view) != 4:
        raise MalformedResponseError(f"response size prefix is {len(view)} bytes, not 4")
    (size,) = INT32.unpack_from(view, 0)
    if size < ERROR_CODE_BYTES:
        raise MalformedResponseError(f"response size {size} is under {ERROR_CODE_BYTES}")
    if size > max_size:
        raise MalformedResponseError(f"response size {size} is over the limit {max_size}")
    return int(size)


def decode_fetch_response(body: Buffer) -> FetchResponse:
    """int16 error | log data. The data is a zero-copy slice of `body`."""
    reader = _reader(body, "FETCH response")
    error = reader.int16("error code")
    return FetchResponse(error, reader.rest())


def decode_multifetch_response(
    body: Buffer, expected_sets: int | None = None
) -> list[FetchResponse]:
    """The sets of a MULTIFETCH or FETCH_WAIT response, in request order.

    With `expected_sets` (the number of fetches asked for), a different number of sets is
    malformed. Each set's data is a zero-copy slice of `body`.
    """
    if expected_sets == 1:  # the consumers' usual answer, read in one step when well formed
        view = byte_view(body)
        if len(view) >= 8:
            outer, size, error = _ONE_SET.unpack_from(view, 0)
            if outer == 0 and size == len(view) - 6 and size >= ERROR_CODE_BYTES:
                return [FetchResponse(error, view[8:])]
    reader = _reader(body, "MULTIFETCH response")
    _outer_error(reader)
    sets: list[FetchResponse] = []
    while reader.remaining:
        reader.context = f"MULTIFETCH response, set {len(sets) + 1}"
        pos = reader.pos
        size = reader.int32("set size")
        if size < ERROR_CODE_BYTES:
            reader.fail(f"set size {size} at byte {pos} is under {ERROR_CODE_BYTES}")
        if size > reader.remaining:
            reader.fail(
                f"set size {size} at byte {pos} runs past the end of the response "
                f"({reader.remaining} bytes remain)"
            )
        error = reader.int16("set error code")
        sets.append(FetchResponse(error, reader.raw(size - ERROR_CODE_BYTES, "set data")))
    if expected_sets is not None and len(sets) != expected_sets:
        reader.context = "MULTIFETCH response"
        reader.fail(f"{len(sets)} sets up to byte {reader.end}, {expected_sets} expected")
    return sets


def decode_offsets_response(body: Buffer) -> list[int]:
    """The offsets of an OFFSETS response, newest first."""
    reader = _reader(body, "OFFSETS response")
    _outer_error(reader)
    count = reader.count("offset count", 8, wide=True)
    offsets = [reader.int64("offset") for _ in range(count)]
    reader.done()
    return offsets


def decode_acked_produce_response(body: Buffer) -> list[ProduceResult]:
    """One result per produce of the PRODUCE_ACK request, in request order."""
    reader = _reader(body, "PRODUCE_ACK response")
    _outer_error(reader)
    count = reader.count("result count", _RESULT_MIN)
    results = []
    for i in range(count):
        reader.context = f"PRODUCE_ACK response, result {i + 1} of {count}"
        results.append(
            ProduceResult(
                reader.string("topic"),
                reader.int32("partition"),
                reader.int16("error code"),
                reader.int64("offset"),
                reader.int64("next offset"),
            )
        )
    reader.context = "PRODUCE_ACK response"
    reader.done()
    return results


def decode_metadata_response(body: Buffer) -> Metadata:
    """The broker id and the topics of a METADATA response."""
    reader = _reader(body, "METADATA response")
    _outer_error(reader)
    broker_id = reader.int32("broker id")
    count = reader.count("topic count", _TOPIC_META_MIN)
    topics = []
    for i in range(count):
        reader.context = f"METADATA response, topic {i + 1} of {count}"
        topic = reader.string("topic")
        error = reader.int16("error code")
        n = reader.count("partition count", _PARTITION_META_SIZE, wide=True)
        partitions = tuple(
            PartitionMetadata(
                reader.int32("partition"),
                reader.int64("earliest offset"),
                reader.int64("latest offset"),
                reader.int64("size"),
            )
            for _ in range(n)
        )
        topics.append(TopicMetadata(topic, error, partitions))
    reader.context = "METADATA response"
    reader.done()
    return Metadata(broker_id, tuple(topics))


# A CREATE_TOPIC code that came without a Reason (brokers older than it sent none).
_OLD_REFUSALS = {
    3: "the partition count is outside the broker's range, 1 to its max.partitions.per.topic "
    "(1024 unless it configures another; it did not say)",
    6: f"not a legal topic name (1 to {MAX_TOPIC_LENGTH} characters, {LEGAL_CHARACTERS})",
}


def decode_create_topic_response(body: Buffer) -> TopicMetadata:
    """The topic as a CREATE_TOPIC made it. A refusal is raised as its code's exception with
    the broker's Reason as the message; a code that came without one (an older broker's, or
    an error-only response) is worded here."""
    reader = _reader(body, "CREATE_TOPIC response")
    error = reader.int16("error code")
    if error:
        reason = reader.string("reason") if reader.remaining else _worded(error)
        reader.done()
        raise error_for_code(error, reason)
    topics = decode_metadata_response(body).topics
    if len(topics) != 1:
        reader.fail(f"{len(topics)} topics in the answer, 1 expected")
    if topics[0].error:
        raise error_for_code(topics[0].error, _worded(topics[0].error))
    return topics[0]


def _worded(code: int) -> str:
    return _OLD_REFUSALS.get(code, f"error code {code}, no reason given")


def _reader(body: Buffer, context: str) -> Reader:
    return Reader(byte_view(body), MalformedResponseError, "response", context)


def _outer_error(reader: Reader) -> None:
    """Read the outer error code; a non-zero one is raised as its exception."""
    error = reader.int16("error code")
    if error:
        raise error_for_code(error, f"{reader.context}: broker answered error code {error}")
