"""Copy-on-write updates of the mappings held in frozen decider state.

Decider state is frozen and shared between the state before and after an input, so a mapping in
it is never changed in place: an update returns a new mapping and leaves the old one as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def put(mapping: Mapping[K, V], key: K, value: V) -> Mapping[K, V]:
    """`mapping` with `key` set to `value`."""
    copy = dict(mapping)
    copy[key] = value
    return copy


def drop(mapping: Mapping[K, V], key: K) -> Mapping[K, V]:
    """`mapping` without `key` (the same object when the key is absent)."""
    if key not in mapping:
        return mapping
    copy = dict(mapping)
    del copy[key]
    return copy


def add(mapping: Mapping[K, int], key: K, delta: int) -> Mapping[K, int]:
    """`mapping` with `delta` added to `key`'s count; a count that reaches 0 is removed."""
    value = mapping.get(key, 0) + delta
    return put(mapping, key, value) if value else drop(mapping, key)
