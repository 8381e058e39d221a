"""Avro object container files as log segments: the header, and blocks of records.

A segment is a standard Avro container file (any Avro tool reads it) whose records are
`LogRecord`s. The writer appends one block per flush: record count, byte size, the records,
then the file's 16-byte sync marker. Each record carries a CRC-32 of its other fields as
encoded (its offset included), so a changed byte in a record is found, never read as data.

The header of a segment in the current format is fully determined by the segment's path: the
schema text is fixed (below) and the sync marker is derived from the path. A reader accepts it
only byte for byte, so no damage to a header can switch the checksum off; a header that is not
exactly that, nor the earlier (unchecked) format's, is damage, and the blocks behind it are
still found by their sync marker. Finding blocks and damage is `streams.segment_scan`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import to_parsing_canonical_form

from streams.log import CORRUPT_HEADER, Headers, Record

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
# The fewest bytes a record takes (offset, timestamp, key and value union branches, header
# count: one byte each at least; the checksum, in the current format, one more): bounds how
# many records a damaged stretch of bytes can have held.
MIN_RECORD_BYTES = 5
# At most this much of a damaged stretch travels in the record that reports it (the whole
# stretch stays in the segment until `spotcap log repair` moves it aside).
MAX_DAMAGED_VALUE_BYTES = 1 << 20

_LOG_RECORD_FIELDS: list[dict[str, Any]] = [
    {"name": "offset", "type": "long"},
    {"name": "timestamp_ms", "type": "long"},
    {"name": "key", "type": ["null", "bytes"]},
    {"name": "value", "type": ["null", "bytes"]},
    {
        "name": "headers",
        "type": {
            "type": "array",
            "items": {
                "type": "record",
                "name": "Header",
                "fields": [
                    {"name": "key", "type": "string"},
                    {"name": "value", "type": "bytes"},
                ],
            },
        },
    },
]
_DOC = (
    "One record of an embedded log segment (the same fields as a Kafka record), with a "
    "CRC-32 of the record's other fields as encoded, so corruption at rest is detected."
)
LOG_RECORD_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "LogRecord",
    "namespace": "spotcap.log",
    "doc": _DOC,
    "fields": [*_LOG_RECORD_FIELDS, {"name": "crc32", "type": "long"}],
}
# The schema text in every current segment's header, exactly as fastavro wrote it when the
# format began (kept here as text so that a new fastavro cannot change what a header must be).
_CHECKED_SCHEMA_JSON = json.dumps(
    {
        "type": "record",
        "doc": _DOC,
        "name": "spotcap.log.LogRecord",
        "fields": [
            {"name": "offset", "type": "long"},
            {"name": "timestamp_ms", "type": "long"},
            {"name": "key", "type": ["null", "bytes"]},
            {"name": "value", "type": ["null", "bytes"]},
            {
                "name": "headers",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "spotcap.log.Header",
                        "fields": [
                            {"name": "key", "type": "string"},
                            {"name": "value", "type": "bytes"},
                        ],
                    },
                },
            },
            {"name": "crc32", "type": "long"},
        ],
    }
).encode()
# The same record without its checksum: what the checksum covers (Avro encodes a record as
# its fields one after another, so the bytes are a prefix of the full record's).
_BODY = fastavro.parse_schema(
    {
        "type": "record",
        "name": "LogRecordBody",
        "namespace": "spotcap.log",
        "fields": _LOG_RECORD_FIELDS,
    }
)
# Segments written before records carried a checksum: the same fields without `crc32`.
_UNCHECKED_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "LogRecord",
        "namespace": "spotcap.log",
        "fields": _LOG_RECORD_FIELDS,
    }
)
_UNCHECKED_CANONICAL = to_parsing_canonical_form(_UNCHECKED_SCHEMA)


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class SegmentHeaderError(ValueError):
    """A segment whose header is not one this log wrote; the message says what is wrong."""


# The name older code (and the consumer) catch; every header problem is one of these.
SegmentCorruptError = SegmentHeaderError


def _zigzag_uncached(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Lengths of keys and values, and block counts, are mostly below this: looked up, not built.
_SMALL_LONGS = tuple(_zigzag_uncached(n) for n in range(8192))
# Larger longs (offsets, timestamps, checksums) 14 bits at a time: the two varint bytes of
# each 14-bit group followed by more, and the last group's one or two.
_GROUP = 1 << 14
_FOLLOWED = tuple(bytes(((u & 0x7F) | 0x80, (u >> 7) | 0x80)) for u in range(_GROUP))
_LAST = tuple(
    bytes((u,)) if u < 0x80 else bytes(((u & 0x7F) | 0x80, u >> 7)) for u in range(_GROUP)
)


def _zigzag(n: int) -> bytes:
    """Avro's encoding of a long (zigzag varint)."""
    if 0 <= n < 8192:
        return _SMALL_LONGS[n]
    z = (n << 1) ^ (n >> 63)
    out = b""
    while z >= _GROUP:
        out += _FOLLOWED[z & 0x3FFF]
        z >>= 14
    return out + _LAST[z]


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos` and the position after it.

    IndexError if the buffer ends inside it; ValueError if it is longer than a long can be.
    """
    shift = 0
    n = 0
    while True:
        byte = buf[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _avro_bytes(data: bytes) -> bytes:
    return _zigzag(len(data)) + data


def sync_marker(path: Path) -> bytes:
    """The segment's sync marker, derived from its topic, partition and base offset.

    The Avro spec asks only that it be unlikely to occur in the data; deriving it (rather than
    drawing it at random) makes the same records give the same bytes, so a replayed or
    simulated log is byte-identical to its original, and lets a reader find the blocks of a
    segment whose header is damaged.
    """
    name = f"{path.parent.parent.name}/{path.parent.name}/{path.stem}".encode()
    return hashlib.sha256(b"spotcap-segment:" + name).digest()[:SYNC_SIZE]


def header_bytes(path: Path) -> bytes:
    """The exact header of a current-format segment at `path`."""
    return (
        MAGIC
        + _zigzag(2)
        + _avro_bytes(b"avro.codec")
        + _avro_bytes(b"null")
        + _avro_bytes(b"avro.schema")
        + _avro_bytes(_CHECKED_SCHEMA_JSON)
        + _zigzag(0)
        + sync_marker(path)
    )


def new_segment(path: Path, first_block: bytes = b"") -> bytes:
    """Create a segment at `path`, durably: its header, and `first_block` (a block encoded
    with the segment's sync marker) after it; returns its sync marker.

    Written to a temporary file and renamed into place, so a segment file always has a whole
    header (a header that does not read is damage at rest, never a writer that died), and its
    first block whole: a new segment costs one file's fsync and its directory's, not two.
    """
    data = header_bytes(path)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        if first_block:
            handle.write(first_block)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return data[-SYNC_SIZE:]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Header:
    """What a segment's header says about its blocks."""

    sync: bytes
    start: int  # file position of the first block
    checked: bool  # records carry a crc32 (segments of the earlier format do not)
    schema: Any  # the parsed record schema to decode with (without the crc32 field)


def assumed_header(path: Path) -> Header:
    """The header a current-format segment at `path` has: what a reader goes by when the
    header on disk is damaged (its blocks still end with the path's sync marker)."""
    return Header(sync_marker(path), len(header_bytes(path)), True, _BODY)


def read_header(data: bytes, path: Path) -> Header:
    """The header of the segment at `path`, from its first bytes (`data` holds at least the
    whole header, or the whole file if it is shorter).

    Raises SegmentHeaderError saying what is wrong when the header is neither exactly the
    current format's header for this path nor a readable header of the earlier format.
    """
    expected = header_bytes(path)
    if data[: len(expected)] == expected:
        return Header(expected[-SYNC_SIZE:], len(expected), True, _BODY)
    if data[:4] != MAGIC:
        raise SegmentHeaderError(f"not an Avro container file (starts {data[:4]!r})")
    metadata, start = _read_metadata(data)
    if metadata.get("avro.codec", b"null") != b"null":
        raise SegmentHeaderError(f"unsupported Avro codec {metadata['avro.codec']!r}")
    schema_text = metadata.get("avro.schema")
    if schema_text == _CHECKED_SCHEMA_JSON:
        pairs = zip(expected, data, strict=False)
        where = next((i for i, (a, b) in enumerate(pairs) if a != b), len(data))
        what = "sync marker" if where >= len(expected) - SYNC_SIZE else "header"
        raise SegmentHeaderError(
            f"the {what} differs from the one this segment's name gives at byte {where:,}"
        )
    try:
        parsed = fastavro.parse_schema(json.loads(schema_text or b""))
        canonical = to_parsing_canonical_form(parsed)
    except Exception as error:  # damaged text can fail the JSON or Avro parser in many ways
        raise SegmentHeaderError(f"the header's schema does not read ({error})") from error
    if canonical != _UNCHECKED_CANONICAL:
        raise SegmentHeaderError(
            "the header's schema is neither the current nor the earlier segment format"
        )
    return Header(data[start - SYNC_SIZE : start], start, False, _UNCHECKED_SCHEMA)


def _read_metadata(data: bytes) -> tuple[dict[str, bytes], int]:
    """The container header's metadata map and the position just past its sync marker."""
    metadata: dict[str, bytes] = {}
    try:
        pos = 4
        while True:
            count, pos = read_long(data, pos)
            if count == 0:
                break
            if count < 0:
                _, pos = read_long(data, pos)
                count = -count
            for _ in range(count):
                size, pos = read_long(data, pos)
                if size < 0 or pos + size > len(data):
                    raise IndexError(pos)
                key = data[pos : pos + size].decode()
                pos += size
                size, pos = read_long(data, pos)
                if size < 0 or pos + size > len(data):
                    raise IndexError(pos)
                metadata[key] = data[pos : pos + size]
                pos += size
    except (IndexError, ValueError, UnicodeDecodeError) as error:
        raise SegmentHeaderError("the header's metadata does not read") from error
    if pos + SYNC_SIZE > len(data):
        raise SegmentHeaderError("the header is cut short")
    return metadata, pos + SYNC_SIZE


def encode_block(records: list[Record], sync: bytes) -> bytes:
    """One container block holding `records` (in the checked format).

    Each `LogRecord` is encoded here rather than by fastavro: the same bytes (a test checks
    them against fastavro's), in a third of the time (fastavro resolves each union branch by
    trying them in turn). Where the C extension is built (`streams._framing`, the default),
    `encode_block` is its function, which gives the same bytes (a property test checks it).
    """
    parts: list[bytes] = []
    add, crc32, zigzag = parts.append, zlib.crc32, _zigzag
    for record in records:
        key, value = record.key, record.value
        encoded = b"".join(
            (
                zigzag(record.offset),
                zigzag(record.timestamp_ms),
                b"\x00" if key is None else b"\x02" + zigzag(len(key)) + key,
                b"\x00" if value is None else b"\x02" + zigzag(len(value)) + value,
                _headers(record.headers) if record.headers else b"\x00",
            )
        )
        add(encoded)
        add(zigzag(crc32(encoded)))
    data = b"".join(parts)
    return _zigzag(len(records)) + _zigzag(len(data)) + data + sync


def _headers(headers: Headers) -> bytes:
    """An Avro array of `Header` records: one block with its count, then the end (0)."""
    parts = [_zigzag(len(headers))]
    for key, value in headers:
        text = key.encode()
        parts += (_zigzag(len(text)), text, _zigzag(len(value)), value)
    parts.append(b"\x00")
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class BlockProblem:
    """Something wrong inside a block whose framing is whole; offsets [first, end) (`end`
    None: up to wherever the block's offsets end)."""

    start: int  # byte range in the segment
    end: int
    first_offset: int
    end_offset: int | None
    what: str


@dataclass(slots=True)
class DecodedBlock:
    records: list[Record]
    problems: list[BlockProblem]
    held: int  # records found in the body (the count the framing should have said)
    last_good: int | None  # the highest offset of a record that passed its checksum


def decode_block(
    data: bytes,
    *,
    position: int,
    first: int,
    limit: int | None,
    count: int,
    topic: str,
    partition: int,
    header: Header,
) -> DecodedBlock:
    """The records of a block whose framing is whole (`data`: its bytes, from the count to
    the sync marker; `position`: where it starts in the segment).

    Never raises. Records are read to the end of the body whatever the count says (the count
    is checked against it). A record that fails its checksum comes back at the offset it
    should hold, with its bytes as read and the `CORRUPT_HEADER` saying why, for the reader
    to dead-letter; bytes that stop decoding come back as one such record, and reading goes
    on after the next sync marker inside the body if there is one (a damaged byte size can
    make one block of two). Good records keep their own offsets, which must rise from
    `first` and stay below `limit` (the next block's first offset).
    """
    _, at = read_long(data, 0)
    _, at = read_long(data, at)
    end = len(data) - SYNC_SIZE
    if header.checked and data.find(header.sync, at, end) < 0:
        whole = whole_records(data, at, end, first, limit, count, topic, partition)
        if whole is not None:
            return DecodedBlock(whole, [], count, whole[-1].offset if whole else None)
    return decode_carefully(
        data, position=position, first=first, limit=limit, count=count, topic=topic,
        partition=partition, header=header,
    )  # fmt: skip


def decode_carefully(
    data: bytes,
    *,
    position: int,
    first: int,
    limit: int | None,
    count: int,
    topic: str,
    partition: int,
    header: Header,
) -> DecodedBlock:
    """`decode_block` without its fast path: every record decoded by fastavro, damage
    found and said (the result is the same for a block `whole_records` takes)."""
    _, at = read_long(data, 0)
    _, at = read_long(data, at)
    decoding = _Decoding(data[at : len(data) - SYNC_SIZE], position + at, topic, partition)
    decoding.run(header, first, limit)
    out = decoding.out
    if out.held != count:
        why = f"the block's framing says {count:,} records, its body holds {out.held:,}"
        out.problems.append(BlockProblem(position, position + len(data), first, None, why))
    return out


def whole_records(  # noqa: PLR0917 (one loop over the body, kept flat for speed)
    data: bytes,
    at: int,
    end: int,
    first: int,
    limit: int | None,
    count: int,
    topic: str,
    partition: int,
) -> list[Record] | None:
    """The records of a checked-format block body, `data[at:end]`, when the block is whole:
    `count` records of offsets `first`, `first + 1`, ... below `limit`, without headers,
    each passing its checksum, filling the body exactly. None otherwise: `decode_carefully`
    then reads what it can and says what is wrong. (The caller checked that the body holds
    no sync marker.) Where it returns records, they are those `decode_carefully` returns.

    The fast path of reading: the framing decoded by hand, where fastavro's reader called
    once per record cost as much as decoding the event inside it. Where the C extension is
    built, `whole_records` is its function (the same records or None; a property test checks
    it), about ten times faster.
    """
    records: list[Record] = []
    append, crc32, view = records.append, zlib.crc32, memoryview(data)
    pos, offset = at, first
    try:
        while pos < end:
            start = pos
            got, pos = read_long(data, pos)
            timestamp, pos = read_long(data, pos)
            if got != offset or not _LONG_MIN <= timestamp <= _LONG_MAX:
                return None  # (a varint past 64 bits: fastavro's reader would wrap it)
            tag = data[pos]
            if tag == 2:
                size = data[pos + 1]
                if size < 0x80:  # a one-byte length (keys are short)
                    size, pos = (size >> 1) ^ -(size & 1), pos + 2
                else:
                    size, pos = read_long(data, pos + 1)
                if size < 0 or pos + size > end:
                    return None
                key: bytes | None = data[pos : pos + size]
                pos += size
            elif tag == 0:
                key, pos = None, pos + 1
            else:
                return None
            tag = data[pos]
            if tag == 2:
                size, pos = read_long(data, pos + 1)
                if size < 0 or pos + size > end:
                    return None
                value: bytes | None = data[pos : pos + size]
                pos += size
            elif tag == 0:
                value, pos = None, pos + 1
            else:
                return None
            if data[pos] != 0:  # headers: the careful path decodes them
                return None
            pos += 1
            crc, after = read_long(data, pos)
            if after > end or crc32(view[start:pos]) != crc:
                return None
            append(Record(topic, partition, offset, key, value, timestamp, ()))
            offset += 1
            pos = after
    except (IndexError, ValueError):
        return None
    if pos != end or len(records) != count or (records and limit is not None and offset > limit):
        return None
    return records


def make_records(
    topic: str,
    partition: int,
    first: int,
    rows: list[tuple[bytes | None, bytes | None, Headers, int]],
) -> list[Record]:
    """The records of `rows` (key, value, headers, timestamp) at offsets `first`, `first + 1`,
    ... (what an append returns)."""
    return [
        Record(topic, partition, first + i, key, value, ts, headers)
        for i, (key, value, headers, ts) in enumerate(rows)
    ]


Columns = tuple[list[bytes | None], list[bytes | None], list[Headers], list[int]]
"""Records to append as columns: their keys, values, headers and timestamps (ms)."""


def frame_rows(
    topic: str, partition: int, first: int, rows: Columns, sync: bytes
) -> tuple[bytes, list[Record]]:
    """An append's block and its records: `encode_block` of `make_records` of the rows (the
    extension does both in one pass over the columns)."""
    keys, values, headers, stamps = rows
    if not len(keys) == len(values) == len(headers) == len(stamps):
        raise TypeError("rows are (keys, values, headers, timestamps): four lists of one length")
    records = make_records_python(topic, partition, first, list(zip(*rows, strict=True)))
    return encode_block_python(records, sync), records


# The Python code above is the reference and the fallback; the C extension (built by
# `pip install -e .`, setup.py) does the same work per record at C speed.
encode_block_python = encode_block
whole_records_python = whole_records
make_records_python = make_records
frame_rows_python = frame_rows
try:
    from streams import _framing
except ImportError:  # built without a C compiler: the Python code does the work
    FRAMING = "python"
else:
    _framing.bind(Record)
    encode_block = _framing.encode_block
    whole_records = _framing.whole_records
    make_records = _framing.make_records
    frame_rows = _framing.frame_rows
    FRAMING = "c"


class _Decoding:
    """The state of decoding one block's body."""

    def __init__(self, body: bytes, base: int, topic: str, partition: int) -> None:
        self.body = body
        self.base = base  # segment position of the body's first byte
        self.topic = topic
        self.partition = partition
        self.out = DecodedBlock([], [], 0, None)
        self.damaged = False  # a record stands for damaged bytes: sort and dedupe at the end

    def run(self, header: Header, first: int, limit: int | None) -> None:
        body, base, topic, partition = self.body, self.base, self.topic, self.partition
        view = memoryview(body)
        stream = io.BytesIO(body)
        read, crc32, schema, checked = (
            fastavro.schemaless_reader,
            zlib.crc32,
            header.schema,
            header.checked,
        )
        append = self.out.records.append
        top = limit if limit is not None else 1 << 63  # offsets stay below the next block's
        split = body.find(header.sync)  # a sync marker inside a body: the size was damaged
        expected, last, held, pos, size = first, first - 1, 0, 0, len(body)
        while pos < size:
            try:
                if pos == split:
                    pos = self._past_sync(pos, expected, header.sync)
                    split = body.find(header.sync, pos)
                    stream.seek(pos)
                    continue
                raw: Any = read(stream, schema, None)
                end = stream.tell()
                crc, after = read_long(body, end) if checked else (0, end)
                offset = raw["offset"]
                if pos < split < after:
                    raise ValueError("a record runs into a sync marker")
            except Exception as error:  # damaged bytes can make the decoder raise anything
                # The rest of the body, or up to a sync marker inside it, does not read.
                why = f"the block's records stop decoding at byte {base + pos:,} ({error})"
                self._lost(pos, split if split > pos else size, expected, limit, why)
                expected += 1
                pos = split if split > pos else size
                stream.seek(pos)
                continue
            stream.seek(after)
            held += 1
            if checked and crc32(view[pos:end]) != crc:
                self._lost(pos, after, expected, limit, "checksum mismatch", raw["value"])
                expected += 1
            elif offset <= last or offset >= top:
                why = f"a record of offset {offset:,} out of place: left out"
                self._problem(pos, after, offset, offset + 1, why)
            else:
                if offset > expected and not self.damaged:
                    why = f"offsets {expected:,}-{offset - 1:,} are missing from the block"
                    self._problem(pos, pos, expected, offset, why)
                headers: Headers = tuple((h["key"], h["value"]) for h in raw["headers"])
                append(
                    Record(
                        topic,
                        partition,
                        offset,
                        raw["key"],
                        raw["value"],
                        raw["timestamp_ms"],
                        headers,
                    )
                )
                last = offset
                expected = offset + 1
            pos = after
        self.out.held = held
        self.out.last_good = last if last >= first else None
        if self.damaged:
            self._settle()

    def _past_sync(self, pos: int, expected: int, sync: bytes) -> int:
        """Where the records go on after a sync marker found at `pos` inside the body (just
        past the next block's count and size): two blocks read as one."""
        why = f"a sync marker inside the block at byte {self.base + pos:,}: its size is wrong"
        self._problem(pos, pos, expected, None, why)
        _, pos = read_long(self.body, pos + len(sync))
        _, pos = read_long(self.body, pos)
        return pos

    def _problem(self, start: int, end: int, first: int, end_offset: int | None, why: str) -> None:
        self.out.problems.append(
            BlockProblem(self.base + start, self.base + end, first, end_offset, why)
        )

    def _lost(  # noqa: PLR0917 (the byte range, the offset and the limit belong together)
        self,
        start: int,
        end: int,
        offset: int,
        limit: int | None,
        why: str,
        value: bytes | None = None,
    ) -> None:
        """Bytes [start, end) of the body that do not read; one record stands for them."""
        problem = BlockProblem(self.base + start, self.base + end, offset, offset + 1, why)
        self.out.problems.append(problem)
        if limit is None or offset < limit:
            data = self.body[start : start + MAX_DAMAGED_VALUE_BYTES] if value is None else value
            self.out.records.append(_corrupt(self.topic, self.partition, offset, data, why))
            self.damaged = True

    def _settle(self) -> None:
        """Offsets in order, each once; a good record wins over one standing for damage."""
        records = sorted(self.out.records, key=lambda r: (r.offset, _is_corrupt(r)))
        kept: list[Record] = []
        for record in records:
            if not kept or kept[-1].offset != record.offset:
                kept.append(record)
        self.out.records = kept


def _is_corrupt(record: Record) -> bool:
    return any(k == CORRUPT_HEADER for k, _ in record.headers)


def first_record_holds(data: bytes, header: Header) -> bool:
    """Whether the first record of the block in `data` (its bytes from the count on; the
    first record's bytes are enough) passes its checksum, so the offset it names is true.

    Always True for the earlier format, which has no checksum to go by.
    """
    if not header.checked:
        return True
    try:
        _, at = read_long(data, 0)
        _, at = read_long(data, at)
        stream = io.BytesIO(data)
        stream.seek(at)
        fastavro.schemaless_reader(stream, header.schema, None)
        end = stream.tell()
        crc, _ = read_long(data, end)
    except Exception:  # damaged bytes can make the decoder raise anything
        return False
    return zlib.crc32(memoryview(data)[at:end]) == crc


def corrupt_record(
    topic: str, partition: int, offset: int, value: bytes | None, why: str
) -> Record:
    """A record standing for what could not be read at `offset`, for the dead letter."""
    return _corrupt(topic, partition, offset, value, why)


def _corrupt(topic: str, partition: int, offset: int, value: bytes | None, why: str) -> Record:
    reason = f"{topic}[{partition}]@{offset}: {why}: the segment was changed or damaged on disk"
    return Record(topic, partition, offset, None, value, 0, ((CORRUPT_HEADER, reason.encode()),))
