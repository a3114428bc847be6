"""Kafka 0.8's message (magic 0) and message sets with logical offsets, byte by byte.

Reference: the protocol guide's "Message sets" (MessageSet => [Offset MessageSize Message],
Message => Crc MagicByte Attributes Key Value, the CRC over MagicByte to the end) and 0.8.2's
ByteBufferMessageSet for the offsets of compressed wrappers. Every expected buffer is written
out one field per line; CRC literals are checked by a bitwise CRC-32 (test_message_bytes.py).
The clients' sets are what kafka-python and confluent-kafka sent to the recording peer of
test_kafka08_clients.py, and a raw-snappy wrapper as librdkafka writes it.

Each test of `validate` and `assign_offsets` runs against both implementations, the
pure-Python reference and its compiled twin (`walks08`, walk_paths.py).
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest

from logbroker.protocol import compression
from logbroker.protocol.errors import (
    CorruptMessageError,
    InflatedSizeTooLargeError,
    InvalidMessageError,
    UnknownCodecError,
    UnknownMagicError,
)
from logbroker.protocol.kafka08.message import decode_message, encode_message
from logbroker.protocol.kafka08.message_set import (
    Record,
    build_message_set,
    entry,
    first_entry_size,
    iter_messages,
)
from logbroker.protocol.message_set import InflateBudget

from .test_message_bytes import _crc32_reference
from .walk_paths import Walks08

CRC_K_V = 0x1FECD70A  # of magic 0, attributes 0, key "k", value "v"
CRC_NULL_NULL = 0xA7EC6803  # of magic 0, attributes 0, null key, null value

MESSAGE_K_V = (
    b"\x1f\xec\xd7\x0a"  # crc of the 12 bytes after it
    b"\x00"  # magic 0
    b"\x00"  # attributes: codec 0
    b"\x00\x00\x00\x01"  # key length 1
    b"k"  # key
    b"\x00\x00\x00\x01"  # value length 1
    b"v"  # value
)
MESSAGE_NULLS = (
    b"\xa7\xec\x68\x03"  # crc
    b"\x00"  # magic 0
    b"\x00"  # attributes
    b"\xff\xff\xff\xff"  # key length -1: null
    b"\xff\xff\xff\xff"  # value length -1: null
)

# What kafka-python 3.0.12 and confluent-kafka 2.16.1 both sent for k1:v1 then a null key
# with v2, uncompressed (byte for byte the same from the two clients).
CLIENTS_PLAIN_SET = bytes.fromhex(
    "0000000000000000"  # offset 0
    "00000012"  # message size 18
    "57e7496e"  # crc
    "00"  # magic 0
    "00"  # attributes
    "00000002"
    + b"k1".hex()  # key length 2, key
    + "00000002"
    + b"v1".hex()  # value length 2, value
    + "0000000000000001"  # offset 1
    "00000010"  # message size 16
    "d5960a78"  # crc
    "00"  # magic 0
    "00"  # attributes
    "ffffffff"  # key length -1: null
    "00000002" + b"v2".hex()  # value length 2, value
)


def test_crc_literals() -> None:
    assert _crc32_reference(MESSAGE_K_V[4:]) == CRC_K_V
    assert _crc32_reference(MESSAGE_NULLS[4:]) == CRC_NULL_NULL


def test_message_bytes() -> None:
    assert encode_message(b"v", b"k") == MESSAGE_K_V
    assert encode_message(None, None) == MESSAGE_NULLS
    attributes, key, value = decode_message(MESSAGE_K_V)
    assert (attributes, bytes(key or b"!"), bytes(value or b"!")) == (0, b"k", b"v")
    assert decode_message(MESSAGE_NULLS) == (0, None, None)


def test_the_clients_plain_set_is_what_the_builder_writes() -> None:
    assert build_message_set([(b"k1", b"v1"), (None, b"v2")]) == CLIENTS_PLAIN_SET
    assert list(iter_messages(CLIENTS_PLAIN_SET)) == [
        Record(0, b"k1", b"v1"),
        Record(1, None, b"v2"),
    ]


def test_empty_key_is_not_null() -> None:
    message = encode_message(b"v", b"")
    assert message[6:10] == b"\x00\x00\x00\x00"  # key length 0
    _, key, _ = decode_message(message)
    assert key is not None and bytes(key) == b""


def test_set_entry_bytes() -> None:
    expected = (
        b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # offset 42
        b"\x00\x00\x00\x10"  # message size 16
    ) + MESSAGE_K_V
    assert entry(42, b"v", b"k") == expected
    assert build_message_set([(b"k", b"v")], base_offset=42) == expected
    assert list(iter_messages(expected)) == [Record(42, b"k", b"v")]
    assert first_entry_size(expected) == 28 and first_entry_size(expected[:11]) is None


def test_compressed_wrapper_bytes_and_inner_offsets(walks08: Walks08) -> None:
    inner = entry(10, b"v1", b"k1") + entry(11, b"v2", None)
    wrapped = build_message_set([(b"k1", b"v1"), (None, b"v2")], compression.GZIP, base_offset=10)
    value = gzip.compress(inner, compresslevel=6, mtime=0)
    body = (
        b"\x00"  # magic 0
        b"\x01"  # attributes: gzip
        b"\xff\xff\xff\xff"  # key -1: a wrapper has no key
        + struct.pack(">i", len(value))  # value length
        + value  # the inner set, gzip'd
    )
    assert wrapped == (
        b"\x00\x00\x00\x00\x00\x00\x00\x0b"  # offset 11: the last inner message's
        + struct.pack(">i", 4 + len(body))  # message size
        + struct.pack(">I", zlib.crc32(body))  # crc
        + body
    )
    assert list(iter_messages(wrapped)) == [
        Record(10, b"k1", b"v1", 1, 11),
        Record(11, None, b"v2", 1, 11),
    ]
    check = walks08.validate(wrapped, stored=True)
    assert (check.entries, check.messages, check.compressed, check.codec) == (1, 2, 1, 1)
    assert (check.first_offset, check.last_offset, check.error) == (11, 11, None)


def test_set_from_librdkafka_with_raw_snappy_is_read(walks08: Walks08) -> None:
    inner = entry(0, b"v1", b"k1") + entry(1, b"v2", b"k2") + entry(2, b"v3", b"")
    raw = bytes(cramjam.snappy.compress_raw(inner))
    wrapper = entry(0, raw, None, compression.SNAPPY)  # librdkafka: the wrapper at offset 0
    assert [r.offset for r in iter_messages(wrapper)] == [0, 1, 2]
    assert [r.key for r in iter_messages(wrapper)] == [b"k1", b"k2", b""]
    assert walks08.validate(wrapper).messages == 3
    assert walks08.validate(wrapper, stored=True).error is not None  # not as a leader stores it
    assigned = walks08.assign_offsets(wrapper, 500)
    assert [r.offset for r in iter_messages(assigned.data)] == [500, 501, 502]
    assert walks08.validate(assigned.data, stored=True).error is None
    assert assigned.data[12 + 5] == compression.SNAPPY  # still snappy, now snappy-java framed
    assert compression.SNAPPY_JAVA_MAGIC in assigned.data


# ---------------------------------------------------------------------------------------
# Damage: each one named, nothing past it counted


def _bad(message: bytes, offset: int = 0) -> bytes:
    return struct.pack(">qi", offset, len(message)) + message


def _recrc(body: bytes) -> bytes:
    return struct.pack(">I", zlib.crc32(body)) + body


@pytest.mark.parametrize(
    ("message", "kind", "words"),
    [
        (b"\x00" + MESSAGE_K_V[1:], CorruptMessageError, "CRC mismatch"),
        (_recrc(b"\x01" + MESSAGE_K_V[5:]), UnknownMagicError, "magic byte 1"),
        (_recrc(b"\x00\x03" + MESSAGE_K_V[6:]), UnknownCodecError, "codec 3 (lz4"),
        (_recrc(b"\x00\x08" + MESSAGE_K_V[6:]), CorruptMessageError, "attribute bits 0x08"),
        (
            _recrc(b"\x00\x00\x00\x00\x00\x09k\x00\x00\x00\x01v"),
            CorruptMessageError,
            "key length 9",
        ),
        (
            _recrc(b"\x00\x00\x00\x00\x00\x01k\x00\x00\x00\x02v"),
            CorruptMessageError,
            "value length 2",
        ),
        (
            _recrc(b"\x00\x00\x00\x00\x00\x01k\x00\x00\x00\x00v"),
            CorruptMessageError,
            "value length 0",
        ),
        (
            _recrc(b"\x00\x00\xff\xff\xff\xfe\x00\x00\x00\x01v"),
            CorruptMessageError,
            "key length -2",
        ),
        (
            _recrc(b"\x00\x00\xff\xff\xff\xff\xff\xff\xff\xffxx"),
            CorruptMessageError,
            "after its null value",
        ),
    ],
)
def test_damaged_message_is_named_and_stops_the_walk(
    message: bytes, kind: type, words: str, walks08: Walks08
) -> None:
    good = entry(0, b"v", b"k")
    buffer = good + _bad(message, 1) + good
    check = walks08.validate(buffer)
    assert isinstance(check.error, kind), check.error
    assert words in str(check.error)
    assert "the entry at byte 28 (offset 1)" in str(check.error)
    assert (check.valid_bytes, check.entries, check.messages) == (28, 1, 1)
    with pytest.raises(kind, match="offset 1"):
        list(iter_messages(buffer))
    with pytest.raises(kind):
        walks08.assign_offsets(buffer, 0)


def test_size_under_the_minimum_is_damage_not_a_partial_entry(walks08: Walks08) -> None:
    buffer = entry(0, b"v", b"k") + struct.pack(">qi", 1, 13) + b"\x00" * 13
    check = walks08.validate(buffer)
    assert isinstance(check.error, CorruptMessageError)
    assert "declares 13 bytes, under the 0.8 minimum message size 14" in str(check.error)


def test_partial_tail_is_left_out_quietly(walks08: Walks08) -> None:
    whole = entry(0, b"v", b"k") + entry(1, b"w", None)
    for cut in range(len(whole) - 1, 28, -1):
        check = walks08.validate(whole[:cut])
        assert check.error is None and check.partial_tail
        assert check.valid_bytes == 28 and check.messages == 1
        assert [r.offset for r in iter_messages(whole[:cut])] == [0]
        assert walks08.assign_offsets(whole[:cut], 9).data == entry(9, b"v", b"k")


def _wrapper(inner: bytes, codec: int = compression.GZIP, offset: int = 0) -> bytes:
    return entry(offset, compression.compress(codec, inner), None, codec)


@pytest.mark.parametrize(
    ("inner", "words"),
    [
        (b"", "its compressed set is empty"),
        (entry(0, b"v", b"k")[:-1], "ends in a partial entry (27 bytes)"),
        (_wrapper(entry(0, b"v", b"k")), "is compressed, which this set may not be"),
        (_bad(b"\x00" + MESSAGE_K_V[1:]), "inside its compressed set: CRC mismatch"),
    ],
)
def test_bad_wrappers_are_named(inner: bytes, words: str, walks08: Walks08) -> None:
    check = walks08.validate(_wrapper(inner))
    assert isinstance(check.error, InvalidMessageError)
    assert words in str(check.error), check.error
    assert check.valid_bytes == 0


def test_wrapper_that_does_not_inflate(walks08: Walks08) -> None:
    broken = entry(0, b"\x1f\x8bnot gzip", None, compression.GZIP)
    check = walks08.validate(broken)
    assert isinstance(check.error, CorruptMessageError)
    assert "compressed set does not decode" in str(check.error)


def test_inflating_past_the_budget_is_too_large(walks08: Walks08) -> None:
    big = _wrapper(build_message_set([(None, b"x" * 10_000)] * 10))
    check = walks08.validate(big, budget=InflateBudget(50_000, 50_000, 1))
    assert isinstance(check.error, InflatedSizeTooLargeError)
    assert walks08.validate(big, budget=InflateBudget(1 << 20, 1 << 20, 1)).messages == 10


def test_wrapper_null_value_is_damage(walks08: Walks08) -> None:
    check = walks08.validate(entry(0, None, None, compression.GZIP))
    assert isinstance(check.error, CorruptMessageError)
    assert "compressed wrapper with a null value" in str(check.error)


def test_inflate_false_checks_the_wrapper_only(walks08: Walks08) -> None:
    check = walks08.validate(_wrapper(b""), inflate=False)
    assert check.error is None and check.compressed == 1 and check.messages == 0


# ---------------------------------------------------------------------------------------
# Stored offsets: as the leader assigned them


def test_stored_offsets_must_increase(walks08: Walks08) -> None:
    assert walks08.validate(entry(3, b"a") + entry(4, b"b"), stored=True).error is None
    assert (
        walks08.validate(entry(3, b"a") + entry(9, b"b"), stored=True).error is None
    )  # gaps: compaction
    check = walks08.validate(entry(3, b"a") + entry(3, b"b"), stored=True)
    assert "does not follow offset 3" in str(check.error)
    assert walks08.validate(entry(3, b"a") + entry(3, b"b")).error is None  # a producer's: any


def test_stored_wrapper_inner_offsets_run_up_to_its_own(walks08: Walks08) -> None:
    good = build_message_set([(None, b"a"), (None, b"b")], compression.GZIP, base_offset=5)
    assert walks08.validate(good, stored=True).error is None
    skewed = _wrapper(entry(5, b"a") + entry(7, b"b"), offset=7)
    assert "inner message 0 has offset 5, not 6" in str(walks08.validate(skewed, stored=True).error)
    before = entry(5, b"z") + good  # the wrapper (offset 6) holds 5, which 5 already has
    assert "first inner offset 5 does not follow 5" in str(
        walks08.validate(before, stored=True).error
    )


# ---------------------------------------------------------------------------------------
# The leader's assignment


def test_assign_plain_rewrites_offsets_in_place(walks08: Walks08) -> None:
    produced = entry(0, b"a", b"k") + entry(0, b"b") + entry(77, None, b"k")
    assigned = walks08.assign_offsets(produced, 1000)
    assert (assigned.first_offset, assigned.next_offset) == (1000, 1003)
    assert (assigned.messages, assigned.entries, assigned.reencoded) == (3, 3, 0)
    assert assigned.data == entry(1000, b"a", b"k") + entry(1001, b"b") + entry(1002, None, b"k")


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY])
def test_assign_reencodes_a_wrapper_with_absolute_inner_offsets(
    codec: int, walks08: Walks08
) -> None:
    produced = (
        entry(0, b"plain", b"p")
        + build_message_set([(b"k1", b"v1"), (b"k2", b"v2"), (None, b"v3")], codec)
        + entry(0, b"last")
    )
    assigned = walks08.assign_offsets(produced, 40)
    assert (assigned.first_offset, assigned.next_offset, assigned.messages) == (40, 45, 5)
    assert (assigned.entries, assigned.reencoded) == (3, 1)
    records = list(iter_messages(assigned.data))
    assert [(r.offset, r.key, r.value, r.wrapper_offset) for r in records] == [
        (40, b"p", b"plain", None),
        (41, b"k1", b"v1", 43),
        (42, b"k2", b"v2", 43),
        (43, None, b"v3", 43),
        (44, None, b"last", None),
    ]
    assert walks08.validate(assigned.data, stored=True).error is None
    assert {r.codec for r in records[1:4]} == {codec}


def test_a_wrapper_already_at_its_offsets_keeps_its_bytes(walks08: Walks08) -> None:
    stored = build_message_set([(None, b"a"), (None, b"b")], compression.GZIP, base_offset=8)
    assigned = walks08.assign_offsets(stored, 8)
    assert assigned.data == stored and assigned.reencoded == 0
    moved = build_message_set([(None, b"a"), (None, b"b")], compression.GZIP, base_offset=8)
    moved = struct.pack(">q", 0) + moved[8:]  # inner offsets right, the wrapper's not
    assert walks08.assign_offsets(moved, 8).data == stored


def test_assign_of_an_empty_set(walks08: Walks08) -> None:
    assigned = walks08.assign_offsets(b"", 5)
    assert assigned == (b"", 5, 5, 0, 0, 0)
