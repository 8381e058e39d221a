"""The simulation's stand-in orchestrator: demand in, launches and deletions out.

It turns each `Run` into a capacity claim, places it with a `PlacementPolicy` (floor first on
committed capacity, the rest on reclaimable, guaranteed when nothing reclaimable has room),
launches through the provider seam with the orchestrator's tags, relaunches after a loss (away
from the lost pool's correlation group), tops runs up every 5 minutes, and deletes a run's
instances when it ends. What each instance's workload writes (checkpoints, waste, usage) is
`provider.sim.work`.

The real deciders and the actuator replace this module later; `provider.sim.work` stays.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial

from provider.base import (
    POOL_TAG,
    CapacityProvider,
    CapacityUnavailableError,
    DeleteRequest,
    LaunchRequest,
    owned_tags,
)
from provider.sim.clock import MINUTE_US, SECOND_US
from provider.sim.parts import SimParts
from provider.sim.placement import PlacementPolicy, PlacementRequest, PoolView
from provider.sim.work import Unit, WorkloadSide
from provider.sim.workloads import CHECKPOINT_BANDWIDTH_BYTES_PER_S, Run, SimWorkload
from schemas.events import (
    CapacityClaimClosed,
    CapacityClaimOpened,
    Envelope,
    InstanceLaunched,
    InstanceLost,
    PurchaseModel,
)

CLAIMS = "sim/claims"
RUN_TAG = "spotcap.io/run"
RECONCILE_US = 5 * MINUTE_US


@dataclass(frozen=True, slots=True)
class OrchestratorSettings:
    orchestrator_id: str = "spotcap-sim"
    launch_delay_s: int = 60
    relaunch_delay_s: int = 45
    usage_interval_s: int = 6 * 3600
    checkpoint_bandwidth_bytes_per_s: int = CHECKPOINT_BANDWIDTH_BYTES_PER_S


@dataclass(slots=True)
class _RunState:
    run: Run
    workload: SimWorkload
    claim_id: str
    claim_event_id: str
    units: dict[str, Unit] = field(default_factory=dict)
    active: bool = True
    fulfilled: bool = False

    def placed_vcpu(self, floor: bool | None = None) -> int:
        return sum(
            u.instance.vcpu for u in self.units.values() if floor is None or u.floor == floor
        )


class SimOrchestrator:
    def __init__(
        self,
        parts: SimParts,
        rng: random.Random,
        policy: PlacementPolicy,
        settings: OrchestratorSettings,
    ) -> None:
        self._catalogue = parts.catalogue
        # Launch and delete only through the seam; the policy sees the pools' room.
        self._provider: CapacityProvider = parts.provider
        self._view: PoolView = parts.provider
        self._bus = bus = parts.bus
        self._clock = clock = parts.clock
        self._rng = rng
        self._policy = policy
        self.settings = settings
        self._work = WorkloadSide(
            bus,
            clock,
            rng,
            usage_interval_s=settings.usage_interval_s,
            checkpoint_bandwidth_bytes_per_s=settings.checkpoint_bandwidth_bytes_per_s,
        )
        self._runs: dict[str, _RunState] = {}
        self._launch_ids: dict[str, str] = {}
        bus.subscribe(InstanceLaunched.EVENT_TYPE, self._on_launched)
        bus.subscribe(InstanceLost.EVENT_TYPE, self._on_loss)
        clock.every(clock.now_us + RECONCILE_US, RECONCILE_US, self._reconcile)

    def close_usage(self) -> None:
        """The run ends now: close the usage of every instance still running."""
        self._work.close_usage()

    def admit(self, workload: SimWorkload, runs: list[Run]) -> None:
        """Schedule the runs of a workload whose contract is published."""
        for run in runs:
            self._clock.at(run.start_us, partial(self._open, workload, run))
            if run.end_us is not None:
                self._clock.at(run.end_us, partial(self._close, run.run_id))

    # -- runs and claims --------------------------------------------------------------------

    def _open(self, workload: SimWorkload, run: Run) -> None:
        claim_id = f"claim/{run.run_id}"
        opened = self._bus.emit(
            CapacityClaimOpened(
                claim_id=claim_id,
                workload_id=run.workload_id,
                scheduler=workload.scheduler,
                cluster=workload.draft.cluster,
                requested_vcpu=run.vcpu,
                reason=run.reason,
            ),
            CLAIMS,
        )
        state = _RunState(run, workload, claim_id, opened.event_id)
        self._runs[run.run_id] = state
        self._clock.after(self.settings.launch_delay_s * SECOND_US, partial(self._fulfil, state))

    def _fulfil(self, state: _RunState) -> None:
        if not state.active:
            return
        self._top_up(state)
        placed = min(state.placed_vcpu(), state.run.vcpu)
        complete = placed >= state.run.vcpu
        self._bus.emit(
            CapacityClaimClosed(
                claim_id=state.claim_id,
                workload_id=state.run.workload_id,
                scheduler=state.workload.scheduler,
                requested_vcpu=state.run.vcpu,
                fulfilled_vcpu=placed,
                outcome="fulfilled" if complete else "expired",
                reason="placed"
                if complete
                else f"only {placed} vCPU placed: no eligible pool had room; topped up later",
            ),
            CLAIMS,
            causation_id=state.claim_event_id,
        )
        state.fulfilled = True

    def _close(self, run_id: str) -> None:
        state = self._runs.pop(run_id, None)
        if state is None:
            return
        state.active = False
        for instance_id in sorted(state.units):
            unit = state.units[instance_id]
            self._provider.delete(
                DeleteRequest(
                    instance_id, f"{state.run.reason} finished", causation_id=state.claim_event_id
                )
            )
            self._work.end(unit)
        state.units.clear()

    def _reconcile(self) -> None:
        for state in list(self._runs.values()):
            if state.fulfilled and state.placed_vcpu() < state.run.vcpu:
                self._top_up(state)

    # -- placement --------------------------------------------------------------------------

    def _top_up(self, state: _RunState) -> None:
        run, cause = state.run, state.claim_event_id
        floor_need = run.floor_vcpu - state.placed_vcpu(floor=True)
        if floor_need > 0:
            for model in ("committed", "guaranteed"):
                floor_need -= self._place(state, model, floor_need, cause=cause, floor=True)
                if floor_need <= 0:
                    break
        rest_need = run.vcpu - max(run.floor_vcpu, 0) - state.placed_vcpu(floor=False)
        if rest_need > 0:
            sizes = state.workload.draft.sizes_vcpu
            rest_need -= self._place(
                state, "reclaimable", rest_need, sizes=sizes, cause=cause, floor=False
            )
            if rest_need > 0:
                self._place(state, "guaranteed", rest_need, cause=cause, floor=False)

    def _place(
        self,
        state: _RunState,
        model: PurchaseModel,
        vcpu: int,
        *,
        cause: str,
        floor: bool,
        sizes: tuple[int, ...] | None = None,
        avoid: frozenset[str] = frozenset(),
        inherit: Unit | None = None,
    ) -> int:
        """Launch up to `vcpu` in `model` pools; returns the vCPU launched."""
        placed_by_pool: dict[str, int] = {}
        for unit in state.units.values():
            pool_id = unit.instance.pool_id
            placed_by_pool[pool_id] = placed_by_pool.get(pool_id, 0) + unit.instance.vcpu
        request = PlacementRequest(
            workload_id=state.run.workload_id,
            purchase_model=model,
            vcpu=vcpu,
            families=state.workload.draft.families,
            sizes_vcpu=sizes,
            max_interruptions_per_h=state.workload.contract.tolerated_interruptions_per_h,
            placed_vcpu_by_pool=placed_by_pool,
            avoid_groups=avoid,
        )
        launched = 0
        for pool_id in self._policy.plan(request, self._catalogue, self._view):
            new = self._launch(state, pool_id, cause, floor, inherit)
            if new is not None:
                launched += new.instance.vcpu
                inherit = None  # one replacement carries the lost unit's checkpoints on
        return launched

    def _launch(
        self, state: _RunState, pool_id: str, cause: str, floor: bool, inherit: Unit | None
    ) -> Unit | None:
        workload_id = state.run.workload_id
        tags = owned_tags(
            self.settings.orchestrator_id,
            workload_id,
            {POOL_TAG: pool_id, RUN_TAG: state.run.run_id},
        )
        try:
            instance = self._provider.launch(
                LaunchRequest(pool_id, workload_id, tags, causation_id=cause)
            )
        except CapacityUnavailableError:
            return None
        now_us = self._clock.now_us
        unit = Unit(
            instance,
            state.workload,
            state.run.run_id,
            floor,
            self._launch_ids.pop(instance.instance_id),
            now_us,
            generation=inherit.generation if inherit else 0,
        )
        state.units[instance.instance_id] = unit
        self._work.start(unit)
        return unit

    def _on_launched(self, envelope: Envelope) -> None:
        payload = envelope.payload
        assert isinstance(payload, InstanceLaunched)
        self._launch_ids[payload.instance_id] = envelope.event_id

    def _on_loss(self, envelope: Envelope) -> None:
        loss = envelope.payload
        assert isinstance(loss, InstanceLost)
        unit = self._work.units.get(loss.instance_id)
        if unit is None:
            return
        state = self._runs[unit.run_id]
        del state.units[loss.instance_id]
        self._work.lose(unit, envelope)
        relaunch = partial(self._relaunch, state, unit, envelope.event_id)
        self._clock.after(self.settings.relaunch_delay_s * SECOND_US, relaunch)

    def _relaunch(self, state: _RunState, lost: Unit, loss_id: str) -> None:
        if not state.active:
            return
        target = state.run.floor_vcpu if lost.floor else state.run.vcpu - state.run.floor_vcpu
        need = min(lost.instance.vcpu, target - state.placed_vcpu(floor=lost.floor))
        if need <= 0:
            return  # the 5-minute top-up got there first
        group = self._catalogue.get(lost.instance.pool_id).correlation_group
        model = lost.instance.purchase_model
        sizes = None if lost.floor else state.workload.draft.sizes_vcpu
        avoid = frozenset({group})
        placed = self._place(
            state,
            model,
            need,
            cause=loss_id,
            floor=lost.floor,
            sizes=sizes,
            avoid=avoid,
            inherit=lost,
        )
        if placed < need and model != "guaranteed":
            self._place(
                state,
                "guaranteed",
                need - placed,
                cause=loss_id,
                floor=lost.floor,
                avoid=avoid,
                inherit=lost,
            )
