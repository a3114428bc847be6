"""Produce v0 (api key 0): message sets appended to partitions.

    ProduceRequest v0  := required_acks int16 | timeout int32 | [ProduceTopic]
      ProduceTopic     := topic string | [partition int32 | message_set_size int32 | MessageSet]
    ProduceResponse v0 := [topic string | [partition int32 | error_code int16 | offset int64]]

required_acks: 0 no answer at all; 1 answer once the leader appended; -1 answer once every
in-sync replica has it (or error 7 RequestTimedOut after `timeout` ms, 19/20 for too few
replicas). `offset` is the offset given to the set's first message (message_set.py), -1 on
error. The sets are views of the request's frame, validated by the broker, not here.
"""

from __future__ import annotations

from typing import NamedTuple

from ..wire import Buffer
from .header import Api, ApiKey
from .types import INT16_T, INT32_T, INT64_T, MESSAGE_SET, STRING, Array, Schema


class ProducePartition(NamedTuple):
    partition: int
    messages: Buffer
    "The message set (message_set.py); a decoded request holds a view of its frame."


class ProduceTopic(NamedTuple):
    topic: str
    partitions: tuple[ProducePartition, ...]


class ProduceRequest(NamedTuple):
    required_acks: int
    timeout_ms: int
    topics: tuple[ProduceTopic, ...]


class ProduceResult(NamedTuple):
    partition: int
    error_code: int
    offset: int
    "The offset of the set's first message; -1 on error."


class ProduceResponseTopic(NamedTuple):
    topic: str
    partitions: tuple[ProduceResult, ...]


class ProduceResponse(NamedTuple):
    topics: tuple[ProduceResponseTopic, ...]


PRODUCE_V0 = Api(
    ApiKey.PRODUCE,
    0,
    "Produce",
    Schema(
        ProduceRequest,
        ("required_acks", INT16_T),
        ("timeout_ms", INT32_T),
        (
            "topics",
            Array(
                Schema(
                    ProduceTopic,
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                ProducePartition, ("partition", INT32_T), ("messages", MESSAGE_SET)
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
    Schema(
        ProduceResponse,
        (
            "topics",
            Array(
                Schema(
                    ProduceResponseTopic,
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                ProduceResult,
                                ("partition", INT32_T),
                                ("error_code", INT16_T),
                                ("offset", INT64_T),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
