"""What a simulated run did, counted from its events (so it describes what is in the log).

`RunSummary.observe` every envelope, then `report` with the simulation's own truth about which
pools misbehave; the report is plain JSON-able data that `spotcap demo` prints.

Besides the counts, three figures compare orchestrators on one seed:

* **wasted work**: the `work_wasted` vCPU-hours (work redone after losses);
* **shortfall**: vCPU-hours the workloads asked for and did not have, summed per workload
  over time: what its open claims request (from `capacity_claim_opened` to
  `capacity_released`) less the vCPU of its running instances, when that is positive;
  **surplus** is the other side (vCPU running beyond what the open claims ask for);
* **spend**: what the usage cost at the pools' rate cards (each `usage_interval` priced at its
  pool's price over the interval, rate card by rate card), in micro-euros;
* **net saving**: the ledger's own figure (ADR-26, docs/accounting.md), priced by the recorded
  rule exactly as the ledger writer prices the same events (`projections.ledger.pricer`):
  useful work (what the open claims asked for) at the guaranteed rate, less every cost line,
  surplus and the idle floor included; so two orchestrators of one seed compare on it without
  a ledger written for either.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from projections.ledger.pricer import DEMAND_HORIZON_US, MemorySource, Pricer
from projections.ledger.rule import CAUSES, COUNTERFACTUAL, RECORDED
from projections.money import eur_string
from schemas.events import (
    CapacityClaimOpened,
    CapacityReleased,
    ContractPublished,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    RateCard,
    UsageInterval,
    WorkWasted,
)
from schemas.pools import PoolCatalogue
from sim.clock import DAY_US

US_PER_H = 3_600_000_000
# What the summary holds of rate cards and priced items behind the newest event: the ledger
# writer's own horizon for them (`projections.ledger.writer.RATE_HORIZON_US`).
SUMMARY_HORIZON_US = 2 * DAY_US
# The events `RunSummary.observe` counts beyond their type and time (issue 26: the others,
# rankings first, a third of a run's events, went through every check of its chain).
_COUNTED = (RateCard, InstanceLaunched, CapacityClaimOpened, CapacityReleased, InstanceDeleted,
            InstanceLost, UsageInterval, WorkWasted, ContractPublished)  # fmt: skip


@dataclass(slots=True)
class _Demand:
    """One workload's asked-for and running vCPU, and the shortfall and surplus so far."""

    asked_vcpu: int = 0
    running_vcpu: int = 0
    since_us: int = 0
    short_vcpu_us: int = 0
    surplus_vcpu_us: int = 0

    def move(self, now_us: int) -> None:
        span = now_us - self.since_us
        if span > 0:
            gap = self.asked_vcpu - self.running_vcpu
            if gap > 0:
                self.short_vcpu_us += gap * span
            else:
                self.surplus_vcpu_us -= gap * span
        self.since_us = max(self.since_us, now_us)


@dataclass(slots=True)
class _Prices:
    """A pool's rate cards as a running integral: micro-euros per vCPU up to each card."""

    times_us: list[int] = field(default_factory=list)
    cumulative: list[float] = field(default_factory=list)  # micro-euro x us / h, per vCPU
    prices: list[int] = field(default_factory=list)

    def add(self, at_us: int, price: int) -> None:
        if self.times_us:
            last = self.times_us[-1]
            self.cumulative.append(self.cumulative[-1] + self.prices[-1] * (at_us - last))
        else:
            self.cumulative.append(0.0)
        self.times_us.append(at_us)
        self.prices.append(price)

    def integral(self, at_us: int) -> float:
        i = bisect.bisect_right(self.times_us, at_us) - 1
        if i < 0:
            return 0.0
        return self.cumulative[i] + self.prices[i] * (at_us - self.times_us[i])

    def cost_eur_micros(self, vcpu: int, start_us: int, end_us: int) -> float:
        return vcpu * (self.integral(end_us) - self.integral(start_us)) / US_PER_H

    def prune(self, before_us: int) -> None:
        """Forget the cards superseded before `before_us` (the one in force then is kept; the
        integrals are measured from a fixed origin, so those kept stay as they were)."""
        i = bisect.bisect_right(self.times_us, before_us) - 1
        if i > 0:
            del self.times_us[:i], self.cumulative[:i], self.prices[:i]


