"""Messages, message sets and compression of Kafka 0.7, checked byte by byte.

Reference: 0.7.2's `message/Message.scala` and `ByteBufferMessageSet.scala`, as the layout
atop logbroker.protocol.message writes them out (offsets: docs/design.md §3.2). Every expected buffer is written out
one field per line. CRC values are literals computed independently of the code under test
(a bitwise CRC-32 in this file, `_crc32_reference`, checks the literals themselves).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable

import cramjam
import pytest

from logbroker.protocol import compression, errors
from logbroker.protocol.errors import (
    CorruptMessageError,
    InflatedSizeTooLargeError,
    InvalidMessageError,
    MessageSizeTooLargeError,
    UnknownCodecError,
    UnknownMagicError,
    error_code,
)
from logbroker.protocol.message import Message, decode_message, encode_message
from logbroker.protocol.message_set import (
    PRODUCE_MAX_NESTING,
    InflateBudget,
    MessageSet,
    first_entry_size,
    iter_entries,
)

from .walk_paths import BuildMessageSet, IterMessages, StoredSetEnd, Validate


def _crc32_reference(data: bytes) -> int:
    """CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320) bit by bit: java.util.zip.CRC32."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# CRC literals used below, each the CRC-32 of the payload named.
CRC_EMPTY = 0x00000000
CRC_HELLO = 0x3610A686
CRC_WORLD = 0x3A771143
CRC_A = 0xE8B7BE43
CRC_BC = 0xC2A92B38
CRC_DEF = 0x0CC4E161
CRC_X = 0x8CDC1683
CRC_YZ = 0x0FF44862

# The inner set [b"hello", b"world"] (magic 1, attributes 0), used by the wrapper tests.
INNER_HELLO_WORLD = b"".join(
    [
        struct.pack(">i", 11),  # entry size: 6 header bytes + 5 payload bytes
        b"\x01",  # magic 1
        b"\x00",  # attributes: codec none
        struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello"
        b"hello",  # payload
        struct.pack(">i", 11),  # entry size: 6 + 5
        b"\x01",  # magic 1
        b"\x00",  # attributes: codec none
        struct.pack(">I", CRC_WORLD),  # CRC32 of b"world"
        b"world",  # payload
    ]
)
CRC_INNER_HELLO_WORLD = 0x83EBD2A5  # CRC32 of the 30 bytes above (the gzip trailer uses it)


def _entry(magic: int, attributes: int, payload: bytes, crc: int | None = None) -> bytes:
    """A hand-made entry; the CRC is the reference CRC unless given. Independent of the codec."""
    crc = _crc32_reference(payload) if crc is None else crc
    if magic == 0:
        return struct.pack(">iBI", 5 + len(payload), 0, crc) + payload
    return struct.pack(">iBBI", 6 + len(payload), magic, attributes, crc) + payload


# ---------------------------------------------------------------------------------------
# The CRC literals themselves
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "crc"),
    [
        (b"", CRC_EMPTY),
        (b"hello", CRC_HELLO),
        (b"world", CRC_WORLD),
        (b"a", CRC_A),
        (b"bc", CRC_BC),
        (b"def", CRC_DEF),
        (b"x", CRC_X),
        (b"yz", CRC_YZ),
        (INNER_HELLO_WORLD, CRC_INNER_HELLO_WORLD),
    ],
)
def test_crc_literals_are_java_crc32(payload: bytes, crc: int) -> None:
    assert _crc32_reference(payload) == crc
    assert zlib.crc32(payload) == crc  # zlib's crc32 is java.util.zip.CRC32


# ---------------------------------------------------------------------------------------
# One message: magic 1 and magic 0
# ---------------------------------------------------------------------------------------


def test_encode_magic1() -> None:
    expected = b"".join(
        [
            struct.pack(">i", 11),  # entry size: 6 header bytes + 5 payload bytes
            b"\x01",  # magic 1
            b"\x00",  # attributes: codec none
            struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello"
            b"hello",  # payload
        ]
    )
    assert encode_message(b"hello") == expected
    assert encode_message(b"hello", codec=0, magic=1) == expected


def test_encode_magic0() -> None:
    expected = b"".join(
        [
            struct.pack(">i", 10),  # entry size: 5 header bytes + 5 payload bytes
            b"\x00",  # magic 0 (no attributes byte)
            struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello"
            b"hello",  # payload
        ]
    )
    assert encode_message(b"hello", magic=0) == expected


def test_encode_magic1_carries_the_codec_in_the_attributes() -> None:
    expected = b"".join(
        [
            struct.pack(">i", 11),  # entry size
            b"\x01",  # magic 1
            b"\x02",  # attributes: codec 2 (snappy); the CRC does not cover it
            struct.pack(">I", CRC_HELLO),  # CRC32 of the payload only
            b"hello",  # payload
        ]
    )
    assert encode_message(b"hello", codec=2) == expected


def test_decode_magic1() -> None:
    message = b"".join(
        [
            b"\x01",  # magic 1
            b"\x00",  # attributes
            struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello"
            b"hello",  # payload
        ]
    )
    assert decode_message(message) == (1, 0, b"hello")


def test_decode_magic0() -> None:
    message = b"".join(
        [
            b"\x00",  # magic 0
            struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello"
            b"hello",  # payload
        ]
    )
    assert decode_message(message) == (0, 0, b"hello")


def test_decode_magic1_refuses_unused_attribute_bits() -> None:
    """0.7 defines the codec's two bits only; the CRC does not cover the attributes, so bits
    above them are what a flipped bit looks like: damage, named."""
    message = b"".join(
        [
            b"\x01",  # magic 1
            b"\xfc",  # attributes: codec bits 0 (none), the 6 unused bits all set
            struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello" (right: it covers the payload)
            b"hello",  # payload
        ]
    )
    with pytest.raises(CorruptMessageError, match="attributes 0xfc: bits other than the codec"):
        decode_message(message)


def test_decode_checks_the_crc() -> None:
    message = b"".join(
        [
            b"\x01",  # magic 1
            b"\x00",  # attributes
            struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello" ...
            b"jello",  # ... but the payload differs in one byte
        ]
    )
    with pytest.raises(CorruptMessageError, match=r"CRC mismatch.*offset 77"):
        decode_message(message, offset=77)


