"""Kafka's default partitioner (murmur2), so a key lands on the same partition everywhere.

This is the Java client's `Utils.murmur2` and `toPositive(hash) % partitions`; librdkafka's
`murmur2_random` partitioner and aiokafka (Faust) compute the same, and the embedded log uses
this function. A test checks it against a real broker.

Where the C extension is built (`streams._framing`), `partition_for` is its murmur2 (about
0.1 µs a key, a cache lookup's cost); the Python code stays as the reference and the fallback,
its placement cached: keys repeat (instance, pool and workload ids), and the hash in Python
took a sixth of an embedded write (`bench/log.py --profile`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 hash of `data` as Kafka computes it, as a signed int (like Java)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


PLACEMENT_CACHE_SIZE = 1 << 16  # keys; a few MiB at most


@lru_cache(maxsize=PLACEMENT_CACHE_SIZE)
def partition_for_python(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null `key`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


partition_for: Callable[[bytes, int], int] = partition_for_python
"""The partition Kafka's default partitioner picks for a non-null `key`."""
try:
    from streams import _framing
except ImportError:  # built without a C compiler: the cached Python hash
    FRAMING = "python"
else:
    partition_for = _framing.partition_for
    FRAMING = "c"
