"""The actuator guard (ADR-12, ADR-11): whether and when each mutating provider call may go out.

**Key: region** (the token budget is regional). The guard is the pure half of the actuator: it
turns decisions into the provider calls they imply and judges each on event time; the I/O
half (a runtime, or the OpenStack adapter's ``acquire`` hook through `streams.actuation`) makes
the calls it allows, when it allows them, for every provider.

Inputs: the decisions that act (`placement_decided`, `replacement_requested` and
`fallback_decided` launch one instance per instance-size of each allocation; an approved or
automatic fallback only, never one awaiting approval; `fallback_returned` deletes the
fallback's instances), `capacity_released` (a run's work is done: the instances serving its
claim, tagged ``spotcap.io/claim``, are deleted), `pool_registered` (instance sizes),
`instance_launched` (which instances carry the orchestrator's owner tag and which claim they
serve, and that the provider answers; an instance that lands for a claim already released is
deleted), `instance_lost`, `instance_deleted` and `launch_failed`. Outputs:
`actuation_ordered` for every allowed call (what the actuator service carries out, and when),
`actuation_throttled` for every delayed call, `actuation_refused` for every refused one,
`breaker_tripped`, `breaker_reset`.

* **Token budget** (`budget.TokenBucket`): `calls_per_s` (10) mutating calls a second, a burst
  of `burst_calls`; a call finding no token is queued and delayed, never dropped, and says so.
* **Ownership** (ADR-11, ADR-29): a delete of an instance the guard has not seen launched with
  ``spotcap.io/owner = orchestrator_id`` is refused, whoever asked.
* **Termination breaker**: more than `termination_threshold` deletions allowed within
  `termination_window_s` open it; while open every delete is refused; it closes after
  `breaker_open_s`, and the budget restarts at `recovery_ratio` of itself.
* **Orderly scale-down**: deleting what a released claim no longer needs is never urgent, so
  those deletions are *paced* under the breaker instead of tripping it: each waits until the
  termination window has room for it (and until an open breaker closes). A run's end
  (hundreds of CI runners at 18:00) therefore takes a few minutes, and the breaker stays for
  what it is for: terminations nobody planned.
* **Provider outage**: `outage_failures` failed launches in a row mean the provider is out; the
  budget drops to `recovery_ratio` (probing, not storming). When a launch succeeds again,
  recovery begins (`breaker_reset`, breaker ``provider``).
* **Gradual recovery**: after either breaker the budget doubles every `recovery_step_s` until it
  is whole, so the backlog of a control-plane or provider outage does not arrive as a storm.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.events import (
    ActuationCall,
    ActuationOrdered,
    ActuationRefused,
    ActuationThrottled,
    BreakerReset,
    BreakerTripped,
    CapacityReleased,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    LaunchFailed,
    PlacementDecided,
    PoolRegistered,
    ReplacementRequested,
)
from schemas.ids import derived_event_id
from streams.deciders.budget import Grant, TokenBucket
from streams.deciders.maps import drop, put, replace
from streams.deciders.region import RegionView
from streams.deciders.settings import ActuatorSettings, DeciderSettings
from streams.deciders.types import US, Cause, Input, Tick, decision
from streams.deciders.workload import CLAIM_TAG

NAME = "actuator"
OWNER_TAG = "spotcap.io/owner"  # ADR-11; the same tag provider.base.OWNER_TAG names
TERMINATION = "termination"
# How long a released claim is remembered, to delete what still lands for it.
RELEASED_MEMORY_US = 24 * 3600 * US
PROVIDER = "provider"
INPUTS = frozenset(
    {
        "placement_decided",
        "replacement_requested",
        "fallback_decided",
        "fallback_returned",
        "capacity_released",
        "pool_registered",
        "instance_launched",
        "instance_lost",
        "instance_deleted",
        "launch_failed",
    }
)
# The inputs that can imply provider calls (the rest only update the guard's state).
CALL_CAUSES = frozenset(
    {
        "placement_decided",
        "replacement_requested",
        "fallback_decided",
        "fallback_returned",
        "capacity_released",
        "instance_launched",
    }
)


@dataclass(frozen=True, slots=True)
class Call:
    """One mutating provider call a decision implies (or the I/O side asks about)."""

    kind: ActuationCall
    cause: Cause
    index: int = 0  # the call's place among its cause's calls
    pool_id: str | None = None
    instance_id: str | None = None
    workload_id: str | None = None
    operation: str | None = None  # the provider operation when not the call itself (reclaim)
    owner_checked: bool = False  # the adapter checked the owner tag itself, before any token
    orderly: bool = False  # a scale-down delete: paced under the breaker, never tripping it


@dataclass(frozen=True, slots=True)
class Verdict:
    """A call's fate: `not_before_us` when it may go out, or None and the refusing rule."""

    call: Call
    not_before_us: int | None
    rule: str | None = None

    @property
    def allowed(self) -> bool:
        return self.not_before_us is not None