def test_empty_payload_magic0_is_five_bytes(
    validate: Validate, iter_messages: IterMessages
) -> None:
    expected = b"".join(
        [
            struct.pack(">i", 5),  # entry size: the minimum message, 5 header bytes, no payload
            b"\x00",  # magic 0
            struct.pack(">I", CRC_EMPTY),  # CRC32 of b"" is 0
        ]
    )
    assert encode_message(b"", magic=0) == expected
    assert decode_message(expected[4:]) == (0, 0, b"")
    assert validate(expected) == (9, 1, 1, 0, None, 9, 0)
    assert list(iter_messages(expected)) == [Message(0, 9, b"", 0, 0)]


def test_empty_payload_magic1_is_six_bytes(validate: Validate, iter_messages: IterMessages) -> None:
    expected = b"".join(
        [
            struct.pack(">i", 6),  # entry size: 6 header bytes, no payload
            b"\x01",  # magic 1
            b"\x00",  # attributes
            struct.pack(">I", CRC_EMPTY),  # CRC32 of b"" is 0
        ]
    )
    assert encode_message(b"") == expected
    assert decode_message(expected[4:]) == (1, 0, b"")
    assert validate(expected) == (10, 1, 1, 0, None, 10, 0)
    assert list(iter_messages(expected)) == [Message(0, 10, b"", 1, 0)]


def test_encode_rejects_unknown_magic_and_a_codec_on_magic0() -> None:
    with pytest.raises(UnknownMagicError, match="2"):
        encode_message(b"hello", magic=2)
    with pytest.raises(UnknownCodecError):
        encode_message(b"hello", codec=1, magic=0)


def test_decode_rejects_a_message_under_the_minimum() -> None:
    with pytest.raises(CorruptMessageError, match=r"offset 9\b.*4 bytes"):
        decode_message(b"\x00\x00\x00\x00", offset=9)
    # 5 bytes is enough for magic 0 but not for magic 1 (magic, attributes, 4-byte CRC).
    with pytest.raises(CorruptMessageError, match="offset 9"):
        decode_message(b"\x01\x00\x00\x00\x00", offset=9)


# ---------------------------------------------------------------------------------------
# Message sets: offsets are byte positions; next offset = offset + 4 + size
# ---------------------------------------------------------------------------------------


MAGIC1_SET_A_BC_DEF = b"".join(
    [
        # entry at offset 0
        struct.pack(">i", 7),  # size: 6 + 1
        b"\x01",  # magic 1
        b"\x00",  # attributes
        struct.pack(">I", CRC_A),  # CRC32 of b"a"
        b"a",  # payload
        # entry at offset 11 (= 0 + 4 + 7)
        struct.pack(">i", 8),  # size: 6 + 2
        b"\x01",  # magic 1
        b"\x00",  # attributes
        struct.pack(">I", CRC_BC),  # CRC32 of b"bc"
        b"bc",  # payload
        # entry at offset 23 (= 11 + 4 + 8)
        struct.pack(">i", 9),  # size: 6 + 3
        b"\x01",  # magic 1
        b"\x00",  # attributes
        struct.pack(">I", CRC_DEF),  # CRC32 of b"def"
        b"def",  # payload
        # end at offset 36 (= 23 + 4 + 9)
    ]
)


def test_message_set_magic1_bytes_and_offsets(
    validate: Validate, iter_messages: IterMessages, build_message_set: BuildMessageSet
) -> None:
    buffer = build_message_set([b"a", b"bc", b"def"])
    assert buffer == MAGIC1_SET_A_BC_DEF
    assert len(buffer) == 36
    assert [(o, bytes(m)) for o, m in iter_entries(buffer)] == [
        (0, MAGIC1_SET_A_BC_DEF[4:11]),
        (11, MAGIC1_SET_A_BC_DEF[15:23]),
        (23, MAGIC1_SET_A_BC_DEF[27:36]),
    ]
    assert list(iter_messages(buffer)) == [
        Message(0, 11, b"a", 1, 0),
        Message(11, 23, b"bc", 1, 0),
        Message(23, 36, b"def", 1, 0),
    ]
    assert validate(buffer) == (36, 3, 3, 3, None, 36, 0)


def test_message_set_offsets_are_absolute(iter_messages: IterMessages) -> None:
    assert [(m.offset, m.next_offset) for m in iter_messages(MAGIC1_SET_A_BC_DEF, 1000)] == [
        (1000, 1011),
        (1011, 1023),
        (1023, 1036),
    ]
    assert [m.offset for m in MessageSet(MAGIC1_SET_A_BC_DEF, 1000)] == [1000, 1011, 1023]


def test_message_set_magic0_bytes_and_offsets(
    validate: Validate, iter_messages: IterMessages, build_message_set: BuildMessageSet
) -> None:
    expected = b"".join(
        [
            # entry at offset 0
            struct.pack(">i", 6),  # size: 5 + 1
            b"\x00",  # magic 0
            struct.pack(">I", CRC_A),  # CRC32 of b"a"
            b"a",  # payload
            # entry at offset 10 (= 0 + 4 + 6)
            struct.pack(">i", 7),  # size: 5 + 2
            b"\x00",  # magic 0
            struct.pack(">I", CRC_BC),  # CRC32 of b"bc"
            b"bc",  # payload
            # entry at offset 21 (= 10 + 4 + 7)
            struct.pack(">i", 8),  # size: 5 + 3
            b"\x00",  # magic 0
            struct.pack(">I", CRC_DEF),  # CRC32 of b"def"
            b"def",  # payload
            # end at offset 33 (= 21 + 4 + 8)
        ]
    )
    buffer = build_message_set([b"a", b"bc", b"def"], magic=0)
    assert buffer == expected
    assert list(iter_messages(buffer)) == [
        Message(0, 10, b"a", 0, 0),
        Message(10, 21, b"bc", 0, 0),
        Message(21, 33, b"def", 0, 0),
    ]
    assert validate(buffer) == (33, 3, 3, 3, None, 33, 0)


def test_magic0_and_magic1_entries_mix_in_one_set(iter_messages: IterMessages) -> None:
    buffer = encode_message(b"a", magic=0) + encode_message(b"bc") + encode_message(b"", magic=0)
    assert list(iter_messages(buffer)) == [
        Message(0, 10, b"a", 0, 0),  # 4 + 5 + 1
        Message(10, 22, b"bc", 1, 0),  # 4 + 6 + 2
        Message(22, 31, b"", 0, 0),  # 4 + 5 + 0
    ]


