"""Append events to the log: encode, route by event type, key, event-time timestamp.

The first write publishes the codec's writer schema on the region's schema topic, so that a
reader of an older release can resolve these records (`streams.schema_store`).
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.codec import Codec
from schemas.events import Envelope
from streams.log import EventLog, Record
from streams.schema_store import publish_schema
from streams.topics import region_topics, topic_name


class EventWriter:
    """Writes envelopes of one region; records are acknowledged when `flush` returns."""

    def __init__(self, log: EventLog, codec: Codec, region: str, flush_every: int = 5000):
        self._producer = log.producer()
        self._codec = codec
        self.region = region
        self._flush_every = flush_every
        self._queued = 0
        self._topics: dict[str, str] = {}
        self.schema_published = False
        self.written = 0

    def write(self, envelope: Envelope) -> None:
        if envelope.region != self.region:
            raise ValueError(
                f"event {envelope.event_id} belongs to region {envelope.region!r}, "
                f"this writer to {self.region!r}"
            )
        if not self.schema_published:
            # Stamped with the first event's time, so a log's bytes depend on its events only.
            publish_schema(
                self._producer,
                self.region,
                self._codec.schema,
                timestamp_ms=envelope.occurred_at // 1000,
            )
            self.schema_published = True
        logical = type(envelope.payload).TOPIC
        topic = self._topics.get(logical)
        if topic is None:
            topic = self._topics[logical] = topic_name(self.region, logical)
        # Positional: a call with keywords costs the embedded producer's C `produce` more.
        self._producer.produce(
            topic,
            self._codec.encode(envelope),
            envelope.key.encode(),
            (),
            envelope.occurred_at // 1000,
        )
        self._queued += 1
        if self._queued >= self._flush_every:
            self.flush()

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        delivered = self._producer.flush(timeout_s)
        self.written += self._queued
        self._queued = 0
        return delivered

    def close(self) -> None:
        self.flush()
        self._producer.close()


def publish(log: EventLog, codec: Codec, region: str, events: Sequence[Envelope]) -> int:
    """Write `events` of `region` and wait until the log acknowledged them, creating the
    topics they go to (and the schema topic) first when they are missing; returns how many."""
    wanted = {topic_name(region, "schemas")} | {
        topic_name(region, type(envelope.payload).TOPIC) for envelope in events
    }
    log.apply_topics([spec for spec in region_topics(region) if spec.name in wanted])
    writer = EventWriter(log, codec, region)
    try:
        for envelope in events:
            writer.write(envelope)
        writer.flush()
    finally:
        writer.close()
    return writer.written
