"""Fetch v0 (api key 1): message sets read from partitions, from a logical offset.

    FetchRequest v0  := replica_id int32 (-1: a client) | max_wait_time int32 (ms)
                          | min_bytes int32 | [FetchTopic]
      FetchTopic     := topic string | [partition int32 | fetch_offset int64 | max_bytes int32]
    FetchResponse v0 := [topic string | [FetchedPartition]]
      FetchedPartition := partition int32 | error_code int16 | high_watermark int64
                            | message_set_size int32 | MessageSet

The broker holds the request until the partitions together have min_bytes or max_wait_time
passed. A client sees only messages below the high watermark; the set may end in a partial
entry (the client drops it) and, from an offset inside a compressed wrapper, starts with
the whole wrapper (the client skips what is below its offset). The broker sends the sets
from the segment files: encode the response with a handle (anything with a `size`) in
`messages`, and apis.encode_response_parts leaves it in the parts for the caller to send.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .header import Api, ApiKey
from .types import INT16_T, INT32_T, INT64_T, MESSAGE_SET, STRING, Array, Schema


class FetchPartition(NamedTuple):
    partition: int
    fetch_offset: int
    max_bytes: int


class FetchTopic(NamedTuple):
    topic: str
    partitions: tuple[FetchPartition, ...]


class FetchRequest(NamedTuple):
    replica_id: int
    "-1 for a client; a broker's id for a follower (0.8's replication, not served here)."
    max_wait_ms: int
    min_bytes: int
    topics: tuple[FetchTopic, ...]


class FetchedPartition(NamedTuple):
    partition: int
    error_code: int
    high_watermark: int
    messages: Any
    "The set: bytes or a view, or when encoding, a handle with a `size` (types.Sized)."


class FetchResponseTopic(NamedTuple):
    topic: str
    partitions: tuple[FetchedPartition, ...]


class FetchResponse(NamedTuple):
    topics: tuple[FetchResponseTopic, ...]


FETCH_V0 = Api(
    ApiKey.FETCH,
    0,
    "Fetch",
    Schema(
        FetchRequest,
        ("replica_id", INT32_T),
        ("max_wait_ms", INT32_T),
        ("min_bytes", INT32_T),
        (
            "topics",
            Array(
                Schema(
                    FetchTopic,
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                FetchPartition,
                                ("partition", INT32_T),
                                ("fetch_offset", INT64_T),
                                ("max_bytes", INT32_T),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    Schema(
        FetchResponse,
        (
            "topics",
            Array(
                Schema(
                    FetchResponseTopic,
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                FetchedPartition,
                                ("partition", INT32_T),
                                ("error_code", INT16_T),
                                ("high_watermark", INT64_T),
                                ("messages", MESSAGE_SET),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
