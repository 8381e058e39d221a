"""Decider state to bytes and back, for checkpoints and Faust tables: tagged JSON, no pickle.

Decider state is frozen dataclasses holding mappings, tuples, frozensets, numbers, strings and
the envelopes of `schemas.events`. `encode` writes it as JSON in which every value keeps its
type (a tuple stays a tuple, a mapping's keys may be tuples); `decode` rebuilds it. Only classes
of the modules in `ALLOWED_MODULES` are ever built, so a damaged or hostile changelog cannot make
the runtime construct anything else (the reason pickle is not used).

The encoding is deterministic: the same state gives the same bytes (sets are sorted, mapping
order is kept), so two checkpoints of the same state compare equal.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import zlib
from typing import Any

from schemas.frozen import FrozenMap

ALLOWED_MODULES = ("streams.deciders.", "schemas.events", "streams.runtime.")

# Tags of the JSON objects that stand for non-JSON values.
_CLASS = "@c"  # dataclass: [qualified name, field values...]
_MAP = "@m"  # mapping: [[key, value], ...]
_FROZEN_MAP = "@f"  # schemas.frozen.FrozenMap (the events' maps): [[key, value], ...]
_TUPLE = "@t"
_SET = "@s"  # frozenset (sorted by encoding)


class StateCodecError(ValueError):
    """Stored state could not be read back; the message says what and where."""


def to_json(value: Any) -> Any:
    """`value` as JSON-compatible data with its types tagged."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        name = f"{cls.__module__}:{cls.__qualname__}"
        return {
            _CLASS: [name, *(to_json(getattr(value, f.name)) for f in dataclasses.fields(value))]
        }
    if isinstance(value, FrozenMap):
        return {_FROZEN_MAP: [[to_json(k), to_json(v)] for k, v in value.items()]}
    if isinstance(value, dict):
        return {_MAP: [[to_json(k), to_json(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {_TUPLE: [to_json(v) for v in value]}
    if isinstance(value, frozenset | set):
        items = [to_json(v) for v in value]
        items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return {_SET: items}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    raise StateCodecError(f"cannot store a {type(value).__name__} in decider state: {value!r}")


_classes: dict[str, type[Any]] = {}


def _class(name: str) -> type[Any]:
    cls = _classes.get(name)
    if cls is not None:
        return cls
    module_name, _, qualname = name.partition(":")
    if not any(module_name == m.rstrip(".") or module_name.startswith(m) for m in ALLOWED_MODULES):
        raise StateCodecError(
            f"stored state names class {name!r}, outside the modules decider state may use "
            f"({', '.join(ALLOWED_MODULES)})"
        )
    # Only modules already loaded (the deciders and the events are, wherever state is read):
    # stored state never makes the runtime import anything.
    found: Any = sys.modules.get(module_name)
    try:
        if found is None:
            raise AttributeError(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except AttributeError as error:
        raise StateCodecError(f"stored state names class {name!r}, which is unknown") from error
    if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
        raise StateCodecError(f"stored state names {name!r}, which is not a dataclass")
    _classes[name] = found
    return found


def from_json(data: Any) -> Any:
    """The value `to_json` made `data` from."""
    if isinstance(data, list):
        return [from_json(v) for v in data]
    if not isinstance(data, dict):
        return data
    if len(data) != 1:
        raise StateCodecError(f"stored state holds an untagged object: {sorted(data)}")
    tag, body = next(iter(data.items()))
    if tag == _CLASS:
        cls = _class(body[0])
        values = [from_json(v) for v in body[1:]]
        init = [f for f in dataclasses.fields(cls) if f.init]
        # A state stored before trailing fields with defaults were added reads with those
        # defaults (RegionView.trust, for one): an upgrade keeps the stored state.
        missing = init[len(values) :]
        defaulted = all(
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            for f in missing
        )
        if len(init) < len(values) or not defaulted:
            raise StateCodecError(
                f"stored {body[0]} has {len(values)} fields, the class {len(init)}: "
                "the state was written by another release; start from an earlier checkpoint"
            )
        return cls(*values)
    if tag == _MAP:
        return {_hashable(from_json(k)): from_json(v) for k, v in body}
    if tag == _FROZEN_MAP:
        return FrozenMap({_hashable(from_json(k)): from_json(v) for k, v in body})
    if tag == _TUPLE:
        return tuple(from_json(v) for v in body)
    if tag == _SET:
        return frozenset(_hashable(from_json(v)) for v in body)
    raise StateCodecError(f"stored state holds an unknown tag {tag!r}")


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def encode(value: Any, *, compress: bool = True) -> bytes:
    """`value` as (zlib-compressed) tagged JSON."""
    raw = json.dumps(to_json(value), separators=(",", ":"), allow_nan=True).encode()
    return zlib.compress(raw, 6) if compress else raw


def decode(data: bytes) -> Any:
    """The value `encode` wrote (compressed or not)."""
    try:
        raw = zlib.decompress(data) if data[:1] == b"\x78" else data
        return from_json(json.loads(raw))
    except (zlib.error, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise StateCodecError(f"stored decider state is damaged: {error}") from error
