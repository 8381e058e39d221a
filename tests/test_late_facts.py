"""Event time, not arrival (issue 22): whatever order the market's events arrive in, the
recorded ledger (written in batches, restarted midway), a rebuild, the Python fold and the SQL
engine agree to the micro-euro, and all of them equal the history priced in event-time order.

A small history of one workload on a reclaimable and a committed pool: claims, launches, a
loss, hourly usage, wasted work, a reservation and rate cards. Hypothesis adds rate cards
published late (some within the allowed lateness of an hour, some beyond it, some correcting a
card with the same start), shuffles the order in which the market partition holds its events,
and merges the topics as the merged history does (the next event is the head with the smallest
event time), so cards arrive after events they price, by up to the whole history."""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.ledger.pricer import Pricer
from projections.ledger.rule import RECORDED
from projections.ledger.store import ChdbStore
from projections.ledger.writer import LedgerWriter
from replay.fold import Fold
from replay.ledgers import differing_lines, recorded_amounts
from replay.rule_file import load_rule, shipped_rule_path
from replay.sql import LEDGER_RELATIONS, SqlReplay
from schemas.events import (
    CapacityClaimOpened,
    CapacityReleased,
    CheckpointWritten,
    ContractPublished,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    Payload,
    PoolRegistered,
    PurchaseModel,
    RateCard,
    ReservationCommitted,
    UsageInterval,
    WorkWasted,
)
from schemas.ids import derived_event_id
from tests.projection_support import Positioned, batches, next_positions, positioned

