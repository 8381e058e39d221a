"""The embedded log's own guarantees beyond the shared contract suite: readers that tail a
growing log across segment rolls, a writer taking over from another, one member per group,
and segments written in the earlier format (no checksum)."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pytest

import streams.embedded
from streams.embedded import EmbeddedLog
from streams.log import LogError, Record
from streams.segment import sync_marker
from streams.topics import region_topics, topic_name

REGION = "emb"
TOPIC = topic_name(REGION, "lifecycle")


def write(log: EmbeddedLog, values: range, key: bytes = b"i-1") -> list[Record]:
    producer = log.producer()
    for n in values:
        producer.produce(TOPIC, b"v%06d" % n, key=key)
    return producer.flush()


def read_all(log: EmbeddedLog, group: str) -> list[int]:
    consumer = log.consumer(group, [TOPIC])
    got: list[int] = []
    while records := consumer.poll(1000, timeout_s=0):
        got.extend(int((r.value or b"")[1:]) for r in records)
    consumer.close()
    return got


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams.embedded, "SEGMENT_BYTES", 1200)


@pytest.mark.usefixtures("small_segments")
def test_a_tailing_reader_sees_every_record_across_segment_rolls(tmp_path: Path) -> None:
    writer = EmbeddedLog(tmp_path / "log")
    writer.apply_topics(region_topics(REGION))
    reader = EmbeddedLog(tmp_path / "log")  # its own view, as another process has
    consumer = reader.consumer("tail", [TOPIC])
    seen: list[int] = []
    total = 0
    for burst in (3, 1, 40, 2, 90, 1, 5):
        for n in range(total, total + burst):
            write(writer, range(n, n + 1))  # one flush per record: one block each
        total += burst
        while records := consumer.poll(7, timeout_s=0):  # partial reads, mid-segment
            seen.extend(int((r.value or b"")[1:]) for r in records)
    segments = sorted((tmp_path / "log" / TOPIC).rglob("*.avro"))
    assert len(segments) > 5, "the test must roll segments"
    assert seen == list(range(total))


def test_a_writer_taking_over_continues_the_offsets(tmp_path: Path) -> None:
    first = EmbeddedLog(tmp_path / "log")
    first.apply_topics(region_topics(REGION))
    write(first, range(1))
    assert read_all(first, "a") == [0]  # `first` now holds a view of the log
    first.close()  # gives up the writer lock

    second = EmbeddedLog(tmp_path / "log")
    write(second, range(1, 4))
    second.close()

    (record,) = write(first, range(4, 5))  # takes the lock again: its view is stale
    assert record.offset == 4
    assert read_all(EmbeddedLog(tmp_path / "log"), "check") == [0, 1, 2, 3, 4]


def test_a_group_has_one_member(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics(REGION))
    member = log.consumer("g", [TOPIC])
    with pytest.raises(LogError, match="already has a member"):
        EmbeddedLog(tmp_path / "log").consumer("g", [TOPIC])
    member.close()
    EmbeddedLog(tmp_path / "log").consumer("g", [TOPIC]).close()


OLD_FORMAT = {
    "type": "record",
    "name": "LogRecord",
    "namespace": "spotcap.log",
    "fields": [
        {"name": "offset", "type": "long"},
        {"name": "timestamp_ms", "type": "long"},
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"]},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [
                        {"name": "key", "type": "string"},
                        {"name": "value", "type": "bytes"},
                    ],
                },
            },
        },
    ],
}


def test_segments_of_the_earlier_format_are_read_and_not_appended_to(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics(REGION))
    partition_dir = tmp_path / "log" / TOPIC / "0000"
    path = partition_dir / f"{0:020d}.avro"
    rows: list[dict[str, object]] = [
        {"offset": n, "timestamp_ms": n, "key": None, "value": b"v%06d" % n, "headers": []}
        for n in range(3)
    ]
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(OLD_FORMAT), rows, sync_marker=sync_marker(path))
    path.write_bytes(buffer.getvalue())

    producer = log.producer()
    producer.produce(TOPIC, b"v000003")  # no key: partition 0
    (record,) = producer.flush()
    assert record.offset == 3
    assert sorted(p.name for p in partition_dir.glob("*.avro")) == [
        f"{0:020d}.avro",
        f"{3:020d}.avro",
    ], "a new segment in the current format"
    assert read_all(EmbeddedLog(tmp_path / "log"), "check") == [0, 1, 2, 3]


def test_a_record_damaged_on_disk_goes_to_the_dead_letter(tmp_path: Path) -> None:
    from schemas.codec import Codec
    from schemas.events import DeadLettered
    from streams.reader import DecodingReader
    from tests.factories import notice

    codec = Codec()
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics(REGION))
    events = [notice(REGION, 1, seq=n) for n in range(6)]
    producer = log.producer()
    for event in events:
        producer.produce(TOPIC, codec.encode(event), key=event.key.encode())
    producer.flush()
    log.close()
    (segment,) = [p for p in (tmp_path / "log" / TOPIC).rglob("*.avro") if p.stat().st_size > 600]
    data = bytearray(segment.read_bytes())
    data[data.index(events[4].event_id.encode()) + 3] ^= 0x20  # still valid Avro
    segment.write_bytes(bytes(data))

    log = EmbeddedLog(tmp_path / "log")  # reads the damaged file, not what it wrote
    reader = DecodingReader(log.consumer("g", [TOPIC]), codec, log.producer(), REGION, "test")
    batch = reader.poll(100, timeout_s=0)
    assert [d.envelope for d in batch.events] == events[:4] + events[5:]
    assert batch.dead_lettered == 1
    assert sum(batch.positions.values()) == 6, "the group moves past the damaged record"
    dead = read_raw(log, topic_name(REGION, "deadletter"))
    (letter,) = [codec.decode(r.value or b"").payload for r in dead]
    assert isinstance(letter, DeadLettered)
    assert letter.reason.startswith("corrupt") and "checksum mismatch" in letter.reason
    assert letter.origin_offset == 4


def read_raw(log: EmbeddedLog, topic: str) -> list[Record]:
    consumer = log.consumer("raw", [topic])
    records = consumer.poll(1000, timeout_s=0)
    consumer.close()
    return records


def test_services_share_the_writer_lock_flush_by_flush(tmp_path: Path) -> None:
    """Two writers opened with share_writes_s take turns: each flush lands after the other's,
    offsets run on without a gap or a reuse, and neither holds the lock between flushes."""
    first = EmbeddedLog(tmp_path, share_writes_s=30.0)
    first.apply_topics(region_topics(REGION))
    second = EmbeddedLog(tmp_path, share_writes_s=30.0)
    offsets: list[int] = []
    for turn in range(6):
        log = first if turn % 2 == 0 else second
        offsets += [r.offset for r in write(log, range(turn * 10, turn * 10 + 10))]
    assert offsets == list(range(60))
    assert read_all(EmbeddedLog(tmp_path), "shared") == list(range(60))
    # Between flushes the lock is free: a command can take it, and then a sharer waits for it.
    command = EmbeddedLog(tmp_path)
    command.acquire_writer()
    patient = EmbeddedLog(tmp_path, share_writes_s=0.3)
    with pytest.raises(LogError, match="held the embedded log"):
        write(patient, range(60, 61))
    command.close()
    assert [r.offset for r in write(patient, range(60, 61))] == [60]
