"""The bare references of `bench/log.py`: the same work with the libraries alone.

Both sides start and end at the same typed envelopes (`schemas.events.Envelope`): the project
turns them into Avro records and back through the generated `to_avro`/`from_avro`, and so do
these loops, in the fewest steps the libraries allow (one parsed schema, no resolution, no
framing checks, no dead letters, no per-record delivery reports, no checksums, no partitions).
"""

from __future__ import annotations

import contextlib
import heapq
import io
import logging
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import fastavro
from confluent_kafka import Consumer, Producer

from schemas.catalogue import envelope_schema
from schemas.codec import SINGLE_OBJECT_MAGIC, schema_fingerprint, strip_logical_types
from schemas.events import PAYLOAD_TYPES, Envelope

_KAFKA_LOG = logging.getLogger("bench.kafka")  # librdkafka's notices, off stderr as in streams
# What the project's producer sets (streams.kafka.KafkaProducer), so both do the same work.
PRODUCER_CONFIG: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "partitioner": "murmur2_random",
    "linger.ms": 5,
    "compression.type": "lz4",
}
CONSUMER_CONFIG: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "enable.partition.eof": False,
}


def parsed_schema() -> Any:
    """The envelope schema as fastavro parses it (without logical types, as the events hold
    timestamps as integers and uuids as strings)."""
    return fastavro.parse_schema(strip_logical_types(envelope_schema()), _force=True)


def header() -> bytes:
    """Avro single-object framing: the magic and the writer schema's fingerprint."""
    return SINGLE_OBJECT_MAGIC + struct.pack("<Q", schema_fingerprint(envelope_schema()))


def to_record(envelope: Envelope) -> dict[str, Any]:
    payload = envelope.payload
    return {
        "event_id": envelope.event_id,
        "event_type": envelope.event_type,
        "occurred_at": envelope.occurred_at,
        "recorded_at": envelope.recorded_at,
        "region": envelope.region,
        "key": envelope.key,
        "causation_id": envelope.causation_id,
        "correlation_id": envelope.correlation_id,
        "producer": envelope.producer,
        "payload": (payload.RECORD_NAME, payload.to_avro()),
    }


def from_record(record: Mapping[str, Any]) -> Envelope:
    name, body = record["payload"]
    return Envelope(
        event_id=record["event_id"],
        event_type=record["event_type"],
        occurred_at=record["occurred_at"],
        recorded_at=record["recorded_at"],
        region=record["region"],
        key=record["key"],
        causation_id=record["causation_id"],
        correlation_id=record["correlation_id"],
        producer=record["producer"],
        payload=PAYLOAD_TYPES[name].from_avro(body),
    )


