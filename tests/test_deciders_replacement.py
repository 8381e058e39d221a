"""Replacement (ADR-09): on the notice, elsewhere, inside the caps, away from the lost group."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from schemas.events import Envelope, PlacementDecided, ReplacementRequested
from streams.deciders import Planner, Replacement
from streams.deciders.workload import FLOOR_ROLE, ROLE_TAG, SPARE_ROLE
from tests.decider_driver import Driver
from tests.decider_events import MIN, Events, PoolSpec, S, fleet, spread_fleet
from tests.decider_strategies import Fleet, fleets
from tests.factories import T0_US
from tests.test_deciders_planner import WL, launch

SPECS = spread_fleet(halls=4)
BY_ID = {s.pool_id: s for s in SPECS}


def placed(
    driver: Driver, events: Events, vcpu: int, specs: dict[str, PoolSpec]
) -> PlacementDecided:
    placements = [
        d
        for d in driver.feed(events.claim(WL, vcpu, T0_US + MIN))
        if d.event_type == "placement_decided"
    ]
    placement = placements[0]  # then, if room ran out, its spare on committed capacity
    for made in placements:
        launch(events, driver, made, specs)
    assert isinstance(placement.payload, PlacementDecided)
    return placement.payload


def held(driver: Driver) -> dict[str, str]:
    """instance -> pool, of the workload."""
    state = driver.state("replacement", WL)
    return {i: h.pool_id for i, h in state.facts.instances.items()}


def replacements(out: list[Envelope]) -> list[Envelope]:
    return [d for d in out if d.event_type == "replacement_requested"]


def setup(floor_vcpu: int = 0) -> tuple[Events, Driver]:
    events = Events()
    driver = Driver(deciders=[Planner(), Replacement()])
    driver.feed_all(fleet(events, SPECS))
    driver.feed(events.contract(WL, floor_vcpu=floor_vcpu))
    return events, driver


def test_a_notice_is_replaced_at_once_elsewhere_and_its_loss_not_again() -> None:
    events, driver = setup()
    placed(driver, events, 512, BY_ID)
    instance, pool_id = sorted(held(driver).items())[0]
    spec = BY_ID[pool_id]
    notice = events.notice(instance, spec, WL, T0_US + 2 * 3600 * S, correlation_id="wave-0007")
    [request] = replacements(driver.feed(notice))
    p = request.payload
    assert isinstance(p, ReplacementRequested)
    assert request.occurred_at == notice.occurred_at  # on the notice, in parallel with the drain
    assert request.causation_id == notice.event_id
    assert request.correlation_id == "wave-0007"
    assert p.replaces_instance_id == instance and p.replaces_pool_id == pool_id
    assert sum(a.vcpu for a in p.allocations) >= spec.size_vcpu
    assert all(BY_ID[a.pool_id].group != spec.group for a in p.allocations)
    assert pool_id in p.excluded_pool_ids
    assert p.caps_held and p.unplaced_vcpu == 0
    later = driver.feed(
        events.lost(instance, spec, WL, notice.occurred_at + 120 * S, notice=notice)
    )
    assert replacements(later) == []


def test_a_loss_without_notice_is_replaced() -> None:
    events, driver = setup()
    placed(driver, events, 256, BY_ID)
    instance, pool_id = sorted(held(driver).items())[-1]
    loss = events.lost(instance, BY_ID[pool_id], WL, T0_US + 3600 * S)
    [request] = replacements(driver.feed(loss))
    assert request.causation_id == loss.event_id


def test_a_floor_instance_is_replaced_on_committed_capacity_in_another_hall() -> None:
    events, driver = setup(floor_vcpu=64)
    placed(driver, events, 128, BY_ID)
    floor = {i: p for i, p in held(driver).items() if BY_ID[p].model == "committed"}
    instance, pool_id = sorted(floor.items())[0]
    lost_hall = BY_ID[pool_id].hall
    loss = events.lost(instance, BY_ID[pool_id], WL, T0_US + 3600 * S, reason="hardware_failure")
    [request] = replacements(driver.feed(loss))
    p = request.payload
    assert isinstance(p, ReplacementRequested)
    assert p.floor and p.purchase_model == "committed"
    assert [a.purchase_model for a in p.allocations] == ["committed"]
    assert BY_ID[p.allocations[0].pool_id].hall != lost_hall


@settings(max_examples=40, deadline=None)
@given(fleets(min_reclaimable=10), st.integers(64, 1024), st.data())
def test_replacements_keep_out_of_the_lost_group_and_excluded_pools(
    fleet_: Fleet, vcpu: int, data: st.DataObject
) -> None:
    events = Events()
    driver = Driver(deciders=[Planner(), Replacement()])
    driver.feed_all(fleet_.events(events))
    driver.feed(events.contract(WL))
    specs = {s.pool_id: s for s in fleet_.specs}
    placed(driver, events, vcpu, specs)
    # Notices come to reclaimable capacity only.
    instances = sorted((i, p) for i, p in held(driver).items() if specs[p].model == "reclaimable")
    if not instances:
        return
    lost = data.draw(st.lists(st.sampled_from(instances), min_size=1, max_size=5, unique=True))
    at = T0_US + 3600 * S
    for instance, pool_id in lost:
        at += MIN
        view = driver.view
        spec = specs[pool_id]
        [request] = replacements(driver.feed(events.notice(instance, spec, WL, at)))
        p = request.payload
        assert isinstance(p, ReplacementRequested)
        chosen = {a.pool_id for a in p.allocations}
        assert not chosen & fleet_.excluded
        assert pool_id not in chosen
        others = [
            f
            for f in view.pools.values()
            if f.purchase_model == "reclaimable"
            and f.correlation_group != spec.group
            and f.pool_id not in view.excluded
            and view.room_vcpu(f.pool_id) >= f.instance_vcpu
        ]
        in_group = {c for c in chosen if specs[c].group == spec.group}
        event("avoidable" if others else "unavoidable")
        if others and in_group:
            # only once every other group was full under the caps
            assert p.caps_reason is not None and "could not keep out" in p.caps_reason
        if chosen and not in_group:  # it kept out, and names the group's pools as kept out of
            group = {f.pool_id for f in view.pools.values() if f.correlation_group == spec.group}
            assert group <= set(p.excluded_pool_ids)
        launch_replacement(events, driver, request, specs)


def launch_replacement(
    events: Events, driver: Driver, request: Envelope, specs: dict[str, PoolSpec]
) -> None:
    p = request.payload
    assert isinstance(p, ReplacementRequested)
    for n, a in enumerate(p.allocations):
        spec = specs[a.pool_id]
        role = {ROLE_TAG: FLOOR_ROLE} if p.floor else {}
        for k in range(a.vcpu // spec.size_vcpu):
            driver.feed(
                events.launched(
                    f"{request.event_id[:8]}-{n}-{k}",
                    spec,
                    WL,
                    request.occurred_at + 30 * S,
                    tags=role,
                )
            )


def test_capacity_the_open_claims_no_longer_ask_for_is_not_replaced() -> None:
    events, driver = setup()
    placed(driver, events, 64, BY_ID)
    # One instance more than the claim asks for (a launch that landed twice, say).
    spec = next(s for s in SPECS if s.model == "reclaimable" and s.size_vcpu == 4)
    driver.feed(events.launched("i-extra", spec, WL, T0_US + 2 * MIN))
    instances = sorted(held(driver).items())
    first, first_pool = instances[0]
    [skipped] = replacements(
        driver.feed(events.notice(first, BY_ID[first_pool], WL, T0_US + 3600 * S))
    )
    p = skipped.payload
    assert isinstance(p, ReplacementRequested)
    assert p.vcpu == 0 and p.allocations == () and p.unplaced_vcpu == 0
    assert p.caps_reason is not None and p.caps_reason.startswith("not replaced")
    # The next one is needed again: the claims ask for 64 and 64 - 4 would be left.
    second, second_pool = next((i, pool) for i, pool in instances[1:] if BY_ID[pool].size_vcpu == 4)
    [request] = replacements(
        driver.feed(events.notice(second, BY_ID[second_pool], WL, T0_US + 3601 * S))
    )
    q = request.payload
    assert isinstance(q, ReplacementRequested)
    assert q.vcpu == 4 and sum(a.vcpu for a in q.allocations) == 4


def test_a_released_claims_instances_are_not_replaced() -> None:
    events, driver = setup()
    claim = events.claim(WL, 64, T0_US + MIN, claim_id="claim/done")
    [placement] = [d for d in driver.feed(claim) if d.event_type == "placement_decided"]
    launch(events, driver, placement, BY_ID)
    driver.feed(events.released(WL, "claim/done", 64, T0_US + 3600 * S))
    instance, pool_id = sorted(held(driver).items())[0]
    [skipped] = replacements(
        driver.feed(events.lost(instance, BY_ID[pool_id], WL, T0_US + 3601 * S))
    )
    assert isinstance(skipped.payload, ReplacementRequested)
    assert skipped.payload.allocations == ()


def test_a_spare_instance_is_replaced_on_reclaimable_capacity_not_bought() -> None:
    events, driver = setup()
    placed(driver, events, 128, BY_ID)
    committed = next(s for s in SPECS if s.model == "committed")
    tags = {ROLE_TAG: SPARE_ROLE}  # beyond the floor, on room the floors left
    driver.feed(events.launched("spare-1", committed, WL, T0_US + 2 * MIN, tags=tags))
    driver.feed(events.claim(WL, 16, T0_US + 2 * MIN))  # what the spare instance serves
    loss = events.lost("spare-1", committed, WL, T0_US + 3600 * S, reason="hardware_failure")
    [request] = replacements(driver.feed(loss))
    p = request.payload
    assert isinstance(p, ReplacementRequested)
    assert not p.floor and p.purchase_model == "reclaimable"
    assert {a.purchase_model for a in p.allocations} == {"reclaimable"}
    assert sum(a.vcpu for a in p.allocations) >= 16
