"""The ledger on chdb: the money adds up, a batch inserted twice counts once, and a restart
(or a rate card older than memory) prices exactly as an uninterrupted run."""

from __future__ import annotations

import re
from collections import defaultdict
from importlib import resources

import pyarrow as pa
import pytest

import projections.ledger.writer as ledger_writer
from projections.ledger.pricer import Pricer
from projections.ledger.pricing import DAY_US, LedgerLine
from projections.ledger.rule import COST_CAUSES, RECORDED
from projections.ledger.store import ChdbStore, LedgerError
from projections.ledger.writer import LedgerWriter
from schemas.events import CapacityClaimOpened, CapacityReleased, RateCard, UsageInterval
from tests.projection_support import (
    Positioned,
    batches,
    event,
    next_positions,
    positioned,
    sim_events,
)

Lines = dict[tuple[str, str, str, str], int]
US_PER_H = 3_600_000_000


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
    assert total["c"] == sum(r["c"] for r in saving) > 0
    # The workloads save; the region's reservations, mostly idle for 30 workloads, cost more.
    workloads = ledger_store.query(
        "SELECT sum(net_saving_eur_micros) AS n FROM net_saving WHERE workload_id != '(platform)'"
    )[0]
    assert total["c"] > workloads["n"] > 0 > total["n"]


def test_every_line_names_the_event_that_caused_it_and_that_events_workload(
    ledger_store: ChdbStore,
) -> None:
    write(LedgerWriter(ledger_store), ledger_events(), 3000)
    # A line's event is the event that caused it; an hour of a reservation's cost names the
    # reservation instead (its id is derived from the reservation and the hour).
    orphans = ledger_store.query(
        "SELECT count() AS n FROM ledger_lines AS l FINAL"
        " LEFT ANTI JOIN (SELECT event_id FROM events FINAL) AS e"
        " ON (l.event_type = 'reservation_committed' ? toUUID(l.decided_by) : l.event_id)"
        " = e.event_id"
    )
    assert orphans == [{"n": 0}]
    charged_elsewhere = ledger_store.query(
        "SELECT count() AS n FROM ledger_lines AS l FINAL"
        " JOIN (SELECT event_id, JSONExtractString(payload, 'workload_id') AS w FROM events FINAL)"
        " AS e ON l.event_id = e.event_id WHERE e.w != l.workload_id AND l.cause != 'idle_floor'"
    )
    assert charged_elsewhere == [{"n": 0}]
    platform = ledger_store.query(
        "SELECT DISTINCT workload_id AS w FROM ledger_lines FINAL WHERE cause = 'idle_floor'"
    )
    assert platform == [{"w": "(platform)"}]
    causes = {r["cause"] for r in ledger_store.query("SELECT DISTINCT cause FROM ledger_lines")}
    assert {
        "counterfactual", "reclaimable_spend", "footprint", "checkpoint_storage", "surplus",
        "idle_floor",
    } <= causes  # fmt: skip
    # A surplus line names the decision that launched the instance (the sim's baseline's).
    unnamed = ledger_store.query(
        "SELECT count() AS n FROM ledger_lines FINAL WHERE cause = 'surplus' AND decided_by = ''"
    )
    assert unnamed == [{"n": 0}]


def test_the_stored_lines_are_what_pricing_in_python_gives(ledger_store: ChdbStore) -> None:
    events = ledger_events()
    write(LedgerWriter(ledger_store), events, 1500)
    pricer = Pricer(RECORDED)
    expected: Lines = {}
    made = [line for _, e in events for line in pricer.feed(e)] + pricer.advance()
    for line in made:
        day = str(pa.scalar(line.day, pa.date32()))
        key = (line.workload_id, day, line.cause, line.event_id)
        expected[key] = expected.get(key, 0) + line.amount_eur_micros
    got = lines(ledger_store)
    # The idle floor accrues hour by hour: the one pass has one line an hour, the batches too.
    assert got == expected


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


