"""The export reads the log's records as they are (`replay.archive.history.merged_records`)
rather than envelopes: it must write the same archive, byte for byte, as the envelope path
(the merged history decoded, each event encoded again), the same log must give the same bytes
twice, and records the fast path does not take (an older writer schema, a damaged record) are
handled as the merged history handles them."""

from __future__ import annotations

import shutil
import struct
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from contracts.signing import FileSigner, generate_key_pem
from projections.ledger.writer import LEDGER_TOPICS, LINES_SCHEMA
from replay.archive import layout
from replay.archive.columns import MonthReading
from replay.archive.export import Exported, export_month
from replay.archive.history import merged_records, partition_records
from replay.archive.storage import LocalStorage
from schemas.codec import SINGLE_OBJECT_MAGIC, Codec, released_schemas
from schemas.events import Envelope
from sim import RegionSim
from streams.embedded import EmbeddedLog
from streams.merged import MergedHistory
from streams.topics import region_topics, topic_name
from streams.writer import EventWriter
from tests.replay_support import small_config

REGION = "rp"
MONTH = "2026-11"


@pytest.fixture(scope="module")
def log_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A small region's events in an embedded log, with two records the fast path does not
    take: one written with the oldest released schema (an event written again: its id), one
    that does not decode."""
    home = tmp_path_factory.mktemp("records-log")
    events = [e for batch in RegionSim(small_config(days=1.5, workloads=12)).run() for e in batch]
    log = EmbeddedLog(home)
    try:
        log.apply_topics(region_topics(REGION))
        writer = EventWriter(log, Codec(), REGION)
        for e in events:
            writer.write(e)
        writer.close()
        late = next(e for e in reversed(events) if e.event_type == "usage_interval")
        old = Codec(reader_schema=released_schemas()[0]).encode(late)
        assert not old.startswith(Codec().encode(late)[:10])  # another writer schema
        producer = log.producer()
        topic = topic_name(REGION, "usage")
        producer.produce(topic, old, key=late.key.encode(), timestamp_ms=late.occurred_at // 1000)
        producer.produce(topic, b"\xc3\x01 not an event", key=late.key.encode())
        producer.flush()
    finally:
        log.close()
    return home, late.event_id


def open_log(home: Path) -> tuple[EmbeddedLog, Codec]:
    """The log and codec in an export's worker process (`replay.archive.columns.Opener`)."""
    return EmbeddedLog(home), Codec()


def export(home: Path, where: Path, key_pem: bytes, *, records: bool, workers: int = 0) -> Exported:
    """The month by envelopes (`MergedHistory`), by records (`merged_records`), or with
    `workers` read by that many processes (`MonthReading`)."""
    log = EmbeddedLog(home)
    try:
        codec = Codec()
        history: list[tuple[object, Envelope]] = []
        if not records:
            merged = MergedHistory(log, codec, REGION, LEDGER_TOPICS)
            history = [(d.origin, d.envelope) for d in merged]
        with ExitStack() as stack:
            reading = None
            if workers:
                opener = partial(open_log, home)
                reading = stack.enter_context(
                    MonthReading(opener, log, REGION, MONTH, workers=workers)
                )
            return export_month(
                LocalStorage(where),
                FileSigner.from_bytes(key_pem),
                region=REGION,
                month=MONTH,
                history=history,  # type: ignore[arg-type]
                records=merged_records(log, codec, REGION) if records and not workers else (),
                reading=reading,
                cost_lines=LINES_SCHEMA.empty_table(),
                workdir=where.parent / f"{where.name}-work",
                now_us=int(time.time() * 1_000_000),
            )
    finally:
        log.close()


def files_of(where: Path) -> dict[str, bytes]:
    return {str(p.relative_to(where)): p.read_bytes() for p in where.rglob("*") if p.is_file()}


def test_records_export_the_same_bytes_as_envelopes_and_twice_the_same(
    log_home: tuple[Path, str], tmp_path: Path
) -> None:
    home, written_twice = log_home
    key_pem, _ = generate_key_pem()
    by_envelopes = export(home, tmp_path / "envelopes", key_pem, records=False)
    by_records = export(home, tmp_path / "records", key_pem, records=True)
    again = export(home, tmp_path / "again", key_pem, records=True)
    assert by_records.events == by_envelopes.events == again.events > 1000
    assert by_records.root == by_envelopes.root == again.root
    envelopes, records = files_of(tmp_path / "envelopes"), files_of(tmp_path / "records")
    assert sorted(records) == sorted(envelopes)
    assert f"{REGION}/{MONTH}/{layout.EVENTS}" in records
    for name, data in envelopes.items():
        assert records[name] == data, f"{name} differs between the two paths"
    assert files_of(tmp_path / "again") == records
    # The record of the older schema is in, written with the current one; the damaged one is not.
    table = pq.read_table(tmp_path / "records" / REGION / MONTH / layout.EVENTS)
    headers = {bytes(a[:10]) for a in table.column("avro").to_pylist()}
    assert headers == {SINGLE_OBJECT_MAGIC + struct.pack("<Q", Codec().fingerprint)}
    assert table.column("event_id").to_pylist().count(written_twice) == 2
    assert table.num_rows == by_records.events


def in_event_time_order(home: Path) -> bool:
    """Whether every partition of the exported topics is in event-time order."""
    log = EmbeddedLog(home)
    try:
        for topic in (topic_name(REGION, t) for t in LEDGER_TOPICS):
            for n, end in log.end_offsets(topic).items():
                occurred = [r[0] for r in partition_records(log, Codec(), topic, n, end)]
                if occurred != sorted(occurred):
                    return False
    finally:
        log.close()
    return True


@pytest.mark.parametrize("out_of_order", [False, True], ids=["in-order", "out-of-order"])
def test_worker_processes_export_the_same_bytes(
    log_home: tuple[Path, str], tmp_path: Path, out_of_order: bool
) -> None:
    """The month read by two worker processes and merged (`replay.archive.columns`) is the
    archive the one-process export writes, byte for byte: when every partition is in event
    time order (merged by one sort), and when one is not (an event written again after later
    ones: merged as `merged_records` merges)."""
    home, _ = log_home
    if out_of_order:
        home = tmp_path / "log"
        shutil.copytree(log_home[0], home)
        log = EmbeddedLog(home)
        try:
            topic = topic_name(REGION, "usage")
            first = next(r for r in partition_records(log, Codec(), topic, 0, 10))
            producer = log.producer()
            key = str(first[5]["key"]).encode()  # to the same partition, after later events
            producer.produce(topic, first[4], key=key, timestamp_ms=first[0] // 1000)
            producer.flush()
        finally:
            log.close()
    # Which merge the workers' rows take: one sort, or heapq.merge of every record's key.
    assert in_event_time_order(home) is not out_of_order
    key_pem, _ = generate_key_pem()
    by_records = export(home, tmp_path / "records", key_pem, records=True)
    by_workers = export(home, tmp_path / "workers", key_pem, records=True, workers=2)
    assert by_workers.events == by_records.events > 1000
    assert by_workers.root == by_records.root
    records, workers = files_of(tmp_path / "records"), files_of(tmp_path / "workers")
    assert sorted(workers) == sorted(records)
    for name, data in records.items():
        assert workers[name] == data, f"{name} differs between one process and two"
    if out_of_order:
        table = pq.read_table(tmp_path / "workers" / REGION / MONTH / layout.EVENTS)
        ids = table.column("event_id").to_pylist()
        assert ids.count(first[5]["event_id"]) == 2
