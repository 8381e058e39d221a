"""The workloads' side of each instance: what a workload and its node agent write about it.

Everything follows the workload's resolved contract: periodic checkpoints at its
``checkpoint.periodic_interval_s``; a final checkpoint of ``checkpoint.size_bytes`` on notice
when the method writes one and the write fits the drain budget and the time left; on a loss, the
work wasted by its ``restart.semantics`` (vCPU-seconds since the last checkpoint for `resume`,
since the current unit began for `requeue`, since the instance started for `restart` or work
without units; nothing for a stateless service, nothing after a final checkpoint); and usage
intervals, every `usage_interval_s` and when the instance ends.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from schemas.contracts.model import Contract
from schemas.events import (
    CheckpointWritten,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    PurchaseModel,
    ReplacementRequested,
    UsageInterval,
    WorkWasted,
)
from sim.bus import EventBus
from sim.clock import HOUR_US, SECOND_US, Scheduler
from sim.workloads import SimWorkload

AGENT = "sim/agent"
ORCHESTRATOR = "sim/orchestrator"
# How long a lost instance's checkpoints wait for the replacement that resumes from them.
RESUME_WINDOW_US = HOUR_US
_T = TypeVar("_T")


@dataclass(slots=True)
class Unit:
    """A workload's instance, with its checkpoints and the start of its open usage interval."""

    instance_id: str
    pool_id: str
    workload_id: str
    vcpu: int
    purchase_model: PurchaseModel
    launched_at: int
    workload: SimWorkload
    launch_event_id: str
    usage_from_us: int
    generation: int = 0
    last_checkpoint_us: int | None = None
    final_checkpoint_us: int | None = None


