"""Depth-first water-filling with caps (ADR-08), and the floor spread over halls (ADR-22).

Pure arithmetic over candidates the caller has already filtered and ordered; the planner and
the replacement decider share it.

**Reclaimable spread** (`spread`). Candidates come best first (deepest, least interrupted,
cheapest: the scorer's order). Water-filling starts on the first `min_pools` of them and puts
each next instance in the pool holding the least of the workload (ties: the better-ranked
pool), skipping a pool when one more instance would take it above the pool cap, its correlation
group above the group cap, or past its room; only when none of the active pools can take one
does the next candidate join. With `min_pools` or more eligible candidates the caps hold
strictly against the workload's reclaimable capacity *after* the plan: when room or caps leave
part of the request unplaced, the plan is redone for what could be placed (the caps tighten
with the total) until it places all of it, and the rest is reported unplaced. With fewer
eligible candidates the caps cannot hold (n pools cannot each stay under 15%); the plan then
spreads evenly over what there is and says so, never silently.

Instances are whole, so only a pool whose instance is no larger than the pool cap can take
part in a capped spread: a 40-vCPU workload (a cap of 6 vCPU a pool) can use 4-vCPU pools,
not 8-vCPU ones. When fewer than `min_pools` candidates are that fine, the caps cannot hold
either, and the plan spreads evenly over every candidate, one instance a pool as far as it
can, and says so (the loop showed what the strict alternative costs: a quarter of the vCPU of
small workloads unplaced, so on guaranteed capacity, and an escalation for most of them).

**Floor spread** (`spread_floor`). Committed capacity first, always: a guaranteed pool is used
only when no committed pool has room for another instance. Within each purchase model the
next instance goes to the hall holding the least of the floor, so a floor over at least three
halls is spread over them; halls to avoid (a hall just lost) are used only when no other hall
has room.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from schemas.events import PurchaseModel
from streams.deciders.settings import PlacementSettings


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pool that may receive instances: its identity, shape and room now."""

    pool_id: str
    correlation_group: str
    hall: str
    instance_vcpu: int
    room_vcpu: int


@dataclass(frozen=True, slots=True)
class Spread:
    """A reclaimable plan: new vCPU per pool, what stayed unplaced, and whether caps held."""

    allocations: Mapping[str, int]
    unplaced_vcpu: int
    caps_held: bool
    reason: str | None
    pool_cap_vcpu: int
    group_cap_vcpu: int
    eligible: int
    avoided: bool  # whether every new instance kept out of the groups to avoid


@dataclass(frozen=True, slots=True)
class FloorSpread:
    """A floor plan: new vCPU per (pool, purchase model), and what stayed unplaced."""

    allocations: Mapping[tuple[str, PurchaseModel], int]
    unplaced_vcpu: int
    halls: frozenset[str]


