"""The planner (ADR-08, ADR-22): floor first on committed capacity, the rest within the caps."""

from __future__ import annotations

import math

from hypothesis import event, given, settings
from hypothesis import strategies as st

from schemas.events import Envelope, FallbackReturned, PlacementDecided
from streams.deciders import DeciderSettings, Planner
from streams.deciders.region import RegionView
from streams.deciders.workload import (
    FALLBACK_ROLE,
    FLOOR_ROLE,
    ROLE_TAG,
    SPARE_ROLE,
    SPREAD_ROLE,
)
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
        if a.purchase_model == "committed" and p.floor_vcpu == 0:
            role = SPARE_ROLE  # beyond the floor, on room the floors left
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
    claim = events.claim(WL, vcpu, at)
    # The claim's placement, and any retry of earlier claims' waiting vCPU that came due first
    # (each launched, as the actuator would).
    placements = [d for d in driver.feed(claim) if d.event_type == "placement_decided"]
    placement = next(d for d in placements if d.causation_id == claim.event_id)  # not its spare
    assert isinstance(placement.payload, PlacementDecided)
    for made in placements:
        launch(events, driver, made, specs)
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
    claim = events.claim(WL, 4096, T0_US + MIN)
    p, spare = (d.payload for d in driver.feed(claim) if d.event_type == "placement_decided")
    assert isinstance(p, PlacementDecided) and isinstance(spare, PlacementDecided)
    assert p.caps_held
    assert p.unplaced_vcpu > 0
    # What the caps and room left went on committed room the floors leave (3/4 of each
    # committed pool), the rest stays unplaced for the fallback arbiter.
    on_committed = sum(by_pool(spare, "committed").values())
    assert spare.floor_vcpu == 0 and 0 < on_committed <= 4 * 256 * 3 // 4
    assert sum(by_pool(p, "reclaimable").values()) + on_committed + p.unplaced_vcpu >= 4096
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
        history = [
            d.payload for d in driver.decisions if isinstance(d.payload, PlacementDecided)
        ]  # the claims' placements, their spares and the top-ups of what they lacked
        event(f"{'8 or more' if p.eligible_pool_count >= CAPS.min_pools else 'fewer'} eligible")
        if p.eligible_pool_count < CAPS.min_pools:
            break  # eligibility only shrinks as room is used: no later plan has 8 either
        if not all(h.caps_held for h in history if h is not p):
            break  # a top-up spread evenly over fewer than 8 pools: caps broken before this
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


def test_a_plan_overshoots_its_request_by_as_little_as_the_sizes_allow() -> None:
    from streams.deciders.waterfill import Candidate, spread

    candidates = [
        Candidate(f"p{n}-{size}", f"g{n}", "hall-a", size, 10_000)
        for n in range(8)
        for size in (48, 8)
    ]
    groups = {c.pool_id: c.correlation_group for c in candidates}
    loose = CAPS.__class__(pool_cap_share=1.0, group_cap_share=1.0)
    # 104 vCPU: two 48s leave 8, which an 8-vCPU instance takes, never a third 48.
    plan = spread(104, {}, groups, candidates, settings=loose)
    assert sum(plan.allocations.values()) == 104
    plan = spread(20, {}, groups, candidates, settings=loose)
    assert sum(plan.allocations.values()) == 24  # three 8s: the least above 20


def test_the_floor_goes_only_on_pools_of_the_families_the_work_runs_on() -> None:
    specs = [*spread_fleet(halls=3), PoolSpec("g5", 24, "hall-a", "committed", 480, 0.0, 90_000)]
    events, driver = setup(specs, floor_vcpu=48)
    [placement] = [
        d
        for d in driver.feed(events.claim(WL, 96, T0_US + MIN, families=("c7", "c8")))
        if d.event_type == "placement_decided"
    ]
    p = placement.payload
    assert isinstance(p, PlacementDecided)
    floor = by_pool(p, "committed")
    assert floor and all(pool.startswith("c7.") for pool in floor)


