"""Replacement (ADR-09): on a notice, or a loss without one, ask for capacity elsewhere at once.

**Key: workload.** Inputs: `contract_published`, `notice_received` (replace on the notice, in
parallel with the drain, not after it), `instance_lost` (a loss the decider saw no notice for:
no-notice reclaims, hardware, deletions outside the orchestrator), the workload's other
lifecycle events (what it holds), and `launch_failed` / refused launches (pending room). Reads
the region view. Output: `replacement_requested`, one per lost instance.

* A **reclaimable** instance is replaced by water-filling its vCPU over the eligible pools
  inside the same caps as the planner (`waterfill.spread`), away from the lost pool's
  correlation group while any other group has room, never on an excluded pool or the lost pool.
* A **floor** instance (committed, or guaranteed with the floor role) is replaced on committed
  capacity in another hall first, then guaranteed (ADR-22: a floor broken by a hall loss is
  rebuilt within 15 minutes; this decision is taken at once, the floor keeper in `fallback`
  checks that it landed).
* A **guaranteed fallback** instance is replaced on guaranteed capacity in another hall.
* A **spare** instance (committed, beyond the floor: the planner put it there because the
  reclaimable spread had no room) is replaced as a reclaimable one is: on reclaimable
  capacity, what finds no room going to the fallback arbiter, which spends only within the
  contract's cap or with its approver's word (never guaranteed capacity without authority).

Each request names the pools it keeps away from (excluded pools and, when it could avoid it,
the lost pool's group), where it goes, and what it could not place (``unplaced_vcpu``, for the
fallback arbiter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.events import (
    ActuationRefused,
    Allocation,
    Envelope,
    InstanceLaunched,
    InstanceLost,
    LaunchFailed,
    NoticeReceived,
    PurchaseModel,
    ReplacementRequested,
)
from streams.deciders import eligibility
from streams.deciders.maps import add, replace
from streams.deciders.region import RegionView
from streams.deciders.settings import DeciderSettings
from streams.deciders.types import Cause, Input, Tick, decision
from streams.deciders.waterfill import spread, spread_floor
from streams.deciders.workload import (
    DEMAND_INPUTS,
    LIFECYCLE_INPUTS,
    Held,
    WorkloadFacts,
    workload_of,
)

NAME = "replacement"
INPUTS = frozenset(
    {
        "contract_published",
        "notice_received",
        "launch_failed",
        "actuation_refused",
        *DEMAND_INPUTS,
        *LIFECYCLE_INPUTS,
    }
)


@dataclass(frozen=True, slots=True)
class ReplacementState:
    facts: WorkloadFacts
    replaced: frozenset[str] = frozenset()  # instances a replacement was requested for
    pending: Mapping[str, int] = field(default_factory=dict)  # pool -> vCPU requested, unlaunched


class Replacement:
    """The replacement decider as a `Decider[ReplacementState]` (key: workload id)."""

    name = NAME
    inputs = INPUTS

    def __init__(self, settings: DeciderSettings | None = None) -> None:
        self.settings = settings or DeciderSettings()

    def key(self, event: Envelope) -> str | None:
        return workload_of(event) if event.event_type in INPUTS else None

    def initial(self, key: str) -> ReplacementState:
        return ReplacementState(WorkloadFacts(key))

    def due_at(self, state: ReplacementState) -> int | None:
        return None

    def evolve(self, state: ReplacementState, event: Input) -> ReplacementState:
        if isinstance(event, Tick):
            return state
        p = event.payload
        if isinstance(p, ReplacementRequested):
            pending = state.pending
            for allocation in p.allocations:
                pending = add(pending, allocation.pool_id, allocation.vcpu)
            return replace(
                state, replaced=state.replaced | {p.replaces_instance_id}, pending=pending
            )
        if isinstance(p, InstanceLaunched):
            settled = min(state.pending.get(p.pool_id, 0), p.vcpu)
            state = replace(state, pending=add(state.pending, p.pool_id, -settled))
        elif isinstance(p, LaunchFailed):
            settled = min(state.pending.get(p.pool_id, 0), p.vcpu)
            return replace(state, pending=add(state.pending, p.pool_id, -settled))
        elif isinstance(p, ActuationRefused):
            if p.call == "launch" and p.pool_id:
                held = state.pending.get(p.pool_id, 0)
                return replace(state, pending=add(state.pending, p.pool_id, -held))
            return state
        elif isinstance(p, InstanceLost):
            state = replace(state, replaced=state.replaced - {p.instance_id})
        return replace(state, facts=state.facts.evolve(event, self.settings.trust))

    def decide(self, state: ReplacementState, event: Input, view: RegionView) -> list[Envelope]:
        if isinstance(event, Tick):
            return []
        p = event.payload
        if not isinstance(p, NoticeReceived | InstanceLost):
            return []
        if p.instance_id in state.replaced:
            return []  # requested on its notice already
        held = state.facts.instances.get(p.instance_id)
        if held is None and isinstance(p, InstanceLost):
            held = Held(p.pool_id, p.vcpu, p.purchase_model, False, None, event.occurred_at)
        if held is None:
            return []  # a notice for an instance the workload is not known to hold
        if not held.floor:
            need = self.need_vcpu(state, p.instance_id)
            if need < held.vcpu:
                return [self._not_needed(state, p.instance_id, held, need, view=view, event=event)]
        return [self.request(state, p.instance_id, held, view, event)]

    def need_vcpu(self, state: ReplacementState, instance_id: str) -> int:
        """vCPU the workload's open claims still ask for once `instance_id` is gone: what
        they ask less what it holds besides (instances already being replaced left out) and
        the replacements requested and not yet launched. A floor instance is replaced
        whatever this says (ADR-22: the floor is kept whatever happens)."""
        facts = state.facts
        held = sum(
            h.vcpu
            for i, h in facts.instances.items()
            if i != instance_id and i not in state.replaced
        )
        return max(0, facts.asked_vcpu - held - sum(state.pending.values()))

    def _not_needed(
        self,
        state: ReplacementState,
        instance_id: str,
        lost: Held,
        need: int,
        *,
        view: RegionView,
        event: Envelope,
    ) -> Envelope:
        """A replacement of `lost` sized to what the claims still ask (`need` < its vCPU),
        and nothing at all when they ask for nothing more: capacity nobody asked for is not
        launched (the ledger charges it as surplus)."""
        facts = state.facts
        if need > 0:
            smaller = replace(lost, vcpu=need)
            request = self.request(state, instance_id, smaller, view, event)
            p = request.payload
            assert isinstance(p, ReplacementRequested)
            note = (
                f"sized to {need} of its {lost.vcpu} vCPU: the open claims ask for "
                f"{facts.asked_vcpu} vCPU"
            )
            reason = f"{note}; {p.caps_reason}" if p.caps_reason else note
            return replace(request, payload=replace(p, caps_reason=reason))
        held = facts.vcpu() - lost.vcpu
        return self._stamp(
            state,
            event,
            ReplacementRequested(
                workload_id=facts.workload_id,
                replaces_instance_id=instance_id,
                vcpu=0,
                purchase_model=lost.purchase_model,
                excluded_pool_ids=(),
                allocations=(),
                replaces_pool_id=lost.pool_id,
                floor=False,
                caps_held=True,
                caps_reason=(
                    f"not replaced: without it the workload still holds {held} vCPU and its "
                    f"open claims ask for {facts.asked_vcpu}"
                ),
                unplaced_vcpu=0,
            ),
        )

    def request(
        self,
        state: ReplacementState,
        instance_id: str,
        lost: Held,
        view: RegionView,
        event: Envelope,
    ) -> Envelope:
        """The replacement of `lost` (instance `instance_id`), caused by `event`."""
        spare = lost.purchase_model == "committed" and not lost.floor
        if lost.purchase_model == "reclaimable" or spare:
            return self._reclaimable(state, instance_id, lost, view, event)
        facts = state.facts
        lost_facts = view.pools.get(lost.pool_id)
        lost_hall = lost_facts.hall if lost_facts else ""
        by_hall: dict[str, int] = {}
        keep = facts.floor_by_pool(without=instance_id) if lost.floor else {}
        for pool_id, vcpu in keep.items():
            hall = view.pools[pool_id].hall if pool_id in view.pools else pool_id
            by_hall[hall] = by_hall.get(hall, 0) + vcpu
        families = facts.needs().families
        committed = (
            eligibility.with_room(view, "committed", families=families) if lost.floor else []
        )
        floor = spread_floor(
            lost.vcpu,
            by_hall,
            committed,
            eligibility.with_room(view, "guaranteed", families=families),
            avoid_halls=frozenset({lost_hall}),
        )
        allocations = tuple(
            Allocation(pool_id, vcpu, model)
            for (pool_id, model), vcpu in sorted(floor.allocations.items())
        )
        in_lost_hall = [a for a in allocations if view.pools[a.pool_id].hall == lost_hall]
        reason = None
        if in_lost_hall:
            reason = f"could not keep out of {lost_hall}: no other hall had room"
        model: PurchaseModel = allocations[0].purchase_model if allocations else "guaranteed"
        return self._stamp(
            state,
            event,
            ReplacementRequested(
                workload_id=facts.workload_id,
                replaces_instance_id=instance_id,
                vcpu=lost.vcpu,
                purchase_model=model,
                excluded_pool_ids=tuple(
                    sorted(p for p, f in view.pools.items() if f.hall == lost_hall)
                )
                if not in_lost_hall
                else (),
                allocations=allocations,
                replaces_pool_id=lost.pool_id,
                floor=lost.floor,
                caps_held=True,
                caps_reason=reason,
                unplaced_vcpu=floor.unplaced_vcpu,
            ),
        )

    def _reclaimable(
        self,
        state: ReplacementState,
        instance_id: str,
        lost: Held,
        view: RegionView,
        event: Envelope,
    ) -> Envelope:
        facts, settings = state.facts, self.settings
        lost_facts = view.pools.get(lost.pool_id)
        lost_group = lost_facts.correlation_group if lost_facts else lost.pool_id
        eligible = eligibility.reclaimable(
            view,
            facts.needs(),
            unrecorded_per_h=settings.exclusion.unrecorded_expected_per_h,
            exclude_pools=(lost.pool_id,),
        )
        held = facts.reclaimable_by_pool(without=instance_id)
        for pool_id, vcpu in state.pending.items():
            held[pool_id] = held.get(pool_id, 0) + vcpu
        group_of = eligibility.group_of(view)
        plan = spread(
            lost.vcpu,
            held,
            group_of,
            eligible.candidates,
            settings=settings.placement,
            avoid_groups=frozenset({lost_group}),
        )
        kept_out = set(view.excluded) | {lost.pool_id}
        if plan.avoided:
            kept_out |= {p for p, g in group_of.items() if g == lost_group}
        reason = plan.reason
        if plan.eligible < settings.placement.min_pools:
            reason = f"{reason}; {eligible.explain()}"
        return self._stamp(
            state,
            event,
            ReplacementRequested(
                workload_id=facts.workload_id,
                replaces_instance_id=instance_id,
                vcpu=lost.vcpu,
                purchase_model="reclaimable",
                excluded_pool_ids=tuple(sorted(kept_out)),
                allocations=tuple(
                    Allocation(pool_id, vcpu, "reclaimable")
                    for pool_id, vcpu in sorted(plan.allocations.items())
                ),
                replaces_pool_id=lost.pool_id,
                floor=False,
                caps_held=plan.caps_held,
                caps_reason=reason,
                unplaced_vcpu=plan.unplaced_vcpu,
            ),
        )

    def _stamp(
        self, state: ReplacementState, event: Envelope, payload: ReplacementRequested
    ) -> Envelope:
        return decision(
            payload,
            cause=Cause.of(event),
            at_us=event.occurred_at,
            decider=NAME,
            discriminator=payload.replaces_instance_id,
        )