def test_empty_message_set(
    validate: Validate, iter_messages: IterMessages, build_message_set: BuildMessageSet
) -> None:
    assert build_message_set([]) == b""
    assert validate(b"") == (0, 0, 0, 0, None, 0, 0)
    assert not validate(b"").partial_tail
    assert list(iter_messages(b"")) == []


# ---------------------------------------------------------------------------------------
# Compressed sets: one wrapper message, magic 1, attributes = codec, CRC over compressed bytes
# ---------------------------------------------------------------------------------------


def test_gzip_wrapper_encode(
    validate: Validate, iter_messages: IterMessages, build_message_set: BuildMessageSet
) -> None:
    buffer = build_message_set([b"hello", b"world"], codec=compression.GZIP)
    (size,) = struct.unpack_from(">i", buffer, 0)
    assert size == len(buffer) - 4  # entry size: the whole rest of the buffer, one entry
    assert buffer[4:5] == b"\x01"  # magic 1
    assert buffer[5:6] == b"\x01"  # attributes: codec 1, gzip
    (crc,) = struct.unpack_from(">I", buffer, 6)  # CRC32 ...
    payload = buffer[10:]
    assert crc == _crc32_reference(payload)  # ... of the compressed bytes
    # The payload is one standard gzip member.
    assert payload[0:2] == b"\x1f\x8b"  # gzip magic
    assert payload[2:3] == b"\x08"  # compression method: deflate
    assert payload[3:4] == b"\x00"  # flags: no name, no comment, no extra
    assert payload[4:8] == b"\x00\x00\x00\x00"  # mtime 0: deterministic output
    assert payload[-8:-4] == struct.pack("<I", CRC_INNER_HELLO_WORLD)  # trailer: CRC32 of inner
    assert payload[-4:] == struct.pack("<I", 30)  # trailer: inflated size
    assert gzip.decompress(payload) == INNER_HELLO_WORLD  # inner: magic 1, attributes 0
    assert list(iter_messages(buffer)) == [
        Message(0, 0, b"hello", 1, 0),
        Message(0, len(buffer), b"world", 1, 0),
    ]
    assert validate(buffer) == (len(buffer), 1, 2, len(payload), None, len(buffer), 1)


# A gzip member holding INNER_HELLO_WORLD in one stored (uncompressed) deflate block, so that
# every byte of it can be written down.
GZIP_STORED_INNER = b"".join(
    [
        b"\x1f\x8b",  # gzip magic
        b"\x08",  # method: deflate
        b"\x00",  # flags
        b"\x00\x00\x00\x00",  # mtime
        b"\x00",  # extra flags
        b"\xff",  # OS: unknown
        b"\x01",  # deflate block header: BFINAL=1, BTYPE=00 (stored)
        struct.pack("<H", 30),  # LEN
        struct.pack("<H", 30 ^ 0xFFFF),  # NLEN
        INNER_HELLO_WORLD,  # the 30 stored bytes
        struct.pack("<I", CRC_INNER_HELLO_WORLD),  # CRC32 of the inflated bytes
        struct.pack("<I", 30),  # inflated size
    ]
)
CRC_GZIP_STORED_INNER = 0x60CCC557


def test_gzip_wrapper_decode(validate: Validate, iter_messages: IterMessages) -> None:
    buffer = b"".join(
        [
            struct.pack(">i", 59),  # entry size: 6 + 53 bytes of gzip
            b"\x01",  # magic 1
            b"\x01",  # attributes: gzip
            struct.pack(">I", CRC_GZIP_STORED_INNER),  # CRC32 of the 53 compressed bytes
            GZIP_STORED_INNER,  # payload
        ]
    )
    assert _crc32_reference(GZIP_STORED_INNER) == CRC_GZIP_STORED_INNER
    assert list(iter_messages(buffer, 200)) == [
        Message(200, 200, b"hello", 1, 0),  # resumes at the wrapper
        Message(200, 263, b"world", 1, 0),  # the last resumes after it: 200 + 4 + 59
    ]
    assert validate(buffer) == (63, 1, 2, 53, None, 63, 1)
    assert compression.decompress(compression.GZIP, GZIP_STORED_INNER) == INNER_HELLO_WORLD


# snappy-java's SnappyOutputStream framing of INNER_HELLO_WORLD. A 30-byte input is one literal
# in raw snappy (no compressor looks for matches in the last 15 bytes of its input).
SNAPPY_JAVA_INNER = b"".join(
    [
        b"\x82SNAPPY\x00",  # magic 82 53 4E 41 50 50 59 00
        struct.pack(">i", 1),  # version 1
        struct.pack(">i", 1),  # minimum compatible version 1
        struct.pack(">i", 32),  # block 1: 32 bytes of raw snappy
        b"\x1e",  # raw snappy: uncompressed length 30 (varint)
        b"\x74",  # literal tag: (30 - 1) << 2 | 0b00
        INNER_HELLO_WORLD,  # the literal's 30 bytes
    ]
)
CRC_SNAPPY_JAVA_INNER = 0xFFE58540

SNAPPY_WRAPPER = b"".join(
    [
        struct.pack(">i", 58),  # entry size: 6 + 52 bytes of snappy-java stream
        b"\x01",  # magic 1
        b"\x02",  # attributes: snappy
        struct.pack(">I", CRC_SNAPPY_JAVA_INNER),  # CRC32 of the 52 compressed bytes
        SNAPPY_JAVA_INNER,  # payload
    ]
)


def test_snappy_wrapper_encode(build_message_set: BuildMessageSet) -> None:
    assert _crc32_reference(SNAPPY_JAVA_INNER) == CRC_SNAPPY_JAVA_INNER
    assert build_message_set([b"hello", b"world"], codec=compression.SNAPPY) == SNAPPY_WRAPPER


def test_snappy_wrapper_decode(validate: Validate, iter_messages: IterMessages) -> None:
    assert list(iter_messages(SNAPPY_WRAPPER, 7)) == [
        Message(7, 7, b"hello", 1, 0),
        Message(7, 69, b"world", 1, 0),  # 7 + 4 + 58
    ]
    assert validate(SNAPPY_WRAPPER) == (62, 1, 2, 52, None, 62, 1)


