"""The codec: round trips for every event type, the framing, evolution, and typed errors."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import avro.io
import avro.schema
import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.catalogue import envelope_schema, event_types
from schemas.codec import Codec, schema_fingerprint
from schemas.errors import (
    BadMagicError,
    CodecError,
    CorruptRecordError,
    Origin,
    TruncatedRecordError,
    UnknownSchemaError,
)
from schemas.events import Envelope
from schemas.registry import HttpSchemaRegistry, RegistryError
from tests.factories import evolved_envelope_schema, notice
from tests.strategies import envelopes, payload_of

CODEC = Codec()
ORIGIN = Origin("dev.lifecycle", 3, 1234)


@pytest.mark.parametrize("event_type", [t.name for t in event_types()])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_event_type_round_trips(event_type: str, data: st.DataObject) -> None:
    base = data.draw(envelopes())
    payload = data.draw(payload_of(event_type))
    envelope = Envelope(
        **{f: getattr(base, f) for f in Envelope.HEAD if f != "event_type"},
        event_type=event_type,
        payload=payload,
    )
    assert CODEC.decode(CODEC.encode(envelope)) == envelope


def test_single_object_framing_and_fingerprint() -> None:
    data = CODEC.encode(notice("dev", 1))
    assert data[:2] == b"\xc3\x01"
    assert int.from_bytes(data[2:10], "little") == schema_fingerprint(envelope_schema())
    # The fingerprint is the spec's CRC-64-AVRO of the parsing canonical form.
    canonical = fastavro.schema.to_parsing_canonical_form(envelope_schema())
    assert CODEC.fingerprint == int(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"), 16)


def test_the_body_is_plain_avro_that_apache_avro_reads() -> None:
    event = notice("dev", 7, seq=2)
    data = CODEC.encode(event)
    schema = avro.schema.parse(json.dumps(envelope_schema()))
    record: Any = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(data[10:])))
    assert str(record["event_id"]) == event.event_id
    assert record["payload"]["instance_id"] == "i-00007"
    assert record["key"] == event.key


@pytest.mark.parametrize(
    ("mangle", "error", "words"),
    [
        (lambda b: b[:6], TruncatedRecordError, "10-byte header"),
        (lambda b: b[:-4], TruncatedRecordError, "ends early"),
        (lambda b: b"", TruncatedRecordError, "empty"),
        (lambda b: b"{json: 1}", BadMagicError, "not a spotcap event"),
        (lambda b: b[:2] + b"\x01" * 8 + b[10:], UnknownSchemaError, "0101010101010101"),
        (lambda b: b + b"\x00\x00", CorruptRecordError, "2 bytes left over"),
        (lambda b: b"\x00\x00\x00\x00\x07" + b[10:], UnknownSchemaError, "no schema registry"),
    ],
)
def test_bad_bytes_give_a_typed_error_naming_where(
    mangle: Any, error: type[Exception], words: str
) -> None:
    data = mangle(CODEC.encode(notice("dev", 2)))
    with pytest.raises(error) as raised:
        CODEC.decode(data, ORIGIN)
    message = str(raised.value)
    assert "dev.lifecycle[3]@1234" in message
    assert words in message


def test_a_newer_writer_schema_is_resolved_against_the_reader() -> None:
    newer = evolved_envelope_schema()
    fp = schema_fingerprint(newer)
    assert fp != CODEC.fingerprint
    event = notice("dev", 3)
    body = io.BytesIO()
    record = {
        **{f: getattr(event, f) for f in Envelope.HEAD},
        "payload": ("spotcap.events.NoticeReceived", {**event.payload.to_avro(), "hall": "h2"}),
    }
    fastavro.schemaless_writer(body, fastavro.parse_schema(newer), record)
    data = b"\xc3\x01" + fp.to_bytes(8, "little") + body.getvalue()

    with pytest.raises(UnknownSchemaError):
        CODEC.decode(data, ORIGIN)  # not known yet
    reader = Codec(known_schemas=[newer])
    assert reader.decode(data, ORIGIN) == event  # the extra field is skipped


class _Registry(BaseHTTPRequestHandler):
    """The two calls of the Confluent Schema Registry REST API, as the registry answers them
    (no registry runs on this machine)."""

    schemas: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["schema"] not in self.schemas:
            self.schemas.append(body["schema"])
        self._answer(200, {"id": self.schemas.index(body["schema"]) + 1})

    def do_GET(self) -> None:
        schema_id = int(self.path.rsplit("/", 1)[1])
        if 0 < schema_id <= len(self.schemas):
            self._answer(200, {"schema": self.schemas[schema_id - 1]})
        else:
            self._answer(404, {"error_code": 40403, "message": "Schema not found"})

    def _answer(self, status: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def registry_url() -> Iterator[str]:
    _Registry.schemas = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_confluent_wire_format_with_a_registry(registry_url: str) -> None:
    writer = Codec(registry=HttpSchemaRegistry(registry_url))
    event = notice("dev", 4)
    data = writer.encode(event)
    assert data[0] == 0
    assert int.from_bytes(data[1:5], "big") == 1
    reader = Codec(registry=HttpSchemaRegistry(registry_url))
    assert reader.decode(data, ORIGIN) == event
    with pytest.raises(UnknownSchemaError, match="schema id 9"):
        reader.decode(b"\x00\x00\x00\x00\x09" + data[5:], ORIGIN)


def test_an_unreachable_registry_says_so() -> None:
    with pytest.raises(RegistryError, match="unreachable"):
        Codec(registry=HttpSchemaRegistry("http://127.0.0.1:9", timeout_s=2))


@settings(max_examples=1000, deadline=None)
@given(
    data=st.binary(max_size=300),
    header=st.sampled_from([b"", b"\xc3\x01", "current", b"\x00\x00\x00\x00\x01"]),
    cut=st.integers(0, 400),
)
def test_any_bytes_decode_or_fail_with_a_codec_error(
    data: bytes, header: bytes | str, cut: int
) -> None:
    """Whatever arrives, decode returns an envelope or raises a CodecError naming the origin:
    never another exception that would stop a consumer."""
    if header == "current":
        valid = CODEC.encode(notice("dev", 5))
        framed = valid[:10] + data if data else valid[: max(10, cut)]
    else:
        assert isinstance(header, bytes)
        framed = header + data
    try:
        CODEC.decode(framed, ORIGIN)
    except CodecError as error:
        assert "dev.lifecycle[3]@1234" in str(error)
