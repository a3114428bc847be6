"""rows_sha256's bytes straight from log data (ranges.digest_input), against the contract.

The digest thread of every load walks fetched log bytes with `digest_input` instead of
decoding them into columns first; these buffers mix what a log holds (plain magic-1
entries, compressed wrappers, magic-0 entries, a cut-off last entry) and compare the bytes
with docs/design.md §3.6 computed from iter_messages, message by message.
"""

from __future__ import annotations

import random
import struct

import pytest

from logbroker.protocol import compression
from logbroker.protocol.errors import CorruptMessageError
from logbroker.protocol.message_set import build_message_set, iter_messages, message_columns
from spark_apps.source.entry_scan import plain_run
from spark_apps.source.ranges import PartitionRange, digest_input, read_chunk

RANGE = PartitionRange("clicks", 0, 0, 0, 1 << 40)


def _contract_bytes(buffer: bytes, base: int) -> tuple[bytes, int]:
    """offset | index | length | payload of every message, as docs/design.md §3.6 says."""
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


# -- plain fetches: the compiled walk (entry_scan.py) against the general path ---------


def _plain_log(rng: random.Random, messages: int = 400) -> bytes:
    return build_message_set([rng.randbytes(rng.randint(0, 300)) for _ in range(messages)])


@pytest.mark.parametrize("seed", range(3))
def test_digest_input_of_plain_entries_is_the_contract_bytes(seed: int) -> None:
    rng = random.Random(seed)
    log = _plain_log(rng)
    base = rng.randrange(0, 1 << 40)
    for cut in (len(log), rng.randrange(1, len(log)), 9):  # whole, cut inside an entry
        digest, end = digest_input(memoryview(log)[:cut], base, RANGE)
        assert (digest.data, digest.messages) == _contract_bytes(log[:end], base)
        assert end == message_columns(log[:cut]).end


@pytest.mark.parametrize("seed", range(3))
def test_a_plain_fetch_reads_as_the_general_path_reads_it(seed: int) -> None:
    rng = random.Random(seed)
    log = _plain_log(rng)
    base = rng.randrange(0, 1 << 40)
    for cut in (len(log), rng.randrange(1, len(log)), 3):
        chunk, end = read_chunk(memoryview(log)[:cut], base, RANGE)
        expected = message_columns(log[:cut], base)
        assert end == expected.end
        assert list(chunk.offsets) == expected.offsets
        assert list(chunk.indexes) == expected.indexes
        assert chunk.payloads == expected.payloads
        assert chunk.values.to_pylist() == expected.payloads


def test_a_bad_crc_in_a_plain_fetch_is_named_by_range_and_offset() -> None:
    log = bytearray(build_message_set([b"a" * 50, b"b" * 50, b"c" * 50]))
    log[2 * 60 + 20] ^= 0x01  # inside the third payload
    with pytest.raises(CorruptMessageError, match=r"partition 0-0: CRC mismatch .* offset 1120"):
        read_chunk(bytes(log), 1000, RANGE)


def test_the_compiled_crc_agrees_with_zlibs_at_every_length() -> None:
    """build_message_set stores zlib.crc32: the walk accepts exactly those CRCs."""
    rng = random.Random(7)
    for size in [*range(0, 40), 255, 1000, 4097]:
        entry = bytearray(build_message_set([rng.randbytes(size)]))
        run = plain_run(bytes(entry))
        assert (run.stop, run.crc_mismatch_at, len(run.entries)) == (10 + size, -1, 1)
        entry[9] ^= 0x01  # the stored CRC's last bit
        run = plain_run(bytes(entry))
        assert (run.stop, run.crc_mismatch_at, len(run.entries)) == (0, 0, 0)
