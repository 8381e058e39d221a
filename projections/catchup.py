"""Materialising the projections from the log: catch up, and rebuild from nothing; and the
fleet state as a live consumer of the log (the processing chain).

Both projections read the region's history through the merged history (`streams.merged`): in
event-time order, from the offsets each projection stored with its rows (the seek on
assignment), to the end offsets taken at the start. The ledger needs that order (an interval
is priced by the rate cards in force, which come before it in event time); the fleet state does
not depend on order, so it reads the same way for simplicity and to make a rebuild and an
incremental run meet row for row.

Events the ledger cannot price, and rate cards or reservations it refuses past its allowed
lateness, are dead-lettered (with their position and reason) after the batch that carried them
is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from projections.ledger.store import LedgerStore
from projections.ledger.writer import (
    LEDGER_TOPICS,
    LedgerWriter,
    PreparedBatch,
    apply_ddl,
    drop_all,
)
from projections.postgres.connection import Connection, FleetUnavailableError
from projections.postgres.migrate import drop, migrate
from projections.postgres.writer import FLEET_TOPICS, FleetWriter
from projections.provenance import (
    check_log,
    check_region,
    fleet_topics,
    hold_fleet_topics,
    hold_ledger_topics,
    ledger_topics,
)
from projections.stores import Stores
from projections.write_behind import WriteBehind
from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope
from streams.deadletter import DeadLetters, OnDemandProducer
from streams.log import Consumer, EventLog, Record, TopicPartition
from streams.merged import Following, MergedHistory, Progress
from streams.processing.dead_letters import DeadLetterGuard, DeadLetterPolicy
from streams.processing.factory import BatchSettings, Chain, ChainFactory
from streams.processing.runner import Processor
from streams.processing.write import SinkUnavailable
from streams.reader import Decoded, Decoder
from streams.topics import topic_name

Which = Literal["fleet", "ledger"]
PROJECTIONS: dict[str, tuple[Which, ...]] = {
    "fleet": ("fleet",),
    "postgres": ("fleet",),
    "ledger": ("ledger",),
    "clickhouse": ("ledger",),
    "all": ("fleet", "ledger"),
}
"""The projections a name stands for: one by its own name or its store's, or all."""
LABELS = {"fleet": "fleet state (PostgreSQL)", "ledger": "ledger (ClickHouse)"}
Positioned = tuple[Origin, Envelope]
# What a writer could not take, each with the error its dead letter carries.
Failed = list[tuple[Origin, ValueError]]
# A written batch and, per writer: its name, its seconds and the events it could not take.
Written = tuple[list[Positioned], list[tuple[Which, float, Failed]]]
# A batch as a writer prepared it for its writes: the fleet state's events and positions (its
# rows are made inside its transaction), the ledger's priced tables.
Prepared = tuple[list[Positioned], dict[TopicPartition, int]] | PreparedBatch
# Events per batch of a catch-up or rebuild (each batch: one transaction of the fleet state, one
# insert per ledger table), filled from as many of the merged history's reads as that takes
# (`_filled`; one read gives what its buffers hold, about 3,000 events). At 5,000 the per-batch
# costs (a transaction, five ClickHouse parts) were a tenth to a fifth of both projections' CPU;
# 8,000 takes a 1-day rebuild of both from 12 s of CPU to under 9 s at the same peak RSS, where
# 20,000 saves a little more and peaks 80 MiB higher (docs/performance.md, "The demo").
BATCH_EVENTS = 8_000
FILL_WAIT_S = 1.0  # how long, in all, a batch waits for more events once it has some
# The merged history's poll and per-partition buffer (records): the buffers are most of a
# catch-up's memory beyond its libraries (a region has 43 partitions); at 2,000 and 4,000 the fleet
# state's rebuild peaked 45 MiB higher for 3-5% less CPU (issue 26, docs/performance.md).
POLL_RECORDS, BUFFER_PER_PARTITION = 500, 1000


