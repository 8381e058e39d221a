"""The fallback arbiter and floor keeper (ADR-23, ADR-24): guaranteed capacity, within authority.

**Key: workload.** Inputs: `contract_published` (floor, daily cap, approver, priority,
deadline), `capacity_claim_opened` (a run's expected duration, for the deadline rule), the
planner's `placement_decided` and the replacement's `replacement_requested` (what they could
not place, and floor replacements), `launch_failed`, the workload's lifecycle and notices, and
the approver's `fallback_reviewed`. Reads the region view. Outputs: `fallback_decided`,
`fallback_returned`, `fallback_withheld`, `contract_refused`.

* **Two signatures** (ADR-30). With the keys the deciders trust (`DeciderSettings.trust`), a
  published version that raises the floor or the cap, or changes the approver, without the
  owner's and a higher authority's signatures does not take effect in any workload decider
  (`WorkloadFacts.evolve`); the arbiter, which spends on that authority, says so:
  `contract_refused`, naming what the version changes and whose signature is missing.

* **Floor keeper** (ADR-22, ADR-23). When a floor instance is noticed or lost, a check is due
  `floor_check_s` later (5 min, inside the 15-minute rebuild target); if the floor is still
  short then (the committed replacement did not land), it is restored on guaranteed capacity in
  another hall, *without asking*: kind ``floor_restore``, whatever the cap.
* **Arbiter** (ADR-23). vCPU the planner or the replacement could not place (and launches that
  failed for good) fall back to guaranteed capacity. Its projected cost (the guaranteed rate
  until the end of the UTC day, at least the minimum dwell) is spent automatically while the
  day's fallback spend stays within the contract's cap: kind ``within_cap``. Beyond the cap the
  rest is an *escalation*: kind ``escalated`` with ``awaiting_approval``, naming the approver
  the contract names and spending nothing; an approving `fallback_reviewed` from that approver
  then launches what it approves. **No spending without a named authority** (ADR-23, ADR-30):
  a contract that names no approver cannot escalate, so the rest is withheld
  (`fallback_withheld`: the work waits on reclaimable capacity, unspent, and the owner is
  told); an approval from anyone but the named approver is refused the same way, with its
  reason.
* **Staggering** (ADR-24). During a wave (a cause with a correlation id) a workload of
  priority p falls back ``p x stagger_step_s`` after the wave's event that left it short,
  priority 0 at once, so the most important work gets guaranteed room first.
* **Return** (ADR-24). A fallback returns to reclaimable capacity only once it has dwelt
  `min_dwell_s`, the workload has gone `return_healthy_s` without a notice or loss, and the
  region has at least `min_pools` eligible reclaimable pools; else it looks again
  `return_recheck_s` later. Floor restores and deadline moves do not return.
* **Deadline rule** (ADR-23, in the spirit of Uniform Progress, "Can't Be Late", NSDI'24). For
  a run with a deadline and an expected duration: remaining work = duration - elapsed + progress
  lost to interruptions; slack = time to the deadline - remaining work; expected loss =
  remaining hours x the interruptions per hour its reclaimable instances' pools suggest x the
  progress one interruption costs (replacement time, plus half a checkpoint interval without a
  final checkpoint). Once slack no longer covers the expected loss, the run's reclaimable vCPU
  move to guaranteed capacity, and the decision says so with both figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import (
    Allocation,
    CapacityClaimOpened,
    ContractPublished,
    ContractRefused,
    Envelope,
    FallbackDecided,
    FallbackKind,
    FallbackReturned,
    FallbackReviewed,
    FallbackWithheld,
    InstanceLost,
    LaunchFailed,
    NoticeReceived,
    PlacementDecided,
    ReplacementRequested,
)
from streams.deciders import approval, eligibility
from streams.deciders.maps import replace
from streams.deciders.observe import US_PER_H
from streams.deciders.region import RegionView
from streams.deciders.settings import DeciderSettings
from streams.deciders.types import US, Cause, Input, Tick, decision
from streams.deciders.waterfill import FloorSpread, spread, spread_floor
from streams.deciders.workload import LIFECYCLE_INPUTS, Terms, WorkloadFacts, workload_of

NAME = "fallback"
DAY_US = 24 * 3600 * US
INPUTS = frozenset(
    {
        "contract_published",
        "capacity_claim_opened",
        "capacity_released",
        "placement_decided",
        "replacement_requested",
        "launch_failed",
        "notice_received",
        "fallback_reviewed",
        *LIFECYCLE_INPUTS,
    }
)


def _review_refusal(state: ArbiterState, review: FallbackReviewed) -> str | None:
    """Why `review` settles nothing: no escalation waits, or it is not the contract's approver's
    signed answer to it (`approval.refusal`)."""
    terms, pending = state.facts.terms, state.escalation
    if terms is None or pending is None:
        return "no escalation waits for an answer"
    return approval.refusal(review, terms.approver, terms.approver_key, pending.cause.event_id)


@dataclass(frozen=True, slots=True)
class Active:
    """A fallback holding guaranteed capacity."""

    cause: Cause  # the fallback_decided event
    vcpu: int
    at_us: int
    returnable: bool
    next_check_us: int = 0


@dataclass(frozen=True, slots=True)
class Escalation:
    """vCPU waiting for the approver."""

    cause: Cause  # the escalated fallback_decided event
    vcpu: int


@dataclass(frozen=True, slots=True)
class Run:
    """A run with a deadline: what the deadline rule tracks."""

    claim_id: str
    started_us: int
    duration_s: int
    lost_s: int = 0
    moved: bool = False


@dataclass(frozen=True, slots=True)
class FloorCheck:
    due_us: int
    cause: Cause
    lost_pool_id: str


@dataclass(frozen=True, slots=True)
class ArbiterState:
    facts: WorkloadFacts
    day: int = -1
    spent_eur_micros: int = 0
    shortfall_vcpu: int = 0
    shortfall_cause: Cause | None = None
    shortfall_due_us: int | None = None
    escalation: Escalation | None = None
    active: tuple[Active, ...] = ()
    floor_check: FloorCheck | None = None
    last_trouble_us: int = 0
    run: Run | None = None

    def spent_on(self, day: int) -> int:
        return self.spent_eur_micros if self.day == day else 0


@dataclass(frozen=True, slots=True)
class Grant:
    """One fallback decision in the making."""

    kind: FallbackKind
    trigger: str  # floor, shortfall, deadline or approval: separates decisions of one cause
    plan: FloorSpread
    cost_eur_micros: int
    awaiting_approval: bool = False
    vcpu: int = 0  # for an escalation: vCPU awaiting approval (nothing is planned)


@dataclass(frozen=True, slots=True)
class Deadline:
    slack_s: int
    expected_loss_s: int


@dataclass(frozen=True, slots=True)
class Ask:
    """What a fallback decision is for: how much, caused by what, when, and why in words."""

    vcpu: int
    cause: Cause
    at_us: int
    reason: str
    deadline: Deadline | None = None


class FallbackArbiter:
    """The fallback arbiter and floor keeper as a `Decider[ArbiterState]` (key: workload)."""

    name = NAME
    inputs = INPUTS

    def __init__(self, settings: DeciderSettings | None = None) -> None:
        self.settings = settings or DeciderSettings()
        self.s = self.settings.fallback

    def key(self, event: Envelope) -> str | None:
        return workload_of(event) if event.event_type in INPUTS else None

    def initial(self, key: str) -> ArbiterState:
        return ArbiterState(WorkloadFacts(key))

    def due_at(self, state: ArbiterState) -> int | None:
        dues = [self._return_due(state, a) for a in state.active if a.returnable]
        if state.shortfall_due_us is not None:
            dues.append(state.shortfall_due_us)
        if state.floor_check is not None:
            dues.append(state.floor_check.due_us)
        return min(dues) if dues else None

    def _return_due(self, state: ArbiterState, active: Active) -> int:
        """When a fallback may return: dwelt, healthy, and not looked at again too soon."""
        return max(
            active.at_us + self.s.min_dwell_s * US,
            state.last_trouble_us + self.s.return_healthy_s * US,
            active.next_check_us,
        )

    # -- evolve ------------------------------------------------------------------------------

    def evolve(self, state: ArbiterState, event: Input) -> ArbiterState:
        if isinstance(event, Tick):
            return self._after_tick(state, event)
        p = event.payload
        at = event.occurred_at
        if isinstance(p, FallbackDecided):
            return self._decided(state, event, p)
        if isinstance(p, FallbackReturned):
            kept = tuple(a for a in state.active if a.cause.event_id != p.fallback_event_id)
            return replace(state, active=kept)
        if isinstance(p, FallbackReviewed):
            # Only the named approver's signed answer settles the escalation (ADR-30); any
            # other review leaves it waiting for them.
            if _review_refusal(state, p) is None:
                return replace(state, escalation=None)
            return state
        if isinstance(p, FallbackWithheld):
            if p.refused_approver is not None:
                return state  # a refused approval changes nothing
            # The work waits on reclaimable capacity: no retry until something changes.
            shortfall = max(0, state.shortfall_vcpu - p.vcpu)
            return _settled(replace(state, shortfall_vcpu=shortfall))
        if isinstance(p, CapacityClaimOpened) and p.expected_duration_s:
            terms = state.facts.terms
            if terms is not None and terms.deadline_at is not None:
                run = Run(p.claim_id, at, p.expected_duration_s)
                state = replace(state, run=run)
        elif isinstance(p, PlacementDecided | ReplacementRequested):
            if isinstance(p, ReplacementRequested) and p.floor:
                state = self._arm_floor_check(state, event, p.replaces_pool_id)
            elif p.unplaced_vcpu > 0 and state.facts.terms is not None:
                state = self._short(state, event, p.unplaced_vcpu)
        elif isinstance(p, LaunchFailed):
            if not p.retryable and p.purchase_model == "reclaimable":
                state = self._short(state, event, p.vcpu)
        elif isinstance(p, NoticeReceived | InstanceLost):
            state = self._trouble(state, event, p)
        return replace(state, facts=state.facts.evolve(event, self.settings.trust))

    def _published(
        self, state: ArbiterState, event: Envelope, p: ContractPublished
    ) -> list[Envelope]:
        """`contract_refused` when `p` changes authority without both signatures (ADR-30)."""
        reason = state.facts.refusal(p, self.settings.trust)
        if reason is None:
            return []
        in_force = state.facts.terms
        refused = ContractRefused(
            workload_id=p.workload_id,
            contract_version=p.contract_version,
            contract_sha256=p.contract_sha256,
            owner=p.owner,
            in_force_version=in_force.contract_version if in_force is not None else None,
            signers=tuple(sorted(p.signatures or {})),
            reason=reason,
        )
        return [decision(refused, cause=Cause.of(event), at_us=event.occurred_at, decider=NAME)]

    def _trouble(
        self, state: ArbiterState, event: Envelope, p: NoticeReceived | InstanceLost
    ) -> ArbiterState:
        held = state.facts.instances.get(p.instance_id)
        state = replace(state, last_trouble_us=max(state.last_trouble_us, event.occurred_at))
        if held is not None and held.floor:
            state = self._arm_floor_check(state, event, held.pool_id)
        # a notice and the loss that follows it cost progress once
        noticed_before = isinstance(p, InstanceLost) and p.with_notice
        reclaimable = held is not None and held.purchase_model == "reclaimable"
        if state.run is not None and reclaimable and not noticed_before:
            terms = state.facts.terms
            lost_s = self._loss_cost_s(terms, with_notice=isinstance(p, NoticeReceived))
            state = replace(state, run=replace(state.run, lost_s=state.run.lost_s + lost_s))
        return state

    def _arm_floor_check(
        self, state: ArbiterState, event: Envelope, pool_id: str | None
    ) -> ArbiterState:
        if state.floor_check is not None:
            return state
        due = event.occurred_at + self.s.floor_check_s * US
        check = FloorCheck(due, Cause.of(event), pool_id or "")
        return replace(state, floor_check=check)

    def _short(self, state: ArbiterState, event: Envelope, vcpu: int) -> ArbiterState:
        cause = Cause.of(event)
        delay_us = self._stagger_us(state, cause)
        due = state.shortfall_due_us
        if due is None:
            due = event.occurred_at + (delay_us or self.s.return_recheck_s * US)
        return replace(
            state,
            shortfall_vcpu=state.shortfall_vcpu + vcpu,
            shortfall_cause=state.shortfall_cause or cause,
            shortfall_due_us=due,
        )

    def _stagger_us(self, state: ArbiterState, cause: Cause) -> int:
        """How long a shortfall caused by `cause` waits for its turn (0: decide at once)."""
        terms = state.facts.terms
        if cause.correlation_id is None or terms is None or terms.priority <= 0:
            return 0
        return terms.priority * self.s.stagger_step_s * US

    def _decided(self, state: ArbiterState, event: Envelope, p: FallbackDecided) -> ArbiterState:
        day = event.occurred_at // DAY_US
        spent = state.spent_on(day) + p.projected_eur_micros
        state = replace(state, day=day, spent_eur_micros=spent)
        if p.awaiting_approval:
            escalation = Escalation(Cause.of(event), p.vcpu)
            shortfall = max(0, state.shortfall_vcpu - p.vcpu)
            return _settled(replace(state, escalation=escalation, shortfall_vcpu=shortfall))
        returnable = p.kind != "floor_restore" and p.deadline_slack_s is None
        active = Active(Cause.of(event), p.vcpu, event.occurred_at, returnable)
        state = replace(state, active=(*state.active, active))
        if p.kind == "within_cap" and p.deadline_slack_s is None:
            state = replace(state, shortfall_vcpu=max(0, state.shortfall_vcpu - p.vcpu))
        if p.deadline_slack_s is not None and state.run is not None:
            state = replace(state, run=replace(state.run, moved=True))
        return _settled(state)

    def _after_tick(self, state: ArbiterState, tick: Tick) -> ArbiterState:
        at = tick.at_us
        if state.floor_check is not None and state.floor_check.due_us <= at:
            state = replace(state, floor_check=None)
        if state.shortfall_due_us is not None and state.shortfall_due_us <= at:
            if _lacking_vcpu(state) <= 0:  # placed since (a top-up), or the claims released
                state = replace(state, shortfall_vcpu=0)
            # a fallback decided now takes the shortfall down; what is left is tried again
            state = replace(state, shortfall_due_us=at + self.s.return_recheck_s * US)
        recheck = at + self.s.return_recheck_s * US
        active = tuple(
            replace(a, next_check_us=recheck)
            if a.returnable and self._return_due(state, a) <= at
            else a
            for a in state.active
            # a returnable fallback whose instances are all gone (deleted with its claim,
            # or never landed) has nothing left to return when its time comes
            if not (a.returnable and self._return_due(state, a) <= at and not _held_by(state, a))
        )
        return _settled(replace(state, active=active))

    # -- decide ------------------------------------------------------------------------------

    def decide(self, state: ArbiterState, event: Input, view: RegionView) -> list[Envelope]:
        if isinstance(event, Envelope) and isinstance(event.payload, ContractPublished):
            return self._published(state, event, event.payload)
        terms = state.facts.terms
        if terms is None:
            return []
        if isinstance(event, Tick):
            return self._on_tick(state, terms, event, view)
        p = event.payload
        at = event.occurred_at
        out: list[Envelope] = []
        if isinstance(p, FallbackReviewed):
            return self._reviewed(state, terms, event, p, view)
        short = 0
        if isinstance(p, PlacementDecided | ReplacementRequested) and not (
            isinstance(p, ReplacementRequested) and p.floor
        ):
            short = p.unplaced_vcpu
        elif isinstance(p, LaunchFailed) and not p.retryable and p.purchase_model == "reclaimable":
            short = p.vcpu
        if short > 0 and not self._stagger_us(state, Cause.of(event)):
            vcpu = state.shortfall_vcpu + short
            reason = f"{vcpu} vCPU could not be placed on reclaimable capacity"
            out += self._fall_back(state, terms, Ask(vcpu, Cause.of(event), at, reason), view)
        if isinstance(p, PlacementDecided | NoticeReceived | InstanceLost):
            out += self._deadline_rule(self._spent(state, out), terms, event, view)
        return out

    def _spent(self, state: ArbiterState, made: list[Envelope]) -> ArbiterState:
        """`state` with the spend of decisions just made, so the next rule sees the cap left."""
        for envelope in made:
            if isinstance(envelope.payload, FallbackDecided):
                state = self._decided(state, envelope, envelope.payload)
        return state

    def _on_tick(
        self, state: ArbiterState, terms: Terms, tick: Tick, view: RegionView
    ) -> list[Envelope]:
        at = tick.at_us
        out: list[Envelope] = []
        check = state.floor_check
        if check is not None and check.due_us <= at:
            deficit = terms.floor_vcpu - state.facts.vcpu(floor=True)
            if deficit > 0:
                out += self._restore_floor(state, terms, deficit, check, view)
        state = self._spent(state, out)
        if state.shortfall_due_us is not None and state.shortfall_due_us <= at:
            cause = state.shortfall_cause
            # no more than the open claims still lack: the planner's top-ups may have placed
            # some of it on reclaimable capacity while the shortfall waited for its turn
            vcpu = min(state.shortfall_vcpu, _lacking_vcpu(state))
            if cause is not None and vcpu > 0:
                reason = (
                    f"{vcpu} vCPU could not be placed on reclaimable capacity; "
                    f"priority {terms.priority} fell back in its turn"
                )
                ask = Ask(vcpu, cause, at, reason)
                out += self._fall_back(state, terms, ask, view)
        for active in state.active:
            due = self._return_due(state, active)
            if not active.returnable or due > at:
                continue
            held = _held_by(state, active)
            if held and self._ready(state, view, sum(held.values())):
                out.append(self._return(state, active, at, held))
        return out

    def _ready(self, state: ArbiterState, view: RegionView, vcpu: int) -> bool:
        """Whether reclaimable capacity can take `vcpu` back now: the planner's spread of them
        (the workload's shapes, its reclaimable holdings, the caps) places all of them, over
        at least `min_pools` eligible pools. Else the fallback stays (no return that the
        planner would only hand back to the arbiter: no oscillation)."""
        s = self.settings
        eligible = eligibility.reclaimable(
            view,
            state.facts.needs(),
            unrecorded_per_h=s.exclusion.unrecorded_expected_per_h,
        )
        if len(eligible.candidates) < s.placement.min_pools:
            return False
        plan = spread(
            vcpu,
            state.facts.reclaimable_by_pool(),
            eligibility.group_of(view),
            eligible.candidates,
            settings=s.placement,
        )
        return plan.unplaced_vcpu == 0 and plan.caps_held

    def _return(
        self, state: ArbiterState, active: Active, at: int, held: dict[str, int]
    ) -> Envelope:
        instance_ids = tuple(sorted(held))
        payload = FallbackReturned(
            workload_id=state.facts.workload_id,
            vcpu=sum(held.values()),
            dwell_s=(at - active.at_us) // US,
            fallback_event_id=active.cause.event_id,
            instance_ids=instance_ids,
            healthy_s=(at - state.last_trouble_us) // US,
        )
        return decision(
            payload, cause=active.cause, at_us=at, decider=NAME, discriminator=f"return/{at}"
        )

    def _restore_floor(
        self, state: ArbiterState, terms: Terms, deficit: int, check: FloorCheck, view: RegionView
    ) -> list[Envelope]:
        lost = view.pools.get(check.lost_pool_id)
        lost_hall = lost.hall if lost else ""
        plan = self._plan(state, deficit, view, avoid_halls=frozenset({lost_hall}))
        at = check.due_us
        cost = self._cost(plan, at, view)
        held = state.facts.vcpu(floor=True)
        reason = (
            f"floor broken: {held} of {terms.floor_vcpu} vCPU held {self.s.floor_check_s} s "
            f"after the loss; restored on guaranteed capacity without asking"
        )
        grant = Grant("floor_restore", "floor", plan, cost)
        return [self._stamp(state, terms, grant, Ask(deficit, check.cause, at, reason))]

    def _fall_back(
        self, state: ArbiterState, terms: Terms, ask: Ask, view: RegionView
    ) -> list[Envelope]:
        """Guaranteed capacity for `ask`: within the cap what fits, escalated the rest."""
        trigger = "shortfall" if ask.deadline is None else "deadline"
        budget = max(0, terms.spend_cap_eur_micros - state.spent_on(ask.at_us // DAY_US))
        plan, cost = self._fit(state, ask.vcpu, budget, ask.at_us, view)
        out: list[Envelope] = []
        placed = sum(plan.allocations.values())
        if placed:
            grant = Grant("within_cap", trigger, plan, cost)
            out.append(self._stamp(state, terms, grant, ask))
        rest = ask.vcpu - placed
        if rest > 0:
            beyond = self._cost(self._plan(state, rest, view), ask.at_us, view)
            cap = _eur(terms.spend_cap_eur_micros)
            more = (
                f"{rest} vCPU more would cost {_eur(beyond)} beyond the daily cap of {cap}"
                if beyond  # else no guaranteed pool of the work's families has room to price
                else f"no guaranteed capacity it can run on has room for {rest} vCPU more"
            )
            if not terms.approver:  # nobody may approve: the work waits, unspent
                reason = (
                    f"{ask.reason}; {more}, and the contract names no approver: the work waits "
                    f"on reclaimable capacity, nothing spent; {terms.owner or 'its owner'} is told"
                )
                spent = state.spent_on(ask.at_us // DAY_US) + cost
                withheld = FallbackWithheld(
                    workload_id=state.facts.workload_id,
                    vcpu=rest,
                    spend_eur_micros=spent,
                    cap_eur_micros=terms.spend_cap_eur_micros,
                    would_cost_eur_micros=beyond,
                    owner=terms.owner,
                    approver=None,
                    reason=reason,
                )
                out.append(
                    decision(
                        withheld,
                        cause=ask.cause,
                        at_us=ask.at_us,
                        decider=NAME,
                        discriminator=f"{trigger}/withheld/{ask.at_us}",
                    )
                )
                return out
            note = f"{ask.reason}; {more}: paged {terms.approver}, nothing spent"
            nothing = FloorSpread({}, rest, frozenset())
            escalation = Grant("escalated", trigger, nothing, 0, awaiting_approval=True, vcpu=rest)
            paged = replace(ask, reason=note)
            out.append(self._stamp(state, terms, escalation, paged, spent_before_eur_micros=cost))
        return out

    def _reviewed(
        self,
        state: ArbiterState,
        terms: Terms,
        event: Envelope,
        p: FallbackReviewed,
        view: RegionView,
    ) -> list[Envelope]:
        pending = state.escalation
        if pending is None or p.outcome != "approved":
            return []
        at = event.occurred_at
        why_not = _review_refusal(state, p)
        if why_not is not None:
            reason = (
                f"an approval of {_eur(p.approved_spend_eur_micros)} by "
                f"{p.approver or 'someone unnamed'} was refused: {why_not} (ADR-30); "
                "nothing spent"
            )
            refused = FallbackWithheld(
                workload_id=state.facts.workload_id,
                vcpu=p.vcpu,
                spend_eur_micros=state.spent_on(at // DAY_US),
                cap_eur_micros=terms.spend_cap_eur_micros,
                would_cost_eur_micros=p.approved_spend_eur_micros,
                owner=terms.owner,
                approver=terms.approver or None,
                refused_approver=p.approver,
                reason=reason,
            )
            return [
                decision(
                    refused, cause=Cause.of(event), at_us=at, decider=NAME, discriminator="refused"
                )
            ]
        # The approval covers what was escalated, and no more than the open claims still lack
        # now (reclaimable room may have come while the approver was asked).
        vcpu = min(p.vcpu, pending.vcpu, _lacking_vcpu(state))
        if vcpu <= 0:
            return []
        plan, cost = self._fit(state, vcpu, p.approved_spend_eur_micros, at, view)
        if not plan.allocations:
            return []
        reason = f"approved by {p.approver} up to {_eur(p.approved_spend_eur_micros)}"
        grant = Grant("escalated", "approval", plan, cost)
        return [self._stamp(state, terms, grant, Ask(p.vcpu, Cause.of(event), at, reason))]

    def _deadline_rule(
        self, state: ArbiterState, terms: Terms, event: Envelope, view: RegionView
    ) -> list[Envelope]:
        run, deadline_at = state.run, terms.deadline_at
        if run is None or run.moved or deadline_at is None:
            return []
        at = event.occurred_at
        p = event.payload
        rates: list[tuple[str, int]] = [
            (h.pool_id, h.vcpu)
            for h in state.facts.instances.values()
            if h.purchase_model == "reclaimable"
        ]
        if isinstance(p, PlacementDecided) and p.claim_id == run.claim_id:
            rates += [
                (a.pool_id, a.vcpu) for a in p.allocations if a.purchase_model == "reclaimable"
            ]
        vcpu = sum(v for _, v in rates)
        if not vcpu:
            return []
        lost_s = run.lost_s
        if isinstance(p, NoticeReceived | InstanceLost):
            held = state.facts.instances.get(p.instance_id)
            noticed_before = isinstance(p, InstanceLost) and p.with_notice
            if held is not None and held.purchase_model == "reclaimable" and not noticed_before:
                lost_s += self._loss_cost_s(terms, with_notice=isinstance(p, NoticeReceived))
        remaining_s = max(0, run.duration_s - (at - run.started_us) // US + lost_s)
        if not remaining_s:
            return []
        slack_s = (deadline_at - at) // US - remaining_s
        per_h = 0.0
        unrecorded = self.settings.exclusion.unrecorded_expected_per_h
        for pool_id, v in rates:
            facts = view.pools.get(pool_id)
            instances = max(1, v // facts.instance_vcpu) if facts else 1
            observed = view.ranking[pool_id].observed_per_h if pool_id in view.ranking else 0.0
            per_h += instances * max(view.expected_per_h(pool_id, unrecorded), observed)
        loss_s = int(remaining_s / 3600 * per_h * self._loss_cost_s(terms, with_notice=True))
        if slack_s > self.s.deadline_safety * loss_s:
            return []
        reason = (
            f"deadline: {slack_s} s of slack no longer covers the {loss_s} s of progress the "
            f"expected interruptions until the deadline would cost; moving {vcpu} vCPU to "
            f"guaranteed capacity (Uniform Progress)"
        )
        ask = Ask(vcpu, Cause.of(event), at, reason, Deadline(slack_s, loss_s))
        return self._fall_back(state, terms, ask, view)

    def _loss_cost_s(self, terms: Terms | None, *, with_notice: bool) -> int:
        """Progress one interruption costs: the replacement's arrival, plus redone work."""
        cost = self.s.replacement_s
        if terms is None or not (with_notice and terms.checkpoint_on_notice):
            interval = terms.checkpoint_interval_s if terms else None
            cost += (interval or 0) // 2
        return cost

    # -- plans and money ---------------------------------------------------------------------

    def _plan(
        self,
        state: ArbiterState,
        vcpu: int,
        view: RegionView,
        avoid_halls: frozenset[str] = frozenset(),
    ) -> FloorSpread:
        by_hall: dict[str, int] = {}
        for h in state.facts.instances.values():
            if h.purchase_model != "reclaimable" and h.pool_id in view.pools:
                hall = view.pools[h.pool_id].hall
                by_hall[hall] = by_hall.get(hall, 0) + h.vcpu
        families = state.facts.needs().families
        guaranteed = eligibility.with_room(view, "guaranteed", families=families)
        return spread_floor(vcpu, by_hall, (), guaranteed, avoid_halls=avoid_halls)

    def _fit(
        self, state: ArbiterState, vcpu: int, budget: int, at: int, view: RegionView
    ) -> tuple[FloorSpread, int]:
        """The largest plan for at most `vcpu` whose projected cost fits `budget`."""
        families = state.facts.needs().families
        sizes = [
            c.instance_vcpu for c in eligibility.with_room(view, "guaranteed", families=families)
        ]
        step_vcpu = min(sizes) if sizes else 1
        want = vcpu
        while want > 0:
            plan = self._plan(state, want, view)
            cost = self._cost(plan, at, view)
            if cost <= budget:  # may overshoot `vcpu` by less than one instance
                return plan, cost
            want -= step_vcpu
        return FloorSpread({}, vcpu, frozenset()), 0

    def _cost(self, plan: FloorSpread, at: int, view: RegionView) -> int:
        """Projected spend: the guaranteed rate until the end of the UTC day, >= the dwell."""
        horizon_us = max(self.s.min_dwell_s * US, DAY_US - at % DAY_US)
        return sum(
            vcpu * view.price(pool_id) * horizon_us // US_PER_H
            for (pool_id, _), vcpu in sorted(plan.allocations.items())
        )

    def _stamp(
        self,
        state: ArbiterState,
        terms: Terms,
        grant: Grant,
        ask: Ask,
        *,
        spent_before_eur_micros: int = 0,
    ) -> Envelope:
        at = ask.at_us
        spent = state.spent_on(at // DAY_US) + spent_before_eur_micros + grant.cost_eur_micros
        allocations = tuple(
            Allocation(pool_id, vcpu, model)
            for (pool_id, model), vcpu in sorted(grant.plan.allocations.items())
        )
        vcpu = grant.vcpu if grant.awaiting_approval else sum(a.vcpu for a in allocations)
        deadline = ask.deadline
        payload = FallbackDecided(
            workload_id=state.facts.workload_id,
            kind=grant.kind,
            vcpu=vcpu,
            spend_eur_micros=spent,
            cap_eur_micros=terms.spend_cap_eur_micros,
            approver=terms.approver,
            priority=terms.priority,
            reason=ask.reason,
            allocations=allocations,
            awaiting_approval=grant.awaiting_approval,
            projected_eur_micros=grant.cost_eur_micros,
            deadline_slack_s=deadline.slack_s if deadline else None,
            expected_loss_s=deadline.expected_loss_s if deadline else None,
        )
        part = "awaiting" if grant.awaiting_approval else "granted"
        return decision(
            payload,
            cause=ask.cause,
            at_us=at,
            decider=NAME,
            discriminator=f"{grant.trigger}/{grant.kind}/{part}/{at}",
        )


def _eur(micros: int) -> str:
    """Euros for people, to the cent (decisions' reasons never show raw micro-euros)."""
    cents = (abs(micros) + 5_000) // 10_000
    return f"{'-' if micros < 0 and cents else ''}€{cents // 100:,}.{cents % 100:02d}"


def _held_by(state: ArbiterState, active: Active) -> dict[str, int]:
    """The live instances a fallback launched (instance id -> vCPU)."""
    return {
        i: h.vcpu
        for i, h in state.facts.instances.items()
        if h.launched_by == active.cause.event_id
    }


def _lacking_vcpu(state: ArbiterState) -> int:
    """What the workload's open claims ask for and its instances do not cover."""
    return state.facts.asked_vcpu - state.facts.vcpu()


def _settled(state: ArbiterState) -> ArbiterState:
    """No shortfall, no retry pending."""
    if state.shortfall_vcpu <= 0:
        return replace(state, shortfall_vcpu=0, shortfall_cause=None, shortfall_due_us=None)
    return state
