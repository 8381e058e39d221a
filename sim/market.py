"""The provider's market feeds: the catalogue, committed reservations, rate cards, forward capacity.

* At the start: `pool_registered` for every pool, and one `reservation_committed` (a Blazar
  lease, shared floor capacity) per committed pool covering 30 days.
* Every `rate_card_interval_s` (5 minutes, provider commitment 3): a `rate_card` per pool. A
  reclaimable pool's price drifts with its hall's utilisation by the guaranteed tenants
  (a diurnal swing, a slow random walk, and a jump while a wave's surge lasts); guaranteed and
  committed pools are at list price.
* Every `forward_capacity_interval_s` (hourly): a `forward_capacity` per pool: what it can lend
  now (nothing in a hall under a wave's surge), held for the next interval.
"""

from __future__ import annotations

import math
import random

from schemas.events import ForwardCapacity, RateCard, ReservationCommitted
from sim.clock import DAY_US, SECOND_US
from sim.parts import SimParts

PRODUCER = "sim/provider"
RESERVATION_DAYS = 30


class Market:
    def __init__(
        self,
        parts: SimParts,
        rng: random.Random,
        *,
        rate_card_interval_s: int,
        forward_capacity_interval_s: int,
    ) -> None:
        self._catalogue = catalogue = parts.catalogue
        self._provider = parts.provider
        self._bus = parts.bus
        self._clock = clock = parts.clock
        self._rng = rng
        self._rate_card_s = rate_card_interval_s
        self._forward_s = forward_capacity_interval_s
        halls = catalogue.halls()
        self.base_utilisation = {h: rng.uniform(0.55, 0.75) for h in halls}
        self._walk = dict.fromkeys(halls, 0.0)
        now_us = clock.now_us
        clock.every(now_us, rate_card_interval_s * SECOND_US, self._rate_cards)
        clock.every(now_us, forward_capacity_interval_s * SECOND_US, self._forward_capacity)

    def publish_catalogue(self) -> None:
        """`pool_registered` per pool, then the committed reservations."""
        for pool in self._catalogue:
            self._bus.emit(pool.registered(), PRODUCER)
        start_us = self._clock.now_us
        for pool in self._catalogue.pools("committed"):
            self._bus.emit(
                ReservationCommitted(
                    reservation_id=self._bus.fact_id(),
                    pool_id=pool.pool_id,
                    reserved_vcpu=pool.capacity_vcpu,
                    start_at=start_us,
                    end_at=start_us + RESERVATION_DAYS * DAY_US,
                    price_per_vcpu_h_eur_micros=pool.price_per_vcpu_h_eur_micros,
                ),
                PRODUCER,
            )

    def utilisation(self, hall: str) -> float:
        """The guaranteed tenants' share of the hall's hosts now."""
        day_fraction = (self._clock.now_us % DAY_US) / DAY_US
        diurnal = 0.08 * math.sin(2 * math.pi * (day_fraction - 0.3))  # peaks mid-afternoon
        surge = 0.2 if self._provider.hall_pressed(hall) else 0.0
        return min(0.98, self.base_utilisation[hall] + diurnal + self._walk[hall] + surge)

    def _rate_cards(self) -> None:
        for hall in self._walk:
            self._walk[hall] = 0.95 * self._walk[hall] + self._rng.gauss(0.0, 0.01)
        now_us = self._clock.now_us
        until_us = now_us + self._rate_card_s * SECOND_US
        uplift = {
            h: 1.0 + 1.5 * (self.utilisation(h) - b) for h, b in self.base_utilisation.items()
        }
        for pool in self._catalogue:
            price = pool.price_per_vcpu_h_eur_micros
            if pool.purchase_model == "reclaimable":
                ceiling = 0.95 * pool.guaranteed_price_per_vcpu_h_eur_micros
                price = round(min(ceiling, max(0.5 * price, price * uplift[pool.hall])))
            self._bus.emit(
                RateCard(
                    pool_id=pool.pool_id,
                    purchase_model=pool.purchase_model,
                    price_per_vcpu_h_eur_micros=price,
                    guaranteed_price_per_vcpu_h_eur_micros=pool.guaranteed_price_per_vcpu_h_eur_micros,
                    valid_from_at=now_us,
                    valid_until_at=until_us,
                ),
                PRODUCER,
            )

    def _forward_capacity(self) -> None:
        for pool in self._catalogue:
            self._bus.emit(
                ForwardCapacity(
                    pool_id=pool.pool_id,
                    horizon_s=self._forward_s,
                    available_vcpu=max(0, self._provider.room_vcpu(pool.pool_id)),
                ),
                PRODUCER,
            )
