"""The exclusion watcher (ADR-07): within 60 s of event time, with its evidence, and hysteresis."""

from __future__ import annotations

import pytest

from schemas.events import Envelope, PoolExcluded, PoolReadmitted
from streams.deciders import DeciderSettings, ExclusionWatcher
from streams.deciders.observe import Exposure, poisson_tail
from tests.decider_driver import Driver
from tests.decider_events import MIN, Events, H, PoolSpec, S
from tests.factories import T0_US

POOL = PoolSpec("c7", 8, "hall-c", "reclaimable", 8 * 40, expected_per_h=0.01)


def watcher_driver(events: Events, instances: int = 40) -> Driver:
    driver = Driver(deciders=[ExclusionWatcher()])
    driver.feed(events.pool(POOL))
    for i in range(instances):
        driver.feed(events.launched(f"i-{i:03d}", POOL, "wl", T0_US))
    return driver


def of_type(decisions: list[Envelope], event_type: str) -> list[Envelope]:
    return [d for d in decisions if d.event_type == event_type]


def test_a_burst_is_excluded_within_60_s_of_its_first_evidence_naming_it() -> None:
    events = Events()
    driver = watcher_driver(events)
    start = T0_US + 2 * H
    notices = [events.notice(f"i-{i:03d}", POOL, "wl", start + i * 10 * S) for i in range(3)]
    out = driver.feed_all(notices)
    [excluded] = of_type(out, "pool_excluded")
    p = excluded.payload
    assert isinstance(p, PoolExcluded)
    assert p.reason == "burst"
    assert excluded.occurred_at - notices[0].occurred_at <= 60 * S
    assert list(p.evidence_event_ids) == [n.event_id for n in notices]
    assert excluded.causation_id == notices[-1].event_id  # the evidence that completed the case
    # the figures it compared
    assert p.reclaimed_instances == 3
    assert p.expected_interruption_per_h == pytest.approx(0.01)
    assert p.threshold_per_h == pytest.approx(0.03)
    assert p.window_end_at - p.window_start_at == 60 * S
    assert p.exposure_instance_h == pytest.approx(40 * 60 / 3600)
    assert p.expected_reclaims == pytest.approx(0.01 * p.exposure_instance_h)
    assert p.observed_interruption_per_h >= p.threshold_per_h
    assert p.tail_probability < DeciderSettings().exclusion.significance


def test_a_sustained_rate_is_excluded_on_the_reclaim_that_makes_the_case() -> None:
    events = Events()
    spec = PoolSpec("c7", 8, "hall-c", "reclaimable", 8 * 20, expected_per_h=0.005)
    driver = Driver(deciders=[ExclusionWatcher()])
    driver.feed(events.pool(spec))
    for i in range(20):
        driver.feed(events.launched(f"i-{i:03d}", spec, "wl", T0_US))
    notices = [events.notice(f"i-{i:03d}", spec, "wl", T0_US + H + i * 15 * MIN) for i in range(6)]
    decided: list[Envelope] = []
    for notice in notices:
        decided += [(d) for d in driver.feed(notice)]
        if decided:
            break
    [excluded] = of_type(decided, "pool_excluded")
    p = excluded.payload
    assert isinstance(p, PoolExcluded)
    assert p.reason == "rate"
    assert excluded.causation_id == notice.event_id
    assert excluded.occurred_at == notice.occurred_at  # 0 s after the evidence is complete
    assert list(p.evidence_event_ids) == [n.event_id for n in notices[: len(p.evidence_event_ids)]]
    assert p.reclaimed_instances == len(p.evidence_event_ids) >= 3


def test_a_pool_reclaimed_as_its_record_says_is_never_excluded() -> None:
    events = Events()
    spec = PoolSpec("c7", 8, "hall-c", "reclaimable", 8 * 100, expected_per_h=0.05)
    driver = Driver(deciders=[ExclusionWatcher()])
    driver.feed(events.pool(spec))
    for i in range(100):
        driver.feed(events.launched(f"i-{i:03d}", spec, "wl", T0_US))
    # 5 reclaims an hour (its record: 0.05 x 100 instances), each replaced, for a day
    out: list[Envelope] = []
    for n in range(24 * 5):
        at = T0_US + n * 12 * MIN
        out += driver.feed(events.notice(f"i-{n % 100:03d}", spec, "wl", at))
        out += driver.feed(events.lost(f"i-{n % 100:03d}", spec, "wl", at + 2 * MIN))
        out += driver.feed(events.launched(f"r-{n:03d}", spec, "wl", at + 3 * MIN))
    assert out == []


