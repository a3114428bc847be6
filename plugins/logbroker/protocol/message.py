"""One Kafka 0.7 message (`message/Message.scala`). All integers big-endian.

A message set entry is `int32 N | N bytes of message`; the message itself is one of:

    magic 0 (brod, samsa, pykafka; what the design doc describes)
      offset  size   field
      0       1      magic = 0
      1       4      CRC32 of the payload (unsigned)
      5       N - 5  payload

    magic 1 (what the Java 0.7 client writes)
      offset  size   field
      0       1      magic = 1
      1       1      attributes: low 2 bits = compression codec (0 none, 1 gzip, 2 snappy)
      2       4      CRC32 of the payload (unsigned)
      6       N - 6  payload

The CRC is zlib's crc32 over the payload only; magic and attributes are not covered.
The smallest legal message is 5 bytes (magic 0, empty payload). The next offset after an
entry at offset `o` is `o + 4 + N`.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from .compression import CODEC_NAMES
from .errors import CorruptMessageError, UnknownCodecError, UnknownMagicError

ENTRY_OVERHEAD = 4  # the int32 size in front of every message
MIN_MESSAGE_SIZE = 5  # magic 0 with an empty payload
MAGIC0_HEADER = 5  # magic, crc
MAGIC1_HEADER = 6  # magic, attributes, crc
CODEC_MASK = 0x03

ENTRY_MAGIC1 = struct.Struct(">iBBI")  # size, magic, attributes, crc
ENTRY_MAGIC0 = struct.Struct(">iBI")  # size, magic, crc


class Message(NamedTuple):
    """A message met while iterating a set.

    `offset` is where a consumer that wants this message again starts fetching, and
    `next_offset` is where it resumes after it. For a message inside a compressed wrapper
    both point at wrapper boundaries (0.7's rule): every inner message but the last resumes
    at the wrapper itself, the last at the entry after the wrapper.
    """

    offset: int
    next_offset: int
    payload: bytes
    magic: int = 1
    attributes: int = 0

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK


def encode_message(payload: bytes, codec: int = 0, magic: int = 1) -> bytes:
    """One message set entry: `int32 size | message`."""
    crc = zlib.crc32(payload)
    if magic == 1:
        return ENTRY_MAGIC1.pack(MAGIC1_HEADER + len(payload), 1, codec & CODEC_MASK, crc) + payload
    if magic == 0:
        if codec:
            raise UnknownCodecError("magic 0 messages cannot carry a compression codec")
        return ENTRY_MAGIC0.pack(MAGIC0_HEADER + len(payload), 0, crc) + payload
    raise UnknownMagicError(f"unknown magic byte {magic} (known: 0, 1)")


def decode_message(message: bytes | memoryview, offset: int = 0) -> tuple[int, int, bytes]:
    """(magic, attributes, payload) of one message (without its size prefix), CRC checked.

    `offset` only names the place in errors.
    """
    view = memoryview(message)
    if len(view) < MIN_MESSAGE_SIZE:
        raise CorruptMessageError(
            f"message at offset {offset} is {len(view)} bytes, under the minimum of {MIN_MESSAGE_SIZE}"
        )
    magic = view[0]
    if magic == 1:
        if len(view) < MAGIC1_HEADER:
            raise CorruptMessageError(f"magic 1 message at offset {offset} is {len(view)} bytes")
        attributes = view[1]
        (crc,) = struct.unpack_from(">I", view, 2)
        payload = view[MAGIC1_HEADER:]
    elif magic == 0:
        attributes = 0
        (crc,) = struct.unpack_from(">I", view, 1)
        payload = view[MAGIC0_HEADER:]
    else:
        raise UnknownMagicError(f"unknown magic byte {magic} in the message at offset {offset}")
    if attributes & ~CODEC_MASK:
        raise unused_attribute_bits(attributes, offset)
    if attributes & CODEC_MASK not in CODEC_NAMES:
        raise UnknownCodecError(
            f"unknown compression codec {attributes & CODEC_MASK} in the message at offset {offset}"
        )
    actual = zlib.crc32(payload)
    if actual != crc:
        raise CorruptMessageError(
            f"CRC mismatch in the message at offset {offset}: stored {crc:#010x}, computed {actual:#010x}"
        )
    return magic, attributes, bytes(payload)


def unused_attribute_bits(attributes: int, offset: int) -> CorruptMessageError:
    """The error for an entry whose attributes set bits above the codec's. 0.7's CRC covers
    the payload only, so a flipped attribute bit keeps the CRC right; no 0.7 writer sets
    those bits, so every walk of a set takes them for damage."""
    return CorruptMessageError(
        f"the entry at offset {offset} has attributes {attributes:#04x}: bits other than the "
        "codec's are set"
    )
