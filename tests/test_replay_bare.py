"""`bench/replay.py`'s bare references give what `spotcap replay` gives, so that its ratios are
against the same work: the bare fold (`bench/replay_bare.py`: fastavro over the log's segments,
`heapq.merge`, the ledger's pricing written plainly) the Python engine's amounts, and the plain
query (`bench/replay_sql_bare.py`, chdb alone) the ClickHouse engine's, on a demo of a quarter
of a day of the default region, over the ledger's tables and (`bench/replay_parquet_bare.py`)
over the month's files as `spotcap archive export` writes them; and the figures and names they
copy are the project's."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench import replay_bare, replay_parquet_bare, replay_sql_bare
from bench.ledger_bare import PLATFORM as BARE_PLATFORM
from contracts.signing import generate_key_pem
from projections.ledger.writer import LEDGER_TOPICS
from replay import sql as replay_sql
from replay.archive import layout
from replay.archive.export import write_typed_files
from replay.rule import PLATFORM
from replay.rule_file import load_rule, shipped_rule_path
from replay.run import Replayed, replay_log
from replay.sql import ParquetMonth, SqlReplay, parquet_relations
from schemas.catalogue import envelope_schema
from sim.region import SimConfig
from spotcap.wiring import make_codec, open_log, stores
from tests.replay_support import History

REGION = "rbare"
MONTH = "2026-11"  # the demo's quarter of a day
RULE = load_rule(shipped_rule_path("recorded"))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, chdb_path: Path) -> History:
    return History(
        tmp_path_factory.mktemp("replay-bare"), SimConfig(seed=1, days=0.25, region=REGION)
    )


@pytest.fixture(scope="module")
def archived(history: History, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the history's month in a local archive, as `spotcap archive export`
    writes it."""
    folder = tmp_path_factory.mktemp("replay-bare-archive")
    (folder / "archive.key").write_bytes(generate_key_pem()[0])
    where = folder / "local"
    done = history.json(
        "archive", "export", "--month", MONTH, "--archive", str(where),
        "--key", str(folder / "archive.key"),
    )  # fmt: skip
    assert done["month"] == MONTH and done["events"] > 10_000
    return (where / layout.key(REGION, MONTH, layout.EVENTS)).parent


def halves(month: Path, where: Path) -> list[Path]:
    """The month's events split in two at its middle, each half a month folder with its
    derived files (as two exported months are: the second's integrals offset by the first's)."""
    table = pq.read_table(month / layout.EVENTS)
    times = table.column("occurred_at").cast("int64")
    middle = (pc.min(times).as_py() + pc.max(times).as_py()) // 2
    folders = []
    for k, keep in enumerate((pc.less(times, middle), pc.greater_equal(times, middle))):
        folder = where / f"half-{k}"
        folder.mkdir()
        pq.write_table(table.filter(keep), folder / layout.EVENTS)
        write_typed_files(folder / layout.EVENTS, folder)
        folders.append(folder)
    return folders


def replayed(h: History, engine: str) -> Replayed:
    """What `spotcap replay --engine ENGINE` computes (the ledger brought up to date first)."""
    log = open_log(h.settings)
    try:
        return replay_log(
            log, make_codec(h.settings), REGION, RULE, stores(h.settings), engine=engine
        )
    finally:
        log.close()


def test_the_bare_fold_gives_the_python_engines_amounts(history: History) -> None:
    ours = replayed(history, "python")
    events, amounts = replay_bare.replay(history.settings.log_dir, REGION, envelope_schema())
    assert events == ours.events > 10_000
    assert amounts == ours.amounts
    # Every kind of line is there to compare: usage in each purchase model beyond what was
    # asked for, waste, checkpoints, the reservations' idle floor.
    causes = {cause for _, _, cause in amounts}
    assert {"surplus", "floor_spend", "wasted_work", "checkpoint_storage", "idle_floor"} <= causes


def test_the_plain_query_gives_the_clickhouse_engines_amounts(history: History) -> None:
    ours = replayed(history, "clickhouse")
    path, database = stores(history.settings).ledger_location()
    events, amounts = replay_sql_bare.PlainReplay(path, database).run()
    assert events == ours.events > 10_000
    assert amounts == ours.amounts
    assert {"surplus", "wasted_work", "checkpoint_storage", "idle_floor"} <= {
        cause for _, _, cause in amounts
    }


@pytest.mark.parametrize("split", [False, True], ids=["one month", "two months"])
def test_the_plain_query_over_the_archive_gives_the_engines_amounts(
    history: History, archived: Path, split: bool, tmp_path: Path
) -> None:
    months = halves(archived, tmp_path) if split else [archived]
    relations = parquet_relations(
        [ParquetMonth(*(str(m / name) for name in (layout.EVENTS, *layout.DERIVED_FILES)))
         for m in months]
    )  # fmt: skip
    store = stores(history.settings).open_ledger()
    engine = SqlReplay(store, relations)
    ours = engine.run(RULE)
    assert engine.cards_from_integrals  # the engine took the files' integrals, as compared
    assert relations.counted is not None
    path, _ = stores(history.settings).ledger_location()
    events, amounts = replay_parquet_bare.ParquetReplay(path, months).run()
    assert events == store.query(relations.counted)[0]["n"] > 10_000
    assert amounts == ours
    # The whole history is in the month: the same amounts as over the ledger's tables.
    assert amounts == replayed(history, "clickhouse").amounts


def test_the_bare_sides_copy_the_projects_figures() -> None:
    assert replay_bare.TOPICS == LEDGER_TOPICS
    assert BARE_PLATFORM == replay_sql_bare.PLATFORM == PLATFORM
    assert RULE.allowed_lateness_s * 1_000_000 == replay_sql_bare.LATE_US
    assert RULE.usage_quanta_per_vcpu_h == replay_sql_bare.Q_H
    assert RULE.waste_quanta_per_vcpu_s == replay_sql_bare.Q_S
    assert RULE.footprint.agent_millicpu_per_instance == replay_sql_bare.AGENT_MILLI
    assert RULE.footprint.control_plane_eur_micros_per_vcpu_h == replay_sql_bare.CONTROL_PLANE
    assert RULE.checkpoint_storage.eur_micros_per_gb_month == replay_sql_bare.CKPT_MICROS
    assert RULE.checkpoint_storage.retention_days == replay_sql_bare.CKPT_DAYS
    assert layout.ARCHIVE_LATENESS_S * 1_000_000 == replay_sql_bare.LATE_US
    bare = replay_parquet_bare
    assert (bare.EVENTS, bare.RATE_CARDS, bare.USAGE, bare.CHECKPOINTS, bare.PRICED) == (
        layout.EVENTS, layout.RATE_CARDS, layout.USAGE, layout.CHECKPOINTS, layout.PRICED,
    )  # fmt: skip
    assert (bare.IN_FORCE, bare.PRICE_INTEGRAL, bare.GUARANTEED_INTEGRAL) == (
        layout.IN_FORCE, layout.PRICE_INTEGRAL, layout.GUARANTEED_INTEGRAL,
    )  # fmt: skip
    assert replay_sql_bare.EARLIEST == replay_sql.EARLIEST
