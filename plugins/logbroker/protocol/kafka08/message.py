"""One Kafka 0.8 message, magic 0 (`message/Message.scala` of 0.8.2). All integers big-endian.

A message set entry (message_set.py) is `int64 offset | int32 N | N bytes of message`; the
message itself:

    offset  size  field
    0       4     crc: CRC32 (zlib's, unsigned) of every byte after it, magic to the end
    4       1     magic = 0
    5       1     attributes: low 3 bits the compression codec (0 none, 1 gzip, 2 snappy in
                  snappy-java's framing or as one raw block, 3 lz4: refused here); other
                  bits 0
    6       4     key length K (-1 = null key)
    10      K     key
    10+K    4     value length V (-1 = null value)
    14+K    V     value

So N = 14 + max(K, 0) + max(V, 0) exactly: a length that runs past the message or leaves
bytes after the value makes the message invalid, as a CRC mismatch does. The smallest
message is 14 bytes (both null). Unlike 0.7's message, the CRC covers the magic and the
attributes too, and there is a key.
"""

from __future__ import annotations

import struct
import zlib

from ..errors import CorruptMessageError, UnknownCodecError, UnknownMagicError
from ..wire import Buffer

MAGIC = 0
MESSAGE_HEADER = 14  # crc, magic, attributes, key length, value length: 0.8's MinHeaderSize
CODEC_MASK = 0x07
KNOWN_CODECS = (0, 1, 2)  # none, gzip, snappy
LZ4 = 3

CRC = struct.Struct(">I")
HEAD = struct.Struct(">IbBi")  # crc, magic, attributes, key length
LENGTH = struct.Struct(">i")
_MAGIC_ATTRIBUTES_KEY = struct.Struct(">bBi")


def encode_message(value: Buffer | None, key: Buffer | None = None, attributes: int = 0) -> bytes:
    """The bytes of one message (without the entry's offset and size)."""
    if not 0 <= attributes <= 0xFF:
        raise ValueError(f"attributes must be in [0, 255], got {attributes}")
    parts = [
        _MAGIC_ATTRIBUTES_KEY.pack(MAGIC, attributes, -1 if key is None else len(key)),
        b"" if key is None else bytes(key),
        LENGTH.pack(-1 if value is None else len(value)),
        b"" if value is None else bytes(value),
    ]
    body = b"".join(parts)
    return CRC.pack(zlib.crc32(body)) + body


def decode_message(
    message: Buffer, where: str = "the message"
) -> tuple[int, memoryview | None, memoryview | None]:
    """(attributes, key, value) of one message, every field checked; key and value are views.

    `where` names the message in errors ("the entry at offset 7"). Raises
    CorruptMessageError (size, CRC, lengths), UnknownMagicError or UnknownCodecError.
    """
    view = memoryview(message)
    size = len(view)
    if size < MESSAGE_HEADER:
        raise CorruptMessageError(
            f"{where} is {size} bytes, under the 0.8 minimum of {MESSAGE_HEADER}"
        )
    crc, magic, attributes, key_length = HEAD.unpack_from(view, 0)
    if magic != MAGIC:
        raise UnknownMagicError(f"{where} has magic byte {magic}; a 0.8 message has magic 0")
    actual = zlib.crc32(view[4:])
    if actual != crc:
        raise CorruptMessageError(
            f"CRC mismatch in {where}: stored {crc:#010x}, computed {actual:#010x}"
        )
    codec = attributes & CODEC_MASK
    if codec not in KNOWN_CODECS:
        raise UnknownCodecError(
            f"{where} names compression codec {codec}"
            + (" (lz4, which this broker does not take)" if codec == LZ4 else "")
            + "; known: 0 none, 1 gzip, 2 snappy"
        )
    if attributes & ~CODEC_MASK:
        raise CorruptMessageError(f"{where} sets attribute bits {attributes:#04x} beyond the codec")
    pos = 10
    key: memoryview | None = None
    if key_length != -1:
        if key_length < 0 or key_length > size - MESSAGE_HEADER:
            raise CorruptMessageError(
                f"{where}: key length {key_length} does not fit its {size} bytes"
            )
        key = view[pos : pos + key_length]
        pos += key_length
    (value_length,) = LENGTH.unpack_from(view, pos)
    pos += 4
    value: memoryview | None = None
    if value_length == -1:
        if pos != size:
            raise CorruptMessageError(f"{where}: {size - pos} bytes after its null value")
    elif value_length < 0 or pos + value_length != size:
        raise CorruptMessageError(
            f"{where}: value length {value_length} does not fill its {size} bytes "
            f"({size - pos} after the length)"
        )
    else:
        value = view[pos:size]
    return attributes, key, value
