"""The broker process keeps freed heap memory for its next socket reads (server/memory.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Run in a fresh interpreter: mallopt changes the whole process. Prints how far the heap's
# end moved back after 2 MiB of 256 KiB objects (a socket read's size) were freed.
_PROBE = """
import ctypes, sys
from logbroker.server.memory import keep_freed_memory
libc = ctypes.CDLL(None)
libc.sbrk.restype = ctypes.c_void_p
if sys.argv[1] == "keep" and not keep_freed_memory():
    print("unsupported"); raise SystemExit
first = bytes(256 * 1024 - 64)  # mapped; freeing it moves glibc's threshold above it
del first
reads = [bytes(256 * 1024 - 64) for _ in range(8)]
before = libc.sbrk(0)
del reads
print(before - libc.sbrk(0))
"""


def _given_back(mode: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_freed_read_buffers_stay_with_the_broker_process():
    kept = _given_back("keep")
    if kept == "unsupported":
        pytest.skip("not glibc: mallopt is not there")
    assert int(kept) == 0, f"the heap shrank by {kept} bytes: the next reads fault pages in"
    # without it glibc gives most of the 2 MiB back at once (what the broker used to pay for)
    assert int(_given_back("default")) > 1 << 20
