"""The bare reference of `bench/replay.py`'s Python engine: the recorded rule folded over the
embedded log's history with the libraries alone.

An embedded log's segments are Avro container files of `LogRecord`s (offset, timestamp_ms,
key, value, headers, crc32) under ``<log>/<topic>/<partition>/<base offset>.avro``: fastavro's
reader gives their records, each partition's in offset order. A record's value is an Avro
single object (two bytes of magic, the writer schema's 8-byte fingerprint, the datum), read
by fastavro's schemaless reader to dicts. `heapq.merge` of the partitions of the ledger's topics
gives them in history order, (occurred_at, topic, partition, offset), the head of each
partition first, as `streams.merged.MergedHistory` does. The fold is the ledger's pricing
written plainly (`bench/ledger_bare.py`, held to the ledger's `Pricer` by
tests/test_ledger_bare.py): its lines summed per workload, day and cause, the reservations'
idle floor per day up to the last whole hour of the newest event, zero amounts left out. That
is what `spotcap replay --engine python` gives under the recorded rule (a test checks it).

What it leaves out: the records' checksums and the writer schema's fingerprint (one schema
wrote the log), dead letters, progress, and the fold's horizon (nothing is forgotten: the
histories of a few days the bench replays need none of it). No module of the project is
imported but the plain pricing; the envelope's Avro schema is handed in as data.
"""

from __future__ import annotations

import heapq
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro

from bench.ledger_bare import DAY_US, HOUR_US, PLATFORM, BarePricer, half_even, reserved

# The ledger's topics (`projections.ledger.writer.LEDGER_TOPICS`; a test checks they agree).
TOPICS = ("lifecycle", "market", "demand", "decisions", "usage")
HEADER_BYTES = 10  # the single-object encoding's magic and fingerprint

LineKey = tuple[str, int, str]


def plain_schema(schema: Any) -> Any:
    """`schema` without its logical types: the events hold times as integers, ids as text."""
    if isinstance(schema, dict):
        return {k: plain_schema(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [plain_schema(s) for s in schema]
    return schema


def _partition(topic: str, number: int, folder: Path, schema: Any) -> Iterator[tuple[Any, ...]]:
    """The partition's events, each as (occurred_at, topic, partition, offset, event)."""
    read, seek = fastavro.schemaless_reader, HEADER_BYTES
    for segment in sorted(folder.glob("*.avro"), key=lambda p: int(p.stem)):
        with segment.open("rb") as f:
            record: Any
            for record in fastavro.reader(f):
                stream = io.BytesIO(record["value"])
                stream.seek(seek)
                e: Any = read(stream, schema, None, return_record_name=True)
                yield e["occurred_at"], topic, number, record["offset"], e


def history(log_root: Path, region: str, schema: Any) -> Iterator[tuple[Any, ...]]:
    """The region's events of the ledger's topics in history order (`_partition`'s tuples)."""
    parts = []
    for logical in TOPICS:
        topic = f"{region}.{logical}"
        for folder in sorted((log_root / topic).iterdir()):
            if folder.is_dir() and folder.name.isdigit():
                parts.append(_partition(topic, int(folder.name), folder, schema))
    return heapq.merge(*parts)


def replay(
    log_root: Path, region: str, avro_schema: dict[str, Any]
) -> tuple[int, dict[LineKey, int]]:
    """The recorded rule over the region's history in the log at `log_root`: the events read
    and the amounts (micro-euros) per workload, UTC day (days since the epoch) and cause."""
    schema = fastavro.parse_schema(plain_schema(avro_schema), _force=True)
    pricer = BarePricer()
    feed = pricer.feed
    amounts: dict[LineKey, int] = {}
    refused: list[tuple[Any, ...]] = []
    checkpoints: set[str] = set()  # (usage and waste: the pricer leaves their copies out)
    events = 0
    for _, topic, number, offset, e in history(log_root, region, schema):
        events += 1
        if e["event_type"] == "checkpoint_written":
            if e["event_id"] in checkpoints:
                continue
            checkpoints.add(e["event_id"])
        for line in feed(e, (topic, number, offset), refused):
            key = (line[0], line[1], line[2])
            amounts[key] = amounts.get(key, 0) + line[4]
    if pricer.watermark is not None:
        _idle_floor(pricer, amounts)
    return events, {k: v for k, v in amounts.items() if v}


def _idle_floor(pricer: BarePricer, amounts: dict[LineKey, int]) -> None:
    """Each reservation's cost per UTC day up to the last whole hour of the newest event,
    rounded once per day (what the ledger's hourly lines add up to)."""
    assert pricer.watermark is not None
    until = pricer.watermark - pricer.watermark % HOUR_US
    for e, _ in pricer.reservations.values():
        r = e["payload"][1]
        hi = min(until, r["end_at"])
        if hi <= r["start_at"]:
            continue
        for day in range(r["start_at"] // DAY_US, (hi - 1) // DAY_US + 1):
            key = (PLATFORM, day, "idle_floor")
            amounts[key] = amounts.get(key, 0) + half_even(reserved(r, day, until)[0], HOUR_US)
