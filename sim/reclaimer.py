"""The guaranteed tenants: their demand is what reclaims lent capacity.

Two processes, both deterministic in the seed:

* **Background reclaims.** Each reclaimable instance is reclaimed at a constant rate per
  instance-hour, so a pool sees a Poisson process at about its expected rate times its instance
  count: ``expected_interruptions_per_h`` x a per-pool factor in [0.7, 1.3] (pools are roughly
  as their record and price say), or x `misbehaving_factor` for the misbehaving pools.
* **Hall-wide waves.** A guaranteed tenant's surge in one hall: the hall's reclaimable pools stop
  lending for `pressure` (1-4 h), and a `share` (by default 40-70%) of the hall's reclaimable
  instances are reclaimed within `spread` (2-8 minutes), all under the wave's correlation id.
  The wave decides the path for all its instances: half the waves are *advised* (every instance
  gets an advisory the same `advisory_lead_s` ahead of its notice), the others give no
  advisory at all; every notice of the wave is the same `notice_s` long. So the wave's
  advisories, its notices and its losses each fall within one `spread` window.

Each reclaim comes without notice with probability `no_notice_share` (in a wave, the loss comes
when its notice would have ended); otherwise a background reclaim gets an advisory some minutes
ahead with probability `advisory_share`, then the hard notice (120-140 s).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial

from schemas.events import Envelope, InstanceLaunched
from sim.clock import HOUR_US, SECOND_US
from sim.parts import SimParts


@dataclass(frozen=True, slots=True)
class ReclaimSettings:
    no_notice_share: float = 0.05
    advisory_share: float = 0.3
    advisory_lead_s: tuple[int, int] = (180, 900)
    notice_s: tuple[int, int] = (120, 140)
    misbehaving_pools: int = 2
    misbehaving_factor: float = 12.0
    waves_per_day: float = 0.4
    wave_share: tuple[float, float] = (0.4, 0.7)
    wave_spread_s: tuple[int, int] = (120, 480)
    wave_pressure_s: tuple[int, int] = (3600, 4 * 3600)
    background: bool = True


@dataclass(frozen=True, slots=True)
class Wave:
    """A planned hall-wide wave."""

    wave_id: str
    hall: str
    start_us: int
    share: float
    spread_s: int
    pressure_s: int
    advised: bool
    advisory_lead_s: int  # 0 when not advised
    notice_s: int

    @property
    def path_s(self) -> int:
        """From the start of an instance's reclaim (advisory or notice) to its loss."""
        return self.advisory_lead_s + self.notice_s


class Reclaimer:
    def __init__(
        self, parts: SimParts, rng: random.Random, settings: ReclaimSettings, *, end_us: int
    ) -> None:
        self._catalogue = catalogue = parts.catalogue
        self._provider = parts.provider
        self._clock = clock = parts.clock
        self._rng = rng
        self.settings = settings
        self._end_us = end_us
        reclaimable = catalogue.pools("reclaimable")
        count = min(settings.misbehaving_pools, len(reclaimable))
        chosen = rng.sample([p.pool_id for p in reclaimable], count)
        self.misbehaving_pool_ids: tuple[str, ...] = tuple(sorted(chosen))
        self.rate_per_instance_h: dict[str, float] = {}
        for pool in reclaimable:
            factor = rng.uniform(0.7, 1.3)
            if pool.pool_id in self.misbehaving_pool_ids:
                factor = settings.misbehaving_factor
            self.rate_per_instance_h[pool.pool_id] = pool.expected_interruptions_per_h * factor
        self.waves = self._plan_waves(clock.now_us, end_us)
        for wave in self.waves:
            clock.at(wave.start_us, partial(self._wave, wave))
        if settings.background:
            parts.bus.subscribe(InstanceLaunched.EVENT_TYPE, self._on_launch)

    def _plan_waves(self, start_us: int, end_us: int) -> list[Wave]:
        s, rng, halls = self.settings, self._rng, self._catalogue.halls()
        waves: list[Wave] = []
        if s.waves_per_day <= 0 or not halls:
            return waves
        mean_gap_us = 24 * HOUR_US / s.waves_per_day
        at_us = start_us + int(rng.expovariate(1.0) * mean_gap_us)
        while at_us < end_us:
            hall = rng.choice(halls)
            share = rng.uniform(*s.wave_share)
            spread_s = rng.randint(*s.wave_spread_s)
            pressure_s = rng.randint(*s.wave_pressure_s)
            advised = rng.random() < 0.5
            waves.append(
                Wave(
                    wave_id=f"wave-{len(waves) + 1:04d}",
                    hall=hall,
                    start_us=at_us,
                    share=share,
                    spread_s=spread_s,
                    pressure_s=pressure_s,
                    advised=advised,
                    advisory_lead_s=rng.randint(*s.advisory_lead_s) if advised else 0,
                    notice_s=rng.randint(*s.notice_s),
                )
            )
            at_us += int(rng.expovariate(1.0) * mean_gap_us)
        return waves

    # -- background reclaims ----------------------------------------------------------------

    def _on_launch(self, envelope: Envelope) -> None:
        payload = envelope.payload
        assert isinstance(payload, InstanceLaunched)
        rate = self.rate_per_instance_h.get(payload.pool_id, 0.0)
        if rate <= 0:
            return
        lifetime_us = int(self._rng.expovariate(rate) * HOUR_US)
        if self._clock.now_us + lifetime_us < self._end_us:  # else it would never run: no entry
            self._clock.after(lifetime_us, partial(self._reclaim, payload.instance_id))

    def _reclaim(self, instance_id: str) -> None:
        if not self._provider.is_live(instance_id):
            return
        s, rng = self.settings, self._rng
        with_notice = rng.random() >= s.no_notice_share
        lead_s = rng.randint(*s.advisory_lead_s) if rng.random() < s.advisory_share else 0
        notice_s = rng.randint(*s.notice_s)
        self._provider.start_reclaim(
            instance_id, notice_s, lead_s or None, None, with_notice=with_notice
        )

    # -- waves ------------------------------------------------------------------------------

    def start_wave(self, wave: Wave) -> None:
        """Start `wave` now, beside the planned ones (a scenario's own wave)."""
        self._wave(wave)

    def _wave(self, wave: Wave) -> None:
        provider, rng = self._provider, self._rng
        provider.set_hall_pressure(wave.hall, True)
        self._clock.after(
            wave.pressure_s * SECOND_US, lambda: provider.set_hall_pressure(wave.hall, False)
        )
        no_notice_share = self.settings.no_notice_share
        for pool in self._catalogue.in_hall(wave.hall):
            if pool.purchase_model != "reclaimable":
                continue
            candidates = provider.reclaimable_ids(pool.pool_id)
            taken = rng.sample(candidates, round(len(candidates) * wave.share))
            for instance_id in taken:
                offset_us = rng.randint(0, wave.spread_s * SECOND_US)
                with_notice = rng.random() >= no_notice_share
                if not with_notice:  # lost when its notice would have ended, unannounced
                    offset_us += wave.path_s * SECOND_US
                reclaim = partial(self._wave_reclaim, wave, instance_id, with_notice)
                self._clock.after(offset_us, reclaim)

    def _wave_reclaim(self, wave: Wave, instance_id: str, with_notice: bool) -> None:
        """Put one of the wave's instances on the path the wave decided: no advisory in a
        plain wave, the wave's advisory lead in an advised one, and the wave's notice."""
        self._provider.start_reclaim(
            instance_id,
            wave.notice_s,
            wave.advisory_lead_s or None,
            wave.wave_id,
            with_notice=with_notice,
        )
