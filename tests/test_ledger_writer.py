"""The ledger on chdb: the money adds up, a batch inserted twice counts once, and a restart
(or a rate card older than memory) prices exactly as an uninterrupted run."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pytest

import projections.ledger.writer as ledger_writer
from projections.ledger.pricing import price
from projections.ledger.rates import Card, RateBook
from projections.ledger.rule import COST_CAUSES, RECORDED
from projections.ledger.store import ChdbStore, LedgerError
from projections.ledger.writer import LedgerWriter
from schemas.events import RateCard, UsageInterval
from tests.projection_support import (
    Positioned,
    batches,
    event,
    next_positions,
    positioned,
    sim_events,
)

Lines = dict[tuple[str, str, str, str], int]


def ledger_events() -> list[Positioned]:
    return [pe for pe in sim_events() if pe[0].topic.split(".")[1] != "deadletter"]


def write(writer: LedgerWriter, events: list[Positioned], size: int) -> None:
    for batch in batches(events, size):
        result = writer.write(batch, next_positions(batch))
        assert result.unpriced == []


def lines(store: ChdbStore) -> Lines:
    rows = store.query(
        "SELECT workload_id, toString(day) AS day, cause, toString(event_id) AS event_id,"
        " amount_eur_micros FROM ledger_lines FINAL"
    )
    return {
        (r["workload_id"], r["day"], r["cause"], r["event_id"]): r["amount_eur_micros"]
        for r in rows
    }


def test_counterfactual_minus_cost_lines_is_the_net_saving_for_every_workload_and_day(
    ledger_store: ChdbStore,
) -> None:
    write(LedgerWriter(ledger_store), ledger_events(), 2000)
    per_day: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (workload, day, cause, _), amount in lines(ledger_store).items():
        per_day[(workload, day)][cause] += amount
    saving = ledger_store.query(
        "SELECT workload_id, toString(day) AS day, counterfactual_eur_micros AS c,"
        " cost_eur_micros AS k, net_saving_eur_micros AS n FROM net_saving"
    )
    assert len(saving) == len(per_day) > 10
    for row in saving:
        causes = per_day[(row["workload_id"], row["day"])]
        costs = sum(causes[c] for c in COST_CAUSES)
        assert row["c"] == causes["counterfactual"]
        assert row["k"] == costs
        assert row["n"] == causes["counterfactual"] - costs
        assert isinstance(row["n"], int)
    # Totals equal the sum of the rows.
    total = ledger_store.query(
        "SELECT sum(net_saving_eur_micros) AS n, sum(counterfactual_eur_micros) AS c"
        " FROM net_saving"
    )[0]
    assert total["n"] == sum(r["n"] for r in saving)
    assert total["c"] == sum(r["c"] for r in saving) > total["n"] > 0


def test_every_line_names_the_event_that_caused_it_and_that_events_workload(
    ledger_store: ChdbStore,
) -> None:
    write(LedgerWriter(ledger_store), ledger_events(), 3000)
    orphans = ledger_store.query(
        "SELECT count() AS n FROM ledger_lines AS l FINAL"
        " LEFT ANTI JOIN (SELECT event_id FROM events FINAL) AS e ON l.event_id = e.event_id"
    )
    assert orphans == [{"n": 0}]
    charged_elsewhere = ledger_store.query(
        "SELECT count() AS n FROM ledger_lines AS l FINAL"
        " JOIN (SELECT event_id, JSONExtractString(payload, 'workload_id') AS w FROM events FINAL)"
        " AS e ON l.event_id = e.event_id WHERE e.w != l.workload_id"
    )
    assert charged_elsewhere == [{"n": 0}]
    causes = {r["cause"] for r in ledger_store.query("SELECT DISTINCT cause FROM ledger_lines")}
    assert {"counterfactual", "reclaimable_spend", "footprint", "checkpoint_storage"} <= causes


def test_the_stored_lines_are_what_pricing_in_python_gives(ledger_store: ChdbStore) -> None:
    events = ledger_events()
    write(LedgerWriter(ledger_store), events, 1500)
    book = RateBook()
    expected: Lines = {}
    for _, e in events:
        p = e.payload
        if isinstance(p, RateCard):
            card = Card(
                p.valid_from_at,
                e.event_id,
                p.valid_until_at,
                p.price_per_vcpu_h_eur_micros,
                p.guaranteed_price_per_vcpu_h_eur_micros,
                p.purchase_model,
            )
            book.add(p.pool_id, card)
        for line in price(e, book, RECORDED):
            day = str(pa.scalar(line.day, pa.date32()))
            expected[(line.workload_id, day, line.cause, line.event_id)] = line.amount_eur_micros
    assert lines(ledger_store) == expected


def test_a_batch_inserted_again_after_a_crash_counts_once(ledger_store: ChdbStore) -> None:
    events = ledger_events()
    first = LedgerWriter(ledger_store)
    write(first, events, 2000)
    before = lines(ledger_store)
    raw_before = ledger_store.query("SELECT count() AS n FROM ledger_lines")[0]["n"]
    # A restart that did not see its offsets: the last batches go in again, cut differently.
    again = LedgerWriter(ledger_store)
    write(again, events[-5000:], 700)
    raw_after = ledger_store.query("SELECT count() AS n FROM ledger_lines")[0]["n"]
    assert lines(ledger_store) == before
    assert raw_after >= raw_before  # the duplicates are there until a merge; FINAL hides them
    total = ledger_store.query("SELECT sum(net_saving_eur_micros) AS n FROM net_saving")[0]["n"]
    assert total == sum(v if k[2] == "counterfactual" else -v for k, v in before.items())


def test_a_restart_prices_from_the_stored_rate_cards(
    chdb_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = ledger_events()
    whole = ChdbStore(chdb_path, "restart_whole")  # type: ignore[arg-type]
    split = ChdbStore(chdb_path, "restart_split")  # type: ignore[arg-type]
    try:
        write(LedgerWriter(whole), events, 2500)
        # Memory holds ten minutes of cards behind the newest event: older usage must be priced
        # from the cards the store holds.
        monkeypatch.setattr(ledger_writer, "RATE_HORIZON_US", 600_000_000)
        half = len(events) // 2
        write(LedgerWriter(split), events[:half], 2500)
        restarted = LedgerWriter(split)
        assert len(restarted.book) < sum(1 for _, e in events[:half] if e.event_type == "rate_card")
        write(restarted, events[half:], 2500)
        assert lines(split) == lines(whole)
    finally:
        whole.command("DROP DATABASE IF EXISTS restart_whole")
        split.command("DROP DATABASE IF EXISTS restart_split")


def test_an_event_that_cannot_be_priced_is_reported_with_its_position(
    ledger_store: ChdbStore,
) -> None:
    lost = event(
        UsageInterval("wl", "i", "no-such-pool", "reclaimable", 0, 3_600_000_000, 2, 2.0),
        3600,
        name="u",
    )
    result = LedgerWriter(ledger_store).write(positioned([lost]), {})
    assert len(result.unpriced) == 1
    origin, reason = result.unpriced[0]
    assert origin.topic == "t.usage" and "no rate card for pool 'no-such-pool'" in reason


def test_one_chdb_path_per_process_is_a_clear_error(
    ledger_store: ChdbStore, tmp_path: object
) -> None:
    with pytest.raises(LedgerError, match="one data path per process"):
        ChdbStore(tmp_path / "other", "x")  # type: ignore[operator]


def test_an_unreachable_clickhouse_server_is_one_sentence() -> None:
    from projections.ledger.store import ServerStore

    with pytest.raises(
        LedgerError, match=r"cannot reach ClickHouse at http://u:\*\*\*@127\.0\.0\.1:1"
    ):
        ServerStore("http://u:secret@127.0.0.1:1", connect_timeout_s=1)
