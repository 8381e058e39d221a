"""Read events from the log: decode, dead-letter what cannot be decoded, commit after.

`DecodingReader.poll` returns a `Batch`: the decoded events with their positions, and the
positions to commit once the caller's effects are durable. Dead letters from the batch have
been delivered (flushed) before `poll` returns, so committing past them loses nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, fields, is_dataclass
from operator import itemgetter

from schemas import events as _events
from schemas.codec import Codec
from schemas.errors import CodecError, CorruptRecordError, Origin, UnknownSchemaError
from schemas.events import PAYLOAD_TYPES, Envelope
from schemas.frozen import FrozenMap
from streams.deadletter import DeadLetters
from streams.log import (
    CORRUPT_HEADER,
    Consumer,
    LogError,
    Producer,
    Record,
    TopicPartition,
    immutable,
    next_positions,
    slots_constructor,
)
from streams.schema_store import SchemaStore


@dataclass(frozen=True, slots=True)
class Decoded:
    """An event with the log position it was read from."""

    origin: Origin
    envelope: Envelope


# Envelopes, payloads and the records inside them (frozen dataclasses) never change once
# decoded: a `Decoded` of them (and its origin) is left out of the garbage collector's walks
# (a poll's batch holds thousands).
immutable(
    FrozenMap,
    *(c for c in vars(_events).values() if isinstance(c, type) and is_dataclass(c)),
)
# `Envelope(*fields, payload)`, its slots filled directly (one per event read), and the
# fields before its payload, from the Avro record, in the envelope's order.
# `Envelope.__post_init__` checks that the event type names the payload's type; `record_of`
# has checked that of every record the fast path takes.
_new_envelope = slots_constructor(Envelope, checked=True)
_ENVELOPE_FIELDS = tuple(f.name for f in fields(Envelope))
assert _ENVELOPE_FIELDS[-1] == "payload"
_envelope_fields = itemgetter(*_ENVELOPE_FIELDS[:-1])
# `Decoded(origin, envelope)`, its slots filled directly (one per event read).
new_decoded = slots_constructor(Decoded)


@dataclass(frozen=True, slots=True)
class Batch:
    events: list[Decoded]
    dead_lettered: int
    positions: dict[TopicPartition, int]  # commit these after handling `events`


class Decoder:
    """Turns a record into its envelope, or raises a `CodecError` naming where and why.

    A record written by a newer release names a writer schema this codec does not know; the
    schema store (if given) loads the schemas published on the log and the decode is retried
    once. A `LogError` from that load (the log unreachable) is not the record's fault: it
    propagates, and the record must be read again, never dead-lettered.
    """

    def __init__(self, codec: Codec, schema_store: SchemaStore | None = None) -> None:
        self.codec = codec
        self._schema_store = schema_store

    def decode(self, record: Record, origin: Origin | None = None) -> Envelope:
        """`origin`: the record's, if the caller has made it already (it is made per call)."""
        if origin is None:
            origin = record.origin
        if record.headers:
            damaged = dict(record.headers).get(CORRUPT_HEADER)
            if damaged is not None:
                raise CorruptRecordError(damaged.decode(errors="replace"), origin)
        value = record.value
        if value is None:
            raise CodecError("the record has no value (a tombstone)", origin)
        whole = self.codec.record_of(value)
        if whole is not None:
            # Written with this codec's schema, one whole record: the envelope's slots filled
            # directly (a frozen dataclass's __init__ costs more than the rest of it). Anything
            # the payload's own constructor refuses is decoded again below, which says why.
            avro = whole[1]
            try:
                payload = PAYLOAD_TYPES[avro["payload"][0]].from_avro(avro["payload"][1])
            except (KeyError, TypeError, ValueError):
                pass
            else:
                return _new_envelope(*_envelope_fields(avro), payload)
        try:
            return self.codec.decode(value, origin)
        except UnknownSchemaError:
            # Written by a newer release? Its writer published the schema on the log.
            if self._schema_store is None or not self._schema_store.refresh():
                raise
            return self.codec.decode(value, origin)


class DecodingReader:
    def __init__(
        self,
        consumer: Consumer,
        codec: Codec,
        dead_letter_producer: Producer,
        region: str,
        processor: str,
        *,
        schema_store: SchemaStore | None = None,
    ) -> None:
        self.consumer = consumer
        self.codec = codec
        self.decoder = Decoder(codec, schema_store)
        self._producer = dead_letter_producer
        self.dead_letters = DeadLetters(dead_letter_producer, codec, region, processor)

    def decode(self, records: Sequence[Record]) -> Batch:
        events: list[Decoded] = []
        failed = 0
        decode = self.decoder.decode
        try:
            for record in records:
                origin = record.origin
                try:
                    envelope = decode(record, origin)
                except CodecError as error:
                    self.dead_letters.send(record, error)
                    failed += 1
                    continue
                events.append(new_decoded(origin, envelope))
            if failed:
                self._producer.flush()
        except LogError:
            # The dead letters are not written, or the schema topic could not be read: read
            # these records again next poll.
            self._rewind(records)
            raise
        return Batch(events, failed, next_positions(records))

    def _rewind(self, records: Sequence[Record]) -> None:
        first: dict[TopicPartition, int] = {}
        for record in records:
            tp = (record.topic, record.partition)
            first[tp] = min(first.get(tp, record.offset), record.offset)
        for (topic, partition), offset in first.items():
            self.consumer.seek(topic, partition, offset)

    def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> Batch:
        return self.decode(self.consumer.poll(max_records, timeout_s))

    def commit(self, batch: Batch) -> None:
        self.consumer.commit(batch.positions)


class SeenEvents:
    """Recognises re-delivered events by `event_id` (at-least-once delivery), bounded in size."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()

    def first_time(self, event_id: str) -> bool:
        """True the first time an id is offered; False for a duplicate still remembered."""
        if event_id in self._seen:
            self._seen.move_to_end(event_id)
            return False
        self._seen[event_id] = None
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return True
