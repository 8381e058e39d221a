"""The bare references of `bench/log.py` and `bench/codec.py`: the same work with the libraries
alone (fastavro, confluent-kafka and the standard library; no module of spotcap's but the
envelope's schema definition, `schemas.catalogue.envelope_schema`, read at import).

Both sides start and end at typed envelopes. The project's are its generated classes
(`schemas.events`); these loops have their own, made here from the schema with the standard
library: one frozen dataclass per record (`make_dataclass`), arrays as tuples, maps
read-only (`MappingProxyType`), the nested records as dataclasses, the payload's record named
by its class. To and from fastavro's dicts in the fewest steps the libraries allow (one parsed
schema, no resolution, no framing checks, no dead letters, no per-record delivery reports, no
checksums, no partitions). The single-object header is the Avro specification's: the magic
``c3 01`` and the little-endian CRC-64-AVRO fingerprint of the schema's canonical form
(fastavro's `to_parsing_canonical_form` and `fingerprint`); `tests/test_log_bare.py` checks
these bytes are the codec's, for an event of every type.
"""

from __future__ import annotations

import contextlib
import heapq
import io
import logging
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import make_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO

import fastavro
from confluent_kafka import Consumer, Producer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas.catalogue import envelope_schema

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
MAGIC = b"\xc3\x01"  # Avro single-object encoding
HEADER_BYTES = 10  # the magic and the 8-byte fingerprint

Envelope = Any  # an instance of this module's envelope dataclass (made from the schema below)


def _without_logical_types(schema: Any) -> Any:
    """The events hold timestamps as integers and uuids as strings: no logical types."""
    if isinstance(schema, dict):
        return {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_without_logical_types(s) for s in schema]
    return schema


_RAW = envelope_schema()
_PARSED = fastavro.parse_schema(_without_logical_types(_RAW), _force=True)


def parsed_schema() -> Any:
    """The envelope schema as fastavro parses it, without logical types."""
    return _PARSED


def header() -> bytes:
    """Avro single-object framing: the magic and the writer schema's fingerprint."""
    canonical = to_parsing_canonical_form(_PARSED)
    return MAGIC + struct.pack("<Q", int(fingerprint(canonical, "CRC-64-AVRO"), 16))


# -- the typed envelopes, from the schema ---------------------------------------------------------


def _records(schema: Any, namespace: str, out: dict[str, dict[str, Any]]) -> None:
    """Every record the schema defines, by full name."""
    if isinstance(schema, list):
        for s in schema:
            _records(s, namespace, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            name = schema["name"]
            ns = schema.get("namespace", namespace)
            full = name if "." in name else f"{ns}.{name}"
            out[full] = schema
            for f in schema["fields"]:
                _records(f["type"], full.rpartition(".")[0], out)
        elif kind == "array":
            _records(schema["items"], namespace, out)
        elif kind == "map":
            _records(schema["values"], namespace, out)
        elif isinstance(kind, dict | list):
            _records(kind, namespace, out)


_RECORDS: dict[str, dict[str, Any]] = {}
_records(_RAW, "", _RECORDS)
_CLASSES = {
    full: make_dataclass(full.rpartition(".")[2], [f["name"] for f in r["fields"]], frozen=True)
    for full, r in _RECORDS.items()
}  # fmt: skip
EnvelopeClass = _CLASSES.pop(f"{_RAW.get('namespace', 'spotcap')}.{_RAW['name']}")


def _branch(type_: Any) -> Any:
    """A field's type without its null branch."""
    if isinstance(type_, list):
        rest = [t for t in type_ if t != "null"]
        return rest[0] if len(rest) == 1 else rest
    return type_


def _record_name(type_: Any) -> str | None:
    for full, r in _RECORDS.items():
        if type_ is r or type_ == full:
            return full
    return None


Fix = Callable[[Any], Any]


def _fixes(record: Mapping[str, Any]) -> tuple[list[tuple[str, Fix]], list[tuple[str, Fix]]]:
    """Per array or map field: how fastavro's value becomes the typed one, and back."""
    reads: list[tuple[str, Fix]] = []
    writes: list[tuple[str, Fix]] = []
    for f in record["fields"]:
        t = _branch(f["type"])
        if not isinstance(t, dict) or t.get("type") not in ("array", "map"):
            continue
        if t["type"] == "map":
            reads.append((f["name"], MappingProxyType))
            writes.append((f["name"], dict))
            continue
        nested = _record_name(t["items"])
        if nested is None:
            reads.append((f["name"], tuple))  # fastavro writes a tuple as it writes a list
            continue
        reads.append((f["name"], _typed_records(nested)))
        writes.append((f["name"], _record_dicts(nested)))
    return reads, writes


def _typed_records(name: str) -> Fix:
    cls = _CLASSES[name]

    def typed(values: list[dict[str, Any]]) -> tuple[Any, ...]:
        return tuple([cls(**v) for v in values])

    return typed


def _record_dicts(name: str) -> Fix:
    def dicts(values: tuple[Any, ...]) -> list[dict[str, Any]]:
        return [v.__dict__.copy() for v in values]

    return dicts


_PAYLOADS = [full for full in _RECORDS if full.startswith("spotcap.events.")]
_READ = {full: (_CLASSES[full], *_fixes(_RECORDS[full])[:1]) for full in _PAYLOADS}
_WRITE = {_CLASSES[full]: (full, _fixes(_RECORDS[full])[1]) for full in _PAYLOADS}
# Each payload class's topic, from the schema's own attribute.
_TOPICS = {_CLASSES[full]: _RECORDS[full]["spotcap.topic"] for full in _PAYLOADS}


def to_record(envelope: Envelope) -> dict[str, Any]:
    """An envelope as fastavro writes it, its payload union branch named."""
    payload = envelope.payload
    name, fixes = _WRITE[type(payload)]
    body = payload.__dict__.copy()
    for field, fix in fixes:
        body[field] = fix(body[field])
    record: dict[str, Any] = envelope.__dict__.copy()
    record["payload"] = (name, body)
    return record


def from_record(record: dict[str, Any]) -> Envelope:
    """What fastavro read (with `return_record_name`) as a typed envelope (`record` is
    reused)."""
    name, body = record["payload"]
    cls, fixes = _READ[name]
    for field, fix in fixes:
        body[field] = fix(body[field])
    record["payload"] = cls(**body)
    return EnvelopeClass(**record)


def topic_router(region: str) -> Callable[[Envelope], str]:
    """An envelope's topic in `region` (``region.topic``, the topic its record names)."""
    names = {cls: f"{region}.{topic}" for cls, topic in _TOPICS.items()}

    def topic_of(envelope: Envelope) -> str:
        return names[type(envelope.payload)]

    return topic_of


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
