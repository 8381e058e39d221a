"""The decoder's fast path (a whole record of the codec's own schema, the envelope's slots
filled directly) gives what `Codec.decode` gives, and anything else goes to `Codec.decode`,
which says why; the processing chain's head takes a poll's records as one list and leaves
what the chain refuses, in order."""

from __future__ import annotations

import io
from collections import deque
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings

from bench import log_bare
from schemas.codec import Codec
from schemas.errors import CodecError, CorruptRecordError
from schemas.events import Envelope, NoticeReceived, RateCard
from streams.deadletter import DeadLetters
from streams.embedded import EmbeddedLog
from streams.log import Record, new_record
from streams.processing.dead_letters import DeadLetterGuard, DeadLetterPolicy
from streams.processing.decode import Decode
from streams.processing.message import Message, MessageRejected
from streams.reader import Decoded, Decoder
from streams.topics import region_topics
from tests.factories import notice
from tests.strategies import envelopes

CODEC = Codec()
DECODER = Decoder(CODEC)


def _record(value: bytes | None, offset: int = 0) -> Record:
    return new_record("r.lifecycle", 0, offset, b"k", value, 0, ())


@settings(max_examples=300, deadline=None)
@given(envelopes())
def test_the_fast_path_gives_what_the_codec_gives(envelope: Envelope) -> None:
    value = CODEC.encode(envelope)
    decoded = DECODER.decode(_record(value))
    assert decoded == CODEC.decode(value) == envelope
    assert type(decoded) is Envelope
    assert type(decoded.payload) is type(envelope.payload)


def test_a_payload_its_constructor_refuses_fails_as_the_codec_says() -> None:
    envelope = notice("r", 1)
    payload = envelope.payload
    assert isinstance(payload, NoticeReceived)
    # An event type naming another payload than the one written: the codec's own answer.
    mislabelled = {**envelope.to_avro(), "event_type": RateCard.EVENT_TYPE}
    out = io.BytesIO()
    out.write(log_bare.header())
    fastavro.schemaless_writer(out, log_bare.parsed_schema(), mislabelled)
    value = out.getvalue()
    with pytest.raises(CorruptRecordError, match="does not match the payload") as refused:
        DECODER.decode(_record(value))
    with pytest.raises(CorruptRecordError) as said:
        CODEC.decode(value, _record(value).origin)
    assert str(refused.value) == str(said.value)
    # Bytes cut short, and bytes left over: the codec's errors, naming the record.
    whole = CODEC.encode(envelope)
    for broken in (whole[:-3], whole + b"\x00"):
        with pytest.raises(CodecError) as fast:
            DECODER.decode(_record(broken, offset=7))
        with pytest.raises(CodecError) as reference:
            CODEC.decode(broken)
        assert type(fast.value) is type(reference.value)
        assert "r.lifecycle[0]@7" in str(fast.value)
    with pytest.raises(CodecError, match="not a spotcap event"):
        DECODER.decode(_record(b"\x01\x02garbage"))


class _Refusing:
    """The next step: takes `room` messages, then refuses (as a busy batch does)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.taken: list[Message[Decoded]] = []

    def submit(self, item: Message[Decoded]) -> None:
        if len(self.taken) >= self.room:
            raise MessageRejected
        self.taken.append(item)

    def poll(self) -> None:
        pass

    def join(self, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_head_takes_a_polls_records_until_the_chain_refuses(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics("r"))
    guard = DeadLetterGuard(
        DeadLetters(log.producer(), CODEC, "r", "test"), DeadLetterPolicy(max_ratio=1.0)
    )
    nxt = _Refusing(room=3)
    head = Decode(nxt, DECODER, guard)
    records = deque(
        [_record(CODEC.encode(notice("r", i)), offset=i) for i in range(2)]
        + [_record(b"not an event", offset=2)]
        + [_record(CODEC.encode(notice("r", i)), offset=i) for i in range(3, 6)]
    )
    assert head.submit_all(records) == 3
    # The refused record and those after it stay, in order, untouched.
    assert [r.offset for r in records] == [3, 4, 5]
    assert [m.record.offset for m in nxt.taken] == [0, 1, 2]
    assert [m.payload is None for m in nxt.taken] == [False, False, True]
    assert guard.inputs == 3
    nxt.room = 10
    assert head.submit_all(records) == 3
    assert not records
    assert [m.record.offset for m in nxt.taken] == [0, 1, 2, 3, 4, 5]
    log.close()