@dataclass(frozen=True, slots=True)
class RunReport:
    projection: str
    events: int
    seconds: float
    unpriced: int = 0  # events dead-lettered: not priced, or refused past the lateness

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def as_json(self) -> dict[str, Any]:
        """What `spotcap project --json` prints per projection (seconds to the millisecond)."""
        return {
            "projection": self.projection,
            "events": self.events,
            "seconds": round(self.seconds, 3),
            "events_per_s": round(self.events_per_s),
            "unpriced": self.unpriced,
        }

    def describe(self, *, rebuilt: bool, source: str) -> str:
        """The run in one sentence: what was rebuilt or brought up to date from `source` (the
        log, described), how fast, and the events that could not be priced."""
        verb = "rebuilt" if rebuilt else "brought up to date"
        unpriced = self.unpriced
        extra = f"; {unpriced:,} events could not be priced (dead-lettered)" if unpriced else ""
        return (
            f"{LABELS[self.projection]} {verb}: {self.events:,} events in {self.seconds:,.1f} s "
            f"({self.events_per_s:,.0f} events/s) from the {source}{extra}"
        )


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

    @property
    def label(self) -> str:
        return "fleet state" if self.which == "fleet" else "ledger"

    def held_topics(self) -> dict[str, str | None]:
        """The topics this projection has consumed, with their identities then."""
        if self.fleet is not None:
            return fleet_topics(self.fleet.conn, self.fleet.projection)
        assert self.ledger is not None
        return ledger_topics(self.ledger.store, self.ledger.projection)

    def hold_topics(self, ids: Mapping[str, str | None]) -> None:
        if self.fleet is not None:
            hold_fleet_topics(self.fleet.conn, self.fleet.projection, ids)
        else:
            assert self.ledger is not None
            hold_ledger_topics(self.ledger.store, self.ledger.projection, ids)

    def check_log(self, log: EventLog, region: str) -> None:
        """Refuse a log that is not the one this projection was built from, or another region
        than the one it holds (`projections.provenance`); then hold this log's topics."""
        held = self.held_topics()
        check_region(held, region, f"the {self.label}")
        physical = [topic_name(region, t) for t in self.topics]
        current = {t: log.topic_id(t) for t in physical}
        ends = {t: log.end_offsets(t) for t in physical}
        rebuild = f"spotcap --region {region} rebuild {self.which}"
        check_log(held, current, self.stored_offsets(), ends, projection=self.label,
                  rebuild=rebuild)  # fmt: skip
        if held != current:
            self.hold_topics(current)

    def write(
        self, events: list[tuple[Origin, Envelope]], positions: dict[TopicPartition, int]
    ) -> Failed:
        """Write a batch; return the events it could not take (ledger)."""
        return self.write_prepared(self.prepare(events, positions))

    def prepare(
        self, events: list[tuple[Origin, Envelope]], positions: dict[TopicPartition, int]
    ) -> Prepared:
        """The batch made ready for `write_prepared`, in Python and without writing: the
        ledger's pricing and tables (the fleet state's rows are made in its transaction)."""
        if self.ledger is not None:
            return self.ledger.prepare(events, positions)
        return events, positions

    def write_prepared(self, prepared: Prepared) -> Failed:
        """Write a prepared batch; return the events it could not take (ledger): those it could
        not price, and facts it refused past its allowed lateness."""
        if isinstance(prepared, PreparedBatch):
            assert self.ledger is not None
            result = self.ledger.store_batch(prepared)
            return [(o, UnpricedEvent(reason)) for o, reason in result.unpriced] + [
                (o, LateFact(reason)) for o, reason in result.refused
            ]
        assert self.fleet is not None
        self.fleet.write(*prepared)
        return []


def catch_up(
    log: EventLog,
    codec: Codec,
    region: str,
    writer: Writer,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    batch_events: int = BATCH_EVENTS,
) -> RunReport:
    """Apply every event of `region` after the stored offsets, up to the log's end offsets
    now (records written with `codec`)."""
    return catch_up_together(
        log, codec, region, [writer], on_progress=on_progress, batch_events=batch_events
    )[0]


