"""The daily drill (ADR-33) on a simulated region with the deciders in the loop: it reclaims its
share of a pool through the provider's own reclaim path, measures what the notice path did with
it, refuses to run during a wave, with a breaker open or beside another drill, runs once a day
from its schedule, and its decisions replay byte for byte."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from provider.base import OWNER_TAG, ReclaimRequest
from provider.drill import (
    COLUMNS,
    DrillPlanError,
    DrillRequest,
    cells,
    drill_report,
    due,
    finish_due,
    load_plan,
    run_drill,
)
from schemas.codec import Codec
from schemas.events import (
    BreakerReset,
    BreakerTripped,
    DrillFinished,
    DrillStarted,
    Envelope,
    NoticeReceived,
)
from sim.clock import SECOND_US
from streams.deciders.drill import DrillGate, DrillSettings, choose
from tests.drill_support import REGION, DrilledRegion

WARM_S = 3 * 3600


@pytest.fixture
def region() -> DrilledRegion:
    r = DrilledRegion()
    r.advance(WARM_S, step_s=600)
    return r


def drill_notices(r: DrilledRegion, drill_id: str) -> list[Envelope]:
    return [
        e
        for e in r.events
        if isinstance(e.payload, NoticeReceived) and e.correlation_id == drill_id
    ]


def region_event(r: DrilledRegion, payload: BreakerTripped | BreakerReset, n: int) -> Envelope:
    at = r.sim.now_us()
    return Envelope(f"00000000-0000-4000-8000-{n:012d}", payload.EVENT_TYPE, at, at, REGION,
                    REGION, None, None, "deciders/actuator", payload)  # fmt: skip


def test_a_drill_reclaims_its_share_through_the_provider_and_measures_the_notice_path(
    region: DrilledRegion,
) -> None:
    pool, running = region.busiest_pool()
    outcome = run_drill(region.provider, region.read, region.write, DrillRequest(pool, 0.1))
    start = outcome.started
    assert start is not None and outcome.refused is None and not outcome.reclaim_errors
    assert len(start.instance_ids) == math.ceil(0.1 * running)
    assert start.pool_instance_count == running
    owner = region.sim.config.orchestrator.orchestrator_id
    noticed = {i.instance_id for i in region.provider.list_by_tag(OWNER_TAG, owner)
               if i.state == "noticed"}  # fmt: skip
    assert set(start.instance_ids) <= noticed  # on the provider's own reclaim path

    # Before the deadlines have passed there is nothing to finish.
    region.advance(60)
    assert run_drill(region.provider, region.read, region.write, None).finished == []
    region.advance(300)
    outcome = run_drill(region.provider, region.read, region.write, None)
    [figures] = outcome.finished
    n = len(start.instance_ids)
    notices = drill_notices(region, start.drill_id)
    assert {e.payload.instance_id for e in notices} == set(start.instance_ids)  # type: ignore[union-attr]
    assert (figures.reclaimed_count, figures.noticed_count, figures.drained_count) == (n, n, n)
    assert figures.drain_verified_count == n
    # The simulated agents start draining one second after the notice.
    assert figures.notice_to_drain_p99_ms == figures.notice_to_drain_max_ms == 1000
    assert figures.replacements_requested_count == n == figures.replaced_in_time_count
    assert figures.passed and figures.failures == ()
    assert figures.cost_eur_micros >= 0

    # Finishing again writes nothing: one drill_finished per drill.
    assert run_drill(region.provider, region.read, region.write, None).finished == []
    assert [e.event_type for e in region.written] == ["drill_started", "drill_finished"]
    [row] = drill_report(region.read())
    assert row.result == "passed" and row.reclaimed == n
    assert len(cells(row)) == len(COLUMNS)


def test_a_drill_that_finds_a_replacement_missing_fails_and_says_which(
    region: DrilledRegion,
) -> None:
    pool, _ = region.busiest_pool()
    outcome = run_drill(region.provider, region.read, region.write, DrillRequest(pool, 0.1))
    assert outcome.started is not None
    region.advance(360)
    # The same drill measured over the log without the replacements' launches.
    events = [e for e in region.read() if e.event_type != "instance_launched"]
    [done] = finish_due(events, region.sim.now_us())
    figures = done.payload
    assert isinstance(figures, DrillFinished)
    assert not figures.passed
    assert figures.replaced_in_time_count < figures.reclaimed_count
    assert any("no replacement launched before its deadline" in f for f in figures.failures)


def test_a_drill_is_refused_while_a_breaker_is_open_and_runs_after_its_reset(
    region: DrilledRegion,
) -> None:
    pool, _ = region.busiest_pool()
    trip = region_event(region, BreakerTripped("termination", 51, 60, 50, "mass termination"), 1)
    region.write([trip])
    region.advance(1)
    outcome = run_drill(region.provider, region.read, region.write, DrillRequest(pool, 0.1))
    assert outcome.started is None and outcome.refused is not None
    assert outcome.refused.rule == "breaker"
    assert outcome.refused.evidence_event_ids == (trip.event_id,)
    assert drill_notices(region, outcome.refused.drill_id) == []  # nothing was reclaimed
    region.write([region_event(region, BreakerReset("termination", 600, 0.1), 2)])
    region.advance(1)
    outcome = run_drill(region.provider, region.read, region.write, DrillRequest(pool, 0.1))
    assert outcome.started is not None
    # A second drill while the first runs is refused.
    again = run_drill(region.provider, region.read, region.write, DrillRequest(pool, 0.1))
    assert again.refused is not None and again.refused.rule == "drill_running"


def test_a_drill_is_refused_during_a_real_wave(region: DrilledRegion) -> None:
    pool, _ = region.busiest_pool()
    owner = region.sim.config.orchestrator.orchestrator_id
    victim = next(i for i in region.provider.list_by_tag(OWNER_TAG, owner)
                  if i.pool_id != pool and i.purchase_model == "reclaimable")  # fmt: skip
    region.provider.reclaim(ReclaimRequest(victim.instance_id, correlation_id="wave-7"))
    region.advance(2)
    outcome = run_drill(region.provider, region.read, region.write, DrillRequest(pool, 0.1))
    assert outcome.refused is not None and outcome.refused.rule == "wave"
    [notice] = [e for e in region.events if e.correlation_id == "wave-7"
                and e.event_type == "notice_received"]  # fmt: skip
    assert outcome.refused.evidence_event_ids == (notice.event_id,)
    # Once the window has passed, the drill runs.
    region.advance(DrillSettings().wave_window_s + 1, step_s=30)
    outcome = run_drill(region.provider, region.read, region.write, DrillRequest(pool, 0.1))
    assert outcome.started is not None


def test_many_uncorrelated_notices_in_the_window_are_a_wave() -> None:
    gate = DrillGate(DrillSettings(wave_window_s=300, wave_min_notices=5))
    notices = [
        Envelope(f"00000000-0000-4000-8000-{n:012d}", "notice_received", n * SECOND_US,
                 n * SECOND_US, REGION, f"i-{n}", None, None, "agent/x",
                 NoticeReceived(f"i-{n}", "p", "w", (n + 120) * SECOND_US, "nats"))
        for n in range(5)
    ]  # fmt: skip
    state = gate.fold(notices[:4])
    assert gate.judge(state, 10 * SECOND_US) is None
    state = gate.evolve(state, notices[4])
    refusal = gate.judge(state, 10 * SECOND_US)
    assert refusal is not None and refusal.rule == "wave" and len(refusal.evidence_event_ids) == 5
    assert gate.judge(state, 301 * SECOND_US) is None  # the window has moved past them


def test_a_pool_without_our_instances_is_refused_and_a_share_beyond_the_cap_is_an_error(
    region: DrilledRegion,
) -> None:
    outcome = run_drill(
        region.provider, region.read, region.write, DrillRequest("no-such-pool", 0.05)
    )
    assert outcome.refused is not None and outcome.refused.rule == "no_instances"
    assert "spotcap query fleet" in outcome.refused.reason
    with pytest.raises(ValueError, match=r"\(0, 0.25\]"):
        run_drill(region.provider, region.read, region.write, DrillRequest("p", 0.5))


def test_the_drills_decisions_replay_byte_for_byte(region: DrilledRegion) -> None:
    pool, _ = region.busiest_pool()
    outcome = run_drill(region.provider, region.read, region.write, DrillRequest(pool, 0.2))
    region.advance(360)
    run_drill(region.provider, region.read, region.write, None)
    codec = Codec()
    started, finished = region.written
    before = [e for e in region.read() if e.occurred_at < started.occurred_at]
    # The gate over the same events at the same time lets it run, and the drill's choice from
    # the same instances is the same.
    assert DrillGate().judge(DrillGate().fold(before), started.occurred_at) is None
    assert outcome.started is not None
    payload = started.payload
    assert isinstance(payload, DrillStarted)
    assert tuple(choose(list(payload.instance_ids), 1.0, payload.drill_id)) == payload.instance_ids
    region.advance(600, step_s=60)  # the log goes on: a replay reads more than the finish did
    upto = [e for e in region.read() if e != finished]
    [again] = finish_due(upto, finished.occurred_at)
    assert codec.encode(again) == codec.encode(finished)
    assert codec.decode(codec.encode(finished)).payload == finished.payload


def test_the_schedule_runs_each_entry_once_a_day(region: DrilledRegion, tmp_path: Path) -> None:
    pool, _ = region.busiest_pool()
    plan_file = tmp_path / "drills.yaml"
    plan_file.write_text(f'drills:\n  - pool: {pool}\n    share: 0.05\n    at: "02:00"\n')
    plan = load_plan(plan_file)
    now = region.sim.now_us()
    midnight = now - now % (86_400 * SECOND_US)
    assert due(plan, midnight + 3600 * SECOND_US, REGION) == []  # 01:00: not yet
    [request] = due(plan, now, REGION)
    assert request.plan == f"schedule {pool} at 02:00"
    assert due(plan, now + 3600 * SECOND_US, REGION)[0].drill_id == request.drill_id
    assert due(plan, now + 86_400 * SECOND_US, REGION)[0].drill_id != request.drill_id
    first = run_drill(region.provider, region.read, region.write, request)
    assert first.started is not None and first.started.drill_id == request.drill_id
    second = run_drill(region.provider, region.read, region.write, request)
    assert second.started is None and second.already_ran == request.drill_id
    plan_file.write_text('drills:\n  - pool: p\n    share: 0.05\n    at: "25:00"\n')
    with pytest.raises(DrillPlanError, match="UTC time of day"):
        load_plan(plan_file)


def test_a_drills_own_notices_are_no_wave_even_without_its_correlation_id() -> None:
    """The OpenStack feeds give the drill's notices without the reclaim's correlation id: the
    gate knows them by their instances."""
    gate = DrillGate(DrillSettings(wave_window_s=300, wave_min_notices=5))
    ids = tuple(f"i-{n}" for n in range(5))
    start = DrillStarted("d-1", "p", 0.25, 20, ids, 120, "manual")
    began = Envelope("00000000-0000-4000-8000-000000000100", "drill_started", 0, 0, REGION, "p",
                     None, "d-1", "drill", start)  # fmt: skip
    finished = DrillFinished("d-1", "p", 5, 5, 5, 5, 1000, 1000, 5, 5, 0.0, 0, True, ())
    ended = Envelope("00000000-0000-4000-8000-000000000101", "drill_finished", 250 * SECOND_US,
                     250 * SECOND_US, REGION, "p", None, "d-1", "drill", finished)  # fmt: skip
    notices = [
        Envelope(f"00000000-0000-4000-8000-{n:012d}", "notice_received", (n + 1) * SECOND_US,
                 (n + 1) * SECOND_US, REGION, i, None, None, "agent/x",
                 NoticeReceived(i, "p", "w", (n + 121) * SECOND_US, "metadata"))
        for n, i in enumerate(ids)
    ]  # fmt: skip
    state = gate.fold([began, *notices, ended])
    assert gate.judge(state, 260 * SECOND_US) is None
