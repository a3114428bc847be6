"""Requests and responses, byte by byte (protocol/requests.py, responses.py, wire.py).

Expected frames are written out field by field with a comment per field, so the wire format
can be read here without the code.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logbroker.protocol import native
from logbroker.protocol.errors import (
    InvalidMessageError,
    InvalidRequestError,
    InvalidTopicError,
    LogbrokerError,
    OffsetOutOfRangeError,
    UnknownError,
    WrongPartitionError,
)
from logbroker.protocol.message import encode_message
from logbroker.protocol.message_set import build_message_set, validate_python
from logbroker.protocol.replication import (
    EpochQuery,
    OffsetsForLeaderEpochRequest,
    ReplicaFetch,
    ReplicaFetchRequest,
)
from logbroker.protocol.requests import (
    DEFAULT_MAX_SOCKET_REQUEST_BYTES,
    EARLIEST_TIME,
    LATEST_TIME,
    RANDOM_PARTITION,
    AckedProduceRequest,
    CreateTopicRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    Request,
    RequestType,
    WaitingFetchRequest,
    decode_produce_fast,
    decode_produce_fast_python,
    decode_request,
    decode_request_size,
    encode_produce_frame,
    encode_produce_set_python,
    encode_request,
    produce_frame_prefix,
    produce_run,
    produce_run_python,
)
from logbroker.protocol.responses import (
    REASON_MAX_BYTES,
    FetchedSet,
    FetchResponse,
    MalformedResponseError,
    Metadata,
    PartitionMetadata,
    ProduceResult,
    TopicMetadata,
    decode_acked_produce_response,
    decode_create_topic_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
    decode_offsets_response,
    decode_response_size,
    encode_acked_produce_response,
    encode_error_response,
    encode_fetch_response_header,
    encode_metadata_response,
    encode_multifetch_response,
    encode_offsets_response,
    encode_refusal,
)
from logbroker.protocol.topics import MAX_TOPIC_LENGTH

# One magic-0 message with the payload b"hi": the codec treats message sets as opaque bytes.
MSG = (
    b"\x00\x00\x00\x07"  # entry size 7
    b"\x00"  # magic 0
    b"\xd8\x93\x2a\xac"  # CRC32 of b"hi"
    b"hi"  # payload
)


def body(frame: bytes) -> memoryview:
    """The frame without its int32 size, as the broker hands it to decode_request."""
    return memoryview(frame)[4:]


def test_message_fixture_is_a_real_message() -> None:
    assert encode_message(b"hi", magic=0) == MSG


def test_constants() -> None:
    assert DEFAULT_MAX_SOCKET_REQUEST_BYTES == 104857600
    assert (LATEST_TIME, EARLIEST_TIME, RANDOM_PARTITION) == (-1, -2, -1)
    assert [t.value for t in RequestType] == list(range(11))


# ---------------------------------------------------------------------------------------
# Requests, byte by byte


def test_produce_frame() -> None:
    req = ProduceRequest("test", RANDOM_PARTITION, MSG)
    frame = (
        b"\x00\x00\x00\x1b"  # size = 2 + 25
        b"\x00\x00"  # request type 0 = PRODUCE
        b"\x00\x04"  # topic length 4
        b"test"  # topic
        b"\xff\xff\xff\xff"  # partition -1 = random
        b"\x00\x00\x00\x0b" + MSG  # message set size 11  # message set
    )
    assert encode_request(req) == frame
    assert decode_request(body(frame)) == req


def test_produce_message_set_is_a_zero_copy_slice_of_the_frame() -> None:
    frame = bytearray(encode_request(ProduceRequest("test", 0, MSG)))
    view = memoryview(frame)[4:]
    req = decode_request(view)
    assert isinstance(req, ProduceRequest)
    assert isinstance(req.messages, memoryview)
    assert req.messages.obj is frame
    frame[-1:] = b"!"  # a change to the frame shows through the slice
    assert bytes(req.messages)[-1:] == b"!"


def test_fetch_frame() -> None:
    req = FetchRequest("test", 3, 1024, 300 * 1024)
    frame = (
        b"\x00\x00\x00\x18"  # size = 2 + 22
        b"\x00\x01"  # request type 1 = FETCH
        b"\x00\x04"  # topic length 4
        b"test"  # topic
        b"\x00\x00\x00\x03"  # partition 3
        b"\x00\x00\x00\x00\x00\x00\x04\x00"  # offset 1024
        b"\x00\x04\xb0\x00"  # max size 307200
    )
    assert encode_request(req) == frame
    assert decode_request(body(frame)) == req


def test_topic_length_counts_utf8_bytes() -> None:
    # The wire format counts bytes (0.7 wrote any UTF-8); the name rule, checked by default,
    # allows only ASCII, so a broker decodes such a name and then refuses it by name.
    req = FetchRequest("é", 0, 0, 1)
    frame = (
        b"\x00\x00\x00\x16"  # size = 2 + 20
        b"\x00\x01"  # request type 1 = FETCH
        b"\x00\x02"  # topic length 2: bytes, not characters
        b"\xc3\xa9"  # topic "é" in UTF-8
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"  # offset 0
        b"\x00\x00\x00\x01"  # max size 1
    )
    assert encode_request(req, validate_topics=False) == frame
    assert decode_request(body(frame), validate_topics=False) == req
    with pytest.raises(InvalidTopicError, match="'é' contains the illegal character 'é'"):
        decode_request(body(frame))
    with pytest.raises(InvalidTopicError, match="ASCII letters, digits"):
        encode_request(req)


def test_multifetch_frame() -> None:
    req = MultiFetchRequest((FetchRequest("a", 0, 0, 100), FetchRequest("bc", 1, 7, 200)))
    frame = (
        b"\x00\x00\x00\x2b"  # size = 2 + 41
        b"\x00\x02"  # request type 2 = MULTIFETCH
        b"\x00\x02"  # count 2
        b"\x00\x01"  # fetch 1: topic length 1
        b"a"  # topic
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"  # offset 0
        b"\x00\x00\x00\x64"  # max size 100
        b"\x00\x02"  # fetch 2: topic length 2
        b"bc"  # topic
        b"\x00\x00\x00\x01"  # partition 1
        b"\x00\x00\x00\x00\x00\x00\x00\x07"  # offset 7
        b"\x00\x00\x00\xc8"  # max size 200
    )
    assert encode_request(req) == frame
    assert decode_request(body(frame)) == req


def test_multiproduce_frame() -> None:
    req = MultiProduceRequest((ProduceRequest("a", 0, MSG), ProduceRequest("b", 2, b"")))
    frame = (
        b"\x00\x00\x00\x25"  # size = 2 + 35
        b"\x00\x03"  # request type 3 = MULTIPRODUCE
        b"\x00\x02"  # count 2
        b"\x00\x01"  # produce 1: topic length 1
        b"a"  # topic
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x0b"  # message set size 11
        + MSG  # message set
        + b"\x00\x01"  # produce 2: topic length 1
        b"b"  # topic
        b"\x00\x00\x00\x02"  # partition 2
        b"\x00\x00\x00\x00"  # message set size 0 (empty set)
    )
    assert encode_request(req) == frame
    assert decode_request(body(frame)) == req


def test_offsets_frame() -> None:
    req = OffsetsRequest("test", 0, EARLIEST_TIME, 10)
    frame = (
        b"\x00\x00\x00\x18"  # size = 2 + 22
        b"\x00\x04"  # request type 4 = OFFSETS
        b"\x00\x04"  # topic length 4
        b"test"  # topic
        b"\x00\x00\x00\x00"  # partition 0
        b"\xff\xff\xff\xff\xff\xff\xff\xfe"  # time -2 = earliest
        b"\x00\x00\x00\x0a"  # max number of offsets 10
    )
    assert encode_request(req) == frame
    assert decode_request(body(frame)) == req


def test_acked_produce_frame() -> None:
    req = AckedProduceRequest(True, (ProduceRequest("a", RANDOM_PARTITION, MSG),))
    frame = (
        b"\x00\x00\x00\x1b"  # size = 2 + 25
        b"\x00\x05"  # request type 5 = PRODUCE_ACK
        b"\x01"  # flags: bit 0 = fsync
        b"\x00\x01"  # count 1
        b"\x00\x01"  # topic length 1
        b"a"  # topic
        b"\xff\xff\xff\xff"  # partition -1 = random
        b"\x00\x00\x00\x0b" + MSG  # message set size 11  # message set
    )
    assert encode_request(req) == frame
    assert decode_request(body(frame)) == req
    no_sync = encode_request(req._replace(fsync=False))
    assert no_sync[6:7] == b"\x00"  # flags 0
    assert decode_request(body(no_sync)) == req._replace(fsync=False)


def test_waiting_fetch_frame() -> None:
    req = WaitingFetchRequest(500, 1, (FetchRequest("a", 0, 0, 100),))
    frame = (
        b"\x00\x00\x00\x1f"  # size = 2 + 29
        b"\x00\x06"  # request type 6 = FETCH_WAIT
        b"\x00\x00\x01\xf4"  # max wait 500 ms
        b"\x00\x00\x00\x01"  # min bytes 1
        b"\x00\x01"  # count 1
        b"\x00\x01"  # topic length 1
        b"a"  # topic
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"  # offset 0
        b"\x00\x00\x00\x64"  # max size 100
    )
    assert encode_request(req) == frame
    assert decode_request(body(frame)) == req


def test_metadata_frames() -> None:
    every = MetadataRequest(())
    frame = (
        b"\x00\x00\x00\x04"  # size = 2 + 2
        b"\x00\x07"  # request type 7 = METADATA
        b"\x00\x00"  # count 0 = every topic
    )
    assert encode_request(every) == frame
    assert decode_request(body(frame)) == every
    two = MetadataRequest(("a", "bc"))
    frame = (
        b"\x00\x00\x00\x0b"  # size = 2 + 9
        b"\x00\x07"  # request type 7 = METADATA
        b"\x00\x02"  # count 2
        b"\x00\x01"  # topic length 1
        b"a"  # topic
        b"\x00\x02"  # topic length 2
        b"bc"  # topic
    )
    assert encode_request(two) == frame
    assert decode_request(body(frame)) == two


def test_request_type_property_matches_the_frame() -> None:
    for req in SAMPLE_REQUESTS:
        assert int.from_bytes(encode_request(req)[4:6], "big") == req.request_type


def test_decode_accepts_bytes_bytearray_and_memoryview() -> None:
    frame = encode_request(FetchRequest("t", 0, 0, 1))
    for buf in (frame[4:], bytearray(frame[4:]), memoryview(frame)[4:]):
        assert decode_request(buf) == FetchRequest("t", 0, 0, 1)


SAMPLE_REQUESTS: list[Request] = [
    ProduceRequest("t", 0, MSG),
    FetchRequest("t", 0, 0, 100),
    MultiFetchRequest((FetchRequest("t", 0, 0, 100),)),
    MultiProduceRequest((ProduceRequest("t", 0, MSG),)),
    OffsetsRequest("t", 0, LATEST_TIME, 1),
    AckedProduceRequest(False, (ProduceRequest("t", 0, MSG),)),
    WaitingFetchRequest(0, 0, (FetchRequest("t", 0, 0, 100),)),
    MetadataRequest(("t",)),
    AckedProduceRequest(False, (ProduceRequest("t", 0, MSG),), True, 5000),
    ReplicaFetchRequest(2, 500, 1, (ReplicaFetch("t", 0, 41230, 1 << 20, 3),)),
    OffsetsForLeaderEpochRequest((EpochQuery("t", 0, 3),)),
]


# ---------------------------------------------------------------------------------------
# Malformed requests: each shape raises InvalidRequestError naming the field and byte.

PRODUCE_HEAD = b"\x00\x00" + b"\x00\x01t"  # type PRODUCE, topic "t" (bytes 0-4)
FETCH_HEAD = b"\x00\x01" + b"\x00\x01t"  # type FETCH, topic "t" (bytes 0-4)
FETCH_BODY = b"\x00\x01t" + bytes(4) + bytes(8) + b"\x00\x00\x00\x64"  # 19 bytes

MALFORMED = [
    # (case, frame body, fragment the message must contain)
    ("empty", b"", "request type (int16) at byte 0 is cut off"),
    ("half a type", b"\x00", "request type (int16) at byte 0 is cut off"),
    ("unknown type", b"\x00\x0b", "unknown request type 11 at byte 0"),
    ("negative type", b"\xff\xff", "unknown request type -1 at byte 0"),
    ("no topic", b"\x00\x00", "PRODUCE: topic length (int16) at byte 2 is cut off"),
    ("null topic", b"\x00\x00\xff\xff", "PRODUCE: topic at byte 2 is null (length -1)"),
    ("negative topic length", b"\x00\x00\xff\xfe", "topic length -2 at byte 2 is negative"),
    (
        "topic past the end",
        b"\x00\x00\x00\x09abc",
        "topic length 9 at byte 2 runs past the end of the request (3 bytes remain)",
    ),
    ("invalid UTF-8", b"\x00\x00\x00\x02\xc3\x28", "topic at byte 2 is not valid UTF-8 (byte 4"),
    ("encoded surrogate", b"\x00\x01\x00\x03\xed\xa0\x80", "topic at byte 2 is not valid UTF-8"),
    ("no partition", PRODUCE_HEAD + b"\x00\x00", "partition (int32) at byte 5 is cut off"),
    (
        "no message set size",
        PRODUCE_HEAD + bytes(4),
        "message set size (int32) at byte 9 is cut off",
    ),
    (
        "negative message set size",
        PRODUCE_HEAD + bytes(4) + b"\xff\xff\xff\xf0",
        "message set size -16 at byte 9 is negative",
    ),
    (
        "message set past the end",
        PRODUCE_HEAD + bytes(4) + b"\x00\x00\x00\x0c" + MSG,
        "message set size 12 at byte 9 runs past the end of the request (11 bytes remain)",
    ),
    (
        "trailing garbage",
        PRODUCE_HEAD + bytes(4) + b"\x00\x00\x00\x0b" + MSG + b"xx",
        "PRODUCE: 2 unexpected bytes after the last field, from byte 24 to 26",
    ),
    ("fetch without offset", FETCH_HEAD + bytes(4) + bytes(7), "offset (int64) at byte 9"),
    ("fetch without max size", FETCH_HEAD + bytes(12) + b"\x00", "max size (int32) at byte 17"),
    ("multifetch without count", b"\x00\x02\x00", "fetch count (int16) at byte 2 is cut off"),
    ("negative count", b"\x00\x02\xff\xff", "MULTIFETCH: fetch count -1 at byte 2 is negative"),
    (
        "count beyond the bytes",
        b"\x00\x02\x7f\xff" + FETCH_BODY,
        "fetch count 32767 at byte 2 needs at least 589806 more bytes, but only 19 remain",
    ),
    (
        "count short of the fetches",
        b"\x00\x02\x00\x01" + FETCH_BODY + FETCH_BODY,
        "MULTIFETCH: 19 unexpected bytes after the last field, from byte 23 to 42",
    ),
    (
        "count over the fetches",
        b"\x00\x02\x00\x02" + FETCH_BODY + FETCH_BODY[:-1],
        "MULTIFETCH, fetch 2 of 2: max size (int32) at byte 38 is cut off",
    ),
    (
        "multiproduce count beyond the bytes",
        b"\x00\x03\x00\x02" + b"\x00\x01t" + bytes(8),
        "produce count 2 at byte 2 needs at least 20 more bytes, but only 11 remain",
    ),
    (
        "second produce past the end",
        b"\x00\x03\x00\x02"
        + b"\x00\x01t"
        + bytes(8)
        + b"\x00\x01t"
        + bytes(4)
        + b"\x00\x00\x00\x05",
        "MULTIPRODUCE, produce 2 of 2: message set size 5 at byte 22 runs past the end",
    ),
    ("offsets without time", b"\x00\x04\x00\x01t" + bytes(4), "time (int64) at byte 9"),
    ("offsets trailing byte", b"\x00\x04\x00\x01t" + bytes(17), "1 unexpected bytes"),
    ("ack without flags", b"\x00\x05", "PRODUCE_ACK: flags (int8) at byte 2 is cut off"),
    ("ack unknown flags", b"\x00\x05\x04\x00\x00", "flags 0x04 at byte 2 set unknown bits"),
    (
        "ack all without its timeout",
        b"\x00\x05\x02\x00",
        "timeout ms (int32) at byte 3 is cut off",
    ),
    (
        "ack all negative timeout",
        b"\x00\x05\x02\xff\xff\xff\xff\x00\x00",
        "timeout ms -1 at byte 3 is negative",
    ),
    ("ack negative flags", b"\x00\x05\x81\x00\x00", "flags 0x81 at byte 2 set unknown bits"),
    ("ack negative count", b"\x00\x05\x00\x80\x00", "produce count -32768 at byte 3 is negative"),
    (
        "waiting fetch negative wait",
        b"\x00\x06\xff\xff\xff\xff" + bytes(6),
        "FETCH_WAIT: max wait ms -1 at byte 2 is negative",
    ),
    (
        "waiting fetch negative min bytes",
        b"\x00\x06" + bytes(4) + b"\x80\x00\x00\x00" + bytes(2),
        "min bytes -2147483648 at byte 6 is negative",
    ),
    ("waiting fetch without count", b"\x00\x06" + bytes(8), "fetch count (int16) at byte 10"),
    (
        "metadata count beyond the bytes",
        b"\x00\x07\x00\x03\x00\x01a",
        "topic count 3 at byte 2 needs at least 6 more bytes, but only 3 remain",
    ),
    (
        "metadata null topic",
        b"\x00\x07\x00\x02\x00\x01a\xff\xff",
        "METADATA, topic 2 of 2: topic at byte 7 is null",
    ),
]


@pytest.mark.parametrize(
    ("frame", "fragment"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_malformed_request(frame: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        decode_request(frame)
    assert fragment in str(info.value)


ILLEGAL_TOPICS = [
    ("empty", b"", "topic at byte 2: topic name is empty"),
    ("dot", b".", "topic name '.' is not allowed"),
    ("dot dot", b"..", "topic name '..' is not allowed"),
    ("slash", b"a/b", "illegal character '/' at position 1"),
    ("backslash", b"a\\b", "illegal character"),
    ("control", b"a\x00", "illegal character"),
    ("too long", b"x" * (MAX_TOPIC_LENGTH + 1), "over the limit"),
    ("emoji", "emoji😀".encode(), "illegal character '😀' at position 5"),
    ("non-ascii letter", "café".encode(), "illegal character 'é' at position 3"),
    ("space", b"page views", "illegal character ' ' at position 4"),
    ("colon", b"a:b", "illegal character ':'"),
]


@pytest.mark.parametrize(
    ("name", "fragment"), [c[1:] for c in ILLEGAL_TOPICS], ids=[c[0] for c in ILLEGAL_TOPICS]
)
def test_illegal_topic_name(name: bytes, fragment: str) -> None:
    frame = b"\x00\x01" + len(name).to_bytes(2, "big") + name + bytes(16)
    with pytest.raises(InvalidTopicError) as info:
        decode_request(frame)
    assert str(info.value).startswith("FETCH: topic at byte 2: ")
    assert fragment in str(info.value)
    # a broker that answers bad names with an error code decodes them all the same
    req = decode_request(frame, validate_topics=False)
    assert isinstance(req, FetchRequest)
    assert req.topic == name.decode()


def test_illegal_topic_inside_a_multiproduce_names_the_item() -> None:
    good = encode_request(ProduceRequest("a", 0, b""))[6:]
    frame = b"\x00\x03\x00\x02" + good + b"\x00\x02.." + bytes(8)
    with pytest.raises(InvalidTopicError, match=r"MULTIPRODUCE, produce 2 of 2: topic at byte"):
        decode_request(frame)


def test_encoder_validates_topics_unless_told_not_to() -> None:
    with pytest.raises(InvalidTopicError):
        encode_request(FetchRequest("a/b", 0, 0, 1))
    frame = encode_request(FetchRequest("a/b", 0, 0, 1), validate_topics=False)
    with pytest.raises(InvalidTopicError):
        decode_request(body(frame))


@pytest.mark.parametrize(
    ("req", "fragment"),
    [
        (FetchRequest("t", 2**31, 0, 1), "partition"),
        (FetchRequest("t", 0, 2**63, 1), "offset"),
        (FetchRequest("t", 0, 0, -(2**31) - 1), "max_size"),
        (OffsetsRequest("t", 0, -(2**63) - 1, 1), "time"),
        (WaitingFetchRequest(-1, 0, ()), "max_wait_ms"),
        (WaitingFetchRequest(0, -1, ()), "min_bytes"),
        (MultiFetchRequest((FetchRequest("t", 0, 0, 1),) * 32768), "number of fetches"),
        (MetadataRequest(("t",) * 32768), "number of topics"),
    ],
)
def test_encoder_refuses_out_of_range_fields(req: Request, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        encode_request(req)


def test_request_size_prefix() -> None:
    assert decode_request_size(b"\x00\x00\x00\x02") == 2
    assert decode_request_size(b"\x06\x40\x00\x00") == DEFAULT_MAX_SOCKET_REQUEST_BYTES
    for prefix, fragment in [
        (b"\x00\x00\x00\x00", "request size 0 is under 2"),
        (b"\x00\x00\x00\x01", "request size 1 is under 2"),
        (b"\xff\xff\xff\xff", "request size -1 is under 2"),
        (b"\x06\x40\x00\x01", "over max.socket.request.bytes (104857600)"),
        (b"\x00\x00\x00", "prefix is 3 bytes, not 4"),
    ]:
        with pytest.raises(
            InvalidRequestError, match=fragment.replace("(", r"\(").replace(")", r"\)")
        ):
            decode_request_size(prefix)
    with pytest.raises(InvalidRequestError):
        decode_request_size(b"\x00\x00\x01\x00", max_request_bytes=255)


# ---------------------------------------------------------------------------------------
# Responses, byte by byte


def test_fetch_response() -> None:
    header = encode_fetch_response_header(0, len(MSG))
    assert header == (
        b"\x00\x00\x00\x0d"  # size = 2 + 11
        b"\x00\x00"  # error 0
    )  # then the broker sends the 11 bytes of log data itself
    assert decode_fetch_response(header[4:] + MSG) == FetchResponse(0, memoryview(MSG))
    error = encode_fetch_response_header(1, 0)
    assert error == (
        b"\x00\x00\x00\x02"  # size = 2 + 0
        b"\x00\x01"  # error 1 = OffsetOutOfRange
    )
    assert decode_fetch_response(error[4:]) == FetchResponse(1, memoryview(b""))
    assert encode_error_response(-1) == b"\x00\x00\x00\x02\xff\xff"


def test_multifetch_response_parts_leave_the_data_to_the_caller() -> None:
    parts = encode_multifetch_response(
        [FetchedSet(0, 11, "file A"), FetchedSet(3, 0, "unused"), FetchedSet(0, 5, "file B")]
    )
    assert parts == [
        b"\x00\x00\x00\x24"  # total size = 2 + (6 + 11) + (6 + 0) + (6 + 5)
        b"\x00\x00"  # error 0 (always)
        b"\x00\x00\x00\x0d"  # set 1: size = 2 + 11
        b"\x00\x00",  # set 1: error 0
        "file A",  # set 1: 11 bytes, sent by the caller
        b"\x00\x00\x00\x02"  # set 2: size = 2 + 0
        b"\x00\x03"  # set 2: error 3 = WrongPartition
        b"\x00\x00\x00\x07"  # set 3: size = 2 + 5
        b"\x00\x00",  # set 3: error 0
        "file B",  # set 3: 5 bytes, sent by the caller
    ]


def test_multifetch_response_round_trip_with_bytes_data() -> None:
    parts = encode_multifetch_response(
        [FetchedSet(0, len(MSG), MSG), FetchedSet(1, 0, b""), FetchedSet(0, 3, b"abc")]
    )
    wire = b"".join(parts)
    assert decode_response_size(wire[:4]) == len(wire) - 4
    sets = decode_multifetch_response(wire[4:], expected_sets=3)
    assert sets == [FetchResponse(0, memoryview(MSG)), FetchResponse(1, memoryview(b"")),
                    FetchResponse(0, memoryview(b"abc"))]  # fmt: skip
    empty = b"".join(encode_multifetch_response([]))
    assert empty == b"\x00\x00\x00\x02\x00\x00"  # size 2 | error 0, no sets
    assert decode_multifetch_response(empty[4:]) == []


def test_offsets_response() -> None:
    wire = encode_offsets_response([2048, 0])
    assert wire == (
        b"\x00\x00\x00\x16"  # size = 2 + 4 + 16
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x02"  # count 2
        b"\x00\x00\x00\x00\x00\x00\x08\x00"  # offset 2048 (newest first)
        b"\x00\x00\x00\x00\x00\x00\x00\x00"  # offset 0
    )
    assert decode_offsets_response(wire[4:]) == [2048, 0]


def test_acked_produce_response() -> None:
    results = [ProduceResult("a", 2, 0, 1024, 1039), ProduceResult("b", 0, 3, -1, -1)]
    wire = encode_acked_produce_response(results)
    assert wire == (
        b"\x00\x00\x00\x36"  # size = 2 + 2 + 2 * 25
        b"\x00\x00"  # error 0
        b"\x00\x02"  # count 2
        b"\x00\x01"  # result 1: topic length 1
        b"a"  # topic
        b"\x00\x00\x00\x02"  # partition 2 (the one chosen)
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x00\x00\x00\x04\x00"  # appended at offset 1024
        b"\x00\x00\x00\x00\x00\x00\x04\x0f"  # next offset 1039
        b"\x00\x01"  # result 2: topic length 1
        b"b"  # topic
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x03"  # error 3 = WrongPartition
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # offset -1 (error)
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # next offset -1 (error)
    )
    assert decode_acked_produce_response(wire[4:]) == results


def test_metadata_response() -> None:
    topics = (
        TopicMetadata("a", 0, (PartitionMetadata(0, 0, 4096, 4096),)),
        TopicMetadata("b", 6, ()),
    )
    wire = encode_metadata_response(7, topics)
    assert wire == (
        b"\x00\x00\x00\x36"  # size = 2 + 4 + 2 + (9 + 28) + 9
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x07"  # broker id 7
        b"\x00\x02"  # topic count 2
        b"\x00\x01"  # topic 1: topic length 1
        b"a"  # topic
        b"\x00\x00"  # error 0
        b"\x00\x00\x00\x01"  # partition count 1
        b"\x00\x00\x00\x00"  # partition 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"  # earliest offset 0
        b"\x00\x00\x00\x00\x00\x00\x10\x00"  # latest offset 4096
        b"\x00\x00\x00\x00\x00\x00\x10\x00"  # 4096 bytes on disk
        b"\x00\x01"  # topic 2: topic length 1
        b"b"  # topic
        b"\x00\x06"  # error 6 = InvalidTopic
        b"\x00\x00\x00\x00"  # partition count 0
    )
    assert decode_metadata_response(wire[4:]) == Metadata(7, topics)


@pytest.mark.parametrize(
    ("decode", "error"),
    [
        (decode_multifetch_response, OffsetOutOfRangeError),
        (decode_offsets_response, WrongPartitionError),
        (decode_acked_produce_response, UnknownError),
        (decode_metadata_response, UnknownError),
    ],
)
def test_nonzero_outer_error_is_raised_as_its_exception(
    decode: Callable[[bytes], object], error: type[LogbrokerError]
) -> None:
    code = {OffsetOutOfRangeError: 1, WrongPartitionError: 3, UnknownError: -1}[error]
    with pytest.raises(error):
        decode(encode_error_response(code)[4:])


MALFORMED_RESPONSES = [
    ("fetch empty", decode_fetch_response, b"", "FETCH response: error code (int16) at byte 0"),
    (
        "multifetch set size under 2",
        decode_multifetch_response,
        b"\x00\x00" + b"\x00\x00\x00\x01\x00",
        "set 1: set size 1 at byte 2 is under 2",
    ),
    (
        "multifetch set past the end",
        decode_multifetch_response,
        b"\x00\x00" + b"\x00\x00\x00\x09\x00\x00abc",
        "set size 9 at byte 2 runs past the end of the response (5 bytes remain)",
    ),
    (
        "multifetch cut set header",
        decode_multifetch_response,
        b"\x00\x00" + b"\x00\x00",
        "set size (int32) at byte 2 is cut off",
    ),
    (
        "offsets negative count",
        decode_offsets_response,
        b"\x00\x00\xff\xff\xff\xff",
        "offset count -1 at byte 2 is negative",
    ),
    (
        "offsets count beyond the bytes",
        decode_offsets_response,
        b"\x00\x00\x7f\xff\xff\xff" + bytes(8),
        "offset count 2147483647 at byte 2 needs at least 17179869176 more bytes",
    ),
    (
        "offsets trailing bytes",
        decode_offsets_response,
        b"\x00\x00\x00\x00\x00\x01" + bytes(9),
        "1 unexpected bytes after the last field, from byte 14 to 15",
    ),
    (
        "ack null topic",
        decode_acked_produce_response,
        b"\x00\x00\x00\x01\xff\xff" + bytes(22),
        "result 1 of 1: topic at byte 4 is null",
    ),
    (
        "metadata partition count beyond the bytes",
        decode_metadata_response,
        b"\x00\x00" + bytes(4) + b"\x00\x01" + b"\x00\x01a\x00\x00\x00\x00\x00\x02" + bytes(28),
        "topic 1 of 1: partition count 2 at byte 13 needs at least 56 more bytes",
    ),
]


@pytest.mark.parametrize(
    ("decode", "wire", "fragment"),
    [c[1:] for c in MALFORMED_RESPONSES],
    ids=[c[0] for c in MALFORMED_RESPONSES],
)
def test_malformed_response(decode: Callable[[bytes], object], wire: bytes, fragment: str) -> None:
    with pytest.raises(MalformedResponseError) as info:
        decode(wire)
    assert fragment in str(info.value)


def test_multifetch_response_set_count_is_checked() -> None:
    wire = b"".join(encode_multifetch_response([FetchedSet(0, 0, b"")]))
    with pytest.raises(MalformedResponseError, match="1 sets up to byte 8, 2 expected"):
        decode_multifetch_response(wire[4:], expected_sets=2)


def test_response_size_prefix() -> None:
    assert decode_response_size(b"\x00\x00\x00\x02") == 2
    with pytest.raises(MalformedResponseError, match="response size 1 is under 2"):
        decode_response_size(b"\x00\x00\x00\x01")
    with pytest.raises(MalformedResponseError, match="over the limit 100"):
        decode_response_size(b"\x00\x00\x01\x00", max_size=100)


def test_response_encoders_refuse_out_of_range_fields() -> None:
    with pytest.raises(ValueError, match="fetch data size"):
        encode_fetch_response_header(0, -1)
    with pytest.raises(ValueError, match="error code"):
        encode_fetch_response_header(2**15, 0)
    with pytest.raises(ValueError, match="multifetch response size"):
        encode_multifetch_response([FetchedSet(0, 2**30, None)] * 2)
    with pytest.raises(ValueError, match="partition"):
        encode_acked_produce_response([ProduceResult("a", 2**31, 0, 0, 0)])


# ---------------------------------------------------------------------------------------
# Properties: round trips, and the decoders raise nothing but their own errors.

topics = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=12).filter(
    lambda t: t not in (".", "..")
)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
produces = st.builds(ProduceRequest, topics, int32s, st.binary(max_size=40))
fetches = st.builds(FetchRequest, topics, int32s, int64s, int32s)
requests: st.SearchStrategy[Request] = st.one_of(
    produces,
    fetches,
    st.builds(MultiFetchRequest, st.lists(fetches, max_size=4).map(tuple)),
    st.builds(MultiProduceRequest, st.lists(produces, max_size=4).map(tuple)),
    st.builds(OffsetsRequest, topics, int32s, int64s, int32s),
    st.builds(
        AckedProduceRequest,
        st.booleans(),
        st.lists(produces, max_size=4).map(tuple),
        st.just(False),
        st.just(0),
    ),
    st.builds(  # acks=-1: a timeout follows the flags
        AckedProduceRequest,
        st.booleans(),
        st.lists(produces, max_size=4).map(tuple),
        st.just(True),
        st.integers(0, 2**31 - 1),
    ),
    st.builds(
        ReplicaFetchRequest,
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**31 - 1),
        st.lists(
            st.builds(
                ReplicaFetch,
                topics,
                st.integers(0, 2**31 - 1),
                st.integers(0, 2**63 - 1),
                st.integers(0, 2**31 - 1),
                st.integers(-1, 2**31 - 1),
            ),
            max_size=4,
        ).map(tuple),
    ),
    st.builds(
        OffsetsForLeaderEpochRequest,
        st.lists(
            st.builds(EpochQuery, topics, st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1)),
            max_size=4,
        ).map(tuple),
    ),
    st.builds(
        WaitingFetchRequest,
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**31 - 1),
        st.lists(fetches, max_size=4).map(tuple),
    ),
    st.builds(MetadataRequest, st.lists(topics, max_size=4).map(tuple)),
)


def decode_only_raises_request_errors(frame_body: bytes) -> None:
    try:
        result = decode_request(frame_body)
    except (InvalidRequestError, InvalidTopicError) as exc:
        assert "byte" in str(exc)
    else:
        assert isinstance(result, (*SAMPLE_TYPES,))


SAMPLE_TYPES = {type(r) for r in SAMPLE_REQUESTS}


@given(requests)
def test_round_trip(req: Request) -> None:
    frame = encode_request(req)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    assert decode_request(body(frame)) == req


@given(st.binary(max_size=200))
def test_decoder_on_arbitrary_bytes(data: bytes) -> None:
    decode_only_raises_request_errors(data)


@given(st.integers(0, 9), st.binary(max_size=200))
def test_decoder_on_arbitrary_bodies_of_every_type(kind: int, data: bytes) -> None:
    decode_only_raises_request_errors(kind.to_bytes(2, "big") + data)


@settings(max_examples=500)
@given(requests, st.data())
def test_decoder_on_mutated_frames(req: Request, data: st.DataObject) -> None:
    frame = bytearray(encode_request(req)[4:])
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        at = data.draw(st.integers(0, len(frame)))
        if op == "flip" and at < len(frame):
            frame[at] ^= data.draw(st.integers(1, 255))
        elif op == "truncate":
            del frame[at:]
        elif op == "insert":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        else:
            del frame[at : at + data.draw(st.integers(1, 8))]
    decode_only_raises_request_errors(bytes(frame))


response_decoders = st.sampled_from(
    [
        decode_fetch_response,
        decode_multifetch_response,
        decode_offsets_response,
        decode_acked_produce_response,
        decode_metadata_response,
    ]
)


@given(response_decoders, st.binary(max_size=200))
def test_response_decoders_only_raise_their_own_errors(
    decode: Callable[[bytes], object], data: bytes
) -> None:
    try:
        decode(data)
    except MalformedResponseError as exc:
        assert "byte" in str(exc)
    except LogbrokerError:
        assert data[:2] != b"\x00\x00"  # the registered error of a non-zero outer code


def test_create_topic_request_bytes() -> None:
    frame = b"".join(
        [
            b"\x00\x00\x00\x0e",  # size 14: type, topic length, topic, partitions
            b"\x00\x08",  # type 8: CREATE_TOPIC (extension)
            b"\x00\x06",  # topic length 6
            b"clicks",  # topic
            b"\x00\x00\x00\x04",  # partitions 4
        ]
    )
    assert encode_request(CreateTopicRequest("clicks", 4)) == frame
    assert decode_request(frame[4:]) == CreateTopicRequest("clicks", 4)
    with pytest.raises(InvalidRequestError, match="partitions 0 at byte 10 is under 1"):
        decode_request(frame[4:-4] + b"\x00\x00\x00\x00")


LIMIT_REASON = "a topic has 1 to 16 partitions per broker (max.partitions.per.topic), not 20"


def test_create_topic_refusal_bytes_carry_the_reason() -> None:
    reason = LIMIT_REASON.encode()
    wire = b"".join(
        [
            (2 + 2 + len(reason)).to_bytes(4, "big"),  # size: error, reason length, reason
            b"\x00\x03",  # error 3 = WrongPartition
            len(reason).to_bytes(2, "big"),  # reason length (76)
            reason,  # the broker's own words, its own limit in them
        ]
    )
    assert encode_refusal(3, LIMIT_REASON) == wire
    with pytest.raises(WrongPartitionError) as refused:
        decode_create_topic_response(wire[4:])
    assert str(refused.value) == LIMIT_REASON
    with pytest.raises(ValueError, match="not 0"):
        encode_refusal(0, "fine")


def test_a_client_older_than_the_reason_still_raises_the_refusals_code() -> None:
    # Such a client decoded CREATE_TOPIC's answer as METADATA: the outer code comes first
    # and is raised before the reason is looked at.
    with pytest.raises(WrongPartitionError):
        decode_metadata_response(encode_refusal(3, LIMIT_REASON)[4:])
    with pytest.raises(InvalidTopicError):
        decode_metadata_response(encode_refusal(6, "topic name is empty")[4:])


def test_a_broker_older_than_the_reason_is_worded_by_the_client() -> None:
    # It answered METADATA's layout with the code in the topic's entry and no reason.
    old = encode_metadata_response(0, [TopicMetadata("wide", 3, ())])
    with pytest.raises(WrongPartitionError, match=r"1 to its max\.partitions\.per\.topic"):
        decode_create_topic_response(old[4:])
    old = encode_metadata_response(0, [TopicMetadata("a b", 6, ())])
    with pytest.raises(InvalidTopicError, match=r"not a legal topic name .*249 characters"):
        decode_create_topic_response(old[4:])
    with pytest.raises(WrongPartitionError, match=r"max\.partitions\.per\.topic"):
        decode_create_topic_response(encode_error_response(3)[4:])


def test_a_created_topic_decodes_to_its_partitions() -> None:
    made = TopicMetadata(
        "clicks", 0, (PartitionMetadata(0, 0, 0, 0), PartitionMetadata(1, 0, 0, 0))
    )
    assert decode_create_topic_response(encode_metadata_response(4, [made])[4:]) == made
    two = encode_metadata_response(4, [made, made])
    with pytest.raises(MalformedResponseError, match="2 topics in the answer, 1 expected"):
        decode_create_topic_response(two[4:])
    cut = encode_refusal(3, LIMIT_REASON)[4:-1]
    with pytest.raises(MalformedResponseError, match="reason length 76 at byte 2 runs past"):
        decode_create_topic_response(cut)


def test_a_long_reason_is_cut_at_a_character_boundary() -> None:
    wire = encode_refusal(6, "é" * REASON_MAX_BYTES)  # 2 bytes each
    assert len(wire) == 4 + 2 + 2 + REASON_MAX_BYTES
    with pytest.raises(InvalidTopicError) as refused:
        decode_create_topic_response(wire[4:])
    assert str(refused.value) == "é" * (REASON_MAX_BYTES // 2)


def test_fast_produce_frame_matches_the_general_encoder() -> None:
    messages = b"\x00\x00\x00\x06\x01\x00\x00\x00\x00\x00"  # one entry: size 6, magic 1, empty
    fast = encode_produce_frame(produce_frame_prefix("clicks"), 3, messages)
    assert fast == encode_request(ProduceRequest("clicks", 3, messages))
    with pytest.raises(InvalidTopicError):
        produce_frame_prefix("../etc")


def _framed(encode: Callable[..., bytes], *args: object) -> object:
    """A produce frame builder's bytes, or its error."""
    try:
        return encode(*args)
    except (TypeError, ValueError, struct.error, InvalidMessageError) as exc:
        return type(exc), str(exc)


