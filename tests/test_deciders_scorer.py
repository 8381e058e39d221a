"""The scorer (ADR-07): a ranking every 5 minutes of event time, each keeping its inputs."""

from __future__ import annotations

import itertools
import math

import pytest

from schemas.events import Envelope, PoolRanked
from streams.deciders import DeciderSettings, RegionView, Scorer
from tests.decider_driver import Driver
from tests.decider_events import GUARANTEED_PRICE, MIN, Events, H, PoolSpec
from tests.factories import T0_US

DEEP = PoolSpec("c7", 16, "hall-a", "reclaimable", 4096, expected_per_h=0.01, price=12_000)
SHALLOW_CHEAP = PoolSpec("c7", 16, "hall-b", "reclaimable", 64, expected_per_h=0.01, price=5_000)
FLAKY = PoolSpec("c8", 16, "hall-c", "reclaimable", 4096, expected_per_h=0.01, price=12_000)
INTERVAL = DeciderSettings().scoring.ranking_interval_s * 1_000_000


def ranked(decisions: list[Envelope]) -> list[PoolRanked]:
    return [d.payload for d in decisions if isinstance(d.payload, PoolRanked)]


def market(events: Events, at: int) -> list[Envelope]:
    out: list[Envelope] = []
    for spec in (DEEP, SHALLOW_CHEAP, FLAKY):
        out += [events.rate_card(spec, at), events.forward(spec, at)]
    return out


def test_a_round_at_every_five_minute_boundary_of_event_time() -> None:
    events = Events()
    driver = Driver(deciders=[Scorer()])
    driver.feed_all([events.pool(s) for s in (DEEP, SHALLOW_CHEAP, FLAKY)])
    out: list[Envelope] = []
    for minute in range(21):
        out += driver.feed_all(market(events, T0_US + minute * MIN))
    rounds = sorted({d.occurred_at for d in out})
    assert rounds, "no ranking round"
    assert all(r % INTERVAL == 0 for r in rounds)
    assert [b - a for a, b in itertools.pairwise(rounds)] == [INTERVAL] * (len(rounds) - 1)
    assert len(rounds) == 4  # boundaries inside 20 minutes
    for at in rounds:
        round_ = [d.payload for d in out if d.occurred_at == at]
        assert isinstance(round_[0], PoolRanked)
        assert {r.ranking_id for r in round_ if isinstance(r, PoolRanked)} == {round_[0].ranking_id}
        assert sorted(r.rank for r in round_ if isinstance(r, PoolRanked)) == [1, 2, 3]


def test_each_ranking_keeps_the_inputs_its_score_is_computed_from() -> None:
    events = Events()
    driver = Driver(deciders=[Scorer()])
    driver.feed_all([events.pool(s) for s in (DEEP, SHALLOW_CHEAP, FLAKY)])
    inputs = market(events, T0_US)
    driver.feed_all(inputs)
    out = driver.feed_all(market(events, T0_US + INTERVAL))
    weights = DeciderSettings().scoring
    for r in ranked(out):
        spec = next(s for s in (DEEP, SHALLOW_CHEAP, FLAKY) if s.pool_id == r.pool_id)
        assert r.guaranteed_price_per_vcpu_h_eur_micros == GUARANTEED_PRICE  # the same card's
        saving = r.guaranteed_price_per_vcpu_h_eur_micros - r.price_per_vcpu_h_eur_micros
        expected_score = (
            math.log10(1 + r.available_vcpu)
            - weights.interruption_weight * r.observed_interruption_per_h
            - weights.price_weight * r.price_per_vcpu_h_eur_micros / 1e6
            + weights.saving_weight * max(0, saving) / 1e6
        )
        assert r.score == pytest.approx(expected_score)
        assert r.available_vcpu == spec.capacity_vcpu
        assert r.price_per_vcpu_h_eur_micros == spec.price
        assert r.correlation_group == spec.group
        own = [e.event_id for e in inputs if getattr(e.payload, "pool_id", None) == spec.pool_id]
        assert sorted(r.input_event_ids) == sorted(own)


def test_depth_ranks_above_price_and_observed_interruption_ranks_low() -> None:
    events = Events()
    driver = Driver(deciders=[Scorer()])
    driver.feed_all([events.pool(s) for s in (DEEP, SHALLOW_CHEAP, FLAKY)])
    driver.feed_all(market(events, T0_US))
    for i in range(20):
        driver.feed(events.launched(f"i-{i}", FLAKY, "wl", T0_US + MIN))
    for i in range(10):  # half its instances reclaimed within the hour
        driver.feed(events.notice(f"i-{i}", FLAKY, "wl", T0_US + 10 * MIN + i * MIN))
    out = driver.feed_all(market(events, T0_US + 2 * H))
    order = [r.pool_id for r in sorted(ranked(out), key=lambda r: r.rank)]
    assert order == [DEEP.pool_id, SHALLOW_CHEAP.pool_id, FLAKY.pool_id]
    flaky = next(r for r in ranked(out) if r.pool_id == FLAKY.pool_id)
    assert flaky.observed_interruption_per_h > 0.1


def test_rounds_no_input_separates_are_one_round() -> None:
    events = Events()
    driver = Driver(deciders=[Scorer()])
    driver.feed_all([events.pool(s) for s in (DEEP, SHALLOW_CHEAP, FLAKY)])
    driver.feed_all(market(events, T0_US))
    out = driver.feed_all(market(events, T0_US + 2 * H))
    assert len({d.occurred_at for d in out}) == 1
    assert len(out) == 3


def test_the_view_folds_a_rounds_rankings_at_once_as_one_at_a_time() -> None:
    events = Events()
    driver = Driver(deciders=[Scorer()])
    pools = [events.pool(s) for s in (DEEP, SHALLOW_CHEAP, FLAKY)]
    driver.feed_all(pools)
    history: list[Envelope] = list(pools)
    rounds: list[list[Envelope]] = []
    for minute in range(0, 16, 5):
        inputs = market(events, T0_US + minute * MIN)
        made = driver.feed_all(inputs)
        history += inputs + made
        if made:
            rounds.append(made)
    assert len(rounds) >= 2 and all(len(r) == 3 for r in rounds)
    # two rounds back to back, a round given again, a round's rankings among other events
    history += rounds[0] + rounds[1] + rounds[1][:2]
    history += [rounds[0][0], *market(events, T0_US + 20 * MIN), rounds[0][1]]
    one_at_a_time = start = RegionView()
    for event in history:
        one_at_a_time = one_at_a_time.evolve(event)
    assert start.fold(history) == one_at_a_time
    assert one_at_a_time.fold([]) is one_at_a_time
    for cut in range(len(history)):  # from any view, any tail
        assert start.fold(history[:cut]).fold(history[cut:]) == one_at_a_time
