"""Writer schemas on the log, so a reader can resolve records written by a newer release.

Single-object encoding names the writer schema only by its fingerprint. A writer publishes its
schema on the region's compacted ``schemas`` topic (key: the fingerprint in hex, value: the
schema's JSON) before its first record; a reader that meets a fingerprint it does not know
loads the topic and retries before it gives up on the record (dead letter).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from schemas.codec import Codec, schema_fingerprint
from streams.log import EventLog, Producer
from streams.topics import topic_name

_READ_TIMEOUT_S = 10.0


def publish_schema(
    producer: Producer, region: str, schema: Mapping[str, Any], timestamp_ms: int | None = None
) -> int:
    """Queue `schema` on the region's schema topic; returns its fingerprint."""
    fp = schema_fingerprint(schema)
    producer.produce(
        topic_name(region, "schemas"),
        json.dumps(schema, sort_keys=True).encode(),
        key=f"{fp:016x}".encode(),
        timestamp_ms=timestamp_ms,
    )
    return fp


def load_schemas(log: EventLog, region: str) -> dict[int, Mapping[str, Any]]:
    """Every schema on the region's schema topic, by fingerprint (read to its end)."""
    topic = topic_name(region, "schemas")
    ends = log.end_offsets(topic)
    consumer = log.consumer(f"spotcap-schema-store-{uuid.uuid4().hex}", [topic])
    found: dict[int, Mapping[str, Any]] = {}
    positions = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + _READ_TIMEOUT_S
    try:
        while any(positions[p] < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                break
            for record in consumer.poll(max_records=1000, timeout_s=1.0):
                positions[record.partition] = record.offset + 1
                if record.value is None:
                    continue
                schema = json.loads(record.value)
                found[schema_fingerprint(schema)] = schema
    finally:
        consumer.close()
    return found


class SchemaStore:
    """Adds writer schemas from the log to a codec on demand, at most once per interval."""

    def __init__(self, log: EventLog, region: str, codec: Codec, min_interval_s: float = 5.0):
        self._log = log
        self._region = region
        self._codec = codec
        self._min_interval_s = min_interval_s
        self._last_load = -float("inf")

    def refresh(self) -> bool:
        """Load the schema topic into the codec; False if it was loaded too recently."""
        now = time.monotonic()
        if now - self._last_load < self._min_interval_s:
            return False
        self._last_load = now
        for schema in load_schemas(self._log, self._region).values():
            self._codec.add_writer_schema(schema)
        return True
