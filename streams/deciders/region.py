"""The region as the deciders see it: pools, prices, room, reservations, exclusions, the ranking.

`RegionView` is a pure fold over the market topic (catalogue, rate cards, forward capacity,
reservations), the lifecycle facts that change how much of a pool the orchestrator uses, and
the watcher's and the scorer's decisions. Key: the region. It decides nothing; the workload
deciders (planner, replacement, fallback) read it as a broadcast view, like a Faust global
table: the runtime folds every input into the view first, then steps the deciders with it.

A pool's **room** is what its latest `forward_capacity` said it could lend, less what the
orchestrator launched into it since and plus what it released since (the forecast already
counted what was running then). A committed pool's room is its active reservations less what
the orchestrator runs on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from schemas.events import (
    Envelope,
    ForwardCapacity,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    KeyringTrusted,
    PoolExcluded,
    PoolRanked,
    PoolReadmitted,
    PoolRegistered,
    PurchaseModel,
    RateCard,
    ReservationCommitted,
)
from streams.deciders.authority import ChangeTrust, trust_of
from streams.deciders.maps import drop, put, replace


@dataclass(frozen=True, slots=True)
class PoolFacts:
    """What the catalogue says of a pool."""

    pool_id: str
    sku_family: str
    instance_vcpu: int
    hall: str
    correlation_group: str
    purchase_model: PurchaseModel
    capacity_vcpu: int
    expected_per_h: float | None

    @classmethod
    def of(cls, p: PoolRegistered) -> PoolFacts:
        return cls(
            p.pool_id,
            p.sku_family,
            p.instance_vcpu,
            p.hall,
            p.correlation_group,
            p.purchase_model,
            p.capacity_vcpu,
            p.expected_interruption_per_h,
        )


@dataclass(frozen=True, slots=True)
class Price:
    """A pool's latest rate card."""

    price_per_vcpu_h_eur_micros: int
    guaranteed_price_per_vcpu_h_eur_micros: int
    event_id: str


@dataclass(frozen=True, slots=True)
class Forecast:
    """A pool's latest forward capacity, and the orchestrator's launches net of releases since."""

    available_vcpu: int
    event_id: str
    used_since_vcpu: int = 0


@dataclass(frozen=True, slots=True)
class Reservation:
    reserved_vcpu: int
    start_at: int
    end_at: int


@dataclass(frozen=True, slots=True)
class Ranked:
    """A pool's place in the latest ranking round."""

    rank: int
    score: float
    observed_per_h: float


