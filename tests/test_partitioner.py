"""Kafka's murmur2 partitioner, against the Java client's own test vectors."""

from __future__ import annotations

import pytest

from streams.partitioner import PLACEMENT_CACHE_SIZE, murmur2, partition_for

# From Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), list(JAVA_VECTORS.items()))
def test_murmur2_matches_the_java_client(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_in_range_and_stable() -> None:
    for n in (1, 3, 12):
        for i in range(200):
            key = f"instance-{i}".encode()
            p = partition_for(key, n)
            assert 0 <= p < n
            assert p == partition_for(key, n)


def test_cached_placement_is_murmur2_for_repeated_and_evicted_keys() -> None:
    # More keys than the cache holds, each asked twice: hits, misses and evictions all place
    # a key where the hash does (the contract suite checks the hash against a real broker).
    keys = [f"workload-{i}".encode() for i in range(PLACEMENT_CACHE_SIZE + 500)]
    for key in [*keys, *reversed(keys)]:
        assert partition_for(key, 40) == (murmur2(key) & 0x7FFFFFFF) % 40