def catch_up_together(
    log: EventLog,
    codec: Codec,
    region: str,
    writers: Sequence[Writer],
    *,
    on_progress: Callable[[Progress], None] | None = None,
    batch_events: int = BATCH_EVENTS,
    following: Following | None = None,
    letters_for: Sequence[Which] | None = None,
) -> list[RunReport]:
    """`catch_up` for several writers that read the same topics from the same stored offsets
    (a rebuild of both projections), up to the log's end offsets now, or with `following` to
    the end of a log its writer is still appending to (`streams.merged.Following`: the same
    events in the same order): the history is read and decoded once, and each batch goes
    to every writer in turn, on a write-behind thread while the next batch is read, decoded and
    prepared (the ledger prices a batch and makes its tables on this thread: one thread of
    Python at a time, and the writer thread's time is mostly the stores' own).
    A record that cannot be decoded is dead-lettered once, by ``projection/<names joined by
    +>`` (the names of `letters_for`, by default the writers'; with none it is skipped: another
    reading of the same records dead-letters it). Each report's seconds are its own writes plus
    the shared reading that the writes did not hide."""
    assert writers, "no writer to catch up"
    for writer in writers:
        writer.check_log(log, region)
    topics, start = writers[0].topics, writers[0].stored_offsets()
    for other in writers[1:]:
        if other.topics != topics or other.stored_offsets() != start:
            raise ValueError("writers caught up together must read the same topics and offsets")
    producer = OnDemandProducer(log)  # takes the embedded log's writer lock only to write
    names = "+".join(w.which for w in writers)
    letters = names if letters_for is None else "+".join(letters_for)
    dead_letters = {
        w.which: DeadLetters(producer, codec, region, f"projection/{w.which}") for w in writers
    }
    started = time.monotonic()
    history = MergedHistory(
        log,
        codec,
        region,
        topics,
        start=start,
        until="end" if following is None else following,
        dead_letters=DeadLetters(producer, codec, region, f"projection/{letters}")
        if letters
        else None,
        poll_records=POLL_RECORDS,
        buffer_per_partition=BUFFER_PER_PARTITION,
    )
    events = 0
    together = _Together(writers, dead_letters, codec)
    try:
        # Each batch is written behind the reading and decoding of the next (one in flight).
        with WriteBehind(together.write, name=f"projection-{names}") as behind:
            while not history.finished:
                batch = _filled(history, history.read(batch_events, timeout_s=5.0), batch_events)
                if not batch:
                    continue
                rows = [(d.origin, d.envelope) for d in batch]
                prepared = together.prepare(rows)
                together.written(behind.submit(_label(rows), prepared))
                events += len(rows)
                if on_progress is not None:
                    on_progress(history.progress)
            together.written(behind.wait())
    finally:
        history.close()
        producer.close()
    # The reading not hidden behind the writes.
    write_s, unpriced = together.write_s, together.unpriced
    reading_s = max(0.0, time.monotonic() - started - sum(write_s.values()))
    return [
        RunReport(w.which, events, reading_s + write_s[w.which], unpriced[w.which]) for w in writers
    ]


