"""A deterministic discrete-event simulator of a region: the provider seam at sim time, the
guaranteed tenants that reclaim capacity, the market feeds, the workloads, and a pluggable
orchestrator (docs/simulator.md).

Entry point: `RegionSim(SimConfig(...))`; `simulate(config)` yields every event of a run.
"""

from provider.sim.clock import EPOCH_US
from provider.sim.demand import CLAIM_TAG
from provider.sim.orchestration import (
    Orchestrator,
    OrchestratorHost,
    OrchestratorMisuseError,
    SimOrchestratorProvider,
)
from provider.sim.orchestrator import BaselineOrchestrator, OrchestratorSettings
from provider.sim.placement import PlacementPolicy, PlacementRequest, SpreadPolicy
from provider.sim.provider import SimProvider
from provider.sim.reclaimer import ReclaimSettings
from provider.sim.region import RegionSim, SimConfig, simulate, workload_contract_files
from provider.sim.summary import RunSummary
from provider.sim.workloads import SimWorkload, WorkloadDraft

__all__ = [
    "CLAIM_TAG",
    "EPOCH_US",
    "BaselineOrchestrator",
    "Orchestrator",
    "OrchestratorHost",
    "OrchestratorMisuseError",
    "OrchestratorSettings",
    "PlacementPolicy",
    "PlacementRequest",
    "ReclaimSettings",
    "RegionSim",
    "RunSummary",
    "SimConfig",
    "SimOrchestratorProvider",
    "SimProvider",
    "SimWorkload",
    "SpreadPolicy",
    "WorkloadDraft",
    "simulate",
    "workload_contract_files",
]