def spread(
    need_vcpu: int,
    held: Mapping[str, int],
    group_of: Mapping[str, str],
    candidates: Sequence[Candidate],
    *,
    settings: PlacementSettings,
    avoid_groups: frozenset[str] = frozenset(),
) -> Spread:
    """Place `need_vcpu` more reclaimable vCPU over `candidates` (best first), on top of what
    the workload already `held` per pool (`group_of` maps every held or candidate pool)."""
    held_total = sum(held.values())
    target = max(0, need_vcpu)
    whole_cap, _ = _caps(held_total + target, settings, strict=True)
    fit = [c for c in candidates if c.instance_vcpu <= whole_cap]
    strict = len(fit) >= settings.min_pools
    coarse = len(candidates) - len(fit)
    if strict:
        candidates = fit
    eligible = len(candidates)
    groups = {c.correlation_group for c in candidates}
    preferred = [c for c in candidates if c.correlation_group not in avoid_groups]
    fallback = [c for c in candidates if c.correlation_group in avoid_groups]
    pool_cap, group_cap = _caps(held_total + target, settings, strict=strict)
    placed, avoided = _fill(
        target,
        held,
        group_of,
        tiers=(preferred, fallback),
        pool_cap=pool_cap,
        group_cap=group_cap,
        settings=settings,
    )
    if strict:  # the caps were for the whole request; hold them for what was placed
        placed = _trim(
            held, placed, group_of, {c.pool_id: c.instance_vcpu for c in candidates}, settings
        )
        pool_cap, group_cap = _caps(held_total + sum(placed.values()), settings, strict=True)
    placed_vcpu = sum(placed.values())
    unplaced = max(0, need_vcpu - placed_vcpu)
    caps_held = strict and _within_caps(held, placed, group_of, settings)
    reason = None
    if not strict and coarse and eligible >= settings.min_pools:
        reason = (
            f"only {len(fit)} of {eligible} eligible pools have instances within the pool cap "
            f"({whole_cap} vCPU) of this workload, fewer than {settings.min_pools}: the caps "
            f"cannot hold, so the plan spreads evenly over all {eligible}"
        )
        eligible = len(fit)
        pool_cap = group_cap = 0
    elif not strict:
        reason = (
            f"only {eligible} eligible pools in {len(groups)} correlation groups, fewer than "
            f"{settings.min_pools}: the caps cannot hold, so the plan spreads evenly over them"
        )
        pool_cap = group_cap = 0
    elif not caps_held:  # new instances never break a cap: what the workload held already did
        broken = caps_broken(_merge(held, placed), group_of, settings)
        reason = f"a cap was broken before this plan and still is: {broken}"
    elif unplaced:
        smallest = min((c.instance_vcpu for c in candidates), default=0)
        too_coarse = (
            f"; the smallest eligible instance ({smallest} vCPU) is larger than the pool cap"
            if smallest > pool_cap
            else ""
        )
        reason = (
            f"caps held; {unplaced} vCPU unplaced: the room of {eligible} eligible pools in "
            f"{len(groups)} groups under the caps ({pool_cap} vCPU per pool, {group_cap} per "
            f"group) took {placed_vcpu} of {need_vcpu} vCPU{too_coarse}"
        )
    if avoid_groups and not avoided:
        used = sorted({group_of[p] for p in placed if group_of[p] in avoid_groups})
        note = f"could not keep out of {', '.join(used)}: no other group had room"
        reason = f"{reason}; {note}" if reason else note
    return Spread(placed, unplaced, caps_held, reason, pool_cap, group_cap, eligible, avoided)


_HEADROOM_VCPU = 1 << 20  # more than any instance: "no cap" for a relaxed plan


def _caps(total: int, settings: PlacementSettings, *, strict: bool) -> tuple[int, int]:
    if not strict:
        # The caps cannot hold over fewer than `min_pools` pools: water-filling still spreads
        # evenly over what there is, but no cap may leave the work unplaced.
        return total + _HEADROOM_VCPU, total + _HEADROOM_VCPU
    return math.floor(settings.pool_cap_share * total), math.floor(settings.group_cap_share * total)


def _fill(
    target: int,
    held: Mapping[str, int],
    group_of: Mapping[str, str],
    *,
    tiers: tuple[Sequence[Candidate], Sequence[Candidate]],
    pool_cap: int,
    group_cap: int,
    settings: PlacementSettings,
) -> tuple[dict[str, int], bool]:
    """Water-fill `target` vCPU tier by tier; returns new vCPU per pool and whether the second
    tier (the groups to avoid) stayed unused."""
    level = dict(held)
    group_level: dict[str, int] = {}
    for pool_id, vcpu in held.items():
        group = group_of.get(pool_id, pool_id)
        group_level[group] = group_level.get(group, 0) + vcpu
    placed: dict[str, int] = {}
    remaining = target
    avoided = True
    for tier_index, tier in enumerate(tiers):
        order = {c.pool_id: i for i, c in enumerate(tier)}
        active = list(tier[: settings.min_pools])
        waiting = list(tier[settings.min_pools :])
        room = {c.pool_id: c.room_vcpu for c in tier}
        while remaining > 0:
            options = [
                c
                for c in active
                if room[c.pool_id] >= c.instance_vcpu
                and level.get(c.pool_id, 0) + c.instance_vcpu <= pool_cap
                and group_level.get(c.correlation_group, 0) + c.instance_vcpu <= group_cap
            ]
            if not options:
                if not waiting:
                    break
                active.append(waiting.pop(0))
                continue
            # The last instances: what fits in what is left, else the smallest that covers
            # it, so a plan overshoots its request by as little as the sizes allow (a
            # 48-vCPU instance for the last 8 vCPU is 40 vCPU running that nobody asked for).
            fitting = [c for c in options if c.instance_vcpu <= remaining]
            if fitting:
                options = fitting
            else:
                least = min(c.instance_vcpu for c in options)
                options = [c for c in options if c.instance_vcpu == least]
            best = min(options, key=lambda c: (level.get(c.pool_id, 0), order[c.pool_id]))
            size = best.instance_vcpu
            level[best.pool_id] = level.get(best.pool_id, 0) + size
            group_level[best.correlation_group] = group_level.get(best.correlation_group, 0) + size
            placed[best.pool_id] = placed.get(best.pool_id, 0) + size
            room[best.pool_id] -= size
            remaining -= size
            if tier_index:
                avoided = False
    return placed, avoided


