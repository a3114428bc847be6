"""Compression codecs of Kafka 0.7 (`message/CompressionCodec.scala`, `CompressionUtils.scala`).

| value | codec  | payload bytes                                                       |
|-------|--------|---------------------------------------------------------------------|
|   0   | none   | the inner bytes as they are                                         |
|   1   | gzip   | one standard gzip member (java.util.zip.GZIPOutputStream)           |
|   2   | snappy | snappy-java 1.0.4.1 `SnappyOutputStream` framing, below             |
|   3   | —      | unknown: an error naming it                                         |

snappy-java stream framing (all integers big-endian):

    offset  size  field
    0       8     magic  82 53 4E 41 50 50 59 00   ("\\x82SNAPPY\\0")
    8       4     version = 1
    12      4     minimum compatible version = 1
    16      ...   blocks, each: int32 compressed length | raw snappy block
                  (a block holds at most 32 KiB of input)

A payload that does not start with the whole 16-byte header is read as one raw snappy
block, as snappy-java's `SnappyInputStream` did.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam

from .errors import CorruptMessageError, InflatedSizeTooLargeError, UnknownCodecError

NONE = 0
GZIP = 1
SNAPPY = 2
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy"}
CODECS_BY_NAME = {name: value for value, name in CODEC_NAMES.items()}

SNAPPY_JAVA_MAGIC = b"\x82SNAPPY\x00"
SNAPPY_JAVA_HEADER = SNAPPY_JAVA_MAGIC + struct.pack(">ii", 1, 1)
SNAPPY_JAVA_BLOCK = 32 * 1024

_INT32 = struct.Struct(">i")


def codec_by_name(name: str) -> int:
    """'gzip' -> 1; accepts the numbers too ('1'), as 0.7's `compression.codec` did."""
    key = name.strip().lower()
    if key in CODECS_BY_NAME:
        return CODECS_BY_NAME[key]
    if key.isdigit() and int(key) in CODEC_NAMES:
        return int(key)
    raise UnknownCodecError(f"unknown compression codec {name!r} (known: none, gzip, snappy)")


def compress(codec: int, data: bytes | memoryview) -> bytes:
    """Compress `data` the way a 0.7 producer did for that codec."""
    if codec == GZIP:
        # mtime=0 makes output deterministic; level 6 is Java's default.
        return gzip.compress(bytes(data), compresslevel=6, mtime=0)
    if codec == SNAPPY:
        return snappy_java_compress(data)
    if codec == NONE:
        return bytes(data)
    raise UnknownCodecError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview, max_size: int = 1 << 30) -> bytes:
    """Decompress a wrapper's payload; anything that does not decode is CorruptMessageError.

    `max_size` bounds the output so that a small hostile payload cannot exhaust memory: it
    is checked while inflating (gzip inflates at most `max_size` + 1 bytes; every snappy
    block's declared length is checked before the block is inflated), and going past it
    raises InflatedSizeTooLargeError.
    """
    try:
        if codec == GZIP:
            return _gunzip(data, max_size)
        if codec == SNAPPY:
            return snappy_java_decompress(data, max_size)
    except (CorruptMessageError, InflatedSizeTooLargeError):
        raise
    except Exception as exc:  # zlib.error, cramjam's DecompressionError, struct.error...
        raise CorruptMessageError(f"{CODEC_NAMES[codec]} payload does not decode: {exc}") from exc
    if codec == NONE:
        return bytes(data)
    raise UnknownCodecError(f"unknown compression codec {codec}")


def _gunzip(data: bytes | memoryview, max_size: int) -> bytes:
    """Every member of a gzip stream, as java.util.zip.GZIPInputStream reads them.

    Bytes after the last member that do not start another member are ignored, as Java did.
    """
    out: list[bytes] = []
    total = 0
    rest = bytes(data)
    while True:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        chunk = inflater.decompress(rest, max_size - total + 1)
        total += len(chunk)
        if total > max_size or inflater.unconsumed_tail:
            raise InflatedSizeTooLargeError(f"gzip payload inflates past {max_size} bytes")
        if not inflater.eof:
            raise CorruptMessageError("gzip payload is truncated")
        out.append(chunk)
        rest = inflater.unused_data
        if not rest.startswith(b"\x1f\x8b"):
            return b"".join(out)


def snappy_java_compress(data: bytes | memoryview) -> bytes:
    """snappy-java's stream framing: header, then one length-prefixed raw block per 32 KiB."""
    view = memoryview(data)
    parts = [SNAPPY_JAVA_HEADER]
    for start in range(0, len(view), SNAPPY_JAVA_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + SNAPPY_JAVA_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def snappy_java_decompress(data: bytes | memoryview, max_size: int = 1 << 30) -> bytes:
    """Read snappy-java framing, or one raw snappy block when the magic is absent."""
    view = memoryview(data)
    # snappy-java's SnappyInputStream reads anything without the whole 16-byte header as one
    # raw block: a raw block whose length varint starts with 0x82 (130, 258, ... bytes) is
    # common, so the first byte alone decides nothing.
    if len(view) < 16 or bytes(view[:8]) != SNAPPY_JAVA_MAGIC:
        return _raw_snappy(view, max_size)
    pos, out, total = 16, [], 0
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptMessageError(f"snappy block length cut off at byte {pos}")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CorruptMessageError(
                f"snappy block of {length} bytes at byte {pos} runs past the end"
            )
        block = _raw_snappy(view[pos : pos + length], max_size - total)
        total += len(block)
        out.append(block)
        pos += length
    return b"".join(out)


def _raw_snappy(block: memoryview, max_size: int) -> bytes:
    # A raw block starts with its uncompressed length as a varint: check it before inflating.
    length, shift = 0, 0
    for i in range(min(len(block), 5)):
        length |= (block[i] & 0x7F) << shift
        shift += 7
        if block[i] < 0x80:
            break
    if length > max_size:
        raise InflatedSizeTooLargeError(
            f"snappy block claims {length} bytes, over the {max_size} bytes left to inflate"
        )
    return bytes(cramjam.snappy.decompress_raw(block))
