"""The one codec: envelopes to bytes and back.

Framing (DESIGN.md §3):

* **Avro single-object encoding** (the default): ``C3 01``, the writer schema's CRC-64-AVRO
  fingerprint (8 bytes, little-endian), then the Avro binary body.
* **Confluent wire format** (when a schema registry is configured): ``00``, the registry's
  4-byte big-endian schema id, then the body.

Decoding reads the framing, finds the writer schema (by fingerprint among the schemas this
build knows: the current catalogue and every released version; or by id from the registry),
and resolves it against the current reader schema, so records written by an older or newer
release decode (schema evolution). Schemas are parsed once per codec.

The codec parses copies of the schemas with their logical types removed: timestamps stay
integer microseconds and uuids stay strings, which is what the generated event classes hold,
and it skips fastavro's per-field conversions on the hot path. The parsing canonical form,
hence the fingerprint, does not contain logical types, so the bytes are unchanged.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas import avro_program
from schemas.catalogue import envelope_schema
from schemas.errors import (
    UNKNOWN_ORIGIN,
    BadMagicError,
    CodecError,
    CorruptRecordError,
    EncodeError,
    Origin,
    TruncatedRecordError,
    UnknownSchemaError,
)
from schemas.events import PAYLOAD_TYPES, Envelope

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = b"\x00"
_FINGERPRINT = struct.Struct("<Q")
_SCHEMA_ID = struct.Struct(">I")
RELEASED_DIR = Path(__file__).parent / "released"


def _direct_calls() -> tuple[Any, Any] | None:
    """fastavro's own read and write of one datum, called without its public wrappers.

    `schemaless_reader` and `schemaless_writer` parse their (already parsed) schema again at
    every call, copying its named types (55 in the envelope) into a fresh dict: about 2 µs
    of the 9 a record costs each way. The codec calls what they call, with the named types
    gathered once per schema, as fastavro's container reader and writer do per block. Those
    functions are fastavro's internals (`_read._read_data`, `_write.write_data`): they are
    used only if they exist and give, on a record of every Avro type the envelope uses, the
    public functions' bytes and values; otherwise (None) the codec calls the public ones.
    """
    from fastavro import _read, _write

    _read_data = getattr(_read, "_read_data", None)
    write_data = getattr(_write, "write_data", None)
    if _read_data is None or write_data is None:
        return None
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "Probe",
            "fields": [
                {"name": "s", "type": "string"},
                {"name": "n", "type": ["null", "long"]},
                {"name": "d", "type": "double"},
                {"name": "b", "type": "boolean"},
                {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
                {"name": "a", "type": {"type": "array", "items": "string"}},
                {"name": "m", "type": {"type": "map", "values": "int"}},
                {
                    "name": "u",
                    "type": [
                        "null",
                        {"type": "record", "name": "Q", "fields": [{"name": "x", "type": "int"}]},
                    ],
                },
            ],
        }
    )
    datum = {
        "s": "é",
        "n": -5,
        "d": 1.5,
        "b": True,
        "e": "Y",
        "a": ["x"],
        "m": {"k": 3},
        "u": ("Q", {"x": 7}),
    }
    try:
        calls = _DirectCalls(schema, _read_data, write_data)
        public = io.BytesIO()
        fastavro.schemaless_writer(public, schema, datum)
        encoded = calls.write(b"", datum)
        stream = io.BytesIO(encoded)
        decoded = calls.read(stream)
        stream.seek(0)
        expected = fastavro.schemaless_reader(stream, schema, None, return_record_name=True)
    except Exception:  # a fastavro whose internals changed: the public calls
        return None
    if encoded != public.getvalue() or decoded != expected:
        return None
    return _read_data, write_data


class _DirectCalls:
    """fastavro's read and write of one datum of `schema`, its named types gathered once."""

    _READ_OPTIONS: Mapping[str, Any] = {
        "return_record_name": True,
        "return_record_name_override": False,
        "handle_unicode_errors": "strict",
        "return_named_type": False,
        "return_named_type_override": False,
    }
    _WRITE_OPTIONS: Mapping[str, Any] = {
        "strict": False,
        "strict_allow_default": False,
        "disable_tuple_notation": False,
    }

    def __init__(self, schema: Any, read_data: Any, write_data: Any) -> None:
        self._schema = schema
        self._read_named: dict[str, dict[str, Any]] = {"writer": {}, "reader": {}}
        fastavro.parse_schema(schema, self._read_named["writer"])
        self._write_named: dict[str, Any] = {}
        fastavro.parse_schema(schema, self._write_named)
        self._read_data = read_data
        self._write_data = write_data
        self._read_options = dict(self._READ_OPTIONS)
        self._write_options = dict(self._WRITE_OPTIONS)

    def read(self, stream: io.BytesIO) -> Any:
        return self._read_data(stream, self._schema, self._read_named, None, self._read_options)

    def write(self, header: bytes, datum: Any) -> bytes:
        out = bytearray(header)
        self._write_data(out, datum, self._schema, self._write_named, "", self._write_options)
        return bytes(out)


