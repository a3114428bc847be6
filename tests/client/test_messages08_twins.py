"""The clients' compiled 0.8 loops (_native08.keyed_lists, build_plain_set, through
messages08.keyed_columns_compiled and build_set_compiled) against their pure-Python references
(keyed_columns_python, build_set_python): the same columns, bytes and errors for generated
sets, sets with wrappers, sets cut short and sets with a byte changed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.client import messages08
from logbroker.protocol import compression, native
from logbroker.protocol.errors import CorruptMessageError
from logbroker.protocol.kafka08.message_set import assign_offsets

pytestmark = pytest.mark.skipif(native.COMPILED08 is None, reason="_native08 is not built")

KEY = st.one_of(st.none(), st.binary(max_size=12))
MESSAGES = st.lists(st.tuples(KEY, st.binary(max_size=80)), max_size=30)
CODEC = st.sampled_from([compression.NONE, compression.NONE, compression.GZIP, compression.SNAPPY])
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def walked(walk: Any, data: Any, from_offset: Any) -> Any:
    """The walk's columns, or the type and message of what it raised."""
    try:
        return walk(data, from_offset)
    except Exception as exc:  # the twins must raise the same
        return type(exc), str(exc)


def both(data: bytes, from_offset: int) -> None:
    compiled = walked(messages08.keyed_columns_compiled, data, from_offset)
    assert compiled == walked(messages08.keyed_columns_python, data, from_offset)


def stored(sets: list[tuple[list[tuple[bytes | None, bytes]], int]], base: int) -> bytes:
    """Producers' sets as the leader stores them: logical offsets from `base`."""
    out = b""
    for batch, codec in sets:
        keys = [k for k, _ in batch]
        values = [v for _, v in batch]
        out += bytes(assign_offsets(messages08.build_set_python(keys, values, codec), base).data)
        base += len(batch)
    return out


@SETTINGS
@given(
    sets=st.lists(st.tuples(MESSAGES.filter(bool), CODEC), max_size=5),
    base=st.integers(0, 2**40),
    skip=st.integers(0, 40),
    cut=st.integers(0, 64),
)
def test_the_compiled_walk_reads_what_the_reference_reads(
    sets: list[tuple[list[tuple[bytes | None, bytes]], int]], base: int, skip: int, cut: int
) -> None:
    data = stored(sets, base)
    both(data, base + skip)
    both(data[: max(len(data) - cut, 0)], base + skip)  # a partial trailing entry


@SETTINGS
@given(
    batch=MESSAGES.filter(bool),
    base=st.integers(0, 2**40),
    where=st.integers(0, 10**6),
    xor=st.integers(1, 255),
)
def test_the_compiled_walk_raises_what_the_reference_raises_on_damage(
    batch: list[tuple[bytes | None, bytes]], base: int, where: int, xor: int
) -> None:
    data = bytearray(stored([(batch, compression.NONE)], base))
    data[where % len(data)] ^= xor
    both(bytes(data), base)
    both(bytes(data), 0)


def test_a_changed_payload_byte_is_caught_by_the_compiled_walk() -> None:
    data = bytearray(stored([([(None, b"abc" * 10)] * 3, compression.NONE)], 7))
    data[-1] ^= 1
    with pytest.raises(CorruptMessageError, match=r"offset 9\b"):
        messages08.keyed_columns_compiled(bytes(data), 0)


@SETTINGS
@given(batch=MESSAGES, codec=CODEC)
def test_the_compiled_build_is_the_references_bytes(
    batch: list[tuple[bytes | None, bytes]], codec: int
) -> None:
    keys = [k for k, _ in batch]
    values = [v for _, v in batch]
    assert messages08.build_set_compiled(keys, values, codec) == messages08.build_set_python(
        keys, values, codec
    )


@pytest.mark.parametrize(
    ("keys", "values"),
    [
        ([None, bytearray(b"k")], [b"a", b"b"]),  # a key of another type
        ([None, None], [b"a", memoryview(b"b")]),  # a payload of another type
        ([None], [b"a", b"b"]),  # the counts differ: the reference's ValueError
    ],
)
def test_what_the_compiled_build_does_not_take_goes_to_the_reference(
    keys: list[Any], values: list[Any]
) -> None:
    assert walked(lambda k, v: messages08.build_set_compiled(k, v), keys, values) == walked(
        lambda k, v: messages08.build_set_python(k, v), keys, values
    )


def test_the_clients_run_the_compiled_twins_when_in_use() -> None:
    if native.IN_USE08 is None:
        pytest.skip("the pure-Python walks are in use")
    assert messages08.keyed_columns is messages08.keyed_columns_compiled
    assert messages08.build_set is messages08.build_set_compiled