@dataclass(frozen=True, slots=True)
class Breaker:
    """An open breaker: since when, and the event that opened it (once recorded)."""

    since_us: int
    tripped_by: Cause | None = None


@dataclass(frozen=True, slots=True)
class GuardState:
    region: str
    bucket: TokenBucket
    now_us: int = 0
    sizes: Mapping[str, int] = field(default_factory=dict)  # pool -> vCPU per instance
    owners: Mapping[str, str | None] = field(default_factory=dict)  # instance -> owner tag
    claims: Mapping[str, str] = field(default_factory=dict)  # own instance -> claim it serves
    released: Mapping[str, int] = field(default_factory=dict)  # claim -> when it was released
    deletions_us: tuple[int, ...] = ()  # deletions allowed inside the termination window, sorted
    termination: Breaker | None = None
    launch_failures: int = 0
    outage: Breaker | None = None
    recovery_since_us: int | None = None


@dataclass(frozen=True, slots=True)
class Judged:
    """The guard's answer to one input: the state after, each call's verdict, the events."""

    state: GuardState
    verdicts: tuple[Verdict, ...]
    events: tuple[Envelope, ...]


class ActuatorGuard:
    """The actuator guard as a `Decider[GuardState]` (key: region)."""

    name = NAME
    inputs = INPUTS

    def __init__(self, settings: DeciderSettings | None = None) -> None:
        self.settings: ActuatorSettings = (settings or DeciderSettings()).actuator
        # `step` asks `decide` and then `evolve` about the same (state, input): the judgement
        # of the last pair is kept (by identity: both are immutable), not made twice.
        self._last: tuple[GuardState, Input, Judged] | None = None

    def key(self, event: Envelope) -> str | None:
        return event.region if event.event_type in INPUTS else None

    def initial(self, key: str) -> GuardState:
        return GuardState(key, TokenBucket.full(self.settings.burst_calls, 0))

    def due_at(self, state: GuardState) -> int | None:
        if state.termination is None:
            return None
        return state.termination.since_us + self.settings.breaker_open_s * US

    # -- the budget --------------------------------------------------------------------------

    def ratio(self, state: GuardState, at_us: int) -> float:
        """The share of the budget in force at `at_us` (outage, or gradual recovery)."""
        s = self.settings
        if state.outage is not None:
            return s.recovery_ratio
        if state.recovery_since_us is None:
            return 1.0
        steps = max(0, at_us - state.recovery_since_us) // (s.recovery_step_s * US)
        return min(1.0, s.recovery_ratio * float(2 ** min(steps, 64)))

    def admit(self, state: GuardState, call: Call, at_us: int) -> Judged:
        """Judge one call at event time `at_us`."""
        s = self.settings
        state = replace(state, now_us=max(state.now_us, at_us))
        events: tuple[Envelope, ...] = ()
        if call.kind == "delete":
            checked = self._check_delete(state, call, at_us)
            if isinstance(checked, Judged):
                return checked
            state, events = checked
        ratio = self.ratio(state, state.bucket.last_us)
        rate = s.calls_per_s * ratio
        bucket, grant = state.bucket.take(at_us, rate, ratio)
        state = replace(state, bucket=bucket)
        if call.orderly:
            state, grant = self._paced(state, grant)
        delay_us = grant.delay_us(at_us)
        if delay_us > 0:
            throttled = ActuationThrottled(
                call=call.kind,
                tokens_available=grant.tokens_before,
                budget_per_s=rate,
                queued_calls=grant.queued,
                delay_ms=math.ceil(delay_us / 1000),
                operation=call.operation,
                not_before_at=grant.not_before_us,
            )
            events = (*events, self._stamp(throttled, call, at_us, "throttled"))
        return Judged(state, (Verdict(call, grant.not_before_us),), events)

    def _paced(self, state: GuardState, grant: Grant) -> tuple[GuardState, Grant]:
        """An orderly delete's grant moved to when the termination window has room for it
        (and the breaker is closed), and the deletion counted there."""
        s = self.settings
        window_us = s.termination_window_s * US
        at_us = grant.not_before_us
        if state.termination is not None:
            at_us = max(at_us, state.termination.since_us + s.breaker_open_s * US)
        deletions = state.deletions_us
        if len(deletions) >= s.termination_threshold:
            # the window ending at `at_us` may hold threshold - 1 others
            at_us = max(at_us, deletions[-s.termination_threshold] + window_us)
        placed = list(deletions)
        bisect.insort(placed, at_us)
        paced = Grant(at_us, grant.tokens_before, grant.queued)
        return replace(state, deletions_us=tuple(placed)), paced

    def _check_delete(
        self, state: GuardState, call: Call, at_us: int
    ) -> Judged | tuple[GuardState, tuple[Envelope, ...]]:
        """A refusal of a delete (not owned, breaker open or tripping now), or the state with
        the deletion counted."""
        s = self.settings
        if not call.owner_checked:
            owner = state.owners.get(call.instance_id or "")
            if owner != s.orchestrator_id:
                why = (
                    f"instance {call.instance_id} is not tagged {OWNER_TAG}={s.orchestrator_id}"
                    f" (found {owner!r}): only the orchestrator's own instances are terminated"
                )
                return self._refuse(state, call, at_us, ("not_owned", why), owner)
        window_us = s.termination_window_s * US
        recent = tuple(t for t in state.deletions_us if t > at_us - window_us)
        state = replace(state, deletions_us=recent)
        if call.orderly:
            return state, ()  # counted where `_paced` puts it
        if state.termination is not None:
            why = (
                f"the termination breaker is open since {state.termination.since_us}: "
                "no deletions until it closes"
            )
            return self._refuse(state, call, at_us, (TERMINATION, why))
        count = len(recent) + 1
        if count <= s.termination_threshold:
            placed = list(recent)
            bisect.insort(placed, at_us)
            return replace(state, deletions_us=tuple(placed)), ()
        why = f"{count} deletions within {s.termination_window_s} s opened the breaker"
        tripped = BreakerTripped(
            breaker=TERMINATION,
            terminations_observed=count,
            window_s=s.termination_window_s,
            threshold=s.termination_threshold,
            reason=why,
        )
        state = replace(state, termination=Breaker(at_us))
        refused = self._refuse(state, call, at_us, (TERMINATION, why))
        tripped_event = self._stamp(tripped, call, at_us, "tripped")
        return replace(refused, events=(tripped_event, *refused.events))

    def _refuse(
        self,
        state: GuardState,
        call: Call,
        at_us: int,
        rule: tuple[str, str],
        owner: str | None = None,
    ) -> Judged:
        name, why = rule
        refused = ActuationRefused(
            call=call.kind,
            rule=name,
            reason=why,
            instance_id=call.instance_id,
            pool_id=call.pool_id,
            workload_id=call.workload_id,
            owner_tag=owner,
        )
        event = self._stamp(refused, call, at_us, "refused")
        return Judged(state, (Verdict(call, None, name),), (event,))

    def _stamp(
        self,
        payload: ActuationOrdered
        | ActuationThrottled
        | ActuationRefused
        | BreakerTripped
        | BreakerReset,
        call: Call,
        at_us: int,
        what: str,
    ) -> Envelope:
        return decision(
            payload,
            cause=call.cause,
            at_us=at_us,
            decider=NAME,
            discriminator=f"{what}/{call.kind}/{call.index}",
        )

    # -- decisions into calls ----------------------------------------------------------------

    def calls(self, state: GuardState, event: Envelope) -> tuple[Call, ...]:
        """The provider calls a decision implies, in order."""
        p = event.payload
        cause = Cause.of(event)
        out: list[Call] = []
        if isinstance(p, PlacementDecided | ReplacementRequested | FallbackDecided):
            if isinstance(p, FallbackDecided) and p.awaiting_approval:
                return ()
            for allocation in p.allocations:
                size = state.sizes.get(allocation.pool_id) or allocation.vcpu
                for _ in range(max(1, -(-allocation.vcpu // size))):
                    call = Call(
                        "launch",
                        cause,
                        len(out),
                        pool_id=allocation.pool_id,
                        workload_id=p.workload_id,
                    )
                    out.append(call)
        elif isinstance(p, FallbackReturned):
            for instance_id in p.instance_ids:
                call = Call(
                    "delete", cause, len(out), instance_id=instance_id, workload_id=p.workload_id
                )
                out.append(call)
        elif isinstance(p, CapacityReleased):
            serving = sorted(i for i, claim in state.claims.items() if claim == p.claim_id)
            for instance_id in serving:
                out.append(self._scale_down(cause, len(out), instance_id, p.workload_id))
        elif isinstance(p, InstanceLaunched):
            claim = state.claims.get(p.instance_id)
            if claim is not None and claim in state.released:
                # it landed after its claim's work was done (a queued launch, a replacement)
                out.append(self._scale_down(cause, 0, p.instance_id, p.workload_id))
        return tuple(out)

    @staticmethod
    def _scale_down(cause: Cause, index: int, instance_id: str, workload_id: str) -> Call:
        return Call(
            "delete", cause, index, instance_id=instance_id, workload_id=workload_id, orderly=True
        )

    def judge(self, state: GuardState, event: Input) -> Judged:
        """The guard's answer to an input: what the I/O side may do, and the events."""
        last = self._last
        if last is not None and last[0] is state and last[1] is event:
            return last[2]
        judged = self._judge(state, event)
        self._last = (state, event, judged)
        return judged

    def _judge(self, state: GuardState, event: Input) -> Judged:
        if isinstance(event, Tick):
            return self._tick(state, event)
        state = self._observe(state, event)
        verdicts: list[Verdict] = []
        events: list[Envelope] = []
        for call in self.calls(state, event):
            judged = self.admit(state, call, event.occurred_at)
            state = judged.state
            verdicts += judged.verdicts
            events += judged.events
            for verdict in judged.verdicts:
                if verdict.not_before_us is not None:
                    events.append(self._order(verdict.call, verdict.not_before_us, event))
        return Judged(state, tuple(verdicts), tuple(events))

    def _order(self, call: Call, not_before_us: int, event: Envelope) -> Envelope:
        """The order to carry out an allowed call: what the actuator service acts on."""
        ordered = ActuationOrdered(
            call=call.kind,
            call_index=call.index,
            not_before_at=not_before_us,
            pool_id=call.pool_id,
            instance_id=call.instance_id,
            workload_id=call.workload_id,
            orderly=call.orderly,
        )
        return self._stamp(ordered, call, event.occurred_at, "ordered")

    def _observe(self, state: GuardState, event: Envelope) -> GuardState:
        p = event.payload
        at = event.occurred_at
        state = replace(state, now_us=max(state.now_us, at), region=event.region)
        if isinstance(p, PoolRegistered):
            return replace(state, sizes=put(state.sizes, p.pool_id, p.instance_vcpu))
        if isinstance(p, InstanceLaunched):
            owner = p.tags.get(OWNER_TAG)
            state = replace(
                state, owners=put(state.owners, p.instance_id, owner), launch_failures=0
            )
            claim = p.tags.get(CLAIM_TAG)
            if claim is not None and owner == self.settings.orchestrator_id:
                state = replace(state, claims=put(state.claims, p.instance_id, claim))
            if state.outage is not None:
                state = replace(state, outage=None, recovery_since_us=at)
            return state
        if isinstance(p, CapacityReleased):
            horizon_us = at - RELEASED_MEMORY_US
            released = {c: t for c, t in state.released.items() if t > horizon_us}
            released[p.claim_id] = at
            return replace(state, released=released)
        if isinstance(p, InstanceLost | InstanceDeleted):
            return replace(
                state,
                owners=drop(state.owners, p.instance_id),
                claims=drop(state.claims, p.instance_id),
            )
        if isinstance(p, LaunchFailed):
            failures = state.launch_failures + 1
            state = replace(state, launch_failures=failures)
            if state.outage is None and failures >= self.settings.outage_failures:
                state = replace(state, outage=Breaker(at))
            return state
        return state

    def _tick(self, state: GuardState, tick: Tick) -> Judged:
        due = self.due_at(state)
        if due is None or due > tick.at_us or state.termination is None:
            return Judged(state, (), ())
        s = self.settings
        opened = state.termination
        reset = BreakerReset(
            breaker=TERMINATION,
            open_s=(tick.at_us - opened.since_us) // US,
            budget_ratio=s.recovery_ratio,
        )
        cause = opened.tripped_by or Cause(
            derived_event_id(f"{state.region}/{opened.since_us}", "breaker", TERMINATION),
            state.region,
            None,
            opened.since_us,
        )
        event = decision(
            reset, cause=cause, at_us=tick.at_us, decider=NAME, discriminator=f"reset/{due}"
        )
        state = replace(state, termination=None, recovery_since_us=tick.at_us)
        return Judged(state, (), (event,))

    # -- the decider shape -------------------------------------------------------------------

    def evolve(self, state: GuardState, event: Input) -> GuardState:
        if isinstance(event, Envelope) and event.producer == f"deciders/{NAME}":
            # The guard's own events are already in the state `judge` returned; a tripped
            # breaker only learns which event opened it, for the reset to name as its cause.
            p = event.payload
            if isinstance(p, BreakerTripped):
                if p.breaker == TERMINATION and state.termination is not None:
                    tripped = replace(state.termination, tripped_by=Cause.of(event))
                    return replace(state, termination=tripped)
                if p.breaker == PROVIDER and state.outage is not None:
                    return replace(state, outage=replace(state.outage, tripped_by=Cause.of(event)))
            return state
        return self.judge(state, event).state

    def decide(self, state: GuardState, event: Input, view: RegionView) -> list[Envelope]:
        judged = self.judge(state, event)
        events = list(judged.events)
        if isinstance(event, Envelope):
            p = event.payload
            if isinstance(p, InstanceLaunched) and state.outage is not None:
                events.append(self._recovered(state.outage, event))
            if isinstance(p, LaunchFailed) and state.outage is None and judged.state.outage:
                events.append(self._outage(judged.state, event))
        return events

    def _outage(self, state: GuardState, event: Envelope) -> Envelope:
        s = self.settings
        tripped = BreakerTripped(
            breaker=PROVIDER,
            terminations_observed=0,
            window_s=0,
            threshold=s.outage_failures,
            reason=(
                f"{state.launch_failures} launches failed in a row: the provider is out; the "
                f"budget drops to {s.recovery_ratio:.0%} until a launch succeeds"
            ),
        )
        return decision(
            tripped,
            cause=Cause.of(event),
            at_us=event.occurred_at,
            decider=NAME,
            discriminator=f"tripped/{PROVIDER}",
        )

    def _recovered(self, outage: Breaker, event: Envelope) -> Envelope:
        reset = BreakerReset(
            breaker=PROVIDER,
            open_s=(event.occurred_at - outage.since_us) // US,
            budget_ratio=self.settings.recovery_ratio,
        )
        return decision(
            reset,
            cause=outage.tripped_by or Cause.of(event),
            at_us=event.occurred_at,
            decider=NAME,
            discriminator=f"reset/{PROVIDER}/{outage.since_us}",
        )
