"""Kafka 0.8's set walks, both implementations: the pure-Python reference in
kafka08/message_set.py and its compiled twin in _native08.pyx (walk_paths.py's `walks08`).

The twin must give the reference's answers, byte for byte and error for error, on any
bytes: `test_both_08_walks_agree_on_generated_and_damaged_bytes` feeds both valid sets
(plain entries, gzip and snappy wrappers, offsets as a producer or as a leader writes them),
the same cut, flipped or with garbage inserted, entry-like chunks and arbitrary bytes, as
bytes, bytearray and memoryview, and compares `validate` (every mode), `assign_offsets`
(with and without a validation, under a small budget), `entry_headers`, `whole_entries` and
`index_points`. The other tests hold each path to what a user relies on: a leader's
assignment gives the stored layout, the index walk's points, and a wrapper inflated once
between the validation and the assignment.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.protocol import compression
from logbroker.protocol.errors import InflatedSizeTooLargeError, InvalidMessageError
from logbroker.protocol.kafka08.message_set import (
    ENTRY_OVERHEAD,
    build_message_set,
    entry,
    iter_messages,
)
from logbroker.protocol.message_set import InflateBudget

from .walk_paths import COMPILED08, PATHS08, PYTHON08, Walks08

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

keys = st.none() | st.binary(max_size=12)
values = st.none() | st.binary(max_size=40)
pairs = st.lists(st.tuples(keys, values), min_size=1, max_size=5)
codecs = st.sampled_from([compression.GZIP, compression.SNAPPY])


@st.composite
def producer_sets(draw: st.DrawFn) -> bytes:
    """A valid set with any offsets, as producers send them: plain entries and wrappers."""
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        offset = draw(st.integers(-3, 2**40))
        if draw(st.booleans()):
            key, value = draw(st.tuples(keys, values))
            parts.append(entry(offset, value, key))
        else:
            parts.append(build_message_set(draw(pairs), draw(codecs), offset))
    return b"".join(parts)


@st.composite
def stored_sets(draw: st.DrawFn) -> bytes:
    """A valid set as a leader stores it: offsets increasing by one message at a time,
    through wrappers (with a gap now and then, as compaction leaves)."""
    offset = draw(st.integers(0, 2**40))
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        offset += draw(st.sampled_from([0, 0, 0, 1, 7]))
        if draw(st.booleans()):
            key, value = draw(st.tuples(keys, values))
            parts.append(entry(offset, value, key))
            offset += 1
        else:
            messages = draw(pairs)
            parts.append(build_message_set(messages, draw(codecs), offset))
            offset += len(messages)
    return b"".join(parts)


def _header(draw: st.DrawFn) -> bytes:
    size = draw(st.sampled_from([-1, 0, 13, 14, 15, 20, 40, 2**31 - 1]))
    return struct.pack(">qi", draw(st.integers(-1, 20)), size)


@st.composite
def odd_entries(draw: st.DrawFn) -> bytes:
    """Entries a producer should not send, whole: each one of the kinds a walk must name."""
    kind = draw(
        st.sampled_from(
            ["lz4", "bits", "nested", "empty", "partial", "null", "raw", "header"]
            + ["fields"] * 4  # the kind with the most ways to be odd
        )
    )
    inner = build_message_set(draw(pairs))
    if kind == "lz4":
        return entry(0, b"x", None, 3)
    if kind == "bits":
        return entry(1, b"x", b"k", draw(st.sampled_from([0x08, 0x10, 0x80, 0x09])))
    if kind == "nested":
        return entry(5, compression.compress(1, build_message_set(draw(pairs), 1)), None, 1)
    if kind == "empty":
        return entry(5, compression.compress(draw(codecs), b""), None, 1)
    if kind == "partial":
        return entry(5, compression.compress(1, inner[:-1]), None, 1)
    if kind == "null":
        return entry(5, None, None, draw(codecs))
    if kind == "raw":
        return entry(9, draw(st.binary(max_size=30)), None, draw(codecs))
    if kind == "fields":  # under a CRC that matches: a magic, or lengths, that do not fit
        lengths = st.sampled_from([-2, -1, 0, 1, 3, 2**31 - 1])
        slack = st.sampled_from([0, 0, -1, 1, 4])  # bytes more or fewer than a length says
        key_length, value_length = draw(lengths), draw(lengths)
        key = b"k" * max(0, min(key_length, 3) + draw(slack))
        value = b"v" * max(0, min(value_length, 3) + draw(slack))
        magic = draw(st.sampled_from([0, 0, 0, 1, -1]))
        body = (
            struct.pack(">bBi", magic, 0, key_length)
            + key
            + struct.pack(">i", value_length)
            + value
        )
        message = struct.pack(">I", zlib.crc32(body)) + body
        return struct.pack(">qi", 4, len(message)) + message
    return _header(draw) + draw(st.binary(max_size=30))


@st.composite
def damaged_sets(draw: st.DrawFn) -> bytes:
    """A valid set, whole or cut short, with a byte flipped or garbage inserted; odd entries
    among valid ones; or arbitrary bytes."""
    kind = draw(st.sampled_from(["whole", "cut", "flip", "insert", "odd", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    buffer = draw(producer_sets() | stored_sets())
    if kind == "whole" or not buffer:
        return buffer
    if kind == "odd":
        at = draw(st.sampled_from([0, len(buffer)]))
        return buffer[:at] + draw(odd_entries()) + buffer[at:]
    position = draw(st.integers(0, len(buffer) - 1))
    if kind == "cut":
        return buffer[:position]
    if kind == "insert":
        return buffer[:position] + draw(st.binary(min_size=1, max_size=16)) + buffer[position:]
    damaged = bytearray(buffer)
    damaged[position] ^= draw(st.integers(1, 255))
    return bytes(damaged)


def _text(error: BaseException | None) -> tuple[str, str] | None:
    return None if error is None else (type(error).__name__, str(error))


def _outcome(call: Callable[..., object], *args: object, **kwargs: object) -> object:
    """What `call(*args, **kwargs)` returns, or its error as (class, message)."""
    try:
        return call(*args, **kwargs)
    except (InvalidMessageError, ValueError, TypeError) as exc:
        return _text(exc)


def _answers(walks: Walks08, buffer: bytes | bytearray | memoryview) -> list[object]:
    """Everything a walk says about `buffer`, errors as (class, message)."""
    said: list[object] = []
    for kwargs in (
        {},
        {"inflate": False},
        {"stored": True},
        {"stored": True, "inflate": False},
        {"budget": InflateBudget(64, 1 << 20, 1)},  # a set inflating past 64 bytes: refused
        {"budget": InflateBudget(1 << 20, 1 << 20, 0)},  # no wrapper at all
    ):
        check = walks.validate(buffer, **kwargs)
        said.append((*check[:4], _text(check.error), *check[5:]))
    check = walks.validate(buffer)
    for next_offset in (0, 2**40):
        said.append(_outcome(walks.assign_offsets, buffer, next_offset))
        said.append(_outcome(walks.assign_offsets, buffer, next_offset, validation=check))
    small = InflateBudget(64, 1 << 20, 1)
    said.append(_outcome(walks.assign_offsets, buffer, 3, budget=small))
    said.append(list(walks.entry_headers(buffer, 7)))
    said.append(walks.whole_entries(buffer))
    n = memoryview(buffer).nbytes
    for position, last_indexed, interval, limit in (
        (0, 0, 0, None),
        (0, -1, 0, None),
        (100, 0, 40, None),
        (1000, 990, 64, n // 2),
        (0, 0, 4096, n + 100),
        (2**31, 2**31 - 5000, 4096, None),
    ):
        said.append(walks.index_points(buffer, position, last_indexed, interval, limit))
    return said


@pytest.mark.skipif(COMPILED08 is None, reason="the _native08 extension is not built")
@settings(SETTINGS, max_examples=400)
@given(damaged_sets(), st.sampled_from([bytes, bytearray, memoryview]))
def test_both_08_walks_agree_on_generated_and_damaged_bytes(
    buffer: bytes, kind: type[bytes | bytearray | memoryview]
) -> None:
    assert COMPILED08 is not None
    assert _answers(COMPILED08, kind(buffer)) == _answers(PYTHON08, kind(buffer))


@pytest.mark.skipif(COMPILED08 is None, reason="the _native08 extension is not built")
@SETTINGS
@given(producer_sets() | stored_sets(), odd_entries(), producer_sets())
def test_both_08_walks_agree_on_an_odd_entry_among_valid_ones(
    before: bytes, odd: bytes, after: bytes
) -> None:
    """An odd entry whole (each kind a walk must name, under a CRC that matches)."""
    assert COMPILED08 is not None
    buffer = before + odd + after
    assert _answers(COMPILED08, buffer) == _answers(PYTHON08, buffer)


@pytest.mark.skipif(COMPILED08 is None, reason="the _native08 extension is not built")
def test_both_08_walks_treat_odd_buffers_alike() -> None:
    """Views of other item sizes and shapes are read as their bytes; what is not one block
    of bytes raises the same error from both."""
    data = build_message_set([(b"k", b"v"), (None, b"w" * 5)])  # 28 + 29 bytes
    data += entry(9, b"abc")  # 57 + 27 = 84 bytes: whole int32s
    assert COMPILED08 is not None
    for odd in (memoryview(data).cast("i"), memoryview(data).cast("B", (2, len(data) // 2))):
        assert _answers(COMPILED08, odd) == _answers(PYTHON08, odd) == _answers(PYTHON08, data)
    strided = memoryview(data + data)[::2]  # not one block: the twin hands it to the reference
    assert _answers(COMPILED08, strided) == _answers(PYTHON08, strided)
    for wrong in (None, "text"):
        for name in ("validate", "assign_offsets", "whole_entries", "index_points"):
            args = (
                (wrong, 0, 0, 0)
                if name == "index_points"
                else (wrong, 0)[: 2 if name == "assign_offsets" else 1]
            )
            with pytest.raises(TypeError) as reference:
                getattr(PYTHON08, name)(*args)
            with pytest.raises(TypeError, match=re.escape(str(reference.value))):
                getattr(COMPILED08, name)(*args)


@pytest.mark.parametrize("walks", PATHS08)
@SETTINGS
@given(producer_sets() | stored_sets(), st.integers(0, 2**40))
def test_assigned_sets_are_stored_sets(walks: Walks08, produced: bytes, start: int) -> None:
    """A leader's assignment keeps every message, key and value, in order, gives them the
    next offsets through wrappers, and is what a stored set must be."""
    check = walks.validate(produced)
    assigned = walks.assign_offsets(produced, start, validation=check)
    assert assigned == walks.assign_offsets(produced, start)  # without the validation
    assert (assigned.first_offset, assigned.next_offset) == (start, start + check.messages)
    assert (assigned.messages, assigned.entries) == (check.messages, check.entries)
    records = list(iter_messages(assigned.data))
    assert [r.offset for r in records] == list(range(start, assigned.next_offset))
    before = [(r.key, r.value, r.codec) for r in iter_messages(produced)]
    assert [(r.key, r.value, r.codec) for r in records] == before
    stored = walks.validate(assigned.data, stored=True)
    assert stored.error is None and stored.valid_bytes == len(assigned.data)
    last = start + check.messages - 1 if check.messages else -1
    assert (stored.messages, stored.last_offset) == (check.messages, last)


def test_a_wrapper_is_inflated_once_from_validation_to_assignment(walks08: Walks08) -> None:
    """The broker validates a produced set within its request's inflate budget and hands the
    validation to the log, whose assignment rewrites the wrapper's inner offsets: it takes
    the inner set the validation inflated instead of inflating it again (a budget spent by
    the validation is not charged twice)."""
    produced = build_message_set([(b"k", b"v" * 1000)] * 20, compression.GZIP)
    inner_size = 20 * (ENTRY_OVERHEAD + 14 + 1 + 1000)
    budget = InflateBudget(inner_size, inner_size, 1)  # room for one inflating
    check = walks08.validate(produced, budget=budget)
    assert check.error is None and check.messages == 20 and budget.remaining == 0
    assert len(check.inflated) == 1 and len(check.inflated[0]) == inner_size
    assigned = walks08.assign_offsets(produced, 100, budget=budget, validation=check)
    assert (assigned.first_offset, assigned.next_offset, assigned.reencoded) == (100, 120, 1)
    assert [r.offset for r in iter_messages(assigned.data)] == list(range(100, 120))
    with pytest.raises(InflatedSizeTooLargeError):  # what inflating again would have met
        walks08.assign_offsets(produced, 100, budget=budget)


def test_inflate_false_keeps_no_inner_set(walks08: Walks08) -> None:
    produced = build_message_set([(None, b"v")] * 3, compression.SNAPPY)
    assert walks08.validate(produced, inflate=False).inflated == ()
    assert (
        walks08.validate(b"".join([produced, entry(0, b"x"), produced])).inflated
        == (build_message_set([(None, b"v")] * 3),) * 2
    )


def test_index_points_take_an_entry_each_interval(walks08: Walks08) -> None:
    """OffsetIndex's rule: an entry is indexed when it starts more than `interval` bytes
    after the last indexed one; sizes count the offset and size fields."""
    data = b"".join(entry(10 + i, b"x" * 36) for i in range(6))  # 62 bytes each
    assert walks08.index_points(data, 1000, 1000, 100) == (
        [(12, 1124, 62), (14, 1248, 62)],  # 1124 - 1000 > 100, then 1248 - 1124 > 100
        15,
        6 * 62,
    )
    assert walks08.index_points(data, 0, -1, 0)[0] == [(10 + i, 62 * i, 62) for i in range(6)]
    # a limit cuts the walk at the last entry that ends within it; a bad size stops it
    assert walks08.index_points(data, 0, 0, 0, 3 * 62 + 61)[1:] == (12, 3 * 62)
    bad = data[:124] + struct.pack(">qi", 99, 13) + data[136:]
    assert walks08.index_points(bad, 0, 0, 1 << 20) == ([], 11, 124)
    assert walks08.whole_entries(bad) == (124, 2)
    assert walks08.whole_entries(data[:-1]) == (5 * 62, 5)
    assert list(walks08.entry_headers(data[:130], 50)) == [(10, 50, 62), (11, 112, 62)]
