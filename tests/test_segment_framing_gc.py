"""Objects the log's paths hold by the thousand (records, origins, decoded events, messages)
are left out of the garbage collector's walks when they can be part of no reference cycle:
frozen, holding only strings, numbers, bytes, None, and tuples, frozen records and
`FrozenMap`s of those. Anything that can still change (a list, a dict) keeps them tracked,
and the collector still frees what it must."""

from __future__ import annotations

import dataclasses
import gc
import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope
from schemas.frozen import FrozenMap
from streams.log import _new_origin, immutable, new_record, slots_constructor
from streams.processing.message import new_message
from streams.reader import new_decoded
from tests.strategies import envelopes

from streams import _framing  # isort: skip  (an ImportError here: the extension is not built)


def test_an_origin_a_record_and_a_message_of_them_are_not_tracked() -> None:
    origin = _new_origin("t", 1, 2)
    record = new_record("t", 1, 2, b"k", b"v", 3, ())
    assert origin == Origin("t", 1, 2)
    assert not gc.is_tracked(origin)
    assert not gc.is_tracked(record)
    message = new_message(record, record)
    assert not gc.is_tracked(message)
    assert message.payload is record


_CODEC = Codec()


@settings(max_examples=200, deadline=None)
@given(envelopes())
def test_every_decoded_event_is_left_out_of_the_collectors_walks(envelope: Envelope) -> None:
    codec = _CODEC
    decoded = new_decoded(_new_origin("t", 0, 1), codec.decode(codec.encode(envelope)))
    assert decoded.envelope == envelope
    assert not gc.is_tracked(decoded)
    assert not gc.is_tracked(decoded.envelope)
    assert not gc.is_tracked(decoded.envelope.payload)


@dataclasses.dataclass(frozen=True, slots=True)
class _Box:
    value: object


@dataclasses.dataclass(frozen=True, slots=True)
class _Pair:
    left: object
    right: object


immutable(_Box)
_new_pair = slots_constructor(_Pair)


@settings(deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5) | st.binary(max_size=5) | st.floats(),
        lambda inner: st.tuples(inner, inner) | st.builds(_Box, inner),
        max_leaves=8,
    )
)
def test_a_value_of_immutable_values_settles(value: object) -> None:
    pair = _new_pair(value, "x")
    assert not gc.is_tracked(pair)
    assert _framing.settle(value)


@given(st.sampled_from([[], {}, {1}, [1, "a"]]))
def test_anything_that_can_change_keeps_its_holder_tracked(changeable: object) -> None:
    for value in (changeable, (1, changeable), _Box(changeable), _Box((changeable,))):
        assert not _framing.settle(value)
        assert gc.is_tracked(_new_pair(value, 1))


def test_a_class_not_declared_immutable_keeps_its_holder_tracked() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Unregistered:
        n: int

    assert gc.is_tracked(_new_pair(Unregistered(1), 1))
    assert not _framing.settle(Unregistered(1))


def test_a_frozen_map_settles_and_is_tracked_again_if_changed_underneath() -> None:
    tags: FrozenMap[str, object] = FrozenMap({"a": "b"})
    holder = _new_pair(tags, 1)
    assert not gc.is_tracked(holder)
    assert not gc.is_tracked(tags)
    # A FrozenMap refuses changes; forced through dict's own method, CPython tracks the
    # mapping again as soon as it holds something that may be part of a cycle.
    changeable: list[int] = []
    dict.__setitem__(tags, "c", changeable)
    assert gc.is_tracked(tags)
    assert not _framing.settle(FrozenMap({"a": []}))


def test_an_unsettled_object_is_still_collected_in_a_cycle() -> None:
    class Node:
        pair: object = None

    node = Node()
    pair = _new_pair(node, 1)
    node.pair = pair  # a cycle through the pair
    gone = weakref.ref(node)
    del node, pair
    gc.collect()
    assert gone() is None


def test_a_class_that_is_not_plain_slots_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class WithDict:
        n: int

    try:
        _framing.immutable(WithDict)
    except TypeError as error:
        assert "__dict__" in str(error)
    else:
        raise AssertionError("a class with a __dict__ was registered immutable")
    immutable(WithDict)  # passed over, not an error