class RunSummary:
    """Counts a run's events as they are observed, in memory flat in the run's length: once a
    sim day (or `horizon_us`, if shorter) it forgets the rate cards and priced items older than
    `horizon_us`, and the ended demand older than the ledger's own demand horizon, as the
    ledger's writer forgets them behind its batches. No event reaches back that far (a usage
    interval spans at most `SimConfig.usage_interval_s`, 6 h; a late card at most the ledger's
    allowed lateness, 1 h); a usage interval that does raises ValueError, never a wrong sum."""

    def __init__(self, catalogue: PoolCatalogue, horizon_us: int = SUMMARY_HORIZON_US) -> None:
        self._catalogue = catalogue
        self._horizon_us = horizon_us
        self._prune_every_us = min(DAY_US, horizon_us)
        self._pruned_at = -1
        self._forgotten_before = -1
        self.events_by_type: Counter[str] = Counter()
        self.events_by_topic: Counter[str] = Counter()
        self.losses_with_notice = 0
        self.losses_without_notice = 0
        self.reclaims_by_pool: Counter[str] = Counter()
        self.instance_h_by_pool: defaultdict[str, float] = defaultdict(float)
        self.vcpu_h_by_model: defaultdict[str, float] = defaultdict(float)
        self.wave_losses: Counter[str] = Counter()
        self.wave_hall: dict[str, str] = {}
        self.wasted_vcpu_s = 0.0
        self.workloads: set[str] = set()
        self.target_vcpu = 0
        self._running: dict[str, int] = {}
        self.running_vcpu = 0
        self.peak_vcpu = 0
        self.first_us: int | None = None
        self.last_us = 0
        self._demand: dict[str, _Demand] = {}
        self._claims: dict[str, int] = {}  # open claim -> vCPU it asks for
        self._owner: dict[str, str] = {}  # running instance -> workload
        self._prices: dict[str, _Prices] = {}
        self.spend_eur_micros = 0.0
        self.spend_by_model: defaultdict[str, float] = defaultdict(float)
        self.instance_h = 0.0
        self._source = MemorySource()
        self._pricer = Pricer(RECORDED, source=self._source)
        self.ledger_micros: Counter[str] = Counter()
        self.ledger_quantity: defaultdict[str, float] = defaultdict(float)
        self._accrued = False
        self.misbehaving: tuple[str, ...] = ()  # the simulation's truth, when a caller sets it

    def _price(self, envelope: Envelope) -> None:
        if envelope.occurred_at // self._prune_every_us > self._pruned_at:
            self._prune(envelope.occurred_at)
        usage = envelope.payload
        if isinstance(usage, UsageInterval) and usage.start_at < self._forgotten_before:
            raise ValueError(
                f"usage interval {envelope.event_id} starts before the run summary's horizon "
                f"({self._horizon_us / 3.6e9:g} h): give RunSummary a longer horizon_us"
            )
        for line in self._pricer.feed(envelope):
            self.ledger_micros[line.cause] += line.amount_eur_micros
            self.ledger_quantity[line.cause] += line.quantity

    def observe(self, envelope: Envelope) -> None:
        self._price(envelope)
        payload = envelope.payload
        self.events_by_type[envelope.event_type] += 1
        self.events_by_topic[payload.TOPIC] += 1
        self._moment(envelope.occurred_at)
        if isinstance(payload, _COUNTED):  # most events are not: one check, not the chain
            self._count(envelope)

    def _count(self, envelope: Envelope) -> None:
        payload = envelope.payload
        if isinstance(payload, RateCard):
            prices = self._prices.get(payload.pool_id)
            if prices is None:
                prices = self._prices[payload.pool_id] = _Prices()
            prices.add(envelope.occurred_at, payload.price_per_vcpu_h_eur_micros)
        elif isinstance(payload, InstanceLaunched):
            self._running[payload.instance_id] = payload.vcpu
            self.running_vcpu += payload.vcpu
            self.peak_vcpu = max(self.peak_vcpu, self.running_vcpu)
            self._owner[payload.instance_id] = payload.workload_id
            self._change(payload.workload_id, envelope.occurred_at).running_vcpu += payload.vcpu
        elif isinstance(payload, CapacityClaimOpened):
            self._claims[payload.claim_id] = payload.requested_vcpu
            demand = self._change(payload.workload_id, envelope.occurred_at)
            demand.asked_vcpu += payload.requested_vcpu
        elif isinstance(payload, CapacityReleased):
            asked = self._claims.pop(payload.claim_id, 0)
            self._change(payload.workload_id, envelope.occurred_at).asked_vcpu -= asked
        elif isinstance(payload, InstanceDeleted):
            self.running_vcpu -= self._gone(payload.instance_id, envelope.occurred_at)
        elif isinstance(payload, InstanceLost):
            self.running_vcpu -= self._gone(payload.instance_id, envelope.occurred_at)
            if payload.with_notice:
                self.losses_with_notice += 1
            else:
                self.losses_without_notice += 1
            self.reclaims_by_pool[payload.pool_id] += 1
            wave = envelope.correlation_id
            if wave and wave.startswith("wave-"):
                self.wave_losses[wave] += 1
                self.wave_hall[wave] = self._catalogue.get(payload.pool_id).hall
        elif isinstance(payload, UsageInterval):
            self.instance_h_by_pool[payload.pool_id] += payload.used_vcpu_h / payload.vcpu
            self.instance_h += payload.used_vcpu_h / payload.vcpu
            self.vcpu_h_by_model[payload.purchase_model] += payload.used_vcpu_h
            prices = self._prices.get(payload.pool_id)
            if prices is not None:
                cost = prices.cost_eur_micros(payload.vcpu, payload.start_at, payload.end_at)
                self.spend_eur_micros += cost
                self.spend_by_model[payload.purchase_model] += cost
        elif isinstance(payload, WorkWasted):
            self.wasted_vcpu_s += payload.wasted_vcpu_s
        elif isinstance(payload, ContractPublished):
            self.workloads.add(payload.workload_id)
            self.target_vcpu += payload.target_vcpu

    def _prune(self, now_us: int) -> None:
        """Once a sim day (or horizon): forget what nothing from `now_us` on reaches back to."""
        self._pruned_at = now_us // self._prune_every_us
        before = self._forgotten_before = now_us - self._horizon_us
        self._pricer.book.prune(before)
        self._source.prune(before)
        for demand in self._pricer.demand.values():
            demand.prune(now_us - max(self._horizon_us, DEMAND_HORIZON_US))
        for prices in self._prices.values():
            prices.prune(before)

    def _moment(self, at_us: int) -> None:
        if self.first_us is None:
            self.first_us = at_us
        self.last_us = at_us

    def _change(self, workload_id: str, now_us: int) -> _Demand:
        demand = self._demand.get(workload_id)
        if demand is None:
            demand = self._demand[workload_id] = _Demand(since_us=now_us)
        demand.move(now_us)
        return demand

    def _gone(self, instance_id: str, now_us: int) -> int:
        vcpu = self._running.pop(instance_id, 0)
        workload_id = self._owner.pop(instance_id, None)
        if workload_id is not None:
            self._change(workload_id, now_us).running_vcpu -= vcpu
        return vcpu

    def shortfall_vcpu_h(self) -> tuple[float, float]:
        """(shortfall, surplus) in vCPU-hours, up to the last event observed."""
        short = surplus = 0
        for demand in self._demand.values():
            demand.move(self.last_us)
            short += demand.short_vcpu_us
            surplus += demand.surplus_vcpu_us
        return short / US_PER_H, surplus / US_PER_H

    def ledger(self) -> dict[str, Any]:
        """The run priced by the recorded rule: each line's total and the net saving, in euros
        as decimal strings, and in micro-euros; vCPU-hours of useful work and surplus."""
        if not self._accrued:  # the idle floor up to the end (the last whole hour)
            self._accrued = True
            for line in self._pricer.advance():
                self.ledger_micros[line.cause] += line.amount_eur_micros
                self.ledger_quantity[line.cause] += line.quantity
        micros = {cause: self.ledger_micros.get(cause, 0) for cause in CAUSES}
        net = micros[COUNTERFACTUAL] - sum(v for c, v in micros.items() if c != COUNTERFACTUAL)
        return {
            "rule": RECORDED.name,
            "eur": {cause: eur_string(v) for cause, v in micros.items()},
            "net_saving_eur": eur_string(net),
            "net_saving_eur_micros": net,
            "eur_micros": micros,
            "useful_vcpu_h": round(self.ledger_quantity[COUNTERFACTUAL], 1),
            "surplus_vcpu_h": round(self.ledger_quantity["surplus"], 1),
            "corrections": self._pricer.corrections,
            "refused_late": len(self._pricer.refused),
        }

    def observed_per_instance_h(self, pool_id: str) -> float:
        hours = self.instance_h_by_pool.get(pool_id, 0.0)
        return self.reclaims_by_pool[pool_id] / hours if hours else 0.0

    def report(self, misbehaving_pool_ids: tuple[str, ...] = ()) -> dict[str, Any]:
        used_vcpu_h = sum(self.vcpu_h_by_model.values())
        reclaimable_vcpu_h = self.vcpu_h_by_model.get("reclaimable", 0.0)
        span_us = self.last_us - (self.first_us or 0)
        shortfall_vcpu_h, surplus_vcpu_h = self.shortfall_vcpu_h()
        return {
            "events": sum(self.events_by_type.values()),
            "events_by_type": dict(sorted(self.events_by_type.items())),
            "events_by_topic": dict(sorted(self.events_by_topic.items())),
            "sim_days": round(span_us / 86_400_000_000, 3),
            "notices": self.events_by_type["notice_received"],
            "advisories": self.events_by_type["advisory"],
            "losses_with_notice": self.losses_with_notice,
            "losses_without_notice": self.losses_without_notice,
            "waves": [
                {"wave_id": w, "hall": self.wave_hall[w], "instances_lost": n}
                for w, n in sorted(self.wave_losses.items())
            ],
            "misbehaving_pools": [self._pool_report(p) for p in misbehaving_pool_ids],
            "workloads": len(self.workloads),
            "target_vcpu": self.target_vcpu,
            "peak_vcpu": self.peak_vcpu,
            "used_vcpu_h": {m: round(v, 1) for m, v in sorted(self.vcpu_h_by_model.items())},
            "wasted_vcpu_h": round(self.wasted_vcpu_s / 3600, 1),
            "wasted_share_of_reclaimable": round(self.wasted_vcpu_s / 3600 / reclaimable_vcpu_h, 4)
            if reclaimable_vcpu_h
            else 0.0,
            "reclaimable_share_of_used": round(reclaimable_vcpu_h / used_vcpu_h, 4)
            if used_vcpu_h
            else 0.0,
            "shortfall_vcpu_h": round(shortfall_vcpu_h, 1),
            "surplus_vcpu_h": round(surplus_vcpu_h, 1),
            "spend_eur": round(self.spend_eur_micros / 1_000_000, 2),
            "instance_h": round(self.instance_h, 1),
            "losses_per_1000_instance_h": round(
                1000 * (self.losses_with_notice + self.losses_without_notice) / self.instance_h, 3
            )
            if self.instance_h
            else 0.0,
            "ledger": self.ledger(),
            "spend_eur_by_model": {
                m: round(v / 1_000_000, 2) for m, v in sorted(self.spend_by_model.items())
            },
        }

    def _pool_report(self, pool_id: str) -> dict[str, Any]:
        pool = self._catalogue.get(pool_id)
        return {
            "pool_id": pool_id,
            "expected_per_instance_h": pool.expected_interruptions_per_h,
            "observed_per_instance_h": round(self.observed_per_instance_h(pool_id), 5),
            "reclaims": self.reclaims_by_pool[pool_id],
            "instance_h": round(self.instance_h_by_pool.get(pool_id, 0.0), 1),
        }
