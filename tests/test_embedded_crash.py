"""The embedded log survives a writer killed mid-append: torn tails are cut back to the last
whole block and no acknowledged (flushed) record is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fastavro

import streams.acknowledged
from streams.acknowledged import Acknowledged
from streams.damage import FRAMING
from streams.embedded import EmbeddedLog
from streams.log import CORRUPT_HEADER, Headers, Record
from streams.partitioner import partition_for
from streams.segment import encode_block, make_records, sync_marker
from streams.topics import region_topics, topic_name

REPO = Path(__file__).resolve().parent.parent
REGION = "crash"
TOPIC = topic_name(REGION, "lifecycle")

WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
import streams.embedded
from streams.embedded import EmbeddedLog
from streams.topics import region_topics, topic_name
streams.embedded.SEGMENT_BYTES = 40_000  # roll segments often, under the reader's feet
log = EmbeddedLog(Path({root!r}))
log.apply_topics(region_topics({region!r}))
producer = log.producer()
topic = topic_name({region!r}, "lifecycle")
batch = 0
while True:
    for i in range(200):
        n = batch * 200 + i
        value = (b"x" * 300) + f"{round}:{{n}}".encode()
        producer.produce(topic, value, key=f"i-{{n % 50}}".encode())
    producer.flush()
    print(batch, flush=True)  # batch `batch` is acknowledged
    batch += 1
"""


def read_all(root: Path) -> list[Record]:
    log = EmbeddedLog(root)
    consumer = log.consumer("verify", [TOPIC])
    records: list[Record] = []
    while got := consumer.poll(5000, timeout_s=0):
        records.extend(got)
    consumer.close()
    return records


def test_kill_9_mid_append_loses_no_acknowledged_record(tmp_path: Path) -> None:
    root = tmp_path / "log"
    acknowledged: dict[int, int] = {}
    tail: list[Record] = []  # a reader following the log while writers come and die
    tail_log: EmbeddedLog | None = None
    tail_consumer = None
    for round_ in range(4):
        script = WRITER.format(repo=str(REPO), root=str(root), region=REGION, round=round_)
        writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert writer.stdout is not None
        acked = -1
        while acked < 10:
            line = writer.stdout.readline()
            assert line, "the writer died on its own"
            acked = int(line)
            if tail_consumer is None and (root / TOPIC).exists():
                tail_log = EmbeddedLog(root)
                tail_consumer = tail_log.consumer("tail", [TOPIC])
            if tail_consumer is not None:
                tail.extend(tail_consumer.poll(300, timeout_s=0))
        time.sleep(0.002 * round_)  # land the kill at different points of a write
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        for line in writer.stdout:  # batches acknowledged before the kill landed
            acked = max(acked, int(line))
        acknowledged[round_] = acked

        # A writer's first append to a partition cuts its torn tail back (and only then: a
        # command writing one topic never touches another's files). Append to every
        # partition; then every segment reads as Avro.
        log = EmbeddedLog(root)
        producer = log.producer()
        partitions = log.partitions_for(TOPIC)
        for n in range(partitions):
            keys = (f"r{i}".encode() for i in range(10_000))
            to_n = next(k for k in keys if partition_for(k, partitions) == n)
            producer.produce(TOPIC, (b"x" * 300) + f"{round_}:repair-{n}".encode(), key=to_n)
        producer.flush()
        log.close()
        for segment in root.glob(f"{TOPIC}/*/*.avro"):
            with open(segment, "rb") as handle:
                list(fastavro.reader(handle))

    assert tail_consumer is not None
    while got := tail_consumer.poll(5000, timeout_s=0):
        tail.extend(got)
    tail_consumer.close()
    everything = read_all(root)
    key = lambda r: (r.partition, r.offset)  # noqa: E731
    assert sorted(tail, key=key) == sorted(everything, key=key), "the tailing reader saw it all"
    assert len(list(root.glob(f"{TOPIC}/*/*.avro"))) > 12 * 2, "segments rolled"

    stored = [(r.value or b"")[300:].decode() for r in everything]
    assert len(stored) == len(set(stored)), "no record is stored twice"
    wanted = {f"{r}:{n}" for r, acked in acknowledged.items() for n in range((acked + 1) * 200)}
    assert not wanted - set(stored), (
        f"acknowledged records lost: {sorted(wanted - set(stored))[:5]}"
    )


def two_blocks(root: Path) -> Path:
    """A log of one partition's two acknowledged blocks (offsets 0-9, 10-19); its segment."""
    log = EmbeddedLog(root)
    log.apply_topics(region_topics(REGION))
    producer = log.producer()
    for first in (0, 10):
        for n in range(first, first + 10):
            producer.produce(TOPIC, str(n).encode(), key=b"i-1")
        producer.flush()
    log.close()
    (segment,) = [p for p in root.glob(f"{TOPIC}/*/*.avro") if p.stat().st_size > 600]
    return segment


