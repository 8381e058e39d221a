"""Avro object container files as log segments: append whole blocks, find a torn tail.

A segment is a standard Avro container file (any Avro tool reads it) whose records are
`LogRecord`s. The writer appends one block per flush: block count, byte size, the records,
then the file's 16-byte sync marker. A block is whole only if its size is all there and the
sync marker follows it, so a write cut short by `kill -9` or power loss is recognised and
cut off (`repair`), leaving every block written before it.
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

from streams.log import CORRUPT_HEADER, Headers, Record

MAGIC = b"Obj\x01"
SYNC_SIZE = 16

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
LOG_RECORD_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "LogRecord",
    "namespace": "spotcap.log",
    "doc": "One record of an embedded log segment (the same fields as a Kafka record), with a "
    "CRC-32 of the record's other fields as encoded, so corruption at rest is detected.",
    "fields": [*_LOG_RECORD_FIELDS, {"name": "crc32", "type": "long"}],
}
_PARSED = fastavro.parse_schema(LOG_RECORD_SCHEMA)
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


class SegmentCorruptError(ValueError):
    """A segment that is not an Avro container file at all (not merely a torn tail)."""


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`; raises IndexError if the buffer ends inside it."""
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


def sync_marker(path: Path) -> bytes:
    """The segment's sync marker, derived from its topic, partition and base offset.

    The Avro spec asks only that it be unlikely to occur in the data; deriving it (rather than
    drawing it at random) makes the same records give the same bytes, so a replayed or
    simulated log is byte-identical to its original.
    """
    name = f"{path.parent.parent.name}/{path.parent.name}/{path.stem}".encode()
    return hashlib.sha256(b"spotcap-segment:" + name).digest()[:SYNC_SIZE]


def new_segment(path: Path) -> bytes:
    """Create an empty segment (header only) at `path`, durably; returns its sync marker."""
    buffer = io.BytesIO()
    fastavro.writer(buffer, _PARSED, [], sync_marker=sync_marker(path))
    data = buffer.getvalue()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
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
    """What a segment's container header says about its blocks."""

    sync: bytes
    start: int  # file position of the first block
    checked: bool  # records carry a crc32 (segments written before it existed do not)
    schema: Any  # the parsed record schema to decode with (without the crc32 field)


def read_header(data: bytes) -> Header:
    """The header of a segment's bytes (which must hold at least the whole header)."""
    if data[:4] != MAGIC:
        raise SegmentCorruptError(f"not an Avro container file (starts {data[:4]!r})")
    metadata: dict[str, bytes] = {}
    try:
        pos = 4
        while True:
            count, pos = _read_long(data, pos)
            if count == 0:
                break
            if count < 0:
                _, pos = _read_long(data, pos)
                count = -count
            for _ in range(count):
                size, pos = _read_long(data, pos)
                key = data[pos : pos + size].decode()
                pos += size
                size, pos = _read_long(data, pos)
                metadata[key] = data[pos : pos + size]
                pos += size
        sync = data[pos : pos + SYNC_SIZE]
    except (IndexError, UnicodeDecodeError) as error:
        raise SegmentCorruptError("the container header is cut short") from error
    if len(sync) != SYNC_SIZE:
        raise SegmentCorruptError("the container header is cut short")
    if metadata.get("avro.codec", b"null") != b"null":
        raise SegmentCorruptError(f"unsupported Avro codec {metadata['avro.codec']!r}")
    try:
        schema = json.loads(metadata["avro.schema"])
    except (KeyError, ValueError) as error:
        raise SegmentCorruptError("the container header has no readable schema") from error
    names = [f["name"] for f in schema.get("fields", ())]
    if names[-1:] == ["crc32"]:
        return Header(sync, pos + SYNC_SIZE, True, _BODY)
    return Header(sync, pos + SYNC_SIZE, False, fastavro.parse_schema(schema))


@dataclass(frozen=True, slots=True)
class Block:
    position: int  # file position of the block's first byte
    end: int  # file position just past its sync marker
    first_offset: int
    count: int
    body: bytes


def encode_block(records: list[Record], sync: bytes) -> bytes:
    """One container block holding `records` (in the checked format)."""
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
        body.write(_zigzag(zlib.crc32(body.getbuffer()[start:])))
    data = body.getvalue()
    return _zigzag(len(records)) + _zigzag(len(data)) + data + sync


def scan_blocks(data: bytes, sync: bytes, at: int = 0) -> tuple[list[Block], int]:
    """The whole blocks of `data` (bytes of a segment from file position `at` on), and the
    file position where the whole part ends.

    Stops at the first block that is cut short or not followed by the sync marker; the
    returned end position is where a repairing writer truncates.
    """
    blocks: list[Block] = []
    pos = 0
    while pos < len(data):
        try:
            count, body_at = _read_long(data, pos)
            size, body_at = _read_long(data, body_at)
        except (IndexError, ValueError):
            break
        end = body_at + size + SYNC_SIZE
        if count <= 0 or size < 0 or end > len(data) or data[end - SYNC_SIZE : end] != sync:
            break
        body = data[body_at : body_at + size]
        try:
            first, _ = _read_long(body, 0)
        except (IndexError, ValueError):
            break
        blocks.append(Block(at + pos, at + end, first, count, body))
        pos = end
    return blocks, at + pos


def decode_block(block: Block, topic: str, partition: int, header: Header) -> list[Record]:
    """The records of a whole block.

    Never raises: a record that fails its checksum comes back with its bytes as read and the
    `CORRUPT_HEADER` saying why, for the reader to dead-letter; if the block stops decoding
    part-way, each remaining offset comes back that way (offsets in a block are consecutive).
    """
    body = block.body
    stream = io.BytesIO(body)
    out: list[Record] = []
    for i in range(block.count):
        start = stream.tell()
        try:
            raw: Any = fastavro.schemaless_reader(stream, header.schema, None)
            end = stream.tell()
            if header.checked:
                crc, end = _read_long(body, end)
                if zlib.crc32(body[start : stream.tell()]) != crc:
                    out.append(
                        _corrupt(topic, partition, raw["offset"], raw["value"], "checksum mismatch")
                    )
                    stream.seek(end)
                    continue
            stream.seek(end)
        except (EOFError, ValueError, IndexError, KeyError, UnicodeDecodeError) as error:
            reason = f"the block at byte {block.position} stops decoding: {error}"
            rest = body[start:]
            for j in range(i, block.count):
                value = rest if j == i else None
                out.append(_corrupt(topic, partition, block.first_offset + j, value, reason))
            return out
        headers: Headers = tuple((h["key"], h["value"]) for h in raw["headers"])
        out.append(
            Record(
                topic,
                partition,
                raw["offset"],
                raw["key"],
                raw["value"],
                raw["timestamp_ms"],
                headers,
            )
        )
    return out


def _corrupt(topic: str, partition: int, offset: int, value: bytes | None, why: str) -> Record:
    reason = f"{topic}[{partition}]@{offset}: {why}: the segment was changed or damaged on disk"
    return Record(topic, partition, offset, None, value, 0, ((CORRUPT_HEADER, reason.encode()),))
