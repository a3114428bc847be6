"""A 0.8-format fetch read as columns (keyed_scan.py, keyed_kernels.py): the compiled loops and
their pure-Python reference find what messages08.keyed_columns (the clients' reference walk)
finds in the same bytes, raise what it raises on damage, and hash what the lists' digest
(ranges.digest_input08, the rows_sha256 layout existing checkpoints hold) hashes.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from logbroker.client.messages08 import KeyedBatch, batch_of, keyed_columns
from logbroker.protocol import compression, native
from logbroker.protocol.errors import LogbrokerError
from logbroker.protocol.kafka08.message_set import build_message_set, entry
from spark_apps.source import keyed_kernels, keyed_scan
from spark_apps.source.entry_scan import payload_run
from spark_apps.source.keyed_scan import keyed_run
from spark_apps.source.ranges import Chunk, digest_input08
from spark_apps.source.raw_columns import key_array

KERNELS = ["python"] + (["compiled"] if native.COMPILED08 is not None else [])


@pytest.fixture(params=KERNELS)
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """keyed_scan running one twin of the loops: the reference, or the compiled one."""
    for name in ("keyed_entries", "gather_spans", "digest_keyed"):
        if request.param == "python":
            function = getattr(keyed_kernels, f"{name}_python")
        else:
            function = getattr(native.COMPILED08, name)
        monkeypatch.setattr(keyed_scan, name, function)
    yield request.param


def messages(rng: random.Random, n: int) -> list[tuple[bytes | None, bytes | None]]:
    """Keys null, empty or not; values null, empty or not."""
    out: list[tuple[bytes | None, bytes | None]] = []
    for _ in range(n):
        key = rng.choice([None, b"", rng.randbytes(rng.randrange(1, 20))])
        value = rng.choice([None, b"", rng.randbytes(rng.randrange(1, 300))])
        out.append((key, value))
    return out


def fetch(rng: random.Random, base: int, n: int, wrappers: bool = False) -> bytes:
    """A fetched set from offset `base`: plain entries, with compressed wrappers if asked."""
    parts: list[bytes] = []
    offset = base
    while offset < base + n:
        count = min(rng.randrange(1, 6), base + n - offset)
        codec = rng.choice([compression.GZIP, compression.SNAPPY]) if wrappers else 0
        parts.append(build_message_set(messages(rng, count), codec, offset))
        offset += count
    return b"".join(parts)


def reference(data: bytes, from_offset: int) -> tuple[KeyedBatch, int]:
    columns = keyed_columns(data, from_offset)
    return batch_of(columns, from_offset), columns.end


def assert_same(run: keyed_scan.KeyedRun, batch: KeyedBatch) -> None:
    assert run.offsets.tolist() == batch.offsets
    assert run.keys() == batch.keys
    assert run.payloads() == batch.payloads
    assert run.next_offset == batch.next_offset
    assert run.digest_bytes() == digest_input08(batch)
    framed = run.payload_run()
    expected = payload_run(batch.payloads)
    assert framed.buf.tobytes() == expected.buf.tobytes()
    assert framed.entries.tolist() == expected.entries.tolist()
    assert framed.stop == expected.stop


@pytest.mark.parametrize("seed", range(6))
def test_a_plain_fetch_reads_as_the_reference_reads_it(kernels: str, seed: int) -> None:
    rng = random.Random(seed)
    data = fetch(rng, 1000 + seed, rng.randrange(1, 60))
    cut = data[: len(data) - rng.randrange(0, 30)]  # often a partial trailing entry
    for from_offset in (0, 1000 + seed, 1003 + seed, 10**9):
        run, end, _ = keyed_run(cut, from_offset)
        batch, expected_end = reference(cut, from_offset)
        assert end == expected_end
        assert_same(run, batch)


def test_a_fetch_with_wrappers_reads_as_the_reference_reads_it(kernels: str) -> None:
    rng = random.Random(7)
    data = fetch(rng, 0, 40, wrappers=True) + fetch(rng, 40, 10)
    for from_offset in (0, 2, 41):
        run, end, _ = keyed_run(data, from_offset)
        batch, expected_end = reference(data, from_offset)
        assert end == expected_end
        assert_same(run, batch)


def damaged_sets() -> Iterator[bytes]:
    good = b"".join(entry(i, b"value %d" % i, b"k" if i % 2 else None) for i in range(5))
    first = len(entry(0, b"value 0"))
    crc = bytearray(good)
    crc[first + 12] ^= 0xFF  # the second entry's CRC
    yield bytes(crc)
    payload = bytearray(good)
    payload[-1] ^= 0x01  # the last entry's payload
    yield bytes(payload)
    size = bytearray(good)
    size[first + 8 : first + 12] = (3).to_bytes(4, "big")  # under the smallest message
    yield bytes(size)
    key = bytearray(good)
    key[first + 18 : first + 22] = (500).to_bytes(4, "big")  # a key past its entry
    yield bytes(key)
    short = bytearray(good)
    short[-30 + 8 : -30 + 12] = (2).to_bytes(4, "big")  # a damaged size near the end
    yield bytes(short)


@pytest.mark.parametrize("data", list(damaged_sets()))
def test_damage_raises_what_the_reference_raises(kernels: str, data: bytes) -> None:
    with pytest.raises(LogbrokerError) as expected:
        keyed_columns(data, 0)
    with pytest.raises(type(expected.value)) as got:
        keyed_run(data, 0)
    assert str(got.value) == str(expected.value)


def test_the_kernels_give_the_same_answers_on_random_bytes() -> None:
    """Damage anywhere: the compiled walk stops where, and as, the reference stops."""
    if native.COMPILED08 is None:
        pytest.skip("the compiled module is not built")
    rng = random.Random(3)
    for _ in range(300):
        data = bytearray(fetch(rng, 0, rng.randrange(1, 20), wrappers=rng.random() < 0.2))
        for _ in range(rng.randrange(0, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        buf = np.frombuffer(bytes(data), np.uint8)
        answers = []
        for walk in (keyed_kernels.keyed_entries_python, native.COMPILED08.keyed_entries):
            cap = len(buf) // 26 + 1
            arrays = [np.zeros(cap, np.int64) for _ in range(4)] + [np.zeros(cap, np.int32)]
            answer = walk(buf, 2, True, *arrays)
            answers.append((answer, [a[: answer[0]].tolist() for a in arrays]))
        assert answers[0] == answers[1]


def test_the_key_column_and_values_come_out_of_the_run(kernels: str) -> None:
    data = build_message_set([(None, b"a"), (b"", b""), (b"key", None), (b"k2", b"bcd")])
    run, _, _ = keyed_run(data, 0)
    chunk = Chunk(run.offsets, np.zeros(len(run), np.int32), run=run)
    assert chunk.keys == [None, b"", b"key", b"k2"]
    column = key_array(chunk.key_values, len(chunk))
    assert column.equals(pa.array([None, b"", b"key", b"k2"], pa.binary()))
    assert chunk.values.equals(pa.array([b"a", b"", b"", b"bcd"], pa.binary()))
    assert chunk.payloads == [b"a", b"", b"", b"bcd"]


def test_a_runs_head_keeps_the_first_messages(kernels: str) -> None:
    data = fetch(random.Random(1), 50, 20)
    run, _, _ = keyed_run(data, 50)
    head = run.head(5, 55)
    batch, _ = reference(data, 50)
    assert_same(head, KeyedBatch(batch.offsets[:5], batch.keys[:5], batch.payloads[:5], 55))


def test_the_digest_keeps_rows_sha256s_layout() -> None:
    """A checkpoint's rows_sha256 (the layout at the top of ranges.py), written out by hand."""
    data = build_message_set([(None, b"xy"), (b"k", b"")], base_offset=7)
    run, _, _ = keyed_run(data, 0)
    expected = (
        (7).to_bytes(8, "big") + bytes(4) + b"\xff\xff\xff\xff" + (2).to_bytes(4, "big") + b"xy"
        + (8).to_bytes(8, "big") + bytes(4) + (1).to_bytes(4, "big") + b"k" + bytes(4)
    )  # fmt: skip
    assert run.digest_bytes() == expected
    assert hashlib.sha256(run.digest_bytes()).digest() == hashlib.sha256(expected).digest()


