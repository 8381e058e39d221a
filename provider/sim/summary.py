"""What a simulated run did, counted from its events (so it describes what is in the log).

`RunSummary.observe` every envelope, then `report` with the simulation's own truth about which
pools misbehave; the report is plain JSON-able data that `spotcap demo` prints.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from schemas.events import (
    ContractPublished,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    UsageInterval,
    WorkWasted,
)
from schemas.pools import PoolCatalogue


class RunSummary:
    def __init__(self, catalogue: PoolCatalogue) -> None:
        self._catalogue = catalogue
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

    def observe(self, envelope: Envelope) -> None:
        payload = envelope.payload
        self.events_by_type[envelope.event_type] += 1
        self.events_by_topic[payload.TOPIC] += 1
        if self.first_us is None:
            self.first_us = envelope.occurred_at
        self.last_us = envelope.occurred_at
        if isinstance(payload, InstanceLaunched):
            self._running[payload.instance_id] = payload.vcpu
            self.running_vcpu += payload.vcpu
            self.peak_vcpu = max(self.peak_vcpu, self.running_vcpu)
        elif isinstance(payload, InstanceDeleted):
            self.running_vcpu -= self._running.pop(payload.instance_id, 0)
        elif isinstance(payload, InstanceLost):
            self.running_vcpu -= self._running.pop(payload.instance_id, 0)
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
            self.vcpu_h_by_model[payload.purchase_model] += payload.used_vcpu_h
        elif isinstance(payload, WorkWasted):
            self.wasted_vcpu_s += payload.wasted_vcpu_s
        elif isinstance(payload, ContractPublished):
            self.workloads.add(payload.workload_id)
            self.target_vcpu += payload.target_vcpu

    def observed_per_instance_h(self, pool_id: str) -> float:
        hours = self.instance_h_by_pool.get(pool_id, 0.0)
        return self.reclaims_by_pool[pool_id] / hours if hours else 0.0

    def report(self, misbehaving_pool_ids: tuple[str, ...] = ()) -> dict[str, Any]:
        used_vcpu_h = sum(self.vcpu_h_by_model.values())
        reclaimable_vcpu_h = self.vcpu_h_by_model.get("reclaimable", 0.0)
        span_us = self.last_us - (self.first_us or 0)
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
