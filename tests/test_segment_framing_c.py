"""The C framing (`streams._framing`) against the Python reference in `streams.segment`:
byte-identical blocks, the same records (or None) from whole, damaged and arbitrary bytes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.errors import Origin
from streams import kafka_consumer, segment
from streams.log import Record, _new_origin, new_record, slots_constructor
from streams.processing.message import Message, new_message
from streams.reader import Decoded, new_decoded
from streams.segment import (
    SYNC_SIZE,
    encode_block_python,
    frame_rows_python,
    make_records_python,
    read_long,
    whole_records_python,
)
from tests.test_segment_encoding import SYNC, records_strategy

# The extension is what `pip install -e .` builds (setup.py); the Python code is its fallback.
from streams import _framing  # isort: skip  (an ImportError here: the extension is not built)


def test_the_log_frames_with_the_extension() -> None:
    assert segment.FRAMING == "c"
    assert segment.encode_block is _framing.encode_block
    assert segment.whole_records is _framing.whole_records


def _body(data: bytes) -> tuple[int, int]:
    _, at = read_long(data, 0)
    _, at = read_long(data, at)
    return at, len(data) - SYNC_SIZE


def _offsets_from(first: int, records: list[Record]) -> list[Record]:
    return [
        Record("t", 3, first + i, r.key, r.value, r.timestamp_ms, r.headers)
        for i, r in enumerate(records)
    ]


@given(records_strategy)
def test_a_block_encodes_to_the_same_bytes(records: list[Record]) -> None:
    assert _framing.encode_block(records, SYNC) == encode_block_python(records, SYNC)


@given(
    st.integers(min_value=0, max_value=1 << 40),
    records_strategy,
    st.integers(min_value=-2, max_value=2),
    st.integers(min_value=-1, max_value=1),
)
def test_a_block_decodes_to_the_same_records(
    first: int, records: list[Record], shift: int, more: int
) -> None:
    records = _offsets_from(first, records)
    data = encode_block_python(records, SYNC)
    at, end = _body(data)
    limit = None if more < 0 else first + len(records) + more
    args = (data, at, end, first + shift, limit, len(records) + more, "t", 3)
    got = _framing.whole_records(*args)
    assert got == whole_records_python(*args)
    if shift == more == 0 and not any(r.headers for r in records):
        assert got == records
        # Records made by the extension behave as any other.
        assert [hash(r) for r in got] == [hash(r) for r in records]
        assert [repr(r) for r in got] == [repr(r) for r in records]


@given(records_strategy.filter(bool), st.data())
def test_a_damaged_block_decodes_the_same(records: list[Record], data: st.DataObject) -> None:
    """A changed, dropped or added byte: both refuse the block (None), or both read it."""
    block = encode_block_python(_offsets_from(7, records), SYNC)
    at, end = _body(block)
    if at == end:
        return
    where = data.draw(st.integers(min_value=at, max_value=end - 1))
    how = data.draw(st.sampled_from(["change", "drop", "add"]))
    byte = data.draw(st.integers(min_value=0, max_value=255))
    if how == "change":
        damaged = block[:where] + bytes([block[where] ^ (byte or 1)]) + block[where + 1 :]
    elif how == "drop":
        damaged = block[:where] + block[where + 1 :]
    else:
        damaged = block[:where] + bytes([byte]) + block[where:]
    end = len(damaged) - SYNC_SIZE
    args = (damaged, at, end, 7, None, len(records), "t", 3)
    assert _framing.whole_records(*args) == whole_records_python(*args)


@given(
    st.binary(max_size=64),
    st.integers(min_value=0, max_value=8),
    st.integers(min_value=-1, max_value=3),
    st.none() | st.integers(min_value=0, max_value=5),
)
def test_arbitrary_bytes_decode_the_same(
    body: bytes, first: int, count: int, limit: int | None
) -> None:
    """Bytes no writer made (varints past 64 bits, lengths past the end, bad branches)."""
    data = body + SYNC
    args = (data, 0, len(body), first, limit, count, "t", 3)
    assert _framing.whole_records(*args) == whole_records_python(*args)


@given(st.lists(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), max_size=4))
def test_long_varints_decode_the_same(values: list[int]) -> None:
    """Offsets and timestamps at the ends of the long range, and a tenth varint byte."""
    records = [Record("t", 3, i, None, b"v", v, ()) for i, v in enumerate(values)]
    data = encode_block_python(records, SYNC)
    at, end = _body(data)
    args = (data, at, end, 0, None, len(records), "t", 3)
    assert _framing.whole_records(*args) == whole_records_python(*args) == records


@given(st.integers(min_value=0, max_value=1 << 40), records_strategy)
def test_appended_rows_become_the_same_records(first: int, records: list[Record]) -> None:
    rows = [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]
    got = _framing.make_records("t", 3, first, rows)
    assert got == make_records_python("t", 3, first, rows) == _offsets_from(first, records)
    assert [hash(r) for r in got] == [hash(r) for r in _offsets_from(first, records)]


@given(st.integers(min_value=0, max_value=1 << 40), records_strategy)
def test_an_appends_block_and_records_are_the_same(first: int, records: list[Record]) -> None:
    """`frame_rows` (what `Partition.append` calls): `encode_block` of `make_records`."""
    assert segment.frame_rows is _framing.frame_rows
    rows = (
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
        [r.timestamp_ms for r in records],
    )
    block, got = _framing.frame_rows("t", 3, first, rows, SYNC)
    expected = _offsets_from(first, records)
    assert (block, got) == frame_rows_python("t", 3, first, rows, SYNC)
    assert block == encode_block_python(expected, SYNC)
    assert got == expected
    assert [hash(r) for r in got] == [hash(r) for r in expected]


def test_an_appends_rows_of_the_wrong_kind_are_refused() -> None:
    for frame_rows in (_framing.frame_rows, frame_rows_python):
        with pytest.raises(TypeError, match="four lists of one length"):
            frame_rows("t", 3, 0, ([b"k"], [b"v"], [()], []), SYNC)
    with pytest.raises(TypeError, match="four lists of one length"):
        _framing.frame_rows("t", 3, 0, [(b"k", b"v", (), 1)], SYNC)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value must be bytes or None"):
        _framing.frame_rows("t", 3, 0, ([b"k"], ["v"], [()], [1]), SYNC)  # type: ignore[list-item]


@given(records_strategy)
def test_a_record_made_by_the_extension_is_the_dataclasss(records: list[Record]) -> None:
    for r in records:
        fields = (r.topic, r.partition, r.offset, r.key, r.value, r.timestamp_ms, r.headers)
        made = new_record(*fields)
        assert made == Record(*fields) == r
        assert type(made) is Record
        assert hash(made) == hash(r)
        assert made.origin == Origin(r.topic, r.partition, r.offset)
        assert type(made.origin) is Origin


def test_the_log_paths_objects_are_made_by_the_extension() -> None:
    """Records, origins, decoded events and messages: one per event on every log path."""
    cases: list[tuple[type, Any]] = [
        (Record, new_record("t", 1, 2, None, b"v", 3, ())),
        (Origin, _new_origin("t", 1, 2)),
        (Decoded, new_decoded(_new_origin("t", 1, 2), None)),
        (Message, new_message(None, new_record("t", 1, 2, b"k", None, 3, ()))),
    ]
    for cls, made in cases:
        assert type(made) is cls
        fields = [getattr(made, f.name) for f in dataclasses.fields(cls)]
        assert made == cls(*fields)
        assert repr(made) == repr(cls(*fields))
    assert type(new_record).__name__ == "builtin_function_or_method"
    with pytest.raises(TypeError, match="takes 7 fields"):
        new_record("t", 1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        new_record("t", 1, 2, None, b"v", 3, ()).offset = 5  # type: ignore[misc]


def test_a_class_that_is_not_plain_slots_keeps_its_own_init() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("negative")

    @dataclasses.dataclass(frozen=True)
    class Plain:
        n: int

    assert slots_constructor(Checked) is Checked
    with pytest.raises(TypeError, match="__dict__"):
        _framing.constructor(Plain, ("n",))


def test_an_inherited_field_keeps_the_classs_own_init() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Base:
        n: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived(Base):
        m: int

    assert slots_constructor(Derived) is Derived
    assert slots_constructor(Base)(1) == Base(1)


class _Message:
    """What confluent-kafka's Message answers (the broker's own are read in the Kafka tests)."""

    def __init__(self, offset: int, key: bytes | None, headers: Any = None, error: Any = None):
        self._offset, self._key, self._headers, self._error = offset, key, headers, error

    def error(self) -> Any:
        return self._error

    def headers(self) -> Any:
        return self._headers

    def topic(self) -> str:
        return "dev.lifecycle"

    def partition(self) -> int:
        return 7

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)


def test_kafka_messages_become_the_records_the_python_loop_makes() -> None:
    messages = [_Message(i, None if i % 3 else b"k%d" % i) for i in range(50)]
    got = _framing.kafka_records(messages)
    assert got == [kafka_consumer._record(m) for m in messages]
    assert _framing.kafka_records([]) == []
    # A message with headers or an error: the Python loop takes the whole poll.
    assert _framing.kafka_records([*messages, _Message(50, b"k", [("h", b"x")])]) is None
    assert _framing.kafka_records([_Message(0, b"k", error="broker down"), *messages]) is None
    assert getattr(kafka_consumer, "_kafka_records") is _framing.kafka_records  # noqa: B009
