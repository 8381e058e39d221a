"""Kafka's murmur2 partitioner, against the Java client's own test vectors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams import partitioner
from streams.partitioner import PLACEMENT_CACHE_SIZE, murmur2, partition_for, partition_for_python

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
        assert partition_for_python(key, 40) == (murmur2(key) & 0x7FFFFFFF) % 40


@given(st.binary(max_size=80), st.integers(min_value=1, max_value=1 << 16))
def test_the_extensions_placement_is_the_python_hashs(key: bytes, partitions: int) -> None:
    """`partition_for` is the C extension's murmur2 where it is built (as the log runs)."""
    assert partitioner.FRAMING == "c"
    expected = (murmur2(key) & 0x7FFFFFFF) % partitions
    assert partition_for(key, partitions) == partition_for_python(key, partitions) == expected


def test_the_extensions_placement_refuses_what_the_hash_cannot_place() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for(b"k", 0)
    with pytest.raises(TypeError):
        partition_for("k", 3)  # type: ignore[arg-type]
