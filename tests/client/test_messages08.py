"""The clients' own bytes of Kafka 0.8: the producer's build of a message set and of a Produce
v0 frame, each the codec's bytes (protocol/kafka08, the reference), and the consumers' walk of
a fetched set: keys, logical offsets, the messages of a wrapper below the offset asked for
skipped, a partial entry left for the next fetch, damage named by its offset."""

from __future__ import annotations

import random

import pytest

from logbroker.client.connection08 import produce_frame
from logbroker.client.messages08 import build_set, keyed_columns
from logbroker.protocol import compression
from logbroker.protocol.errors import CorruptMessageError
from logbroker.protocol.kafka08.apis import encode_request
from logbroker.protocol.kafka08.message_set import assign_offsets, build_message_set, iter_messages
from logbroker.protocol.kafka08.produce import (
    PRODUCE_V0,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)

RNG = random.Random(44)
VALUES = [RNG.randbytes(RNG.randrange(0, 300)) for _ in range(40)]
KEYS: dict[str, list[bytes | None]] = {
    "null": [None] * 40,
    "keyed": [f"user-{i % 7}".encode() for i in range(40)],
    "mixed": [None, b"", b"k\xff\x00"] * 13 + [None],
}


@pytest.mark.parametrize("keys", KEYS)
def test_the_producers_set_is_the_codecs(keys: str) -> None:
    assert build_set(KEYS[keys], VALUES) == build_message_set(zip(KEYS[keys], VALUES, strict=True))


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY])
def test_a_compressed_set_is_one_wrapper_of_the_messages(codec: int) -> None:
    data = build_set(KEYS["mixed"], VALUES, codec)
    records = list(iter_messages(data))
    assert {r.codec for r in records} == {codec} and {r.wrapper_offset for r in records} == {39}
    assert [(r.key, r.value or b"") for r in records] == list(
        zip(KEYS["mixed"], VALUES, strict=True)
    )


def test_the_producers_frame_is_the_codecs() -> None:
    sets = [("clicks", 0, b"abc"), ("naïve", 3, b""), ("clicks", 2, b"de")]
    request = ProduceRequest(
        -1,
        1500,
        (
            ProduceTopic("clicks", (ProducePartition(0, b"abc"), ProducePartition(2, b"de"))),
            ProduceTopic("naïve", (ProducePartition(3, b""),)),
        ),
    )
    assert produce_frame(9, "me", -1, 1500, sets) == encode_request(PRODUCE_V0, request, 9, "me")


def stored(*sets: bytes) -> bytes:
    """Sets as a leader stores them: consecutive offsets from 0, through wrappers."""
    out, next_offset = b"", 0
    for data in sets:
        assigned = assign_offsets(data, next_offset)
        out, next_offset = out + assigned.data, assigned.next_offset
    return out


def test_the_walk_hands_out_keys_and_offsets_from_inside_a_wrapper() -> None:
    log = stored(
        build_set(KEYS["keyed"][:5], VALUES[:5]),
        build_set(KEYS["mixed"][:10], VALUES[5:15], compression.GZIP),
        build_set(KEYS["null"][:5], VALUES[15:20]),
    )
    whole = keyed_columns(log)
    assert whole.offsets == list(range(20)) and whole.last_offset == 19 and whole.end == len(log)
    assert whole.payloads == VALUES[:20]
    assert whole.keys == KEYS["keyed"][:5] + KEYS["mixed"][:10] + KEYS["null"][:5]
    # a fetch from offset 8 starts at the wrapper holding 5..14: 5, 6 and 7 are skipped
    wrapper_at = len(stored(build_set(KEYS["keyed"][:5], VALUES[:5])))
    inside = keyed_columns(log[wrapper_at:], 8)
    assert inside.offsets == list(range(8, 20)) and inside.payloads == VALUES[8:20]
    # a cut-off last entry is left for the next fetch
    cut = keyed_columns(log[: len(log) - 3])
    assert cut.offsets == list(range(19)) and cut.last_offset == 18 and cut.end < len(log) - 3


def test_a_damaged_message_is_named_by_its_offset() -> None:
    keys = [f"k{i}".encode() for i in range(6)]
    values = [f"payload number {i}".encode() for i in range(6)]
    log = bytearray(stored(build_set(keys, values)))
    third = len(stored(build_set(keys[:2], values[:2])))
    log[third + 12 + 14 + 2 + 5] ^= 0x01  # a byte of the third message's payload
    with pytest.raises(
        CorruptMessageError, match=r"CRC mismatch in the entry at byte \d+ \(offset 2\)"
    ):
        keyed_columns(bytes(log))
