"""Canary releases of contract bundles (ADR-32): a new bundle goes to a canary partition first
and is promoted only when its health figures hold for a declared time; otherwise rolled back.

**Key: region** (dead letters, one of the health figures, belong to no workload). Inputs:
`contract_published` (a new version of a workload's contract is a new bundle), the lifecycle
(`instance_launched`, `instance_lost`, `instance_deleted`: which pools each workload runs in),
`notice_received`, `drain_started`, `drain_completed` and `dead_lettered`. Outputs:

* `bundle_canaried`, on a contract version after the first whose bundle changed (its
  ``contract_sha256``) for a workload running in at least one pool: the canary partition is
  ``ceil(share x pools)`` (at least one) of the pools the workload runs in, chosen by a hash of
  the bundle and the pool (each release a different spread, a replay the same one), with the
  limits and the hold of `CanarySettings`;
* `bundle_rolled_back` as soon as a figure of the partition (the workload's instances in its
  pools) breaks its limit: notice to drain start p99, drains completed unverified or overrun,
  instances lost without a verified drain, dead letters in the region during the hold; also at
  the end of the hold when fewer than `min_drains` drains proved the bundle (``unproven``: the
  fleet's churn, or a drill on a canary pool, must exercise it);
* `bundle_promoted` at the end of the hold (a timer at `hold_s` after the canary) when every
  figure held, or at once when no node runs the workload (nothing to canary).

The bundle **in force** (what the other nodes keep, and what a canary returns to) is the
workload's first bundle, then each promoted one: a canary that never passed is never a
rollback's target. A newer version published while a canary runs replaces it (the older is
rolled back, rule ``superseded``); publishing the bundle in force again ends the canary the same
way. An operator's `bundle_rolled_back` (``spotcap canary roll-back``, an input: its producer is
not a decider) ends the canary it names at once. Settings: `DeciderSettings.canary`.

Pure: no clock, no I/O; the same inputs give the same decisions, byte for byte. It runs in the
actuator stage of every runtime (`streams.runtime.core.ActuatorStage`: region-keyed, every
fact and clock of the region in the journal's order).
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import (
    BundleCanaried,
    BundlePromoted,
    BundleRolledBack,
    ContractPublished,
    DeadLettered,
    DrainCompleted,
    DrainStarted,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
)
from schemas.frozen import FrozenMap
from schemas.ids import derived_event_id
from streams.deciders.maps import replace
from streams.deciders.region import RegionView
from streams.deciders.settings import CanarySettings, DeciderSettings
from streams.deciders.types import US, Cause, Input, Tick, decision

NAME = "canary"


@dataclass(frozen=True, slots=True)
class Canary:
    release: BundleCanaried
    cause: Cause  # the bundle_canaried decision: what the timer's decision names
    due_us: int
    noticed: FrozenMap[str, int]  # instance -> notice time
    reactions_ms: tuple[int, ...] = ()
    verified: frozenset[str] = frozenset()
    failures: tuple[str, ...] = ()  # evidence event ids
    losses: tuple[str, ...] = ()
    dead_letters: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CanaryState:
    bundles: FrozenMap[str, tuple[int, str]]  # workload -> (version, sha) in force (promoted)
    running: FrozenMap[str, FrozenMap[str, int]]  # workload -> pool -> instances
    canaries: FrozenMap[str, Canary]  # workload -> its running canary
    published: FrozenMap[str, int]  # workload -> newest version published


def _p99(values: tuple[int, ...]) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, -(-99 * len(ordered) // 100) - 1)]


class CanaryDecider:
    name = NAME
    inputs = frozenset(
        {
            ContractPublished.EVENT_TYPE,
            InstanceLaunched.EVENT_TYPE,
            InstanceLost.EVENT_TYPE,
            InstanceDeleted.EVENT_TYPE,
            NoticeReceived.EVENT_TYPE,
            DrainStarted.EVENT_TYPE,
            DrainCompleted.EVENT_TYPE,
            DeadLettered.EVENT_TYPE,
            BundleRolledBack.EVENT_TYPE,  # an operator's (`spotcap canary roll-back`)
        }
    )

    def __init__(self, settings: DeciderSettings | None = None) -> None:
        self.settings: CanarySettings = (settings or DeciderSettings()).canary

    def key(self, event: Envelope) -> str | None:
        return event.region

    def initial(self, key: str) -> CanaryState:
        return CanaryState(FrozenMap(), FrozenMap(), FrozenMap(), FrozenMap())

    def due_at(self, state: CanaryState) -> int | None:
        return min((c.due_us for c in state.canaries.values()), default=None)

    # -- folding -----------------------------------------------------------------------------

    def evolve(self, state: CanaryState, event: Input) -> CanaryState:
        if isinstance(event, Tick):
            return state
        p = event.payload
        if isinstance(p, ContractPublished):
            newest = state.published.get(p.workload_id)
            if newest is not None and p.contract_version <= newest:
                return state
            published = FrozenMap({**state.published, p.workload_id: p.contract_version})
            if p.workload_id in state.bundles:
                return replace(state, published=published)
            # A workload's first bundle is in force at once: there is nothing to compare it with.
            force = (p.contract_version, p.contract_sha256)
            first = FrozenMap({**state.bundles, p.workload_id: force})
            return replace(state, bundles=first, published=published)
        if isinstance(p, InstanceLaunched | InstanceLost | InstanceDeleted):
            state = self._count(
                state, p.workload_id, p.pool_id, 1 if isinstance(p, InstanceLaunched) else -1
            )
        if isinstance(p, BundleCanaried):
            canary = Canary(p, Cause.of(event), event.occurred_at + p.hold_s * US, FrozenMap())
            return replace(state, canaries=FrozenMap({**state.canaries, p.workload_id: canary}))
        if isinstance(p, BundlePromoted):
            force = (p.contract_version, p.contract_sha256)
            state = replace(state, bundles=FrozenMap({**state.bundles, p.workload_id: force}))
        if isinstance(p, BundlePromoted | BundleRolledBack):
            if p.workload_id in state.canaries and (
                state.canaries[p.workload_id].release.contract_sha256 == p.contract_sha256
            ):
                left = {w: c for w, c in state.canaries.items() if w != p.workload_id}
                return replace(state, canaries=FrozenMap(left))
            return state
        if state.canaries:
            canaries = {w: self._observe(c, event) for w, c in state.canaries.items()}
            return replace(state, canaries=FrozenMap(canaries))
        return state

    def _count(self, state: CanaryState, workload: str, pool: str, delta: int) -> CanaryState:
        pools = dict(state.running.get(workload, {}))
        pools[pool] = pools.get(pool, 0) + delta
        if pools[pool] <= 0:
            del pools[pool]
        return replace(state, running=FrozenMap({**state.running, workload: FrozenMap(pools)}))

    def _observe(self, c: Canary, event: Envelope) -> Canary:
        p = event.payload
        if isinstance(p, DeadLettered):
            return replace(c, dead_letters=(*c.dead_letters, event.event_id))
        workload = getattr(p, "workload_id", None)
        if workload != c.release.workload_id:
            return c
        pools = c.release.canary_pool_ids
        if isinstance(p, NoticeReceived) and p.pool_id in pools:
            return replace(c, noticed=FrozenMap({**c.noticed, p.instance_id: event.occurred_at}))
        if isinstance(p, DrainStarted) and p.instance_id in c.noticed:
            ms = (event.occurred_at - c.noticed[p.instance_id]) // 1000
            return replace(c, reactions_ms=(*c.reactions_ms, ms))
        if isinstance(p, DrainCompleted) and p.instance_id in c.noticed:
            if p.verified and not p.overrun:
                return replace(c, verified=c.verified | {p.instance_id})
            return replace(c, failures=(*c.failures, event.event_id))
        if isinstance(p, InstanceLost) and p.pool_id in pools and p.instance_id not in c.verified:
            return replace(c, losses=(*c.losses, event.event_id))
        return c

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, state: CanaryState, event: Input, view: RegionView) -> list[Envelope]:
        if isinstance(event, Tick):
            return [self._at_hold_end(c, event.at_us) for c in state.canaries.values()
                    if c.due_us <= event.at_us]  # fmt: skip
        p = event.payload
        if isinstance(p, ContractPublished):
            return self._release(state, event, p)
        out = []
        for c in state.canaries.values():
            seen = self._observe(c, event)
            if seen is not c:
                broken = self._broken(seen)
                if broken is not None:
                    out.append(self._roll_back(seen, event.occurred_at, *broken))
        return out

    def _release(self, state: CanaryState, event: Envelope, p: ContractPublished) -> list[Envelope]:
        previous = state.bundles.get(p.workload_id)
        newest = state.published.get(p.workload_id)
        if previous is None or (newest is not None and p.contract_version <= newest):
            return []  # a first bundle, or an old version again: nothing to canary
        out = []
        running = state.canaries.get(p.workload_id)
        if previous[1] == p.contract_sha256:
            if running is None:
                return []  # the bundle in force, unchanged
            # The bundle in force published again while a canary runs: the canary ends.
            return [self._roll_back(running, event.occurred_at, "superseded",
                                    f"version {p.contract_version} brings back the bundle in "
                                    f"force while version {running.release.contract_version} "
                                    "was in its canary", (event.event_id,))]  # fmt: skip
        if running is not None:
            out.append(self._roll_back(running, event.occurred_at, "superseded",
                                       f"version {p.contract_version} was published while "
                                       f"version {running.release.contract_version} was in its "
                                       "canary", (event.event_id,)))  # fmt: skip
        pools = sorted(state.running.get(p.workload_id, {}))
        cause = Cause.of(event)
        if not pools:
            promoted = BundlePromoted(
                p.workload_id, p.contract_version, p.contract_sha256, 0, 0, None, 0, 0, 0,
                "no node runs the workload: nothing to canary, the bundle goes to every node",
            )  # fmt: skip
            return [*out, decision(promoted, cause=cause, at_us=event.occurred_at, decider=NAME)]
        s = self.settings
        count = max(1, -(-round(s.share_ratio * len(pools) * 1_000_000) // 1_000_000))
        chosen = sorted(
            sorted(pools, key=lambda pool: derived_event_id(p.contract_sha256, "canary", pool))[
                :count
            ]
        )
        canaried = BundleCanaried(
            p.workload_id, p.contract_version, p.contract_sha256, previous[1], tuple(chosen),
            s.share_ratio, s.hold_s, s.max_notice_to_drain_p99_ms, s.max_drain_failures,
            s.max_losses_without_drain, s.max_dead_letters, s.min_drains,
        )  # fmt: skip
        return [*out, decision(canaried, cause=cause, at_us=event.occurred_at, decider=NAME)]

    def _broken(self, c: Canary) -> tuple[str, str, tuple[str, ...]] | None:
        r = c.release
        p99 = _p99(c.reactions_ms)
        if p99 is not None and p99 > r.max_notice_to_drain_p99_ms:
            limit_ms = r.max_notice_to_drain_p99_ms
            why = f"notice to drain p99 {p99:,} ms, above the limit of {limit_ms:,} ms"
            return ("notice_to_drain_p99", why, ())
        if len(c.failures) > r.max_drain_failures:
            why = (f"{len(c.failures)} drains completed unverified or overrun, above the limit "
                   f"of {r.max_drain_failures}")  # fmt: skip
            return ("drain_failures", why, c.failures[::-1])
        if len(c.losses) > r.max_losses_without_drain:
            why = (f"{len(c.losses)} instances lost without a verified drain, above the limit "
                   f"of {r.max_losses_without_drain}")  # fmt: skip
            return ("losses_without_drain", why, c.losses[::-1])
        if len(c.dead_letters) > r.max_dead_letters:
            why = (f"{len(c.dead_letters)} records dead-lettered during the hold, above the "
                   f"limit of {r.max_dead_letters}")  # fmt: skip
            return ("dead_letters", why, c.dead_letters[::-1])
        return None

    def _roll_back(
        self, c: Canary, at_us: int, rule: str, reason: str, evidence: tuple[str, ...]
    ) -> Envelope:
        r = c.release
        back = BundleRolledBack(
            r.workload_id, r.contract_version, r.contract_sha256, r.previous_contract_sha256,
            rule, reason, len(c.reactions_ms), _p99(c.reactions_ms), evidence,
        )  # fmt: skip
        return decision(back, cause=c.cause, at_us=at_us, decider=NAME, discriminator=rule)

    def _at_hold_end(self, c: Canary, at_us: int) -> Envelope:
        r = c.release
        drains = len(c.reactions_ms)
        if drains < r.min_drains:
            return self._roll_back(c, at_us, "unproven", f"{drains} drains in the canary "
                                   f"partition in {r.hold_s:,} s, fewer than the {r.min_drains} "
                                   "that prove a bundle; run a drill on a canary pool "
                                   "(spotcap drill run) and publish again", ())  # fmt: skip
        p99 = _p99(c.reactions_ms)
        promoted = BundlePromoted(
            r.workload_id, r.contract_version, r.contract_sha256, r.hold_s, drains, p99,
            len(c.failures), len(c.losses), len(c.dead_letters),
            f"held {r.hold_s:,} s in {len(r.canary_pool_ids)} canary pools: {drains} drains, "
            f"notice to drain p99 {p99:,} ms (limit {r.max_notice_to_drain_p99_ms:,})",
        )  # fmt: skip
        return decision(promoted, cause=c.cause, at_us=at_us, decider=NAME)
