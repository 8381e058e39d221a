"""Running a replay: one rule (or several, in one pass of the Python fold) over a history, by
either engine, timed; the result is the what-if ledger per workload, day and cause.

The history is the log (`replay_log`: the ledger's tables for the ClickHouse engine, the merged
history for the Python one) or the archive (`replay_archive`: its Parquet files, each checked
against its manifest). `spotcap replay` brings the ledger up to date first.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from projections.ledger.store import ChdbStore, LedgerStore
from projections.ledger.writer import LEDGER_TOPICS
from projections.stores import Stores
from replay.archive import layout
from replay.archive.read import archive_events_files, archive_history
from replay.archive.storage import ArchiveError, ArchiveStorage
from replay.fold import Fold, LineKey
from replay.rule import Rule
from replay.sql import LEDGER_RELATIONS, ParquetMonth, Relations, SqlReplay, parquet_relations
from schemas.codec import Codec
from schemas.events import Envelope
from streams.log import EventLog
from streams.merged import MergedHistory

ENGINES = ("clickhouse", "python")
DAY_US = 86_400_000_000


@dataclass(frozen=True, slots=True)
class Replayed:
    rule: Rule
    engine: str  # "python" | "clickhouse"
    amounts: dict[LineKey, int]
    events: int  # events of the history the engine went through
    unpriced: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def replay_python(
    rules: Sequence[Rule],
    history: Iterable[Envelope],
    first_day: int | None = None,
    last_day: int | None = None,
) -> list[Replayed]:
    """Every rule in one pass over `history` (the time is the pass's, for each)."""
    started = time.monotonic()
    fold = Fold(rules, first_day, last_day)
    fold.feed_all(history)
    results = fold.results()
    seconds = time.monotonic() - started
    return [
        Replayed(rule, "python", amounts, fold.events, len(fold.unpriced), seconds)
        for rule, amounts in zip(rules, results, strict=True)
    ]


def replay_clickhouse(
    store: LedgerStore,
    relations: Relations,
    rule: Rule,
    *,
    first_day: int | None = None,
    last_day: int | None = None,
    on_step: Callable[[str], None] | None = None,
) -> Replayed:
    started = time.monotonic()
    engine = SqlReplay(store, relations)
    amounts = engine.run(rule, first_day, last_day, on_step)
    seconds = time.monotonic() - started
    counted = relations.counted or f"SELECT count() AS n FROM ({relations.events})"
    rows = store.query(counted)
    return Replayed(rule, "clickhouse", amounts, int(rows[0]["n"]), 0, seconds)


# Hears how a replay goes: (what is being done, records done, records in all when known).
OnProgress = Callable[[str, int, int | None], None]


def replay_log(
    log: EventLog,
    codec: Codec,
    region: str,
    rule: Rule,
    stores: Stores,
    *,
    engine: str,
    first_day: int | None = None,
    last_day: int | None = None,
    on_progress: OnProgress | None = None,
) -> Replayed:
    """`rule` over `region`'s history in the log. The ledger is brought up to date first (the
    recorded ledger and the ClickHouse engine's tables are the ledger's); then the ClickHouse
    engine runs over its tables, or the Python fold over the merged history."""
    from projections.catchup import catch_up, open_writer  # the catch-up's libraries

    show = on_progress or (lambda _what, _done, _total: None)
    catch_up(
        log,
        codec,
        region,
        open_writer(stores, "ledger"),
        on_progress=lambda p: show(
            "bringing the ledger up to date", p.records_read, p.records_total
        ),
    )
    if engine == "clickhouse":
        return replay_clickhouse(
            stores.open_ledger(),
            LEDGER_RELATIONS,
            rule,
            first_day=first_day,
            last_day=last_day,
            on_step=lambda step: show(f"in ClickHouse: {step}", 0, None),
        )
    history = MergedHistory(
        log, codec, region, LEDGER_TOPICS, poll_records=2000, buffer_per_partition=4000
    )

    def events() -> Iterator[Envelope]:
        for n, decoded in enumerate(history, 1):
            if n % 5000 == 0:
                show(
                    f"replaying {rule.name}",
                    history.progress.records_read,
                    history.progress.records_total,
                )
            yield decoded.envelope

    return replay_python([rule], events(), first_day, last_day)[0]


def replay_archive(
    storage: ArchiveStorage,
    region: str,
    rule: Rule,
    stores: Stores,
    *,
    engine: str,
    first_day: int | None = None,
    last_day: int | None = None,
    on_progress: OnProgress | None = None,
) -> Replayed:
    """`rule` over `region`'s archived months: the ClickHouse engine reads their Parquet files
    through the embedded ledger's engine (the stores' ledger must be chdb), the Python fold
    their events.
    A usage interval is archived in the month it ended in, which may be after the range's last
    day: the months up to a week after it are read."""
    last_month = None if last_day is None else layout.month_of_us((last_day + 8) * DAY_US - 1)
    first_month = None if first_day is None else layout.month_of_us(max(first_day - 7, 0) * DAY_US)
    with tempfile.TemporaryDirectory(prefix="spotcap-replay-") as tmp:
        files = archive_events_files(storage, region, Path(tmp), last_month)
        if engine == "python":
            archived = archive_history([(m.month, m.events) for m in files], first_month)
            return replay_python([rule], archived, first_day, last_day)[0]
        ledger = stores.open_ledger()
        if not isinstance(ledger, ChdbStore):
            raise ArchiveError(
                "the ClickHouse engine reads an archive through the embedded ledger (chdb); "
                "with a ClickHouse server, replay the archive with --engine python"
            )
        relations = parquet_relations(
            [
                ParquetMonth(
                    str(m.events),
                    *(
                        None if f is None else str(f)
                        for f in (m.rate_cards, m.usage, m.checkpoints, m.priced)
                    ),
                )
                for m in files
            ]
        )
        show = on_progress or (lambda _what, _done, _total: None)
        return replay_clickhouse(
            ledger,
            relations,
            rule,
            first_day=first_day,
            last_day=last_day,
            on_step=lambda step: show(f"in ClickHouse: {step}", 0, None),
        )
