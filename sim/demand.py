"""The demand side: the workloads' schedulers turn each run into a capacity claim, and say
when its work is done.

* At a run's start: `capacity_claim_opened` (the pending work, normalised).
* The claim closes `fulfilled` as soon as the instances serving it (tagged `CLAIM_TAG` =
  the claim id) hold its vCPU; `expired` if they do not by its deadline (`claim_deadline_s`
  after it opened, at the end of that microsecond, so an orchestrator placing at the deadline
  itself is in time); `withdrawn` if the run ends first.
* At a run's end: `capacity_released` (its work finished). Scaling down is the
  orchestrator's part: it deletes the instances serving the claim.

Who places the capacity is not this module's business: it counts what the provider launched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from schemas.events import (
    CapacityClaimClosed,
    CapacityClaimOpened,
    CapacityReleased,
    ClaimOutcome,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
)
from sim.bus import EventBus
from sim.clock import SECOND_US, Scheduler
from sim.workloads import Run, SimWorkload

CLAIMS = "sim/claims"
CLAIM_TAG = "spotcap.io/claim"  # on an instance: the claim it serves


def claim_id_of(run: Run) -> str:
    return f"claim/{run.run_id}"


@dataclass(slots=True)
class _Open:
    """A claim not closed yet, and the instances serving it so far."""

    run: Run
    workload: SimWorkload
    opened_event_id: str
    serving_vcpu: dict[str, int] = field(default_factory=dict)  # instance id -> vCPU

    @property
    def placed_vcpu(self) -> int:
        return sum(self.serving_vcpu.values())


class DemandSide:
    def __init__(self, bus: EventBus, clock: Scheduler, *, claim_deadline_s: int) -> None:
        self._bus = bus
        self._clock = clock
        self._deadline_us = claim_deadline_s * SECOND_US
        self._open: dict[str, _Open] = {}  # claim id -> claim still open
        self._serving: dict[str, str] = {}  # instance id -> open claim it serves
        self._opened: dict[str, str] = {}  # run id -> its claim_opened event id, until released
        bus.subscribe(InstanceLaunched.EVENT_TYPE, self._on_launched)
        bus.subscribe(InstanceLost.EVENT_TYPE, self._on_gone)
        bus.subscribe(InstanceDeleted.EVENT_TYPE, self._on_gone)

    def admit(self, workload: SimWorkload, runs: list[Run]) -> None:
        """Schedule the runs of a workload whose contract is published."""
        for run in runs:
            self._clock.at(run.start_us, partial(self._start, workload, run))
            if run.end_us is not None:
                self._clock.at(run.end_us, partial(self._finish, workload, run))

    def _start(self, workload: SimWorkload, run: Run) -> None:
        claim_id = claim_id_of(run)
        opened = self._bus.emit(
            CapacityClaimOpened(
                claim_id=claim_id,
                workload_id=run.workload_id,
                scheduler=workload.scheduler,
                cluster=workload.draft.cluster,
                requested_vcpu=run.vcpu,
                reason=run.reason,
                sku_families=workload.draft.families,
                sizes_vcpu=workload.draft.sizes_vcpu,
                expected_duration_s=None
                if run.end_us is None
                else (run.end_us - run.start_us) // SECOND_US,
            ),
            CLAIMS,
        )
        self._opened[run.run_id] = opened.event_id
        self._open[claim_id] = _Open(run, workload, opened.event_id)
        deadline = partial(self._expire, claim_id)
        self._clock.at(self._clock.now_us + self._deadline_us, deadline, late=True)

    def _finish(self, workload: SimWorkload, run: Run) -> None:
        opened_id = self._opened.pop(run.run_id)
        claim_id = claim_id_of(run)
        if claim_id in self._open:
            self._close(claim_id, "withdrawn", "the work finished before it was placed")
        self._bus.emit(
            CapacityReleased(
                claim_id=claim_id,
                workload_id=run.workload_id,
                scheduler=workload.scheduler,
                released_vcpu=run.vcpu,
                reason=f"{run.reason} finished",
            ),
            CLAIMS,
            causation_id=opened_id,
        )

    # -- what serves the open claims --------------------------------------------------------

    def _on_launched(self, envelope: Envelope) -> None:
        launched = envelope.payload
        assert isinstance(launched, InstanceLaunched)
        claim_id = launched.tags.get(CLAIM_TAG)
        claim = self._open.get(claim_id) if claim_id else None
        if claim is None or claim_id is None:
            return
        claim.serving_vcpu[launched.instance_id] = launched.vcpu
        self._serving[launched.instance_id] = claim_id
        if claim.placed_vcpu >= claim.run.vcpu:
            self._close(claim_id, "fulfilled", "placed")

    def _on_gone(self, envelope: Envelope) -> None:
        gone = envelope.payload
        assert isinstance(gone, InstanceLost | InstanceDeleted)
        claim_id = self._serving.pop(gone.instance_id, None)
        if claim_id is not None:
            del self._open[claim_id].serving_vcpu[gone.instance_id]

    def _expire(self, claim_id: str) -> None:
        claim = self._open.get(claim_id)
        if claim is not None:
            placed, requested = claim.placed_vcpu, claim.run.vcpu
            deadline_s = self._deadline_us // SECOND_US
            reason = f"only {placed} of {requested} vCPU placed within {deadline_s} s"
            self._close(claim_id, "expired", reason)

    def _close(self, claim_id: str, outcome: ClaimOutcome, reason: str) -> None:
        claim = self._open.pop(claim_id)
        for instance_id in claim.serving_vcpu:
            del self._serving[instance_id]
        run = claim.run
        self._bus.emit(
            CapacityClaimClosed(
                claim_id=claim_id,
                workload_id=run.workload_id,
                scheduler=claim.workload.scheduler,
                requested_vcpu=run.vcpu,
                fulfilled_vcpu=min(claim.placed_vcpu, run.vcpu),
                outcome=outcome,
                reason=reason,
            ),
            CLAIMS,
            causation_id=claim.opened_event_id,
        )
