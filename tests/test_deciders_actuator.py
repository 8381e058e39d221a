"""The actuator guard (ADR-12, ADR-11): the token budget, ownership, breakers and recovery, and
the OpenStack adapter's ``acquire`` hook drawing from it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from provider.openstack import OpenStackProvider
from schemas.events import (
    ActuationRefused,
    ActuationThrottled,
    Allocation,
    BreakerReset,
    BreakerTripped,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    PlacementDecided,
)
from streams.actuation import ActuationRefusedError, BudgetHook, BudgetWaitError
from streams.deciders import ActuatorGuard, DeciderSettings
from streams.deciders.actuator import Breaker, GuardState, Verdict
from tests.decider_events import MIN, OWNER, Events, PoolSpec, S
from tests.factories import T0_US
from tests.test_openstack import OWNED, delete_request, pool_mapping
from tests.test_openstack import OWNER as OPENSTACK_OWNER
from tests.test_openstack_replay import ReplayServer, connect, replay_servers

AC = DeciderSettings().actuator
POOL = PoolSpec("c7", 4, "hall-a", "reclaimable", 4096)


class Fold:
    """The guard folded over inputs as a runtime would, keeping every verdict."""

    def __init__(self, guard: ActuatorGuard | None = None) -> None:
        self.guard = guard or ActuatorGuard()
        self.state: GuardState = self.guard.initial("test")
        self.verdicts: list[tuple[int, Verdict]] = []
        self.events: list[Envelope] = []

    def feed(self, envelope: Envelope) -> list[Envelope]:
        due = self.guard.due_at(self.state)
        made: list[Envelope] = []
        if due is not None and due <= envelope.occurred_at:
            from streams.deciders import Tick

            made += self._apply(Tick(due, envelope.occurred_at))
        made += self._apply(envelope)
        return made

    def _apply(self, item: Envelope | object) -> list[Envelope]:
        judged = self.guard.judge(self.state, item)  # type: ignore[arg-type]
        made = self.guard.decide(self.state, item, None)  # type: ignore[arg-type]
        self.state = judged.state
        for e in made:
            self.state = self.guard.evolve(self.state, e)
        at = getattr(item, "occurred_at", 0)
        self.verdicts += [(at, v) for v in judged.verdicts]
        self.events += made
        return made


def launches(events: Events, n: int, at: int) -> Envelope:
    return events.env(
        PlacementDecided(
            workload_id="wl",
            requested_vcpu=n * POOL.size_vcpu,
            floor_vcpu=0,
            allocations=(Allocation(POOL.pool_id, n * POOL.size_vcpu, "reclaimable"),),
            cost_per_h_eur_micros=0,
            price_first_cost_per_h_eur_micros=0,
            premium_per_h_eur_micros=0,
            excluded_pool_ids=(),
        ),
        at,
        producer="deciders/planner",
    )


def returned(events: Events, instance_ids: list[str], at: int) -> Envelope:
    return events.env(
        FallbackReturned(
            workload_id="wl",
            vcpu=4 * len(instance_ids),
            dwell_s=1800,
            instance_ids=tuple(instance_ids),
        ),
        at,
        producer="deciders/fallback",
    )


def allowed_times(fold: Fold) -> list[int]:
    return sorted(v.not_before_us for _, v in fold.verdicts if v.not_before_us is not None)


def assert_within_budget(times: list[int]) -> None:
    """No stretch of event time grants more than the burst plus the rate times its length."""
    for i in range(len(times)):
        for j in range(i, len(times)):
            span_s = (times[j] - times[i]) / 1_000_000
            assert j - i + 1 <= AC.burst_calls + AC.calls_per_s * span_s + 1e-9, (i, j, span_s)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 40)), min_size=1, max_size=25))
def test_the_token_budget_is_never_exceeded(bursts: list[tuple[int, int]]) -> None:
    events = Events()
    fold = Fold()
    fold.feed(events.pool(POOL))
    at = T0_US
    for gap_ms, n in bursts:
        at += gap_ms * 1000
        fold.feed(launches(events, n, at))
    times = allowed_times(fold)
    assert len(times) == sum(n for _, n in bursts)  # delayed, never dropped
    assert_within_budget(times)
    delayed = [
        v for at_, v in fold.verdicts if v.not_before_us is not None and v.not_before_us > at_
    ]
    throttled = [e for e in fold.events if isinstance(e.payload, ActuationThrottled)]
    assert len(throttled) == len(delayed)  # every throttled call is an event
    event("throttled" if throttled else "within budget")


def test_a_throttled_call_says_how_long_and_why() -> None:
    events = Events()
    fold = Fold()
    fold.feed(events.pool(POOL))
    cause = launches(events, 15, T0_US)
    fold.feed(cause)
    throttled = [e for e in fold.events if isinstance(e.payload, ActuationThrottled)]
    assert len(throttled) == 5
    last = throttled[-1].payload
    assert isinstance(last, ActuationThrottled)
    assert last.budget_per_s == AC.calls_per_s and last.call == "launch"
    assert last.delay_ms == 500 and last.queued_calls == 5
    assert last.not_before_at == T0_US + 500_000
    assert all(e.causation_id == cause.event_id for e in throttled)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from((OWNER, "someone-else", None)), min_size=1, max_size=30),
    st.lists(st.integers(0, 40), min_size=1, max_size=30),
)
def test_nothing_untagged_is_terminated(owners: list[str | None], targets: list[int]) -> None:
    events = Events()
    fold = Fold()
    for i, owner in enumerate(owners):
        fold.feed(events.launched(f"i-{i}", POOL, "wl", T0_US, owner=owner))
    fold.feed(returned(events, [f"i-{t}" for t in targets], T0_US + MIN))
    owner_of = {f"i-{i}": o for i, o in enumerate(owners)}
    for _, verdict in fold.verdicts:
        if verdict.call.kind != "delete":
            continue
        if verdict.allowed:
            assert owner_of.get(verdict.call.instance_id or "") == OWNER
        event("refused" if not verdict.allowed else "allowed")
    refused = [e.payload for e in fold.events if isinstance(e.payload, ActuationRefused)]
    not_owned = [v for _, v in fold.verdicts if v.rule == "not_owned"]
    assert len([r for r in refused if r.rule == "not_owned"]) == len(not_owned)
    for r in refused:
        if r.rule == "not_owned":
            assert owner_of.get(r.instance_id or "") != OWNER


def test_mass_termination_trips_the_breaker_which_closes_and_recovers_gradually() -> None:
    events = Events()
    fold = Fold()
    n = AC.termination_threshold + 10
    for i in range(n):
        fold.feed(events.launched(f"i-{i}", POOL, "wl", T0_US))
    cause = returned(events, [f"i-{i}" for i in range(n)], T0_US + MIN)
    fold.feed(cause)
    deletes = [v for _, v in fold.verdicts if v.call.kind == "delete"]
    assert sum(v.allowed for v in deletes) == AC.termination_threshold
    assert {v.rule for v in deletes if not v.allowed} == {"termination"}
    [tripped] = [e for e in fold.events if isinstance(e.payload, BreakerTripped)]
    assert isinstance(tripped.payload, BreakerTripped)
    assert tripped.payload.terminations_observed == AC.termination_threshold + 1
    assert tripped.causation_id == cause.event_id
    refused = [e for e in fold.events if isinstance(e.payload, ActuationRefused)]
    assert len(refused) == 10
    # it closes after breaker_open_s, naming the trip, and the budget restarts at a fraction
    later = T0_US + MIN + AC.breaker_open_s * S + 1
    fold.feed(launches(events, 1, later))
    [reset] = [e for e in fold.events if isinstance(e.payload, BreakerReset)]
    assert isinstance(reset.payload, BreakerReset)
    assert reset.causation_id == tripped.event_id
    assert reset.occurred_at == T0_US + MIN + AC.breaker_open_s * S
    assert fold.guard.ratio(fold.state, reset.occurred_at) == AC.recovery_ratio
    step = AC.recovery_step_s * S
    assert fold.guard.ratio(fold.state, reset.occurred_at + 2 * step) == pytest.approx(
        4 * AC.recovery_ratio
    )
    assert fold.guard.ratio(fold.state, reset.occurred_at + 10 * step) == 1.0


def test_a_provider_outage_drops_the_budget_until_a_launch_succeeds() -> None:
    events = Events()
    fold = Fold()
    fold.feed(events.pool(POOL))
    for i in range(AC.outage_failures):
        fold.feed(events.launch_failed(POOL, "wl", T0_US + i * S, retryable=True))
    [tripped] = [e for e in fold.events if isinstance(e.payload, BreakerTripped)]
    assert isinstance(tripped.payload, BreakerTripped) and tripped.payload.breaker == "provider"
    fold.feed(launches(events, 3, T0_US + MIN))
    throttled = [e.payload for e in fold.events if isinstance(e.payload, ActuationThrottled)]
    assert throttled and throttled[0].budget_per_s == pytest.approx(
        AC.calls_per_s * AC.recovery_ratio
    )
    fold.feed(events.launched("back-1", POOL, "wl", T0_US + 2 * MIN))
    [reset] = [e for e in fold.events if isinstance(e.payload, BreakerReset)]
    assert isinstance(reset.payload, BreakerReset) and reset.payload.breaker == "provider"
    assert reset.causation_id == tripped.event_id
    assert fold.state.outage is None and fold.state.recovery_since_us == T0_US + 2 * MIN


def test_an_escalation_awaiting_approval_launches_nothing() -> None:
    events = Events()
    fold = Fold()
    fold.feed(events.pool(POOL))
    fold.feed(
        events.env(
            FallbackDecided(
                workload_id="wl",
                kind="escalated",
                vcpu=64,
                spend_eur_micros=0,
                cap_eur_micros=0,
                approver="a@example.org",
                priority=0,
                reason="beyond the cap",
                allocations=(Allocation(POOL.pool_id, 64, "guaranteed"),),
                awaiting_approval=True,
            ),
            T0_US,
            producer="deciders/fallback",
        )
    )
    assert fold.verdicts == []


# -- the acquire hook --------------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now_us = T0_US
        self.slept: list[float] = []

    def clock(self) -> int:
        return self.now_us

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_the_hook_waits_for_tokens_and_reports_each_throttled_call() -> None:
    fake = FakeTime()
    seen: list[Envelope] = []
    hook = BudgetHook(
        ActuatorGuard(), "test", on_event=seen.append, clock_us=fake.clock, sleep=fake.sleep
    )
    for _ in range(13):
        hook("launch")
    assert fake.slept == pytest.approx([0.1, 0.2, 0.3])
    assert [type(e.payload) for e in seen] == [ActuationThrottled] * 3
    hook("reclaim")  # the exercise job's call draws from the same budget, as a delete
    last = seen[-1].payload
    assert isinstance(last, ActuationThrottled) and (last.call, last.operation) == (
        "delete",
        "reclaim",
    )


def test_the_hook_bounds_its_wait_and_names_the_unknown_call() -> None:
    fake = FakeTime()
    hook = BudgetHook(
        ActuatorGuard(), "test", max_wait_s=0.5, clock_us=fake.clock, sleep=fake.sleep
    )
    for _ in range(15):
        hook("launch")
    with pytest.raises(BudgetWaitError, match="budget is spent"):
        hook("launch")
    with pytest.raises(ValueError, match="unknown mutating call 'resize'"):
        hook("resize")


@pytest.fixture
def replays() -> object:
    yield from replay_servers()


def _provider(replay: ReplayServer, hook: BudgetHook) -> OpenStackProvider:
    return OpenStackProvider(
        connect(replay),
        orchestrator_id=OPENSTACK_OWNER,
        pools=pool_mapping(),
        feed_endpoint=f"{replay.base_url}/feed",
        acquire=hook,
        timeout_s=5.0,
    )


def test_the_openstack_adapter_draws_its_tokens_from_the_actuators_budget(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_servers")
    fake = FakeTime()
    hook = BudgetHook(ActuatorGuard(), "test", clock_us=fake.clock, sleep=fake.sleep)
    _provider(replay, hook).delete(delete_request(OWNED))
    assert hook.state.deletions_us == (fake.now_us,)  # counted by the termination breaker
    assert hook.state.bucket.units == (AC.burst_calls - 1) * 1_000_000


def test_an_open_breaker_stops_the_adapter_before_any_request(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_servers")
    fake = FakeTime()
    seen: list[Envelope] = []
    hook = BudgetHook(
        ActuatorGuard(), "test", on_event=seen.append, clock_us=fake.clock, sleep=fake.sleep
    )
    hook.state = replace(hook.state, termination=Breaker(fake.now_us - S))
    with pytest.raises(ActuationRefusedError, match="termination"):
        _provider(replay, hook).delete(delete_request(OWNED))
    assert ("DELETE", f"/compute/v2.1/servers/{OWNED}") not in replay.requests(
        "/compute/v2.1/servers"
    )
    [refused] = seen
    assert isinstance(refused.payload, ActuationRefused) and refused.payload.rule == "termination"


def test_the_hook_follows_the_providers_clock_and_sleeps_in_real_seconds(
    replays: Callable[..., ReplayServer],
) -> None:
    """A served simulated region's adapter runs on the region's clock, weeks behind the wall
    clock and 30 times as fast: once the hook follows it, the throttled calls are stamped in
    the region's time and each wait for a token is slept in real seconds (issue 27)."""
    replay = replays("discovery")
    region = FakeTime()
    region.now_us = T0_US - 33 * 24 * 3600 * S  # the live region's clock: weeks behind
    seen: list[Envelope] = []
    hook = BudgetHook(ActuatorGuard(), "test", on_event=seen.append, sleep=region.sleep)
    provider = OpenStackProvider(
        connect(replay),
        orchestrator_id=OPENSTACK_OWNER,
        pools=pool_mapping(),
        feed_endpoint=f"{replay.base_url}/feed",
        acquire=hook,
        clock=region.clock,
        clock_speed=30.0,
    )
    assert hook.follow(provider) is provider
    for _ in range(13):
        hook("launch")
    assert region.slept == pytest.approx([0.1 / 30, 0.2 / 30, 0.3 / 30])
    assert [e.occurred_at for e in seen] == [region.now_us] * 3
    throttled = seen[-1].payload
    assert isinstance(throttled, ActuationThrottled)
    assert throttled.not_before_at == region.now_us + 300_000  # the guard's, in region time


def test_the_hook_bounds_its_wait_in_real_seconds() -> None:
    """`max_wait_s` bounds how long the caller blocks: 0.3 s of a clock that runs 10 times as
    fast is 0.03 s of real time, within a 0.05 s bound."""
    fake = FakeTime()
    hook = BudgetHook(ActuatorGuard(), "test", max_wait_s=0.05, clock_us=fake.clock,
                      speed=10.0, sleep=fake.sleep)  # fmt: skip
    for _ in range(13):
        hook("launch")
    hook("launch")
    hook("launch")  # 0.5 s of the clock: 0.05 s, at the bound
    assert fake.slept == pytest.approx([0.01, 0.02, 0.03, 0.04, 0.05])
    with pytest.raises(BudgetWaitError, match=r"would wait 0\.1 s"):
        hook("launch")
    with pytest.raises(ValueError, match="above 0"):
        BudgetHook(ActuatorGuard(), "test", speed=0.0)
