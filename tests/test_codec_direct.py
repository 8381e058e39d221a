"""The codec's direct calls into fastavro (`schemas.codec._DirectCalls`): the bytes and the
values of `schemaless_writer` and `schemaless_reader`, and the same errors for bad bytes."""

from __future__ import annotations

import io

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import codec as codec_module
from schemas.catalogue import event_types
from schemas.codec import Codec
from schemas.errors import CodecError, Origin
from schemas.events import Envelope
from tests.factories import notice
from tests.strategies import envelopes, payload_of

DIRECT = Codec()
PUBLIC = Codec()
PUBLIC._direct = None  # the public fastavro calls, as with a fastavro lacking the internals
PUBLIC._program = None  # and fastavro writes (not the compiled writer: tests/test_avro_program.py)
ORIGIN = Origin("dev.lifecycle", 3, 1234)


def test_this_fastavro_is_called_directly() -> None:
    """The fastavro pinned in pyproject.toml passes the probe (else the codec is slower)."""
    assert codec_module._DIRECT is not None
    assert DIRECT._direct is not None


@pytest.mark.parametrize("event_type", [t.name for t in event_types()])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_event_type_encodes_and_decodes_as_fastavros_public_calls(
    event_type: str, data: st.DataObject
) -> None:
    base = data.draw(envelopes())
    envelope = Envelope(
        **{f: getattr(base, f) for f in Envelope.HEAD if f != "event_type"},
        event_type=event_type,
        payload=data.draw(payload_of(event_type)),
    )
    encoded = DIRECT.encode(envelope)
    public = io.BytesIO()
    public.write(encoded[:10])
    fastavro.schemaless_writer(public, DIRECT._reader, envelope.to_avro())
    assert encoded == public.getvalue() == PUBLIC.encode(envelope)
    assert DIRECT.decode(encoded) == PUBLIC.decode(encoded) == envelope


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=300), cut=st.integers(0, 400))
def test_bad_bytes_fail_as_with_the_public_calls(data: bytes, cut: int) -> None:
    valid = DIRECT.encode(notice("dev", 5))
    framed = valid[:10] + data if data else valid[: max(10, cut)]
    outcomes: list[object] = []
    for codec in (DIRECT, PUBLIC):
        try:
            outcomes.append(codec.decode(framed, ORIGIN))
        except CodecError as error:
            outcomes.append((type(error), str(error)))
    assert outcomes[0] == outcomes[1]