class _Together:
    """Writes a batch to each writer in turn (on the write-behind thread), then, back in the
    caller, accounts for it and dead-letters what it could not price."""

    def __init__(
        self, writers: Sequence[Writer], dead_letters: Mapping[Which, DeadLetters], codec: Codec
    ) -> None:
        self.writers, self.dead_letters, self.codec = writers, dead_letters, codec
        self.write_s = dict.fromkeys(dead_letters, 0.0)
        self.unpriced = dict.fromkeys(dead_letters, 0)

    def prepare(self, batch: list[Positioned]) -> tuple[list[Positioned], list[Prepared]]:
        """In the caller: the batch's positions, and the batch as each writer prepares it."""
        positions: dict[TopicPartition, int] = {}
        for origin, _ in batch:
            tp = (origin.topic, origin.partition)
            positions[tp] = max(positions.get(tp, 0), origin.offset + 1)
        prepared = []
        for writer in self.writers:
            began = time.monotonic()
            prepared.append(writer.prepare(batch, positions))
            self.write_s[writer.which] += time.monotonic() - began
        return batch, prepared

    def write(self, prepared: tuple[list[Positioned], list[Prepared]]) -> Written:
        """On the write-behind thread: each writer's writes of the prepared batch."""
        batch, parts = prepared
        outcomes = []
        for writer, part in zip(self.writers, parts, strict=True):
            began = time.monotonic()
            failed = writer.write_prepared(part)
            outcomes.append((writer.which, time.monotonic() - began, failed))
        return batch, outcomes

    def written(self, done: Written | None) -> None:
        if done is None:
            return
        batch, outcomes = done
        for which, seconds, failed in outcomes:
            self.write_s[which] += seconds
            if failed:
                by_origin = dict(batch)
                letters = self.dead_letters[which]
                for origin, error in failed:
                    e = by_origin[origin]
                    letters.send(_record(self.codec.encode(e), origin, e), error)
                letters.flush()
                self.unpriced[which] += len(failed)


def _filled(history: MergedHistory, batch: list[Decoded], batch_events: int) -> list[Decoded]:
    """`batch` topped up to `batch_events` from the history's next reads, for at most
    `FILL_WAIT_S` in all (a writer being followed that trickles events holds a batch, and the
    projection's lag, no longer than that).
    One read gives what the merged history's buffers hold, about 3,000 events; a batch per
    read paid a batch's fixed costs (a transaction, an insert per ledger table, the ledger's
    query for copies) 44 times a simulated day instead of 16 (issue 26)."""
    deadline = time.monotonic() + FILL_WAIT_S
    while batch and len(batch) < batch_events and not history.finished:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            break
        more = history.read(batch_events - len(batch), timeout_s=left_s)
        if not more:
            break
        batch += more
    return batch


def _label(rows: list[Positioned]) -> str:
    first = rows[0][0]
    return f"the batch of {len(rows):,} from {first.topic}[{first.partition}]@{first.offset}"


class UnpricedEvent(ValueError):  # noqa: N818 - the dead letter's error class says what it is
    """An event the ledger could not price (no rate card for its pool)."""


class LateFact(ValueError):  # noqa: N818 - the dead letter's error class says what it is
    """A rate card or reservation published past the ledger's allowed lateness: not priced."""


