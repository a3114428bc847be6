"""Kafka 0.8's requests and responses, byte by byte (logbroker.protocol.kafka08).

Every expected frame is written out one field per line, from the layouts of the protocol
guide ("A Guide To The Kafka Protocol": the request header, then each API's version-0
request and response, and OffsetCommit/OffsetFetch v1 of 0.8.2), as kafka-python's own
tests write them. Each is checked both ways: the encoder writes exactly these bytes and the
decoder reads them back into the same value. Then the malformed frames the 0.8 listener
must refuse with one clear line: cut at every byte, bad sizes, absurd counts, unknown keys.
"""

from __future__ import annotations

import re
import tracemalloc
from typing import Any

import pytest

from logbroker.protocol import errors as errors07
from logbroker.protocol.errors import InvalidRequestError
from logbroker.protocol.kafka08 import apis, errors
from logbroker.protocol.kafka08.apis import (
    APIS,
    UnsupportedApiError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
)
from logbroker.protocol.kafka08.fetch import (
    FETCH_V0,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponseTopic,
    FetchTopic,
)
from logbroker.protocol.kafka08.group_offsets import (
    CONSUMER_METADATA_V0,
    OFFSET_COMMIT_V0,
    OFFSET_COMMIT_V1,
    OFFSET_FETCH_V0,
    OFFSET_FETCH_V1,
    CommitPartitionV0,
    CommitPartitionV1,
    CommitResponseTopic,
    CommitResult,
    CommitTopicV0,
    CommitTopicV1,
    ConsumerMetadataRequest,
    ConsumerMetadataResponse,
    FetchedOffset,
    OffsetCommitRequestV0,
    OffsetCommitRequestV1,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseTopic,
    OffsetFetchTopic,
)
from logbroker.protocol.kafka08.header import (
    MIN_REQUEST_SIZE,
    ApiKey,
    decode_frame_size,
    decode_header,
)
from logbroker.protocol.kafka08.metadata import (
    METADATA_V0,
    Broker,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)
from logbroker.protocol.kafka08.offsets import (
    OFFSETS_V0,
    OffsetsPartition,
    OffsetsRequest,
    OffsetsResponse,
    OffsetsResponseTopic,
    OffsetsTopic,
    PartitionOffsets,
)
from logbroker.protocol.kafka08.produce import (
    PRODUCE_V0,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceResponseTopic,
    ProduceResult,
    ProduceTopic,
)
from logbroker.protocol.responses import MalformedResponseError

# One 0.8 message set entry (test_kafka08_messages.py checks its bytes): offset 0, key
# b"k", value b"v". The codecs carry it as opaque bytes.
ENTRY = (
    b"\x00\x00\x00\x00\x00\x00\x00\x00"  # offset 0
    b"\x00\x00\x00\x10"  # message size 16
    b"\x1f\xec\xd7\x0a"  # crc
    b"\x00"  # magic 0
    b"\x00"  # attributes: no compression
    b"\x00\x00\x00\x01"  # key length 1
    b"k"  # key
    b"\x00\x00\x00\x01"  # value length 1
    b"v"  # value
)

HEADER_METADATA = (
    b"\x00\x03"  # api_key 3 = Metadata
    b"\x00\x00"  # api_version 0
    b"\x00\x00\x00\x07"  # correlation_id 7
    b"\x00\x07"  # client_id length 7
    b"rdkafka"  # client_id
)