@pytest.mark.skipif(native.COMPILED is None, reason="the _native extension is not built")
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.binary(max_size=40), st.sampled_from([bytes, bytearray, memoryview]))),
    st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31, -(2**31) - 1, True])),
    st.sampled_from(["t", "clicks", "a.b-c_9" * 20]),
    st.integers(0, 4),
)
def test_both_produce_frame_builders_agree(payloads, partition, topic, codec) -> None:
    """encode_produce_set's compiled twin (_native.pyx) and its reference: the same frame, or
    the same error, for any payloads, partitions and codecs; and the frame is the one
    encode_request makes of the same set."""
    assert native.COMPILED is not None
    typed = [kind(payload) for payload, kind in payloads]
    prefix = produce_frame_prefix(topic)
    built = _framed(native.COMPILED.encode_produce_set, prefix, partition, typed, codec)
    assert built == _framed(encode_produce_set_python, prefix, partition, typed, codec)
    again = _framed(native.COMPILED.encode_produce_set, prefix, partition, iter(typed), codec)
    assert again == built  # any iterable, consumed once
    if isinstance(built, bytes) and codec == 0:
        request = ProduceRequest(topic, partition, build_message_set(typed))
        assert built == encode_request(request)
    assert _framed(native.COMPILED.encode_produce_set, "not bytes", 0, typed, codec) == _framed(
        encode_produce_set_python, "not bytes", 0, typed, codec
    )


