"""A short recorded scenario for the deciders' runtimes, and helpers to compare decisions.

Three simulated hours of a 40-workload region with a wave every hour and a misbehaving pool,
driven by the deciders themselves (`sim.loop`, as `spotcap demo` runs it): the log holds the
region's facts and the loop's own decisions (which no runtime reads as inputs), and no other
orchestrator's (the baseline's placements would otherwise be read as inputs by the guard). The
inputs make every kind of decision the deciders have (exclusions and readmissions, rankings,
placements, replacements, fallbacks and returns, throttling, and canary releases: after the
first hour a changed contract of three workloads is published; no agent drains here, so a loss
in a canary pool rolls its canary back).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from functools import cache, partial

from schemas.codec import Codec
from schemas.events import ContractPublished, Envelope
from schemas.ids import derived_event_id
from sim import ReclaimSettings, RegionSim, SimConfig
from sim.clock import HOUR_US
from sim.loop import DecidersOrchestrator
from streams.log import EventLog
from streams.topics import region_topics
from streams.writer import EventWriter

REGION = "rt"
CONFIG = SimConfig(
    days=0.12,
    seed=1,
    region=REGION,
    workloads=40,
    rate_card_interval_s=1800,
    reclaims=ReclaimSettings(waves_per_day=24.0, misbehaving_factor=30.0),
)
CODEC = Codec()
PARTITIONS_SCALE = 0.5


@cache
def scenario() -> tuple[Envelope, ...]:
    driver = DecidersOrchestrator(
        CONFIG.orchestrator.orchestrator_id, topics=region_topics(REGION, PARTITIONS_SCALE)
    )
    sim = RegionSim(CONFIG, orchestrator=driver)
    sim.clock.at(CONFIG.start_us + HOUR_US, partial(_release, sim))
    return tuple(e for batch in sim.run() for e in batch)


def _release(sim: RegionSim) -> None:
    """Version 2 of three workloads' contracts, each with a changed bundle, published now."""
    firsts = sorted(
        (e for e in sim.contracts.events if isinstance(e.payload, ContractPublished)),
        key=lambda e: e.key,
    )
    for first in firsts[:3]:
        p = first.payload
        assert isinstance(p, ContractPublished)
        sha = hashlib.sha256(f"version 2 of {p.workload_id}".encode()).hexdigest()
        changed = dataclasses.replace(
            p, contract_version=p.contract_version + 1, contract_sha256=sha
        )
        now = sim.now_us()
        event_id = derived_event_id(first.event_id, changed.EVENT_TYPE, "v2")
        sim.bus.publish(Envelope(event_id, changed.EVENT_TYPE, now, now, REGION, p.workload_id,
                                 None, None, "tests/contracts", changed))  # fmt: skip


def write_scenario(log: EventLog, events: Iterable[Envelope] | None = None) -> int:
    """Create the region's topics on `log` and write the scenario's events; returns how many."""
    log.apply_topics(region_topics(REGION, partitions_scale=PARTITIONS_SCALE))
    writer = EventWriter(log, CODEC, REGION)
    n = 0
    for event in scenario() if events is None else events:
        writer.write(event)
        n += 1
    writer.close()
    return n


def by_id(decisions: Iterable[Envelope]) -> dict[str, bytes]:
    """Decisions de-duplicated by event id, as their encoded bytes; fails on two different
    decisions under one id (a duplicate must be the same decision)."""
    out: dict[str, bytes] = {}
    for d in decisions:
        encoded = CODEC.encode(d)
        seen = out.setdefault(d.event_id, encoded)
        assert seen == encoded, f"two different decisions carry the id {d.event_id}: {d}"
    return out
