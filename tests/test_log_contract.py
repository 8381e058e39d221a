"""One contract suite for the event log, run against both implementations (real Kafka and
the embedded log): per-key order, partitioning, resume from committed offsets, at-least-once
duplicates recognisable by event_id, and bad bytes to the dead letter while good ones pass."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from infra import servers
from infra.servers.process import free_ports
from schemas.codec import Codec
from schemas.events import DeadLettered, Envelope
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import (
    CloseTimeoutError,
    CommitTimeoutError,
    Consumer,
    EventLog,
    FlushTimeoutError,
    LogError,
    ProduceTimeoutError,
    Record,
    TopicPartition,
    next_positions,
)
from streams.partitioner import partition_for
from streams.reader import DecodingReader, SeenEvents
from streams.schema_store import SchemaLoadTimeoutError, SchemaStore, load_schemas
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
    producer.close(timeout_s=0.1)  # nothing is queued any more


# -- the consumer seam: assignment, seek on assignment, pause/resume, bounded waits ---------


class Listener:
    """Records what a consumer's listener hears; seeks newly assigned partitions to `stored`
    (as a projection does with the offsets kept in its own database)."""

    def __init__(
        self,
        stored: dict[TopicPartition, int] | None = None,
        paused: Sequence[TopicPartition] = (),
    ) -> None:
        self.stored = stored or {}
        self.paused = list(paused)
        self.heard: list[tuple[str, list[TopicPartition]]] = []

    def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        self.heard.append(("assign", sorted(partitions)))
        for tp in partitions:
            if tp in self.stored:
                consumer.seek(*tp, self.stored[tp])
        consumer.pause([tp for tp in self.paused if tp in partitions])

    def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        self.heard.append(("revoke", sorted(partitions)))


def produce_numbered(log: EventLog, topic: str, count: int) -> list[Record]:
    producer = log.producer()
    for i in range(count):
        producer.produce(topic, f"{i}".encode(), key=f"k{i % 17}".encode())
    return producer.flush()


def test_the_listener_hears_assignment_at_poll_and_revocation_at_close(
    log: EventLog, region: str
) -> None:
    topic = topic_name(region, "lifecycle")
    produce_numbered(log, topic, 30)
    every = [(topic, n) for n in range(log.partitions_for(topic))]
    listener = Listener()
    consumer = log.consumer(f"g-{uuid.uuid4().hex}", [topic], listener=listener)
    assert consumer.assignment() == []
    assert len(drain(consumer, 30)) == 30
    assert listener.heard == [("assign", every)]
    assert sorted(consumer.assignment()) == every
    consumer.close()
    assert listener.heard == [("assign", every), ("revoke", every)]
    assert consumer.poll_errors == 0


def test_a_seek_inside_on_assign_starts_each_partition_there(log: EventLog, region: str) -> None:
    topic = topic_name(region, "lifecycle")
    written = produce_numbered(log, topic, 120)
    ends = log.end_offsets(topic)
    group = f"g-{uuid.uuid4().hex}"
    # The group's own committed offsets say "from 1"; the projection's database says otherwise
    # and wins, for every partition, including one it sends back to the start.
    first = log.consumer(group, [topic])
    drain(first, 1)
    first.commit({(topic, n): min(1, end) for n, end in ends.items()})
    first.close()
    stored = {(topic, n): end // 2 for n, end in ends.items()}
    stored[(topic, 0)] = 0
    listener = Listener(stored)
    consumer = log.consumer(group, [topic], listener=listener)
    expected = sorted(
        (r.partition, r.offset) for r in written if r.offset >= stored[(topic, r.partition)]
    )
    got = drain(consumer, len(expected))
    consumer.poll(max_records=100, timeout_s=0.5)  # nothing more may come
    assert sorted((r.partition, r.offset) for r in got) == expected
    consumer.close()


def test_a_paused_partition_is_held_back_and_resumes_where_it_stopped(
    log: EventLog, region: str
) -> None:
    topic = topic_name(region, "lifecycle")
    written = produce_numbered(log, topic, 300)
    consumer = log.consumer(f"g-{uuid.uuid4().hex}", [topic])
    got = drain(consumer, 5)
    held = (topic, got[0].partition)
    consumer.pause([held])
    assert consumer.paused() == [held]
    others = [r for r in written if r.partition != held[1]]
    seen_before = sum(1 for r in got if r.partition != held[1])
    got += drain(consumer, len(others) - seen_before)
    consumer.poll(max_records=500, timeout_s=0.5)  # the paused partition stays quiet
    assert [r for r in got if r.partition == held[1]] == [
        r for r in got[:5] if r.partition == held[1]
    ], "nothing from the paused partition after the pause"
    consumer.resume([held])
    assert consumer.paused() == []
    got += drain(consumer, len(written) - len(got))
    consumer.close()
    assert sorted((r.partition, r.offset) for r in got) == sorted(
        (r.partition, r.offset) for r in written
    ), "every record exactly once across the pause"


def test_a_pause_inside_on_assign_holds_the_partition_from_the_start(
    log: EventLog, region: str
) -> None:
    topic = topic_name(region, "lifecycle")
    written = produce_numbered(log, topic, 120)
    held = (topic, 1)
    consumer = log.consumer(
        f"g-{uuid.uuid4().hex}", [topic], listener=Listener({held: 3}, paused=[held])
    )
    others = [r for r in written if r.partition != held[1]]
    got = drain(consumer, len(others))
    consumer.poll(max_records=500, timeout_s=0.5)
    assert sorted((r.partition, r.offset) for r in got) == sorted(
        (r.partition, r.offset) for r in others
    )
    assert consumer.paused() == [held]
    consumer.resume([held])
    rest = drain(consumer, sum(1 for r in written if r.partition == held[1]) - 3)
    assert [r.offset for r in rest] == [
        r.offset for r in written if r.partition == held[1] and r.offset >= 3
    ], "sought and paused inside on_assign: starts at the stored offset once resumed"
    consumer.close()


def test_seek_pause_and_resume_refuse_partitions_not_assigned(log: EventLog, region: str) -> None:
    topic = topic_name(region, "lifecycle")
    consumer = log.consumer(f"g-{uuid.uuid4().hex}", [topic])
    with pytest.raises(LogError, match="not assigned"):
        consumer.seek(topic, 0, 0)  # before the first assignment
    with pytest.raises(LogError, match="not assigned"):
        consumer.pause([(topic_name(region, "market"), 0)])
    consumer.close()


def test_a_flush_out_of_time_raises_the_named_error(log: EventLog, region: str) -> None:
    topic = topic_name(region, "lifecycle")
    producer = log.producer()
    for i in range(50):
        producer.produce(topic, b"x", key=f"k{i}".encode())
    with pytest.raises(FlushTimeoutError, match=r"within 0\.0 s"):
        producer.flush(timeout_s=0.0)
    assert producer.flush() == [], "the queue is empty after a flush, whatever its outcome"


def test_the_schema_store_load_fails_whole_instead_of_returning_a_part(
    log: EventLog, region: str
) -> None:
    newer = Codec(reader_schema=evolved_envelope_schema())
    writer = EventWriter(log, newer, region)
    events = [notice(region, i, seq=i) for i in range(5)]
    for event in events:
        writer.write(event)
    writer.close()
    with pytest.raises(SchemaLoadTimeoutError, match="read to 0 of 1 records"):
        load_schemas(log, region, timeout_s=0.0)
    assert newer.fingerprint in load_schemas(log, region)

    # A reader whose schema store cannot load holds the records: no dead letter, read again.
    older = Codec()
    topic = topic_name(region, "lifecycle")
    group = f"g-{uuid.uuid4().hex}"
    dead_letters = log.producer()
    stuck = DecodingReader(
        log.consumer(group, [topic]),
        older,
        dead_letters,
        region,
        "test",
        schema_store=SchemaStore(log, region, older, load_timeout_s=0.0),
    )
    with pytest.raises(SchemaLoadTimeoutError):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stuck.poll(max_records=10, timeout_s=1.0)
    assert stuck.dead_letters.sent == 0
    working = DecodingReader(
        stuck.consumer,
        older,
        dead_letters,
        region,
        "test",
        schema_store=SchemaStore(log, region, older),
    )
    decoded: list[Envelope] = []
    while len(decoded) < len(events) and time.monotonic() < deadline:
        decoded.extend(d.envelope for d in working.poll(max_records=10, timeout_s=1.0).events)
    working.consumer.close()
    assert sorted(e.event_id for e in decoded) == sorted(e.event_id for e in events)


def test_kafka_rebalance_revokes_from_one_member_and_assigns_to_the_next(
    kafka: servers.Server,
) -> None:
    """Seek on a partition newly assigned by a rebalance (not only at the first assignment)."""
    log = KafkaLog(kafka.address)
    region = f"t{uuid.uuid4().hex[:10]}"
    log.apply_topics(region_topics(region, partitions_scale=0.5))
    topic = topic_name(region, "lifecycle")
    written = produce_numbered(log, topic, 120)
    group = f"g-{uuid.uuid4().hex}"
    one_listener = Listener()
    one = log.consumer(group, [topic], listener=one_listener)
    drain(one, 1)
    every = sorted(one.assignment())
    # The second member's "database" says: start every partition it gets at offset 2.
    two_listener = Listener({tp: 2 for tp in every})
    two = log.consumer(group, [topic], listener=two_listener)
    got_two: list[Record] = []
    deadline = time.monotonic() + 90
    while not two.assignment() and time.monotonic() < deadline:
        one.poll(max_records=500, timeout_s=0.2)  # both must poll for the group to rebalance
        got_two.extend(two.poll(max_records=500, timeout_s=0.2))
    moved = sorted(two.assignment())
    assert moved and ("revoke", every) in one_listener.heard
    assert sorted(one.assignment()) == sorted(set(every) - set(moved))
    while time.monotonic() < deadline and len(got_two) < sum(
        1 for r in written if (topic, r.partition) in moved and r.offset >= 2
    ):
        one.poll(max_records=500, timeout_s=0.1)
        got_two.extend(two.poll(max_records=500, timeout_s=0.2))
    assert two_listener.heard[0] == ("assign", moved)
    assert sorted((r.partition, r.offset) for r in got_two) == sorted(
        (r.partition, r.offset) for r in written if (topic, r.partition) in moved and r.offset >= 2
    )
    two.close()
    one.close()


def test_kafka_waits_on_a_stopped_broker_end_with_named_errors() -> None:
    log = KafkaLog("127.0.0.1:9")
    producer = log.producer(
        {"queue.buffering.max.messages": 1, "message.timeout.ms": 60_000},
        queue_full_timeout_s=0.3,
    )
    producer.produce("nowhere", b"fills the queue")
    with pytest.raises(ProduceTimeoutError, match="stayed full"):
        producer.produce("nowhere", b"finds it full")
    with pytest.raises(FlushTimeoutError):
        producer.flush(timeout_s=0.3)
    consumer = log.consumer(f"g-{uuid.uuid4().hex}", ["nowhere"])
    with pytest.raises(CommitTimeoutError, match=r"not confirmed within 0\.5 s"):
        consumer.commit({("nowhere", 0): 1}, timeout_s=0.5)
    # librdkafka's close waits for the commit above, which waits for a coordinator.
    with pytest.raises(CloseTimeoutError, match=r"did not leave the group within 1\.0 s"):
        consumer.close(timeout_s=1.0)


def test_kafka_counts_and_logs_non_fatal_poll_errors(
    kafka: servers.Server, caplog: pytest.LogCaptureFixture
) -> None:
    log = KafkaLog(kafka.address)
    consumer = log.consumer(f"g-{uuid.uuid4().hex}", [f"missing-{uuid.uuid4().hex}"])
    deadline = time.monotonic() + 30
    with caplog.at_level("WARNING", logger="spotcap.kafka"):
        while consumer.poll_errors == 0 and time.monotonic() < deadline:
            assert consumer.poll(timeout_s=0.5) == []
    consumer.close()
    assert consumer.poll_errors >= 1
    assert any("not fatal" in message for message in caplog.messages)


def test_a_kafka_consumer_says_once_that_the_broker_cannot_be_reached(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing listens at the address: the consumer waits (librdkafka keeps trying) but says
    so, once per outage, instead of idling in silence."""
    (port,) = free_ports(1)
    consumer = KafkaLog(f"127.0.0.1:{port}").consumer(f"g-{uuid.uuid4().hex}", ["anything"])
    deadline = time.monotonic() + 30
    with caplog.at_level("WARNING", logger="spotcap.kafka"):
        while consumer.health.down is None and time.monotonic() < deadline:
            assert consumer.poll(timeout_s=0.5) == []
        for _ in range(3):  # still down: no second warning
            assert consumer.poll(timeout_s=0.5) == []
    consumer.close(timeout_s=5.0)  # never joined a group: nothing to wait for
    warnings = [m for m in caplog.messages if "cannot be reached" in m]
    assert len(warnings) == 1, caplog.messages
    assert consumer.group in warnings[0] and f"127.0.0.1:{port}" in warnings[0]
