"""The parts of a simulated region every component works with."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.pools import PoolCatalogue
from sim.bus import EventBus
from sim.clock import Scheduler
from sim.provider import SimProvider


@dataclass(frozen=True, slots=True)
class SimParts:
    catalogue: PoolCatalogue
    provider: SimProvider
    bus: EventBus
    clock: Scheduler
