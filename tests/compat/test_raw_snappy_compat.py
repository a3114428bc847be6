"""Raw snappy blocks in a snappy wrapper, as franz-kafka (npm) sends them: no Node needed.

snappy-java's SnappyInputStream (what 0.7.2 decompresses with) reads the payload as a
snappy-java stream only when it is at least 16 bytes long and starts with the full 8-byte
magic 82 53 4E 41 50 50 59 00; anything else is one raw snappy block
(`SnappyInputStream.readHeader`: "(probably) compressed by Snappy.compress(byte[])").
A raw block starts with the uncompressed length as a varint, so every inner set of
130, 258, 386, ... bytes (length = 2 mod 128) starts with 0x82.
"""

from __future__ import annotations

from collections.abc import Callable

import compat_wire as wire
import cramjam

from logbroker.protocol import compression
from logbroker.protocol.message import encode_message
from logbroker.protocol.message_set import build_message_set, iter_messages
from logbroker.stack.broker import BrokerProcess


def raw_snappy_wrapper(payloads: list[bytes]) -> tuple[bytes, bytes]:
    """(inner set, one magic-1 snappy wrapper entry holding it as a raw block)."""
    inner = build_message_set(payloads)
    return inner, encode_message(
        bytes(cramjam.snappy.compress_raw(inner)), codec=compression.SNAPPY
    )


def test_raw_block_not_starting_with_0x82_is_decoded() -> None:
    inner, _ = raw_snappy_wrapper([b"abcd"] * 12)  # 168 bytes: varint a8 01
    block = bytes(cramjam.snappy.compress_raw(inner))
    assert block[0] != 0x82
    assert compression.decompress(compression.SNAPPY, block) == inner


def test_raw_block_starting_with_0x82_is_decoded() -> None:
    inner, _ = raw_snappy_wrapper([f"p-{i}".encode() for i in range(10)])  # 130 bytes
    block = bytes(cramjam.snappy.compress_raw(inner))
    assert block[:2] == b"\x82\x01" and len(block) >= 16  # varint 130; not the magic
    assert compression.decompress(compression.SNAPPY, block) == inner


def test_broker_appends_a_raw_block_starting_with_0x82(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(log_flush_interval=1)
    payloads = [f"p-{i}".encode() for i in range(10)]
    _, wrapper = raw_snappy_wrapper(payloads)
    wire.produce(broker.address, "raw.snappy", 0, wrapper)
    # (a PRODUCE gets no answer: the fetch on another connection may come first)
    data = wire.wait_for_entries(broker.address, "raw.snappy", 0, 1)
    assert data == wrapper  # stored verbatim
    assert [m.payload for m in iter_messages(data)] == payloads
