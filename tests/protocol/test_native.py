"""The compiled message-set walks (_native.pyx): built by `make setup`, chosen unless
LOGBROKER_PURE_PYTHON=1, and named by `logbroker --version`.

That they give the reference's results and errors is test_message_properties.py's
test_both_walks_agree_on_generated_and_damaged_bytes (and every test there and in
test_message_bytes.py runs against both).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from logbroker import __version__
from logbroker.protocol import message_set, native

LOGBROKER = Path(sys.executable).with_name("logbroker")


def test_the_extension_is_built() -> None:
    assert native.COMPILED is not None, (
        "logbroker.protocol._native does not import: `make setup` compiles it "
        "(it needs gcc, zlib1g-dev and Cython from requirements.lock)"
    )


def test_the_library_uses_the_path_the_environment_asks_for() -> None:
    # The suite runs in one process, so the choice made at import time is the one to check.
    if os.environ.get(native.PURE_PYTHON_ENV) == "1" or native.COMPILED is None:
        assert message_set.validate is message_set.validate_python
        assert message_set._plain_run is message_set.plain_run_python
    else:
        assert message_set.validate is native.COMPILED.validate
        assert message_set._plain_run is native.COMPILED.plain_run


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
        "from logbroker.protocol import message_set as m; "
        "print(m.validate is m.validate_python, m._plain_run is m.plain_run_python)"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.split() == ["True", "True"], ran.stderr


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
