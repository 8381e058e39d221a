"""`FrozenMap`: the read-only, hashable mapping that carries Avro maps in the event classes.

Events are frozen dataclasses, and a frozen dataclass is hashable only if every field is: a
``dict`` would make the whole event unhashable (and changeable through the back door), and
``types.MappingProxyType`` is read-only but not hashable. A `FrozenMap` is both; it equals any
mapping with the same items, whatever their order.

It is a ``dict`` whose changing methods raise, not a `collections.abc.Mapping` of its own: the
codec copies maps on every encode and decode, and a dict copies in C (measured with timeit: a
Mapping class of its own took ``to_avro`` of an ``instance_launched`` from 0.4-0.6 µs to
1.8-2.4 µs), fastavro and ``json`` take it as the dict it is, and the event classes still type
it ``Mapping``. `dict.__setitem__(m, k, v)` would get past it: it guards against mistakes, not
against intent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(dict[K, V]):
    """An immutable dict; hashable when its values are."""

    __slots__ = ("_hash",)

    def __hash__(self) -> int:  # type: ignore[override]
        try:
            return self._hash
        except AttributeError:
            self._hash: int = hash(frozenset(self.items()))
            return self._hash

    def __repr__(self) -> str:
        return f"FrozenMap({dict.__repr__(self)})"

    def __reduce__(self) -> tuple[type[FrozenMap[K, V]], tuple[dict[K, V]]]:
        return (type(self), (dict(self),))

    def _refuse(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise TypeError("a FrozenMap cannot be changed: build a new one (FrozenMap({**old, ...}))")

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse


def frozen_map(items: Mapping[K, V]) -> FrozenMap[K, V]:
    """`items` as a `FrozenMap` (itself when it is one already)."""
    return items if isinstance(items, FrozenMap) else FrozenMap(items)


__all__ = ["FrozenMap", "frozen_map"]
