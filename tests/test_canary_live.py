"""Canary releases live (ADR-32), end to end on a simulated region with the deciders in the loop:
a changed contract goes to a tenth of its workload's pools; with nodes that drain well it is
promoted when its hold ends, with nodes that drain late (a bad bundle) it is rolled back at
once. The bundle service's view (`provider.nodes.Releases`, folded from the same events) gives
the canary pools' nodes the new bundle while it runs and the bundle in force again after the
rollback; the embedded runner over the region's log makes the loop's decisions byte for byte.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from provider.nodes import Releases
from schemas.codec import Codec
from schemas.events import (
    BundleCanaried,
    BundlePromoted,
    BundleRolledBack,
    DrainStarted,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
)
from sim.loop import LOOP_RUNTIME, owned_by
from streams.embedded import EmbeddedLog
from streams.runtime.core import DERIVED_PREFIX
from streams.runtime.embedded import EmbeddedRunner, ListSink
from streams.topics import region_topics
from streams.writer import EventWriter
from tests.canary_support import (
    CONFIG,
    HOLD_US,
    RECLAIM_AFTER_US,
    REGION,
    RELEASE_AFTER_US,
    CanaryRegion,
)

SLOW_S = 8  # above the canary's 5 s notice to drain p99 limit


def of_type(events: list[Envelope], kind: type) -> list[Envelope]:
    return [e for e in events if isinstance(e.payload, kind)]


def folded(events: list[Envelope], until_us: int) -> Releases:
    releases = Releases()
    for event in events:
        if event.occurred_at <= until_us:
            releases.observe(event)
    return releases


@pytest.fixture(scope="module")
def promoted_run() -> CanaryRegion:
    region = CanaryRegion()
    region.run_until(CONFIG.start_us + RELEASE_AFTER_US + HOLD_US + 600 * 1_000_000)
    return region


@pytest.fixture(scope="module")
def rolled_back_run() -> CanaryRegion:
    region = CanaryRegion(slow_canary_s=SLOW_S)
    region.run_until(CONFIG.start_us + RELEASE_AFTER_US + RECLAIM_AFTER_US + 3600 * 1_000_000)
    return region


def test_a_canary_whose_nodes_drain_well_is_promoted_when_its_hold_ends(
    promoted_run: CanaryRegion,
) -> None:
    region, events = promoted_run, promoted_run.events
    [canaried] = of_type(events, BundleCanaried)
    c = canaried.payload
    assert isinstance(c, BundleCanaried) and c.workload_id == region.workload
    assert (c.contract_sha256, c.previous_contract_sha256) == (region.new_sha, region.old_sha)
    assert canaried.occurred_at == CONFIG.start_us + RELEASE_AFTER_US
    assert canaried.producer == "deciders/canary"
    # A tenth (rounded up) of the pools the workload ran in when the contract changed.
    published = next(i for i, e in enumerate(events) if e.event_type == "contract_published"
                     and e.payload.contract_sha256 == region.new_sha)  # type: ignore[union-attr]  # fmt: skip
    nodes: dict[str, str] = {}
    for e in events[:published]:
        if getattr(e.payload, "workload_id", None) != c.workload_id:
            continue
        if isinstance(e.payload, InstanceLaunched):
            nodes[e.payload.instance_id] = e.payload.pool_id
        elif isinstance(e.payload, InstanceLost | InstanceDeleted):
            nodes.pop(e.payload.instance_id, None)
    running_in = set(nodes.values())
    assert set(c.canary_pool_ids) <= running_in and len(running_in) >= 10
    assert len(c.canary_pool_ids) == math.ceil(0.1 * len(running_in))
    assert region.reclaimed, "no canary node was reclaimed: nothing proves the bundle"
    assert of_type(events, BundleRolledBack) == []
    [promoted] = of_type(events, BundlePromoted)
    p = promoted.payload
    assert isinstance(p, BundlePromoted)
    assert promoted.occurred_at == canaried.occurred_at + HOLD_US  # at the end of its hold
    assert promoted.causation_id == canaried.event_id
    assert p.contract_sha256 == region.new_sha and p.drains >= len(region.reclaimed)
    assert p.notice_to_drain_p99_ms == 1000 and p.drain_failures == 0

    # What the bundle service serves: during the hold the canary pools' nodes get the new
    # bundle and every other node the old one; after the promotion every node the new one.
    assert region.workload is not None
    during = folded(events, canaried.occurred_at + RECLAIM_AFTER_US // 2)
    after = folded(events, promoted.occurred_at)
    for instance, pool in during.pools.items():
        in_canary = pool in c.canary_pool_ids
        assert during.sha_for(instance, region.workload) == (
            region.new_sha if in_canary else region.old_sha
        )
    assert {after.sha_for(i, region.workload) for i in after.pools} == {region.new_sha}
    [release] = after.releases()
    assert release.state == "promoted" and release.ended_at_us == promoted.occurred_at


def test_a_canary_whose_nodes_drain_late_is_rolled_back_and_they_get_the_old_bundle_again(
    rolled_back_run: CanaryRegion,
) -> None:
    region, events = rolled_back_run, rolled_back_run.events
    [canaried] = of_type(events, BundleCanaried)
    c = canaried.payload
    assert isinstance(c, BundleCanaried)
    [back] = of_type(events, BundleRolledBack)
    b = back.payload
    assert isinstance(b, BundleRolledBack)
    assert b.rule == "notice_to_drain_p99" and f"{SLOW_S * 1000:,} ms" in b.reason
    assert (b.contract_sha256, b.previous_contract_sha256) == (region.new_sha, region.old_sha)
    # At once: on the first late drain start in the partition.
    late = [
        e
        for e in of_type(events, DrainStarted)
        if isinstance(e.payload, DrainStarted) and e.payload.instance_id in region.reclaimed
    ]
    first = min(late, key=lambda e: e.occurred_at)
    assert back.occurred_at == first.occurred_at and isinstance(first.payload, DrainStarted)
    notices = {
        e.payload.instance_id: e.occurred_at
        for e in events
        if isinstance(e.payload, NoticeReceived)
    }
    assert back.occurred_at - notices[first.payload.instance_id] == SLOW_S * 1_000_000
    assert of_type(events, BundlePromoted) == []

    assert region.workload is not None
    before = folded(events, back.occurred_at - 1)
    after = folded(events, back.occurred_at)
    canary_nodes = [i for i, pool in before.pools.items() if pool in c.canary_pool_ids]
    assert canary_nodes
    assert {before.sha_for(i, region.workload) for i in canary_nodes} == {region.new_sha}
    still = [i for i in canary_nodes if i in after.pools]
    assert still, "every canary node is gone: nothing shows the old bundle coming back"
    assert {after.sha_for(i, region.workload) for i in still} == {region.old_sha}
    assert {after.sha_for(i, region.workload) for i in after.pools} == {region.old_sha}
    [release] = after.releases()
    assert release.state == "rolled back" and release.rule == "notice_to_drain_p99"


def test_the_embedded_runner_over_the_regions_log_makes_the_loops_decisions_byte_for_byte(
    rolled_back_run: CanaryRegion, tmp_path: Path
) -> None:
    codec = Codec()
    log = EmbeddedLog(tmp_path / "log")
    try:
        log.apply_topics(region_topics(REGION))
        writer = EventWriter(log, codec, REGION)
        for event in rolled_back_run.events:
            writer.write(event)
        writer.close()
        sink = ListSink()
        settings = owned_by(CONFIG.orchestrator.orchestrator_id)
        runner = EmbeddedRunner(log, codec, REGION, sink, settings=settings, runtime=LOOP_RUNTIME)
        runner.run(clock_to_last_event=True)
    finally:
        log.close()
    recorded = [e for e in rolled_back_run.events if e.producer.startswith(DERIVED_PREFIX)]
    canary = [e for e in recorded if e.producer == "deciders/canary"]
    assert len(canary) == 2  # canaried, rolled back
    made = {d.event_id: codec.encode(d) for d in sink.decisions}
    assert made == {d.event_id: codec.encode(d) for d in recorded}
