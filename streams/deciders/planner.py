"""The planner (ADR-08, ADR-22): floor first on committed capacity, the rest spread by depth.

**Key: workload.** Inputs: `contract_published` (floor, tolerated rate), `capacity_claim_opened`
(what to place), `fallback_returned` (work coming back to reclaimable capacity, placed like a
claim: as much of it as the open claims will lack once the fallback's instances are gone), the
claims' releases, the other deciders' launches (`replacement_requested`, `fallback_decided`:
on the way, so not lacking), the workload's lifecycle (`instance_launched`, `instance_lost`,
`instance_deleted`), and what stops a planned launch (`launch_failed`, a refused launch in
`actuation_refused`). Reads the region view (pools, room, exclusions, ranking, prices).
Output: `placement_decided`.

For each claim:

1. **Floor** (ADR-22): what the contract's floor lacks (less what is held or planned) is placed
   first, on committed capacity while any committed pool has room, then on guaranteed, each
   instance in the hall holding the least of the floor, so it spreads over >= 3 halls.
2. **The rest** on reclaimable pools by depth-first water-filling over >= 8 pools, no pool
   above 15% and no correlation group above 30% of the workload's reclaimable capacity, never
   on an excluded pool (`waterfill.spread`). With fewer than 8 eligible pools the decision says
   so and why (``caps_held = false``, ``caps_reason``); what room and caps leave unplaced is
   ``unplaced_vcpu``, for the fallback arbiter.
3. **Premium** (ADR-08): the plan's hourly price against a price-first plan of the same vCPU
   (the cheapest eligible pools first, no caps), so preferring depth is paid for in the open.

What the planner decided and has not yet seen launched is *pending* and counts as held, so two
claims in quick succession do not both fill the same room.

**Topping up.** What the workload's open claims ask for and it neither holds nor has on the way
(the pending launches of every decider's decisions: placements, replacements, fallbacks) is
placed again every `retry_s` (5 minutes) while it lacks any: vCPU no pool had room for, a
replacement or fallback withheld, a launch that failed. A top-up that places nothing decides
nothing; its instances serve the claim opened last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from schemas.events import (
    ActuationRefused,
    Allocation,
    CapacityClaimOpened,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    InstanceLaunched,
    LaunchFailed,
    PlacementDecided,
    ReplacementRequested,
)
from streams.deciders import eligibility
from streams.deciders.eligibility import Needs
from streams.deciders.maps import add, replace
from streams.deciders.region import RegionView
from streams.deciders.settings import DeciderSettings
from streams.deciders.types import US, Cause, Input, Tick, decision
from streams.deciders.waterfill import Candidate, spread, spread_floor
from streams.deciders.workload import (
    DEMAND_INPUTS,
    LIFECYCLE_INPUTS,
    WorkloadFacts,
    workload_of,
)

NAME = "planner"
INPUTS = frozenset(
    {
        "contract_published",
        "fallback_returned",
        "replacement_requested",
        "fallback_decided",
        "launch_failed",
        "actuation_refused",
        *DEMAND_INPUTS,
        *LIFECYCLE_INPUTS,
    }
)


@dataclass(frozen=True, slots=True)
class PlannerState:
    facts: WorkloadFacts
    pending: Mapping[str, int] = field(default_factory=dict)  # pool -> vCPU decided, unlaunched
    retry_at: int | None = None  # the next top-up, while the claims lack something
    armed_by: Cause | None = None  # the event after which they began to lack it

    @property
    def lacking_vcpu(self) -> int:
        """What the open claims ask for and the workload neither holds nor has on the way."""
        return self.facts.asked_vcpu - self.facts.vcpu() - sum(self.pending.values())


@dataclass(frozen=True, slots=True)
class Request:
    """What to place: vCPU, how much of it may be floor, and what the work can run on."""

    vcpu: int
    needs: Needs
    claim_id: str | None
    with_floor: bool


class Planner:
    """The planner as a `Decider[PlannerState]` (key: workload id)."""

    name = NAME
    inputs = INPUTS

    def __init__(self, settings: DeciderSettings | None = None) -> None:
        self.settings = settings or DeciderSettings()

    def key(self, event: Envelope) -> str | None:
        return workload_of(event) if event.event_type in INPUTS else None

    def initial(self, key: str) -> PlannerState:
        return PlannerState(WorkloadFacts(key))

    def due_at(self, state: PlannerState) -> int | None:
        return state.retry_at

    def evolve(self, state: PlannerState, event: Input) -> PlannerState:
        if isinstance(event, Tick):
            if state.retry_at is not None and state.retry_at <= event.at_us:
                state = replace(state, retry_at=None)  # looked at now; re-armed below if need be
            return self._armed(state, event.at_us, state.armed_by)
        return self._armed(self._fold(state, event), event.occurred_at, Cause.of(event))

    def _fold(self, state: PlannerState, event: Envelope) -> PlannerState:
        p = event.payload
        if isinstance(p, PlacementDecided | ReplacementRequested | FallbackDecided):
            pending = state.pending
            for allocation in p.allocations:
                pending = add(pending, allocation.pool_id, allocation.vcpu)
            return replace(state, pending=pending)
        if isinstance(p, InstanceLaunched):
            state = replace(state, pending=_settle(state.pending, p.pool_id, p.vcpu))
        elif isinstance(p, LaunchFailed):
            return replace(state, pending=_settle(state.pending, p.pool_id, p.vcpu))
        elif isinstance(p, ActuationRefused) and p.call == "launch" and p.pool_id:
            return replace(state, pending=_settle(state.pending, p.pool_id, None))
        return replace(state, facts=state.facts.evolve(event, self.settings.trust))

    def _armed(self, state: PlannerState, at_us: int, cause: Cause | None) -> PlannerState:
        """The top-up timer: due `retry_s` after the claims began to lack something."""
        if state.lacking_vcpu <= 0:
            return replace(state, retry_at=None, armed_by=None) if state.retry_at else state
        if state.retry_at is not None:
            return state
        retry = at_us + self.settings.placement.retry_s * US
        return replace(state, retry_at=retry, armed_by=state.armed_by or cause)

    def decide(self, state: PlannerState, event: Input, view: RegionView) -> list[Envelope]:
        if isinstance(event, Tick):
            return self._retry(state, event, view)
        p = event.payload
        terms = state.facts.terms
        tolerated = terms.tolerated_per_h if terms else 0.0
        if isinstance(p, CapacityClaimOpened):
            needs = Needs(frozenset(p.sku_families), frozenset(p.sizes_vcpu), tolerated)
            request = Request(p.requested_vcpu, needs, p.claim_id, with_floor=True)
        elif isinstance(p, FallbackReturned):
            vcpu = min(p.vcpu, self._returned_need(state, p))
            if vcpu <= 0:
                return []  # the claims no longer ask for what the fallback ran: nothing back
            request = Request(vcpu, state.facts.needs(), None, with_floor=False)
        else:
            return []
        return self.plan(state, request, view, event)

    def _returned_need(self, state: PlannerState, p: FallbackReturned) -> int:
        """What the open claims will lack once the returned fallback's instances are deleted:
        only that comes back to reclaimable capacity (a claim released while the fallback ran
        asks for nothing; re-placing all of it ran capacity nobody asked for)."""
        instances = state.facts.instances
        returned = sum(instances[i].vcpu for i in set(p.instance_ids) if i in instances)
        return state.lacking_vcpu + returned

    def _retry(self, state: PlannerState, tick: Tick, view: RegionView) -> list[Envelope]:
        """Top up what the open claims still lack, where room has come (nothing if none)."""
        due, cause, facts = state.retry_at, state.armed_by, state.facts
        if due is None or due > tick.at_us or cause is None or not facts.claims:
            return []
        need = state.lacking_vcpu
        if need <= 0:
            return []
        claim_id = list(facts.claims)[-1]  # the claim opened last
        request = Request(need, facts.needs(), claim_id, with_floor=False)
        placed = self.plan(state, request, view, cause, at_us=tick.at_us)
        decided = [d.payload for d in placed if isinstance(d.payload, PlacementDecided)]
        if not any(p.allocations for p in decided):
            return []  # still no room: the claims go on waiting, nothing to say
        return placed

    def plan(
        self,
        state: PlannerState,
        request: Request,
        view: RegionView,
        event: Envelope | Cause,
        *,
        at_us: int | None = None,
    ) -> list[Envelope]:
        """The placement of `request` for the workload, stamped as caused by `event` (a
        retry: by the decision that left the claim waiting, at the retry's time); and, when
        the reclaimable spread leaves some unplaced, a second placement of it on committed
        room the floors leave (`spare`), before the fallback arbiter sees what is left."""
        facts, settings = state.facts, self.settings
        pools = view.pools
        allocations = self._floor(state, request, view)
        floor_vcpu = sum(a.vcpu for a in allocations)
        floor_unplaced = max(0, self._floor_need(state, request, view) - floor_vcpu)
        # Floor that found no committed or guaranteed room of the work's families is placed
        # with the rest (the work runs; the decision says the floor is not held).
        rest = max(0, request.vcpu - floor_vcpu)
        eligible = eligibility.reclaimable(
            view, request.needs, unrecorded_per_h=settings.exclusion.unrecorded_expected_per_h
        )
        held = facts.reclaimable_by_pool()
        for pool_id, vcpu in state.pending.items():
            if pool_id in pools and pools[pool_id].purchase_model == "reclaimable":
                held[pool_id] = held.get(pool_id, 0) + vcpu
        group_of = eligibility.group_of(view)
        plan = spread(rest, held, group_of, eligible.candidates, settings=settings.placement)
        allocations += [
            Allocation(pool_id, vcpu, "reclaimable")
            for pool_id, vcpu in sorted(plan.allocations.items())
        ]
        reason = plan.reason
        if plan.eligible < settings.placement.min_pools:
            reason = f"{reason}; {eligible.explain()}"
        if floor_unplaced:
            note = (
                f"floor: {floor_unplaced} vCPU found no committed or guaranteed room of the "
                "work's families and go with the rest on reclaimable capacity"
            )
            reason = f"{note}; {reason}" if reason else note
        if facts.terms is None:
            reason = "no contract published for the workload yet; floor unknown" + (
                f"; {reason}" if reason else ""
            )
        cost = sum(a.vcpu * view.price(a.pool_id) for a in allocations)
        placed_reclaimable = sum(plan.allocations.values())
        price_first = sum(
            a.vcpu * view.price(a.pool_id) for a in allocations if a.purchase_model != "reclaimable"
        ) + _cheapest(view, eligible.candidates, placed_reclaimable)
        payload = PlacementDecided(
            workload_id=facts.workload_id,
            requested_vcpu=request.vcpu,
            floor_vcpu=floor_vcpu,
            allocations=tuple(allocations),
            cost_per_h_eur_micros=cost,
            price_first_cost_per_h_eur_micros=price_first,
            premium_per_h_eur_micros=cost - price_first,
            excluded_pool_ids=tuple(sorted(view.excluded)),
            claim_id=request.claim_id,
            ranking_id=view.ranking_id,
            caps_held=plan.caps_held,
            caps_reason=reason,
            eligible_pool_count=plan.eligible,
            pool_cap_vcpu=plan.pool_cap_vcpu,
            group_cap_vcpu=plan.group_cap_vcpu,
            unplaced_vcpu=plan.unplaced_vcpu,
        )
        cause = event if isinstance(event, Cause) else Cause.of(event)
        at = event.occurred_at if isinstance(event, Envelope) else at_us
        assert at is not None
        discriminator = request.claim_id or facts.workload_id
        if isinstance(event, Cause):
            discriminator = f"{discriminator}/top-up/{at}"
        spare = self._spare(payload, request, view)
        if spare is not None:
            left = max(0, plan.unplaced_vcpu - sum(a.vcpu for a in spare.allocations))
            payload = replace(payload, unplaced_vcpu=left)
        out = [decision(payload, cause=cause, at_us=at, decider=NAME, discriminator=discriminator)]
        if spare is not None:
            spare_id = f"{discriminator}/spare"
            out.append(decision(spare, cause=cause, at_us=at, decider=NAME, discriminator=spare_id))
        return out

    def _floor_need(self, state: PlannerState, request: Request, view: RegionView) -> int:
        """What the contract's floor lacks (less what is held or on the way), up to the
        request (a request without floor: nothing)."""
        facts = state.facts
        if not request.with_floor or facts.terms is None:
            return 0
        floor_held = facts.vcpu(floor=True) + sum(
            v for pool_id, v in state.pending.items() if _floor_pool(view, pool_id)
        )
        return min(request.vcpu, max(0, facts.terms.floor_vcpu - floor_held))

    def _floor(self, state: PlannerState, request: Request, view: RegionView) -> list[Allocation]:
        """The floor first (ADR-22): committed capacity, then guaranteed, over the halls."""
        need = self._floor_need(state, request, view)
        if not need:
            return []
        pools = view.pools
        by_hall: dict[str, int] = {}
        for pool_id, vcpu in state.facts.floor_by_pool().items():
            hall = pools[pool_id].hall if pool_id in pools else pool_id
            by_hall[hall] = by_hall.get(hall, 0) + vcpu
        floor = spread_floor(
            need,
            by_hall,
            eligibility.with_room(view, "committed", families=request.needs.families),
            eligibility.with_room(view, "guaranteed", families=request.needs.families),
        )
        return [
            Allocation(pool_id, vcpu, model)
            for (pool_id, model), vcpu in sorted(floor.allocations.items())
        ]

    def _spare(
        self, main: PlacementDecided, request: Request, view: RegionView
    ) -> PlacementDecided | None:
        """What the spread left unplaced, on committed room the floors leave (a placement of
        its own, without floor: its instances are tagged spare, not floor), or None."""
        s = self.settings.placement
        if main.unplaced_vcpu <= 0:
            return None
        room = eligibility.with_room(
            view,
            "committed",
            families=request.needs.families,
            reserve_share=s.committed_reserve_share,
        )
        spare = spread_floor(main.unplaced_vcpu, {}, room, ())
        if not spare.allocations:
            return None
        allocations = tuple(
            Allocation(pool_id, vcpu, model)
            for (pool_id, model), vcpu in sorted(spare.allocations.items())
        )
        placed = sum(a.vcpu for a in allocations)
        cost = sum(a.vcpu * view.price(a.pool_id) for a in allocations)
        return PlacementDecided(
            workload_id=main.workload_id,
            requested_vcpu=main.unplaced_vcpu,
            floor_vcpu=0,
            allocations=allocations,
            cost_per_h_eur_micros=cost,
            price_first_cost_per_h_eur_micros=cost,
            premium_per_h_eur_micros=0,
            excluded_pool_ids=main.excluded_pool_ids,
            claim_id=main.claim_id,
            ranking_id=main.ranking_id,
            caps_held=True,
            caps_reason=(
                f"{placed} of the {main.unplaced_vcpu} vCPU the reclaimable spread could not "
                "place go on committed room the floors leave (paid for whether used or not: "
                "nothing spent)"
            ),
            eligible_pool_count=len(room),
            unplaced_vcpu=0,  # what is left stays the main placement's, for the arbiter
        )


def _floor_pool(view: RegionView, pool_id: str) -> bool:
    facts = view.pools.get(pool_id)
    return facts is not None and facts.purchase_model != "reclaimable"


def _settle(pending: Mapping[str, int], pool_id: str, vcpu: int | None) -> Mapping[str, int]:
    """Pending vCPU of a pool after a launch of `vcpu` landed or failed (None: all of it)."""
    held = pending.get(pool_id, 0)
    if not held:
        return pending
    return add(pending, pool_id, -held if vcpu is None else -min(held, vcpu))


def _cheapest(view: RegionView, candidates: Sequence[Candidate], vcpu: int) -> int:
    """Hourly price of `vcpu` on the cheapest eligible pools, room permitting, no caps."""
    by_price = sorted((view.price(c.pool_id), c.pool_id, c.room_vcpu) for c in candidates)
    cost, remaining = 0, vcpu
    for price, _, room in by_price:
        if remaining <= 0:
            break
        take = min(room, remaining)
        cost += take * price
        remaining -= take
    return cost
