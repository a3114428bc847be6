"""Metadata v0 (api key 3): the brokers, and per partition its leader, replicas and ISR.

    MetadataRequest v0   := [topic string]          an empty array asks for every topic
    MetadataResponse v0  := [Broker] [TopicMetadata]
      Broker             := node_id int32 | host string | port int32
      TopicMetadata      := error_code int16 | topic string | [PartitionMetadata]
      PartitionMetadata  := error_code int16 | partition int32 | leader int32 (-1: none)
                              | replicas [int32] | isr [int32]

A 0.8 broker answers any broker's Metadata for the whole cluster; a topic's error (3
UnknownTopicOrPartition, 5 LeaderNotAvailable while it is being created) comes with no
partitions, a partition's (5, 9 ReplicaNotAvailable) with what is known of it.
"""

from __future__ import annotations

from typing import NamedTuple

from .header import Api, ApiKey
from .types import INT16_T, INT32_T, STRING, Array, Schema


class MetadataRequest(NamedTuple):
    topics: tuple[str, ...]
    "The topics to describe; empty: every topic."


class Broker(NamedTuple):
    node_id: int
    host: str
    port: int


class PartitionMetadata(NamedTuple):
    error_code: int
    partition: int
    leader: int
    "The leader's node id, -1 when there is none."
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class TopicMetadata(NamedTuple):
    error_code: int
    topic: str
    partitions: tuple[PartitionMetadata, ...]


class MetadataResponse(NamedTuple):
    brokers: tuple[Broker, ...]
    topics: tuple[TopicMetadata, ...]


METADATA_V0 = Api(
    ApiKey.METADATA,
    0,
    "Metadata",
    Schema(MetadataRequest, ("topics", Array(STRING))),
    Schema(
        MetadataResponse,
        (
            "brokers",
            Array(Schema(Broker, ("node_id", INT32_T), ("host", STRING), ("port", INT32_T))),
        ),
        (
            "topics",
            Array(
                Schema(
                    TopicMetadata,
                    ("error_code", INT16_T),
                    ("topic", STRING),
                    (
                        "partitions",
                        Array(
                            Schema(
                                PartitionMetadata,
                                ("error_code", INT16_T),
                                ("partition", INT32_T),
                                ("leader", INT32_T),
                                ("replicas", Array(INT32_T)),
                                ("isr", Array(INT32_T)),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
