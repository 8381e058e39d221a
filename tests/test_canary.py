"""Canary releases (ADR-32): a new contract bundle goes to a canary partition of the workload's
pools first, is promoted when its health figures hold for the declared time and rolled back as
soon as one breaks (or when nothing proved it); the decisions replay byte for byte. A new agent
version reaches only new launches: the launch path stamps it, running nodes keep theirs."""

from __future__ import annotations

from provider.base import AGENT_VERSION_TAG, OWNER_TAG
from schemas.codec import Codec
from schemas.events import (
    BundleCanaried,
    BundlePromoted,
    BundleRolledBack,
    ContractPublished,
    DeadLettered,
    DrainCompleted,
    DrainStarted,
    Envelope,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    Payload,
)
from schemas.ids import derived_event_id
from sim.clock import SECOND_US
from streams.deciders.canary import CanaryDecider
from streams.deciders.settings import CanarySettings
from tests.decider_driver import Driver
from tests.drill_support import DrilledRegion

REGION = "canary"
W = "wl-render"
POOLS = [f"c3.8.hall-{n}.reclaimable" for n in range(10)]
T0 = 1_800_000_000 * SECOND_US
HOLD_S = CanarySettings().hold_s


def at(seconds: float, payload: Payload, name: str) -> Envelope:
    t = T0 + int(seconds * SECOND_US)
    key = str(getattr(payload, payload.KEY, REGION))
    return Envelope(derived_event_id(f"canary-test/{name}", payload.EVENT_TYPE), payload.EVENT_TYPE,
                    t, t, REGION, key, None, None, "tests", payload)  # fmt: skip


def contract(version: int, sha: str, seconds: float) -> Envelope:
    payload = ContractPublished(
        workload_id=W, contract_version=version, contract_sha256=sha, owner="team-render",
        tier="t3", drain_budget_s=90, restart_semantics="restart", checkpoint_on_notice=False,
        proactive_drain_on_advisory=False, tolerated_interruptions_per_h=0.05, target_vcpu=80,
        floor_vcpu=0, spend_cap_eur_micros=0, approver="oncall@example.org", priority=1,
    )  # fmt: skip
    return at(seconds, payload, f"contract-{version}")


def released() -> tuple[Driver, BundleCanaried, Envelope]:
    """Version 1 running one instance in each of ten pools; version 2 published at 100 s."""
    driver = Driver(deciders=[CanaryDecider()])
    assert driver.feed(contract(1, "sha-1", 0)) == []
    for n, pool in enumerate(POOLS):
        driver.feed(at(1 + n, InstanceLaunched(f"i-{n}", pool, W, 8, "reclaimable", {}), f"l{n}"))
    [canaried] = driver.feed(contract(2, "sha-2", 100))
    assert isinstance(canaried.payload, BundleCanaried)
    return driver, canaried.payload, canaried


def noticed(driver: Driver, pool: str, seconds: float, *, react_s: float, verified: bool = True,
            ) -> list[Envelope]:  # fmt: skip
    instance = f"i-{POOLS.index(pool)}"
    deadline = T0 + int((seconds + 120) * SECOND_US)
    out = driver.feed(at(seconds, NoticeReceived(instance, pool, W, deadline, "nats"), "n" + pool))
    out += driver.feed(at(seconds + react_s, DrainStarted(instance, W, "local", 119, "notice"),
                          "s" + pool))  # fmt: skip
    done = DrainCompleted(instance, W, "local", 20.0, verified, False, False, 90.0)
    out += driver.feed(at(seconds + react_s + 20, done, "d" + pool))
    return out


def later(driver: Driver, seconds: float) -> list[Envelope]:
    """Event time moves on (another workload's launch): the timers due by then fire."""
    other = InstanceLaunched("i-other", POOLS[0], "wl-other", 8, "reclaimable", {})
    return driver.feed(at(seconds, other, f"later-{seconds}"))


def test_a_new_bundle_goes_to_a_tenth_of_its_pools_and_is_promoted_when_the_figures_hold() -> None:
    driver, release, canaried = released()
    assert len(release.canary_pool_ids) == 1 and set(release.canary_pool_ids) <= set(POOLS)
    assert (release.contract_sha256, release.previous_contract_sha256) == ("sha-2", "sha-1")
    assert release.hold_s == HOLD_S and canaried.occurred_at == T0 + 100 * SECOND_US
    [pool] = release.canary_pool_ids
    outside = next(p for p in POOLS if p != pool)
    # A slow drain outside the partition is not the canary's.
    assert noticed(driver, outside, 200, react_s=30) == []
    assert noticed(driver, pool, 300, react_s=1) == []
    assert later(driver, 100 + HOLD_S - 1) == []
    [promoted] = later(driver, 100 + HOLD_S + 60)
    p = promoted.payload
    assert isinstance(p, BundlePromoted)
    assert promoted.occurred_at == canaried.occurred_at + HOLD_S * SECOND_US  # at its due time
    assert promoted.causation_id == canaried.event_id
    assert (p.contract_version, p.drains, p.notice_to_drain_p99_ms) == (2, 1, 1000)
    assert (p.drain_failures, p.losses_without_drain, p.dead_letters) == (0, 0, 0)
    assert later(driver, 100 + 3 * HOLD_S) == []  # promoted once