def test_raw_snappy_without_magic_is_accepted_on_read(
    validate: Validate, iter_messages: IterMessages
) -> None:
    raw = b"".join(
        [
            b"\x1e",  # raw snappy block, no snappy-java header: uncompressed length 30
            b"\x74",  # literal tag, 30 bytes
            INNER_HELLO_WORLD,  # the literal
        ]
    )
    buffer = b"".join(
        [
            struct.pack(">i", 38),  # entry size: 6 + 32
            b"\x01",  # magic 1
            b"\x02",  # attributes: snappy
            struct.pack(">I", 0xF092FEC8),  # CRC32 of the 32 raw snappy bytes
            raw,  # payload
        ]
    )
    assert _crc32_reference(raw) == 0xF092FEC8
    assert [m.payload for m in iter_messages(buffer)] == [b"hello", b"world"]
    assert validate(buffer) == (42, 1, 2, 32, None, 42, 1)
    assert compression.snappy_java_decompress(raw) == INNER_HELLO_WORLD


def _snappy_java_blocks(stream: bytes) -> list[bytes]:
    """Walk snappy-java framing by hand: check the header, return the raw blocks."""
    assert stream[0:8] == bytes([0x82, 0x53, 0x4E, 0x41, 0x50, 0x50, 0x59, 0x00])  # magic
    assert stream[8:12] == b"\x00\x00\x00\x01"  # version 1
    assert stream[12:16] == b"\x00\x00\x00\x01"  # minimum compatible version 1
    blocks, pos = [], 16
    while pos < len(stream):
        (length,) = struct.unpack_from(">i", stream, pos)  # int32 block length
        blocks.append(stream[pos + 4 : pos + 4 + length])  # raw snappy block
        pos += 4 + length
    assert pos == len(stream)
    return blocks


def test_snappy_java_blocks_hold_at_most_32_kib_of_input() -> None:
    data = bytes(i * 7 % 251 for i in range(100_000))  # 100 KB: 3 × 32768 + 1696
    stream = compression.compress(compression.SNAPPY, data)
    blocks = _snappy_java_blocks(stream)
    assert len(blocks) == 4
    inflated = [bytes(cramjam.snappy.decompress_raw(b)) for b in blocks]
    assert [len(i) for i in inflated] == [32768, 32768, 32768, 1696]
    assert b"".join(inflated) == data
    assert compression.decompress(compression.SNAPPY, stream) == data


@pytest.mark.parametrize(
    ("size", "block_count"), [(0, 0), (1, 1), (32768, 1), (32769, 2), (65536, 2)]
)
def test_snappy_java_block_boundaries(size: int, block_count: int) -> None:
    data = b"z" * size
    stream = compression.snappy_java_compress(data)
    assert len(_snappy_java_blocks(stream)) == block_count
    assert compression.snappy_java_decompress(stream) == data


def test_codec_names() -> None:
    assert compression.codec_by_name("gzip") == 1
    assert compression.codec_by_name(" Snappy ") == 2
    assert compression.codec_by_name("none") == 0
    assert compression.codec_by_name("1") == 1
    with pytest.raises(UnknownCodecError, match="lz4"):
        compression.codec_by_name("lz4")
    with pytest.raises(UnknownCodecError, match="3"):
        compression.compress(3, b"x")
    with pytest.raises(UnknownCodecError, match="3"):
        compression.decompress(3, b"x")


# ---------------------------------------------------------------------------------------
# 0.7's next-offset rule through a compressed wrapper
# ---------------------------------------------------------------------------------------


def test_next_offset_rule_inside_a_compressed_wrapper(
    validate: Validate, iter_messages: IterMessages, build_message_set: BuildMessageSet
) -> None:
    base = 500
    plain_a = encode_message(b"a")  # 11 bytes at 500
    wrapper = build_message_set([b"x", b"yz", b"hello"], codec=compression.GZIP)  # at 511
    plain_bc = encode_message(b"bc")  # after the wrapper
    buffer = plain_a + wrapper + plain_bc
    wrapper_at = base + 11
    after_wrapper = wrapper_at + len(wrapper)
    assert list(iter_messages(buffer, base)) == [
        Message(500, 511, b"a", 1, 0),
        Message(wrapper_at, wrapper_at, b"x", 1, 0),  # resumes at the wrapper
        Message(wrapper_at, wrapper_at, b"yz", 1, 0),  # resumes at the wrapper
        Message(wrapper_at, after_wrapper, b"hello", 1, 0),  # the last resumes after it
        Message(after_wrapper, after_wrapper + 12, b"bc", 1, 0),
    ]
    check = validate(buffer, base)
    assert check == (len(buffer), 3, 5, len(wrapper) - 10, None, len(buffer), 1)


def test_next_offset_rule_for_a_single_message_wrapper(
    iter_messages: IterMessages, build_message_set: BuildMessageSet
) -> None:
    wrapper = build_message_set([b"only"], codec=compression.SNAPPY)
    assert list(iter_messages(wrapper, 40)) == [Message(40, 40 + len(wrapper), b"only", 1, 0)]


def test_nested_compression_is_iterated(
    validate: Validate, iter_messages: IterMessages, build_message_set: BuildMessageSet
) -> None:
    inner_wrapper = build_message_set([b"x", b"yz"], codec=compression.SNAPPY)
    outer_payload = gzip.compress(inner_wrapper + encode_message(b"def"), mtime=0)
    buffer = _entry(1, compression.GZIP, outer_payload)
    assert [(m.offset, m.next_offset, m.payload) for m in iter_messages(buffer, 3)] == [
        (3, 3, b"x"),
        (3, 3, b"yz"),
        (3, 3 + len(buffer), b"def"),
    ]
    assert validate(buffer).messages == 3


# ---------------------------------------------------------------------------------------
# Unknown magic and codec: clear errors naming the value and the offset
# ---------------------------------------------------------------------------------------


def test_unknown_magic(validate: Validate, iter_messages: IterMessages) -> None:
    bad = b"".join(
        [
            struct.pack(">i", 11),  # entry size
            b"\x02",  # magic 2: unknown
            b"\x00",  # (would be attributes)
            struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello"
            b"hello",  # payload
        ]
    )
    with pytest.raises(UnknownMagicError, match=r"magic byte 2\b.*offset 4321\b"):
        decode_message(bad[4:], offset=4321)
    buffer = MAGIC1_SET_A_BC_DEF + bad  # the bad entry is at offset 36
    iterator = iter_messages(buffer, 1000)
    assert [m.payload for m in (next(iterator), next(iterator), next(iterator))] == [
        b"a",
        b"bc",
        b"def",
    ]
    with pytest.raises(UnknownMagicError, match=r"magic byte 2\b.*offset 1036\b"):
        next(iterator)
    check = validate(buffer, 1000)
    assert isinstance(check.error, UnknownMagicError)
    assert "magic byte 2" in str(check.error)
    assert "offset 1036" in str(check.error)
    assert (check.valid_bytes, check.entries, check.messages) == (36, 3, 3)
    assert not check.partial_tail


