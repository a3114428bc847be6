"""The listener's quick Fetch v0 read and answer (apis._fast_fetch and _fast_fetch_response,
the consumers' hot path) against the schema walk they stand in for: the same Request for
every well-formed request, and for a request cut short or with a byte changed either the
same Request or the schema walk's own error; the same response bytes, with each file region
left in the parts for the caller to send, as the schema walk leaves it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.protocol.kafka08 import apis
from logbroker.protocol.kafka08.apis import encode_request, encode_response_parts
from logbroker.protocol.kafka08.fetch import (
    FETCH_V0,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponseTopic,
    FetchTopic,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAME = st.text(max_size=12)
INT32 = st.integers(-(2**31), 2**31 - 1)
PARTITIONS = st.lists(
    st.builds(FetchPartition, INT32, st.integers(-(2**63), 2**63 - 1), INT32),
    min_size=1,
    max_size=3,
)
REQUEST = st.builds(
    FetchRequest,
    INT32,
    INT32,
    INT32,
    st.lists(st.builds(FetchTopic, NAME, PARTITIONS.map(tuple)), max_size=3).map(tuple),
)


class Handle:
    """A file region's stand-in: a part with a `size` that the caller sends itself."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)


MESSAGES = st.one_of(
    st.binary(max_size=30),
    st.binary(max_size=30).map(lambda b: memoryview(b)),
    st.binary(max_size=30).map(Handle),
)
RESPONSE = st.builds(
    FetchResponse,
    st.lists(
        st.builds(
            FetchResponseTopic,
            NAME,
            st.lists(
                st.builds(
                    FetchedPartition,
                    INT32,
                    st.integers(-(2**15), 2**15 - 1),
                    st.integers(-(2**63), 2**63 - 1),
                    MESSAGES,
                ),
                max_size=3,
            ).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
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
            patch.setattr(apis, "_fast_fetch", lambda view: None)
        try:
            return plain(apis.decode_request(body))
        except Exception as exc:  # the quick read must raise what the schema walk raises
            return type(exc), str(exc)


def sent(parts: list[Any]) -> tuple[bytes, list[Any]]:
    """The bytes a response's parts put on the wire, and its handles in order."""
    handles = [p for p in parts if isinstance(p, Handle)]
    return b"".join(p.data if isinstance(p, Handle) else bytes(p) for p in parts), handles


def answer(correlation: int, body: Any, quick: bool) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        if not quick:
            patch.setattr(apis, "_fast_fetch_response", lambda correlation, body: None)
        try:
            return sent(encode_response_parts(FETCH_V0, correlation, body))
        except Exception as exc:
            return type(exc), str(exc)


@SETTINGS
@given(request=REQUEST, client=st.one_of(st.none(), NAME), correlation=st.integers(0, 2**31 - 1))
def test_the_quick_read_is_the_schema_walks(
    request: FetchRequest, client: str | None, correlation: int
) -> None:
    body = encode_request(FETCH_V0, request, correlation, client)[4:]
    if request.topics:  # (no topics: left to the schema walk)
        assert apis._fast_fetch(memoryview(body)) is not None, "not read the quick way"
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
    request: FetchRequest, client: str | None, where: int, xor: int, cut: int
) -> None:
    body = bytearray(encode_request(FETCH_V0, request, 7, client)[4:])
    body[where % len(body)] ^= xor
    damaged = bytes(body[: max(len(body) - cut, 0)])
    with pytest.MonkeyPatch.context() as patch:
        assert read(damaged, True, patch) == read(damaged, False, patch)


def test_every_cut_change_and_extra_byte_of_one_request_reads_as_the_schema_walk_reads_it() -> None:
    request = FetchRequest(
        -1,
        100,
        1,
        (
            FetchTopic("orders", (FetchPartition(0, 5, 1000), FetchPartition(3, 0, 10))),
            FetchTopic("é", (FetchPartition(1, 2**40, 0),)),
        ),
    )
    body = encode_request(FETCH_V0, request, 9, "client")[4:]
    damaged = [body[:cut] for cut in range(len(body))] + [body + b"\x00", body + b"\x00" * 9]
    for where in range(len(body)):
        for xor in (0x01, 0x80, 0xFF):
            changed = bytearray(body)
            changed[where] ^= xor
            damaged.append(bytes(changed))
    with pytest.MonkeyPatch.context() as patch:
        for frame in damaged:
            assert read(frame, True, patch) == read(frame, False, patch), frame


@SETTINGS
@given(response=RESPONSE, correlation=INT32)
def test_the_quick_answer_is_the_schema_walks(response: FetchResponse, correlation: int) -> None:
    if response.topics:
        assert apis._fast_fetch_response(correlation, response) is not None
    assert answer(correlation, response, True) == answer(correlation, response, False)


@pytest.mark.parametrize(
    "messages",
    [bytearray(b"abc"), None, "text", Handle(b"x" * 3)],
    ids=["bytearray", "none", "str", "handle"],
)
@pytest.mark.parametrize("field", ["partition", "error_code", "high_watermark", "topic"])
def test_an_unusual_answer_encodes_or_fails_as_the_schema_walk_does(
    messages: Any, field: str
) -> None:
    values: dict[str, Any] = {
        "partition": 2**31,
        "error_code": 2**15,
        "high_watermark": -(2**63) - 1,
        "topic": None,
    }
    part = FetchedPartition(1, 0, 5, messages)
    topic = "t"
    if field == "topic":
        topic = values[field]
    else:
        part = part._replace(**{field: values[field]})
    for parts in ((part,), (FetchedPartition(0, 0, 0, messages),)):
        response = FetchResponse((FetchResponseTopic(topic, parts),))
        assert answer(3, response, True) == answer(3, response, False)
