"""How the broker process's allocator treats freed memory (glibc only).

Kept apart from broker.py so that a test can call it in a fresh interpreter whose heap no
import has shaped yet.
"""

from __future__ import annotations

import ctypes

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Have glibc keep freed heap memory for the next allocation (the broker's process only).

    Every socket read allocates its bytes (asyncio reads up to 256 KiB at a time) and frees
    them once handled; by default glibc gives the top of the heap back to the kernel as soon
    as 128-512 KiB of it are free, so the next read's bytes are fresh pages again: a brk and a
    page fault per 4 KiB, in every read of a busy produce connection. Freed memory up to 64 MiB
    now stays with the process, and only allocations of 4 MiB or more get their own mapping.
    False where this is not glibc (nothing changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 4 << 20) and mallopt(_M_TRIM_THRESHOLD, 64 << 20))