def test_unknown_codec(validate: Validate, iter_messages: IterMessages) -> None:
    bad = b"".join(
        [
            struct.pack(">i", 11),  # entry size
            b"\x01",  # magic 1
            b"\x03",  # attributes: codec 3, unknown
            struct.pack(">I", CRC_HELLO),  # CRC32 of b"hello" (right, so only the codec is wrong)
            b"hello",  # payload
        ]
    )
    with pytest.raises(UnknownCodecError, match=r"codec 3\b.*offset 55\b"):
        decode_message(bad[4:], offset=55)
    with pytest.raises(UnknownCodecError, match=r"codec 3\b.*offset 1011\b"):
        list(iter_messages(encode_message(b"a") + bad, 1000))
    check = validate(encode_message(b"a") + bad, 1000)
    assert isinstance(check.error, UnknownCodecError)
    assert "codec 3" in str(check.error)
    assert "offset 1011" in str(check.error)
    assert (check.valid_bytes, check.entries, check.messages) == (11, 1, 1)


def test_unknown_errors_are_invalid_message_errors(validate: Validate) -> None:
    for cls in (UnknownMagicError, UnknownCodecError, CorruptMessageError):
        assert issubclass(cls, InvalidMessageError)
        assert errors.error_code(cls("x")) == 2


# ---------------------------------------------------------------------------------------
# validate(): partial tails are quiet, damage is an error
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [24, 26, 27, 28, 33, 35])
def test_validate_stops_quietly_at_a_partial_trailing_entry(
    validate: Validate, cut: int, iter_messages: IterMessages
) -> None:
    # Entries at 0, 11, 23 (end 36): cut anywhere inside the third entry, from its size field on.
    check = validate(MAGIC1_SET_A_BC_DEF[:cut])
    assert check.error is None
    assert check.partial_tail
    assert check.valid_bytes == 23  # end of the last whole entry
    assert (check.entries, check.messages, check.length) == (2, 2, cut)
    assert [m.payload for m in iter_messages(MAGIC1_SET_A_BC_DEF[:cut])] == [b"a", b"bc"]


@pytest.mark.parametrize("cut", [1, 4, 5, 10])
def test_validate_partial_first_entry(validate: Validate, cut: int) -> None:
    check = validate(MAGIC1_SET_A_BC_DEF[:cut])
    assert (check.valid_bytes, check.entries, check.error, check.partial_tail) == (
        0,
        0,
        None,
        True,
    )


def test_validate_partial_compressed_wrapper(validate: Validate) -> None:
    check = validate(SNAPPY_WRAPPER[:-1])
    assert (check.valid_bytes, check.entries, check.error, check.partial_tail) == (
        0,
        0,
        None,
        True,
    )


@pytest.mark.parametrize("size", [4, 0, -1, -(2**31)])
def test_validate_reports_a_size_under_five(
    validate: Validate, size: int, iter_messages: IterMessages
) -> None:
    buffer = b"".join(
        [
            encode_message(b"a"),  # a good entry, offset 0, 11 bytes
            struct.pack(">i", size),  # entry size under the minimum of 5
            b"\x00" * 16,  # whatever follows
        ]
    )
    check = validate(buffer, 100)
    assert isinstance(check.error, CorruptMessageError)
    assert f"offset 111 declares {size} bytes" in str(check.error)
    assert (check.valid_bytes, check.entries, check.messages) == (11, 1, 1)
    with pytest.raises(CorruptMessageError, match="offset 111"):
        list(iter_messages(buffer, 100))


def test_validate_reports_a_size_under_five_in_the_last_four_bytes(
    validate: Validate, iter_messages: IterMessages
) -> None:
    # Four bytes are enough to read the size; 0.7 (`shallowValidBytes`) throws for size < 5
    # as soon as it has read it, and so does iter_messages.
    buffer = encode_message(b"a") + struct.pack(">i", 0)  # entry size 0, nothing after it
    check = validate(buffer)
    assert isinstance(check.error, CorruptMessageError)
    assert (check.valid_bytes, check.entries) == (11, 1)
    with pytest.raises(CorruptMessageError, match="offset 11"):
        list(iter_messages(buffer))


@pytest.mark.parametrize("at_end", [True, False])
def test_validate_reports_a_magic1_entry_of_five_bytes(
    validate: Validate, at_end: bool, iter_messages: IterMessages
) -> None:
    short = b"".join(
        [
            struct.pack(">i", 5),  # entry size 5: enough for magic 0, one short for magic 1
            b"\x01",  # magic 1
            b"\x00",  # attributes
            b"\x00\x00\x00",  # three bytes of a CRC
        ]
    )
    buffer = encode_message(b"a") + short + (b"" if at_end else encode_message(b"bc"))
    check = validate(buffer)
    assert isinstance(check.error, CorruptMessageError)
    assert "offset 11" in str(check.error)
    assert (check.valid_bytes, check.entries) == (11, 1)
    with pytest.raises(CorruptMessageError, match="offset 11"):
        list(iter_messages(buffer))


def test_validate_reports_a_crc_mismatch(validate: Validate, iter_messages: IterMessages) -> None:
    damaged = bytearray(MAGIC1_SET_A_BC_DEF)
    damaged[21] ^= 0x01  # first payload byte of the second entry ("b" -> "c")
    check = validate(damaged, 100)
    assert isinstance(check.error, CorruptMessageError)
    assert "CRC mismatch" in str(check.error)
    assert "offset 111" in str(check.error)
    assert f"{CRC_BC:#010x}" in str(check.error)  # the stored CRC
    assert (check.valid_bytes, check.entries, check.messages) == (11, 1, 1)
    with pytest.raises(CorruptMessageError, match=r"CRC mismatch.*offset 111"):
        list(iter_messages(damaged, 100))


