"""Choosing a partition for a message (0.7's `producer/DefaultPartitioner`).

No key: a random partition. A key: `abs(hash(key)) % partitions` with Java's
`String.hashCode` over the key's UTF-16 code units, so a key lands on the same partition
from every process and Python version, and where 0.7's Java producer put it. Bytes keys are
hashed like `java.util.Arrays.hashCode(byte[])` (signed bytes). Any callable
`(key, partitions) -> int` can replace the default.
"""

from __future__ import annotations

import random
from collections.abc import Callable

Key = str | bytes | None
Partitioner = Callable[[Key, int], int]

_MASK = 0xFFFFFFFF


def java_string_hash(key: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1], as a signed 32-bit int."""
    h = 0
    data = key.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def java_bytes_hash(key: bytes) -> int:
    """java.util.Arrays.hashCode(byte[]): 31*h + b over signed bytes, starting at 1."""
    h = 1
    for b in key:
        h = (31 * h + (b - 256 if b > 127 else b)) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def stable_hash(key: str | bytes) -> int:
    return java_string_hash(key) if isinstance(key, str) else java_bytes_hash(bytes(key))


def default_partitioner(key: Key, partitions: int) -> int:
    if partitions <= 0:
        raise ValueError("a topic needs at least one partition")
    if key is None:
        return random.randrange(partitions)
    return abs(stable_hash(key)) % partitions