@dataclass(frozen=True, slots=True)
class RegionView:
    """The region's pools and market, as of `now_us` (the latest event time folded in)."""

    region: str = ""
    now_us: int = 0
    pools: Mapping[str, PoolFacts] = field(default_factory=dict)
    prices: Mapping[str, Price] = field(default_factory=dict)
    forecasts: Mapping[str, Forecast] = field(default_factory=dict)
    reservations: Mapping[str, tuple[Reservation, ...]] = field(default_factory=dict)
    # The orchestrator's instances: id -> (pool, vCPU); and vCPU in use per pool.
    instances: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    used_vcpu: Mapping[str, int] = field(default_factory=dict)
    excluded: Mapping[str, str] = field(default_factory=dict)  # pool -> pool_excluded id
    ranking_id: str | None = None
    ranking: Mapping[str, Ranked] = field(default_factory=dict)
    trust: ChangeTrust | None = None
    """The keys a change of authority must be signed by (ADR-30), as the last
    ``keyring_trusted`` record put them in force (None: no keyring recorded, every version
    takes effect): the workload deciders use these (`streams.runtime.core.WorkloadStage`)."""

    # -- reading -----------------------------------------------------------------------------

    def room_vcpu(self, pool_id: str) -> int:
        """vCPU the orchestrator can still launch into the pool now (0 if unknown)."""
        facts = self.pools.get(pool_id)
        if facts is None:
            return 0
        if facts.purchase_model == "committed":
            active = sum(
                r.reserved_vcpu
                for r in self.reservations.get(pool_id, ())
                if r.start_at <= self.now_us < r.end_at
            )
            return max(0, active - self.used_vcpu.get(pool_id, 0))
        forecast = self.forecasts.get(pool_id)
        if forecast is None:
            return 0
        return max(0, forecast.available_vcpu - forecast.used_since_vcpu)

    def expected_per_h(self, pool_id: str, unrecorded: float) -> float:
        """What the pool's record says of its interruption rate (`unrecorded` without one)."""
        facts = self.pools.get(pool_id)
        if facts is None or facts.expected_per_h is None:
            return unrecorded if facts is None or facts.purchase_model == "reclaimable" else 0.0
        return facts.expected_per_h

    def guaranteed_price(self, pool_id: str) -> int:
        """The guaranteed rate of a vCPU-hour of the pool (its rate card's; 0 if unknown)."""
        price = self.prices.get(pool_id)
        return price.guaranteed_price_per_vcpu_h_eur_micros if price else 0

    def price(self, pool_id: str) -> int:
        """The pool's current price of a vCPU-hour (0 if no rate card yet)."""
        price = self.prices.get(pool_id)
        return price.price_per_vcpu_h_eur_micros if price else 0

    def score(self, pool_id: str) -> float:
        """The pool's score in the latest ranking (unranked pools last)."""
        ranked = self.ranking.get(pool_id)
        return ranked.score if ranked else float("-inf")

    # -- folding -----------------------------------------------------------------------------

    def evolve(self, event: Envelope) -> RegionView:
        """The view after one event (events it does not read change only `now_us`)."""
        if type(event.payload) is KeyringTrusted:  # the runtime's record: time does not move
            assert isinstance(event.payload, KeyringTrusted)
            return replace(self, trust=trust_of(event.payload))
        changes: dict[str, object] = {}
        if event.occurred_at > self.now_us or not self.region:
            changes["now_us"] = max(self.now_us, event.occurred_at)
            changes["region"] = event.region
        p = event.payload
        kind = type(p)
        if kind is RateCard:
            assert isinstance(p, RateCard)
            price = Price(
                p.price_per_vcpu_h_eur_micros,
                p.guaranteed_price_per_vcpu_h_eur_micros,
                event.event_id,
            )
            changes["prices"] = put(self.prices, p.pool_id, price)
        elif kind is PoolRanked:
            assert isinstance(p, PoolRanked)
            ranked = Ranked(p.rank, p.score, p.observed_interruption_per_h)
            if p.ranking_id != self.ranking_id:
                changes["ranking_id"] = p.ranking_id
                changes["ranking"] = {p.pool_id: ranked}
            else:
                changes["ranking"] = put(self.ranking, p.pool_id, ranked)
        elif kind is InstanceLaunched:
            assert isinstance(p, InstanceLaunched)
            if p.instance_id not in self.instances:  # else a redelivered launch
                changes.update(self._use(p.pool_id, p.vcpu, p.instance_id, launched=True))
        elif kind is InstanceLost or kind is InstanceDeleted:
            assert isinstance(p, InstanceLost | InstanceDeleted)
            known = self.instances.get(p.instance_id)
            if known is not None:
                changes.update(self._use(known[0], known[1], p.instance_id, launched=False))
        elif kind is ForwardCapacity:
            assert isinstance(p, ForwardCapacity)
            forecast = Forecast(p.available_vcpu, event.event_id)
            changes["forecasts"] = put(self.forecasts, p.pool_id, forecast)
        elif kind is PoolRegistered:
            assert isinstance(p, PoolRegistered)
            changes["pools"] = put(self.pools, p.pool_id, PoolFacts.of(p))
        elif kind is ReservationCommitted:
            assert isinstance(p, ReservationCommitted)
            held = self.reservations.get(p.pool_id, ())
            r = Reservation(p.reserved_vcpu, p.start_at, p.end_at)
            changes["reservations"] = put(self.reservations, p.pool_id, (*held, r))
        elif kind is PoolExcluded:
            assert isinstance(p, PoolExcluded)
            changes["excluded"] = put(self.excluded, p.pool_id, event.event_id)
        elif kind is PoolReadmitted:
            assert isinstance(p, PoolReadmitted)
            changes["excluded"] = drop(self.excluded, p.pool_id)
        return replace(self, **changes) if changes else self

    def fold(self, events: Sequence[Envelope]) -> RegionView:
        """The view after `events`, in order: `evolve` of each, but a run of one round's
        rankings (the scorer's 138 a round, a third of a run's events) in one step, its
        ranking built once rather than copied at each of them."""
        view = self
        at, end = 0, len(events)
        while at < end:
            first = events[at].payload
            if type(first) is not PoolRanked:
                view = view.evolve(events[at])
                at += 1
                continue
            assert isinstance(first, PoolRanked)
            until = at + 1
            while until < end:
                p = events[until].payload
                if not (type(p) is PoolRanked and p.ranking_id == first.ranking_id):
                    break
                until += 1
            view = view._ranked(first.ranking_id, events[at:until])
            at = until
        return view

    def _ranked(self, ranking_id: str, events: Sequence[Envelope]) -> RegionView:
        """`evolve` of each of `events`, rankings of round `ranking_id`, as one new view."""
        now_us, region = self.now_us, self.region
        ranking = dict(self.ranking) if ranking_id == self.ranking_id else {}
        for event in events:
            if event.occurred_at > now_us or not region:
                now_us = max(now_us, event.occurred_at)
                region = event.region
            p = event.payload
            assert isinstance(p, PoolRanked)
            ranking[p.pool_id] = Ranked(p.rank, p.score, p.observed_interruption_per_h)
        return replace(self, now_us=now_us, region=region, ranking_id=ranking_id, ranking=ranking)

    def _use(
        self, pool_id: str, vcpu: int, instance_id: str, *, launched: bool
    ) -> dict[str, object]:
        """The changes a launch (or a loss or deletion) of the orchestrator's makes."""
        delta = vcpu if launched else -vcpu
        used = put(self.used_vcpu, pool_id, max(0, self.used_vcpu.get(pool_id, 0) + delta))
        instances = (
            put(self.instances, instance_id, (pool_id, vcpu))
            if launched
            else drop(self.instances, instance_id)
        )
        changes: dict[str, object] = {"used_vcpu": used, "instances": instances}
        forecast = self.forecasts.get(pool_id)
        if forecast is not None:
            moved = replace(forecast, used_since_vcpu=forecast.used_since_vcpu + delta)
            changes["forecasts"] = put(self.forecasts, pool_id, moved)
        return changes
