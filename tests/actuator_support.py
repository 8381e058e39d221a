"""Decisions and the guard's orders on an embedded log, for the actuator's tests.

`Decisions` writes a region's pools, a capacity claim and its placement, and a fallback's
return, each with the actuator guard's decisions on it (its orders, its refusals), as the
deciders would; the actuator under test reads them from the log. Time is the provider's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from provider.actuator import TOPICS
from schemas.codec import Codec
from schemas.events import (
    Allocation,
    CapacityClaimOpened,
    Envelope,
    FallbackReturned,
    Payload,
    PlacementDecided,
)
from schemas.ids import derived_event_id
from schemas.pools import Pool
from sim.loop import owned_by
from streams.deciders import ActuatorGuard, RegionView
from streams.deciders.types import step
from streams.embedded import EmbeddedLog
from streams.merged import MergedHistory
from streams.topics import region_topics
from streams.writer import publish

CODEC = Codec()
WORKLOAD = "wl-actuated"
CLAIM = "claim/wl-actuated/1"


class Decisions:
    """A region's decisions on an embedded log at `root`, stamped with `now_us()`."""

    def __init__(self, root: Path, region: str, owner: str, now_us: Callable[[], int]) -> None:
        self.region = region
        self.now_us = now_us
        self.log = EmbeddedLog(root, share_writes_s=120.0)  # an actuator writes it too
        self.log.apply_topics(region_topics(region))
        self.guard = ActuatorGuard(owned_by(owner))
        self.state = self.guard.initial(region)
        self.seq = 0

    def decide(self, events: Iterable[Envelope]) -> list[Envelope]:
        """The guard's decisions on `events` (which it then knows)."""
        decisions: list[Envelope] = []
        for event in events:
            if event.event_type in self.guard.inputs:
                self.state, made = step(self.guard, self.state, event, RegionView())
                decisions += made
        return decisions

    def publish(self, events: list[Envelope]) -> list[Envelope]:
        """Write `events` and the guard's decisions on them; returns the decisions."""
        decisions = self.decide(events)
        publish(self.log, CODEC, self.region, [*events, *decisions])
        return decisions

    def events(self) -> list[Envelope]:
        """Everything the actuator reads, in the merged history's order."""
        return [d.envelope for d in MergedHistory(self.log, CODEC, self.region, TOPICS)]

    def learn_launches(self) -> None:
        """Let the guard know the instances launched so far (their owner tags)."""
        self.decide(e for e in self.events() if e.event_type == "instance_launched")

    def fact(self, payload: Payload, producer: str, causation_id: str | None = None) -> Envelope:
        self.seq += 1
        now = self.now_us()
        key = self.region if payload.KEY == "region" else str(getattr(payload, payload.KEY))
        return Envelope(
            event_id=derived_event_id(f"tests/actuator/{self.region}", str(self.seq)),
            event_type=payload.EVENT_TYPE,
            occurred_at=now,
            recorded_at=now,
            region=self.region,
            key=key,
            causation_id=causation_id,
            correlation_id="incident-1",
            producer=producer,
            payload=payload,
        )

    def pools(self, pools: Iterable[Pool]) -> None:
        self.publish([self.fact(p.registered(), "tests/catalogue") for p in pools])

    def placement(self, pools: tuple[str, ...], vcpu_each: int) -> Envelope:
        """A claim and its placement (`vcpu_each` in each of `pools`), with their orders."""
        claim = self.fact(
            CapacityClaimOpened(
                claim_id=CLAIM,
                workload_id=WORKLOAD,
                scheduler="kubernetes",
                cluster="k8s-test",
                requested_vcpu=len(pools) * vcpu_each,
                reason="pending pods",
            ),
            "intake/kubernetes",
        )
        placed = self.fact(
            PlacementDecided(
                workload_id=WORKLOAD,
                requested_vcpu=len(pools) * vcpu_each,
                floor_vcpu=0,
                allocations=tuple(Allocation(p, vcpu_each, "reclaimable") for p in pools),
                cost_per_h_eur_micros=0,
                price_first_cost_per_h_eur_micros=0,
                premium_per_h_eur_micros=0,
                excluded_pool_ids=(),
                claim_id=CLAIM,
            ),
            "deciders/planner",
            causation_id=claim.event_id,
        )
        self.publish([claim])
        self.publish([placed])
        return placed

    def returned(self, placed: Envelope, instance_ids: tuple[str, ...]) -> list[Envelope]:
        """A fallback's return deleting `instance_ids`; returns the guard's decisions."""
        self.learn_launches()
        returned = self.fact(
            FallbackReturned(
                workload_id=WORKLOAD,
                vcpu=32,
                dwell_s=3600,
                fallback_event_id=placed.event_id,
                instance_ids=instance_ids,
                healthy_s=3600,
            ),
            "deciders/fallback",
            causation_id=placed.event_id,
        )
        return self.publish([returned])
