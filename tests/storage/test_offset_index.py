"""The sparse offset index of a 0.8-format segment (storage/offset_index.py), on its own.

Segments here are real 0.8 message sets (protocol/kafka08/message_set.py) held in memory:
the index is fed each append's entries as a segment would feed them, and rebuilt from the
whole segment as recovery would; the two must be the same index, byte for byte.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from logbroker.protocol import compression
from logbroker.protocol.kafka08.message_set import (
    assign_offsets,
    build_message_set,
    entry_headers,
)
from logbroker.storage.offset_index import (
    DEFAULT_INTERVAL_BYTES,
    ENTRY_SIZE,
    CorruptIndexError,
    OffsetIndex,
    index_file_name,
)

BASE = 1000


def _appends(count: int, seed: int = 7) -> list[bytes]:
    """`count` appends as a leader stores them: plain sets and gzip/snappy wrappers of
    messages of assorted sizes, offsets assigned from BASE on."""
    rng = random.Random(seed)
    appends, next_offset = [], BASE
    for _ in range(count):
        messages = [
            (b"k", rng.randbytes(rng.choice((10, 300, 1500, 5000))))
            for _ in range(rng.randint(1, 6))
        ]
        codec = rng.choice(
            (compression.NONE, compression.NONE, compression.GZIP, compression.SNAPPY)
        )
        assigned = assign_offsets(build_message_set(messages, codec), next_offset)
        appends.append(assigned.data)
        next_offset = assigned.next_offset
    return appends


def _fed(path: Path, appends: list[bytes]) -> OffsetIndex:
    index = OffsetIndex(path, BASE)
    position = 0
    for data in appends:
        index.add_entries(entry_headers(data, position))
        position += len(data)
    return index


def test_file_name() -> None:
    assert index_file_name(0) == "00000000000000000000.index"
    assert index_file_name(BASE) == "00000000000000001000.index"


def test_entries_on_disk_byte_by_byte(tmp_path: Path) -> None:
    path = tmp_path / index_file_name(BASE)
    with OffsetIndex(path, BASE) as index:
        index.append(1005, 4200)
        index.append(1300, 9000)
    assert path.read_bytes() == (
        b"\x00\x00\x00\x05"  # relative offset 5 (1005 - base 1000)
        b"\x00\x00\x10\x68"  # position 4200
        b"\x00\x00\x01\x2c"  # relative offset 300
        b"\x00\x00\x23\x28"  # position 9000
    )


def test_lookups_hit_the_exact_entry(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "i.index", BASE) as index:
        for i in range(1, 200):
            index.append(BASE + 10 * i, 5000 * i)
        for i in range(1, 200):
            assert index.lookup(BASE + 10 * i) == (BASE + 10 * i, 5000 * i)  # exact
            assert index.lookup(BASE + 10 * i + 9) == (BASE + 10 * i, 5000 * i)  # just below next
        assert index.lookup(BASE + 9) == (BASE, 0)  # before the first entry: the segment's start
        assert index.lookup(BASE) == (BASE, 0)
        assert index.lookup(10**12) == (BASE + 1990, 995000)  # past the last: the last


def test_one_entry_per_interval_of_appended_data(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "i.index", BASE, interval_bytes=100) as index:
        # entries of 60 bytes: indexed when more than 100 bytes lie since the last indexed start
        added = [index.add(BASE + i, 60 * i, 60) for i in range(10)]
    assert added == [False, False, True, False, True, False, True, False, True, False]
    assert index.entries() == [(BASE + 2, 120), (BASE + 4, 240), (BASE + 6, 360), (BASE + 8, 480)]


def test_rebuild_equals_the_index_built_while_appending(tmp_path: Path) -> None:
    appends = _appends(120)
    segment = b"".join(appends)
    with _fed(tmp_path / "fed.index", appends) as fed:
        assert len(fed) > 20  # the segment spans many intervals
    rebuilt = OffsetIndex.rebuild(tmp_path / "rebuilt.index", BASE, entry_headers(segment))
    rebuilt.close()
    assert rebuilt.entries() == fed.entries()
    assert (tmp_path / "rebuilt.index").read_bytes() == (tmp_path / "fed.index").read_bytes()
    assert not (tmp_path / "rebuilt.index.tmp").exists()
    with OffsetIndex(tmp_path / "rebuilt.index", BASE, segment_size=len(segment)) as reopened:
        assert reopened.entries() == fed.entries()


def test_appends_after_a_reopen_continue_as_a_rebuild_would(tmp_path: Path) -> None:
    appends = _appends(80, seed=3)
    path = tmp_path / "i.index"
    _fed(path, appends[:50]).close()
    with OffsetIndex(path, BASE) as index:  # a broker restart in between
        position = sum(map(len, appends[:50]))
        for data in appends[50:]:
            index.add_entries(entry_headers(data, position))
            position += len(data)
        continued = index.entries()
    with OffsetIndex.rebuild(
        tmp_path / "r.index", BASE, entry_headers(b"".join(appends))
    ) as rebuilt:
        assert rebuilt.entries() == continued


def test_a_lookup_then_a_scan_finds_every_offset(tmp_path: Path) -> None:
    """From where lookup points, the first entry whose offset is >= the one asked holds it
    (a wrapper is indexed by its last inner offset): the read never starts past it."""
    appends = _appends(60, seed=11)
    segment = b"".join(appends)
    headers = list(entry_headers(segment))
    first_offsets = [BASE] + [offset + 1 for offset, _, _ in headers[:-1]]
    with OffsetIndex.rebuild(tmp_path / "i.index", BASE, headers, interval_bytes=1024) as index:
        for (offset, position, _), first in zip(headers, first_offsets, strict=True):
            for target in range(first, offset + 1):  # every message of the entry
                _, start = index.lookup(target)
                found = next(p for o, p, _ in entry_headers(segment[start:], start) if o >= target)
                assert found == position, (target, start)


def test_truncation_drops_entries_at_or_after_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "i.index"
    with OffsetIndex(path, BASE) as index:
        for i in range(1, 6):
            index.append(BASE + 10 * i, 5000 * i)
        index.truncate_to(BASE + 30)
        assert index.entries() == [(BASE + 10, 5000), (BASE + 20, 10000)]
        assert path.stat().st_size == 2 * ENTRY_SIZE
        index.truncate_to(BASE + 21)  # nothing at or after 1021
        assert len(index) == 2
        assert index.lookup(BASE + 35) == (BASE + 20, 10000)
        index.append(BASE + 25, 12000)  # the log grows again from there
    with OffsetIndex(path, BASE) as reopened:
        assert reopened.entries() == [(BASE + 10, 5000), (BASE + 20, 10000), (BASE + 25, 12000)]
        reopened.truncate_to(BASE)
        assert reopened.entries() == [] and reopened.lookup(BASE + 99) == (BASE, 0)
    assert path.stat().st_size == 0


def test_a_torn_last_entry_is_dropped_on_open(tmp_path: Path) -> None:
    path = tmp_path / "i.index"
    with OffsetIndex(path, BASE) as index:
        index.append(BASE + 5, 4200)
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00")  # a crash three bytes into the next entry
    with OffsetIndex(path, BASE) as reopened:
        assert reopened.entries() == [(BASE + 5, 4200)]
    assert path.stat().st_size == ENTRY_SIZE


@pytest.mark.parametrize(
    ("data", "segment_size", "words"),
    [
        (b"\x00\x00\x00\x05\x00\x00\x10\x00" * 2, None, "does not follow (5, 4096)"),
        (
            b"\x00\x00\x00\x05\x00\x00\x10\x00\x00\x00\x00\x06\x00\x00\x0f\x00",
            None,
            "position 3840",
        ),
        (
            b"\x00\x00\x00\x05\x00\x00\x10\x00",
            4096,
            "points at byte 4096, past its segment's 4096 bytes",
        ),
    ],
)
def test_an_index_that_cannot_be_trusted_is_corrupt(
    tmp_path: Path, data: bytes, segment_size: int | None, words: str
) -> None:
    path = tmp_path / "i.index"
    path.write_bytes(data)
    with pytest.raises(CorruptIndexError, match=words.replace("(", r"\(").replace(")", r"\)")):
        OffsetIndex(path, BASE, segment_size=segment_size)


def test_appending_out_of_order_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "i.index"
    with OffsetIndex(path, BASE, interval_bytes=10) as index:
        index.append(BASE + 5, 100)
        with pytest.raises(ValueError, match="offset 1005 does not follow the last indexed 1005"):
            index.append(BASE + 5, 200)
        with pytest.raises(ValueError, match="position 50 does not follow"):
            index.append(BASE + 8, 50)
        with pytest.raises(ValueError, match="offset 1006 does not follow"):
            index.add_entries([(BASE + 6, 150, 10), (BASE + 6, 300, 10)])  # the second is wrong
        with pytest.raises(ValueError, match="does not fit"):
            index.append(BASE + 2**31, 300)
        assert index.entries() == [(BASE + 5, 100)]
    assert path.stat().st_size == ENTRY_SIZE


def test_default_interval_is_0_8s() -> None:
    assert DEFAULT_INTERVAL_BYTES == 4096
