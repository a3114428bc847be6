"""Spark's `xxhash64` of a string, computed in Python: equal to `F.xxhash64(col)` bit for bit.

Spark hashes a string column as XXH64 (Yann Collet's 64-bit xxHash) over the value's UTF-8
bytes, with seed 42, words read little-endian, and returns the result as a signed long. The
load summary's `ph` column is that value, so a summary the driver computes from the names it
read (event_names.py) must give the same number Spark's `profile_query` gives.
"""

from __future__ import annotations

SPARK_SEED = 42
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_MASK = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def _merge(h: int, acc: int) -> int:
    return (((h ^ _round(0, acc)) * _P1) + _P4) & _MASK


def xxhash64(data: bytes, seed: int = SPARK_SEED) -> int:
    """XXH64 of `data` as an unsigned 64-bit integer."""
    n = len(data)
    at = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed & _MASK
        v4 = (seed - _P1) & _MASK
        while at <= n - 32:
            v1 = _round(v1, int.from_bytes(data[at : at + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[at + 8 : at + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[at + 16 : at + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[at + 24 : at + 32], "little"))
            at += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while at <= n - 8:
        h ^= _round(0, int.from_bytes(data[at : at + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        at += 8
    if at <= n - 4:
        h ^= (int.from_bytes(data[at : at + 4], "little") * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        at += 4
    while at < n:
        h ^= (data[at] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        at += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


def spark_xxhash64(value: str) -> int:
    """`F.xxhash64(value)` for a string column's value (a signed long, as Spark returns it)."""
    h = xxhash64(value.encode())
    return h - (1 << 64) if h >= 1 << 63 else h
