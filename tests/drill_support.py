"""A simulated region with the deciders in the loop and simulated node agents, advanced second
by second, whose events a drill reads and writes (tests of the daily drill)."""

from __future__ import annotations

from collections import Counter

from provider.base import OWNER_TAG
from schemas.events import Envelope, NoticeReceived
from sim import SimConfig
from sim.clock import SECOND_US
from sim.live.tap import SimulatedAgents
from sim.loop import DecidersOrchestrator
from sim.region import RegionSim

REGION = "drill"
CONFIG = SimConfig(seed=3, days=0.5, region=REGION, workloads=60)


class DrilledRegion:
    """`RegionSim` with the deciders and the agents' drains; `events` holds everything, the
    drill's own events included (`write`)."""

    def __init__(self, config: SimConfig = CONFIG) -> None:
        owner = config.orchestrator.orchestrator_id
        self.sim = RegionSim(config, orchestrator=DecidersOrchestrator(owner))
        self.agents = SimulatedAgents(config.region, drain_s=20)
        self.events: list[Envelope] = []
        self.written: list[Envelope] = []
        self._collect()

    @property
    def provider(self):  # type: ignore[no-untyped-def]  # the SimProvider, at sim time
        return self.sim.provider

    def read(self) -> list[Envelope]:
        return sorted(self.events, key=lambda e: e.occurred_at)

    def write(self, events: list[Envelope]) -> None:
        self.written += events
        self.events += events

    def advance(self, seconds: int, step_s: int = 1) -> None:
        until = self.sim.now_us() + seconds * SECOND_US
        while self.sim.now_us() < until:
            self.sim.run_until(min(until, self.sim.now_us() + step_s * SECOND_US))
            self._collect()

    def busiest_pool(self) -> tuple[str, int]:
        """The reclaimable pool with most of the orchestrator's running instances."""
        owner = self.sim.config.orchestrator.orchestrator_id
        counts = Counter(
            i.pool_id
            for i in self.provider.list_by_tag(OWNER_TAG, owner)
            if i.purchase_model == "reclaimable" and i.state == "active"
        )
        return counts.most_common(1)[0]

    def _collect(self) -> None:
        fresh = self.provider.poll_events(len(self.sim.bus))
        for event in fresh:
            if isinstance(event.payload, NoticeReceived):
                self.agents.noticed(event)
        self.events += fresh
        self.events += self.agents.due(self.sim.now_us())