def sized(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


# (api, request value, request frame without its size, correlation id, client id)
REQUESTS: list[tuple[Any, Any, bytes]] = [
    (
        METADATA_V0,
        MetadataRequest(("t1", "t2")),
        HEADER_METADATA
        + b"\x00\x00\x00\x02"  # topics count 2
        + b"\x00\x02t1"  # topic "t1"
        + b"\x00\x02t2",  # topic "t2"
    ),
    (
        METADATA_V0,
        MetadataRequest(()),
        HEADER_METADATA + b"\x00\x00\x00\x00",  # topics count 0: every topic
    ),
    (
        PRODUCE_V0,
        ProduceRequest(-1, 1500, (ProduceTopic("t", (ProducePartition(2, ENTRY),)),)),
        b"\x00\x00"  # api_key 0 = Produce
        b"\x00\x00"  # api_version 0
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x07rdkafka"  # client_id
        b"\xff\xff"  # required_acks -1
        b"\x00\x00\x05\xdc"  # timeout 1500 ms
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x01"  # partitions count 1
        b"\x00\x00\x00\x02"  # partition 2
        b"\x00\x00\x00\x1c" + ENTRY,  # message set size 28  # message set
    ),
    (
        FETCH_V0,
        FetchRequest(-1, 100, 1, (FetchTopic("t", (FetchPartition(0, 42, 65536),)),)),
        b"\x00\x01"  # api_key 1 = Fetch
        b"\x00\x00"  # api_version 0
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x07rdkafka"  # client_id
        b"\xff\xff\xff\xff"  # replica_id -1: a client
        b"\x00\x00\x00\x64"  # max_wait_time 100 ms
        b"\x00\x00\x00\x01"  # min_bytes 1
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x01"  # partitions count 1
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # fetch_offset 42
        b"\x00\x01\x00\x00",  # max_bytes 65536
    ),
    (
        OFFSETS_V0,
        OffsetsRequest(-1, (OffsetsTopic("t", (OffsetsPartition(0, -2, 1),)),)),
        b"\x00\x02"  # api_key 2 = Offsets
        b"\x00\x00"  # api_version 0
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x07rdkafka"  # client_id
        b"\xff\xff\xff\xff"  # replica_id -1
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x01"  # partitions count 1
        b"\x00\x00\x00\x00"  # partition 0
        b"\xff\xff\xff\xff\xff\xff\xff\xfe"  # time -2: earliest
        b"\x00\x00\x00\x01",  # max_number_of_offsets 1
    ),
    (
        CONSUMER_METADATA_V0,
        ConsumerMetadataRequest("g"),
        b"\x00\x0a"  # api_key 10 = ConsumerMetadata
        b"\x00\x00"  # api_version 0
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x07rdkafka"  # client_id
        b"\x00\x01g",  # group "g"
    ),
    (
        OFFSET_COMMIT_V0,
        OffsetCommitRequestV0("g", (CommitTopicV0("t", (CommitPartitionV0(0, 5, "m"),)),)),
        b"\x00\x08"  # api_key 8 = OffsetCommit
        b"\x00\x00"  # api_version 0
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x07rdkafka"  # client_id
        b"\x00\x01g"  # group "g"
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x01"  # partitions count 1
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x05"  # offset 5
        b"\x00\x01m",  # metadata "m"
    ),
    (
        OFFSET_COMMIT_V1,
        OffsetCommitRequestV1(
            "g", -1, "", (CommitTopicV1("t", (CommitPartitionV1(0, 5, -1, None),)),)
        ),
        b"\x00\x08"  # api_key 8 = OffsetCommit
        b"\x00\x01"  # api_version 1
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x07rdkafka"  # client_id
        b"\x00\x01g"  # group "g"
        b"\xff\xff\xff\xff"  # generation_id -1: no group management
        b"\x00\x00"  # consumer_id ""
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x01"  # partitions count 1
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x05"  # offset 5
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # timestamp -1: the broker's receive time
        b"\xff\xff",  # metadata null
    ),
    (
        OFFSET_FETCH_V1,
        OffsetFetchRequest("g", (OffsetFetchTopic("t", (0, 3)),)),
        b"\x00\x09"  # api_key 9 = OffsetFetch
        b"\x00\x01"  # api_version 1
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x07rdkafka"  # client_id
        b"\x00\x01g"  # group "g"
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x02"  # partitions count 2
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x03",  # partition 3
    ),
]

RESPONSES: list[tuple[Any, Any, bytes]] = [
    (
        METADATA_V0,
        MetadataResponse(
            (Broker(0, "h0", 9092), Broker(1, "h1", 9093)),
            (
                TopicMetadata(0, "t", (PartitionMetadata(0, 0, 1, (1, 0), (1,)),)),
                TopicMetadata(3, "gone", ()),
            ),
        ),
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x00\x00\x02"  # brokers count 2
        b"\x00\x00\x00\x00"  # node_id 0
        b"\x00\x02h0"  # host "h0"
        b"\x00\x00\x23\x84"  # port 9092
        b"\x00\x00\x00\x01"  # node_id 1
        b"\x00\x02h1"  # host "h1"
        b"\x00\x00\x23\x85"  # port 9093
        b"\x00\x00\x00\x02"  # topics count 2
        b"\x00\x00"  # topic error 0
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x01"  # partitions count 1
        b"\x00\x00"  # partition error 0
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x01"  # leader 1
        b"\x00\x00\x00\x02"  # replicas count 2
        b"\x00\x00\x00\x01"  # replica 1
        b"\x00\x00\x00\x00"  # replica 0
        b"\x00\x00\x00\x01"  # isr count 1
        b"\x00\x00\x00\x01"  # isr 1
        b"\x00\x03"  # topic error 3 UnknownTopicOrPartition
        b"\x00\x04gone"  # topic "gone"
        b"\x00\x00\x00\x00",  # partitions count 0
    ),
    (
        PRODUCE_V0,
        ProduceResponse(
            (ProduceResponseTopic("t", (ProduceResult(0, 0, 17), ProduceResult(1, 6, -1))),)
        ),
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x02"  # partitions count 2
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x00\x00\x00\x00\x11"  # offset 17 (of the set's first message)
        b"\x00\x00\x00\x01"  # partition 1
        b"\x00\x06"  # error 6 NotLeaderForPartition
        b"\xff\xff\xff\xff\xff\xff\xff\xff",  # offset -1
    ),
    (
        FETCH_V0,
        FetchResponse((FetchResponseTopic("t", (FetchedPartition(0, 0, 1, ENTRY),)),)),
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x01"  # partitions count 1
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x00\x00\x00\x00\x01"  # high watermark 1
        b"\x00\x00\x00\x1c" + ENTRY,  # message set size 28  # message set
    ),
    (
        OFFSETS_V0,
        OffsetsResponse((OffsetsResponseTopic("t", (PartitionOffsets(0, 0, (40, 0)),)),)),
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x01"  # partitions count 1
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x02"  # offsets count 2
        b"\x00\x00\x00\x00\x00\x00\x00\x28"  # offset 40 (newest first)
        b"\x00\x00\x00\x00\x00\x00\x00\x00",  # offset 0
    ),
    (
        CONSUMER_METADATA_V0,
        ConsumerMetadataResponse(0, 2, "h2", 9094),
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x02"  # coordinator_id 2
        b"\x00\x02h2"  # coordinator_host "h2"
        b"\x00\x00\x23\x86",  # coordinator_port 9094
    ),
    (
        OFFSET_COMMIT_V1,
        OffsetCommitResponse(
            (CommitResponseTopic("t", (CommitResult(0, 0), CommitResult(1, 12))),)
        ),
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x02"  # partitions count 2
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x01"  # partition 1
        b"\x00\x0c",  # error 12 OffsetMetadataTooLarge
    ),
    (
        OFFSET_FETCH_V0,
        OffsetFetchResponse(
            (
                OffsetFetchResponseTopic(
                    "t", (FetchedOffset(0, 5, "m", 0), FetchedOffset(1, -1, "", 0))
                ),
            )
        ),
        b"\x00\x00\x00\x07"  # correlation_id 7
        b"\x00\x00\x00\x01"  # topics count 1
        b"\x00\x01t"  # topic "t"
        b"\x00\x00\x00\x02"  # partitions count 2
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x05"  # offset 5
        b"\x00\x01m"  # metadata "m"
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x01"  # partition 1
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # offset -1: none stored
        b"\x00\x00"  # metadata ""
        b"\x00\x00",  # error 0
    ),
]


def _id(case: tuple[Any, Any, bytes]) -> str:
    return f"{case[0].label}-{type(case[1]).__name__}-{len(case[2])}"


@pytest.mark.parametrize("case", REQUESTS, ids=_id)
def test_request_bytes_both_ways(case: tuple[Any, Any, bytes]) -> None:
    api, value, frame = case
    assert encode_request(api, value, 7, "rdkafka") == sized(frame)
    decoded = decode_request(frame)
    assert decoded.header == (api.key, api.version, 7, "rdkafka")
    assert decoded.api is api
    assert _plain(decoded.body) == value


@pytest.mark.parametrize("case", RESPONSES, ids=_id)
def test_response_bytes_both_ways(case: tuple[Any, Any, bytes]) -> None:
    api, value, frame = case
    assert encode_response(api, 7, value) == sized(frame)
    correlation_id, decoded = decode_response(api, frame)
    assert correlation_id == 7
    assert _plain(decoded) == value


def _plain(value: Any) -> Any:
    """`value` with the views a decoder returns turned into bytes, for comparison."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, tuple):
        items = [_plain(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def test_the_table_of_apis_is_what_0_8_2_serves() -> None:
    assert sorted(APIS) == [(0, 0), (1, 0), (2, 0), (3, 0), (8, 0), (8, 1), (9, 0), (9, 1), (10, 0)]
    assert [k.value for k in ApiKey] == list(range(11))


def test_offset_fetch_v0_and_v1_differ_only_in_the_version() -> None:
    body = OffsetFetchRequest("g", (OffsetFetchTopic("t", (0,)),))
    v0 = encode_request(OFFSET_FETCH_V0, body, 1, "c")
    v1 = encode_request(OFFSET_FETCH_V1, body, 1, "c")
    assert v0[:6] + b"\x00\x01" + v0[8:] == v1


def test_null_client_id_is_read_as_none() -> None:
    frame = (
        b"\x00\x03"  # api_key 3
        b"\x00\x00"  # api_version 0
        b"\x00\x00\x00\x01"  # correlation_id 1
        b"\xff\xff"  # client_id null
        b"\x00\x00\x00\x00"  # topics count 0
    )
    assert decode_request(frame).header.client_id is None
    assert encode_request(METADATA_V0, MetadataRequest(()), 1, None) == sized(frame)


def test_fetch_response_parts_leave_the_callers_handle_in_place() -> None:
    class Region:
        size = 28

    region = Region()
    value = FetchResponse((FetchResponseTopic("t", (FetchedPartition(0, 0, 1, region),)),))
    parts = encode_response_parts(FETCH_V0, 7, value)
    assert parts[-1] is region
    head = b"".join(p for p in parts[:-1] if isinstance(p, bytes))
    assert head + ENTRY == sized(RESPONSES[2][2])
    with pytest.raises(ValueError, match="encode_response_parts"):
        encode_response(FETCH_V0, 7, value)


def test_encoder_names_the_field_of_a_bad_value() -> None:
    bad = ProduceRequest(1, 10, (ProduceTopic("t", (ProducePartition(2**31, ENTRY),)),))
    with pytest.raises(
        ValueError,
        match=r"Produce v0 request: topics\[0\]\.partitions\[0\]\.partition 2147483648 does not fit an int32",
    ):
        encode_request(PRODUCE_V0, bad, 1, "c")


# ---------------------------------------------------------------------------------------
# Malformed requests: one clear line naming the API and the field, nothing else escapes.


@pytest.mark.parametrize("case", REQUESTS, ids=_id)
def test_every_cut_of_a_request_is_refused_naming_the_api(case: tuple[Any, Any, bytes]) -> None:
    api, _, frame = case
    for cut in range(len(frame)):
        with pytest.raises(InvalidRequestError) as caught:
            decode_request(frame[:cut])
        message = str(caught.value)
        if cut >= len(HEADER_METADATA):  # past the header: the API is known
            assert message.startswith(f"{api.label} request from client 'rdkafka': "), message
        else:
            assert message.startswith("0.8 request header: "), message
        assert any(
            words in message for words in ("cut off", "runs past the end", "needs at least")
        ), message


def test_cut_produce_names_the_field_and_its_indexes() -> None:
    frame = REQUESTS[2][2]
    with pytest.raises(InvalidRequestError) as caught:
        decode_request(frame[:-1])
    assert str(caught.value) == (
        "Produce v0 request from client 'rdkafka': topics[0].partitions[0].messages length 28 "
        f"at byte {len(frame) - 32} runs past the end of the request (27 bytes remain)"
    )


@pytest.mark.parametrize(
    ("where", "count"), [("topics", 0x7FFFFFFF), ("partitions", 0x7FFFFFFF), ("topics", 1_000_000)]
)
def test_an_absurd_array_count_fails_before_allocating(where: str, count: int) -> None:
    frame = bytearray(REQUESTS[3][2])  # Fetch: topics count at byte 29, partitions count at 36
    at = 29 if where == "topics" else 36
    frame[at : at + 4] = count.to_bytes(4, "big")
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRequestError) as caught:
            decode_request(bytes(frame))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # nothing sized by the count was allocated
    path = "topics" if where == "topics" else "topics[0].partitions"
    assert (
        f"Fetch v0 request from client 'rdkafka': {path} count {count} at byte {at} needs at least"
        in str(caught.value)
    )


@pytest.mark.parametrize(
    ("at", "value", "expected"),
    [
        (33, b"\xff\xfe", "topics[0].topic length -2 at byte 33 is negative"),
        (33, b"\xff\xff", "topics[0].topic length -1 at byte 33 is negative (null)"),
        (29, b"\xff\xff\xff\xfe", "topics count -2 at byte 29 is negative"),
        (29, b"\xff\xff\xff\xff", "topics count -1 at byte 29 is negative"),
    ],
)
def test_bad_lengths_and_counts_are_named(at: int, value: bytes, expected: str) -> None:
    frame = bytearray(REQUESTS[3][2])
    frame[at : at + len(value)] = value
    with pytest.raises(InvalidRequestError) as caught:
        decode_request(bytes(frame))
    assert str(caught.value) == f"Fetch v0 request from client 'rdkafka': {expected}"


def test_negative_message_set_size_is_refused() -> None:
    frame = bytearray(REQUESTS[2][2])
    frame[38:42] = b"\xff\xff\xff\xff"  # message set size -1
    with pytest.raises(
        InvalidRequestError,
        match=r"topics\[0\]\.partitions\[0\]\.messages size -1 at byte 38 is negative",
    ):
        decode_request(bytes(frame))


def test_bytes_after_the_last_field_are_refused() -> None:
    with pytest.raises(
        InvalidRequestError,
        match=r"^Metadata v0 request from client 'rdkafka': 3 unexpected bytes after the last field, from byte 29 to 32$",
    ):
        decode_request(REQUESTS[0][2] + b"xyz")


def test_topic_that_is_not_utf8_is_refused() -> None:
    frame = HEADER_METADATA + b"\x00\x00\x00\x01" + b"\x00\x02\xff\xfe"
    with pytest.raises(
        InvalidRequestError,
        match=r"topics\[0\] at byte 21 is not valid UTF-8 \(byte 23: invalid start byte\)",
    ):
        decode_request(frame)


@pytest.mark.parametrize(
    ("key", "version", "name"),
    [
        (18, 3, "unknown"),
        (4, 0, "LEADER_AND_ISR"),
        (0, 1, "PRODUCE"),
        (3, 1, "METADATA"),
        (-1, 0, "unknown"),
    ],
)
def test_unknown_key_or_version_names_the_client_and_the_key(
    key: int, version: int, name: str
) -> None:
    frame = (
        key.to_bytes(2, "big", signed=True)  # api_key
        + version.to_bytes(2, "big")  # api_version
        + b"\x00\x00\x00\x09"  # correlation_id 9
        + b"\x00\x03kcx"  # client_id "kcx"
        + b"anything"  # a body nobody reads
    )
    with pytest.raises(UnsupportedApiError) as caught:
        decode_request(frame)
    assert str(caught.value).startswith(
        f"0.8 request from client 'kcx' (correlation id 9): api key {key} ({name}) version {version} is not served"
    )
    assert caught.value.header.client_id == "kcx"


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (9, "0.8 request size 9 is under the 10 bytes of a request header"),
        (-5, "0.8 request size -5 is under"),
        (1000, "0.8 request size 1000 is over socket.request.max.bytes (999)"),
    ],
)
def test_frame_size_bounds(size: int, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        decode_frame_size(size.to_bytes(4, "big", signed=True), 999)
    assert decode_frame_size(MIN_REQUEST_SIZE.to_bytes(4, "big"), 999) == MIN_REQUEST_SIZE


def test_header_alone_decodes_and_says_where_the_body_starts() -> None:
    header, start = decode_header(REQUESTS[0][2])
    assert header == (3, 0, 7, "rdkafka") and start == len(HEADER_METADATA)


def test_malformed_response_is_named() -> None:
    frame = RESPONSES[0][2]
    with pytest.raises(
        MalformedResponseError,
        match=r"^Metadata v0 response \(correlation id 7\): topics\[0\]\.partitions\[0\]\.isr",
    ):
        decode_response(METADATA_V0, frame[:-20])
    with pytest.raises(MalformedResponseError, match="has no room for its correlation id"):
        decode_response(METADATA_V0, b"\x00\x00")


# ---------------------------------------------------------------------------------------
# Error codes


def test_codes_agree_with_0_7_where_they_mean_the_same() -> None:
    for cls in (
        errors07.UnknownError,
        errors07.OffsetOutOfRangeError,
        errors07.InvalidMessageError,
        errors07.WrongPartitionError,
        errors07.InvalidFetchSizeError,
    ):
        assert errors.code08(cls("x")) == cls.code


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (errors07.NotLeaderForPartitionError("x"), 6),
        (errors07.LeaderNotAvailableError("x"), 5),
        (errors07.RequestTimedOutError("x"), 7),
        (errors07.MessageSizeTooLargeError("x"), 10),
        (errors07.InflatedSizeTooLargeError("x"), 10),
        (errors07.CorruptMessageError("x"), 2),
        (errors07.InvalidTopicError("x"), 17),
        (errors07.NotEnoughReplicasError("x"), 19),
        (errors07.NotEnoughReplicasAfterAppendError("x"), 20),
        (errors07.StorageError("x"), -1),
        (errors07.FencedLeaderEpochError("x"), -1),
        (errors.OffsetMetadataTooLargeError("x"), 12),
        (errors.ConsumerCoordinatorNotAvailableError("x"), 15),
        (KeyError("x"), -1),
    ],
)
def test_code08_of_the_projects_exceptions(exc: BaseException, code: int) -> None:
    assert errors.code08(exc) == code


def test_error_for_code08_is_the_projects_class_where_shared() -> None:
    assert type(errors.error_for_code08(6)) is errors07.NotLeaderForPartitionError
    assert type(errors.error_for_code08(3)) is errors07.WrongPartitionError
    assert type(errors.error_for_code08(16)) is errors.NotCoordinatorForConsumerError
    assert type(errors.error_for_code08(99)) is errors07.UnknownError
    assert "0.8 error code 16, NOT_COORDINATOR_FOR_CONSUMER" in str(errors.error_for_code08(16))
    for code in errors.Code:
        if code != errors.Code.NONE:
            assert errors.code08(errors.error_for_code08(code)) == code


def test_0_8_only_errors_are_unknown_on_the_0_7_port() -> None:
    assert errors07.error_code(errors.NotCoordinatorForConsumerError("x")) == -1


def test_module_exports() -> None:
    assert apis.api_name(3) == "METADATA" and apis.api_name(18) == "unknown"