def _record(value: bytes, origin: Origin, e: Envelope) -> Record:
    return Record(origin.topic, origin.partition, origin.offset, e.key.encode(), value,
                  e.occurred_at // 1000)  # fmt: skip


def open_writer(stores: Stores, which: Which, *, fresh: bool = False) -> Writer:
    """The projection's writer on its store; with `fresh`, its tables dropped and made anew."""
    if which == "fleet":
        conn = stores.open_fleet(migrated=False)
        if fresh:
            drop(conn)
        migrate(conn)
        return Writer("fleet", fleet=conn)
    store = stores.open_ledger()
    if fresh:
        drop_all(store)
    apply_ddl(store)
    return Writer("ledger", ledger=store)


# Shows a catch-up's progress: given the projections read together, a context in which the
# returned function is called with the history's progress.
ShowProgress = Callable[[Sequence[Which]], AbstractContextManager[Callable[[Progress], None]]]


def run_projections(
    log: EventLog,
    codec: Codec,
    region: str,
    stores: Stores,
    which: Sequence[Which],
    *,
    fresh: bool,
    show: ShowProgress | None = None,
    following: Following | None = None,
    opener: Callable[[], tuple[EventLog, Codec]] | None = None,
) -> list[RunReport]:
    """Catch up (or, with `fresh`, rebuild) each projection of `which`. Projections that start
    from the same offsets (always, in a rebuild) share one read of the history, or, given an
    `opener` of the log (picklable), are caught up side by side, each in a process of its own
    reading for itself (`projections.side_by_side`: on two cores, in about two thirds of the
    time). `following`: a writer still appending to the log, followed to its end
    (`catch_up_together`)."""
    writers = [open_writer(stores, name, fresh=fresh) for name in which]
    reports: list[RunReport] = []
    for group in _read_together(writers):
        if opener is not None and following is None and len(group) > 1:
            from projections.side_by_side import catch_up_side_by_side

            reports += catch_up_side_by_side(
                log, codec, region, stores, group, opener=opener, show=show or _silent
            )
            continue
        with (show or _silent)([w.which for w in group]) as on_progress:
            reports += catch_up_together(
                log, codec, region, group, on_progress=on_progress, following=following
            )
    return reports


def _read_together(writers: Sequence[Writer]) -> Iterator[list[Writer]]:
    """The writers in groups that read the same topics from the same stored offsets."""
    groups: list[list[Writer]] = []
    for writer in writers:
        same = next(
            (
                g
                for g in groups
                if g[0].topics == writer.topics and g[0].stored_offsets() == writer.stored_offsets()
            ),
            None,
        )
        if same is None:
            groups.append([writer])
        else:
            same.append(writer)
    yield from groups


def _silent(_: Sequence[Which]) -> AbstractContextManager[Callable[[Progress], None]]:
    return nullcontext(lambda _: None)


# -- the fleet state as a live consumer (the processing chain) ---------------------------------


class SeekingFactory(ChainFactory[Positioned]):
    """Builds the chain on assignment after seeking each partition to the offset the fleet
    state stored with its rows, and one it stored none for to the log's beginning: the state
    holds nothing of that partition (a new or rebuilt database), whatever the consumer group
    committed before (its commits never decide where the state's history starts)."""

    def __init__(self, writer: FleetWriter, decoder: Decoder, guard: DeadLetterGuard,
                 settings: BatchSettings | None = None) -> None:  # fmt: skip
        sink = FleetSink(writer)
        super().__init__(lambda _: _positioned, sink, decoder, guard, settings or BatchSettings())
        self._writer = writer

    def create(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> Chain[Positioned]:
        stored = self._writer.stored_offsets()
        for topic, partition in partitions:
            consumer.seek(topic, partition, stored.get((topic, partition), 0))
        return super().create(consumer, partitions)


def _positioned(decoded: Decoded) -> Sequence[Positioned]:
    return [(decoded.origin, decoded.envelope)]


class FleetSink:
    """The fleet writer as the chain's sink: a database that is down is `SinkUnavailable`
    (the processor pauses and retries), not a crash."""

    def __init__(self, writer: FleetWriter) -> None:
        self.writer = writer

    def write(self, rows: Sequence[Positioned], positions: Mapping[TopicPartition, int],
              timeout_s: float) -> None:  # fmt: skip
        try:
            self.writer.write(rows, positions, timeout_s)
        except FleetUnavailableError as error:
            raise SinkUnavailable(f"the fleet-state database: {error}") from error


def fleet_processor(
    log: EventLog, codec: Codec, region: str, writer: FleetWriter
) -> Processor[Positioned]:
    """A processor that keeps the fleet state up to date, partition by partition (Kafka groups
    can spread it over several processes: the state rows do not depend on order). Refuses a
    log that is not the one the state was built from (`Writer.check_log`)."""
    Writer("fleet", fleet=writer.conn).check_log(log, region)
    dead_letters = DeadLetters(OnDemandProducer(log), codec, region, "projection/fleet")
    factory = SeekingFactory(
        writer, Decoder(codec), DeadLetterGuard(dead_letters, DeadLetterPolicy())
    )
    topics = [topic_name(region, t) for t in FLEET_TOPICS]
    return Processor(log, f"{region}.projection.fleet", topics, factory)
