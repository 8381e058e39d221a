"""The simulated region and the deciders' loop over it (docs/simulator.md).

What it owns: a deterministic discrete-event simulator of a region (the provider seam at sim
time, the guaranteed tenants that reclaim capacity, the market feeds, the workloads and their
work, waves), the orchestrator seam it is driven through with the baseline stand-in
(`orchestration`, `orchestrator`), the deciders in the loop (`loop`), the demo's run, record and
report (`demo`, `record`, `fresh`, `report`, `materialise`), live notices for real agents
(`notices`), and the region served behind the OpenStack API subset the adapter uses (`cloud`).
Entry point: `RegionSim(SimConfig(...))`; `simulate(config)` yields every event.

What it may import: `schemas`, `contracts`, `streams`, `projections` (the demo materialises
them), `provider` (the seam it implements); PyYAML. Who calls it: replay (a re-decided run),
the command line (`spotcap demo`, `notices serve`, `cloud serve`), the benchmarks and tests.
"""

from sim.clock import EPOCH_US
from sim.demand import CLAIM_TAG
from sim.orchestration import (
    Orchestrator,
    OrchestratorHost,
    OrchestratorMisuseError,
    SimOrchestratorProvider,
)
from sim.orchestrator import BaselineOrchestrator, OrchestratorSettings
from sim.placement import PlacementPolicy, PlacementRequest, SpreadPolicy
from sim.provider import SimProvider
from sim.reclaimer import ReclaimSettings
from sim.region import RegionSim, SimConfig, simulate, workload_contract_files
from sim.summary import RunSummary
from sim.workloads import SimWorkload, WorkloadDraft

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