def test_what_the_claims_lack_is_topped_up_when_room_comes() -> None:
    specs = spread_fleet(halls=4, capacity_vcpu=16, committed_vcpu=0)
    by_id = {s.pool_id: s for s in specs}
    events, driver = setup(specs)
    claim = events.claim(WL, 640, T0_US + MIN, claim_id="claim/big")
    [first] = [d for d in driver.feed(claim) if d.event_type == "placement_decided"]
    p = first.payload
    assert isinstance(p, PlacementDecided) and p.unplaced_vcpu > 0
    launch(events, driver, first, by_id)
    # Nothing has room yet: the retry decides nothing.
    quiet = driver.feed(events.rate_card(specs[0], T0_US + 7 * MIN))
    assert [d for d in quiet if d.event_type == "placement_decided"] == []
    # Room comes back in every reclaimable pool: the next retry places what the claim lacks.
    room = [
        events.forward(s, T0_US + 8 * MIN, available_vcpu=512)
        for s in specs
        if s.model == "reclaimable"
    ]
    driver.feed_all(room)
    out = driver.feed(events.rate_card(specs[0], T0_US + 13 * MIN))
    [retry] = [d for d in out if d.event_type == "placement_decided"]
    q = retry.payload
    assert isinstance(q, PlacementDecided) and q.claim_id == "claim/big"
    assert retry.causation_id == claim.event_id  # the event after which the claims lacked it
    assert sum(a.vcpu for a in q.allocations) >= p.unplaced_vcpu > 0
    # A released claim waits no more.
    launch(events, driver, retry, by_id)
    driver.feed(events.released(WL, "claim/big", 640, T0_US + 20 * MIN))
    later = driver.feed(events.rate_card(specs[0], T0_US + 40 * MIN))
    assert [d for d in later if d.event_type == "placement_decided"] == []


def _with_a_fallback(released: bool) -> tuple[int, list[Envelope]]:
    """Claim A (64 vCPU) placed and launched; claim B (32) whose launches all failed, served
    by two 16-vCPU guaranteed fallback instances; B released or not; then the fallback is
    returned. The vCPU A's placement launched, and what the planner decides on the return."""
    specs = spread_fleet(halls=4)
    by_id = {s.pool_id: s for s in specs}
    events, driver = setup(specs)
    placed, _, _ = place(events, driver, 64, T0_US + MIN, by_id)
    claim_b = events.claim(WL, 32, T0_US + 2 * MIN, claim_id="claim/b")
    for made in driver.feed(claim_b):
        p = made.payload
        assert isinstance(p, PlacementDecided)
        for a in p.allocations:  # every instance's launch fails
            spec = by_id[a.pool_id]
            for _ in range(a.vcpu // spec.size_vcpu):
                driver.feed(events.launch_failed(spec, WL, T0_US + 3 * MIN))
    guaranteed = next(s for s in specs if s.model == "guaranteed")
    fallback = [f"fb-{n}" for n in range(2)]
    for instance_id in fallback:
        tags = {ROLE_TAG: FALLBACK_ROLE}
        driver.feed(events.launched(instance_id, guaranteed, WL, T0_US + 3 * MIN, tags=tags))
    if released:
        driver.feed(events.released(WL, "claim/b", 32, T0_US + 30 * MIN))
    returned = FallbackReturned(
        workload_id=WL,
        vcpu=32,
        dwell_s=2400,
        fallback_event_id="fallback-of-b",
        instance_ids=tuple(fallback),
        healthy_s=1200,
    )
    at = T0_US + 43 * MIN
    out = driver.feed(events.env(returned, at, producer="deciders/fallback"))
    back = [d for d in out if d.event_type == "placement_decided" and d.occurred_at == at]
    return sum(x.vcpu for x in placed.allocations), back


def test_a_returned_fallback_comes_back_only_as_far_as_the_claims_still_ask() -> None:
    held, [back] = _with_a_fallback(released=False)
    p = back.payload
    # What A's instances do not cover of the 96 vCPU asked, once the fallback's are deleted.
    assert isinstance(p, PlacementDecided) and p.requested_vcpu == 96 - held == 32
    assert sum(by_pool(p, "reclaimable").values()) >= p.requested_vcpu
    # Claim B released while the fallback ran: nothing comes back (it would be surplus).
    assert _with_a_fallback(released=True)[1] == []