def test_validate_reports_attribute_bits_that_no_codec_uses(validate: Validate) -> None:
    """0.7's CRC covers the payload only: a flipped attribute bit keeps the CRC right. No
    writer sets the bits above the codec's, so a set with one is damage, named."""
    damaged = bytearray(MAGIC1_SET_A_BC_DEF)
    damaged[16] |= 0x04  # the second entry's attributes (its size, magic, then this byte)
    check = validate(damaged, 100)
    assert isinstance(check.error, CorruptMessageError)
    assert str(check.error).endswith(
        "the entry at offset 111 has attributes 0x04: bits other than the codec's are set"
    )
    assert (check.valid_bytes, check.entries) == (11, 1)


def test_validate_reports_a_damaged_crc_field(validate: Validate) -> None:
    damaged = bytearray(MAGIC1_SET_A_BC_DEF)
    damaged[17] ^= 0x80  # first byte of the second entry's CRC
    check = validate(damaged)
    assert isinstance(check.error, CorruptMessageError)
    assert check.valid_bytes == 11


def _wrapper_checks(
    validate: Validate,
    iter_messages: IterMessages,
    buffer: bytes,
    *,
    fragment: str,
    error: type[InvalidMessageError] = CorruptMessageError,
) -> None:
    check = validate(encode_message(b"a") + buffer, 100)
    assert isinstance(check.error, error), check
    assert "offset 111" in str(check.error)
    assert fragment in str(check.error)
    assert (check.valid_bytes, check.entries, check.messages) == (11, 1, 1)
    with pytest.raises(error, match="offset 111"):
        list(iter_messages(encode_message(b"a") + buffer, 100))


def test_validate_reports_a_corrupt_gzip_payload(
    validate: Validate, iter_messages: IterMessages
) -> None:
    # The wrapper's CRC is right (it covers the compressed bytes); the bytes are not gzip.
    _wrapper_checks(
        validate, iter_messages, _entry(1, compression.GZIP, b"this is not gzip"), fragment="gzip"
    )


def test_validate_reports_a_truncated_gzip_payload(
    validate: Validate, iter_messages: IterMessages
) -> None:
    _wrapper_checks(
        validate,
        iter_messages,
        _entry(1, compression.GZIP, GZIP_STORED_INNER[:-9]),
        fragment="gzip",
    )


def test_validate_reports_a_gzip_payload_with_a_bad_trailer(
    validate: Validate, iter_messages: IterMessages
) -> None:
    bad_trailer = GZIP_STORED_INNER[:-8] + struct.pack("<II", CRC_INNER_HELLO_WORLD ^ 1, 30)
    _wrapper_checks(
        validate, iter_messages, _entry(1, compression.GZIP, bad_trailer), fragment="gzip"
    )


def test_validate_reports_a_corrupt_snappy_payload(
    validate: Validate, iter_messages: IterMessages
) -> None:
    # Raw snappy (first byte not 0x82) whose literal runs past the end of the block.
    _wrapper_checks(
        validate, iter_messages, _entry(1, compression.SNAPPY, b"\x1e\x74hello"), fragment="snappy"
    )


@pytest.mark.parametrize(
    "stream",
    [
        SNAPPY_JAVA_INNER[:-1],  # the block runs past the end
        SNAPPY_JAVA_INNER[:18],  # the block length is cut off
        b"\x82SNAPPX\x00" + SNAPPY_JAVA_INNER[8:],  # 0x82 but not the snappy-java magic
        b"\x82SNAPPY\x00\x00\x00",  # header cut off
        SNAPPY_JAVA_INNER[:16] + struct.pack(">i", -1) + SNAPPY_JAVA_INNER[20:],  # length -1
        SNAPPY_JAVA_INNER[:21] + b"\x78" + SNAPPY_JAVA_INNER[22:],  # literal longer than block
    ],
)
def test_validate_reports_a_corrupt_snappy_java_stream(
    validate: Validate, stream: bytes, iter_messages: IterMessages
) -> None:
    _wrapper_checks(
        validate, iter_messages, _entry(1, compression.SNAPPY, stream), fragment="snappy"
    )


def test_validate_reports_a_snappy_block_claiming_too_much(
    validate: Validate, iter_messages: IterMessages
) -> None:
    # varint 0xffffffff0f: 4 GiB claimed by a 6-byte block; refused before inflating.
    _wrapper_checks(
        validate,
        iter_messages,
        _entry(1, compression.SNAPPY, b"\xff\xff\xff\xff\x0f\x00"),
        fragment="snappy",
        error=InflatedSizeTooLargeError,
    )


def _gzip_wrapper(inner: bytes) -> bytes:
    return _entry(1, compression.GZIP, gzip.compress(inner, mtime=0))


def test_validate_reports_a_damaged_inner_crc(
    validate: Validate, iter_messages: IterMessages
) -> None:
    inner = bytearray(INNER_HELLO_WORLD)
    inner[25] ^= 0x20  # "world" -> "World"
    _wrapper_checks(validate, iter_messages, _gzip_wrapper(bytes(inner)), fragment="CRC mismatch")


def test_validate_reports_a_partial_inner_entry(
    validate: Validate, iter_messages: IterMessages
) -> None:
    _wrapper_checks(
        validate, iter_messages, _gzip_wrapper(INNER_HELLO_WORLD[:-1]), fragment="partial"
    )


def test_validate_reports_an_inner_size_under_five(
    validate: Validate, iter_messages: IterMessages
) -> None:
    _wrapper_checks(
        validate,
        iter_messages,
        _gzip_wrapper(INNER_HELLO_WORLD + struct.pack(">i", 2)),
        fragment="minimum",
    )


def test_validate_reports_an_inner_unknown_magic(
    validate: Validate, iter_messages: IterMessages
) -> None:
    inner = INNER_HELLO_WORLD[:15] + b"\x00\x00\x00\x0b\x07" + INNER_HELLO_WORLD[20:]
    _wrapper_checks(validate, iter_messages, _gzip_wrapper(inner), fragment="magic byte 7")


def test_validate_reports_an_empty_compressed_set(
    validate: Validate, iter_messages: IterMessages
) -> None:
    # 0.7 never writes one (an empty list compresses to an empty buffer) and its iterator
    # cannot advance past one; both validate and iter_messages refuse it.
    _wrapper_checks(validate, iter_messages, _gzip_wrapper(b""), fragment="empty")
    _wrapper_checks(
        validate,
        iter_messages,
        _entry(1, compression.SNAPPY, compression.snappy_java_compress(b"")),
        fragment="empty",
    )


