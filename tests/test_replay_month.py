"""The acceptance run of the two replay engines: 30 days of a demo region, every shipped rule
priced by the Python fold over the log and by the SQL over the same history as archive Parquet;
they agree to the micro-euro.

Thirty days go well past the fold's 7-day horizon of rate cards and over a turn of the month.
The region is the demo's in shape, made smaller so that the suite stays affordable on a shared
2-core machine: one hall of pools (not four), 40 workloads (not 220), a rate card per pool every
hour (not every 5 minutes; each 6-hour usage interval still spans six cards). The 220 workloads
of `spotcap demo --days 30` (2.2 million events) took over 30 minutes here under load;
bench/replay.py replays them.

The history is not projected into the ledger (the 3-day histories of test_replay.py compare
with the recorded ledger): the SQL engine reads the events file, as it does an archive."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from projections.ledger.rule import COUNTERFACTUAL
from projections.ledger.writer import LEDGER_TOPICS
from replay.archive import layout
from replay.archive.export import write_events_file, write_typed_files
from replay.fold import Fold, LineKey
from replay.ledgers import differing_lines
from replay.rule_file import SHIPPED, load_rule, shipped_rule_path
from replay.sql import ParquetMonth, SqlReplay, parquet_relations
from schemas.errors import Origin
from schemas.events import Envelope
from sim.region import SimConfig
from spotcap.config import Settings
from spotcap.wiring import make_codec, open_log, stores
from streams.merged import MergedHistory
from tests.home import run_demo

RULES = [load_rule(shipped_rule_path(n)) for n in SHIPPED]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # builds a 30-day history first


@dataclass(frozen=True, slots=True)
class Month:
    settings: Settings
    events_file: Path
    events: int
    by_python: dict[str, dict[LineKey, int]]


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory, chdb_path: Path) -> Month:
    root = tmp_path_factory.mktemp("replay-month")
    settings = Settings.load(home=root, region="month")
    config = SimConfig(
        seed=1, days=30, region="month", halls=1, workloads=40, rate_card_interval_s=3600
    )
    run_demo(settings, config)
    fold = Fold(RULES)
    log = open_log(settings)
    try:
        history = MergedHistory(
            log, make_codec(settings), "month", LEDGER_TOPICS, poll_records=2000
        )

        def priced() -> Iterator[tuple[Origin, Envelope]]:
            # One pass: the fold prices each event as it goes to the events file.
            for d in history:
                fold.feed(d.envelope)
                yield d.origin, d.envelope

        events = write_events_file(root / layout.EVENTS, priced(), typed=True)
    finally:
        log.close()
    assert not fold.unpriced
    by_python = dict(zip(SHIPPED, fold.results(), strict=True))
    return Month(settings, root / layout.EVENTS, events, by_python)


FORMS = ["typed", "halves", "format-2", "payloads", "mixed"]


def as_archived(month: Month, form: str) -> list[ParquetMonth]:
    """The month's files as the archive's format 3 has them (typed, the cards with their
    integrals), the same split in two months (the integrals of the second offset by the
    first's), as format 2 had them (typed, the cards without integrals), as format 1 had them
    (events only), or mixed: the first half of the history in format 1, the rest in format 3."""
    folder = month.events_file.parent
    if form == "typed":
        return [typed(folder)]
    if form == "payloads":
        return [ParquetMonth(str(month.events_file))]
    if form == "format-2":
        older = folder / "format-2"
        older.mkdir(exist_ok=True)
        for name in (layout.EVENTS, *layout.DERIVED_FILES):
            (older / name).write_bytes((folder / name).read_bytes())
        cards = pq.read_table(older / layout.RATE_CARDS)
        pq.write_table(cards.select(layout.RATE_CARDS_SCHEMA_2.names), older / layout.RATE_CARDS)
        return [typed(older)]
    table = pq.read_table(month.events_file)
    times = table.column("occurred_at").cast("int64")
    middle = (pc.min(times).as_py() + pc.max(times).as_py()) // 2
    halves = []
    for k, keep in enumerate((pc.less(times, middle), pc.greater_equal(times, middle))):
        half = folder / f"half-{k}"
        half.mkdir(exist_ok=True)
        pq.write_table(table.filter(keep), half / layout.EVENTS)
        halves.append(half)
    write_typed_files(halves[1] / layout.EVENTS, halves[1])
    if form == "halves":
        write_typed_files(halves[0] / layout.EVENTS, halves[0])
        return [typed(halves[0]), typed(halves[1])]
    return [ParquetMonth(str(halves[0] / layout.EVENTS)), typed(halves[1])]


def typed(folder: Path) -> ParquetMonth:
    return ParquetMonth(
        str(folder / layout.EVENTS),
        str(folder / layout.RATE_CARDS),
        str(folder / layout.USAGE),
        str(folder / layout.CHECKPOINTS),
        str(folder / layout.PRICED),
    )


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", SHIPPED)
def test_the_engines_agree_to_the_micro_euro_over_30_days(
    name: str, form: str, month: Month
) -> None:
    python = month.by_python[name]
    assert month.events > 50_000
    assert len({k[0] for k in python}) >= 35 and len({k[1] for k in python}) >= 30
    sql = SqlReplay(
        stores(month.settings).open_ledger(), parquet_relations(as_archived(month, form))
    )
    assert differing_lines(python, sql.run(RULES[SHIPPED.index(name)], None, None)) == {}
    assert sql.cards_from_integrals == (form in ("typed", "halves"))
    if name != "recorded":
        assert python != month.by_python["recorded"]  # the rule changes something
    assert sum(v for k, v in python.items() if k[2] == COUNTERFACTUAL) > 0