def _trim(
    held: Mapping[str, int],
    placed: dict[str, int],
    group_of: Mapping[str, str],
    size_of: Mapping[str, int],
    settings: PlacementSettings,
) -> dict[str, int]:
    """Take instances back from the fullest new allocations until every pool and group that
    received some is within its cap of the total actually placed (room left part of the
    request unplaced, so the total is smaller than the caps were computed for)."""
    placed = dict(placed)
    while True:
        level = _merge(held, placed)
        total = sum(level.values())
        groups: dict[str, int] = {}
        for pool_id, vcpu in level.items():
            groups[group_of.get(pool_id, pool_id)] = (
                groups.get(group_of.get(pool_id, pool_id), 0) + vcpu
            )
        over = [
            p
            for p in placed
            if level[p] > settings.pool_cap_share * total
            or groups[group_of.get(p, p)] > settings.group_cap_share * total
        ]
        if not over:
            return placed
        fullest = max(over, key=lambda p: (level[p], p))
        placed[fullest] -= size_of[fullest]
        if placed[fullest] <= 0:
            del placed[fullest]


def _within_caps(
    held: Mapping[str, int],
    placed: Mapping[str, int],
    group_of: Mapping[str, str],
    settings: PlacementSettings,
) -> bool:
    return caps_broken(_merge(held, placed), group_of, settings) is None


def caps_broken(
    by_pool: Mapping[str, int], group_of: Mapping[str, str], settings: PlacementSettings
) -> str | None:
    """Which cap a workload's reclaimable vCPU per pool breaks, in words; None if none."""
    total = sum(by_pool.values())
    if not total:
        return None
    by_group: dict[str, int] = {}
    for pool_id, vcpu in by_pool.items():
        if vcpu > settings.pool_cap_share * total:
            return f"pool {pool_id} holds {vcpu} of {total} vCPU"
        group = group_of.get(pool_id, pool_id)
        by_group[group] = by_group.get(group, 0) + vcpu
    for group, vcpu in sorted(by_group.items()):
        if vcpu > settings.group_cap_share * total:
            return f"group {group} holds {vcpu} of {total} vCPU"
    return None


def _merge(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    merged = dict(a)
    for key, value in b.items():
        merged[key] = merged.get(key, 0) + value
    return merged


def spread_floor(
    need_vcpu: int,
    held_by_hall: Mapping[str, int],
    committed: Iterable[Candidate],
    guaranteed: Iterable[Candidate],
    avoid_halls: frozenset[str] = frozenset(),
) -> FloorSpread:
    """Place `need_vcpu` of floor: committed pools first, then guaranteed, each over halls."""
    level = dict(held_by_hall)
    placed: dict[tuple[str, PurchaseModel], int] = {}
    remaining = need_vcpu
    tiers: tuple[tuple[PurchaseModel, list[Candidate]], ...] = (
        ("committed", list(committed)),
        ("guaranteed", list(guaranteed)),
    )
    for model, pools in tiers:
        room = {c.pool_id: c.room_vcpu for c in pools}
        for keep_out in (True, False):
            while remaining > 0:
                options = [
                    c
                    for c in pools
                    if room[c.pool_id] >= c.instance_vcpu
                    and not (keep_out and c.hall in avoid_halls)
                ]
                if not options:
                    break
                fitting = [c for c in options if c.instance_vcpu <= remaining]
                if fitting:  # as in `_fill`: the last instance overshoots as little as it can
                    options = fitting
                else:
                    least = min(c.instance_vcpu for c in options)
                    options = [c for c in options if c.instance_vcpu == least]
                best = min(
                    options, key=lambda c: (level.get(c.hall, 0), -room[c.pool_id], c.pool_id)
                )
                key = (best.pool_id, model)
                placed[key] = placed.get(key, 0) + best.instance_vcpu
                level[best.hall] = level.get(best.hall, 0) + best.instance_vcpu
                room[best.pool_id] -= best.instance_vcpu
                remaining -= best.instance_vcpu
    halls = frozenset(h for h, v in level.items() if v > 0)
    return FloorSpread(placed, max(0, remaining), halls)
