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
from dataclasses import dataclass
from functools import partial

from provider.base import Instance
from provider.sim.bus import EventBus
from provider.sim.clock import HOUR_US, SECOND_US, Scheduler
from provider.sim.workloads import SimWorkload
from schemas.events import CheckpointWritten, Envelope, NoticeReceived, UsageInterval, WorkWasted

AGENT = "sim/agent"
ORCHESTRATOR = "sim/orchestrator"


@dataclass(slots=True)
class Unit:
    """A workload's instance, with its checkpoints and the start of its open usage interval."""

    instance: Instance
    workload: SimWorkload
    run_id: str
    floor: bool
    launch_event_id: str
    usage_from_us: int
    generation: int = 0
    last_checkpoint_us: int | None = None
    final_checkpoint_us: int | None = None


class WorkloadSide:
    def __init__(
        self,
        bus: EventBus,
        clock: Scheduler,
        rng: random.Random,
        *,
        usage_interval_s: int,
        checkpoint_bandwidth_bytes_per_s: int,
    ) -> None:
        self._bus = bus
        self._clock = clock
        self._rng = rng
        self._bandwidth = checkpoint_bandwidth_bytes_per_s
        self.units: dict[str, Unit] = {}
        bus.subscribe(NoticeReceived.EVENT_TYPE, self._on_notice)
        usage_us = usage_interval_s * SECOND_US
        clock.every(clock.now_us + usage_us, usage_us, self._usage_tick)

    def start(self, unit: Unit) -> None:
        self.units[unit.instance.instance_id] = unit
        interval_s = unit.workload.contract.checkpoint.periodic_interval_s
        if interval_s:
            self._clock.after(interval_s * SECOND_US, partial(self._checkpoint, unit, interval_s))

    def end(self, unit: Unit) -> None:
        """The instance was deleted: close its usage."""
        self._usage(unit)
        del self.units[unit.instance.instance_id]

    def lose(self, unit: Unit, loss: Envelope) -> None:
        """The instance was lost: close its usage and charge the wasted work to the loss."""
        self.end(unit)
        i = unit.instance
        self._bus.emit(
            WorkWasted(
                workload_id=i.workload_id,
                instance_id=i.instance_id,
                pool_id=i.pool_id,
                wasted_vcpu_s=self._wasted_vcpu_s(unit),
                last_checkpoint_at=unit.last_checkpoint_us,
            ),
            ORCHESTRATOR,
            causation_id=loss.event_id,
            correlation_id=loss.correlation_id,
        )

    # -- checkpoints ------------------------------------------------------------------------

    def _checkpoint(self, unit: Unit, interval_s: int) -> None:
        if self.units.get(unit.instance.instance_id) is not unit or unit.final_checkpoint_us:
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
        if self.units.get(unit.instance.instance_id) is unit:
            unit.generation += 1
            self._write_checkpoint(unit, notice_id, final=True)

    def _write_checkpoint(self, unit: Unit, cause: str, final: bool) -> None:
        written_bytes = int(unit.workload.checkpoint_bytes * self._rng.uniform(0.9, 1.1))
        self._bus.emit(
            CheckpointWritten(
                instance_id=unit.instance.instance_id,
                workload_id=unit.instance.workload_id,
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
        now_us, vcpu, workload = self._clock.now_us, unit.instance.vcpu, unit.workload
        if unit.final_checkpoint_us is not None:
            return 0.0  # drained: the work stopped at the final checkpoint
        if workload.draft.stateless:
            return 0.0  # stateless replicas: nothing to redo
        semantics = workload.contract.restart.semantics
        unit_s = workload.draft.unit_s
        if semantics == "requeue" and unit_s:
            in_unit_us = (now_us - unit.instance.launched_at) % (unit_s * SECOND_US)
            return round(vcpu * in_unit_us / SECOND_US, 3)
        since_us = unit.instance.launched_at
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
        i = unit.instance
        self._bus.emit(
            UsageInterval(
                workload_id=i.workload_id,
                instance_id=i.instance_id,
                pool_id=i.pool_id,
                purchase_model=i.purchase_model,
                start_at=unit.usage_from_us,
                end_at=now_us,
                vcpu=i.vcpu,
                used_vcpu_h=i.vcpu * (now_us - unit.usage_from_us) / HOUR_US,
            ),
            ORCHESTRATOR,
            causation_id=unit.launch_event_id,
            discriminator=str(unit.usage_from_us),
        )
        unit.usage_from_us = now_us
