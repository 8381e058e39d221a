"""The event log seam: what every log implementation (Kafka, embedded) provides.

The log moves opaque records (key, value bytes, headers, timestamp) between partitions of
topics, like Kafka does; the codec gives the bytes meaning. Positions are the log's own
(topic, partition, offset): consumers commit the *next* offset to read, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from schemas.errors import Origin

TopicPartition = tuple[str, int]
# A record the log could read only in part (damaged at rest); its value says why.
CORRUPT_HEADER = "spotcap.log.corrupt"
Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One record read from (or delivered to) the log, with the position it holds there."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: Headers = ()

    @property
    def origin(self) -> Origin:
        return Origin(self.topic, self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """How a topic is configured, in both implementations."""

    name: str
    partitions: int
    retention_ms: int
    compacted: bool = False
    doc: str = ""
    extra_config: Mapping[str, str] = field(default_factory=dict)

    def kafka_config(self) -> dict[str, str]:
        config = {
            "retention.ms": str(self.retention_ms),
            "cleanup.policy": "compact" if self.compacted else "delete",
        }
        config.update(self.extra_config)
        return config


@dataclass(frozen=True, slots=True)
class TopicChange:
    """What applying a topic spec did: created, updated (with the keys changed) or unchanged."""

    name: str
    action: str  # "created" | "updated" | "unchanged" | "drift"
    detail: str = ""


class LogError(RuntimeError):
    """The log could not do what was asked (unreachable broker, delivery failure, ...)."""


class DeliveryError(LogError):
    """Some produced records were not acknowledged; none of them may be treated as written."""


class Producer(Protocol):
    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue a record; it is written (acknowledged) only when `flush` returns."""

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        """Wait for every queued record; return them with their positions, in produce order.

        Raises `DeliveryError` if any record failed or the timeout ran out.
        """
        ...

    def close(self) -> None: ...


class Consumer(Protocol):
    def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        """Up to `max_records` records, waiting at most `timeout_s` for the first."""
        ...

    def commit(self, positions: Mapping[TopicPartition, int]) -> None:
        """Record, durably, the next offset to read for each partition."""

    def committed(self) -> dict[TopicPartition, int]:
        """The committed next offsets of this consumer's group, for its topics."""
        ...

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read `partition` from `offset` next (assigned partitions only)."""

    def close(self) -> None: ...


class EventLog(Protocol):
    """A log of topics split into partitions, with consumer groups."""

    def apply_topics(self, specs: Iterable[TopicSpec]) -> list[TopicChange]: ...

    def partitions_for(self, topic: str) -> int: ...

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The next offset to be written, per partition."""
        ...

    def producer(self) -> Producer: ...

    def consumer(self, group: str, topics: Sequence[str]) -> Consumer: ...

    def close(self) -> None: ...


def next_positions(records: Iterable[Record]) -> dict[TopicPartition, int]:
    """The positions to commit after processing `records`: each partition's last offset + 1."""
    positions: dict[TopicPartition, int] = {}
    for record in records:
        tp = (record.topic, record.partition)
        positions[tp] = max(positions.get(tp, 0), record.offset + 1)
    return positions
