"""The replication requests and responses, byte by byte (protocol/replication.py).

The expected bytes are built field by field, one comment per field, so the wire format reads
here as in docs/protocol.md ("Replication").
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbroker.protocol.errors import InvalidRequestError, NotLeaderForPartitionError
from logbroker.protocol.replication import (
    EpochEnd,
    EpochQuery,
    MalformedReplicaResponseError,
    OffsetsForLeaderEpochRequest,
    ReplicaFetch,
    ReplicaFetchRequest,
    ReplicaSet,
    decode_offsets_for_leader_epoch_response,
    decode_replica_fetch_response,
    encode_offsets_for_leader_epoch_response,
    encode_replica_fetch_response,
)
from logbroker.protocol.requests import decode_request, encode_request


def test_replica_fetch_request_bytes() -> None:
    frame = encode_request(
        ReplicaFetchRequest(2, 500, 1, (ReplicaFetch("orders", 3, 41230, 1 << 20, 7),))
    )
    body = (
        struct.pack(">h", 9)  # type REPLICA_FETCH
        + struct.pack(">i", 2)  # replica id: the follower's broker id
        + struct.pack(">i", 500)  # max wait ms
        + struct.pack(">i", 1)  # min bytes
        + struct.pack(">h", 1)  # one fetch
        + struct.pack(">h", 6) + b"orders"  # topic
        + struct.pack(">i", 3)  # partition
        + struct.pack(">q", 41230)  # offset: the follower's log end
        + struct.pack(">i", 1 << 20)  # max bytes
        + struct.pack(">i", 7)  # the leader epoch it follows
    )  # fmt: skip
    assert frame == struct.pack(">i", len(body)) + body
    assert decode_request(body) == ReplicaFetchRequest(
        2, 500, 1, (ReplicaFetch("orders", 3, 41230, 1 << 20, 7),)
    )


def test_offsets_for_leader_epoch_request_bytes() -> None:
    frame = encode_request(OffsetsForLeaderEpochRequest((EpochQuery("t", 0, 4),)))
    body = (
        struct.pack(">h", 10)  # type OFFSETS_FOR_LEADER_EPOCH
        + struct.pack(">h", 1)  # one query
        + struct.pack(">h", 1) + b"t"  # topic
        + struct.pack(">i", 0)  # partition
        + struct.pack(">i", 4)  # the follower's latest epoch
    )  # fmt: skip
    assert frame == struct.pack(">i", len(body)) + body


def test_replica_fetch_response_bytes_and_back() -> None:
    data = b"\x00\x00\x00\x06\x01\x00abcd"  # one message's bytes, sent as they are
    parts = encode_replica_fetch_response(
        [ReplicaSet("t", 0, 0, 100, 140, ((3, 90), (4, 120)), len(data), data, 1)]
    )
    response = b"".join(parts)
    body = (
        struct.pack(">h", 0)  # error
        + struct.pack(">h", 1)  # one set
        + struct.pack(">h", 1) + b"t"  # topic
        + struct.pack(">i", 0)  # partition
        + struct.pack(">h", 0)  # the set's error
        + struct.pack(">q", 100)  # the leader's high watermark
        + struct.pack(">q", 140)  # its log end
        + struct.pack(">h", 2)  # two epochs
        + struct.pack(">iq", 3, 90)  # epoch 3 wrote from offset 90
        + struct.pack(">iq", 4, 120)  # epoch 4 from 120
        + struct.pack(">i", 1)  # whole messages, one (-1: not counted)
        + struct.pack(">i", len(data)) + data  # the log data
    )  # fmt: skip
    assert response == struct.pack(">i", len(body)) + body
    [s] = decode_replica_fetch_response(body)
    assert (s.topic, s.partition, s.error, s.high_watermark, s.log_end, s.epochs, s.messages) == (
        "t", 0, 0, 100, 140, ((3, 90), (4, 120)), 1,
    )  # fmt: skip
    assert bytes(s.data) == data
    # the data part is handed over as it is (a file region goes to sendfile)
    assert parts[-1] is data or data in parts


def test_offsets_for_leader_epoch_response_bytes_and_back() -> None:
    body = encode_offsets_for_leader_epoch_response([EpochEnd("t", 1, 0, 3, 4096)])[4:]
    assert body == (
        struct.pack(">h", 0)  # error
        + struct.pack(">h", 1)  # one answer
        + struct.pack(">h", 1) + b"t"  # topic
        + struct.pack(">i", 1)  # partition
        + struct.pack(">h", 0)  # error
        + struct.pack(">i", 3)  # the largest epoch the leader has, not above the one asked
        + struct.pack(">q", 4096)  # where it ends in the leader's log
    )  # fmt: skip
    assert decode_offsets_for_leader_epoch_response(body) == [EpochEnd("t", 1, 0, 3, 4096)]


def test_malformed_answers_and_requests_name_their_field() -> None:
    with pytest.raises(MalformedReplicaResponseError, match=r"epochs 5 at byte \d+ needs"):
        decode_replica_fetch_response(
            struct.pack(">hh", 0, 1)
            + struct.pack(">h", 1)
            + b"t"
            + struct.pack(">ihqqhii", 0, 0, 1, 1, 5, -1, 0)
        )
    with pytest.raises(NotLeaderForPartitionError):
        decode_offsets_for_leader_epoch_response(struct.pack(">h", 8))
    with pytest.raises(InvalidRequestError, match="REPLICA_FETCH: offset -1 at byte"):
        decode_request(
            struct.pack(">hiiih", 9, 1, 0, 0, 1)
            + struct.pack(">h", 1)
            + b"t"
            + struct.pack(">iqii", 0, -1, 10, 0)
        )


@given(st.binary(max_size=120))
def test_response_decoders_raise_only_their_own_errors(data: bytes) -> None:
    for decode in (decode_replica_fetch_response, decode_offsets_for_leader_epoch_response):
        try:
            decode(data)
        except MalformedReplicaResponseError as exc:
            assert "byte" in str(exc)
        except Exception as exc:  # an error code as the whole answer: its own exception
            assert type(exc).__name__.endswith("Error") and hasattr(exc, "code")