def test_torn_block_is_cut_back_and_appending_continues(tmp_path: Path) -> None:
    root = tmp_path / "log"
    segment = two_blocks(root)
    acked_size = segment.stat().st_size
    # A third block that a crash cut short: its first bytes written, never acknowledged.
    partition = int(segment.parent.name)
    rows: list[tuple[bytes | None, bytes | None, Headers, int]]
    rows = [(b"i-1", str(n).encode(), (), 0) for n in range(20, 30)]
    block = encode_block(make_records(TOPIC, partition, 20, rows), sync_marker(segment))
    # As the writer leaves it: the block recorded as the newest while it was being written.
    newest = Acknowledged(int(segment.stem), acked_size, 20, acked_size + len(block), 30)
    streams.acknowledged.write(segment.parent, newest)
    with open(segment, "ab") as handle:
        handle.write(block[:-25])
    torn = segment.stat().st_size

    reopened = EmbeddedLog(root)
    reader_view = [int(r.value or b"") for r in read_all(root)]
    assert reader_view == list(range(20)), "a reader never sees a torn block"
    producer = reopened.producer()
    assert segment.stat().st_size == torn, "the partition's first append repairs, not open"
    producer.produce(TOPIC, b"20", key=b"i-1")
    (record,) = producer.flush()  # cuts the torn block back, then appends
    assert record.offset == 20
    (kept,) = (root / "_quarantine" / "torn").rglob("*.bin")  # the cut bytes are kept
    assert kept.read_bytes() == block[:-25]
    assert "torn write" in (root / "_quarantine" / "torn" / "README").read_text()
    assert [int(r.value or b"") for r in read_all(root)] == list(range(21))
    assert segment.stat().st_size > acked_size
    with open(segment, "rb") as handle:
        assert [r["offset"] for r in fastavro.reader(handle)] == list(range(21))  # type: ignore[index,call-overload]


def test_an_acknowledged_block_cut_short_on_disk_is_damage_and_its_offsets_stay_taken(
    tmp_path: Path,
) -> None:
    root = tmp_path / "log"
    segment = two_blocks(root)
    whole = segment.stat().st_size
    with open(segment, "r+b") as handle:  # the second block, acknowledged, loses its end
        handle.truncate(whole - 25)

    records = read_all(root)
    assert [int(r.value or b"") for r in records[:10]] == list(range(10))
    (lost,) = records[10:]  # one record stands for the damaged bytes, for the dead letter
    reason = dict(lost.headers)[CORRUPT_HEADER].decode()
    assert lost.offset == 10 and "acknowledged end" in reason
    number = int(segment.parent.name)
    (damage,) = EmbeddedLog(root).partition(TOPIC, number).check(settled=True)  # as verify
    assert (damage.kind, damage.first_offset, damage.path) == (FRAMING, 10, segment)
    assert "acknowledged records damaged on disk, not a torn write" in damage.what

    producer = EmbeddedLog(root).producer()
    producer.produce(TOPIC, b"20", key=b"i-1")
    (record,) = producer.flush()
    assert record.offset >= 20, "an acknowledged offset was written again"
    assert not (root / "_quarantine").exists(), "acknowledged bytes were cut"
    assert segment.stat().st_size == whole - 25, "the damaged bytes stay where they are"
    assert record.offset in {r.offset for r in read_all(root)}


def test_a_record_damaged_on_disk_is_detected_not_decoded(tmp_path: Path) -> None:
    root = tmp_path / "log"
    log = EmbeddedLog(root)
    log.apply_topics(region_topics(REGION))
    producer = log.producer()
    for n in range(10):
        producer.produce(TOPIC, b"value-%03d" % n, key=b"i-1")
    producer.flush()
    log.close()
    (segment,) = [p for p in root.glob(f"{TOPIC}/*/*.avro") if p.stat().st_size > 600]
    data = bytearray(segment.read_bytes())
    at = data.index(b"value-007")
    data[at + 8] ^= 0x01  # one bit of one value: still valid Avro, no longer the record
    segment.write_bytes(bytes(data))

    reopened = EmbeddedLog(root)
    codec_free = reopened.consumer("verify", [TOPIC])
    records = codec_free.poll(100, timeout_s=0)
    codec_free.close()
    assert [r.offset for r in records] == list(range(10)), "the reader goes on past it"
    damaged = [r for r in records if CORRUPT_HEADER in dict(r.headers)]
    assert [r.offset for r in damaged] == [7]
    reason = dict(damaged[0].headers)[CORRUPT_HEADER].decode()
    assert "checksum mismatch" in reason and f"{TOPIC}[" in reason and "@7" in reason
    assert [r.value for r in records if r.offset != 7] == [
        b"value-%03d" % n for n in range(10) if n != 7
    ]
