"""The planner (ADR-08, ADR-22): floor first on committed capacity, the rest spread by depth.

**Key: workload.** Inputs: `contract_published` (floor, tolerated rate), `capacity_claim_opened`
(what to place), `fallback_returned` (work coming back to reclaimable capacity, placed like a
claim), the workload's lifecycle (`instance_launched`, `instance_lost`, `instance_deleted`),
and what stops a planned launch (`launch_failed`, a refused launch in `actuation_refused`).
Reads the region view (pools, room, exclusions, ranking, prices). Output: `placement_decided`.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from schemas.events import (
    ActuationRefused,
    Allocation,
    CapacityClaimOpened,
    Envelope,
    FallbackReturned,
    InstanceLaunched,
    LaunchFailed,
    PlacementDecided,
)
from streams.deciders import eligibility
from streams.deciders.eligibility import Needs
from streams.deciders.maps import add
from streams.deciders.region import RegionView
from streams.deciders.settings import DeciderSettings
from streams.deciders.types import Cause, Input, Tick, decision
from streams.deciders.waterfill import Candidate, spread, spread_floor
from streams.deciders.workload import LIFECYCLE_INPUTS, WorkloadFacts, workload_of

NAME = "planner"
INPUTS = frozenset(
    {
        "contract_published",
        "capacity_claim_opened",
        "fallback_returned",
        "launch_failed",
        "actuation_refused",
        *LIFECYCLE_INPUTS,
    }
)


@dataclass(frozen=True, slots=True)
class PlannerState:
    facts: WorkloadFacts
    pending: Mapping[str, int] = field(default_factory=dict)  # pool -> vCPU decided, unlaunched


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
        return None  # the planner answers claims; it keeps no timers

    def evolve(self, state: PlannerState, event: Input) -> PlannerState:
        if isinstance(event, Tick):
            return state
        p = event.payload
        if isinstance(p, PlacementDecided):
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
        return replace(state, facts=state.facts.evolve(event))

    def decide(self, state: PlannerState, event: Input, view: RegionView) -> list[Envelope]:
        if isinstance(event, Tick):
            return []
        p = event.payload
        terms = state.facts.terms
        tolerated = terms.tolerated_per_h if terms else 0.0
        if isinstance(p, CapacityClaimOpened):
            needs = Needs(frozenset(p.sku_families), frozenset(p.sizes_vcpu), tolerated)
            request = Request(p.requested_vcpu, needs, p.claim_id, with_floor=True)
        elif isinstance(p, FallbackReturned):
            request = Request(p.vcpu, state.facts.needs(), None, with_floor=False)
        else:
            return []
        return [self.plan(state, request, view, event)]

    def plan(
        self, state: PlannerState, request: Request, view: RegionView, event: Envelope
    ) -> Envelope:
        """The placement of `request` for the workload, stamped as caused by `event`."""
        facts, settings = state.facts, self.settings
        pools = view.pools
        allocations: list[Allocation] = []
        floor_vcpu = 0
        floor_unplaced = 0
        if request.with_floor and facts.terms is not None:
            floor_held = facts.vcpu(floor=True) + sum(
                v for pool_id, v in state.pending.items() if _floor_pool(view, pool_id)
            )
            floor_need = min(request.vcpu, max(0, facts.terms.floor_vcpu - floor_held))
            if floor_need:
                by_hall: dict[str, int] = {}
                for pool_id, vcpu in facts.floor_by_pool().items():
                    hall = pools[pool_id].hall if pool_id in pools else pool_id
                    by_hall[hall] = by_hall.get(hall, 0) + vcpu
                floor = spread_floor(
                    floor_need,
                    by_hall,
                    eligibility.with_room(view, "committed"),
                    eligibility.with_room(view, "guaranteed"),
                )
                for (pool_id, model), vcpu in sorted(floor.allocations.items()):
                    allocations.append(Allocation(pool_id, vcpu, model))
                floor_vcpu = sum(floor.allocations.values())
                floor_unplaced = floor.unplaced_vcpu
        rest = max(0, request.vcpu - floor_vcpu - floor_unplaced)
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
            note = f"floor: {floor_unplaced} vCPU unplaced, no committed or guaranteed room"
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
            unplaced_vcpu=plan.unplaced_vcpu + floor_unplaced,
        )
        return decision(
            payload,
            cause=Cause.of(event),
            at_us=event.occurred_at,
            decider=NAME,
            discriminator=request.claim_id or facts.workload_id,
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
