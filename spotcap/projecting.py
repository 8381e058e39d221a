"""Materialising the projections from the log: catch up, and rebuild from nothing.

Both projections read the region's history through the merged history (`streams.merged`): in
event-time order, from the offsets each projection stored with its rows (the seek on
assignment), to the end offsets taken at the start. The ledger needs that order (an interval
is priced by the rate cards in force, which come before it in event time); the fleet state does
not depend on order, so it reads the same way for simplicity and to make a rebuild and an
incremental run meet row for row.

Events the ledger cannot price are dead-lettered (with their position and reason) after the
batch that carried them is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from projections.ledger.store import LedgerStore
from projections.ledger.writer import LEDGER_TOPICS, LedgerWriter, apply_ddl, drop_all
from projections.postgres.connection import Connection
from projections.postgres.migrate import drop, migrate
from projections.postgres.writer import FLEET_TOPICS, FleetWriter
from schemas.errors import Origin
from schemas.events import Envelope
from spotcap.config import Settings
from spotcap.stores import open_fleet, open_ledger
from spotcap.wiring import make_codec
from streams.deadletter import DeadLetters
from streams.log import EventLog, Record, TopicPartition
from streams.merged import MergedHistory, Progress

Which = Literal["fleet", "ledger"]
BATCH_EVENTS = 5000


@dataclass(frozen=True, slots=True)
class RunReport:
    projection: str
    events: int
    seconds: float
    unpriced: int = 0

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


class Writer:
    """One projection's writer behind one interface (fleet or ledger)."""

    def __init__(self, which: Which, *, fleet: Connection | None = None,
                 ledger: LedgerStore | None = None) -> None:  # fmt: skip
        self.which = which
        if which == "fleet":
            assert fleet is not None
            self.fleet: FleetWriter | None = FleetWriter(fleet)
            self.ledger: LedgerWriter | None = None
            self.topics: Sequence[str] = FLEET_TOPICS
        else:
            assert ledger is not None
            self.fleet, self.ledger = None, LedgerWriter(ledger)
            self.topics = LEDGER_TOPICS

    def stored_offsets(self) -> dict[TopicPartition, int]:
        if self.fleet is not None:
            return self.fleet.stored_offsets()
        assert self.ledger is not None
        return self.ledger.stored_offsets()

    def write(
        self, events: list[tuple[Origin, Envelope]], positions: dict[TopicPartition, int]
    ) -> list[tuple[Origin, str]]:
        """Write a batch; return the events it could not price (ledger)."""
        if self.fleet is not None:
            self.fleet.write(events, positions)
            return []
        assert self.ledger is not None
        return self.ledger.write(events, positions).unpriced


def catch_up(
    settings: Settings,
    log: EventLog,
    writer: Writer,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    batch_events: int = BATCH_EVENTS,
) -> RunReport:
    """Apply every event after the stored offsets, up to the log's end offsets now."""
    codec = make_codec(settings)
    producer = log.producer()
    dead_letters = DeadLetters(producer, codec, settings.region, f"projection/{writer.which}")
    started = time.monotonic()
    history = MergedHistory(
        log,
        codec,
        settings.region,
        writer.topics,
        start=writer.stored_offsets(),
        until="end",
        dead_letters=dead_letters,
        poll_records=2000,
        buffer_per_partition=4000,
    )
    events = unpriced = 0
    try:
        while not history.finished:
            batch = history.read(batch_events, timeout_s=5.0)
            if not batch:
                continue
            rows = [(d.origin, d.envelope) for d in batch]
            positions: dict[TopicPartition, int] = {}
            for origin, _ in rows:
                tp = (origin.topic, origin.partition)
                positions[tp] = max(positions.get(tp, 0), origin.offset + 1)
            failed = writer.write(rows, positions)
            if failed:
                by_origin = dict(rows)
                for origin, reason in failed:
                    e = by_origin[origin]
                    dead_letters.send(_record(codec.encode(e), origin, e), UnpricedEvent(reason))
                dead_letters.flush()
                unpriced += len(failed)
            events += len(rows)
            if on_progress is not None:
                on_progress(history.progress)
    finally:
        history.close()
        producer.close()
    return RunReport(writer.which, events, time.monotonic() - started, unpriced)


class UnpricedEvent(ValueError):  # noqa: N818 - the dead letter's error class says what it is
    """An event the ledger could not price (no rate card for its pool)."""


def _record(value: bytes, origin: Origin, e: Envelope) -> Record:
    return Record(origin.topic, origin.partition, origin.offset, e.key.encode(), value,
                  e.occurred_at // 1000)  # fmt: skip


def open_writer(settings: Settings, which: Which, *, fresh: bool = False) -> Writer:
    """The projection's writer on its store; with `fresh`, its tables dropped and made anew."""
    if which == "fleet":
        conn = open_fleet(settings, migrated=False)
        if fresh:
            drop(conn)
        migrate(conn)
        return Writer("fleet", fleet=conn)
    store = open_ledger(settings)
    if fresh:
        drop_all(store)
    apply_ddl(store)
    return Writer("ledger", ledger=store)