def test_a_notice_and_its_loss_are_one_reclamation() -> None:
    events = Events()
    driver = watcher_driver(events)
    start = T0_US + 2 * H
    notice = events.notice("i-000", POOL, "wl", start)
    driver.feed(notice)
    driver.feed(events.lost("i-000", POOL, "wl", start + 2 * MIN, notice=notice))
    state = driver.state("exclusion", POOL.pool_id)
    assert [r.event_id for r in state.reclaims] == [notice.event_id]


def test_readmission_waits_for_sustained_health_and_restarts_on_trouble() -> None:
    events = Events()
    driver = watcher_driver(events)
    start = T0_US + 2 * H
    [excluded] = of_type(
        driver.feed_all(
            [events.notice(f"i-{i:03d}", POOL, "wl", start + i * 10 * S) for i in range(3)]
        ),
        "pool_excluded",
    )
    healthy = DeciderSettings().exclusion.readmission_healthy_s * S
    # one more reclaim 30 minutes in: the pool was not healthy, the clock restarts there
    trouble = events.notice("i-010", POOL, "wl", excluded.occurred_at + 30 * MIN)
    assert driver.feed(trouble) == []
    out: list[Envelope] = []
    at = excluded.occurred_at
    while at < excluded.occurred_at + 3 * H:
        at += 5 * MIN
        out += driver.feed(events.rate_card(POOL, at))
    [readmitted] = of_type(out, "pool_readmitted")
    p = readmitted.payload
    assert isinstance(p, PoolReadmitted)
    assert readmitted.occurred_at == trouble.occurred_at + healthy
    assert p.healthy_s == healthy // S
    assert p.exclusion_event_id == excluded.event_id
    assert readmitted.causation_id == excluded.event_id


def test_guaranteed_pools_are_not_judged() -> None:
    events = Events()
    spec = PoolSpec("c7", 8, "hall-c", "guaranteed", 8 * 40, expected_per_h=0.0)
    driver = Driver(deciders=[ExclusionWatcher()])
    driver.feed(events.pool(spec))
    out = driver.feed_all(
        [events.lost(f"i-{i}", spec, "wl", T0_US + i * S, reason="reclaimed") for i in range(5)]
    )
    assert out == []


def test_exposure_integrates_the_live_count_exactly() -> None:
    exposure = Exposure(10 * H).set_count(0, 4).set_count(H, 2).set_count(3 * H, 0)
    assert exposure.instance_h(0, H) == 4.0
    assert exposure.instance_h(0, 4 * H) == 8.0
    assert exposure.instance_h(H // 2, 2 * H) == 4.0


def test_the_poisson_tail_matches_its_definition() -> None:
    assert poisson_tail(0, 3.0) == 1.0
    assert poisson_tail(1, 0.0) == 0.0
    assert poisson_tail(1, 2.0) == pytest.approx(1 - 2.718281828459045**-2)
    assert poisson_tail(3, 0.01) == pytest.approx(0.01**3 / 6, rel=0.02)


def test_a_readmitted_pool_is_judged_afresh_and_a_repeat_offender_waits_longer() -> None:
    events = Events()
    driver = watcher_driver(events)
    s = DeciderSettings().exclusion
    start = T0_US + 2 * H

    def burst(at: int, first: int) -> list[Envelope]:
        notices = [
            events.notice(f"i-{first + i:03d}", POOL, "wl", at + i * 10 * S) for i in range(3)
        ]
        return of_type(driver.feed_all(notices), "pool_excluded")

    def ticks(since: int, until: int) -> list[Envelope]:
        out: list[Envelope] = []
        at = since
        while at < until:
            at += 5 * MIN
            out += driver.feed(events.rate_card(POOL, at))
        return out

    [first] = burst(start, 0)
    [readmitted] = of_type(ticks(first.occurred_at, first.occurred_at + 2 * H), "pool_readmitted")
    assert readmitted.occurred_at == first.occurred_at + s.readmission_healthy_s * S
    # one reclaim after readmission: the forgiven burst does not count again
    assert driver.feed(events.notice("i-020", POOL, "wl", readmitted.occurred_at + MIN)) == []
    [second] = burst(readmitted.occurred_at + 10 * MIN, 30)
    out = ticks(second.occurred_at, second.occurred_at + 3 * H)
    [again] = of_type(out, "pool_readmitted")
    assert again.occurred_at == second.occurred_at + 2 * s.readmission_healthy_s * S
