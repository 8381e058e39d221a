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
from streams.log import EventLog, LogTimeoutError, Producer
from streams.topics import topic_name

SCHEMA_LOAD_TIMEOUT_S = 10.0


class SchemaLoadTimeoutError(LogTimeoutError):
    """The schema topic could not be read to its end in time; a partial set of schemas would
    dead-letter records that are fine, so none is returned."""


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


def load_schemas(
    log: EventLog, region: str, timeout_s: float = SCHEMA_LOAD_TIMEOUT_S
) -> dict[int, Mapping[str, Any]]:
    """Every schema on the region's schema topic, by fingerprint (read to the end it had when
    the call began); `SchemaLoadTimeoutError` if that takes longer than `timeout_s`."""
    topic = topic_name(region, "schemas")
    ends = log.end_offsets(topic)
    consumer = log.consumer(f"spotcap-schema-store-{uuid.uuid4().hex}", [topic])
    found: dict[int, Mapping[str, Any]] = {}
    positions = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + timeout_s
    try:
        while any(positions[p] < end for p, end in ends.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                read = sum(positions.values())
                raise SchemaLoadTimeoutError(
                    f"the schema topic {topic} was read to {read:,} of {sum(ends.values()):,} "
                    f"records in {timeout_s} s; is the log reachable? (records whose writer "
                    "schema is unknown are held, not dead-lettered)"
                )
            for record in consumer.poll(max_records=1000, timeout_s=min(1.0, left)):
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

    def __init__(
        self,
        log: EventLog,
        region: str,
        codec: Codec,
        min_interval_s: float = 5.0,
        load_timeout_s: float = SCHEMA_LOAD_TIMEOUT_S,
    ):
        self._log = log
        self._region = region
        self._codec = codec
        self._min_interval_s = min_interval_s
        self._load_timeout_s = load_timeout_s
        self._last_load = -float("inf")

    def refresh(self) -> bool:
        """Load the schema topic into the codec; False if it was loaded too recently.

        Raises `SchemaLoadTimeoutError` if the topic cannot be read to its end in time.
        """
        now = time.monotonic()
        if now - self._last_load < self._min_interval_s:
            return False
        self._last_load = now
        for schema in load_schemas(self._log, self._region, self._load_timeout_s).values():
            self._codec.add_writer_schema(schema)
        return True
