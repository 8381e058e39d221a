"""A simulated region for canary releases (ADR-32): the deciders in the loop (the canary decider
among them), node agents that drain on every notice, a changed contract published mid-run and,
an hour into its canary, a reclaim through the provider's own path (the drill's) of one node in
each canary pool, so the canary has drains to judge.

`slow_canary_s` makes the canary's nodes react that late to a notice (a bad bundle); every
other node starts its drain one second after its notice. Everything the region publishes,
agents' drains and the deciders' decisions included, is in `events`, in publication order.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from functools import partial

from provider.base import OWNER_TAG, WORKLOAD_TAG, ReclaimRequest
from schemas.events import (
    BundleCanaried,
    ContractPublished,
    DrainCompleted,
    DrainStarted,
    Envelope,
    NoticeReceived,
    Payload,
)
from schemas.ids import derived_event_id
from sim import SimConfig
from sim.clock import HOUR_US, SECOND_US
from sim.loop import DecidersOrchestrator
from sim.region import RegionSim
from streams.deciders.settings import CanarySettings

REGION = "canary"
CONFIG = SimConfig(seed=3, days=0.4, region=REGION, workloads=60)
RELEASE_AFTER_US = 2 * HOUR_US
RECLAIM_AFTER_US = HOUR_US  # after the canary started
HOLD_US = CanarySettings().hold_s * SECOND_US
DRAIN_S = 20
AGENTS = "tests/agents"


class CanaryRegion:
    """The region, its agents, one release and the reclaims in its canary pools."""

    def __init__(self, slow_canary_s: int | None = None) -> None:
        owner = CONFIG.orchestrator.orchestrator_id
        self.owner = owner
        self.sim = RegionSim(CONFIG, orchestrator=DecidersOrchestrator(owner))
        self.slow_canary_s = slow_canary_s
        self.events: list[Envelope] = []
        self.canary: BundleCanaried | None = None
        self.workload: str | None = None
        self.old_sha: str | None = None
        self.new_sha: str | None = None
        self.reclaimed: list[str] = []
        bus = self.sim.bus
        bus.subscribe(NoticeReceived.EVENT_TYPE, self._noticed)
        bus.subscribe(BundleCanaried.EVENT_TYPE, self._canaried)
        start = self.sim.now_us()
        self.sim.clock.at(start + RELEASE_AFTER_US, self._release)
        self._collect()

    def run_until(self, at_us: int) -> None:
        while self.sim.now_us() < at_us:
            self.sim.run_until(min(at_us, self.sim.now_us() + 600 * SECOND_US))
            self._collect()

    def _collect(self) -> None:
        self.events += self.sim.provider.poll_events(len(self.sim.bus))

    # -- the release ---------------------------------------------------------------------------

    def _release(self) -> None:
        """Publish a changed contract of the workload that runs in the most pools."""
        running = [
            i for i in self.sim.provider.list_by_tag(OWNER_TAG, self.owner) if i.state == "active"
        ]
        pools: dict[str, set[str]] = {}
        for i in running:
            pools.setdefault(i.tags[WORKLOAD_TAG], set()).add(i.pool_id)
        workload = max(sorted(pools), key=lambda w: len(pools[w]))
        first = next(
            e
            for e in self.sim.contracts.events
            if isinstance(e.payload, ContractPublished) and e.payload.workload_id == workload
        )
        assert isinstance(first.payload, ContractPublished)
        self.workload, self.old_sha = workload, first.payload.contract_sha256
        self.new_sha = hashlib.sha256(b"version 2 of " + workload.encode()).hexdigest()
        changed = replace(
            first.payload,
            contract_version=first.payload.contract_version + 1,
            contract_sha256=self.new_sha,
        )
        self._publish(changed, derived_event_id(first.event_id, "contract_published", "v2"))

    def _canaried(self, event: Envelope) -> None:
        assert isinstance(event.payload, BundleCanaried)
        self.canary = event.payload
        self.sim.clock.at(event.occurred_at + RECLAIM_AFTER_US, self._reclaim_canary_nodes)

    def _reclaim_canary_nodes(self) -> None:
        """One node of the workload in each canary pool, through the provider's reclaim path."""
        assert self.canary is not None
        live = [
            i
            for i in self.sim.provider.list_by_tag(OWNER_TAG, self.owner)
            if i.state == "active" and i.tags[WORKLOAD_TAG] == self.canary.workload_id
        ]
        for pool in self.canary.canary_pool_ids:
            instance = next((i.instance_id for i in live if i.pool_id == pool), None)
            if instance is not None:
                self.sim.provider.reclaim(ReclaimRequest(instance))
                self.reclaimed.append(instance)

    # -- the agents ------------------------------------------------------------------------------

    def _noticed(self, notice: Envelope) -> None:
        p = notice.payload
        assert isinstance(p, NoticeReceived)
        if not p.workload_id:
            return
        react_s = 1
        c = self.canary
        if (
            self.slow_canary_s is not None
            and c is not None
            and p.workload_id == c.workload_id
            and p.pool_id in c.canary_pool_ids
        ):
            react_s = self.slow_canary_s
        started_at = notice.occurred_at + react_s * SECOND_US
        ends_at = started_at + DRAIN_S * SECOND_US
        started = DrainStarted(p.instance_id, p.workload_id, "local",
                               (p.deadline_at - started_at) // SECOND_US, "notice")  # fmt: skip
        done = DrainCompleted(p.instance_id, p.workload_id, "local", float(DRAIN_S), True, False,
                              False, (p.deadline_at - ends_at) / SECOND_US)  # fmt: skip
        for at_us, payload in ((started_at, started), (ends_at, done)):
            event_id = derived_event_id(notice.event_id, payload.EVENT_TYPE)
            self.sim.clock.at(at_us, partial(self._publish, payload, event_id, notice))

    def _publish(self, payload: Payload, event_id: str, cause: Envelope | None = None) -> None:
        now = self.sim.now_us()
        key = str(getattr(payload, payload.KEY))
        causation = None if cause is None else cause.event_id
        correlation = None if cause is None else cause.correlation_id
        producer = "tests/contracts" if cause is None else AGENTS
        envelope = Envelope(event_id, payload.EVENT_TYPE, now, now, REGION, key, causation,
                            correlation, producer, payload)  # fmt: skip
        self.sim.bus.publish(envelope)