def _decoded(decode: Callable[[object], object], body: object) -> object:
    """What a fast produce decoder says of `body`: None, the request with its messages' type
    and bytes, or its error."""
    try:
        request = decode(body)
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)
    if request is None:
        return None
    assert isinstance(request, ProduceRequest)
    messages = request.messages
    return request.topic, request.partition, type(messages), bytes(messages)


@pytest.mark.skipif(native.COMPILED is None, reason="the _native extension is not built")
@settings(max_examples=400, deadline=None)
@given(
    st.binary(max_size=64),
    st.integers(-(2**31), 2**31 - 1),
    st.text(max_size=20),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3),
    st.integers(0, 8),
    st.sampled_from(["view", "bytes", "bytearray", "strided", "ints"]),
)
def test_both_fast_produce_decoders_agree_on_generated_and_damaged_frames(
    messages, partition, topic, flips, cut, kind
) -> None:
    """decode_produce_fast's compiled twin (_native.pyx) and its reference: the same request
    or None, for well-formed frames, frames with bytes changed or cut off, and other buffers."""
    assert native.COMPILED is not None
    frame = encode_request(ProduceRequest(topic, partition, messages), validate_topics=False)
    body = bytearray(frame[4 : len(frame) - cut])
    for at, value in flips:
        if body:
            body[at % len(body)] = value
    given_body: object = {
        "view": memoryview(bytes(body)),
        "bytes": bytes(body),
        "bytearray": body,
        "strided": memoryview(bytes(body) * 2)[::2],
        "ints": memoryview(bytes(body[: len(body) // 4 * 4])).cast("i"),
    }[kind]
    compiled = _decoded(native.COMPILED.decode_produce_fast, given_body)
    assert compiled == _decoded(decode_produce_fast_python, given_body)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(-(2**31), 2**31 - 1), st.text(max_size=20))
def test_fast_produce_decoder_agrees_with_the_general_one(messages, partition, topic) -> None:
    frame = encode_request(ProduceRequest(topic, partition, messages), validate_topics=False)
    body = frame[4:]
    assert decode_produce_fast(body) == decode_request(body, validate_topics=False)
    for cut in (1, 5, len(body) // 2):  # damaged frames are left to the general decoder
        fast = decode_produce_fast(body[:-cut])
        assert fast is None or fast == decode_request(body[:-cut], validate_topics=False)


# -- produce_run: a read's worth of PRODUCE frames to one partition -----------------------

_RUN_PAYLOADS = st.lists(st.binary(max_size=30), min_size=0, max_size=4)


@st.composite
def _frame_runs(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """Frames as a socket read brings them: PRODUCEs to one or two partitions (plain,
    compressed, empty, with a payload over the limit or with bytes changed), now and then
    another request, the last frame maybe cut; and where to start and stop reading."""
    frames = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["plain", "plain", "plain", "gzip", "fetch", "damaged"]))
        topic = draw(st.sampled_from(["t", "u", "é"]))
        partition = draw(st.sampled_from([0, 0, 1, -1]))
        if kind == "fetch":
            fetch = FetchRequest(topic, partition, 0, 100)
            frames.append(encode_request(fetch, validate_topics=False))
            continue
        codec = 1 if kind == "gzip" else 0
        messages = bytearray(build_message_set(draw(_RUN_PAYLOADS), codec))
        if kind == "damaged" and messages:
            at = draw(st.integers(0, len(messages) - 1))
            messages[at] ^= draw(st.integers(1, 255))
        produce = ProduceRequest(topic, partition, bytes(messages))
        frames.append(encode_request(produce, validate_topics=False))
    data = b"".join(frames)
    cut = draw(st.integers(0, min(len(data), 12)))
    start = draw(st.integers(0, 4)) if data else 0
    return b"\x00" * start + data, start, len(data) + start - cut


def _run(
    function: Callable[..., object], frames: memoryview, pos: int, end: int, limit: int
) -> object:
    """What a produce_run says: None, or the run with its sets' bytes and Validations."""
    run = function(frames, pos, end, DEFAULT_MAX_SOCKET_REQUEST_BYTES, limit)
    if run is None:
        return None
    topic, partition, stop, sets = run  # type: ignore[misc]
    return topic, partition, stop, [(type(m), bytes(m), check) for m, check in sets]


@pytest.mark.skipif(native.COMPILED is None, reason="the _native extension is not built")
@settings(max_examples=400, deadline=None)
@given(_frame_runs(), st.sampled_from([10, 1_000_000]))
def test_both_produce_runs_agree_on_generated_and_damaged_frames(case, limit) -> None:
    """produce_run's compiled twin (_native.pyx) and its reference: the same run (topic,
    partition, end, the same slices and Validations) or None, for the same frames."""
    assert native.COMPILED is not None
    data, pos, end = case
    frames = memoryview(data)
    compiled = _run(native.COMPILED.produce_run, frames, pos, end, limit)
    assert compiled == _run(produce_run_python, frames, pos, end, limit)


@settings(max_examples=300, deadline=None)
@given(_frame_runs(), st.sampled_from([10, 1_000_000]))
def test_a_produce_run_is_what_the_broker_would_append_of_each_frame(case, limit) -> None:
    """The run is the frames, one after another, that decode_request reads as PRODUCEs to
    the first one's partition, each set validated as the broker's produce does, with a
    valid prefix, no compressed wrapper and no payload over the limit; it stops at the
    first frame that is not one, or that is not whole."""
    data, pos, end = case
    run = produce_run(memoryview(data), pos, end, DEFAULT_MAX_SOCKET_REQUEST_BYTES, limit)
    expected = []
    at = pos
    while end - at >= 4:
        (size,) = struct.unpack_from(">i", data, at)
        if end - at - 4 < size:
            break
        request = decode_request(data[at + 4 : at + 4 + size], validate_topics=False)
        if not isinstance(request, ProduceRequest):
            break
        if expected and (request.topic, request.partition) != expected[0][:2]:
            break
        check = validate_python(request.messages, inflate=False)
        if (
            check.error is not None
            or not check.valid_bytes
            or check.compressed
            or check.largest_payload > limit
        ):
            break
        expected.append((request.topic, request.partition, bytes(request.messages), check))
        at += 4 + size
    if not expected:
        assert run is None
        return
    assert run is not None
    assert (run.topic, run.partition, run.end) == (*expected[0][:2], at)
    assert [(bytes(m), check) for m, check in run.sets] == [e[2:] for e in expected]
    for messages, _ in run.sets:
        assert isinstance(messages, memoryview)
        assert messages.obj is data  # a slice of the frames: nothing copied
