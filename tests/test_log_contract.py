"""One contract suite for the event log, run against both implementations (real Kafka and
the embedded log): per-key order, partitioning, resume from committed offsets, at-least-once
duplicates recognisable by event_id, and bad bytes to the dead letter while good ones pass."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.codec import Codec
from schemas.events import DeadLettered, Envelope
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import Consumer, EventLog, Record, next_positions
from streams.partitioner import partition_for
from streams.reader import DecodingReader, SeenEvents
from streams.schema_store import SchemaStore
from streams.topics import region_topics, topic_name
from streams.writer import EventWriter
from tests.factories import evolved_envelope_schema, notice

CODEC = Codec()


@pytest.fixture(params=["embedded", "kafka"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventLog]:
    if request.param == "embedded":
        opened: EventLog = EmbeddedLog(tmp_path / "log")
    else:
        opened = KafkaLog(request.getfixturevalue("kafka").address)
    yield opened
    opened.close()


@pytest.fixture
def region(log: EventLog) -> str:
    """A fresh region (so fresh topics) per test, with its topics applied."""
    name = f"t{uuid.uuid4().hex[:10]}"
    log.apply_topics(region_topics(name, partitions_scale=0.5))
    return name


def drain(consumer: Consumer, expected: int, timeout_s: float = 60.0) -> list[Record]:
    """Poll until `expected` records arrived (Kafka needs a moment to assign partitions)."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        records.extend(consumer.poll(max_records=expected - len(records), timeout_s=1.0))
    return records


def test_flush_returns_positions_in_produce_order(log: EventLog, region: str) -> None:
    topic = topic_name(region, "lifecycle")
    producer = log.producer()
    for i in range(20):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i % 4}".encode())
    delivered = producer.flush()
    assert [r.value for r in delivered] == [f"v{i}".encode() for i in range(20)]
    ends = log.end_offsets(topic)
    assert sum(ends.values()) == 20
    for r in delivered:
        assert 0 <= r.offset < ends[r.partition]


def test_per_key_order_and_murmur2_partitioning(log: EventLog, region: str) -> None:
    topic = topic_name(region, "lifecycle")
    partitions = log.partitions_for(topic)
    producer = log.producer()
    sent = [(f"i-{i % 10:03d}".encode(), f"{i}".encode()) for i in range(300)]
    for key, value in sent:
        producer.produce(topic, value, key=key)
    producer.flush()
    records = drain(log.consumer(f"g-{uuid.uuid4().hex}", [topic]), len(sent))
    assert len(records) == len(sent)
    for record in records:
        assert record.key is not None
        # Both implementations put a key where Kafka's Java default partitioner would.
        assert record.partition == partition_for(record.key, partitions)
    for key in {k for k, _ in sent}:
        got = [r.value for r in records if r.key == key]
        assert got == [v for k, v in sent if k == key]


def test_resume_from_committed_offsets_after_restart(log: EventLog, region: str) -> None:
    topic = topic_name(region, "lifecycle")
    group = f"g-{uuid.uuid4().hex}"
    producer = log.producer()
    for i in range(100):
        producer.produce(topic, f"{i}".encode(), key=f"k{i % 6}".encode())
    producer.flush()

    first = log.consumer(group, [topic])
    seen = drain(first, 40)
    assert len(seen) == 40
    first.commit(next_positions(seen))
    assert first.committed() == next_positions(seen)
    first.close()

    second = log.consumer(group, [topic])
    rest = drain(second, 60)
    second.close()
    values = sorted(int(r.value or b"") for r in seen + rest)
    assert values == list(range(100)), "every record exactly once across the restart"


def test_redelivered_events_are_recognised_by_event_id(log: EventLog, region: str) -> None:
    topic = topic_name(region, "lifecycle")
    group = f"g-{uuid.uuid4().hex}"
    events = [notice(region, i % 5, seq=i) for i in range(30)]
    producer = log.producer()
    for event in events:
        producer.produce(topic, CODEC.encode(event), key=event.key.encode())
    # A producer that retries at the application level writes the same event again.
    producer.produce(topic, CODEC.encode(events[3]), key=events[3].key.encode())
    producer.flush()

    seen = SeenEvents()
    first = log.consumer(group, [topic])
    batch1 = [CODEC.decode(r.value or b"", r.origin) for r in drain(first, 31)]
    first.close()  # crashed before committing: everything comes again
    second = log.consumer(group, [topic])
    batch2 = [CODEC.decode(r.value or b"", r.origin) for r in drain(second, 31)]
    second.close()

    fresh = [e for e in batch1 + batch2 if seen.first_time(e.event_id)]
    assert len(batch1) == len(batch2) == 31
    assert sorted(e.event_id for e in fresh) == sorted(e.event_id for e in events)
    assert {e.event_id: e for e in fresh} == {e.event_id: e for e in events}


