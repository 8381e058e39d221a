"""The Avro JSON encoding of envelopes (the Avro specification's JSON form), for the agent spool.

The node agent's spool is NDJSON that people and Vector read, so it holds each event in Avro's
JSON encoding, tagged with the writer schema's fingerprint: nullable fields are written
``{"string": "x"}`` or ``null``, the payload ``{"spotcap.events.NoticeReceived": {...}}``.
`AvroJsonForm` converts both ways and turns a JSON datum into the single-object binary record
the codec reads, so a spool line written by an older or newer release is resolved by the same
schema-evolution rules as any record on the log (`schemas.codec`).

fastavro's ``json_writer`` produces the same JSON but re-parses the schema on every call
(milliseconds per event); this module compiles the schema once and encodes in microseconds,
which matters on a node where a drain writes a handful of events next to a latency budget.
Logical types are stripped as in the codec: timestamps are integer microseconds, uuids strings.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import fastavro

from schemas.catalogue import envelope_schema
from schemas.codec import SINGLE_OBJECT_MAGIC, schema_fingerprint, strip_logical_types
from schemas.events import Envelope

_Convert = Callable[[Any], Any]
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "string", "bytes"})


class AvroJsonError(ValueError):
    """A JSON datum does not match the schema it claims; says where."""


def _same(value: Any) -> Any:
    return value


def _bytes_out(value: Any) -> Any:
    return bytes(value).decode("latin-1")


def _bytes_in(value: Any) -> Any:
    if not isinstance(value, str):
        raise AvroJsonError(f"bytes must be a string of code points, got {value!r}")
    return value.encode("latin-1")


class _Compiler:
    """Compiles a schema into an encoder and a decoder, named types resolved once."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}

    def branch_name(self, schema: Any) -> str:
        if isinstance(schema, str):
            return schema
        kind = schema["type"]
        if kind in ("record", "enum", "fixed"):
            name = str(schema["name"])
            namespace = schema.get("namespace")
            return name if "." in name or not namespace else f"{namespace}.{name}"
        return str(kind)

    def _register(self, schema: Mapping[str, Any]) -> None:
        self.named[self.branch_name(schema)] = schema

    def pair(self, schema: Any) -> tuple[_Convert, _Convert]:
        """(to JSON, from JSON) converters for values of `schema`."""
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return (_bytes_out, _bytes_in) if schema == "bytes" else (_same, _same)
            return self.pair(self.named[schema])
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema["type"]
        if kind in _PRIMITIVES:
            return self.pair(kind)
        if kind == "enum":
            self._register(schema)
            return _same, _same
        if kind == "fixed":
            self._register(schema)
            return _bytes_out, _bytes_in
        if kind == "array":
            out, back = self.pair(schema["items"])
            return (lambda v: [out(x) for x in v]), (lambda v: [back(x) for x in v])
        if kind == "map":
            out, back = self.pair(schema["values"])
            return (
                lambda v: {k: out(x) for k, x in v.items()},
                lambda v: {k: back(x) for k, x in v.items()},
            )
        if kind == "record":
            self._register(schema)
            return self._record(schema)
        raise AvroJsonError(f"unsupported Avro type {kind!r}")

    def _record(self, schema: Mapping[str, Any]) -> tuple[_Convert, _Convert]:
        fields = [(f["name"], *self.pair(f["type"])) for f in schema["fields"]]

        def out(value: Any) -> Any:
            return {name: to(value[name]) for name, to, _ in fields}

        def back(value: Any) -> Any:
            if not isinstance(value, dict):
                raise AvroJsonError(f"{schema['name']}: expected an object, got {value!r}")
            try:
                return {name: frm(value[name]) for name, _, frm in fields}
            except KeyError as missing:
                raise AvroJsonError(f"{schema['name']}: field {missing} is missing") from None

        return out, back

    def _union(self, branches: list[Any]) -> tuple[_Convert, _Convert]:
        pairs = {self.branch_name(b): self.pair(b) for b in branches}
        non_null = [name for name in pairs if name != "null"]
        only = non_null[0] if len(non_null) == 1 else None

        def out(value: Any) -> Any:
            if value is None:
                return None
            if isinstance(value, tuple):  # (branch name, value), as the codec passes payloads
                name, inner = value
                return {name: pairs[name][0](inner)}
            if only is None:
                raise AvroJsonError(f"a value of a union of {non_null} must name its branch")
            return {only: pairs[only][0](value)}

        def back(value: Any) -> Any:
            if value is None:
                return None
            if not isinstance(value, dict) or len(value) != 1:
                raise AvroJsonError(f"a union value is null or {{branch: value}}, got {value!r}")
            ((name, inner),) = value.items()
            found = pairs.get(name)
            if found is None:
                raise AvroJsonError(f"union branch {name!r} is not one of {list(pairs)}")
            decoded = found[1](inner)
            return decoded if only is not None else (name, decoded)

        return out, back


class AvroJsonForm:
    """Envelopes to and from the Avro JSON encoding of one envelope schema."""

    def __init__(self, schema: Mapping[str, Any] | None = None) -> None:
        chosen = dict(schema if schema is not None else envelope_schema())
        stripped = strip_logical_types(chosen)
        self.fingerprint = schema_fingerprint(chosen)
        self._to_json, self._from_json = _Compiler().pair(stripped)
        self._parsed = fastavro.parse_schema(stripped, _force=True)
        self._header = SINGLE_OBJECT_MAGIC + self.fingerprint.to_bytes(8, "little")

    def encode(self, envelope: Envelope) -> dict[str, Any]:
        """The envelope as an Avro JSON object (ready for ``json.dumps``)."""
        result: dict[str, Any] = self._to_json(envelope.to_avro())
        return result

    def datum(self, obj: Any) -> dict[str, Any]:
        """The Avro datum (as fastavro writes it) of an Avro JSON object of this schema."""
        datum = self._from_json(obj)
        if not isinstance(datum, dict):
            raise AvroJsonError("an envelope must be a JSON object")
        return datum

    def single_object(self, obj: Any) -> bytes:
        """The single-object binary record of an Avro JSON object written with this schema.

        The codec decodes it like any record of the log, resolving this writer schema against
        its own (schema evolution), so an old spool line reads as the current event classes.
        """
        out = io.BytesIO()
        out.write(self._header)
        try:
            fastavro.schemaless_writer(out, self._parsed, self.datum(obj))
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
            raise AvroJsonError(f"the datum does not fit the schema: {error}") from error
        return out.getvalue()