def test_a_slow_drain_in_the_partition_rolls_the_bundle_back_at_once() -> None:
    driver, release, canaried = released()
    [pool] = release.canary_pool_ids
    [back] = noticed(driver, pool, 300, react_s=8)
    b = back.payload
    assert isinstance(b, BundleRolledBack)
    assert b.rule == "notice_to_drain_p99" and "8,000 ms" in b.reason
    assert back.occurred_at == T0 + 308 * SECOND_US and back.causation_id == canaried.event_id
    assert (b.contract_sha256, b.previous_contract_sha256) == ("sha-2", "sha-1")
    assert later(driver, 100 + 2 * HOLD_S) == []  # rolled back, never promoted


def test_an_unverified_drain_a_loss_without_drain_or_dead_letters_roll_it_back() -> None:
    driver, release, _ = released()
    [pool] = release.canary_pool_ids
    [back] = noticed(driver, pool, 300, react_s=1, verified=False)
    assert isinstance(back.payload, BundleRolledBack) and back.payload.rule == "drain_failures"
    assert back.payload.evidence_event_ids == (derived_event_id(
        "canary-test/d" + pool, "drain_completed"),)  # fmt: skip

    driver, release, _ = released()
    [pool] = release.canary_pool_ids
    instance = f"i-{POOLS.index(pool)}"
    lost = InstanceLost(instance, pool, W, 8, "reclaimable", False, "reclaimed")
    [back] = driver.feed(at(400, lost, "lost"))
    assert isinstance(back.payload, BundleRolledBack)
    assert back.payload.rule == "losses_without_drain"

    driver, _, _ = released()
    out: list[Envelope] = []
    for n in range(11):
        dead = DeadLettered("canary.lifecycle", 0, n, "fleet", "CodecError", "bad", b"x")
        out += driver.feed(at(500 + n, dead, f"dead-{n}"))
    [back] = out
    assert isinstance(back.payload, BundleRolledBack) and back.payload.rule == "dead_letters"


def test_a_bundle_nothing_proved_is_rolled_back_at_the_end_of_its_hold() -> None:
    driver, _, canaried = released()
    [back] = later(driver, 100 + HOLD_S + 1)
    assert isinstance(back.payload, BundleRolledBack) and back.payload.rule == "unproven"
    assert "spotcap drill run" in back.payload.reason
    assert back.occurred_at == canaried.occurred_at + HOLD_S * SECOND_US


def test_no_canary_for_a_first_bundle_an_unchanged_one_or_a_workload_nowhere() -> None:
    driver = Driver(deciders=[CanaryDecider()])
    assert driver.feed(contract(1, "sha-1", 0)) == []
    assert driver.feed(contract(2, "sha-1", 10)) == []  # the same bundle
    [promoted] = driver.feed(contract(3, "sha-3", 20))  # no node runs it
    assert isinstance(promoted.payload, BundlePromoted) and promoted.payload.held_s == 0


def test_a_newer_version_supersedes_a_running_canary() -> None:
    driver, _, _ = released()
    superseded, canaried = driver.feed(contract(3, "sha-3", 200))
    assert isinstance(superseded.payload, BundleRolledBack)
    assert superseded.payload.rule == "superseded" and superseded.payload.contract_version == 2
    assert isinstance(canaried.payload, BundleCanaried)
    # Version 2 never passed its canary: the bundle in force, the rollback's target, is still 1.
    assert canaried.payload.previous_contract_sha256 == "sha-1"
    assert driver.feed(contract(2, "sha-2", 210)) == []  # an old version again: nothing


def test_the_bundle_in_force_published_again_or_an_operators_rollback_ends_the_canary() -> None:
    driver, _, _ = released()
    [back] = driver.feed(contract(3, "sha-1", 200))
    assert isinstance(back.payload, BundleRolledBack) and back.payload.rule == "superseded"
    assert later(driver, 100 + 2 * HOLD_S) == []

    driver, _, _ = released()
    operator = BundleRolledBack(W, 2, "sha-2", "sha-1", "operator", "by hand", 0, None, ())
    assert driver.feed(at(300, operator, "operator")) == []
    assert later(driver, 100 + 2 * HOLD_S) == []  # ended: neither promoted nor rolled back
    [canaried_again] = driver.feed(contract(3, "sha-3", 100 + 2 * HOLD_S + 10))
    assert isinstance(canaried_again.payload, BundleCanaried)
    assert canaried_again.payload.previous_contract_sha256 == "sha-1"


def test_the_canarys_decisions_replay_byte_for_byte() -> None:
    def run() -> list[bytes]:
        driver, release, _ = released()
        [pool] = release.canary_pool_ids
        noticed(driver, pool, 300, react_s=2)
        later(driver, 100 + HOLD_S + 5)
        codec = Codec()
        return [codec.encode(d) for d in driver.decisions]

    first = run()
    assert len(first) == 2 and first == run()


def test_a_new_agent_version_reaches_only_new_launches() -> None:
    region = DrilledRegion()
    book = region.sim.orchestrator.book  # type: ignore[attr-defined]
    book.agent_version = "1.0"
    region.advance(2 * 3600, step_s=600)
    released_at = region.sim.now_us()
    book.agent_version = "1.1"  # the release: new launches boot with it
    region.advance(2 * 3600, step_s=600)
    owner = region.sim.config.orchestrator.orchestrator_id
    running = region.provider.list_by_tag(OWNER_TAG, owner)
    old = [i for i in running if i.launched_at < released_at]
    new = [i for i in running if i.launched_at > released_at]
    assert len(old) > 10 and len(new) > 10
    assert {i.tags[AGENT_VERSION_TAG] for i in old} == {"1.0"}
    assert {i.tags[AGENT_VERSION_TAG] for i in new} == {"1.1"}
    launches = [e.payload for e in region.events if isinstance(e.payload, InstanceLaunched)]
    assert launches and all(AGENT_VERSION_TAG in p.tags for p in launches)