def test_memory_forgets_nothing_of_a_batch_not_yet_stored(
    ledger_store: ChdbStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write-behind caller prepares a batch while the one before is being stored: the store
    cannot yet answer for that one, so memory keeps its cards past the horizon until it is."""
    monkeypatch.setattr(ledger_writer, "RATE_HORIZON_US", 600_000_000)  # ten minutes
    monkeypatch.setattr(ledger_writer, "MEMORY_HORIZON_US", 600_000_000)
    first, second, third = batches(ledger_events(), 3000)[:3]
    cards = [
        (e.payload.pool_id, (e.payload.valid_from_at, e.occurred_at, e.event_id,
                             e.payload.valid_until_at, e.payload.price_per_vcpu_h_eur_micros,
                             e.payload.guaranteed_price_per_vcpu_h_eur_micros,
                             e.payload.purchase_model))
        for _, e in first
        if isinstance(e.payload, RateCard)
    ]  # fmt: skip
    writer = LedgerWriter(ledger_store)
    prepared = writer.prepare(first, next_positions(first))
    writer.prepare(second, next_positions(first + second))  # the first one not stored yet
    assert writer.pricer.facts_until_us is not None
    old = [c for c in cards if c[1][0] < writer.pricer.facts_until_us - 600_000_000]
    assert old, "the batches span more than the horizon"
    assert all(writer.book.contains(pool, row) for pool, row in old)
    writer.store_batch(prepared)  # stored: the store answers for it now, memory forgets
    writer.prepare(third, next_positions(first + second + third))
    assert not all(writer.book.contains(pool, row) for pool, row in old)


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


def test_no_workloads_counterfactual_exceeds_what_it_asked_for_at_the_guaranteed_rate(
    ledger_store: ChdbStore,
) -> None:
    """Over a simulated region (the baseline stand-in, which runs much beyond its claims), on
    every workload and UTC day: the counterfactual's vCPU-hours are at most the vCPU-hours its
    open claims asked for, and its amount at most those at the highest guaranteed rate."""
    events = [pe for pe in sim_events(days=1.5, workloads=20) if "deadletter" not in pe[0].topic]
    write(LedgerWriter(ledger_store), events, 5000)
    end_us = max(e.occurred_at for _, e in events)
    opened: dict[str, tuple[str, int, int]] = {}  # claim -> (workload, from, vCPU)
    asked_us: defaultdict[tuple[str, int], int] = defaultdict(int)  # vCPU-microseconds a day

    def ask(workload_id: str, from_us: int, to_us: int, vcpu: int) -> None:
        while from_us < to_us:
            day = from_us // DAY_US
            until = min(to_us, (day + 1) * DAY_US)
            asked_us[(workload_id, day)] += vcpu * (until - from_us)
            from_us = until

    top_rate = 0
    for _, e in events:
        p = e.payload
        if isinstance(p, CapacityClaimOpened):
            opened[p.claim_id] = (p.workload_id, e.occurred_at, p.requested_vcpu)
        elif isinstance(p, CapacityReleased) and p.claim_id in opened:
            workload_id, from_us, vcpu = opened.pop(p.claim_id)
            ask(workload_id, from_us, e.occurred_at, vcpu)
        elif isinstance(p, RateCard):
            top_rate = max(top_rate, p.guaranteed_price_per_vcpu_h_eur_micros)
    for workload_id, from_us, vcpu in opened.values():
        ask(workload_id, from_us, end_us, vcpu)
    rows = ledger_store.query(
        "SELECT workload_id, toUInt32(day) AS day, sum(quantity) AS q,"
        " sum(amount_eur_micros) AS eur, count() AS n FROM ledger_lines FINAL"
        " WHERE cause = 'counterfactual' GROUP BY workload_id, day"
    )
    surplus = ledger_store.query(
        "SELECT sum(quantity) AS q FROM ledger_lines FINAL WHERE cause = 'surplus'"
    )[0]["q"]
    assert len({r["day"] for r in rows}) == 2 and len(rows) > 20 and surplus > 0
    for r in rows:
        asked_h = asked_us[(r["workload_id"], r["day"])] / US_PER_H
        assert r["q"] <= asked_h + 1e-6 * r["n"], r  # quantities are rounded per line
        assert r["eur"] <= asked_h * top_rate + r["n"], r  # amounts too, to the micro-euro


def test_a_ledger_made_before_batches_were_numbered_gains_the_column_and_prices_the_same(
    chdb_path: object,
) -> None:
    """A ledger whose lines and priced facts have no `batch` column (made before
    ddl/0004_batches.sql) gets it on opening, at the end of the priced facts' sorting key, and
    keeps its lines; then it prices as a ledger made now."""
    text = (resources.files("projections.ledger") / "ddl" / "0001_ledger.sql").read_text()
    old_ddl = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    old_ddl = re.sub(r",\n\s+batch\s+UInt64", "", old_ddl).replace("event_id, batch)", "event_id)")
    assert "batch" not in old_ddl
    old = ChdbStore(chdb_path, "before_batches")  # type: ignore[arg-type]
    new = ChdbStore(chdb_path, "with_batches")  # type: ignore[arg-type]
    try:
        for statement in old_ddl.split(";"):
            if statement.strip():
                old.command(statement)
        kept = LedgerLine("wl-old", 20_000, "surplus", "00000000-0000-4000-8000-000000000001",
                          5, 0.5, "vcpu_h", "p", "reclaimable", "i", "usage_interval", 0,
                          "recorded")  # fmt: skip
        old.insert("ledger_lines", ledger_writer._lines_table([kept], 0).drop_columns("batch"))
        events = ledger_events()[:3000]
        write(LedgerWriter(old), events, 700)
        write(LedgerWriter(new), events, 700)
        keys = old.query(
            "SELECT name, sorting_key AS k FROM system.tables WHERE database = currentDatabase()"
            " AND name IN ('ledger_lines', 'priced_facts') ORDER BY name"
        )
        assert [r["k"] for r in keys] == [
            "workload_id, day, cause, event_id", "pool_id, to_us, event_id, batch"
        ]  # fmt: skip
        got = lines(old)
        assert got.pop(("wl-old", "2024-10-04", "surplus", kept.event_id)) == 5
        assert got == lines(new)
    finally:
        old.command("DROP DATABASE IF EXISTS before_batches")
        new.command("DROP DATABASE IF EXISTS with_batches")
