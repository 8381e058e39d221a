"""Bad input is data: records no step can read go to the dead-letter topic with their reason.

The dead-lettered record keeps the raw key and value and names where it came from and why it
failed. Its event id is derived from its origin, so dead-lettering the same record twice
(after a crash before the commit) produces one recognisable event, not two different ones.
The caller flushes the dead letters before committing past them (`DecodingReader` does).
"""

from __future__ import annotations

import time

from schemas.codec import Codec
from schemas.errors import CodecError
from schemas.events import DeadLettered, Envelope
from schemas.ids import derived_event_id
from streams.log import EventLog, Headers, Producer, Record
from streams.topics import topic_name


class OnDemandProducer:
    """The log's producer, opened at the first record sent through it. On the embedded log a
    producer holds the log's one writer lock while open, so a reader that dead-letters through
    this one (most runs dead-letter nothing) holds the lock only once it has something to
    write: `spotcap project` runs beside a `spotcap demo` writing the same log, and two
    projections' catch-ups beside each other."""

    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._producer: Producer | None = None

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        if self._producer is None:
            self._producer = self._log.producer()
        self._producer.produce(topic, value, key, headers, timestamp_ms)

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        return [] if self._producer is None else self._producer.flush(timeout_s)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()


class DeadLetters:
    """Sends records that failed to the region's dead-letter topic."""

    def __init__(self, producer: Producer, codec: Codec, region: str, processor: str) -> None:
        self._producer = producer
        self._codec = codec
        self._region = region
        self._processor = processor
        self.topic = topic_name(region, "deadletter")
        self.sent = 0

    def envelope(self, record: Record, error: Exception) -> Envelope:
        """The `dead_lettered` event for `record` that failed with `error`."""
        origin = record.origin
        cls = type(error)
        return Envelope(
            event_id=derived_event_id(str(origin), DeadLettered.EVENT_TYPE, self._processor),
            event_type=DeadLettered.EVENT_TYPE,
            occurred_at=record.timestamp_ms * 1000,
            recorded_at=time.time_ns() // 1000,
            region=self._region,
            key=origin.topic,
            causation_id=None,
            correlation_id=None,
            producer=self._processor,
            payload=DeadLettered(
                origin_topic=origin.topic,
                origin_partition=origin.partition,
                origin_offset=origin.offset,
                processor=self._processor,
                error_class=f"{cls.__module__}.{cls.__qualname__}",
                reason=_reason(error),
                raw_value=record.value or b"",
                raw_key=record.key,
            ),
        )

    def send(self, record: Record, error: Exception) -> None:
        """Queue `record` for the dead-letter topic (delivered at the producer's next flush)."""
        envelope = self.envelope(record, error)
        self._producer.produce(
            self.topic,
            self._codec.encode(envelope),
            key=envelope.key.encode(),
            headers=(("spotcap.reason", _reason(error).encode()),),
            timestamp_ms=record.timestamp_ms,
        )
        self.sent += 1

    def flush(self, timeout_s: float = 30.0) -> None:
        """Deliver the queued dead letters (before committing past their records)."""
        self._producer.flush(timeout_s)


def _reason(error: Exception) -> str:
    """The kind of failure, then what and where (a CodecError's message already says both)."""
    if isinstance(error, CodecError):
        return str(error)
    return f"processing_error: {type(error).__name__}: {error}"
