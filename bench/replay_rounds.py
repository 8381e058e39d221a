"""`bench/replay.py`'s rounds: each engine of `spotcap replay` against its bare reference on a
demo's log, in alternating rounds (the default of `bench/replay.py`).

The home is a real demo (`--days` of the default region, seed 1, as `spotcap demo --days N`
simulates it) with its ledger brought up to date, made in a temporary folder (or once under
--home, and reused while the envelope's schema is the same). Each round runs, for each engine,
both sides, the side that goes first alternating (the engine first in odd rounds), and checks
outside the clock that both gave the same amounts per workload, day and cause:

- python: what `spotcap replay --engine python` runs after its ledger catch-up
  (`replay.run.replay_log`): the ledger's topics read through `MergedHistory` and folded by
  `replay.fold.Fold` under the recorded rule; bare: `bench/replay_bare.py` (fastavro's reader
  over the segments, `heapq.merge`, the ledger's pricing written plainly);
- clickhouse: what `spotcap replay --engine clickhouse` runs after its catch-up: the SQL the
  engine makes of the recorded rule over the ledger's tables; bare: the recorded rule's query
  written plainly (`bench/replay_sql_bare.py`) run by a chdb session of its own over the same
  tables;
- with --archive-month (`archive`): the ClickHouse engine over an archive's month folders (the
  files `spotcap archive export` writes); bare: the same query over the same files
  (`bench/replay_parquet_bare.py`).

CPU is this process's (chdb runs in it: its threads' CPU time is ours). Each round's ratio is
its own pair's (the bare side's time over the engine's: 1.0 is as fast as the libraries
alone); the median and range over the rounds are printed.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import replay_bare, replay_parquet_bare, replay_sql_bare
from bench.export import prepare, say, spread
from projections.ledger.store import ChdbStore
from projections.ledger.writer import LEDGER_TOPICS
from projections.stores import Stores
from replay.archive import layout
from replay.rule_file import load_rule, shipped_rule_path
from replay.run import replay_clickhouse, replay_python
from replay.sql import LEDGER_RELATIONS, ParquetMonth, parquet_relations
from schemas.catalogue import envelope_schema
from schemas.codec import Codec
from streams.embedded import EmbeddedLog
from streams.merged import MergedHistory

REGION = "dev"
Amounts = dict[tuple[str, int, str], int]
Side = Callable[[], tuple[int, Amounts]]


def python_engine(home: Path) -> tuple[int, Amounts]:
    """`replay_log`'s Python engine, after its catch-up (the ledger is up to date)."""
    rule = load_rule(shipped_rule_path("recorded"))
    log = EmbeddedLog(home / "log")
    try:
        history = MergedHistory(
            log, Codec(), REGION, LEDGER_TOPICS, poll_records=2000, buffer_per_partition=4000
        )
        result = replay_python([rule], (d.envelope for d in history))[0]
    finally:
        log.close()
    return result.events, result.amounts


def clickhouse_engine(store: ChdbStore) -> tuple[int, Amounts]:
    """`replay_log`'s ClickHouse engine over the ledger's tables."""
    rule = load_rule(shipped_rule_path("recorded"))
    result = replay_clickhouse(store, LEDGER_RELATIONS, rule)
    return result.events, result.amounts


