"""rows_sha256's bytes straight from log data (ranges.digest_input), against the contract.

The digest thread of every load walks fetched log bytes with `digest_input` instead of
decoding them into columns first; these buffers mix what a log holds (plain magic-1
entries, compressed wrappers, magic-0 entries, a cut-off last entry) and compare the bytes
with DESIGN.md §3.6 computed from iter_messages, message by message.
"""

from __future__ import annotations

import random
import struct

import pytest

from logbroker.protocol import compression
from logbroker.protocol.errors import CorruptMessageError
from logbroker.protocol.message_set import build_message_set, iter_messages
from spark_apps.ranges import PartitionRange, digest_input

RANGE = PartitionRange("clicks", 0, 0, 0, 1 << 40)


def _contract_bytes(buffer: bytes, base: int) -> tuple[bytes, int]:
    """offset | index | length | payload of every message, as DESIGN.md §3.6 says."""
    out, previous, index, count = [], None, 0, 0
    for m in iter_messages(buffer, base):
        index = index + 1 if m.offset == previous else 0
        previous = m.offset
        out.append(struct.pack(">qii", m.offset, index, len(m.payload)) + m.payload)
        count += 1
    return b"".join(out), count


def _mixed_log(rng: random.Random) -> bytes:
    sets = []
    for _ in range(30):
        payloads = [rng.randbytes(rng.randint(0, 300)) for _ in range(rng.randint(1, 8))]
        kind = rng.choice(["plain", "plain", "gzip", "snappy", "magic0"])
        if kind == "gzip":
            sets.append(build_message_set(payloads, compression.GZIP))
        elif kind == "snappy":
            sets.append(build_message_set(payloads, compression.SNAPPY))
        else:
            sets.append(build_message_set(payloads, magic=0 if kind == "magic0" else 1))
    return b"".join(sets)


@pytest.mark.parametrize("seed", range(5))
def test_digest_input_is_the_contract_bytes_for_every_kind_of_entry(seed: int) -> None:
    rng = random.Random(seed)
    log = _mixed_log(rng)
    base = rng.randrange(0, 1 << 32)
    expected, count = _contract_bytes(log, base)
    digest, end = digest_input(log, base, RANGE)
    assert digest.data == expected
    assert digest.messages == count
    assert end == len(log)
    # a fetch ends inside an entry: the whole entries before it, and where they end
    cut = rng.randrange(1, len(log))
    digest, end = digest_input(memoryview(log)[:cut], base, RANGE)
    assert end <= cut
    assert (digest.data, digest.messages) == _contract_bytes(log[:cut], base)  # whole ones


def test_a_damaged_compressed_wrapper_is_an_error_naming_its_range_and_offset() -> None:
    plain = build_message_set([b"a" * 50, b"b" * 50])
    wrapper = bytearray(build_message_set([b"c" * 40] * 3, compression.GZIP))
    wrapper[-3] ^= 0xFF  # inside the compressed payload: its CRC no longer matches
    with pytest.raises(CorruptMessageError, match=rf"partition 0-0: .*offset {100 + len(plain)}"):
        digest_input(plain + bytes(wrapper), 100, RANGE)
