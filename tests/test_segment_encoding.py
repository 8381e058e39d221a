"""The hand-written encoding of a segment block: the bytes fastavro writes, and they read back."""

from __future__ import annotations

import io
import zlib

import fastavro
from hypothesis import given
from hypothesis import strategies as st

from streams.log import Record
from streams.segment import _BODY, SYNC_SIZE, Header, decode_block, encode_block

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
