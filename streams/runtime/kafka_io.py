"""The Kafka clients of the Faust runtime's own parts (sequencer, router, journal readers).

A producer that can name a partition (clocks and progress markers go to every partition of a
stage topic) and reports the offset each record got; a reader of one partition from an offset.
Both use the project's producer settings (idempotent, ``acks=all``, murmur2 keys, as Faust's
aiokafka producer partitions them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer as _Consumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as _Producer

from streams.log import DeliveryError, FlushTimeoutError, LogError, LogTimeoutError

Headers = tuple[tuple[str, bytes], ...]
_LOG = logging.getLogger("spotcap.runtime.kafka")


@dataclass(frozen=True, slots=True)
class Delivered:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Message:
    """One record read back, headers as a dict."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes]


class RuntimeProducer:
    """Produces records (to a named partition or by key) and flushes with their offsets."""

    def __init__(self, bootstrap: str, config: Mapping[str, Any] | None = None) -> None:
        self._producer = _Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "compression.type": "lz4",
                "logger": logging.getLogger("spotcap.kafka.librdkafka"),
                **(config or {}),
            }
        )
        self._reports: list[Delivered | KafkaError | None] = []

    def produce(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        reports = self._reports
        slot = len(reports)
        reports.append(None)

        def delivered(error: KafkaError | None, message: Any) -> None:
            reports[slot] = (
                error
                if error is not None
                else Delivered(message.topic(), message.partition(), message.offset())
            )

        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        deadline = time.monotonic() + 30.0
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                if time.monotonic() > deadline:
                    reports.pop()
                    raise LogTimeoutError(
                        f"the producer's queue to {topic} stayed full for 30 s (the broker "
                        "takes no records)"
                    ) from None
                self._producer.poll(0.1)
            except KafkaException as error:
                reports.pop()
                raise LogError(f"could not produce to {topic}: {error}") from error
        self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> list[Delivered]:
        """Wait for every queued record; their positions in produce order, or an error."""
        remaining = self._producer.flush(timeout_s)
        reports, self._reports = self._reports, []
        if remaining:
            raise FlushTimeoutError(
                f"{remaining} of {len(reports)} records not acknowledged within {timeout_s} s"
            )
        errors = [r for r in reports if not isinstance(r, Delivered)]
        if errors:
            raise DeliveryError(f"{len(errors)} of {len(reports)} records failed: {errors[0]}")
        return [r for r in reports if isinstance(r, Delivered)]

    def close(self) -> None:
        self._producer.flush(10.0)


class PartitionReader:
    """Reads one partition from an offset, outside any consumer group."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int = 0,
        *,
        start: int = 0,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.position = start  # the next offset to read
        self._consumer = _Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"spotcap-reader-{topic}",  # never joined: partitions are assigned
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "logger": logging.getLogger("spotcap.kafka.librdkafka"),
                **(config or {}),
            }
        )
        self._consumer.assign([TopicPartition(topic, partition, start)])

    def end(self, timeout_s: float = 10.0) -> int:
        """The next offset to be written."""
        try:
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, self.partition), timeout=timeout_s
            )
        except KafkaException as error:
            raise LogError(f"could not read the end of {self.topic}: {error}") from error
        return int(high)

    def seek(self, offset: int) -> None:
        self.position = offset
        self._consumer.seek(TopicPartition(self.topic, self.partition, offset))

    def read(self, max_records: int = 1000, timeout_s: float = 1.0) -> list[Message]:
        """Up to `max_records` records from the position, waiting at most `timeout_s`."""
        out: list[Message] = []
        for m in self._consumer.consume(max_records, timeout_s):
            error = m.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    _LOG.warning("reading %s: %s", self.topic, error)
                continue
            offset = m.offset()
            if offset is None or offset < self.position:
                continue  # from before a seek
            self.position = offset + 1
            raw = m.headers() or []
            pairs = raw.items() if isinstance(raw, dict) else raw
            headers = {str(k): v for k, v in pairs if isinstance(v, bytes)}
            out.append(Message(offset, m.key(), m.value(), headers))
        return out

    def read_until(self, last: int, timeout_s: float = 30.0) -> list[Message]:
        """Every record up to offset `last` (inclusive), which must exist; bounded wait."""
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while self.position <= last:
            if time.monotonic() > deadline:
                raise LogTimeoutError(
                    f"{self.topic}[{self.partition}] gave no record up to offset {last} within "
                    f"{timeout_s:.0f} s (at {self.position}); is the broker reachable?"
                )
            for m in self.read(min(5000, last - self.position + 1), 0.5):
                if m.offset <= last:
                    out.append(m)
                else:
                    self.seek(last + 1)  # read past: the rest is read again next time
                    break
        return out

    def close(self) -> None:
        self._consumer.close()


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Where one partition of a consumer group stands, as the broker says."""

    committed: int
    """The group's committed offset (-1: none)."""
    low: int
    """The partition's first offset (retention may have deleted the ones before)."""
    end: int
    """The next offset to be written."""


class GroupOffsets:
    """Asks the broker where a consumer group stands on a topic's partitions, never joining
    the group (a worker's own check of what its Faust consumer is given)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self._consumer = _Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,  # only to ask its committed offsets: never subscribed
                "enable.auto.commit": False,
                "logger": logging.getLogger("spotcap.kafka.librdkafka"),
            }
        )

    def read(self, partitions: list[int], timeout_s: float = 10.0) -> dict[int, PartitionOffsets]:
        """Each partition's offsets; `LogError` if the broker does not answer in time."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        try:
            committed = self._consumer.committed(tps, timeout=timeout_s)
            out: dict[int, PartitionOffsets] = {}
            for tp in committed:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, tp.partition), timeout=timeout_s
                )
                out[tp.partition] = PartitionOffsets(max(-1, int(tp.offset)), int(low), int(high))
        except KafkaException as error:
            raise LogError(f"could not read where {self.topic} stands: {error}") from error
        return out

    def close(self) -> None:
        self._consumer.close()
