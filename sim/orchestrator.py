"""The baseline orchestrator: the simulation's stand-in, behind the orchestrator seam.

It places each capacity claim `launch_delay_s` after it opens with a `PlacementPolicy` (floor
first on committed capacity, then guaranteed; the rest on reclaimable, guaranteed when nothing
reclaimable has room), tops claims below their target up every `reconcile_interval_s`,
relaunches `relaunch_delay_s` after a loss (away from the lost pool's correlation group), and
deletes a claim's instances when its work is released. It decides from the events it observes
(contracts, claims with the SKU families and sizes they can use, rate cards, losses, releases)
and from the simulator's room per pool, and acts through the provider seam with its tags. A
claim of a workload without a published contract is not placed (ADR-04).

It records what it does, so that the deciders can be compared with it on the same seed:

* `placement_decided` before each placement's launches (the claim's first placement, and each
  top-up that places something): allocations per pool, the plan's hourly cost at the current
  rate cards, and the premium over `CheapestPolicy` (price-first) for the same needs; how the
  workload's reclaimable vCPU stands against the caps of ADR-08 after the plan (the baseline
  reports them, it does not enforce them: `sim.caps`); what stayed unplaced. It
  excludes no pool and uses no ranking.
* `replacement_requested` before each relaunch (one per purchase model tried), caused by the
  loss, with where it goes; its excluded pools are the lost pool's correlation group, unless
  nothing else had room and the baseline went back into it.

Every launch names its decision as cause, so `instance_launched` follows
`placement_decided` or `replacement_requested` in the cause chain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from provider.base import (
    POOL_TAG,
    CapacityProvider,
    CapacityUnavailableError,
    DeleteRequest,
    Instance,
    LaunchRequest,
    owned_tags,
)
from schemas.events import (
    Allocation,
    CapacityClaimOpened,
    CapacityReleased,
    ContractPublished,
    Envelope,
    InstanceLost,
    PlacementDecided,
    PurchaseModel,
    RateCard,
    ReplacementRequested,
)
from sim.caps import CapsReport, caps_reason, caps_report
from sim.clock import SECOND_US
from sim.demand import CLAIM_TAG
from sim.orchestration import OrchestratorHost
from sim.placement import (
    CheapestPolicy,
    Fitting,
    PlacementPolicy,
    PlacementRequest,
    PlannedView,
    SpreadPolicy,
    eligible_pools,
)

PRODUCER = "sim/orchestrator"
RECONCILE = "reconcile"
_ACTED_ON = frozenset(
    {CapacityClaimOpened.EVENT_TYPE, CapacityReleased.EVENT_TYPE, InstanceLost.EVENT_TYPE}
)


@dataclass(frozen=True, slots=True)
class OrchestratorSettings:
    orchestrator_id: str = "spotcap-sim"  # the owner tag; the provider deletes nothing else
    launch_delay_s: int = 60  # from a claim opening to its placement
    relaunch_delay_s: int = 45  # from a loss to its relaunch
    reconcile_interval_s: int = 300  # claims below their target are topped up this often


@dataclass(frozen=True, slots=True)
class _Placed:
    instance: Instance
    floor: bool


@dataclass(slots=True)
class _Claim:
    """An active claim, what its workload can run on, and the instances serving it."""

    claim_id: str
    workload_id: str
    requested_vcpu: int
    floor_vcpu: int  # the workload's floor if this claim holds it, else 0
    opened_event_id: str
    families: tuple[str, ...]
    sizes_vcpu: tuple[int, ...] | None  # None: any size
    tolerated_per_h: float | None
    units: dict[str, _Placed] = field(default_factory=dict)
    placements: int = 0  # placement decisions so far
    active: bool = True
    # vCPU of `units` [as the rest, as the floor]: kept, not summed (the top-up asks often).
    placed: list[int] = field(default_factory=lambda: [0, 0])

    def add(self, unit: _Placed) -> None:
        self.units[unit.instance.instance_id] = unit
        self.placed[unit.floor] += unit.instance.vcpu

    def remove(self, instance_id: str) -> _Placed:
        unit = self.units.pop(instance_id)
        self.placed[unit.floor] -= unit.instance.vcpu
        return unit

    def placed_vcpu(self, floor: bool | None = None) -> int:
        if floor is None:
            return self.placed[0] + self.placed[1]
        return self.placed[floor]


@dataclass(frozen=True, slots=True)
class _Plan:
    pool_ids: list[str]  # one instance in each, in launch order
    floor: list[bool]  # per instance: placed as floor


class BaselineOrchestrator:
    """The stand-in orchestrator (`--orchestrator baseline`)."""

    def __init__(
        self,
        settings: OrchestratorSettings | None = None,
        policy: PlacementPolicy | None = None,
    ) -> None:
        self.settings = settings or OrchestratorSettings()
        self._policy = policy or SpreadPolicy()
        self._host: OrchestratorHost | None = None
        self._fitting: Fitting | None = None
        self._group_pools: dict[str, tuple[str, ...]] = {}  # correlation group -> its pools
        self._contracts: dict[str, ContractPublished] = {}  # by workload
        self._claims: dict[str, _Claim] = {}  # active claims, by id
        self._by_workload: dict[str, dict[str, _Claim]] = {}  # workload -> its active claims
        self._claim_of: dict[str, str] = {}  # instance id -> claim id, for live instances
        self._floor_held: dict[str, str] = {}  # workload -> the active claim holding its floor
        self._prices: dict[str, int] = {}  # pool -> current price per vCPU-hour
        self._tasks: dict[str, Callable[[CapacityProvider], None]] = {}  # by wake-up name
        self._observed: list[Envelope] = []  # to act on, in order

    # -- the seam ---------------------------------------------------------------------------

    def start(self, host: OrchestratorHost) -> None:
        self._host = host
        self._fitting = Fitting(host.catalogue)
        groups: dict[str, list[str]] = {}
        for pool in host.catalogue:
            groups.setdefault(pool.correlation_group, []).append(pool.pool_id)
        self._group_pools = {g: tuple(sorted(ids)) for g, ids in groups.items()}
        self._wake(host.now_us() + self._reconcile_us, RECONCILE, self._reconcile)

    def observe(self, event: Envelope) -> None:
        payload = event.payload
        if isinstance(payload, RateCard):  # half of all events: first
            self._prices[payload.pool_id] = payload.price_per_vcpu_h_eur_micros
        elif event.event_type in _ACTED_ON:
            if not isinstance(payload, InstanceLost) or payload.instance_id in self._claim_of:
                self._observed.append(event)
        elif isinstance(payload, ContractPublished):
            self._contracts[payload.workload_id] = payload

    def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
        observed, self._observed = self._observed, []
        for event in observed:
            payload = event.payload
            if isinstance(payload, CapacityClaimOpened):
                self._on_claim(event, payload)
            elif isinstance(payload, CapacityReleased):
                self._release(provider, event, payload)
            elif isinstance(payload, InstanceLost):
                self._on_loss(event, payload)
        for name in due:
            self._tasks.pop(name)(provider)

    # -- claims -----------------------------------------------------------------------------

    def _on_claim(self, event: Envelope, opened: CapacityClaimOpened) -> None:
        contract = self._contracts.get(opened.workload_id)
        if contract is None:
            return  # no published contract, no placement (ADR-04)
        # The floor is the workload's: the first of its active claims holds it (a CI runner
        # pool's weekday burst adds no floor to its base pool's).
        holds_floor = opened.workload_id not in self._floor_held
        if holds_floor:
            self._floor_held[opened.workload_id] = opened.claim_id
        claim = _Claim(
            opened.claim_id,
            opened.workload_id,
            opened.requested_vcpu,
            contract.floor_vcpu if holds_floor else 0,
            event.event_id,
            tuple(opened.sku_families),
            tuple(opened.sizes_vcpu) or None,
            contract.tolerated_interruptions_per_h,
        )
        self._claims[claim.claim_id] = claim
        self._by_workload.setdefault(claim.workload_id, {})[claim.claim_id] = claim
        when_us = self._ready().now_us() + self.settings.launch_delay_s * SECOND_US
        self._wake(when_us, f"place {claim.claim_id}", partial(self._place_claim, claim))

    def _place_claim(self, claim: _Claim, provider: CapacityProvider) -> None:
        if claim.active:
            self._top_up(provider, claim, always_record=True)

    def _reconcile(self, provider: CapacityProvider) -> None:
        for claim in list(self._claims.values()):
            if claim.placements and claim.placed_vcpu() < claim.requested_vcpu:
                self._top_up(provider, claim, always_record=False)
        now_us = self._ready().now_us()
        self._wake(now_us + self._reconcile_us, RECONCILE, self._reconcile)

    def _release(
        self, provider: CapacityProvider, event: Envelope, released: CapacityReleased
    ) -> None:
        claim = self._claims.pop(released.claim_id, None)
        if claim is None:
            return
        claim.active = False
        del self._by_workload[claim.workload_id][claim.claim_id]
        if self._floor_held.get(released.workload_id) == claim.claim_id:
            del self._floor_held[released.workload_id]
        for instance_id in sorted(claim.units):
            del self._claim_of[instance_id]
            request = DeleteRequest(instance_id, released.reason, causation_id=event.event_id)
            provider.delete(request)
        claim.units.clear()
        claim.placed = [0, 0]

    # -- placement --------------------------------------------------------------------------

    def _top_up(self, provider: CapacityProvider, claim: _Claim, *, always_record: bool) -> None:
        floor_need = max(0, claim.floor_vcpu - claim.placed_vcpu(floor=True))
        rest_need = max(
            0, claim.requested_vcpu - max(claim.floor_vcpu, 0) - claim.placed_vcpu(floor=False)
        )
        plan = self._plan_top_up(claim, self._policy, floor_need, rest_need)
        if not plan.pool_ids and not always_record:
            return
        price_first = self._plan_top_up(claim, CheapestPolicy(self._prices), floor_need, rest_need)
        cost = self._cost(plan.pool_ids)
        price_first_cost = self._cost(price_first.pool_ids)
        requested = floor_need + rest_need
        unplaced = max(0, requested - sum(self._size(p) for p in plan.pool_ids))
        caps = self._caps(claim, plan.pool_ids)
        claim.placements += 1
        decision = self._ready().emit(
            PlacementDecided(
                workload_id=claim.workload_id,
                requested_vcpu=requested,
                floor_vcpu=sum(
                    self._size(p) for p, f in zip(plan.pool_ids, plan.floor, strict=True) if f
                ),
                allocations=self._allocations(plan.pool_ids),
                cost_per_h_eur_micros=cost,
                price_first_cost_per_h_eur_micros=price_first_cost,
                premium_per_h_eur_micros=cost - price_first_cost,
                excluded_pool_ids=(),
                claim_id=claim.claim_id,
                caps_held=caps.caps_held,
                caps_reason=caps_reason(caps, unplaced),
                eligible_pool_count=caps.eligible,
                pool_cap_vcpu=caps.pool_cap_vcpu,
                group_cap_vcpu=caps.group_cap_vcpu,
                unplaced_vcpu=unplaced,
            ),
            PRODUCER,
            causation_id=claim.opened_event_id,
            discriminator=str(claim.placements),
        )
        for pool_id, floor in zip(plan.pool_ids, plan.floor, strict=True):
            self._launch(provider, claim, pool_id, decision.event_id, floor)

    def _plan_top_up(
        self, claim: _Claim, policy: PlacementPolicy, floor_need: int, rest_need: int
    ) -> _Plan:
        """Floor first (committed, then guaranteed), the rest on reclaimable, then guaranteed:
        each phase planned against the room the earlier phases left."""
        view = PlannedView(self._ready())
        pools: list[str] = []
        floors: list[bool] = []

        def phase(model: PurchaseModel, vcpu: int, sizes: tuple[int, ...] | None, f: bool) -> int:
            chosen = self._plan(
                claim, policy, view, planned=pools, model=model, vcpu=vcpu, sizes=sizes
            )
            pools.extend(chosen)
            floors.extend([f] * len(chosen))
            return sum(self._size(p) for p in chosen)

        if floor_need > 0:
            for model in ("committed", "guaranteed"):
                floor_need -= phase(model, floor_need, None, True)
                if floor_need <= 0:
                    break
        if rest_need > 0:
            rest_need -= phase("reclaimable", rest_need, claim.sizes_vcpu, False)
            if rest_need > 0:
                phase("guaranteed", rest_need, None, False)
        return _Plan(pools, floors)

    def _request(
        self,
        claim: _Claim,
        model: PurchaseModel,
        vcpu: int,
        sizes: tuple[int, ...] | None,
        *,
        planned: Sequence[str] = (),
        avoid: frozenset[str] = frozenset(),
    ) -> PlacementRequest:
        placed_by_pool: dict[str, int] = {}
        for unit in claim.units.values():
            pool_id = unit.instance.pool_id
            placed_by_pool[pool_id] = placed_by_pool.get(pool_id, 0) + unit.instance.vcpu
        for pool_id in planned:
            placed_by_pool[pool_id] = placed_by_pool.get(pool_id, 0) + self._size(pool_id)
        return PlacementRequest(
            workload_id=claim.workload_id,
            purchase_model=model,
            vcpu=vcpu,
            families=claim.families,
            sizes_vcpu=sizes,
            max_interruptions_per_h=claim.tolerated_per_h,
            placed_vcpu_by_pool=placed_by_pool,
            avoid_groups=avoid,
        )

    def _plan(
        self,
        claim: _Claim,
        policy: PlacementPolicy,
        view: PlannedView,
        *,
        planned: list[str],
        model: PurchaseModel,
        vcpu: int,
        sizes: tuple[int, ...] | None,
        avoid: frozenset[str] = frozenset(),
    ) -> list[str]:
        """Pools for up to `vcpu` more in `model` pools; `view` takes what is chosen."""
        request = self._request(claim, model, vcpu, sizes, planned=planned, avoid=avoid)
        chosen = policy.plan(request, self._fits(), view)
        for pool_id in chosen:
            view.take(pool_id, self._size(pool_id))
        return chosen

    def _launch(
        self, provider: CapacityProvider, claim: _Claim, pool_id: str, cause: str, floor: bool
    ) -> int:
        """Launch one instance in `pool_id` for `claim`; returns its vCPU (0 if refused)."""
        tags = owned_tags(
            self.settings.orchestrator_id,
            claim.workload_id,
            {POOL_TAG: pool_id, CLAIM_TAG: claim.claim_id},
        )
        try:
            instance = provider.launch(
                LaunchRequest(pool_id, claim.workload_id, tags, causation_id=cause)
            )
        except CapacityUnavailableError:
            return 0  # the room changed since the plan: the next top-up tries again
        claim.add(_Placed(instance, floor))
        self._claim_of[instance.instance_id] = claim.claim_id
        return instance.vcpu

    # -- replacement ------------------------------------------------------------------------

    def _on_loss(self, event: Envelope, loss: InstanceLost) -> None:
        claim_id = self._claim_of.pop(loss.instance_id, None)
        if claim_id is None:
            return  # its claim was released (and the instance deleted) first
        claim = self._claims[claim_id]
        lost = claim.remove(loss.instance_id)
        when_us = self._ready().now_us() + self.settings.relaunch_delay_s * SECOND_US
        relaunch = partial(self._relaunch, claim, lost, event.event_id)
        self._wake(when_us, f"relaunch {event.event_id}", relaunch)

    def _relaunch(
        self, claim: _Claim, lost: _Placed, loss_id: str, provider: CapacityProvider
    ) -> None:
        if not claim.active:
            return
        target = claim.floor_vcpu if lost.floor else claim.requested_vcpu - claim.floor_vcpu
        need = min(lost.instance.vcpu, target - claim.placed_vcpu(floor=lost.floor))
        if need <= 0:
            return  # a top-up got there first
        group = self._ready().catalogue.get(lost.instance.pool_id).correlation_group
        model = lost.instance.purchase_model
        sizes = None if lost.floor else claim.sizes_vcpu
        replace = partial(self._replace, provider, claim, lost, loss_id=loss_id, group=group)
        placed = replace(model=model, vcpu=need, sizes=sizes)
        if placed < need and model != "guaranteed":
            replace(model="guaranteed", vcpu=need - placed, sizes=None)

    def _replace(
        self,
        provider: CapacityProvider,
        claim: _Claim,
        lost: _Placed,
        *,
        loss_id: str,
        group: str,
        model: PurchaseModel,
        vcpu: int,
        sizes: tuple[int, ...] | None,
    ) -> int:
        """Request `vcpu` in `model` pools away from `group`, launch them; the vCPU placed."""
        host = self._ready()
        view = PlannedView(host)
        avoid = frozenset({group})
        chosen = self._plan(
            claim, self._policy, view, planned=[], model=model, vcpu=vcpu, sizes=sizes, avoid=avoid
        )
        catalogue = host.catalogue
        into_group = any(catalogue.get(p).correlation_group == group for p in chosen)
        unplaced = max(0, vcpu - sum(self._size(p) for p in chosen))
        caps = self._caps(claim, chosen)
        strayed = f"could not keep out of {group}: no other pool had room" if into_group else None
        request = host.emit(
            ReplacementRequested(
                workload_id=claim.workload_id,
                replaces_instance_id=lost.instance.instance_id,
                vcpu=vcpu,
                purchase_model=model,
                excluded_pool_ids=() if into_group else self._group_pools[group],
                allocations=self._allocations(chosen),
                replaces_pool_id=lost.instance.pool_id,
                floor=lost.floor,
                caps_held=caps.caps_held,
                caps_reason=caps_reason(caps, unplaced, strayed),
                unplaced_vcpu=unplaced,
            ),
            PRODUCER,
            causation_id=loss_id,
            discriminator=model,
        )
        return sum(
            self._launch(provider, claim, pool_id, request.event_id, lost.floor)
            for pool_id in chosen
        )

    # -- what the decisions record ----------------------------------------------------------

    def _caps(self, claim: _Claim, planned: Sequence[str]) -> CapsReport:
        """The workload's reclaimable vCPU per pool (all its active claims) once `planned`
        launches, against the caps, with the count of reclaimable pools eligible now."""
        catalogue = self._ready().catalogue
        by_pool: dict[str, int] = {}
        for other in self._by_workload[claim.workload_id].values():
            for unit in other.units.values():
                if unit.instance.purchase_model == "reclaimable":
                    pool_id = unit.instance.pool_id
                    by_pool[pool_id] = by_pool.get(pool_id, 0) + unit.instance.vcpu
        for pool_id in planned:
            pool = catalogue.get(pool_id)
            if pool.purchase_model == "reclaimable":
                by_pool[pool_id] = by_pool.get(pool_id, 0) + pool.size_vcpu
        request = self._request(claim, "reclaimable", 0, claim.sizes_vcpu)
        eligible = len(eligible_pools(request, self._fits(), self._ready()))
        group_of = {p: catalogue.get(p).correlation_group for p in by_pool}
        return caps_report(by_pool, group_of, eligible)

    @property
    def _reconcile_us(self) -> int:
        return self.settings.reconcile_interval_s * SECOND_US

    def _ready(self) -> OrchestratorHost:
        if self._host is None:
            raise RuntimeError("the baseline orchestrator was not started")
        return self._host

    def _fits(self) -> Fitting:
        if self._fitting is None:
            raise RuntimeError("the baseline orchestrator was not started")
        return self._fitting

    def _wake(self, when_us: int, name: str, task: Callable[[CapacityProvider], None]) -> None:
        self._tasks[name] = task
        self._ready().wake_at(when_us, name)

    def _size(self, pool_id: str) -> int:
        return self._ready().catalogue.get(pool_id).size_vcpu

    def _cost(self, pool_ids: list[str]) -> int:
        """Hourly price of instances in these pools at the current rate cards."""
        catalogue = self._ready().catalogue
        total = 0
        for pool_id in pool_ids:
            pool = catalogue.get(pool_id)
            price = self._prices.get(pool_id, pool.price_per_vcpu_h_eur_micros)
            total += pool.size_vcpu * price
        return total

    def _allocations(self, pool_ids: list[str]) -> tuple[Allocation, ...]:
        catalogue = self._ready().catalogue
        vcpu: dict[str, int] = {}
        for pool_id in pool_ids:
            vcpu[pool_id] = vcpu.get(pool_id, 0) + catalogue.get(pool_id).size_vcpu
        return tuple(
            Allocation(pool_id, v, catalogue.get(pool_id).purchase_model)
            for pool_id, v in sorted(vcpu.items())
        )
