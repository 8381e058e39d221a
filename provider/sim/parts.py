"""The parts of a simulated region every component works with."""

from __future__ import annotations

from dataclasses import dataclass

from provider.sim.bus import EventBus
from provider.sim.clock import Scheduler
from provider.sim.provider import SimProvider
from schemas.pools import PoolCatalogue


@dataclass(frozen=True, slots=True)
class SimParts:
    catalogue: PoolCatalogue
    provider: SimProvider
    bus: EventBus
    clock: Scheduler