def measure(name: str, engine: Side, bare: Side, rounds: int) -> None:
    """`rounds` alternating rounds of the engine and its bare side; the figures printed."""
    wall: dict[str, list[float]] = {"engine": [], "bare": []}
    cpu: dict[str, list[float]] = {"engine": [], "bare": []}
    sides = {"engine": engine, "bare": bare}
    events = 0
    for r in range(rounds):
        order = ("engine", "bare") if r % 2 == 0 else ("bare", "engine")
        got: dict[str, tuple[int, Amounts]] = {}
        for side in order:
            started, cpu_started = time.monotonic(), time.process_time()
            got[side] = sides[side]()
            wall[side].append(time.monotonic() - started)
            cpu[side].append(time.process_time() - cpu_started)
        (events, amounts), (bare_events, bare_amounts) = got["engine"], got["bare"]
        assert events == bare_events, f"{name}: {events:,} events read, bare {bare_events:,}"
        _same(name, amounts, bare_amounts)
        say(
            f"  {name} round {r + 1}/{rounds} ({order[0]} first): engine {wall['engine'][-1]:.2f} s"
            f" ({cpu['engine'][-1]:.2f} s CPU), bare {wall['bare'][-1]:.2f} s"
            f" ({cpu['bare'][-1]:.2f} s CPU), the same {len(amounts):,} amounts"
        )
    ratios = {
        kind: [b / e for e, b in zip(times["engine"], times["bare"], strict=True)]
        for kind, times in (("wall", wall), ("cpu", cpu))
    }
    say(f"\n{name}: {events:,} events, {rounds} rounds")
    say(f"{'':<8} {'events/s wall, median (range)':>32} {'per CPU-second':>28}")
    for side in ("engine", "bare"):
        rate_wall = [events / s for s in wall[side]]
        rate_cpu = [events / s for s in cpu[side]]
        say(f"{side:<8} {spread(rate_wall, '{:,.0f}'):>32} {spread(rate_cpu, '{:,.0f}'):>28}")
    wall_ratio, cpu_ratio = spread(ratios["wall"], "{:.2f}"), spread(ratios["cpu"], "{:.2f}")
    say(f"{'ratio':<8} {wall_ratio:>32} {cpu_ratio:>28}\n")


def _same(name: str, ours: Amounts, bare: Amounts) -> None:
    if ours == bare:
        return
    differ = sorted(k for k in set(ours) | set(bare) if ours.get(k) != bare.get(k))
    shown = ", ".join(f"{k}: {ours.get(k)} against {bare.get(k)}" for k in differ[:5])
    raise AssertionError(f"{name}: {len(differ):,} amounts differ from the bare side's: {shown}")


def run(
    home: Path | None, days: float, rounds: int, engines: list[str], months: list[Path] | None
) -> None:
    """The rounds on a demo's log and ledger; or, given `months`, over those month folders of
    an archive."""
    if months:
        with tempfile.TemporaryDirectory(prefix="bench-replay-files-") as tmp:
            archive(ChdbStore(Path(tmp)), months, rounds)
        return
    with tempfile.TemporaryDirectory(prefix="bench-replay-rounds-") as tmp:
        where = home or Path(tmp) / "home"
        prepare(where, days)
        schema: Any = envelope_schema()
        if "python" in engines:
            measure(
                "python engine",
                lambda: python_engine(where),
                lambda: replay_bare.replay(where / "log", REGION, schema),
                rounds,
            )
        if "clickhouse" in engines:
            stores = Stores(where)
            store = stores.open_ledger()
            assert isinstance(store, ChdbStore)
            path, database = stores.ledger_location()
            bare = replay_sql_bare.PlainReplay(path, database)
            measure("clickhouse engine", lambda: clickhouse_engine(store), bare.run, rounds)


def archive(store: ChdbStore, months: list[Path], rounds: int) -> None:
    """Rounds of the ClickHouse engine over the month folders `months` (in order) against
    `bench/replay_parquet_bare.py`, by `store`'s chdb (the process's one data path), the bare
    side in a session of its own."""
    rule = load_rule(shipped_rule_path("recorded"))
    names = (layout.EVENTS, *layout.DERIVED_FILES)
    relations = parquet_relations([ParquetMonth(*(str(m / n) for n in names)) for m in months])

    def engine() -> tuple[int, Amounts]:
        result = replay_clickhouse(store, relations, rule)
        return result.events, result.amounts

    bare = replay_parquet_bare.ParquetReplay(store.path, months)
    measure(f"clickhouse engine ({len(months)} month folder(s) of files)", engine, bare.run, rounds)
