"""Offsets v0 (api key 2, later ListOffsets): offsets of a partition before a time.

    OffsetRequest v0  := replica_id int32 (-1: a client) | [topic string
                           | [partition int32 | time int64 | max_number_of_offsets int32]]
    OffsetResponse v0 := [topic string | [partition int32 | error_code int16 | [offset int64]]]

time: -1 latest (the answer holds the log's end, the next offset to be written), -2
earliest (the first offset kept), else ms since the epoch: 0.8 answers at segment
granularity, the base offsets of the segments last modified before that time, newest first,
at most max_number_of_offsets of them.
"""

from __future__ import annotations

from typing import NamedTuple

from .header import Api, ApiKey
from .types import INT16_T, INT32_T, INT64_T, STRING, Array, Schema

LATEST = -1
EARLIEST = -2


class OffsetsPartition(NamedTuple):
    partition: int
    time: int
    "LATEST (-1), EARLIEST (-2) or ms since the epoch."
    max_offsets: int


class OffsetsTopic(NamedTuple):
    topic: str
    partitions: tuple[OffsetsPartition, ...]


class OffsetsRequest(NamedTuple):
    replica_id: int
    topics: tuple[OffsetsTopic, ...]


class PartitionOffsets(NamedTuple):
    partition: int
    error_code: int
    offsets: tuple[int, ...]
    "Newest first."


class OffsetsResponseTopic(NamedTuple):
    topic: str
    partitions: tuple[PartitionOffsets, ...]


class OffsetsResponse(NamedTuple):
    topics: tuple[OffsetsResponseTopic, ...]


OFFSETS_V0 = Api(
    ApiKey.OFFSETS,
    0,
    "Offsets",
    Schema(
        OffsetsRequest,
        ("replica_id", INT32_T),
        (
            "topics",
            Array(
                Schema(
                    OffsetsTopic,
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                OffsetsPartition,
                                ("partition", INT32_T),
                                ("time", INT64_T),
                                ("max_offsets", INT32_T),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    Schema(
        OffsetsResponse,
        (
            "topics",
            Array(
                Schema(
                    OffsetsResponseTopic,
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                PartitionOffsets,
                                ("partition", INT32_T),
                                ("error_code", INT16_T),
                                ("offsets", Array(INT64_T)),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
