"""The placement caps of ADR-08, as the baseline reports against them (it does not enforce
them): at least `MIN_POOLS` eligible reclaimable pools, no pool above `POOL_CAP_SHARE` and no
correlation group above `GROUP_CAP_SHARE` of a workload's reclaimable vCPU. The same figures
and rules as the deciders' planner (`streams.deciders.waterfill`), so that their decisions
and the baseline's read alike; the provider package cannot import it (layering).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

MIN_POOLS = 8
POOL_CAP_SHARE = 0.15
GROUP_CAP_SHARE = 0.30


@dataclass(frozen=True, slots=True)
class CapsReport:
    """How a workload's reclaimable vCPU per pool, after a plan, stands against the caps."""

    caps_held: bool
    pool_cap_vcpu: int  # 0 when fewer than MIN_POOLS pools are eligible: no cap can hold
    group_cap_vcpu: int
    broken: str | None  # which cap is broken, in words
    eligible: int


def caps_report(
    by_pool: Mapping[str, int], group_of: Mapping[str, str], eligible: int
) -> CapsReport:
    total = sum(by_pool.values())
    if eligible < MIN_POOLS:
        return CapsReport(False, 0, 0, None, eligible)
    broken = caps_broken(by_pool, group_of)
    pool_cap = math.floor(POOL_CAP_SHARE * total)
    group_cap = math.floor(GROUP_CAP_SHARE * total)
    return CapsReport(broken is None, pool_cap, group_cap, broken, eligible)


def caps_broken(by_pool: Mapping[str, int], group_of: Mapping[str, str]) -> str | None:
    """Which cap the vCPU per pool break, in words; None if none."""
    total = sum(by_pool.values())
    if not total:
        return None
    by_group: dict[str, int] = {}
    for pool_id, vcpu in sorted(by_pool.items()):
        if vcpu > POOL_CAP_SHARE * total:
            return f"pool {pool_id} holds {vcpu} of {total} vCPU"
        group = group_of[pool_id]
        by_group[group] = by_group.get(group, 0) + vcpu
    for group, vcpu in sorted(by_group.items()):
        if vcpu > GROUP_CAP_SHARE * total:
            return f"group {group} holds {vcpu} of {total} vCPU"
    return None


def caps_reason(report: CapsReport, unplaced_vcpu: int, extra: str | None = None) -> str | None:
    """Why the caps did not hold or part of the request stayed unplaced; None when neither."""
    parts: list[str] = []
    if report.eligible < MIN_POOLS:
        parts.append(
            f"only {report.eligible} eligible reclaimable pools, fewer than {MIN_POOLS}: "
            f"the caps cannot hold"
        )
    elif report.broken is not None:
        parts.append(f"the baseline spreads by vCPU without caps: {report.broken}")
    if unplaced_vcpu:
        parts.append(f"{unplaced_vcpu} vCPU unplaced: no eligible pool had room")
    if extra:
        parts.append(extra)
    return "; ".join(parts) or None