def test_compressing_no_messages_gives_an_empty_set(build_message_set: BuildMessageSet) -> None:
    # MessageSet.createByteBuffer in 0.7: no messages -> an empty buffer, never an empty wrapper.
    assert build_message_set([], codec=compression.GZIP) == b""
    assert build_message_set([], codec=compression.SNAPPY) == b""


def test_building_refuses_an_unknown_magic_or_codec(build_message_set: BuildMessageSet) -> None:
    with pytest.raises(UnknownMagicError, match=r"^unknown magic byte 2 \(known: 0, 1\)$"):
        build_message_set([b"a"], magic=2)
    with pytest.raises(UnknownCodecError, match=r"^unknown compression codec 3$"):
        build_message_set([b"a"], codec=3)
    # Magic 0 with a codec: the wrapper and its messages are magic 1, as 0.7 wrote them.
    assert build_message_set([b"x", b"yz"], codec=compression.GZIP, magic=0) == (
        build_message_set([b"x", b"yz"], codec=compression.GZIP)
    )


def test_building_takes_any_iterable_of_bytes_like_payloads(
    build_message_set: BuildMessageSet,
) -> None:
    # The compiled builder hands what is not exactly bytes to the reference, in order.
    payloads = [b"a", bytearray(b"bc"), memoryview(b"def")]
    assert build_message_set(iter(payloads)) == MAGIC1_SET_A_BC_DEF
    assert build_message_set(p for p in [b"a", b"bc", b"def"]) == MAGIC1_SET_A_BC_DEF
    with pytest.raises(TypeError, match="a bytes-like object is required, not 'str'"):
        build_message_set([b"a", "bc"])
    with pytest.raises(TypeError, match=r"object of type 'int' has no len\(\)"):
        build_message_set([b"a", 7], magic=0)


def test_stored_set_end_counts_whole_checked_entries(stored_set_end: StoredSetEnd) -> None:
    wrapped = _gzip_wrapper(INNER_HELLO_WORLD)  # inner not looked at: a copier forwards it
    data = MAGIC1_SET_A_BC_DEF + encode_message(b"z", magic=0) + wrapped
    assert stored_set_end(data, 7) == (len(data), 5)
    for cut in range(len(data)):
        whole = [end for end in (11, 23, 36, 46, len(data)) if end <= cut]
        assert stored_set_end(data[:cut]) == (whole[-1] if whole else 0, len(whole))
    assert stored_set_end(bytearray(data)) == stored_set_end(memoryview(data)) == (len(data), 5)
    assert stored_set_end(b"") == (0, 0)


@pytest.mark.parametrize(
    ("damage", "error", "message"),
    [
        (
            lambda b: b[:11] + struct.pack(">i", 4) + b[15:],
            CorruptMessageError,
            "entry at offset 111 declares 4 bytes, under the minimum message size 5",
        ),
        (
            lambda b: b[:11] + struct.pack(">iB", 5, 1) + b[16:],
            CorruptMessageError,
            "magic 1 entry at offset 111 is only 5 bytes",
        ),
        (
            lambda b: b[:15] + b"\x07" + b[16:],
            UnknownMagicError,
            "unknown magic byte 7 in the entry at offset 111",
        ),
        (lambda b: b[:-1] + b"x", CorruptMessageError, "CRC mismatch in the entry at offset 123"),
        (
            lambda b: b[:18] + b"\x00" + b[19:],
            CorruptMessageError,
            "CRC mismatch in the entry at offset 111",
        ),
    ],
)
def test_stored_set_end_names_the_damaged_entry(
    stored_set_end: StoredSetEnd,
    damage: Callable[[bytes], bytes],
    error: type[InvalidMessageError],
    message: str,
) -> None:
    with pytest.raises(error) as raised:
        stored_set_end(damage(MAGIC1_SET_A_BC_DEF), 100)
    assert str(raised.value) == message


def test_validate_reports_nesting_too_deep(validate: Validate, iter_messages: IterMessages) -> None:
    buffer = encode_message(b"deep")
    for _ in range(6):
        buffer = _gzip_wrapper(buffer)
    check = validate(buffer)
    assert isinstance(check.error, CorruptMessageError)
    assert "nests deeper" in str(check.error)
    with pytest.raises(CorruptMessageError):
        list(iter_messages(buffer))


def test_validate_and_iter_messages_agree_on_the_nesting_limit(
    validate: Validate, iter_messages: IterMessages
) -> None:
    buffer = encode_message(b"deep")
    for _ in range(4):  # four wrappers, one inside the other: the most that is accepted
        buffer = _gzip_wrapper(buffer)
    assert validate(buffer).error is None
    assert [m.payload for m in iter_messages(buffer)] == [b"deep"]
    buffer = _gzip_wrapper(buffer)  # a fifth
    assert isinstance(validate(buffer).error, CorruptMessageError)
    with pytest.raises(CorruptMessageError, match="nests deeper"):
        list(iter_messages(buffer))


def test_validate_bounds_what_a_compressed_set_may_inflate_to(
    validate: Validate, build_message_set: BuildMessageSet
) -> None:
    inner = build_message_set([b"\x00" * 10_000] * 10)
    check = validate(_gzip_wrapper(inner), budget=InflateBudget(50_000, 1 << 30, 1))
    assert isinstance(check.error, InflatedSizeTooLargeError)
    assert error_code(check.error) == MessageSizeTooLargeError.code
    assert "limit of one set (50000 bytes)" in str(check.error)
    assert check.valid_bytes == 0
    assert (
        validate(_gzip_wrapper(inner), budget=InflateBudget(len(inner), len(inner), 1)).error
        is None
    )


def test_one_budget_bounds_what_all_sets_of_a_request_inflate_to(
    validate: Validate, build_message_set: BuildMessageSet
) -> None:
    inner = build_message_set([b"\x00" * 10_000] * 10)  # 100,100 bytes inflated
    budget = InflateBudget(len(inner), 2 * len(inner) + 10, 1)
    assert validate(_gzip_wrapper(inner), budget=budget).error is None
    assert validate(_gzip_wrapper(inner), budget=budget).error is None
    assert budget.remaining == 10
    third = validate(_gzip_wrapper(inner), budget=budget)
    assert isinstance(third.error, InflatedSizeTooLargeError)
    assert "left of the request's limit (10 bytes)" in str(third.error)


