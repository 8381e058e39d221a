"""The codec's writer of one record, compiled: a parsed schema made once into a program that
`schemas._avro_write` (C) follows for each record.

fastavro writes a record by walking its parsed schema, looking each field's type up in dicts
and comparing strings, for every record: 8-11 µs of a demo's event (a fifth of the demo's
own process, issue 26). The program is the same walk done once: nested ``(operation,
argument)`` tuples. It covers the Avro types the envelope uses (boolean, int, long, double,
string, bytes, enum, record, array, map, ``["null", T]`` and a union of named records written
as ``(name, datum)``); a schema with anything else (a logical type, float, fixed, another
union, a record that holds itself) gets no program and fastavro writes it.

The C writer is strict about Python types and raises on anything it does not write exactly
as fastavro does; the codec then asks fastavro (`Codec.encode`), so every record's bytes are
fastavro's. `writer` also checks, once, that the C writer gives fastavro's bytes on a record
of every type it covers, and is None if it does not (or is not built: `setup.py`).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import fastavro

BOOLEAN, LONG, DOUBLE, STRING, BYTES, ENUM, RECORD, ARRAY, MAP, OPTIONAL, NAMED = range(1, 12)
_PRIMITIVES = {"boolean": BOOLEAN, "int": LONG, "long": LONG, "double": DOUBLE,
               "string": STRING, "bytes": BYTES}  # fmt: skip

Program = tuple[int, Any]
Write = Callable[[bytes, Program, Any], bytes]


class UnsupportedSchemaError(ValueError):
    """The schema holds what the program does not cover."""


def compile_schema(parsed: Any) -> Program | None:
    """The program of a schema parsed by `fastavro.parse_schema` (its logical types removed),
    or None if it holds a type the program does not cover."""
    named: dict[str, Any] = {}
    _gather(parsed, named)
    try:
        return _compile(parsed, named, frozenset())
    except UnsupportedSchemaError:
        return None


def _gather(schema: Any, named: dict[str, Any]) -> None:
    """Every named type's definition, by full name (a later mention is its name alone)."""
    if isinstance(schema, list):
        for branch in schema:
            _gather(branch, named)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            named.setdefault(schema["name"], schema)
        if kind in ("record", "error"):
            for field in schema.get("fields", ()):
                _gather(field["type"], named)
        elif kind == "array":
            _gather(schema["items"], named)
        elif kind == "map":
            _gather(schema["values"], named)
        elif isinstance(kind, dict | list):
            _gather(kind, named)


def _compile(schema: Any, named: Mapping[str, Any], within: frozenset[str]) -> Program:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return (_PRIMITIVES[schema], None)
        if schema in named and schema not in within:
            return _compile(named[schema], named, within)
        raise UnsupportedSchemaError(schema)
    if isinstance(schema, list):
        return _union(schema, named, within)
    if not isinstance(schema, dict) or "logicalType" in schema:
        raise UnsupportedSchemaError(str(schema))
    kind = schema["type"]
    if kind in _PRIMITIVES:
        return (_PRIMITIVES[kind], None)
    if kind == "enum":
        return (ENUM, {symbol: i for i, symbol in enumerate(schema["symbols"])})
    if kind == "record":
        inside = within | {schema["name"]}
        fields = tuple((f["name"], _compile(f["type"], named, inside)) for f in schema["fields"])
        return (RECORD, fields)
    if kind == "array":
        return (ARRAY, _compile(schema["items"], named, within))
    if kind == "map":
        return (MAP, _compile(schema["values"], named, within))
    if isinstance(kind, dict | list | str):
        return _compile(kind, named, within)
    raise UnsupportedSchemaError(str(kind))


def _union(branches: list[Any], named: Mapping[str, Any], within: frozenset[str]) -> Program:
    if len(branches) == 2 and branches[0] == "null" and branches[1] != "null":
        return (OPTIONAL, _compile(branches[1], named, within))
    by_name: dict[str, tuple[int, Program]] = {}
    for index, branch in enumerate(branches):
        name = branch if isinstance(branch, str) else branch.get("name")
        definition = named.get(name) if isinstance(name, str) else None
        if definition is None or definition.get("type") != "record" or name in by_name:
            raise UnsupportedSchemaError(str(branch))
        by_name[name] = (index, _compile(branch, named, within))
    return (NAMED, by_name)


_PROBE_TYPE = fastavro.parse_schema(
    {
        "type": "record",
        "name": "Probe",
        "fields": [
            {"name": "s", "type": "string"},
            {"name": "i", "type": "int"},
            {"name": "n", "type": ["null", "long"]},
            {"name": "z", "type": ["null", "long"]},
            {"name": "d", "type": "double"},
            {"name": "di", "type": "double"},
            {"name": "b", "type": "boolean"},
            {"name": "y", "type": "bytes"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
            {"name": "a", "type": {"type": "array", "items": "string"}},
            {"name": "a0", "type": {"type": "array", "items": "long"}},
            {"name": "m", "type": {"type": "map", "values": "int"}},
            {"name": "m0", "type": {"type": "map", "values": "int"}},
            {
                "name": "u",
                "type": [
                    {"type": "record", "name": "Q", "fields": [{"name": "x", "type": "int"}]},
                    {"type": "record", "name": "R", "fields": [{"name": "e", "type": "E"}]},
                ],
            },
        ],
    }
)
_PROBE_DATA = (
    {
        "s": "é€𝄞", "i": -1, "n": -(2**63), "z": None, "d": -0.1, "di": 3, "b": True,
        "y": b"\x00\xff", "e": "Y", "a": ["x", ""], "a0": [], "m": {"k": 2**31 - 1, "": -64},
        "m0": {}, "u": ("R", {"e": "X"}),
    },
    {
        "s": "", "i": 63, "n": 2**63 - 1, "z": 64, "d": float("inf"), "di": -(2**53), "b": False,
        "y": b"", "e": "X", "a": [], "a0": [0, -1, 1, 8191, -8193], "m": {}, "m0": {"a": 0},
        "u": ("Q", {"x": 300}),
    },
)  # fmt: skip


def writer() -> Write | None:
    """The C writer, if it is built and gives fastavro's bytes on a record of every type the
    program covers (the extremes of a long, multi-byte text, empty arrays and maps)."""
    try:
        from schemas._avro_write import write
    except ImportError:  # not built (setup.py): fastavro writes every record
        return None
    program = compile_schema(_PROBE_TYPE)
    if program is None:
        return None
    for datum in _PROBE_DATA:
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, _PROBE_TYPE, datum)
        try:
            if write(b"h", program, datum) != b"h" + expected.getvalue():
                return None
        except (TypeError, ValueError, OverflowError):
            return None
    return write
