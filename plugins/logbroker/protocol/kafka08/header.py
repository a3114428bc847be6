"""The framing of Kafka 0.8's requests and responses, and the API keys (the protocol guide's
"Common Request and Response Structure"). All integers big-endian, signed.

    Request  := int32 size | RequestHeader | request body        size = bytes after it
    RequestHeader
      offset  size  field
      0       2     api_key (below)
      2       2     api_version (0 for every API of 0.8.2 but OffsetCommit and OffsetFetch,
                    which have 0 and 1)
      4       4     correlation_id: any int32; the response carries it back
      8       2+C   client_id: int16 C | C bytes of UTF-8 (-1 = null: 0.8 read it as null)
    Response := int32 size | int32 correlation_id | response body

    key  API                 key  API (between brokers in 0.8: refused here)
    0    Produce             4    LeaderAndIsr
    1    Fetch               5    StopReplica
    2    Offsets             6    UpdateMetadata
    3    Metadata            7    ControlledShutdown
    8    OffsetCommit
    9    OffsetFetch
    10   ConsumerMetadata (later GroupCoordinator, FindCoordinator)

Answers go back in request order on a connection; a Produce with required_acks 0 gets none.
A frame is at least 10 bytes (the header with an empty client id) and at most the broker's
max.socket.request.bytes; 0.7's frames also start `int32 size | int16 type` and their type
ids (0 to 4) are 0.8's keys, which is why 0.8 has a listener of its own.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from ..errors import InvalidRequestError
from ..responses import MalformedResponseError
from ..wire import INT32, Buffer, byte_view
from .types import INT16_T, INT32_T, NULLABLE_STRING, Part, Schema, decode_with, encode_with

MIN_REQUEST_SIZE = 10  # api_key, api_version, correlation_id, an empty client_id's length
RESPONSE_HEADER_SIZE = 4  # correlation_id
DEFAULT_MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes, 100 MiB, as 0.8.2's


class ApiKey(IntEnum):
    """The int16 api_key of a request (0.8.2's `api/RequestKeys.scala`)."""

    PRODUCE = 0
    FETCH = 1
    OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    CONSUMER_METADATA = 10


class RequestHeader(NamedTuple):
    """What precedes every request's body."""

    api_key: int
    "Which API (ApiKey); an int, since a client may send a key 0.8 never had."
    api_version: int
    correlation_id: int
    "Returned unchanged in the response."
    client_id: str | None
    "The client's name for itself (logged with its errors); None if sent null."


HEADER = Schema(
    RequestHeader,
    ("api_key", INT16_T),
    ("api_version", INT16_T),
    ("correlation_id", INT32_T),
    ("client_id", NULLABLE_STRING),
)


class Api(NamedTuple):
    """One version of one API: its key and version, and its two schemas."""

    key: ApiKey
    version: int
    name: str
    'As the protocol guide names it (e.g. "Metadata").'
    request: Schema
    response: Schema

    @property
    def label(self) -> str:
        """ "Metadata v0": how errors name it."""
        return f"{self.name} v{self.version}"


def decode_frame_size(prefix: Buffer, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> int:
    """The int32 size in front of a request, checked: under 10 bytes (no room for the header)
    or over `max_request_bytes` raises InvalidRequestError, and the broker closes the
    connection without reading further."""
    view = byte_view(prefix)
    if len(view) != 4:
        raise InvalidRequestError(f"0.8 request size prefix is {len(view)} bytes, not 4")
    (size,) = INT32.unpack_from(view, 0)
    if size < MIN_REQUEST_SIZE:
        raise InvalidRequestError(
            f"0.8 request size {size} is under the {MIN_REQUEST_SIZE} bytes of a request header"
        )
    if size > max_request_bytes:
        raise InvalidRequestError(
            f"0.8 request size {size} is over socket.request.max.bytes ({max_request_bytes})"
        )
    return int(size)


def decode_header(frame: Buffer) -> tuple[RequestHeader, int]:
    """(the header, where the body starts) of a request frame without its size prefix.

    A header cut off, or a client id that is not UTF-8, raises InvalidRequestError.
    """
    header, end = decode_with(
        HEADER, frame, error=InvalidRequestError, kind="request", context="0.8 request header"
    )
    return header, end


def encode_header(header: RequestHeader) -> list[Part]:
    out: list[Part] = []
    encode_with(HEADER, header, out, "0.8 request header")
    return out


def frame(parts: list[Part]) -> list[Part]:
    """`parts` with the int32 size of all of them in front (a handle counts its `size`)."""
    size = sum(len(p) if isinstance(p, bytes | memoryview) else p.size for p in parts)
    if size > 0x7FFFFFFF:
        raise ValueError(f"a frame of {size} bytes is over the int32 limit")
    return [INT32.pack(size), *parts]


_CORRELATION = struct.Struct(">i")


def response_header(correlation_id: int) -> bytes:
    """The bytes a response body follows (after the size): its correlation id."""
    return _CORRELATION.pack(correlation_id)


def decode_response_header(frame_body: Buffer) -> tuple[int, int]:
    """(correlation id, where the body starts) of a response without its size prefix."""
    view = byte_view(frame_body)
    if len(view) < RESPONSE_HEADER_SIZE:
        raise MalformedResponseError(
            f"0.8 response of {len(view)} bytes has no room for its correlation id"
        )
    return int(_CORRELATION.unpack_from(view, 0)[0]), RESPONSE_HEADER_SIZE
