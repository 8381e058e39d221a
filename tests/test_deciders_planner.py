"""The planner (ADR-08, ADR-22): floor first on committed capacity, the rest within the caps."""

from __future__ import annotations

import math

from hypothesis import event, given, settings
from hypothesis import strategies as st

from schemas.events import Envelope, PlacementDecided
from streams.deciders import DeciderSettings, Planner
from streams.deciders.region import RegionView
from streams.deciders.workload import FLOOR_ROLE, ROLE_TAG, SPREAD_ROLE
from tests.decider_driver import Driver
from tests.decider_events import MIN, Events, PoolSpec, fleet, spread_fleet
from tests.decider_strategies import Fleet, claims, fleets
from tests.factories import T0_US

CAPS = DeciderSettings().placement
WL = "wl-etl"


def launch(events: Events, driver: Driver, placement: Envelope, specs: dict[str, PoolSpec]) -> None:
    """Do what the actuator would: launch every instance of every allocation."""
    p = placement.payload
    assert isinstance(p, PlacementDecided)
    n = 0
    for a in p.allocations:
        spec = specs[a.pool_id]
        role = SPREAD_ROLE if a.purchase_model == "reclaimable" else FLOOR_ROLE
        for _ in range(a.vcpu // spec.size_vcpu):
            n += 1
            instance = f"{placement.event_id[:8]}-{n}"
            driver.feed(
                events.launched(
                    instance,
                    spec,
                    p.workload_id,
                    placement.occurred_at + MIN,
                    tags={ROLE_TAG: role},
                    causation_id=placement.event_id,
                )
            )


def place(
    events: Events, driver: Driver, vcpu: int, at: int, specs: dict[str, PoolSpec]
) -> tuple[PlacementDecided, RegionView, Envelope]:
    view = driver.view
    [placement] = [
        d for d in driver.feed(events.claim(WL, vcpu, at)) if d.event_type == "placement_decided"
    ]
    assert isinstance(placement.payload, PlacementDecided)
    launch(events, driver, placement, specs)
    return placement.payload, view, placement


def setup(
    specs: list[PoolSpec], *, floor_vcpu: int = 0, excluded: tuple[str, ...] = ()
) -> tuple[Events, Driver]:
    events = Events()
    driver = Driver(deciders=[Planner()])
    driver.feed_all(fleet(events, specs))
    for pool_id in excluded:
        from tests.decider_strategies import excluded_event

        driver.feed(excluded_event(events, pool_id, T0_US))
    driver.feed(events.contract(WL, floor_vcpu=floor_vcpu))
    return events, driver


def by_pool(p: PlacementDecided, model: str) -> dict[str, int]:
    return {a.pool_id: a.vcpu for a in p.allocations if a.purchase_model == model}


def test_the_floor_goes_on_committed_capacity_over_three_halls_and_the_rest_within_caps() -> None:
    specs = spread_fleet(halls=4)
    events, driver = setup(specs, floor_vcpu=96)
    p, _, _ = place(events, driver, 512, T0_US + MIN, {s.pool_id: s for s in specs})
    committed = by_pool(p, "committed")
    assert p.floor_vcpu == sum(committed.values()) == 96
    assert not by_pool(p, "guaranteed")
    halls = {pool_id.split(".")[2] for pool_id in committed}
    assert len(halls) >= CAPS.floor_min_halls
    spread = by_pool(p, "reclaimable")
    total = sum(spread.values())
    assert total >= 512 - 96
    assert len(spread) >= CAPS.min_pools
    assert p.caps_held and p.caps_reason is None
    assert max(spread.values()) <= CAPS.pool_cap_share * total
    assert (
        p.premium_per_h_eur_micros == p.cost_per_h_eur_micros - p.price_first_cost_per_h_eur_micros
    )
    assert p.premium_per_h_eur_micros >= 0
    assert p.eligible_pool_count == len([s for s in specs if s.model == "reclaimable"])


def test_the_floor_takes_guaranteed_capacity_only_when_committed_is_full() -> None:
    specs = [s for s in spread_fleet(halls=3) if s.model != "committed"]
    small = PoolSpec("c7", 16, "hall-a", "committed", 32, 0.0, 22_000)
    events, driver = setup([*specs, small], floor_vcpu=96)
    p, _, _ = place(events, driver, 256, T0_US + MIN, {s.pool_id: s for s in [*specs, small]})
    assert by_pool(p, "committed") == {small.pool_id: 32}
    assert sum(by_pool(p, "guaranteed").values()) == 64
    assert p.floor_vcpu == 96


def test_fewer_than_eight_eligible_pools_says_so_and_why() -> None:
    specs = spread_fleet(halls=1, families=("c7", "c8", "m6"), sizes=(4, 16))  # 6 reclaimable
    excluded = (specs[0].pool_id,)
    events, driver = setup(specs, excluded=excluded)
    p, _, _ = place(events, driver, 128, T0_US + MIN, {s.pool_id: s for s in specs})
    assert p.eligible_pool_count == 5
    assert not p.caps_held
    assert p.caps_reason is not None
    assert "only 5 eligible pools" in p.caps_reason
    assert "1 excluded" in p.caps_reason
    assert excluded[0] not in by_pool(p, "reclaimable")
    assert list(p.excluded_pool_ids) == list(excluded)


def test_the_lost_room_is_unplaced_not_forced() -> None:
    specs = spread_fleet(halls=4, capacity_vcpu=32)  # 24 pools of 32 vCPU
    events, driver = setup(specs)
    p, _, _ = place(events, driver, 4096, T0_US + MIN, {s.pool_id: s for s in specs})
    assert p.caps_held
    assert p.unplaced_vcpu > 0
    assert sum(by_pool(p, "reclaimable").values()) + p.unplaced_vcpu >= 4096
    assert p.caps_reason is not None and "unplaced" in p.caps_reason


def _reclaimable_totals(
    history: list[PlacementDecided], fleet_: Fleet
) -> tuple[dict[str, int], dict[str, int]]:
    pools: dict[str, int] = {}
    for p in history:
        for a in p.allocations:
            if a.purchase_model == "reclaimable":
                pools[a.pool_id] = pools.get(a.pool_id, 0) + a.vcpu
    groups: dict[str, int] = {}
    for pool_id, vcpu in pools.items():
        group = fleet_.of(pool_id).group
        groups[group] = groups.get(group, 0) + vcpu
    return pools, groups


@settings(max_examples=60, deadline=None)
@given(fleets(min_reclaimable=8), claims())
def test_caps_hold_whenever_eight_or_more_pools_are_eligible(
    fleet_: Fleet, asks: list[tuple[int, int]]
) -> None:
    events = Events()
    driver = Driver(deciders=[Planner()])
    driver.feed_all(fleet_.events(events))
    driver.feed(events.contract(WL))
    specs = {s.pool_id: s for s in fleet_.specs}
    history: list[PlacementDecided] = []
    at = T0_US
    for vcpu, gap in asks:
        at += (gap + 1) * MIN
        p, _, _ = place(events, driver, vcpu, at, specs)
        history.append(p)
        event(f"{'8 or more' if p.eligible_pool_count >= CAPS.min_pools else 'fewer'} eligible")
        if p.eligible_pool_count < CAPS.min_pools:
            break  # eligibility only shrinks as room is used: no later plan has 8 either
        assert p.caps_held, p.caps_reason
        assert p.premium_per_h_eur_micros == (
            p.cost_per_h_eur_micros - p.price_first_cost_per_h_eur_micros
        )
        assert p.premium_per_h_eur_micros >= 0  # depth costs at least what price-first would
        pools, groups = _reclaimable_totals(history, fleet_)
        total = sum(pools.values())
        for pool_id, vcpu_ in pools.items():
            assert vcpu_ <= CAPS.pool_cap_share * total, (pool_id, vcpu_, total)
        for group, vcpu_ in groups.items():
            assert vcpu_ <= CAPS.group_cap_share * total, (group, vcpu_, total)
        if total:  # 15% a pool means 7 pools at the very least
            assert len(pools) >= math.ceil(1 / CAPS.pool_cap_share)


@settings(max_examples=60, deadline=None)
@given(fleets(), claims(), st.integers(0, 1024))
def test_the_floor_is_served_from_committed_capacity_first(
    fleet_: Fleet, asks: list[tuple[int, int]], floor_vcpu: int
) -> None:
    events = Events()
    driver = Driver(deciders=[Planner()])
    driver.feed_all(fleet_.events(events))
    driver.feed(events.contract(WL, floor_vcpu=floor_vcpu))
    specs = {s.pool_id: s for s in fleet_.specs}
    at = T0_US
    for vcpu, gap in asks:
        at += (gap + 1) * MIN
        p, view, _ = place(events, driver, vcpu, at, specs)
        committed = by_pool(p, "committed")
        event(f"floor on {'+'.join(sorted({a.purchase_model for a in p.allocations}))}")
        if by_pool(p, "guaranteed"):
            for pool_id, facts in view.pools.items():
                if facts.purchase_model == "committed":
                    left = view.room_vcpu(pool_id) - committed.get(pool_id, 0)
                    assert left < facts.instance_vcpu, f"{pool_id} had room for the floor"
        assert p.floor_vcpu == sum(committed.values()) + sum(by_pool(p, "guaranteed").values())


@settings(max_examples=60, deadline=None)
@given(fleets(min_reclaimable=2), claims())
def test_an_excluded_pool_is_never_chosen(fleet_: Fleet, asks: list[tuple[int, int]]) -> None:
    events = Events()
    driver = Driver(deciders=[Planner()])
    driver.feed_all(fleet_.events(events))
    driver.feed(events.contract(WL, floor_vcpu=64))
    specs = {s.pool_id: s for s in fleet_.specs}
    at = T0_US
    for vcpu, gap in asks:
        at += (gap + 1) * MIN
        p, _, _ = place(events, driver, vcpu, at, specs)
        chosen = {a.pool_id for a in p.allocations}
        assert not chosen & fleet_.excluded
        assert set(p.excluded_pool_ids) == fleet_.excluded
