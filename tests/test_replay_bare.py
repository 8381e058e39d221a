"""`bench/replay.py`'s bare references give what `spotcap replay` gives, so that its ratios are
against the same work: the bare fold (`bench/replay_bare.py`: fastavro over the log's segments,
`heapq.merge`, the ledger's pricing written plainly) the Python engine's amounts, and the plain
query (`bench/replay_sql_bare.py`, chdb alone) the ClickHouse engine's, on a demo of a quarter
of a day of the default region; and the figures they copy are the project's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import replay_bare, replay_sql_bare
from bench.ledger_bare import PLATFORM as BARE_PLATFORM
from projections.ledger.writer import LEDGER_TOPICS
from replay.rule import PLATFORM
from replay.rule_file import load_rule, shipped_rule_path
from replay.run import Replayed, replay_log
from schemas.catalogue import envelope_schema
from sim.region import SimConfig
from spotcap.wiring import make_codec, open_log, stores
from tests.replay_support import History

REGION = "rbare"
RULE = load_rule(shipped_rule_path("recorded"))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, chdb_path: Path) -> History:
    return History(
        tmp_path_factory.mktemp("replay-bare"), SimConfig(seed=1, days=0.25, region=REGION)
    )


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