def test_a_produce_budget_refuses_nested_compression_that_stored_data_may_hold(
    validate: Validate,
) -> None:
    nested = _gzip_wrapper(_gzip_wrapper(encode_message(b"deep")))
    assert validate(nested).error is None  # an older broker stored it: still readable
    check = validate(nested, budget=InflateBudget(1 << 20, 1 << 20, PRODUCE_MAX_NESTING))
    assert isinstance(check.error, CorruptMessageError)
    assert "nests deeper than 1 level" in str(check.error)
    assert check.valid_bytes == 0


def test_validate_without_inflating_checks_wrappers_and_counts_them(validate: Validate) -> None:
    buffer = encode_message(b"plain") + _gzip_wrapper(encode_message(b"inner"))
    shallow = validate(buffer, inflate=False)
    assert (shallow.error, shallow.valid_bytes, shallow.compressed) == (None, len(buffer), 1)
    assert shallow.messages == 1  # the wrapper's messages are counted by the whole check
    deep = validate(buffer)
    assert (deep.messages, deep.compressed) == (2, 1)
    damaged = bytearray(buffer)
    damaged[-1] ^= 0xFF  # the wrapper's CRC no longer matches
    assert isinstance(validate(bytes(damaged), inflate=False).error, CorruptMessageError)


def test_validate_largest_payload_is_top_level(validate: Validate) -> None:
    buffer = encode_message(b"a" * 50) + encode_message(b"b" * 70) + encode_message(b"c")
    assert validate(buffer).largest_payload == 70


def test_a_large_inflated_set_is_checked_like_any_other(validate: Validate) -> None:
    # Over 256 KiB: the compiled walk checks an inflated set (depth 1) without the GIL.
    entries = [encode_message(bytes([i % 251]) * 200) for i in range(2000)]
    big = b"".join(entries)  # 2000 x 210 bytes
    assert len(big) > 256 * 1024
    assert validate(big, depth=1) == validate(big) == (len(big), 2000, 2000, 200, None, len(big), 0)
    assert validate(_gzip_wrapper(big)).messages == 2000
    damaged = bytearray(big)
    damaged[1500 * 210 + 100] ^= 0x04  # a payload byte of entry 1500
    for check in (validate(damaged, 7, depth=1), validate(bytes(damaged), 7)):
        assert (check.valid_bytes, check.entries, check.messages) == (1500 * 210, 1500, 1500)
        assert isinstance(check.error, CorruptMessageError)
        assert str(check.error).startswith(f"CRC mismatch in the entry at offset {7 + 1500 * 210}:")
    wrapped = validate(_gzip_wrapper(bytes(damaged)))
    assert isinstance(wrapped.error, CorruptMessageError)
    assert "compressed set at offset 0: CRC mismatch in the entry at offset 315000" in str(
        wrapped.error
    )


def test_validate_accepts_any_buffer_type(validate: Validate, iter_messages: IterMessages) -> None:
    for buffer in (
        MAGIC1_SET_A_BC_DEF,
        bytearray(MAGIC1_SET_A_BC_DEF),
        memoryview(MAGIC1_SET_A_BC_DEF),
    ):
        assert validate(buffer) == (36, 3, 3, 3, None, 36, 0)
        assert [m.payload for m in iter_messages(buffer)] == [b"a", b"bc", b"def"]


def test_message_set_view() -> None:
    view = MessageSet.of([b"a", b"bc", b"def"])
    assert bytes(view) == MAGIC1_SET_A_BC_DEF
    assert len(view) == 36
    assert view.validate().valid_bytes == 36
    assert [o for o, _ in MessageSet(MAGIC1_SET_A_BC_DEF, 8).entries()] == [8, 19, 31]


# ---------------------------------------------------------------------------------------
# first_entry_size
# ---------------------------------------------------------------------------------------


def test_first_entry_size() -> None:
    assert first_entry_size(b"") is None
    assert first_entry_size(b"\x00\x00\x00") is None  # fewer than 4 bytes
    assert first_entry_size(b"\x00\x00\x00\x0b") == 15  # 4 + 11, nothing of the message yet
    assert first_entry_size(MAGIC1_SET_A_BC_DEF) == 11  # 4 + 7
    assert first_entry_size(MAGIC1_SET_A_BC_DEF[:6]) == 11  # a cut-off entry still tells
    assert first_entry_size(struct.pack(">i", 1_000_000) + b"x" * 10) == 1_000_004
    assert first_entry_size(memoryview(SNAPPY_WRAPPER)) == 62


# ---------------------------------------------------------------------------------------
# Error codes (ErrorMapping.scala, plus two extensions)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (-1, errors.UnknownError),
        (1, errors.OffsetOutOfRangeError),
        (2, errors.InvalidMessageError),
        (3, errors.WrongPartitionError),
        (4, errors.InvalidFetchSizeError),
        (5, errors.MessageSizeTooLargeError),
        (6, errors.InvalidTopicError),
    ],
)
def test_error_code_round_trip(code: int, cls: type[errors.LogbrokerError]) -> None:
    exc = errors.error_for_code(code)
    assert type(exc) is cls
    assert cls.code == code
    assert errors.error_code(exc) == code
    assert str(code) in str(exc)
    assert str(errors.error_for_code(code, "detail")) == "detail"


def test_error_code_zero_is_no_error() -> None:
    assert errors.NO_ERROR == 0
    # 0 has no exception class of its own; a client never turns 0 into an exception.
    assert all(errors.error_for_code(code).code != 0 for code in range(-1, 7))


def test_error_code_of_other_exceptions() -> None:
    assert errors.error_code(UnknownMagicError("x")) == 2  # subclasses map to their parent
    assert errors.error_code(CorruptMessageError("x")) == 2
    assert errors.error_code(ValueError("x")) == -1  # anything else is Unknown
    assert errors.error_code(errors.InvalidRequestError("x")) == -1
    unknown = errors.error_for_code(99)  # a code this side does not know
    assert type(unknown) is errors.UnknownError
    assert "99" in str(unknown)


def test_gzip_reads_every_member_like_gzipinputstream() -> None:
    import gzip

    from logbroker.protocol.compression import GZIP, decompress

    two = gzip.compress(b"first ", mtime=0) + gzip.compress(b"second", mtime=0)
    assert decompress(GZIP, two) == b"first second"
    assert decompress(GZIP, two + b"trailing junk") == b"first second"  # ignored, as Java did
    with pytest.raises(CorruptMessageError, match="truncated"):
        decompress(GZIP, two + gzip.compress(b"third", mtime=0)[:-3])
