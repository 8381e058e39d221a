"""The hand-written encoding of a segment block: the bytes fastavro writes, and they read back."""

from __future__ import annotations

import io
import zlib

import fastavro
from hypothesis import given
from hypothesis import strategies as st

from streams.log import Record
from streams.segment import (
    _BODY,
    SYNC_SIZE,
    Header,
    _zigzag,
    decode_block,
    decode_carefully,
    encode_block,
    read_long,
    whole_records,
)

SYNC = bytes(range(SYNC_SIZE))
LONGS = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
HEADERS = st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=40)), max_size=3)


def fastavro_block(records: list[Record]) -> bytes:
    """The block as fastavro encodes each record (what `encode_block` did before)."""
    body = io.BytesIO()
    for record in records:
        start = body.tell()
        fastavro.schemaless_writer(
            body,
            _BODY,
            {
                "offset": record.offset,
                "timestamp_ms": record.timestamp_ms,
                "key": record.key,
                "value": record.value,
                "headers": [{"key": k, "value": v} for k, v in record.headers],
            },
        )
        crc = zlib.crc32(body.getbuffer()[start:])
        fastavro.schemaless_writer(body, "long", crc)
    data = body.getvalue()
    framing = io.BytesIO()
    fastavro.schemaless_writer(framing, "long", len(records))
    fastavro.schemaless_writer(framing, "long", len(data))
    return framing.getvalue() + data + SYNC


records_strategy = st.lists(
    st.builds(
        Record,
        topic=st.just("t"),
        partition=st.just(0),
        offset=LONGS,
        key=st.none() | st.binary(max_size=300),
        # Long values too (lengths past the table of small longs), built rather than drawn.
        value=st.none()
        | st.binary(max_size=300)
        | st.integers(0, 20_000).map(lambda n: bytes([n % 256]) * n),
        timestamp_ms=LONGS,
        headers=HEADERS.map(tuple),
    ),
    max_size=8,
)


@given(records_strategy)
def test_encode_block_writes_the_bytes_fastavro_writes(records: list[Record]) -> None:
    assert encode_block(records, SYNC) == fastavro_block(records)


@given(st.integers(min_value=0, max_value=1 << 40), records_strategy)
def test_an_encoded_block_reads_back(first: int, records: list[Record]) -> None:
    records = [
        Record("t", 3, first + i, r.key, r.value, r.timestamp_ms, r.headers)
        for i, r in enumerate(records)
    ]
    data = encode_block(records, SYNC)
    header = Header(SYNC, 0, True, _BODY)
    decoded = decode_block(
        data,
        position=0,
        first=first,
        limit=None,
        count=len(records),
        topic="t",
        partition=3,
        header=header,
    )
    if SYNC in data[:-SYNC_SIZE]:
        return  # a value holding the sync marker reads as damage: not this test's subject
    assert decoded.problems == []
    assert decoded.records == records


def _both(data: bytes, first: int, limit: int | None, count: int) -> tuple[object, object]:
    args = {
        "position": 100,
        "first": first,
        "limit": limit,
        "count": count,
        "topic": "t",
        "partition": 3,
        "header": Header(SYNC, 0, True, _BODY),
    }
    return decode_block(data, **args), decode_carefully(data, **args)  # type: ignore[arg-type]


@given(
    st.integers(min_value=0, max_value=1 << 40),
    records_strategy,
    st.integers(min_value=-2, max_value=2),
    st.integers(min_value=-1, max_value=1),
)
def test_the_fast_path_reads_a_whole_block_as_the_careful_one(
    first: int, records: list[Record], shift: int, more: int
) -> None:
    """Whole blocks (and blocks whose offsets, limit or count disagree with the index) read
    the same through `decode_block`'s fast path as through the careful decoding."""
    records = [
        Record("t", 3, first + i, r.key, r.value, r.timestamp_ms, r.headers)
        for i, r in enumerate(records)
    ]
    data = encode_block(records, SYNC)
    limit = None if more < 0 else first + len(records) + more
    fast, careful = _both(data, first + shift, limit, len(records) + more)
    assert fast == careful
    _, at = read_long(data, 0)
    _, at = read_long(data, at)
    end = len(data) - SYNC_SIZE
    plain = not any(r.headers for r in records) and data.find(SYNC, at, end) < 0
    if plain and shift == more == 0:  # the fast path takes it
        assert whole_records(data, at, end, first, limit, len(records), "t", 3) == records


@given(
    records_strategy.filter(bool),
    st.data(),
)
def test_the_fast_path_reads_damaged_bytes_as_the_careful_one(
    records: list[Record], data: st.DataObject
) -> None:
    """A changed, dropped or added byte in a block's records: the fast path gives way to the
    careful decoding, which finds the damage; the result is the careful one's."""
    records = [
        Record("t", 3, 7 + i, r.key, r.value, r.timestamp_ms, r.headers)
        for i, r in enumerate(records)
    ]
    block = encode_block(records, SYNC)
    _, at = read_long(block, 0)
    _, at = read_long(block, at)
    end = len(block) - SYNC_SIZE
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
    fast, careful = _both(damaged, 7, None, len(records))
    assert fast == careful
    assert careful.problems or careful.records != records or careful.held != len(records)  # type: ignore[attr-defined]


@given(LONGS)
def test_longs_encode_as_fastavro_writes_them(n: int) -> None:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, "long", n)
    assert _zigzag(n) == out.getvalue()
