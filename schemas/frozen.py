"""`FrozenMap`: the read-only, hashable mapping that carries Avro maps in the event classes.

Events are frozen dataclasses, and a frozen dataclass is hashable only if every field is: a
``dict`` would make the whole event unhashable (and mutable through the back door), and
``types.MappingProxyType`` is read-only but not hashable. A `FrozenMap` is both; it equals any
mapping with the same items, whatever their order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar, overload

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V]):
    """An immutable mapping; hashable when its values are."""

    __slots__ = ("_data", "_hash")

    @overload
    def __init__(self) -> None: ...

    @overload
    def __init__(self, items: Mapping[K, V]) -> None: ...

    @overload
    def __init__(self, items: Iterable[tuple[K, V]]) -> None: ...

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._data: dict[K, V] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def frozen_map(items: Mapping[K, V]) -> FrozenMap[K, V]:
    """`items` as a `FrozenMap` (itself when it is one already)."""
    return items if isinstance(items, FrozenMap) else FrozenMap(items)


__all__ = ["FrozenMap", "frozen_map"]
