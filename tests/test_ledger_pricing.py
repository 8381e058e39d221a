"""Pricing under the recorded rule (pure): exact integer micro-euros from rate cards."""

from __future__ import annotations

import itertools
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.ledger.demand import Demand
from projections.ledger.pricing import (
    DAY_US,
    HOUR_US,
    LedgerLine,
    accrue_reservation,
    price,
    price_usage,
    reserved_micros_exact,
    round_half_even,
)
from projections.ledger.rates import Card, RateBook, Unpriced
from projections.ledger.rule import RECORDED
from schemas.events import (
    CheckpointWritten,
    Envelope,
    PurchaseModel,
    ReservationCommitted,
    UsageInterval,
    WorkWasted,
)
from tests.projection_support import T0_US, event

P, W, INST = "pool-a", "wl-a", "i-1"
MIDNIGHT = (T0_US // DAY_US + 1) * DAY_US


def book(*cards: tuple[int, int, int]) -> RateBook:
    """Cards (valid_from, price, guaranteed), each valid 5 minutes (but in force until the next)."""
    b = RateBook()
    for n, (start, p, g) in enumerate(cards):
        b.add(P, Card(start, start, f"c{n:03d}", start + 300_000_000, p, g, "reclaimable"))
    return b


def usage(
    start: int,
    end: int,
    vcpu: int = 4,
    used: float | None = None,
    model: PurchaseModel = "reclaimable",
) -> Envelope:
    used_h = vcpu * (end - start) / HOUR_US if used is None else used
    return event(
        UsageInterval(W, INST, P, model, start, end, vcpu, used_h),
        (end - T0_US) / 1e6,
        name=f"u{start}",
    )


def by_cause(lines: list[LedgerLine]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in lines:
        out[line.cause] = out.get(line.cause, 0) + line.amount_eur_micros
    return out


def test_usage_is_priced_piecewise_by_the_cards_in_force() -> None:
    b = book((T0_US, 1000, 5000), (T0_US + HOUR_US, 2000, 5000))
    lines = price(usage(T0_US, T0_US + 2 * HOUR_US), b, RECORDED)
    assert by_cause(lines) == {
        "counterfactual": 4 * 2 * 5000,
        "reclaimable_spend": 4 * 1000 + 4 * 2000,
        # agent 20 m CPU at the instance's rate, control plane €0.0002 per used vCPU-hour
        "footprint": 20 + 40 + 8 * 200,
    }
    assert {line.event_id for line in lines} == {lines[0].event_id}
    assert all(line.workload_id == W and line.rule == "recorded" for line in lines)


def test_a_late_card_leaves_the_previous_price_in_force() -> None:
    # The first card is valid five minutes only; no other until an hour later.
    b = book((T0_US, 1000, 5000), (T0_US + HOUR_US, 3000, 5000))
    spend = by_cause(price(usage(T0_US, T0_US + HOUR_US), b, RECORDED))["reclaimable_spend"]
    assert spend == 4 * 1000


def test_usage_across_midnight_is_split_by_day() -> None:
    b = book((MIDNIGHT - 10 * HOUR_US, 1000, 4000))
    lines = price(usage(MIDNIGHT - HOUR_US, MIDNIGHT + 3 * HOUR_US, vcpu=2), b, RECORDED)
    spend = {
        line.day: line.amount_eur_micros for line in lines if line.cause == "reclaimable_spend"
    }
    assert spend == {MIDNIGHT // DAY_US - 1: 2 * 1000, MIDNIGHT // DAY_US: 2 * 3 * 1000}


def test_idle_capacity_is_headroom() -> None:
    b = book((T0_US, 1000, 4000))
    lines = by_cause(price(usage(T0_US, T0_US + HOUR_US, vcpu=8, used=6.0), b, RECORDED))
    assert lines["headroom"] == 2 * 1000 and lines["reclaimable_spend"] == 6 * 1000
    assert lines["counterfactual"] == 6 * 4000


def test_committed_and_guaranteed_usage_are_floor_and_fallback_spend() -> None:
    b = book((T0_US, 1000, 4000))
    committed = by_cause(price(usage(T0_US, T0_US + HOUR_US, model="committed"), b, RECORDED))
    guaranteed = by_cause(price(usage(T0_US, T0_US + HOUR_US, model="guaranteed"), b, RECORDED))
    assert "floor_spend" in committed and "fallback_spend" in guaranteed


def test_wasted_work_leaves_the_counterfactual_and_moves_from_spend_to_waste() -> None:
    b = book((T0_US, 1500, 6000))
    wasted = event(WorkWasted(W, INST, P, 7200.0, None), 100, name="w")  # 2 vCPU-hours
    assert by_cause(price(wasted, b, RECORDED)) == {
        "counterfactual": -2 * 6000,
        "wasted_work": 2 * 1500,
        "reclaimable_spend": -2 * 1500,
    }


def test_a_checkpoint_is_charged_for_its_retention() -> None:
    written = event(CheckpointWritten(INST, W, 3, 3_000_000_000, 20.0, True), 5, name="c")
    lines = price(written, RateBook(), RECORDED)
    # 3 GB for 7 of 30 days at €0.02 per GB-month: 3 * 20_000 * 7 / 30 = 14_000 micro-euros
    assert [(x.cause, x.amount_eur_micros, x.unit) for x in lines] == [
        ("checkpoint_storage", 14_000, "gb_month")
    ]


def test_a_pool_without_a_card_cannot_be_priced() -> None:
    try:
        price(usage(T0_US, T0_US + HOUR_US), RateBook(), RECORDED)
    except Unpriced as error:
        assert "pool-a" in str(error)
    else:
        raise AssertionError("priced without a rate card")


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 50 * HOUR_US), st.integers(100, 9000), st.integers(9000, 20000)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 40 * HOUR_US),
    st.integers(1, 30 * HOUR_US),
    st.integers(1, 64),
)
def test_pieces_cover_the_interval_and_lines_are_exact(
    cards: list[tuple[int, int, int]], start: int, length: int, vcpu: int
) -> None:
    b = book(*((T0_US + f, p, g) for f, p, g in cards))
    a, z = T0_US + start, T0_US + start + length
    pieces = list(b.segments(P, a, z))
    assert pieces[0][0] == a and pieces[-1][1] == z
    assert all(x[1] == y[0] and x[0] < x[1] for x, y in itertools.pairwise(pieces))
    lines = price(usage(a, z, vcpu=vcpu), b, RECORDED)
    assert all(isinstance(line.amount_eur_micros, int) for line in lines)
    # Each piece at its card's price, summed exactly, rounded once per line (half to even).
    expected_counterfactual = sum(
        vcpu * (y - x) * card.guaranteed_eur_micros for x, y, card in pieces
    )
    got = sum(line.amount_eur_micros for line in lines if line.cause == "counterfactual")
    assert abs(got * HOUR_US - expected_counterfactual) <= HOUR_US * 2  # one rounding per day line


