"""Reading a topic back for people (`spotcap log cat` and `tail`): from an offset or a time,
filtered by key and event type, to the end the topic had when reading started, or following it.

Nothing is written and nothing is committed: reading happens in a throwaway consumer group, and
what cannot be decoded is handed back as `Undecodable` (where, and why) instead of going to the
dead-letter topic.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import DeadLettered, Envelope
from streams.log import Consumer, EventLog, Headers, LogError, Record, TopicPartition
from streams.reader import Decoded, DecodingReader
from streams.schema_store import SchemaStore


@dataclass(frozen=True, slots=True)
class Wanted:
    """Which events are given back."""

    from_offset: int = 0
    since_ms: int | None = None
    key: str | None = None
    event_type: str | None = None

    def __call__(self, decoded: Decoded) -> bool:
        envelope = decoded.envelope
        return (
            decoded.origin.offset >= self.from_offset
            and (self.since_ms is None or envelope.occurred_at // 1000 >= self.since_ms)
            and (self.key is None or envelope.key == self.key)
            and (self.event_type is None or envelope.event_type == self.event_type)
        )


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A record that could not be decoded: where it is (``topic[partition]@offset``) and why."""

    where: str
    reason: str


class LogStalledError(LogError):
    """The log delivered nothing for a while before the reader reached the end offsets."""


def browse(
    log: EventLog,
    codec: Codec,
    topic: str,
    region: str,
    wanted: Wanted,
    *,
    follow: bool = False,
    idle_s: float = 30.0,
) -> Iterator[Decoded | Undecodable]:
    """The wanted events of `topic` (and the records it cannot decode), in each partition's
    order, until every partition reached the end offset it had at the start (`follow`: until
    the caller stops iterating). `LogStalledError` when nothing arrives for `idle_s` before
    the end."""
    ends = log.end_offsets(topic)
    start = _StartAt(wanted.from_offset) if wanted.from_offset else None
    consumer = log.consumer(f"spotcap-log-{uuid.uuid4().hex[:12]}", [topic], listener=start)
    letters = _Letters()
    schemas = SchemaStore(log, region, codec)
    reader = DecodingReader(consumer, codec, letters, region, "spotcap log", schema_store=schemas)
    positions = dict.fromkeys(ends, wanted.from_offset)
    moved = time.monotonic()
    try:
        while follow or any(positions[p] < end for p, end in ends.items()):
            batch = reader.poll(max_records=1000, timeout_s=1.0)
            for (_, partition), position in batch.positions.items():
                positions[partition] = max(positions[partition], position)
                moved = time.monotonic()
            yield from filter(wanted, batch.events)
            for letter in letters.take():
                payload = codec.decode(letter).payload
                assert isinstance(payload, DeadLettered)
                where = (
                    f"{payload.origin_topic}[{payload.origin_partition}]@{payload.origin_offset}"
                )
                yield Undecodable(where, payload.reason)
            if not follow and time.monotonic() - moved > idle_s:
                raise LogStalledError(
                    f"{log.describe()} delivered nothing for {idle_s:g} s before reaching the "
                    "end offsets it had when the command started"
                )
    finally:
        consumer.close()


class _Letters:
    """Takes the dead letters of a reader instead of writing them to the log."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def take(self) -> list[bytes]:
        taken, self.values = self.values, []
        return taken

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        self.values.append(value or b"")

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        return []

    def close(self) -> None:
        pass


class _StartAt:
    """Starts every partition at one offset, as it is assigned."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        for topic, partition in partitions:
            consumer.seek(topic, partition, self.offset)

    def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        pass


def since_ms(text: str, now: datetime | None = None) -> int:
    """`text` as milliseconds since the epoch: an ISO 8601 time (UTC when it names no zone) or
    a duration back from `now` (default: the wall clock) such as ``2h``, ``30m`` or ``7d``;
    ValueError, saying what it takes, when it is neither."""
    relative = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhd])", text.strip())
    if relative:
        seconds = float(relative[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[relative[2]]
        return int(((now or datetime.now(UTC)) - timedelta(seconds=seconds)).timestamp() * 1000)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r} is neither a time like 2026-12-01T08:00:00Z nor a duration "
            "like 2h or 7d"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def event_json(origin: Origin, envelope: Envelope) -> str:
    """One event as one line of JSON: its position, the envelope's fields and the payload
    (bytes in base64), keys sorted."""
    data = {
        "topic": origin.topic,
        "partition": origin.partition,
        "offset": origin.offset,
        **{name: getattr(envelope, name) for name in Envelope.HEAD},
        "payload": envelope.payload.to_avro(),
    }
    return json.dumps(data, default=_json_default, sort_keys=True)


def event_line(origin: Origin, envelope: Envelope, width: int = 400) -> str:
    """One event as a line for people: partition, offset, event time (UTC), type, key and the
    payload as compact JSON, cut at `width` characters."""
    when = datetime.fromtimestamp(envelope.occurred_at / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S")
    fields = json.dumps(envelope.payload.to_avro(), default=_json_default, separators=(",", ":"))
    head = (
        f"{origin.partition:>3} {origin.offset:>10,}  {when}  {envelope.event_type:<26} "
        f"{envelope.key:<36}"
    )
    return f"{head} {fields}"[:width]


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


__all__ = [
    "LogStalledError",
    "Undecodable",
    "Wanted",
    "browse",
    "event_json",
    "event_line",
    "since_ms",
]