def test_the_source_uses_the_kernels_the_environment_asks_for() -> None:
    pure = os.environ.get(native.PURE_PYTHON_ENV) == "1" or native.COMPILED08 is None
    for name in ("keyed_entries", "gather_spans", "digest_keyed"):
        expected = (
            getattr(keyed_kernels, f"{name}_python") if pure else getattr(native.COMPILED08, name)
        )
        assert getattr(keyed_kernels, name) is expected, name


@pytest.mark.parametrize("twin", KERNELS)
def test_the_kernels_refuse_arrays_that_do_not_fit(twin: str) -> None:
    """Positions outside the buffer or too little room: a ValueError, never a stray read."""

    def kernel(name: str) -> Any:
        if twin == "python":
            return getattr(keyed_kernels, f"{name}_python")
        return getattr(native.COMPILED08, name)

    buf = np.frombuffer(build_message_set([(b"k", b"value")]), np.uint8)
    small = [np.empty(1, np.int64) for _ in range(4)] + [np.empty(1, np.int32)]
    with pytest.raises(ValueError, match="room for 1 messages"):
        kernel("keyed_entries")(np.zeros(60, np.uint8), 0, True, *small)
    starts, ends = np.array([0, 10], np.int64), np.array([5, 99], np.int64)
    with pytest.raises(ValueError, match=r"span 1 \[10, 99\) is outside"):
        kernel("gather_spans")(buf, starts, ends, 0, np.empty(200, np.uint8), np.empty(3, np.int32))
    with pytest.raises(ValueError, match="8 bytes of room for 14"):
        kernel("gather_spans")(
            buf, starts, starts + 5, 2, np.empty(8, np.uint8), np.empty(3, np.int32)
        )
    one = np.array([0], np.int64)
    with pytest.raises(ValueError, match="message 0's key or value is outside"):
        kernel("digest_keyed")(
            buf, one, one, np.array([999], np.int64), one, np.array([1], np.int32)
        )
