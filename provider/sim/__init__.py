"""A deterministic discrete-event simulator of a region: the provider seam at sim time, the
guaranteed tenants that reclaim capacity, the market feeds, and the workloads (docs/simulator.md).

Entry point: `RegionSim(SimConfig(...))`; `simulate(config)` yields every event of a run.
"""

from provider.sim.clock import EPOCH_US
from provider.sim.orchestrator import OrchestratorSettings
from provider.sim.placement import PlacementPolicy, PlacementRequest, SpreadPolicy
from provider.sim.provider import SimProvider
from provider.sim.reclaimer import ReclaimSettings
from provider.sim.region import RegionSim, SimConfig, simulate, workload_contract_files
from provider.sim.summary import RunSummary
from provider.sim.workloads import SimWorkload, WorkloadDraft

__all__ = [
    "EPOCH_US",
    "OrchestratorSettings",
    "PlacementPolicy",
    "PlacementRequest",
    "ReclaimSettings",
    "RegionSim",
    "RunSummary",
    "SimConfig",
    "SimProvider",
    "SimWorkload",
    "SpreadPolicy",
    "WorkloadDraft",
    "simulate",
    "workload_contract_files",
]
