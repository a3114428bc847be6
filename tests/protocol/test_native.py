"""The compiled message-set walks (_native.pyx, and _native08.pyx for Kafka 0.8's): built by
`make setup`, chosen unless LOGBROKER_PURE_PYTHON=1, and named by `logbroker --version`.

That they give the reference's results and errors is test_message_properties.py's
test_both_walks_agree_on_generated_and_damaged_bytes (and every test there and in
test_message_bytes.py runs against both); for requests.py's decode_produce_fast,
test_requests.py's test_both_fast_produce_decoders_agree_on_generated_and_damaged_frames,
for its produce_run, test_both_produce_runs_agree_on_generated_and_damaged_frames and, for
its encode_produce_set, test_both_produce_frame_builders_agree. For the 0.8 walks,
test_kafka08_walks.py's test_both_08_walks_agree_on_generated_and_damaged_bytes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logbroker import __version__
from logbroker.protocol import message_set, native, requests
from logbroker.protocol.errors import InvalidMessageError
from logbroker.protocol.kafka08 import message_set as set08
from logbroker.protocol.message_formats import FORMAT_08
from logbroker.storage import logical_log

LOGBROKER = Path(sys.executable).with_name("logbroker")


def test_the_extension_is_built() -> None:
    assert native.COMPILED is not None, (
        "logbroker.protocol._native does not import: `make setup` compiles it "
        "(it needs gcc, zlib1g-dev and Cython from requirements.lock)"
    )


def test_the_08_extension_is_built() -> None:
    assert native.COMPILED08 is not None, (
        "logbroker.protocol._native08 does not import: `make setup` compiles it "
        "(it needs gcc, zlib1g-dev and Cython from requirements.lock)"
    )


# Each compiled twin: the module that calls it, and by which name (the reference is
# `<twin>_python` in that module).
WALKS = {
    "validate": ("message_set", "validate"),
    "message_columns": ("message_set", "message_columns"),
    "iter_messages": ("message_set", "iter_messages"),
    "stored_set_end": ("message_set", "stored_set_end"),
    "build_message_set": ("message_set", "build_message_set"),
    "whole_entries": ("message_set", "whole_entries"),
    "entry_at_or_after": ("message_set", "entry_at_or_after"),
    "decode_produce_fast": ("requests", "decode_produce_fast"),
    "produce_run": ("requests", "produce_run"),
    "encode_produce_set": ("requests", "encode_produce_set"),
}
MODULES = {"message_set": message_set, "requests": requests}
# The 0.8 twins (_native08), all called by kafka08/message_set.py under their own names.
WALKS08 = ("validate", "assign_offsets", "entry_headers", "whole_entries", "index_points")


def test_the_library_uses_the_path_the_environment_asks_for() -> None:
    # The suite runs in one process, so the choice made at import time is the one to check.
    pure = os.environ.get(native.PURE_PYTHON_ENV) == "1" or native.COMPILED is None
    for name, (module, called) in WALKS.items():
        where = MODULES[module]
        expected = getattr(where, f"{name}_python") if pure else getattr(native.COMPILED, name)
        assert getattr(where, called) is expected, name
    for name in WALKS08:
        expected = getattr(set08, f"{name}_python") if pure else getattr(native.COMPILED08, name)
        assert getattr(set08, name) is expected, name
    used = vars(logical_log)  # what the 0.8 log and a 0.8 follower call: the same
    for name in ("validate", "assign_offsets", "index_points"):
        assert used[name] is getattr(set08, name), name
    assert FORMAT_08.whole_entries is set08.whole_entries


def _version(pure_python: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_PYTHON_ENV}
    if pure_python:
        env[native.PURE_PYTHON_ENV] = "1"
    ran = subprocess.run(
        [str(LOGBROKER), "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


@pytest.mark.skipif(native.COMPILED is None, reason="the _native extension is not built")
def test_version_names_the_compiled_path() -> None:
    assert _version(pure_python=False).splitlines() == [
        f"logbroker {__version__}",
        "message walks: compiled (Cython)",
    ]


def test_version_names_the_forced_pure_python_path() -> None:
    assert _version(pure_python=True).splitlines()[1] == (
        "message walks: pure Python (LOGBROKER_PURE_PYTHON=1)"
        if native.COMPILED is not None
        else "message walks: pure Python (extension not built)"
    )


def test_a_pure_python_process_runs_the_reference() -> None:
    env = {**os.environ, native.PURE_PYTHON_ENV: "1"}
    code = (
        "from logbroker.protocol import message_set, requests\n"
        "from logbroker.protocol.kafka08 import message_set as set08\n"
        "print("
        + ", ".join(f"{m}.{called} is {m}.{name}_python" for name, (m, called) in WALKS.items())
        + ", "
        + ", ".join(f"set08.{name} is set08.{name}_python" for name in WALKS08)
        + ")"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.split() == ["True"] * (len(WALKS) + len(WALKS08)), ran.stderr


@pytest.mark.skipif(native.COMPILED is None, reason="the _native extension is not built")
def test_both_validates_treat_odd_buffers_alike() -> None:
    """Views of other item sizes and shapes are read as their bytes; what is not one block
    of bytes raises the same error from both."""
    data = message_set.build_message_set([b"abcd"] * 4)  # 4 x 14 bytes: whole int32s
    assert native.COMPILED is not None
    compiled = native.COMPILED.validate
    for odd in (memoryview(data).cast("i"), memoryview(data).cast("B", (2, len(data) // 2))):
        assert compiled(odd) == message_set.validate_python(odd) == message_set.validate(data)
    for wrong in (None, "text", memoryview(data)[::2]):
        with pytest.raises((TypeError, BufferError)) as reference:
            message_set.validate_python(wrong)
        with pytest.raises(reference.type, match=re.escape(str(reference.value))):
            compiled(wrong)


def _outcome(walk: Callable[..., object], buffer: object) -> object:
    """What `walk(buffer, 3)` gives (a generator run to its end), or its error."""
    try:
        result = walk(buffer, 3)
        return list(result) if isinstance(result, Iterator) else result
    except (TypeError, BufferError, ValueError, InvalidMessageError) as exc:
        return type(exc), str(exc)


@pytest.mark.skipif(native.COMPILED is None, reason="the _native extension is not built")
@pytest.mark.parametrize("name", ["iter_messages", "stored_set_end", "message_columns"])
def test_both_iterations_and_set_ends_treat_odd_buffers_alike(name: str) -> None:
    data = message_set.build_message_set([b"abcd"] * 4)  # 4 x 14 bytes: whole int32s
    reference = getattr(message_set, f"{name}_python")
    twin = getattr(native.COMPILED, name)
    for odd in (
        memoryview(data).cast("i"),
        memoryview(data).cast("B", (2, len(data) // 2)),
        memoryview(data)[::2],
        None,
        "text",
        7,
    ):
        assert _outcome(twin, odd) == _outcome(reference, odd), odd


# -- the compiled CRC-32 (_crc32.h): zlib's value at every length, alignment and start ----


def _xpow_mod(n: int) -> int:
    """x^n mod the CRC-32 polynomial (bit k: the coefficient of x^k)."""
    r = 1
    for _ in range(n):
        r <<= 1
        if r & (1 << 32):
            r ^= 0x104C11DB7
    return r


def _reflected33(v: int) -> int:
    return int(f"{v:033b}"[::-1], 2)


def test_crc32_fold_constants() -> None:
    """The header's constants are x^(D+32) and x^(D-32) mod P, reflected over 33 bits."""
    header = (Path(native.__file__).parent / "_crc32.h").read_text()
    for d in (128, 512):
        low, high = _reflected33(_xpow_mod(d + 32)), _reflected33(_xpow_mod(d - 32))
        assert f"_mm_set_epi64x(0x{high:09X}ull, 0x{low:09X}ull)" in header, d


@pytest.mark.skipif(native.COMPILED is None, reason="the _native extension is not built")
def test_the_compiled_crc32_is_zlibs() -> None:
    import random
    import zlib

    assert native.COMPILED is not None
    crc32 = native.COMPILED.crc32
    rng = random.Random(11)
    data = rng.randbytes(1 << 17)
    for n in [*range(0, 300), 511, 512, 513, 4095, 65536, 1 << 17]:
        for start in (0, 0xFFFFFFFF, rng.getrandbits(32)):
            offset = rng.randrange(0, 16)  # not aligned to 16 bytes
            piece = memoryview(data)[offset : offset + n]
            assert crc32(piece, start) == zlib.crc32(piece, start), (n, start, offset)
