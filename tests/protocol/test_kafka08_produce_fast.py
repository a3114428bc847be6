"""The listener's quick read of a Produce v0 request (apis._fast_produce, the producers' hot
path) against the schema walk it stands in for: the same Request for every well-formed
request, and for a request cut short or with a byte changed either the same Request or the
schema walk's own error (the quick read steps aside for anything unusual)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.protocol.kafka08 import apis
from logbroker.protocol.kafka08.apis import encode_request
from logbroker.protocol.kafka08.produce import (
    PRODUCE_V0,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAME = st.text(max_size=12)
PARTITIONS = st.lists(
    st.builds(ProducePartition, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=40)),
    min_size=1,
    max_size=3,
)
REQUEST = st.builds(
    ProduceRequest,
    st.sampled_from([0, 1, -1, 5]),
    st.integers(-(2**31), 2**31 - 1),
    st.lists(st.builds(ProduceTopic, NAME, PARTITIONS.map(tuple)), max_size=3).map(tuple),
)


def plain(value: Any) -> Any:
    """A decoded request with its views as bytes, to compare."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, tuple):
        return (
            type(value)(*map(plain, value))
            if hasattr(value, "_fields")
            else tuple(map(plain, value))
        )
    return value


def read(body: bytes, quick: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    """decode_request's answer (as plain values) or the type and message of its error."""
    with monkeypatch.context() as patch:
        if not quick:
            patch.setattr(apis, "_fast_produce", lambda view: None)
        try:
            return plain(apis.decode_request(body))
        except Exception as exc:  # the quick read must raise what the schema walk raises
            return type(exc), str(exc)


@SETTINGS
@given(request=REQUEST, client=st.one_of(st.none(), NAME), correlation=st.integers(0, 2**31 - 1))
def test_the_quick_read_is_the_schema_walks(
    request: ProduceRequest, client: str | None, correlation: int
) -> None:
    body = encode_request(PRODUCE_V0, request, correlation, client)[4:]
    if request.topics:  # (no topics: left to the schema walk)
        assert apis._fast_produce(memoryview(body)) is not None, "not read the quick way"
    with pytest.MonkeyPatch.context() as patch:
        assert read(body, True, patch) == read(body, False, patch)


@SETTINGS
@given(
    request=REQUEST,
    client=st.one_of(st.none(), NAME),
    where=st.integers(0, 10**6),
    xor=st.integers(1, 255),
    cut=st.integers(0, 30),
)
def test_a_damaged_request_reads_as_the_schema_walk_reads_it(
    request: ProduceRequest, client: str | None, where: int, xor: int, cut: int
) -> None:
    body = bytearray(encode_request(PRODUCE_V0, request, 7, client)[4:])
    body[where % len(body)] ^= xor
    damaged = bytes(body[: max(len(body) - cut, 0)])
    with pytest.MonkeyPatch.context() as patch:
        assert read(damaged, True, patch) == read(damaged, False, patch)


def test_every_cut_change_and_extra_byte_of_one_request_reads_as_the_schema_walk_reads_it() -> None:
    request = ProduceRequest(
        1,
        1000,
        (
            ProduceTopic("orders", (ProducePartition(0, b"x" * 30), ProducePartition(3, b""))),
            ProduceTopic("é", (ProducePartition(1, b"yz"),)),
        ),
    )
    body = encode_request(PRODUCE_V0, request, 9, "client")[4:]
    damaged = [body[:cut] for cut in range(len(body))] + [body + b"\x00", body + b"\x00" * 9]
    for where in range(len(body)):
        for xor in (0x01, 0x80, 0xFF):
            changed = bytearray(body)
            changed[where] ^= xor
            damaged.append(bytes(changed))
    with pytest.MonkeyPatch.context() as patch:
        for frame in damaged:
            assert read(frame, True, patch) == read(frame, False, patch), frame
