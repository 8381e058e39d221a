"""Hypothesis strategies for events, derived from the Avro schemas (not from the classes).

``payloads()`` draws any event payload, ``payload_of(name)`` one event type's payloads and
``envelopes()`` whole envelopes. Values stay inside what Avro can carry: longs and ints in
range, finite doubles, strings without surrogates, valid UUIDs where the schema says uuid,
and timestamps between 2000 and 2100 where it says timestamp-micros.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any

from hypothesis import strategies as st

from schemas import events
from schemas.catalogue import event_type, event_types, full_name, python_fields
from schemas.events import Envelope, Payload

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
TS_MIN = int(datetime(2000, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000
TS_MAX = int(datetime(2100, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=24)
uuid_strings = st.uuids().map(str)
timestamps = st.integers(TS_MIN, TS_MAX)

_PRIMITIVES: Mapping[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(INT_MIN, INT_MAX),
    "long": st.integers(LONG_MIN, LONG_MAX),
    "float": st.floats(allow_nan=False, allow_infinity=False, width=32),
    "double": st.floats(allow_nan=False, allow_infinity=False),
    "bytes": st.binary(max_size=48),
    "string": texts,
}


def _record_class(name: str) -> Callable[..., Any]:
    cls: Callable[..., Any] = getattr(events, name.rpartition(".")[2])
    return cls


def strategy_for(
    type_: Any, named: dict[str, st.SearchStrategy[Any]], namespace: str | None = None
) -> st.SearchStrategy[Any]:
    """A strategy for the dataclass-side values of an Avro type (named types registered)."""
    if isinstance(type_, str):
        if type_ in _PRIMITIVES:
            return _PRIMITIVES[type_]
        return st.deferred(lambda: named[type_])
    if isinstance(type_, list):
        return st.one_of([strategy_for(t, named, namespace) for t in type_])
    kind = type_["type"]
    if type_.get("logicalType") == "uuid":
        return uuid_strings
    if type_.get("logicalType") == "timestamp-micros":
        return timestamps
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind == "array":
        items = strategy_for(type_["items"], named, namespace)
        return st.lists(items, max_size=4).map(tuple)
    if kind == "map":
        return st.dictionaries(texts, strategy_for(type_["values"], named, namespace), max_size=3)
    name = full_name(type_, namespace)
    if kind == "enum":
        named[name] = st.sampled_from(type_["symbols"])
        return named[name]
    if kind == "record":
        inner_ns = name.rpartition(".")[0]
        fields = {
            fd["name"]: strategy_for(fd["type"], named, inner_ns) for fd in python_fields(type_)
        }
        cls = _record_class(name)
        named[name] = st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))
        return named[name]
    raise ValueError(f"no strategy for Avro type {type_!r}")


@cache
def payload_of(name: str) -> st.SearchStrategy[Payload]:
    """Payloads of one event type (snake_case name or record full name)."""
    return strategy_for(dict(event_type(name).schema), {})


def payloads() -> st.SearchStrategy[Payload]:
    """Any event payload."""
    return st.one_of([payload_of(t.name) for t in event_types()])


def _key_of(payload: Payload) -> st.SearchStrategy[str]:
    value = getattr(payload, payload.KEY, None)
    return st.just(value) if isinstance(value, str) else st.sampled_from(["eu-west", "eu-north"])


def envelopes(payload: st.SearchStrategy[Payload] | None = None) -> st.SearchStrategy[Envelope]:
    """Whole envelopes: valid uuids, sane timestamps, the key the event type declares."""

    def wrap(p: Payload) -> st.SearchStrategy[Envelope]:
        return st.builds(
            Envelope,
            event_id=uuid_strings,
            event_type=st.just(p.EVENT_TYPE),
            occurred_at=timestamps,
            recorded_at=timestamps,
            region=st.sampled_from(["eu-west", "eu-north", "eu-central"]),
            key=_key_of(p),
            causation_id=st.none() | uuid_strings,
            correlation_id=st.none() | texts,
            producer=texts,
            payload=st.just(p),
        )

    return (payload if payload is not None else payloads()).flatmap(wrap)


__all__ = ["envelopes", "payload_of", "payloads", "strategy_for"]