def test_prune_then_backfill_finds_the_same_cards() -> None:
    stored = [(T0_US + n * 300_000_000, 1000 + n, 5000) for n in range(100)]
    full = book(*stored)
    pruned = book(*stored)
    held = [Card._make(c) for c in full._cards[P]]  # the book holds plain tuples
    pruned._backfill = lambda pool, a, z: [c for c in held if c.valid_from_us < z]
    pruned.prune(T0_US + 90 * 300_000_000)
    assert len(pruned) < len(full)
    a, z = T0_US + 1_000_000_000, T0_US + 20_000_000_000
    assert list(pruned.segments(P, a, z)) == list(full.segments(P, a, z))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 10**4)), min_size=2, max_size=30),
    st.data(),
)
def test_a_pruned_book_prices_every_later_piece_as_the_whole_book_does(
    steps: list[tuple[int, int]], data: st.DataObject
) -> None:
    """Prune keeps the integrals it holds (cut, not recomputed): the differences that price a
    piece after the prune point are the same as the unpruned book's, whether the integrals
    were computed before the prune, after it, after a card arrived late, or not at all."""
    starts = list(itertools.accumulate(gap for gap, _ in steps))
    cards = [
        (T0_US + t * 1000, price, price // 2) for t, (_, price) in zip(starts, steps, strict=True)
    ]
    full, pruned = book(*cards), book(*cards)
    end = cards[-1][0] + 10**9
    for t in data.draw(st.lists(st.integers(T0_US, end), max_size=4)):  # prefixes held or not
        pruned.integral(P, t)
    cut = data.draw(st.integers(T0_US, end))
    pruned.prune(cut)
    if data.draw(st.booleans()):  # a late card between two held ones, after the prune
        at = data.draw(st.integers(cut, end))
        late = Card(at, at, "late", end, 7, 3, "reclaimable")
        full.add(P, late)
        pruned.add(P, late)
    # Pieces from where the pruned book still holds the card in force.
    a = max(cut, Card._make(pruned._cards[P][0]).valid_from_us)
    for x, y in data.draw(st.lists(st.tuples(st.integers(a, end), st.integers(a, end)))):
        (fx, gfx), (fy, gfy) = full.integral(P, x), full.integral(P, y)
        (px, gpx), (py, gpy) = pruned.integral(P, x), pruned.integral(P, y)
        assert (fy - fx, gfy - gfx) == (py - px, gpy - gpx)


@given(st.integers(-(10**30), 10**30), st.integers(1, 10**24))
def test_integer_rounding_is_fractions_half_to_even(numerator: int, denominator: int) -> None:
    assert round_half_even(numerator, denominator) == round(Fraction(numerator, denominator))


@given(st.integers(-(10**6), 10**6), st.integers(1, 8))
def test_integer_rounding_of_exact_halves_goes_to_even(whole: int, twice: int) -> None:
    # n + 1/2 exactly (over an even denominator): the even neighbour, as round() does.
    denominator = 2 * twice
    numerator = whole * denominator + twice
    assert round_half_even(numerator, denominator) == round(whole + 0.5)


def test_running_beyond_the_open_claims_is_surplus_at_the_card_naming_the_launch() -> None:
    b = book((T0_US, 1000, 5000))
    demand = Demand()
    demand.open_claim("c-1", T0_US, 6)
    demand.launch("i-0", T0_US, 4, "placement-1")
    demand.launch(INST, T0_US, 4, "replacement-7")  # launched with the first, after it by id
    pieces = demand.useful(INST, 4, T0_US, T0_US + HOUR_US)
    assert pieces == [(T0_US, T0_US + HOUR_US, 2)]  # the claim asks 6: 4 + 2 of this one
    lines = price_usage(usage(T0_US, T0_US + HOUR_US), b, RECORDED, pieces, "replacement-7")
    assert by_cause(lines) == {
        "counterfactual": 2 * 5000,
        "reclaimable_spend": 2 * 1000,
        "surplus": 2 * 1000,
        "footprint": 20 + 4 * 200,
    }
    assert {line.decided_by for line in lines} == {"replacement-7"}


def test_committed_capacity_in_use_comes_off_the_idle_floor_and_reservations_accrue_hourly() -> (
    None
):
    b = book((T0_US, 1000, 4000))
    lines = price(usage(T0_US, T0_US + HOUR_US, vcpu=8, used=6.0, model="committed"), b, RECORDED)
    idle = [line for line in lines if line.cause == "idle_floor"]
    assert [(x.workload_id, x.amount_eur_micros, x.quantity) for x in idle] == [
        ("(platform)", -8 * 1000, -8.0)
    ]
    reservation = event(
        ReservationCommitted("r-1", P, 10, T0_US + HOUR_US // 2, T0_US + 30 * HOUR_US, 333),
        0,
        name="r",
    )
    r = reservation.payload
    assert isinstance(r, ReservationCommitted)
    # Hour by hour, or all at once: the same total per day, rounded once.
    stepped = [
        line
        for h in range(40)
        for line in accrue_reservation(reservation, RECORDED, T0_US + h * HOUR_US,
                                       T0_US + (h + 1) * HOUR_US)
    ]  # fmt: skip
    whole = accrue_reservation(reservation, RECORDED, r.start_at, T0_US + 40 * HOUR_US)
    for lines_ in (stepped, whole):
        per_day: dict[int, int] = {}
        for line in lines_:
            per_day[line.day] = per_day.get(line.day, 0) + line.amount_eur_micros
        assert per_day == {
            d: round_half_even(reserved_micros_exact(r, d, T0_US + 40 * HOUR_US)[0], HOUR_US)
            for d in per_day
        }
        assert sum(per_day.values()) == round_half_even(10 * 333 * (r.end_at - r.start_at), HOUR_US)
    assert {x.workload_id for x in stepped} == {"(platform)"}
    assert {x.decided_by for x in stepped} == {reservation.event_id}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 30), st.integers(1, 8)), max_size=8),
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 30), st.sampled_from([2, 4, 8])),
             min_size=1, max_size=8),
)  # fmt: skip
def test_useful_vcpu_is_the_running_vcpu_up_to_the_asks_oldest_launch_first(
    claims: list[tuple[int, int, int]], instances: list[tuple[int, int, int]]
) -> None:
    """At every moment the useful vCPU over the instances add up to min(running, asked), and
    an instance is useful only once every instance launched before it is."""
    tick = 60_000_000
    demand = Demand()
    for n, (start, length, vcpu) in enumerate(claims):
        demand.open_claim(f"c{n}", T0_US + start * tick, vcpu)
        demand.release_claim(f"c{n}", T0_US + (start + length) * tick)
    for n, (start, length, vcpu) in enumerate(instances):
        demand.launch(f"i{n}", T0_US + start * tick, vcpu, f"d{n}")
        demand.end(f"i{n}", T0_US + (start + length) * tick)
    useful: dict[str, list[tuple[int, int, int]]] = {
        f"i{n}": demand.useful(f"i{n}", vcpu, T0_US + s * tick, T0_US + (s + length) * tick)
        for n, (s, length, vcpu) in enumerate(instances)
    }
    for minute in range(60):
        t = T0_US + minute * tick
        running = {
            f"i{n}": vcpu
            for n, (s, length, vcpu) in enumerate(instances)
            if s * tick <= t - T0_US < (s + length) * tick
        }
        at = {i: next(u for a, b, u in useful[i] if a <= t < b) for i in running}
        assert sum(at.values()) == min(sum(running.values()), demand.asked_vcpu(t))
        order = sorted(running, key=lambda i: (demand.instances[i].launched_us, i))
        full = [at[i] == running[i] for i in order]
        assert full == sorted(full, reverse=True)  # useful first, surplus last