_DIRECT = _direct_calls()
_WRITE = avro_program.writer()  # the compiled writer (C), or None: fastavro writes


def schema_fingerprint(schema: Mapping[str, Any]) -> int:
    """CRC-64-AVRO fingerprint of a schema's parsing canonical form, as the spec defines it."""
    canonical = to_parsing_canonical_form(fastavro.parse_schema(dict(schema), _force=True))
    return int(fingerprint(canonical, "CRC-64-AVRO"), 16)


def strip_logical_types(schema: Any) -> Any:
    """A copy of `schema` without ``logicalType`` annotations (see the module docstring)."""
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [strip_logical_types(s) for s in schema]
    return schema


@cache
def released_schemas() -> tuple[Mapping[str, Any], ...]:
    """Every released envelope schema, oldest first (``schemas/released/envelope-vNNNN.avsc``)."""
    import json

    return tuple(
        json.loads(path.read_text()) for path in sorted(RELEASED_DIR.glob("envelope-v*.avsc"))
    )


class SchemaRegistry(Protocol):
    """The part of a Confluent-compatible schema registry the codec uses."""

    def register(self, subject: str, schema: Mapping[str, Any]) -> int: ...

    def schema(self, schema_id: int) -> Mapping[str, Any]: ...


class Codec:
    """Encodes and decodes envelopes; one per process is plenty (it is immutable after init)."""

    def __init__(
        self,
        reader_schema: Mapping[str, Any] | None = None,
        known_schemas: Iterable[Mapping[str, Any]] | None = None,
        registry: SchemaRegistry | None = None,
        subject: str = "spotcap.Envelope",
    ) -> None:
        reader = dict(reader_schema if reader_schema is not None else envelope_schema())
        self.schema: Mapping[str, Any] = reader  # the schema this codec writes with
        self._reader = fastavro.parse_schema(strip_logical_types(reader), _force=True)
        self._direct = None if _DIRECT is None else _DirectCalls(self._reader, *_DIRECT)
        self._program = None if _WRITE is None else avro_program.compile_schema(self._reader)
        self.fingerprint = schema_fingerprint(reader)
        self._header = SINGLE_OBJECT_MAGIC + _FINGERPRINT.pack(self.fingerprint)
        # Writer schemas by fingerprint; None as reader means "same as the writer".
        self._writers: dict[int, tuple[Any, Any]] = {self.fingerprint: (self._reader, None)}
        for schema in released_schemas() if known_schemas is None else known_schemas:
            self.add_writer_schema(schema)
        self._registry = registry
        self._registry_writers: dict[int, tuple[Any, Any]] = {}
        if registry is not None:
            schema_id = registry.register(subject, reader)
            self._header = CONFLUENT_MAGIC + _SCHEMA_ID.pack(schema_id)
            self._registry_writers[schema_id] = (self._reader, None)

    def add_writer_schema(self, schema: Mapping[str, Any]) -> int:
        """Make records written with `schema` decodable; returns its fingerprint."""
        fp = schema_fingerprint(schema)
        if fp not in self._writers:
            parsed = fastavro.parse_schema(strip_logical_types(dict(schema)), _force=True)
            self._writers[fp] = (parsed, self._reader)
        return fp

    @property
    def known_fingerprints(self) -> frozenset[int]:
        return frozenset(self._writers)

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, envelope: Envelope) -> bytes:
        """The framed bytes of one envelope."""
        if self._program is not None and _WRITE is not None:
            try:
                return _WRITE(self._header, self._program, envelope.to_avro())
            except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
                pass  # not what the compiled writer writes: fastavro writes it, or says why not
        try:
            if self._direct is not None:
                return self._direct.write(self._header, envelope.to_avro())
            out = io.BytesIO()
            out.write(self._header)
            fastavro.schemaless_writer(out, self._reader, envelope.to_avro())
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as error:
            raise EncodeError(
                f"{envelope.event_type} {envelope.event_id} does not fit the schema: {error}"
            ) from error
        return out.getvalue()

    # -- decoding ---------------------------------------------------------------------------

    def decode(self, data: bytes, origin: Origin = UNKNOWN_ORIGIN) -> Envelope:
        """One envelope from framed bytes; a `CodecError` naming `origin` if that fails."""
        direct = None
        if data.startswith(self._header):  # written with this codec's schema: no resolution
            writer, reader, body_start = self._reader, None, len(self._header)
            direct = self._direct
        else:
            writer, reader, body_start = self._writer_for(data, origin)
        stream = io.BytesIO(data)
        stream.seek(body_start)
        try:
            record: Any = (
                fastavro.schemaless_reader(stream, writer, reader, return_record_name=True)
                if direct is None
                else direct.read(stream)
            )
        except (
            EOFError,
            struct.error,
            ValueError,
            TypeError,
            IndexError,
            KeyError,
            UnicodeDecodeError,
        ) as error:
            # A read that failed at the end of the bytes ran out of them: the record is cut.
            if isinstance(error, EOFError | struct.error) or stream.tell() >= len(data):
                raise TruncatedRecordError(
                    f"the Avro body ends early ({len(data)} bytes in all): {error or 'EOF'}",
                    origin,
                ) from error
            raise CorruptRecordError(f"the Avro body does not decode: {error}", origin) from error
        trailing = len(data) - stream.tell()
        if trailing:
            raise CorruptRecordError(
                f"{trailing} bytes left over after the record: not one whole record", origin
            )
        return _envelope(record, origin)

    def record_of(self, data: bytes) -> tuple[bytes, dict[str, Any]] | None:
        """`data` and its Avro record (the payload as ``(record name, fields)``), without
        making an envelope, when `data` is one whole record written with this codec's schema
        and its payload is the branch its event type names; None otherwise (`decode` says
        why). For readers that keep the bytes and want the fields (the archive's export)."""
        header = self._header
        if not data.startswith(header):
            return None
        stream = io.BytesIO(data)
        stream.seek(len(header))
        direct = self._direct  # fastavro's read without the per-call schema parse (2 µs)
        try:
            record: Any = (
                fastavro.schemaless_reader(stream, self._reader, None, return_record_name=True)
                if direct is None
                else direct.read(stream)
            )
        except (EOFError, struct.error, ValueError, TypeError, IndexError, KeyError,
                UnicodeDecodeError):  # fmt: skip
            return None
        if stream.tell() != len(data):
            return None
        kind = PAYLOAD_TYPES.get(record["payload"][0])
        if kind is None or record["event_type"] != kind.EVENT_TYPE:
            return None
        return data, record

    def _writer_for(self, data: bytes, origin: Origin) -> tuple[Any, Any, int]:
        if data[:2] == SINGLE_OBJECT_MAGIC:
            if len(data) < 10:
                raise TruncatedRecordError(
                    f"{len(data)} bytes; a single-object record has a 10-byte header", origin
                )
            (fp,) = _FINGERPRINT.unpack_from(data, 2)
            found = self._writers.get(fp)
            if found is None:
                raise UnknownSchemaError(
                    f"writer schema fingerprint {fp:016x} is not one this build knows "
                    f"({len(self._writers)} known): the record was written by a newer or "
                    "foreign producer; upgrade spotcap or add that schema to schemas/released/",
                    origin,
                )
            return found[0], found[1], 10
        if data[:1] == CONFLUENT_MAGIC and len(data) >= 5:
            (schema_id,) = _SCHEMA_ID.unpack_from(data, 1)
            return *self._registry_writer(schema_id, origin), 5
        if not data:
            raise TruncatedRecordError("empty record", origin)
        raise BadMagicError(
            f"starts with {data[:2].hex(' ')}; expected c3 01 (Avro single-object encoding) "
            "or 00 (Confluent wire format): this is not a spotcap event",
            origin,
        )

    def _registry_writer(self, schema_id: int, origin: Origin) -> tuple[Any, Any]:
        found = self._registry_writers.get(schema_id)
        if found is not None:
            return found
        if self._registry is None:
            raise UnknownSchemaError(
                f"Confluent-framed record (schema id {schema_id}) but no schema registry is "
                "configured: set SPOTCAP_SCHEMA_REGISTRY_URL",
                origin,
            )
        try:
            schema = self._registry.schema(schema_id)
        except Exception as error:  # the registry's own error says what went wrong
            raise UnknownSchemaError(
                f"schema id {schema_id} not resolvable in the registry: {error}", origin
            ) from error
        parsed = fastavro.parse_schema(strip_logical_types(dict(schema)), _force=True)
        found = (parsed, self._reader)
        self._registry_writers[schema_id] = found
        return found


def _envelope(record: Mapping[str, Any], origin: Origin) -> Envelope:
    try:
        return Envelope.from_avro(record)
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptRecordError(
            f"decoded, but not a valid envelope ({type(error).__name__}: {error})", origin
        ) from error


__all__ = [
    "CONFLUENT_MAGIC",
    "SINGLE_OBJECT_MAGIC",
    "Codec",
    "CodecError",
    "SchemaRegistry",
    "schema_fingerprint",
]
