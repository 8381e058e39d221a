"""Events are values: hashable, read-only all the way down (Avro maps are `FrozenMap`s, arrays
tuples), equal and equally hashed after a trip through the codec."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from schemas.catalogue import event_types
from schemas.codec import Codec
from schemas.events import InstanceLaunched, PoolRegistered
from schemas.frozen import FrozenMap
from tests.factories import example_envelope, example_payload

ALL_TYPES = [t.name for t in event_types()]
CODEC = Codec()


@pytest.mark.parametrize("name", ALL_TYPES)
def test_every_event_type_is_hashable_and_survives_the_codec(name: str) -> None:
    envelope = example_envelope(name)
    again = example_envelope(name)
    assert hash(envelope) == hash(again) and envelope == again
    decoded = CODEC.decode(CODEC.encode(envelope))
    assert decoded == envelope and hash(decoded) == hash(envelope)
    assert hash(decoded.payload) == hash(example_payload(name))
    other = example_envelope(name, seed=1)
    assert len({envelope, again, decoded, other}) == 2


def _maps_and_arrays(value: Any) -> list[Any]:
    """Every container inside an event payload, nested records opened."""
    found: list[Any] = []
    for slot in getattr(type(value), "__slots__", ()):
        inner = getattr(value, slot)
        if isinstance(inner, FrozenMap | tuple | dict | list):
            found.append(inner)
            items = inner.values() if isinstance(inner, FrozenMap | dict) else inner
            for item in items:
                found += _maps_and_arrays(item)
        else:
            found += _maps_and_arrays(inner)
    return found


@pytest.mark.parametrize("name", ALL_TYPES)
def test_no_event_holds_a_mutable_container(name: str) -> None:
    decoded = CODEC.decode(CODEC.encode(example_envelope(name))).payload
    for payload in (example_payload(name), decoded):
        mutable = [c for c in _maps_and_arrays(payload) if type(c) in (dict, list)]
        assert mutable == [], f"{name} holds {mutable}"


def test_a_map_given_as_a_dict_is_copied_and_frozen() -> None:
    tags = {"spotcap.io/owner": "orch-1", "team": "vfx"}
    event = InstanceLaunched("i-1", "pool-a", "wl-1", 8, "reclaimable", tags)
    tags["team"] = "changed later"
    assert event.tags == {"spotcap.io/owner": "orch-1", "team": "vfx"}
    assert isinstance(event.tags, FrozenMap)
    changes: list[Callable[[FrozenMap[str, str]], object]] = [
        lambda m: m.__setitem__("team", "x"),
        lambda m: m.__delitem__("team"),
        lambda m: m.update(team="x"),
        lambda m: m.pop("team"),
        lambda m: m.popitem(),
        lambda m: m.setdefault("new", "x"),
        lambda m: m.clear(),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="cannot be changed"):
            change(event.tags)
    assert event.tags == {"spotcap.io/owner": "orch-1", "team": "vfx"}


def test_a_frozen_map_survives_copy_and_pickle() -> None:
    frozen = FrozenMap({"a": "1"})
    for again in (copy.copy(frozen), copy.deepcopy(frozen), pickle.loads(pickle.dumps(frozen))):
        assert type(again) is FrozenMap and again == frozen and hash(again) == hash(frozen)
    assert json.dumps(frozen) == '{"a": "1"}' and dict(frozen) == {"a": "1"}


def test_map_order_changes_neither_equality_nor_hash() -> None:
    one = example_payload("pool_registered")
    assert isinstance(one, PoolRegistered)
    reversed_attributes = dict(reversed(list(one.attributes.items())))
    other = PoolRegistered(**{**_fields(one), "attributes": reversed_attributes})
    assert list(other.attributes) != list(one.attributes)
    assert other == one and hash(other) == hash(one)


def _fields(payload: Any) -> dict[str, Any]:
    return {slot: getattr(payload, slot) for slot in type(payload).__slots__}


def test_a_frozen_map_equals_a_dict_with_the_same_items() -> None:
    frozen = FrozenMap({"a": 1, "b": 2})
    assert frozen == {"b": 2, "a": 1} and frozen != {"a": 1}
    assert hash(frozen) == hash(FrozenMap([("b", 2), ("a", 1)]))
    assert repr(frozen) == "FrozenMap({'a': 1, 'b': 2})"
    assert len(FrozenMap()) == 0
