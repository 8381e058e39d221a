"""The log's bare reference (`bench/log_bare.py`: fastavro and the standard library alone)
writes the codec's bytes and reads them back to the same events, for an event of every type,
so that the benches' ratios compare the same work."""

from __future__ import annotations

import dataclasses
import io

import fastavro
import pytest

from bench import log_bare
from schemas.catalogue import event_types
from schemas.codec import Codec
from schemas.events import Envelope
from streams.topics import topic_name
from tests.factories import example_envelope

CODEC = Codec()
SAMPLES = [example_envelope(t.name, seed) for t in event_types() for seed in (0, 1)]


def _bare_bytes(plain: log_bare.Envelope) -> bytes:
    out = io.BytesIO()
    out.write(log_bare.header())
    fastavro.schemaless_writer(out, log_bare.parsed_schema(), log_bare.to_record(plain))
    return out.getvalue()


def test_the_header_is_the_codecs() -> None:
    assert log_bare.header() == CODEC.encode(SAMPLES[0])[: log_bare.HEADER_BYTES]
    assert log_bare.header()[:2] == b"\xc3\x01"


@pytest.mark.parametrize("envelope", SAMPLES, ids=lambda e: f"{e.event_type}")
def test_the_bare_writer_writes_the_codecs_bytes_and_reads_them_back(envelope: Envelope) -> None:
    plain = log_bare.from_record(envelope.to_avro())
    assert type(plain.payload).__name__ == type(envelope.payload).__name__
    written = CODEC.encode(envelope)
    assert _bare_bytes(plain) == written
    stream = io.BytesIO(written)
    stream.seek(log_bare.HEADER_BYTES)
    record = fastavro.schemaless_reader(
        stream, log_bare.parsed_schema(), None, return_record_name=True
    )
    assert log_bare.from_record(record) == plain  # type: ignore[arg-type]
    # The typed values are those of the project's classes, field by field.
    for field in dataclasses.fields(envelope.payload):
        mine, theirs = getattr(plain.payload, field.name), getattr(envelope.payload, field.name)
        if isinstance(theirs, tuple) and theirs and dataclasses.is_dataclass(theirs[0]):
            assert [dataclasses.asdict(x) for x in mine] == [dataclasses.asdict(y) for y in theirs]
        else:
            assert mine == theirs, field.name


def test_the_bare_router_names_the_projects_topics() -> None:
    route = log_bare.topic_router("eu-1")
    for envelope in SAMPLES:
        plain = log_bare.from_record(envelope.to_avro())
        assert route(plain) == topic_name("eu-1", type(envelope.payload).TOPIC)


def test_the_bare_envelopes_are_frozen() -> None:
    plain = log_bare.from_record(SAMPLES[0].to_avro())
    with pytest.raises(AttributeError):
        plain.key = "other"