def test_bad_bytes_go_to_the_dead_letter_and_good_records_pass(log: EventLog, region: str) -> None:
    topic = topic_name(region, "lifecycle")
    dead_topic = topic_name(region, "deadletter")
    good = [notice(region, i, seq=i) for i in range(6)]
    encoded = CODEC.encode(good[0])
    bad_values = {
        b"not avro at all": "bad_magic",
        encoded[:7]: "truncated",
        encoded[:-3]: "truncated",
        b"\xc3\x01" + b"\x00" * 8 + encoded[10:]: "unknown_schema",
        b"": "truncated",
    }
    producer = log.producer()
    for i, event in enumerate(good):
        producer.produce(topic, CODEC.encode(event), key=event.key.encode())
        if i < len(bad_values):
            producer.produce(topic, list(bad_values)[i], key=event.key.encode())
    producer.flush()

    group = f"g-{uuid.uuid4().hex}"
    reader = DecodingReader(log.consumer(group, [topic]), CODEC, log.producer(), region, "test")
    events: list[Envelope] = []
    total = len(good) + len(bad_values)
    deadline = time.monotonic() + 60
    handled = 0
    while handled < total and time.monotonic() < deadline:
        batch = reader.poll(max_records=total - handled, timeout_s=1.0)
        handled += len(batch.events) + batch.dead_lettered
        events.extend(e.envelope for e in batch.events)
        reader.commit(batch)
    assert sorted(e.event_id for e in events) == sorted(e.event_id for e in good)

    dead = drain(log.consumer(f"dl-{uuid.uuid4().hex}", [dead_topic]), len(bad_values))
    assert len(dead) == len(bad_values)
    payloads = [CODEC.decode(r.value or b"", r.origin).payload for r in dead]
    letters = [p for p in payloads if isinstance(p, DeadLettered)]
    assert len(letters) == len(dead)
    assert sorted(letter.raw_value for letter in letters) == sorted(bad_values)
    for letter in letters:
        assert letter.reason.startswith(bad_values[letter.raw_value]), letter.reason
        assert letter.origin_topic == topic
        assert f"{topic}[{letter.origin_partition}]@{letter.origin_offset}" in letter.reason
    # The group's position moved past everything, bad records included.
    assert sum(reader.consumer.committed().values()) == total


def test_an_older_reader_resolves_a_newer_writer_through_the_schema_topic(
    log: EventLog, region: str
) -> None:
    newer = Codec(reader_schema=evolved_envelope_schema())
    writer = EventWriter(log, newer, region)
    events = [notice(region, i, seq=i) for i in range(5)]
    for event in events:
        writer.write(event)
    writer.close()

    older = Codec()  # this release has never seen the newer schema
    assert newer.fingerprint not in older.known_fingerprints
    topic = topic_name(region, "lifecycle")
    reader = DecodingReader(
        log.consumer(f"g-{uuid.uuid4().hex}", [topic]),
        older,
        log.producer(),
        region,
        "test",
        schema_store=SchemaStore(log, region, older),
    )
    decoded: list[Envelope] = []
    deadline = time.monotonic() + 60
    while len(decoded) < len(events) and time.monotonic() < deadline:
        batch = reader.poll(max_records=10, timeout_s=1.0)
        assert batch.dead_lettered == 0
        decoded.extend(d.envelope for d in batch.events)
    assert sorted(decoded, key=lambda e: e.event_id) == sorted(events, key=lambda e: e.event_id)


def test_a_timed_out_flush_does_not_leak_into_the_next_batch() -> None:
    """Delivery reports that arrive after their flush gave up stay with that batch."""
    from streams.log import DeliveryError

    producer = KafkaLog("127.0.0.1:9").producer({"message.timeout.ms": 1500})
    producer.produce("nowhere", b"first")
    with pytest.raises(DeliveryError):
        producer.flush(timeout_s=0.5)  # gives up before the record's own timeout
    time.sleep(1.5)  # the timed-out report arrives now, after its flush
    producer.produce("nowhere", b"second")  # must not be disturbed by the late report
    with pytest.raises(DeliveryError, match="1 of 1"):
        producer.flush(timeout_s=5.0)