def kafka_produce(
    bootstrap: str, events: list[Envelope], topic_of: Callable[[Envelope], str], flush_every: int
) -> None:
    """confluent-kafka's Producer and fastavro's schemaless writer, flushing every
    `flush_every` events."""
    producer = Producer({"bootstrap.servers": bootstrap, "logger": _KAFKA_LOG, **PRODUCER_CONFIG})
    schema, framing = parsed_schema(), header()
    write, produce, poll = fastavro.schemaless_writer, producer.produce, producer.poll
    for i, envelope in enumerate(events, 1):
        out = io.BytesIO()
        out.write(framing)
        write(out, schema, to_record(envelope))
        value, key, topic = out.getvalue(), envelope.key.encode(), topic_of(envelope)
        while True:
            try:
                produce(topic, value, key=key, timestamp=envelope.occurred_at // 1000)
                break
            except BufferError:
                poll(0.1)
        poll(0)
        if i % flush_every == 0:
            producer.flush(30)
    if producer.flush(30):
        raise RuntimeError("bare producer: records not acknowledged in 30 s")


def kafka_consume(bootstrap: str, group: str, topics: list[str], count: int) -> Iterator[int]:
    """Consume and decode `count` events from the start of `topics` with confluent-kafka's
    Consumer and fastavro's schemaless reader. Yields the number decoded of the first records
    (the clock starts after them: a new group's join is not counted), then the number
    decoded after that."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "logger": _KAFKA_LOG, **CONSUMER_CONFIG}
    )
    consumer.subscribe(topics)
    schema, read = parsed_schema(), fastavro.schemaless_reader

    def decode(messages: list[Any]) -> int:
        for message in messages:
            stream = io.BytesIO(message.value())
            stream.seek(10)  # the single-object header
            record: Any = read(stream, schema, None, return_record_name=True)
            from_record(record)
        return len(messages)

    first = 0
    while not first:
        first = decode(consumer.consume(min(5000, count), timeout=1.0))
    yield first
    decoded = first
    while decoded < count:
        decoded += decode(consumer.consume(min(5000, count - decoded), timeout=1.0))
    consumer.close()
    yield decoded - first


def kafka_consume_merged(bootstrap: str, group: str, topics: list[str], count: int) -> int:
    """Consume and decode `count` events as `kafka_consume` does, keeping each envelope with
    its topic, then put them in history order (occurred_at, topic) with one sort; returns
    how many."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "logger": _KAFKA_LOG, **CONSUMER_CONFIG}
    )
    consumer.subscribe(topics)
    schema, read = parsed_schema(), fastavro.schemaless_reader
    keyed: list[tuple[int, Any, Any, Any, Envelope]] = []
    while len(keyed) < count:
        for message in consumer.consume(min(5000, count - len(keyed)), timeout=1.0):
            stream = io.BytesIO(message.value())  # type: ignore[arg-type]
            stream.seek(10)  # the single-object header
            record: Any = read(stream, schema, None, return_record_name=True)
            envelope = from_record(record)
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            keyed.append((envelope.occurred_at, topic, partition, offset, envelope))
    consumer.close()
    keyed.sort(key=_history_order)
    return len(keyed)


def _history_order(item: tuple[int, Any, Any, Any, Envelope]) -> tuple[int, Any, Any, Any]:
    return item[0], item[1], item[2], item[3]


def container_write(
    root: Path, events: list[Envelope], topic_of: Callable[[Envelope], str], flush_every: int
) -> None:
    """fastavro's container writer, one file per topic, each flushed and fsynced every
    `flush_every` events (the embedded log fsyncs every flush)."""
    root.mkdir(parents=True)
    schema = parsed_schema()
    files: dict[str, BinaryIO] = {}
    writers: dict[str, fastavro.write.Writer] = {}
    for i, envelope in enumerate(events, 1):
        topic = topic_of(envelope)
        writer = writers.get(topic)
        if writer is None:
            files[topic] = (root / f"{topic}.avro").open("wb")
            writer = writers[topic] = fastavro.write.Writer(files[topic], schema)
        writer.write(to_record(envelope))
        if i % flush_every == 0:
            _sync(writers, files)
    _sync(writers, files)
    for file in files.values():
        file.close()


def _sync(writers: Mapping[str, fastavro.write.Writer], files: Mapping[str, BinaryIO]) -> None:
    for topic, writer in writers.items():
        writer.flush()
        files[topic].flush()
        os.fsync(files[topic].fileno())


def container_read(root: Path) -> int:
    """fastavro's container reader over every file `container_write` wrote, to envelopes."""
    decoded = 0
    for path in sorted(root.glob("*.avro")):
        with path.open("rb") as file:
            for record in fastavro.reader(file, return_record_name=True):
                from_record(record)  # type: ignore[arg-type]
                decoded += 1
    return decoded


def container_read_merged(root: Path) -> int:
    """fastavro's container reader over every file, to envelopes, merged in history order
    (occurred_at, then topic) with `heapq.merge` (each file is in its writer's order)."""
    with contextlib.ExitStack() as files:
        iterators = [
            _keyed(path.stem, files.enter_context(path.open("rb")))
            for path in sorted(root.glob("*.avro"))
        ]
        return sum(1 for _ in heapq.merge(*iterators, key=_merge_key))


def _keyed(topic: str, file: BinaryIO) -> Iterator[tuple[int, str, Envelope]]:
    record: Any
    for record in fastavro.reader(file, return_record_name=True):
        envelope = from_record(record)
        yield envelope.occurred_at, topic, envelope


def _merge_key(item: tuple[int, str, Envelope]) -> tuple[int, str]:
    return item[0], item[1]
