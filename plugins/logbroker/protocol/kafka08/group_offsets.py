"""A consumer group's offsets kept by the broker: ConsumerMetadata v0 (api key 10),
OffsetCommit v0 and v1 (8), OffsetFetch v0 and v1 (9), as 0.8.2 has them.

    ConsumerMetadataRequest v0  := group string
    ConsumerMetadataResponse v0 := error_code int16 | coordinator_id int32
                                     | coordinator_host string | coordinator_port int32

    OffsetCommitRequest v0  := group string | [topic string
                                 | [partition int32 | offset int64 | metadata string]]
    OffsetCommitRequest v1  := group string | generation_id int32 | consumer_id string
                                 | [topic string | [partition int32 | offset int64
                                 | timestamp int64 | metadata string]]
    OffsetCommitResponse    := [topic string | [partition int32 | error_code int16]]  (v0, v1)

    OffsetFetchRequest      := group string | [topic string | [partition int32]]       (v0, v1)
    OffsetFetchResponse     := [topic string | [partition int32 | offset int64
                                 | metadata string | error_code int16]]              (v0, v1)

In 0.8.2, v0 of OffsetCommit and OffsetFetch read and wrote ZooKeeper and v1 the broker's
own store (the `__consumer_offsets` topic); both versions have the same bytes but for
v1's generation_id, consumer_id and per-partition timestamp (-1: the broker's receive
time). A client that does not use 0.9's group management (every client at 0.8.2) sends
generation_id -1 and an empty consumer_id. `metadata` is the client's own string, null
allowed (librdkafka sends null when it has none). An OffsetFetch answer for a partition
with nothing stored is offset -1 with error 0 (0.8.2's, for v1; 0.8.1's v0 answered 3).
"""

from __future__ import annotations

from typing import NamedTuple

from .header import Api, ApiKey
from .types import INT16_T, INT32_T, INT64_T, NULLABLE_STRING, STRING, Array, Schema

NO_GENERATION = -1
NO_OFFSET = -1
RECEIVE_TIME = -1  # a v1 commit's timestamp meaning "when the broker receives it"


class ConsumerMetadataRequest(NamedTuple):
    group: str


class ConsumerMetadataResponse(NamedTuple):
    error_code: int
    coordinator_id: int
    coordinator_host: str
    coordinator_port: int


class CommitPartitionV0(NamedTuple):
    partition: int
    offset: int
    metadata: str | None


class CommitTopicV0(NamedTuple):
    topic: str
    partitions: tuple[CommitPartitionV0, ...]


class OffsetCommitRequestV0(NamedTuple):
    group: str
    topics: tuple[CommitTopicV0, ...]


class CommitPartitionV1(NamedTuple):
    partition: int
    offset: int
    timestamp: int
    "ms since the epoch; RECEIVE_TIME (-1): the broker's."
    metadata: str | None


class CommitTopicV1(NamedTuple):
    topic: str
    partitions: tuple[CommitPartitionV1, ...]


class OffsetCommitRequestV1(NamedTuple):
    group: str
    generation_id: int
    "NO_GENERATION (-1) from a client without group management."
    consumer_id: str
    topics: tuple[CommitTopicV1, ...]


class CommitResult(NamedTuple):
    partition: int
    error_code: int


class CommitResponseTopic(NamedTuple):
    topic: str
    partitions: tuple[CommitResult, ...]


class OffsetCommitResponse(NamedTuple):
    topics: tuple[CommitResponseTopic, ...]


class OffsetFetchTopic(NamedTuple):
    topic: str
    partitions: tuple[int, ...]


class OffsetFetchRequest(NamedTuple):
    group: str
    topics: tuple[OffsetFetchTopic, ...]


class FetchedOffset(NamedTuple):
    partition: int
    offset: int
    "NO_OFFSET (-1) when the group has none stored."
    metadata: str | None
    error_code: int


class OffsetFetchResponseTopic(NamedTuple):
    topic: str
    partitions: tuple[FetchedOffset, ...]


class OffsetFetchResponse(NamedTuple):
    topics: tuple[OffsetFetchResponseTopic, ...]


CONSUMER_METADATA_V0 = Api(
    ApiKey.CONSUMER_METADATA,
    0,
    "ConsumerMetadata",
    Schema(ConsumerMetadataRequest, ("group", STRING)),
    Schema(
        ConsumerMetadataResponse,
        ("error_code", INT16_T),
        ("coordinator_id", INT32_T),
        ("coordinator_host", STRING),
        ("coordinator_port", INT32_T),
    ),
)

_COMMIT_RESPONSE = Schema(
    OffsetCommitResponse,
    (
        "topics",
        Array(
            Schema(
                CommitResponseTopic,
                ("topic", STRING),
                (
                    "partitions",
                    Array(Schema(CommitResult, ("partition", INT32_T), ("error_code", INT16_T))),
                ),
            )
        ),
    ),
)

OFFSET_COMMIT_V0 = Api(
    ApiKey.OFFSET_COMMIT,
    0,
    "OffsetCommit",
    Schema(
        OffsetCommitRequestV0,
        ("group", STRING),
        (
            "topics",
            Array(
                Schema(
                    CommitTopicV0,
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                CommitPartitionV0,
                                ("partition", INT32_T),
                                ("offset", INT64_T),
                                ("metadata", NULLABLE_STRING),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    _COMMIT_RESPONSE,
)

OFFSET_COMMIT_V1 = Api(
    ApiKey.OFFSET_COMMIT,
    1,
    "OffsetCommit",
    Schema(
        OffsetCommitRequestV1,
        ("group", STRING),
        ("generation_id", INT32_T),
        ("consumer_id", STRING),
        (
            "topics",
            Array(
                Schema(
                    CommitTopicV1,
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                CommitPartitionV1,
                                ("partition", INT32_T),
                                ("offset", INT64_T),
                                ("timestamp", INT64_T),
                                ("metadata", NULLABLE_STRING),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    _COMMIT_RESPONSE,
)

_OFFSET_FETCH_REQUEST = Schema(
    OffsetFetchRequest,
    ("group", STRING),
    (
        "topics",
        Array(Schema(OffsetFetchTopic, ("topic", STRING), ("partitions", Array(INT32_T)))),
    ),
)
_OFFSET_FETCH_RESPONSE = Schema(
    OffsetFetchResponse,
    (
        "topics",
        Array(
            Schema(
                OffsetFetchResponseTopic,
                ("topic", STRING),
                (
                    "partitions",
                    Array(
                        Schema(
                            FetchedOffset,
                            ("partition", INT32_T),
                            ("offset", INT64_T),
                            ("metadata", NULLABLE_STRING),
                            ("error_code", INT16_T),
                        )
                    ),
                ),
            )
        ),
    ),
)

OFFSET_FETCH_V0 = Api(
    ApiKey.OFFSET_FETCH, 0, "OffsetFetch", _OFFSET_FETCH_REQUEST, _OFFSET_FETCH_RESPONSE
)
OFFSET_FETCH_V1 = Api(
    ApiKey.OFFSET_FETCH, 1, "OffsetFetch", _OFFSET_FETCH_REQUEST, _OFFSET_FETCH_RESPONSE
)
