"""The history the archive exports, as records: each event's bytes and its Avro record, in the
merged order (`streams.merged.MergedHistory`'s: by occurred_at, topic, partition, offset, each
partition read in its own order), without making an `Envelope` of each event.

The archive stores an event's bytes and its fields; building the typed envelope only to take
its fields and encode it again was most of an export's time. A record written with the
codec's own schema is kept as it was read (Avro's binary encoding is canonical: decoding and
encoding it again gives the same bytes); one written with an older schema is decoded into an
envelope and encoded with the current schema, as before. A record that does not decode is
skipped with a warning, as the merged history skips it.
"""

from __future__ import annotations

import heapq
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from projections.ledger.writer import LEDGER_TOPICS
from schemas.codec import Codec
from schemas.errors import CodecError, Origin
from streams.log import Consumer, EventLog, Record, TopicPartition
from streams.reader import Decoder
from streams.topics import topic_name

_LOG = logging.getLogger("spotcap.archive")
POLL_RECORDS = 5000

ArchiveRecord = tuple[int, str, int, int, bytes, dict[str, Any]]
"""occurred_at, topic, partition, offset, the event's bytes, its Avro record (the payload as
``(record name, fields)``): ordered by the first four, which no two records share."""


def _hex(value: object) -> str:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot put {type(value).__name__} in JSON")


def _json_encoder() -> Callable[[Any], str]:
    """JSON as ``json.dumps(value, sort_keys=True, separators=(",", ":"), default=_hex)``
    writes it, with the C encoder made once rather than at every call (the ledger writer's
    `_payload_encoder`): the same text."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - no C accelerator in this Python
        encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_hex)
        return encoder.encode
    one_shot = make(None, _hex, json.encoder.encode_basestring_ascii, None, ":", ",",
                    True, False, True)  # fmt: skip
    return lambda value: "".join(one_shot(value, 0))


payload_text = _json_encoder()
"""A payload's fields as JSON, as the archive and the ledger store them."""


class _OnePartition:
    """Listener that keeps a consumer of a topic on one partition, from offset 0."""

    def __init__(self, partition: int) -> None:
        self.partition = partition

    def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        others = [tp for tp in partitions if tp[1] != self.partition]
        for tp in partitions:
            if tp[1] == self.partition:
                consumer.seek(*tp, 0)
        if others:
            consumer.pause(others)

    def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        pass


def partition_records(
    log: EventLog, codec: Codec, topic: str, partition: int, end: int
) -> Iterator[ArchiveRecord]:
    """The partition's records up to `end`, in offset order, decoded for the archive."""
    consumer = log.consumer(
        f"spotcap-archive-{uuid.uuid4().hex}", [topic], listener=_OnePartition(partition)
    )
    decoder = Decoder(codec)
    record_of = codec.record_of
    position = 0
    try:
        while position < end:
            records = consumer.poll(POLL_RECORDS, 1.0)
            for r in records:
                if r.partition != partition or r.offset < position or r.offset >= end:
                    continue
                position = r.offset + 1
                found = record_of(r.value) if r.value is not None and not r.headers else None
                if found is None:
                    found = _decoded_again(decoder, codec, r)
                    if found is None:
                        continue
                data, fields = found
                yield fields["occurred_at"], topic, partition, r.offset, data, fields
    finally:
        consumer.close()


def _decoded_again(
    decoder: Decoder, codec: Codec, record: Record
) -> tuple[bytes, dict[str, Any]] | None:
    """A record the fast path does not take (an older schema, a header, damage): decoded into
    an envelope and encoded with the current schema, or None (skipped, with a warning) when
    it does not decode."""
    origin = Origin(record.topic, record.partition, record.offset)
    try:
        data = codec.encode(decoder.decode(record, origin))
    except CodecError as error:
        _LOG.warning("archive export: skipped an undecodable record: %s", error)
        return None
    found = codec.record_of(data)
    assert found is not None, "an event encoded by this codec reads back"
    return found


def merged_records(
    log: EventLog, codec: Codec, region: str, topics: Sequence[str] = LEDGER_TOPICS
) -> Iterator[ArchiveRecord]:
    """Every record of `topics` of `region` up to the end offsets taken now, merged by the
    partitions' heads in `MergedHistory`'s order."""
    parts = []
    for name in (topic_name(region, t) for t in topics):
        for n, end in sorted(log.end_offsets(name).items()):
            if end > 0:
                parts.append(partition_records(log, codec, name, n, end))
    return heapq.merge(*parts)
