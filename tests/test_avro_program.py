"""The codec's compiled writer (`schemas.avro_program`, `schemas._avro_write`) writes fastavro's
bytes: on every event type, on a deciders' run, and, through fastavro, on what it refuses."""

from __future__ import annotations

import io
from typing import Any, cast

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import avro_program
from schemas.catalogue import event_types
from schemas.codec import Codec, strip_logical_types
from schemas.errors import EncodeError
from schemas.events import Envelope
from sim.loop import DecidersOrchestrator
from sim.region import RegionSim, SimConfig
from tests.strategies import envelopes, payload_of

CODEC = Codec()
WRITE = avro_program.writer()
PARSED = fastavro.parse_schema(strip_logical_types(dict(CODEC.schema)), _force=True)
PROGRAM = avro_program.compile_schema(PARSED)


def fastavro_bytes(envelope: Envelope) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, envelope.to_avro())
    return out.getvalue()


def compiled_bytes(envelope: Envelope) -> bytes:
    assert WRITE is not None and PROGRAM is not None
    return WRITE(b"", PROGRAM, envelope.to_avro())


def test_the_writer_is_built_and_the_envelope_compiles() -> None:
    assert WRITE is not None, "schemas._avro_write is not built: python setup.py build_ext"
    assert PROGRAM is not None
    assert CODEC._program is not None  # the codec writes through it


@pytest.mark.parametrize("event_type", [t.name for t in event_types()])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_event_type_is_written_as_fastavro_writes_it(
    event_type: str, data: st.DataObject
) -> None:
    base = data.draw(envelopes())
    payload = data.draw(payload_of(event_type))
    envelope = Envelope(
        **{f: getattr(base, f) for f in Envelope.HEAD if f != "event_type"},
        event_type=event_type,
        payload=payload,
    )
    assert compiled_bytes(envelope) == fastavro_bytes(envelope)
    assert CODEC.decode(CODEC.encode(envelope)) == envelope


def test_a_deciders_run_is_written_as_fastavro_writes_it() -> None:
    config = SimConfig(seed=3, days=0.1, region="dev")
    orchestrator = DecidersOrchestrator(config.orchestrator.orchestrator_id)
    events = [e for batch in RegionSim(config, orchestrator=orchestrator).run() for e in batch]
    kinds = {e.event_type for e in events}
    assert {"pool_ranked", "rate_card", "instance_launched", "actuation_ordered"} <= kinds
    for envelope in events:
        assert compiled_bytes(envelope) == fastavro_bytes(envelope), envelope.event_type


class _Loose:
    """An envelope's stand-in whose Avro form holds what the compiled writer refuses."""

    def __init__(self, base: Envelope, **changes: Any) -> None:
        self.event_type, self.event_id = base.event_type, base.event_id
        self._datum = {**base.to_avro(), **changes}

    def to_avro(self) -> dict[str, Any]:
        return dict(self._datum)


def _loose(base: Envelope, **changes: Any) -> Envelope:
    return cast(Envelope, _Loose(base, **changes))


@settings(max_examples=5, deadline=None)
@given(base=envelopes(payload_of("rate_card")))
def test_what_the_compiled_writer_refuses_fastavro_writes_or_refuses(base: Envelope) -> None:
    assert WRITE is not None and PROGRAM is not None
    name, payload = base.to_avro()["payload"]
    # a bool where a long goes: fastavro writes it as 1; the compiled writer leaves it to it
    odd = _loose(base, occurred_at=True)
    with pytest.raises(ValueError):
        WRITE(b"", PROGRAM, odd.to_avro())
    expected = io.BytesIO()
    fastavro.schemaless_writer(expected, PARSED, odd.to_avro())
    assert CODEC.encode(odd) == CODEC.encode(base)[:10] + expected.getvalue()
    # a field missing, and text where a long goes: fastavro's error, as before
    with pytest.raises(EncodeError, match="does not fit the schema"):
        CODEC.encode(_loose(base, payload=(name, {**payload, "valid_from_at": "soon"})))
    with pytest.raises(EncodeError, match="does not fit the schema"):
        CODEC.encode(_loose(base, payload=("spotcap.events.Nothing", payload)))


@pytest.mark.parametrize(
    "schema",
    [
        "float",
        {"type": "fixed", "name": "F", "size": 4},
        {"type": "string", "logicalType": "uuid"},
        ["null", "string", "long"],
        ["string", "null"],
        {"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]},
    ],
)
def test_a_schema_it_does_not_cover_gets_no_program(schema: Any) -> None:
    record = {"type": "record", "name": "T", "fields": [{"name": "x", "type": schema}]}
    assert avro_program.compile_schema(fastavro.parse_schema(record, _force=True)) is None