H = 3_600_000_000
MIN = 60_000_000
T0 = (1_796_000_000_000_000 // H + 1) * H  # a whole hour, inside every retention window
W, RECL, COMM = "wl-late", "c7.4.hall-a.reclaimable", "c7.8.hall-a.committed"
LATENESS = RECORDED.allowed_lateness_s * 1_000_000
RULE = load_rule(shipped_rule_path("recorded"))


def env(payload: Payload, at: int, name: str, causation: str | None = None) -> Envelope:
    return Envelope(
        event_id=derived_event_id(f"late/{name}", payload.EVENT_TYPE),
        event_type=payload.EVENT_TYPE,
        occurred_at=at,
        recorded_at=at,
        region="t",
        key=str(getattr(payload, payload.KEY)),
        causation_id=causation,
        correlation_id=None,
        producer="tests",
        payload=payload,
    )


def card(
    pool: str, model: PurchaseModel, start: int, price: int, *, name: str, at: int
) -> Envelope:
    return env(RateCard(pool, model, price, 40_000, start, start + 30 * MIN), at, name)


def registered(pool: str, size: int, model: PurchaseModel) -> Envelope:
    return env(
        PoolRegistered(pool, "c7", size, "hall-a", "c7", model, "hall-a:c7", 512, {}, 0.01),
        T0,
        f"pool/{pool}",
    )


def instance_usage(instance: str, pool: str, model: PurchaseModel, vcpu: int, *, a: int,
                   b: int) -> list[Envelope]:  # fmt: skip
    """Hourly usage intervals of an instance over [a, b), each at its end."""
    out, start = [], a
    while start < b:
        end = min(b, (start // H + 1) * H)
        used = vcpu * (end - start) / H
        out.append(env(UsageInterval(W, instance, pool, model, start, end, vcpu, used), end,
                       f"usage/{instance}/{start}"))  # fmt: skip
        start = end
    return out


def base_history() -> list[Envelope]:
    """The history on time, in event-time order."""
    events = [
        registered(RECL, 4, "reclaimable"),
        registered(COMM, 8, "committed"),
        env(ReservationCommitted("r-1", COMM, 16, T0, T0 + 10 * H, 30_000), T0, "reservation"),
        env(ContractPublished(W, 1, "0" * 64, "team", "t3", 120, "resume", True, False, 0.05,
                              16, 8, 5_000_000, "oncall@example.org", 1), T0, "contract"),
    ]  # fmt: skip
    for k in range(17):  # the reclaimable pool's cards every half hour, the committed's two
        start = T0 + k * 30 * MIN
        events.append(card(RECL, "reclaimable", start, 10_000 + 500 * k, name=f"card/{k}",
                           at=start))  # fmt: skip
    events += [card(COMM, "committed", T0 + k * 4 * H, 30_000, name=f"ccard/{k}",
                    at=T0 + k * 4 * H) for k in range(2)]  # fmt: skip

    def claim(name: str, vcpu: int, a: int, b: int) -> list[Envelope]:
        opened = env(CapacityClaimOpened(name, W, "kubernetes", "k", vcpu, "pods"), a, name)
        return [opened, env(CapacityReleased(name, W, "kubernetes", vcpu, "done"), b, name)]

    def launched(instance: str, pool: str, model: PurchaseModel, vcpu: int, at: int) -> Envelope:
        decision = derived_event_id(f"late/{instance}", "placement_decided")
        return env(InstanceLaunched(instance, pool, W, vcpu, model, {}), at, instance, decision)

    events += claim("c-1", 8, T0 + 10 * MIN, T0 + 6 * H)
    events += claim("c-2", 4, T0 + 2 * H, T0 + 4 * H)
    lost = env(InstanceLost("i-1", RECL, W, 4, "reclaimable", True, "reclaimed"), T0 + 5 * H,
               "lost/i-1")  # fmt: skip
    events += [
        launched("i-1", RECL, "reclaimable", 4, T0 + 11 * MIN),
        launched("i-2", RECL, "reclaimable", 4, T0 + 12 * MIN),
        launched("i-3", COMM, "committed", 8, T0 + 2 * H + 5 * MIN),
        launched("i-4", RECL, "reclaimable", 4, T0 + 5 * H + MIN),
        lost,
        env(WorkWasted(W, "i-1", RECL, 1800.0, None), T0 + 5 * H, "waste/i-1", lost.event_id),
        env(InstanceDeleted("i-2", RECL, W, "orchestrator", "spotcap", "claim released"),
            T0 + 7 * H, "deleted/i-2"),
        env(InstanceDeleted("i-3", COMM, W, "orchestrator", "spotcap", "claim released"),
            T0 + 6 * H + 30 * MIN, "deleted/i-3"),
        env(CheckpointWritten("i-2", W, 1, 2_000_000_000, 12.0, False), T0 + 3 * H, "cp/1"),
    ]  # fmt: skip
    events += instance_usage("i-1", RECL, "reclaimable", 4, a=T0 + 11 * MIN, b=T0 + 5 * H)
    events += instance_usage("i-2", RECL, "reclaimable", 4, a=T0 + 12 * MIN, b=T0 + 7 * H)
    events += instance_usage("i-3", COMM, "committed", 8, a=T0 + 2 * H + 5 * MIN,
                             b=T0 + 6 * H + 30 * MIN)  # fmt: skip
    events += instance_usage("i-4", RECL, "reclaimable", 4, a=T0 + 5 * H + MIN, b=T0 + 8 * H)
    return sorted(events, key=lambda e: (e.occurred_at, e.payload.TOPIC))


# A late card: (minute its validity starts, minutes late, price; same start as a card on time).
LateCard = tuple[int, int, int, bool]
late_cards = st.lists(
    st.tuples(st.integers(0, 8 * 60), st.integers(0, 120), st.integers(500, 30_000), st.booleans()),
    max_size=6,
)


def with_late(base: list[Envelope], late: Sequence[LateCard]) -> list[Envelope]:
    extra = []
    for n, (start_min, late_min, price, same_start) in enumerate(late):
        start = T0 + (start_min // 30 * 30 if same_start else start_min) * MIN
        at = start + late_min * MIN
        extra.append(card(RECL, "reclaimable", start, price, name=f"late/{n}", at=at))
    return sorted([*base, *extra], key=lambda e: (e.occurred_at, e.payload.TOPIC))


def arriving(events: list[Envelope], market_order: list[int]) -> list[Envelope]:
    """The topics merged as the merged history merges its partitions, the market partition
    holding its events in `market_order` (a permutation), the others in event-time order."""
    market = [e for e in events if e.payload.TOPIC == "market"]
    shuffled = [market[i] for i in market_order]
    others: dict[str, list[Envelope]] = {}
    for e in events:
        if e.payload.TOPIC != "market":
            others.setdefault(e.payload.TOPIC, []).append(e)
    heads = [shuffled, *others.values()]
    return list(heapq.merge(*heads, key=lambda e: (e.occurred_at, e.payload.TOPIC)))


def write(store: ChdbStore, events: Sequence[Positioned], size: int, restart_at: int) -> int:
    """Write `events` in batches of `size`, restarting the writer after batch `restart_at`;
    returns the correction lines made."""
    writer = LedgerWriter(store)
    corrections = 0
    for n, batch in enumerate(batches(events, size)):
        if n == restart_at:
            writer = LedgerWriter(store)
        result = writer.write(batch, next_positions(batch))
        corrections += result.corrections
    return corrections


def fold(events: Sequence[Envelope]) -> tuple[dict[tuple[str, int, str], int], int]:
    f = Fold([RULE])
    f.feed_all(events)
    return f.results()[0], len(f.refused)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.data_too_large])
@given(late_cards, st.data())
def test_the_market_in_any_order_gives_the_same_ledger_by_every_computation(
    chdb_path: Path, late: list[LateCard], data: st.DataObject
) -> None:
    events = with_late(base_history(), late)
    n_market = sum(1 for e in events if e.payload.TOPIC == "market")
    order = data.draw(st.permutations(range(n_market)), label="market order")
    arrived = positioned(arriving(events, order))
    size = data.draw(st.integers(1, 40), label="batch size")
    restart = data.draw(st.integers(0, 10), label="restart after batch")
    in_time, refused = fold(events)  # the history in event-time order: the reference
    assert in_time
    recorded = ChdbStore(chdb_path, f"late_{uuid.uuid4().hex[:12]}")
    rebuilt = ChdbStore(chdb_path, f"late_{uuid.uuid4().hex[:12]}")
    try:
        write(recorded, arrived, size, restart)
        write(rebuilt, arrived, 1000, -1)  # a rebuild: the same log, another cut
        ledger = recorded_amounts(recorded)
        assert differing_lines(in_time, ledger) == {}
        assert differing_lines(in_time, recorded_amounts(rebuilt)) == {}
        python, refused_python = fold([e for _, e in arrived])
        assert differing_lines(in_time, python) == {}
        sql = SqlReplay(recorded, LEDGER_RELATIONS).run(RULE)
        assert differing_lines(in_time, sql) == {}
        # Past the allowed lateness: refused by all, each in the ledger's late_facts.
        beyond = {
            e.event_id
            for e in events
            if isinstance(e.payload, RateCard)
            and e.occurred_at - e.payload.valid_from_at > LATENESS
        }
        stored = {
            r["id"] for r in recorded.query("SELECT toString(event_id) AS id FROM late_facts")
        }
        assert stored == beyond and refused == refused_python == len(beyond)
        # Every correction line names a rate card, and the totals are the sums of the lines.
        named = recorded.query(
            "SELECT count() AS n FROM ledger_lines FINAL WHERE event_type = 'rate_card' AND"
            " toString(event_id) NOT IN (SELECT toString(event_id) FROM events"
            " WHERE event_type = 'rate_card')"
        )
        assert named == [{"n": 0}]
    finally:
        for store in (recorded, rebuilt):
            store.command(f"DROP DATABASE IF EXISTS {store.database}")


def test_a_card_arriving_late_re_prices_with_correction_lines_naming_it(chdb_path: Path) -> None:
    """A correction of the card from half past the first hour, published 40 minutes late
    (after the first hour's usage was priced): correction lines name it; a card published 3
    hours late is refused."""
    events = with_late(base_history(), [(30, 40, 1_000, True), (60, 180, 1_000, False)])
    store = ChdbStore(chdb_path, f"late_{uuid.uuid4().hex[:12]}")
    try:
        corrections = write(store, positioned(events), 5, -1)
        assert corrections > 0
        rows = store.query(
            "SELECT toString(event_id) AS id, cause, amount_eur_micros AS a FROM ledger_lines"
            " FINAL WHERE event_type = 'rate_card'"
        )
        late_id = derived_event_id("late/late/0", "rate_card")
        assert rows and {r["id"] for r in rows} == {late_id}
        assert {r["cause"] for r in rows} >= {"reclaimable_spend", "footprint"}  # same guaranteed
        refused = store.query("SELECT toString(event_id) AS id, reason FROM late_facts")
        assert [r["id"] for r in refused] == [derived_event_id("late/late/1", "rate_card")]
        assert "beyond the ledger's allowed lateness of 1 h" in refused[0]["reason"]
        assert differing_lines(fold(events)[0], recorded_amounts(store)) == {}
    finally:
        store.command(f"DROP DATABASE IF EXISTS {store.database}")


def test_a_card_starting_with_the_first_card_re_prices_the_moments_before_it() -> None:
    """Found by the property test: the market partition lagging 8 hours, its first cards to
    arrive start together at 07:30 (the later-published first), so the whole history before
    is priced at the first of them; then the earlier-published one arrives. The moments
    before a pool's first card are priced at the first of the cards starting then, so it
    changes them, and the writer's pricer and the fold must correct what they priced."""
    events = with_late(
        base_history(), [(332, 37, 21_133, True), (369, 80, 5_614, False), (479, 50, 26_140, True)]
    )
    order = [24, 22, *range(2, 22), 0, 23, 1]
    arrived = arriving(events, order)
    assert [(e.occurred_at - T0) // MIN for e in arrived if isinstance(e.payload, RateCard)][
        :2
    ] == [500, 450]
    in_time, _ = fold(events)
    pricer = Pricer(RECORDED)
    lines = [line for e in arrived for line in pricer.feed(e)] + pricer.advance()
    amounts: dict[tuple[str, int, str], int] = {}
    for line in lines:
        key = (line.workload_id, line.day, line.cause)
        amounts[key] = amounts.get(key, 0) + line.amount_eur_micros
    assert pricer.corrections > 0
    assert differing_lines(in_time, amounts) == {}
    assert differing_lines(in_time, fold(arrived)[0]) == {}
