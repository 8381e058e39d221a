"""Running a replay: one rule (or several, in one pass of the Python fold) over a history, by
either engine, timed; the result is the what-if ledger per workload, day and cause."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from projections.ledger.store import LedgerStore
from replay.fold import Fold, LineKey
from replay.rule import Rule
from replay.sql import Relations, SqlReplay
from schemas.events import Envelope


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
