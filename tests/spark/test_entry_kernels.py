"""The Spark source's fetch walk (entry_kernels.py): the compiled loops and their pure-Python
reference give the same answers, the same bytes and the same errors, on generated and
damaged bytes; and the library runs the one LOGBROKER_PURE_PYTHON asks for.

What the walk must find (the general path's reading of the same bytes) is test_ranges.py's,
which runs whichever path is active: the suite runs once with each.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.protocol import compression, native
from logbroker.protocol.message_set import build_message_set, message_columns
from spark_apps.pyfiles import build_archive
from spark_apps.source import entry_kernels
from spark_apps.source.entry_scan import byte_array


class Kernels(NamedTuple):
    name: str
    walk: Callable[[Any, Any, bool], tuple[int, int, int]]
    gather: Callable[[Any, Any, int, Any, Any], None]
    digest: Callable[[Any, Any, int, int], bytes]


PYTHON = Kernels(
    "python",
    entry_kernels.walk_entries_python,
    entry_kernels.gather_payloads_python,
    entry_kernels.digest_entries_python,
)
COMPILED = (
    None
    if native.COMPILED is None
    else Kernels(
        "compiled",
        native.COMPILED.walk_entries,
        native.COMPILED.gather_payloads,
        native.COMPILED.digest_entries,
    )
)
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the _native extension is not built")

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _text(error: BaseException) -> tuple[str, str]:
    return type(error).__name__, str(error)


def _answers(k: Kernels, data: bytes, base: int) -> list[object]:
    """Everything the kernels say about `data`: the walk with and without CRCs, and for each
    the payloads gathered and the digest's bytes; errors as (class, message)."""
    said: list[object] = []
    buf = byte_array(data)
    for check_crc in (True, False):
        entries = np.zeros(len(buf) // 10 + 1, np.int64)
        n, stop, bad = k.walk(buf, entries, check_crc)
        said.append((n, stop, bad, entries[:n].tolist()))
        run = entries[:n]
        total = stop - (int(run[0]) if n else 0) - 10 * n
        out = np.zeros(max(total, 0), np.uint8)
        offsets = np.zeros(n + 1, np.int32)
        k.gather(buf, run, stop, out, offsets)
        said.append((out.tobytes(), offsets.tolist()))
        said.append(k.digest(buf, run, stop, base))
    return said


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """Plain sets with other entries among them (compressed, magic 0), cut short, with a byte
    flipped or garbage inserted; or entry-like pieces; or any bytes."""
    kind = draw(st.sampled_from(["whole", "cut", "flip", "insert", "pieces", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "pieces":  # a size, a magic and attributes, a right or wrong CRC, a payload
        pieces = []
        for _ in range(draw(st.integers(1, 6))):
            payload = draw(st.binary(max_size=24))
            size = draw(st.sampled_from([6 + len(payload), draw(st.integers(-(2**31), 40))]))
            magic, attributes = draw(st.sampled_from([1, 1, 0, 2])), draw(st.integers(0, 7))
            crc = draw(st.sampled_from([zlib.crc32(payload), draw(st.integers(0, 2**32 - 1))]))
            pieces.append(struct.pack(">iBBI", size, magic, attributes, crc) + payload)
        return b"".join(pieces)
    sets = []
    for _ in range(draw(st.integers(1, 4))):
        payloads = draw(st.lists(st.binary(max_size=150), max_size=6))
        codec, magic = draw(
            st.sampled_from([(0, 1), (0, 1), (0, 0), (compression.GZIP, 1), (0, 1)])
        )
        sets.append(build_message_set(payloads, codec, magic))
    buffer = b"".join(sets) or build_message_set([b"x"])
    if kind == "whole":
        return buffer
    position = draw(st.integers(0, len(buffer) - 1))
    if kind == "cut":
        return buffer[:position]
    if kind == "insert":
        return buffer[:position] + draw(st.binary(min_size=1, max_size=16)) + buffer[position:]
    flipped = bytearray(buffer)
    flipped[position] ^= draw(st.integers(1, 255))
    return bytes(flipped)


@needs_compiled
@SETTINGS
@given(damaged(), st.integers(0, 2**40))
def test_both_kernels_agree_on_generated_and_damaged_bytes(data: bytes, base: int) -> None:
    assert COMPILED is not None
    assert _answers(COMPILED, data, base) == _answers(PYTHON, data, base)


@pytest.mark.parametrize("k", [PYTHON, COMPILED], ids=["python", "compiled"])
def test_a_walk_reads_what_the_general_path_reads_and_stops_at_a_bad_crc(
    k: Kernels | None,
) -> None:
    if k is None:
        pytest.skip("the _native extension is not built")
    rng = random.Random(5)
    log = build_message_set([rng.randbytes(rng.randint(0, 300)) for _ in range(200)])
    buf = byte_array(log)
    entries = np.empty(len(log) // 10 + 1, np.int64)
    n, stop, bad = k.walk(buf, entries, True)
    expected = message_columns(log, 1000)
    assert (n, stop, bad) == (200, len(log), -1)
    assert (entries[:n] + 1000).tolist() == expected.offsets
    out = np.empty(stop - 10 * n, np.uint8)
    offsets = np.empty(n + 1, np.int32)
    k.gather(buf, entries[:n], stop, out, offsets)
    payloads = [out[offsets[i] : offsets[i + 1]].tobytes() for i in range(n)]
    assert payloads == expected.payloads
    assert k.digest(buf, entries[:n], stop, 1000) == b"".join(
        struct.pack(">qii", o, 0, len(p)) + p
        for o, p in zip(expected.offsets, expected.payloads, strict=True)
    )
    # one bit of the 101st payload's CRC: the walk stops there, and says so only when checking
    damaged = bytearray(log)
    at = int(entries[100])
    damaged[at + 9] ^= 0x01
    assert k.walk(byte_array(bytes(damaged)), entries, True)[:3] == (100, at, at)
    assert k.walk(byte_array(bytes(damaged)), entries, False)[:3] == (200, len(log), -1)


@pytest.mark.parametrize("k", [PYTHON, COMPILED], ids=["python", "compiled"])
def test_arrays_that_are_not_a_walk_are_refused(k: Kernels | None) -> None:
    if k is None:
        pytest.skip("the _native extension is not built")
    log = build_message_set([b"a" * 20, b"b" * 20])
    buf = byte_array(log)
    with pytest.raises(ValueError, match="room for 2 entries, a 60-byte buffer may hold 7"):
        k.walk(buf, np.empty(2, np.int64), True)
    walk = np.array([0, 30], np.int64)
    with pytest.raises(ValueError, match="stop 61 is outside the 60-byte buffer"):
        k.digest(buf, walk, 61, 0)
    with pytest.raises(ValueError, match="entry 0 at 0 is not a walk's entry"):
        k.digest(buf, np.array([0, 5], np.int64), 60, 0)
    with pytest.raises(ValueError, match="4 offsets for 2 entries"):
        k.gather(buf, walk, 60, np.empty(40, np.uint8), np.empty(4, np.int32))
    with pytest.raises(ValueError, match="39 bytes of room for 40"):
        k.gather(buf, walk, 60, np.empty(39, np.uint8), np.empty(3, np.int32))


def test_the_source_uses_the_kernels_the_environment_asks_for() -> None:
    pure = os.environ.get(native.PURE_PYTHON_ENV) == "1" or native.COMPILED is None
    for name in ("walk_entries", "gather_payloads", "digest_entries"):
        expected = (
            getattr(entry_kernels, f"{name}_python") if pure else getattr(native.COMPILED, name)
        )
        assert getattr(entry_kernels, name) is expected, name


needs_compiled = pytest.mark.skipif(
    native.COMPILED is None, reason="the _native extension is not built"
)


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The --py-files archive with a __main__.py added, which prints where `logbroker` and
    its compiled module were loaded from: run as a program, Python puts it first on the
    import path, as spark-submit does on an executor's."""
    folder = tmp_path_factory.mktemp("probe")
    probe = folder / "probe.zip"
    shutil.copyfile(build_archive(folder / "cache"), probe)
    with zipfile.ZipFile(probe, "a") as archive:
        archive.writestr(
            "__main__.py",
            "import logbroker.protocol.native as n, spark_apps.source.entry_kernels as k\n"
            "print(n.__file__); print(n.ACTIVE); print(n.COMPILED and n.COMPILED.__file__)\n"
            "print(k.walk_entries is getattr(n.COMPILED, 'walk_entries', None))\n",
        )
    return probe


def run_probe(probe: Path, tmp: Path) -> tuple[list[str], str]:
    """The probe's four lines and its stderr, run with TMPDIR=`tmp`."""
    env = {k: v for k, v in os.environ.items() if k != native.PURE_PYTHON_ENV}
    env["TMPDIR"] = str(tmp)
    ran = subprocess.run(
        [sys.executable, str(probe)], env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.splitlines(), ran.stderr


def archived_module(probe: Path) -> tuple[str, bytes]:
    """The name the compiled module is copied out to (`_native-<digest>.<suffix>`), its bytes."""
    with zipfile.ZipFile(probe) as archive:
        (member,) = [
            n for n in archive.namelist() if n.startswith("logbroker/protocol/_native.")
            and not n.endswith((".pyx", ".pxd", ".c", ".py"))
        ]  # fmt: skip
        data = archive.read(member)
    suffix = member[len("logbroker/protocol/_native") :]
    return f"_native-{hashlib.sha256(data).hexdigest()[:16]}{suffix}", data


@needs_compiled
def test_an_executor_importing_the_archive_runs_the_compiled_walks(
    probe: Path, tmp_path: Path
) -> None:
    """A Spark executor given the --py-files archive imports `logbroker` from it, where
    Python cannot load a compiled module: native.py copies it out and loads it."""
    (module_file, active, compiled_file, kernels), _ = run_probe(probe, tmp_path)
    assert module_file.startswith(str(probe))  # the archive's logbroker, not the install
    assert active == "compiled (Cython)"
    assert compiled_file.startswith(str(tmp_path / "logbroker-native-"))
    assert kernels == "True"


@needs_compiled
@pytest.mark.parametrize("how", ["others may write", "another owner"])
def test_an_executor_refuses_a_module_folder_that_is_not_its_own(
    probe: Path, tmp_path: Path, how: str
) -> None:
    """In a shared /tmp another user can make `logbroker-native-<uid>` first, and put in it
    whatever .so they like under the name ours is loaded by: that folder is not used; the
    module loads from a fresh private folder, removed once loaded."""
    name, _ = archived_module(probe)
    shared = tmp_path / f"logbroker-native-{os.getuid()}"
    shared.mkdir()
    planted = shared / name
    planted.write_bytes(b"not the module")
    if how == "others may write":
        shared.chmod(0o777)
    elif os.getuid() == 0:
        os.chown(shared, 65534, 65534)  # nobody's
    else:
        pytest.skip("only root can give a folder to another user")
    (_, active, compiled_file, kernels), stderr = run_probe(probe, tmp_path)
    assert active == "compiled (Cython)" and kernels == "True"
    assert not compiled_file.startswith(str(shared) + "/")
    assert f"not loading the compiled module from {shared}: " in stderr
    assert planted.read_bytes() == b"not the module"  # neither loaded nor written
    assert sorted(p.name for p in tmp_path.iterdir()) == [shared.name]  # the fresh one gone


def test_a_module_folder_is_private_only_as_a_directory_of_ours_no_one_else_writes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    uid = os.stat(folder).st_uid
    assert native.not_private(folder, uid) is None
    assert native.not_private(folder, uid + 1) == f"owned by uid {uid}, not {uid + 1}"
    folder.chmod(0o720)
    assert native.not_private(folder, uid) == "mode 720: others may write to it"
    folder.chmod(0o755)  # read by others: nothing can be put in it
    assert native.not_private(folder, uid) is None
    link = tmp_path / "link"
    link.symlink_to(folder)
    assert native.not_private(link, uid) == "not a directory (a link, or a file)"


@needs_compiled
def test_an_executor_loads_the_copied_module_only_when_its_bytes_hash_to_its_name(
    probe: Path, tmp_path: Path
) -> None:
    """A copy cut short (a full disk, a killed worker) or changed since is written again
    before it is loaded."""
    name, data = archived_module(probe)
    ours = tmp_path / f"logbroker-native-{os.getuid()}"
    ours.mkdir(mode=0o700)
    (ours / name).write_bytes(data[: len(data) // 2])
    (_, active, compiled_file, kernels), _ = run_probe(probe, tmp_path)
    assert (active, kernels) == ("compiled (Cython)", "True")
    assert compiled_file == str(ours / name)
    assert (ours / name).read_bytes() == data