class WorkloadSide:
    """Runs the work on every instance launched for an admitted workload (whoever launched it):
    it follows the provider's lifecycle events, not the orchestrator's calls.

    A replacement resumes from the checkpoints of the instance it replaces: an instance
    launched with a `replacement_requested` event as its cause continues that instance's
    checkpoint generations (the first one launched for the request; the others start anew).
    """

    def __init__(
        self,
        bus: EventBus,
        clock: Scheduler,
        rng: random.Random,
        workloads: Mapping[str, SimWorkload],
        *,
        usage_interval_s: int,
        checkpoint_bandwidth_bytes_per_s: int,
    ) -> None:
        self._bus = bus
        self._clock = clock
        self._rng = rng
        self._workloads = workloads
        self._bandwidth = checkpoint_bandwidth_bytes_per_s
        self.units: dict[str, Unit] = {}
        # Lost instances' last checkpoint generation, and the replacement requests waiting to
        # launch (request event id -> the instance they replace); both by time, kept an hour.
        self._lost: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._resumes: OrderedDict[str, tuple[str, int]] = OrderedDict()
        bus.subscribe(InstanceLaunched.EVENT_TYPE, self._on_launched)
        bus.subscribe(InstanceLost.EVENT_TYPE, self._on_lost)
        bus.subscribe(InstanceDeleted.EVENT_TYPE, self._on_deleted)
        bus.subscribe(NoticeReceived.EVENT_TYPE, self._on_notice)
        bus.subscribe(ReplacementRequested.EVENT_TYPE, self._on_replacement)
        usage_us = usage_interval_s * SECOND_US
        clock.every(clock.now_us + usage_us, usage_us, self._usage_tick)

    def use_contract(self, workload_id: str, contract: Contract) -> None:
        """Instances of the workload launched from now on follow `contract` instead (a what-if
        of another checkpoint interval, as bench/checkpoint_loss.py runs)."""
        workload = self._workloads[workload_id]
        self._workloads = {**self._workloads, workload_id: replace(workload, contract=contract)}

    # -- the instance's life ----------------------------------------------------------------

    def _on_launched(self, envelope: Envelope) -> None:
        launched = envelope.payload
        assert isinstance(launched, InstanceLaunched)
        workload = self._workloads.get(launched.workload_id)
        if workload is None:
            return  # not one of the region's workloads: no work runs there
        now_us = self._clock.now_us
        unit = Unit(
            launched.instance_id,
            launched.pool_id,
            launched.workload_id,
            launched.vcpu,
            launched.purchase_model,
            now_us,
            workload,
            envelope.event_id,
            now_us,
            generation=self._resumed_generation(envelope.causation_id),
        )
        self.units[unit.instance_id] = unit
        interval_s = workload.contract.checkpoint.periodic_interval_s
        if interval_s:
            self._clock.after(interval_s * SECOND_US, partial(self._checkpoint, unit, interval_s))

    def _on_deleted(self, envelope: Envelope) -> None:
        deleted = envelope.payload
        assert isinstance(deleted, InstanceDeleted)
        unit = self.units.pop(deleted.instance_id, None)
        if unit is not None:
            self._usage(unit)

    def _on_lost(self, loss: Envelope) -> None:
        """Close the instance's usage and charge the wasted work to the loss."""
        lost = loss.payload
        assert isinstance(lost, InstanceLost)
        unit = self.units.pop(lost.instance_id, None)
        if unit is None:
            return
        self._usage(unit)
        self._bus.emit(
            WorkWasted(
                workload_id=unit.workload_id,
                instance_id=unit.instance_id,
                pool_id=unit.pool_id,
                wasted_vcpu_s=self._wasted_vcpu_s(unit),
                last_checkpoint_at=unit.last_checkpoint_us,
            ),
            ORCHESTRATOR,
            causation_id=loss.event_id,
            correlation_id=loss.correlation_id,
        )
        now_us = self._clock.now_us
        self._lost[unit.instance_id] = (unit.generation, now_us)
        _forget_before(self._lost, now_us - RESUME_WINDOW_US)

    def _on_replacement(self, envelope: Envelope) -> None:
        request = envelope.payload
        assert isinstance(request, ReplacementRequested)
        now_us = self._clock.now_us
        self._resumes[envelope.event_id] = (request.replaces_instance_id, now_us)
        _forget_before(self._resumes, now_us - RESUME_WINDOW_US)

    def _resumed_generation(self, cause: str | None) -> int:
        resume = self._resumes.pop(cause, None) if cause else None
        if resume is None:
            return 0
        replaced = resume[0]
        live = self.units.get(replaced)  # replaced on notice: still draining
        if live is not None:
            return live.generation
        lost = self._lost.get(replaced)
        return lost[0] if lost is not None else 0

    # -- checkpoints ------------------------------------------------------------------------

    def _checkpoint(self, unit: Unit, interval_s: int) -> None:
        if self.units.get(unit.instance_id) is not unit or unit.final_checkpoint_us:
            return
        unit.generation += 1
        self._write_checkpoint(unit, unit.launch_event_id, final=False)
        self._clock.after(interval_s * SECOND_US, partial(self._checkpoint, unit, interval_s))

    def _on_notice(self, envelope: Envelope) -> None:
        notice = envelope.payload
        assert isinstance(notice, NoticeReceived)
        unit = self.units.get(notice.instance_id)
        if unit is None:
            return
        workload = unit.workload
        contract = workload.contract
        if not contract.checkpoint_on_notice or not workload.checkpoint_bytes:
            return
        write_s = workload.checkpoint_bytes / self._bandwidth
        left_s = (notice.deadline_at - self._clock.now_us) / SECOND_US
        if write_s <= contract.drain_budget_s and write_s < left_s:
            final = partial(self._final_checkpoint, unit, envelope.event_id)
            self._clock.after(int(write_s * SECOND_US), final)

    def _final_checkpoint(self, unit: Unit, notice_id: str) -> None:
        if self.units.get(unit.instance_id) is unit:
            unit.generation += 1
            self._write_checkpoint(unit, notice_id, final=True)

    def _write_checkpoint(self, unit: Unit, cause: str, final: bool) -> None:
        written_bytes = int(unit.workload.checkpoint_bytes * self._rng.uniform(0.9, 1.1))
        self._bus.emit(
            CheckpointWritten(
                instance_id=unit.instance_id,
                workload_id=unit.workload_id,
                generation=unit.generation,
                written_bytes=written_bytes,
                duration_s=round(written_bytes / self._bandwidth, 3),
                final=final,
            ),
            AGENT,
            causation_id=cause,
            discriminator=str(unit.generation),
        )
        unit.last_checkpoint_us = self._clock.now_us
        if final:
            unit.final_checkpoint_us = self._clock.now_us

    def _wasted_vcpu_s(self, unit: Unit) -> float:
        now_us, vcpu, workload = self._clock.now_us, unit.vcpu, unit.workload
        if unit.final_checkpoint_us is not None:
            return 0.0  # drained: the work stopped at the final checkpoint
        if workload.draft.stateless:
            return 0.0  # stateless replicas: nothing to redo
        semantics = workload.contract.restart.semantics
        unit_s = workload.draft.unit_s
        if semantics == "requeue" and unit_s:
            in_unit_us = (now_us - unit.launched_at) % (unit_s * SECOND_US)
            return round(vcpu * in_unit_us / SECOND_US, 3)
        since_us = unit.launched_at
        if semantics == "resume" and unit.last_checkpoint_us is not None:
            since_us = unit.last_checkpoint_us
        return round(vcpu * (now_us - since_us) / SECOND_US, 3)

    # -- usage ------------------------------------------------------------------------------

    def _usage_tick(self) -> None:
        for unit in self.units.values():
            self._usage(unit)

    def close_usage(self) -> None:
        """The run ends now: close the open usage interval of every live instance. (A unit
        whose interval is already closed at this microsecond writes nothing.)"""
        self._usage_tick()

    def _usage(self, unit: Unit) -> None:
        now_us = self._clock.now_us
        if now_us <= unit.usage_from_us:
            return
        self._bus.emit(
            UsageInterval(
                workload_id=unit.workload_id,
                instance_id=unit.instance_id,
                pool_id=unit.pool_id,
                purchase_model=unit.purchase_model,
                start_at=unit.usage_from_us,
                end_at=now_us,
                vcpu=unit.vcpu,
                used_vcpu_h=unit.vcpu * (now_us - unit.usage_from_us) / HOUR_US,
            ),
            ORCHESTRATOR,
            causation_id=unit.launch_event_id,
            discriminator=str(unit.usage_from_us),
        )
        unit.usage_from_us = now_us


def _forget_before(entries: OrderedDict[str, tuple[_T, int]], cutoff_us: int) -> None:
    """Drop the oldest entries (inserted in time order) older than `cutoff_us`."""
    while entries:
        first = next(iter(entries.values()))
        if first[1] >= cutoff_us:
            return
        entries.popitem(last=False)
