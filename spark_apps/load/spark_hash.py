"""Spark's `xxhash64` of a string, computed in the driver: equal to `F.xxhash64(col)` bit for bit.

Spark hashes a string column as XXH64 (Yann Collet's 64-bit xxHash, here the `xxhash`
package) over the value's UTF-8 bytes with seed 42, and returns the result as a signed long.
The load summary's `ph` column is that value, so a summary the driver computes from the names
it read (event_names.py) must give the same number Spark's `profile_query` gives.
"""

from __future__ import annotations

import xxhash

SPARK_SEED = 42  # Spark's XxHash64 expression's default seed


def spark_xxhash64(value: str) -> int:
    """`F.xxhash64(value)` for a string column's value (a signed long, as Spark returns it)."""
    # the digest's canonical bytes are big-endian; read signed, they are Spark's long
    return int.from_bytes(xxhash.xxh64_digest(value.encode(), SPARK_SEED), "big", signed=True)
