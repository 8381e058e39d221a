"""A simulated region, composed: the provider, its market, the guaranteed tenants, the
workloads (their contracts compiled by the real compiler against the region's pools, their
claims and their work), and an orchestrator behind the seam in `sim.orchestration`
(the baseline stand-in unless another is given). The entry point of the simulation.

    sim = RegionSim(SimConfig(seed=1, days=7))
    for batch in sim.run():          # one list of envelopes per sim hour, oldest first
        ...                          # write them to the log

    RegionSim(config, orchestrator=MyOrchestrator())   # another orchestrator drives the region

The orchestrator sees every event as it is published and acts at the same sim time, whatever
the step `run` yields batches at. Or use `sim.provider` as a `CapacityProvider` at sim time:
call launch/delete/list/reclaim, advance with `sim.run_until(t_us)`, and collect the facts
with `sim.provider.poll_events()`.

Determinism: every random choice comes from `random.Random` streams seeded from the seed and
the stream's purpose (ids, market, reclaims, workloads, work), so a change to one part does
not reshuffle the others; nothing reads the wall clock.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from contracts import CompileResult
from schemas.events import Envelope
from schemas.pools import PoolCatalogue
from sim.approver import Approvers
from sim.bus import EventBus
from sim.clock import DAY_US, EPOCH_US, HOUR_US, Scheduler
from sim.contracts import compile_workload_contracts
from sim.demand import DemandSide
from sim.market import Market
from sim.orchestration import Orchestrator, RegionHost
from sim.orchestrator import BaselineOrchestrator, OrchestratorSettings
from sim.parts import SimParts
from sim.placement import PlacementPolicy
from sim.pools import demo_region
from sim.provider import SimProvider
from sim.reclaimer import Reclaimer, ReclaimSettings
from sim.work import WorkloadSide
from sim.workloads import (
    CHECKPOINT_BANDWIDTH_BYTES_PER_S,
    WorkloadDraft,
    admitted,
    draft_workloads,
    plan_runs,
)


@dataclass(frozen=True)
class SimConfig:
    """Everything a run depends on; the same config gives the same events, byte for byte."""

    seed: int = 1
    days: float = 7.0
    region: str = "demo"
    halls: int = 4
    workloads: int = 220
    start_us: int = EPOCH_US
    rate_card_interval_s: int = 300
    forward_capacity_interval_s: int = 3600
    claim_deadline_s: int = 60  # a claim not placed by then expires
    usage_interval_s: int = 6 * 3600
    approval_delay_s: int = 15 * 60  # an approver answers an escalated fallback this late
    checkpoint_bandwidth_bytes_per_s: int = CHECKPOINT_BANDWIDTH_BYTES_PER_S
    reclaims: ReclaimSettings = field(default_factory=ReclaimSettings)
    # The owner identity (the provider deletes nothing else) and the baseline's settings.
    orchestrator: OrchestratorSettings = field(default_factory=OrchestratorSettings)
    catalogue: PoolCatalogue | None = None  # None: demo_region(seed, region, halls)

    @property
    def end_us(self) -> int:
        return self.start_us + int(self.days * DAY_US)


class RegionSim:
    def __init__(
        self,
        config: SimConfig,
        policy: PlacementPolicy | None = None,
        *,
        orchestrator: Orchestrator | None = None,
    ) -> None:
        """`orchestrator` drives the region (default: the baseline with `policy`)."""
        self.config = config
        seed = config.seed
        self.catalogue = config.catalogue or demo_region(seed, config.region, config.halls)
        self.clock = Scheduler(config.start_us)
        self.bus = EventBus(config.region, self.clock, _stream(seed, "ids"))
        self.provider = SimProvider(
            self.catalogue,
            self.bus,
            self.clock,
            config.orchestrator.orchestrator_id,
            _stream(seed, "instances"),
        )
        self.orchestrator: Orchestrator = orchestrator or BaselineOrchestrator(
            config.orchestrator, policy
        )
        # Attached before anything is published: the orchestrator sees every event.
        self.host = RegionHost(
            self.orchestrator, self.catalogue, self.provider, self.bus, self.clock
        )
        parts = SimParts(self.catalogue, self.provider, self.bus, self.clock)
        self.market = Market(
            parts,
            _stream(seed, "market"),
            rate_card_interval_s=config.rate_card_interval_s,
            forward_capacity_interval_s=config.forward_capacity_interval_s,
        )
        self.reclaimer = Reclaimer(
            parts, _stream(seed, "reclaims"), config.reclaims, end_us=config.end_us
        )
        self.market.publish_catalogue()
        workload_rng = _stream(seed, "workloads")
        self.drafts = _drafts(config, workload_rng)
        self.contracts: CompileResult = compile_workload_contracts(
            {d.source_path: d.contract_yaml for d in self.drafts},
            self.catalogue.pools(),
            published_at_us=config.start_us,
            region=config.region,
        )
        # Admission (ADR-04): a workload whose contract the compiler refused never runs here.
        self.workloads = admitted(self.drafts, self.contracts)
        for published in self.contracts.events:
            self.bus.publish(published)
        by_id = {w.workload_id: w for w in self.workloads}
        # The work stream keeps its old name ("orchestrator"): the same seed, the same bytes.
        self.work = WorkloadSide(
            self.bus,
            self.clock,
            _stream(seed, "orchestrator"),
            by_id,
            usage_interval_s=config.usage_interval_s,
            checkpoint_bandwidth_bytes_per_s=config.checkpoint_bandwidth_bytes_per_s,
        )
        self.approvers = Approvers(
            self.bus, self.clock, self.catalogue, delay_s=config.approval_delay_s
        )
        self.host.start()
        self.demand = DemandSide(self.bus, self.clock, claim_deadline_s=config.claim_deadline_s)
        for workload in self.workloads:
            runs = plan_runs(workload_rng, workload, config.start_us, config.end_us)
            self.demand.admit(workload, runs)

    @property
    def misbehaving_pool_ids(self) -> tuple[str, ...]:
        return self.reclaimer.misbehaving_pool_ids

    def now_us(self) -> int:
        return self.clock.now_us

    def run_until(self, until_us: int) -> None:
        """Advance sim time to `until_us` (capped at the configured end). Reaching the end
        closes the run: every instance still running gets its last `usage_interval`, up to the
        end (actions due at the end itself never run)."""
        end_us = self.config.end_us
        self.clock.run_until(min(until_us, end_us))
        if self.clock.now_us >= end_us:
            self.work.close_usage()

    def run(self, step_us: int = HOUR_US) -> Iterator[list[Envelope]]:
        """Run to the end, yielding the events of each `step_us` of sim time."""
        yield self.provider.poll_events(len(self.bus))  # what the start published
        while self.clock.now_us < self.config.end_us:
            self.run_until(self.clock.now_us + step_us)
            yield self.provider.poll_events(len(self.bus))


def simulate(config: SimConfig) -> Iterator[Envelope]:
    """Every event of a run of `config`, in order."""
    for batch in RegionSim(config).run():
        yield from batch


def workload_contract_files(config: SimConfig) -> dict[Path, str]:
    """The contract file of every simulated workload of `config` (path -> YAML), as its owner
    wrote it: what `RegionSim(config)` compiles."""
    return {
        d.source_path: d.contract_yaml for d in _drafts(config, _stream(config.seed, "workloads"))
    }


def _drafts(config: SimConfig, rng: random.Random) -> list[WorkloadDraft]:
    return draft_workloads(rng, config.workloads, config.region, config.start_us)


def _stream(seed: int, purpose: str) -> random.Random:
    return random.Random(f"spotcap-sim/{seed}/{purpose}")
