"""The live region's scenario: a small region whose sim time runs at a declared speed-up, one
pool that misbehaves (reclaimed far above its record and price) and one hall-wide wave at a
set time, in the hall that then runs the most reclaimable instances.

The misbehaving pool is chosen when it starts to misbehave (`misbehave_at_s`): the
reclaimable pool outside the wave's hall that runs the most instances then (the deciders chose
where to place, so no pool can be named before), each of its instances reclaimed with a notice,
one every `misbehave_every_s` from `agents_lead_s` later (time for the real agents of its first
`agents` instances to start: `Plan.agent_instances`), and what is launched there later
reclaimed at `misbehaving_rate_per_h` per instance-hour. A moment that finds nothing to act on
(no reclaimable instance placed yet, after a slow start) comes again `retry_s` later. The
`Plan` says what it chose.

Everything else is the simulator's own (`sim.region`): the workloads, their claims and their
work, the rate cards and forecasts. What differs from the demo's region is what a live run needs
to be short and readable: two halls, usage intervals every 10 sim minutes (not 6 hours), claims
that stay open long enough for services that answer in wall seconds, no planned waves but the
scenario's one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from sim.clock import SECOND_US
from sim.orchestrator import OrchestratorSettings
from sim.reclaimer import ReclaimSettings, Wave
from sim.region import RegionSim, SimConfig

OWNER = "spotcap"
"""The owner tag of the live region's instances: the deciders' and the actuator's default."""

WAVE_ID = "wave-0001"


@dataclass(frozen=True, slots=True)
class Scenario:
    """What happens in the live region, in sim seconds from its start."""

    seed: int = 1
    span_s: int = 3600
    workloads: int = 10
    region: str = "demo"
    wave_at_s: int = 1200
    wave_share: float = 0.6
    wave_spread_s: int = 120
    wave_pressure_s: int = 1800
    notice_s: int = 120
    misbehave_at_s: int = 420
    agents: int = 2
    """Real agents, on the misbehaving pool's first instances (the rest are simulated)."""
    agents_lead_s: int = 480
    """From choosing the misbehaving pool to its first reclaim: time for its agents to start."""
    misbehave_every_s: int = 30
    misbehaving_rate_per_h: float = 6.0
    usage_interval_s: int = 600
    retry_s: int = 60
    """A moment that finds no reclaimable instance to act on is tried again this much later."""
    claim_deadline_s: int = 1800

    def sim_config(self) -> SimConfig:
        reclaims = replace(
            ReclaimSettings(),
            misbehaving_pools=0,
            waves_per_day=0.0,
        )
        return SimConfig(
            seed=self.seed,
            days=self.span_s / 86_400,
            region=self.region,
            halls=2,
            workloads=self.workloads,
            usage_interval_s=self.usage_interval_s,
            claim_deadline_s=self.claim_deadline_s,
            reclaims=reclaims,
            orchestrator=OrchestratorSettings(orchestrator_id=OWNER),
        )

    def plan(self, sim: RegionSim) -> Plan:
        """Put the scenario on `sim`'s clock (before the region runs)."""
        plan = Plan(self, sim)
        start_us = sim.config.start_us
        if self.misbehave_at_s < self.span_s:
            sim.clock.at(start_us + self.misbehave_at_s * SECOND_US, plan.misbehave)
        if self.wave_at_s < self.span_s:
            sim.clock.at(start_us + self.wave_at_s * SECOND_US, plan.wave)
        return plan


@dataclass
class Plan:
    """The scenario on one region: what it chose when its moments came."""

    scenario: Scenario
    sim: RegionSim
    misbehaving_pool_ids: tuple[str, ...] = ()
    wave_hall: str | None = None
    agent_instances: list[tuple[str, str, str]] = field(default_factory=list)
    """(instance, workload, pool) of the nodes that get a real agent, once chosen."""
    _taken: set[str] = field(default_factory=set)

    def _running(self, pool_id: str) -> int:
        return len(self.sim.provider.reclaimable_ids(pool_id))

    def _reclaimable(self, hall: str) -> list[str]:
        catalogue = self.sim.catalogue
        return [p.pool_id for p in catalogue.in_hall(hall) if p.purchase_model == "reclaimable"]

    def _busiest_hall(self) -> str:
        halls = sorted(self.sim.catalogue.halls())
        return max(halls, key=lambda h: sum(map(self._running, self._reclaimable(h))))

    def misbehave(self) -> None:
        wave_hall = self._busiest_hall()
        others = [p for h in sorted(self.sim.catalogue.halls()) if h != wave_hall
                  for p in self._reclaimable(h)] or self._reclaimable(wave_hall)  # fmt: skip
        pool_id = max(others, key=self._running)
        if not self._running(pool_id):  # nothing placed there yet: choose a little later
            self._again(self.misbehave)
            return
        self.misbehaving_pool_ids = (pool_id,)
        self.sim.reclaimer.rate_per_instance_h[pool_id] = self.scenario.misbehaving_rate_per_h
        every_us = self.scenario.misbehave_every_s * SECOND_US
        lead_us = self.scenario.agents_lead_s * SECOND_US
        ids = self.sim.provider.reclaimable_ids(pool_id)
        for instance_id in ids[: self.scenario.agents]:
            workload_id = self.sim.provider.get(instance_id).workload_id
            self.agent_instances.append((instance_id, workload_id, pool_id))
        for n, instance_id in enumerate(ids):
            self.sim.clock.after(lead_us + n * every_us, partial(self._reclaim, instance_id))

    def _again(self, action: Callable[[], None]) -> None:
        """`action` again after `retry_s`, within the span."""
        at_us = self.sim.now_us() + self.scenario.retry_s * SECOND_US
        if at_us < self.sim.config.end_us:
            self.sim.clock.at(at_us, action)

    def _reclaim(self, instance_id: str) -> None:
        self.sim.provider.start_reclaim(instance_id, self.scenario.notice_s)

    def wave(self) -> None:
        s = self.scenario
        hall = self._busiest_hall()
        if not sum(map(self._running, self._reclaimable(hall))):  # nothing to take back yet
            self._again(self.wave)
            return
        self.wave_hall = hall
        self.sim.reclaimer.start_wave(
            Wave(
                wave_id=WAVE_ID,
                hall=hall,
                start_us=self.sim.now_us(),
                share=s.wave_share,
                spread_s=s.wave_spread_s,
                pressure_s=s.wave_pressure_s,
                advised=False,
                advisory_lead_s=0,
                notice_s=s.notice_s,
            )
        )
