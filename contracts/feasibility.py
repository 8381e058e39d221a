"""Feasibility rules: refuse a contract the platform cannot honour (ADR-03).

Five rules, each a small arithmetic check that names the field to change and by how much:

(a) ``checkpoint-fits-drain``: the final checkpoint is written inside the drain budget,
    ``size_bytes / store_throughput_bytes_per_s + checkpoint_margin_s <= drain_budget_s``;
(b) ``drain-within-notice``: the drain budget fits the notice less the agent's margins,
    ``drain_budget_s <= notice_s - signal_margin_s - safety_margin_s`` (120 - 2 - 3 = 115 s,
    the design's ">= 115 s of the notice left");
(c) ``floor-within-committed``: the floors fit the committed capacity, handed out by
    priority (then workload id), so two workloads never count on the same reserved vCPU;
(d) ``rate-diversifiable``: at least 8 reclaimable pools expect no more interruptions than the
    workload tolerates, and under the caps (no pool above 15%, no correlation group above 30%
    of the workload's reclaimable vCPU) they can hold all of it (ADR-08);
(e) ``spend-cap-has-approver``: a fallback spend cap names the approver paged beyond it
    (ADR-23).

Pools come in through `PoolLike`; this module never imports the pool catalogue. Rules (c) and
(d) need pools; without them the compiler reports them as not checked.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from fractions import Fraction
from typing import Protocol

from schemas.contracts.errors import Finding
from schemas.contracts.model import Contract
from schemas.contracts.units import format_bytes, format_eur

RULES: Mapping[str, str] = {
    "checkpoint-fits-drain": "(a) the final checkpoint is written inside the drain budget",
    "drain-within-notice": "(b) the drain budget fits the notice less the agent's margins",
    "floor-within-committed": "(c) the guaranteed floors fit the committed capacity",
    "rate-diversifiable": "(d) enough pools meet the tolerated rate under the 15%/30% caps",
    "spend-cap-has-approver": "(e) a fallback spend cap names its approver",
}
RULES_NEEDING_POOLS = ("floor-within-committed", "rate-diversifiable")


class PoolLike(Protocol):
    """What the rules read of a pool (the pool catalogue's `Pool` has at least this)."""

    @property
    def pool_id(self) -> str: ...

    @property
    def purchase_model(self) -> str:
        """ "reclaimable", "guaranteed" or "committed"."""
        ...

    @property
    def capacity_vcpu(self) -> int: ...

    @property
    def expected_interruptions_per_h(self) -> float:
        """Interruptions per instance-hour the pool is expected to see."""
        ...

    @property
    def correlation_group(self) -> str: ...

    @property
    def hall(self) -> str: ...


@dataclass(frozen=True, slots=True)
class FeasibilityEnv:
    """What the platform can honour: its pools, its checkpoint store and the notice."""

    pools: Sequence[PoolLike] | None = None  # None: rules (c) and (d) are not checked
    store_throughput_bytes_per_s: int = 50_000_000  # per writer: 2 GB in 40 s (<= 45 s p99)
    notice_s: int = 120
    signal_margin_s: int = 2  # notice to drain signal, p99
    safety_margin_s: int = 3
    checkpoint_margin_s: int = 5  # open, manifest and close around the final write
    min_pools: int = 8
    max_pool_percent: int = 15
    max_group_percent: int = 30

    def __post_init__(self) -> None:
        if self.store_throughput_bytes_per_s <= 0:
            raise ValueError(
                "store_throughput_bytes_per_s must be a positive number of bytes per second, "
                f"not {self.store_throughput_bytes_per_s}: rule (a) divides the checkpoint "
                "size by it"
            )

    @property
    def max_drain_budget_s(self) -> int:
        return self.notice_s - self.signal_margin_s - self.safety_margin_s

    @property
    def min_groups(self) -> int:
        return math.ceil(100 / self.max_group_percent)

    @property
    def checks_pools(self) -> bool:
        return self.pools is not None


# -- (a) and (b): the drain -------------------------------------------------------------------


def checkpoint_write_s(size_bytes: int, env: FeasibilityEnv) -> float:
    """Seconds to write the final checkpoint, margin included."""
    return size_bytes / env.store_throughput_bytes_per_s + env.checkpoint_margin_s


def check_checkpoint_fits_drain(contract: Contract, env: FeasibilityEnv) -> Finding | None:
    """(a) size / throughput + margin <= drain budget, for a workload that checkpoints."""
    if not contract.checkpoint_on_notice:
        return None
    size = contract.checkpoint.size_bytes
    needed_s = checkpoint_write_s(size, env)
    if needed_s <= contract.drain_budget_s:
        return None
    throughput_mb = env.store_throughput_bytes_per_s / 1e6
    message = (
        f"the final checkpoint ({format_bytes(size)}) takes "
        f"{size / env.store_throughput_bytes_per_s:.1f} s to write at {throughput_mb:g} MB/s "
        f"plus a {env.checkpoint_margin_s} s margin = {needed_s:.1f} s, more than drain_budget_s "
        f"{contract.drain_budget_s}"
    )
    needed_budget = math.ceil(needed_s)
    largest = (contract.drain_budget_s - env.checkpoint_margin_s) * (
        env.store_throughput_bytes_per_s
    )
    if needed_budget <= env.max_drain_budget_s:
        return Finding(
            "checkpoint-fits-drain",
            ("drain_budget_s",),
            message,
            f"raise drain_budget_s to at least {needed_budget} (at most "
            f"{env.max_drain_budget_s}), or shrink the final checkpoint to at most "
            f"{format_bytes(max(largest, 0))}",
        )
    largest_ever = (env.max_drain_budget_s - env.checkpoint_margin_s) * (
        env.store_throughput_bytes_per_s
    )
    return Finding(
        "checkpoint-fits-drain",
        ("checkpoint", "size_bytes"),
        message + f"; no drain budget can hold it (the most is {env.max_drain_budget_s} s)",
        f"shrink the final checkpoint to at most {format_bytes(largest_ever)} (write "
        "increments, or shard it across instances), or rely on periodic checkpoints and "
        "set checkpoint.method none with restart.semantics requeue",
    )


def check_drain_within_notice(contract: Contract, env: FeasibilityEnv) -> Finding | None:
    """(b) drain budget <= notice - signal margin - safety margin."""
    if contract.drain_budget_s <= env.max_drain_budget_s:
        return None
    return Finding(
        "drain-within-notice",
        ("drain_budget_s",),
        f"{contract.drain_budget_s} s is more than the {env.max_drain_budget_s} s a notice "
        f"leaves ({env.notice_s} s notice - {env.signal_margin_s} s to signal the drain - "
        f"{env.safety_margin_s} s safety margin)",
        f"lower drain_budget_s to at most {env.max_drain_budget_s}, and checkpoint "
        "periodically so less is left to write on notice",
    )


# -- (e): authority ---------------------------------------------------------------------------


def check_spend_cap_has_approver(contract: Contract) -> Finding | None:
    """(e) a spend cap above zero names the person paged beyond it."""
    fallback = contract.fallback
    if fallback.spend_cap_per_day_eur_micros == 0 or fallback.approver:
        return None
    return Finding(
        "spend-cap-has-approver",
        ("fallback", "approver"),
        f"a fallback spend cap of {format_eur(fallback.spend_cap_per_day_eur_micros)} a "
        "day is declared but nobody is named to approve spend beyond it (ADR-23)",
        "add fallback.approver: <the person paged beyond the cap>, or set "
        "fallback.spend_cap_per_day_eur_micros: 0",
    )


# -- (c): floors on committed capacity --------------------------------------------------------


def committed_vcpu(pools: Iterable[PoolLike]) -> int:
    return sum(p.capacity_vcpu for p in pools if p.purchase_model == "committed")


def check_floors(contracts: Sequence[Contract], env: FeasibilityEnv) -> dict[str, Finding]:
    """(c) hand committed capacity to floors by (priority, workload); refuse what is left over.

    Returns the findings by workload id; an empty dict without pools (not checked).
    """
    if env.pools is None:
        return {}
    total = committed_vcpu(env.pools)
    left = total
    holders: list[str] = []
    found: dict[str, Finding] = {}
    for contract in sorted(contracts, key=lambda c: (c.priority, c.workload)):
        floor = contract.floor_vcpu
        if floor == 0:
            continue
        if floor <= left:
            left -= floor
            holders.append(contract.workload)
            continue
        taken = total - left
        by_others = (
            f", {taken} of them already hold the floors of {', '.join(holders)} (priority first)"
            if holders
            else ""
        )
        found[contract.workload] = Finding(
            "floor-within-committed",
            ("floor_vcpu",),
            f"the floor ({floor} vCPU) is larger than the committed capacity left for it: "
            f"{left} vCPU ({total} vCPU committed in the catalogue{by_others})",
            f"lower floor_vcpu to at most {left}, or reserve more committed capacity "
            "before publishing this contract",
        )
    return found


# -- (d): diversification under the caps ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Diversification:
    """How well a workload's reclaimable part can spread over the pools it may use."""

    reclaimable_vcpu: int
    eligible_pools: int
    correlation_groups: int
    placeable_vcpu: int  # the most the caps let these pools hold

    def feasible(self, env: FeasibilityEnv) -> bool:
        if self.reclaimable_vcpu == 0:
            return True
        return (
            self.eligible_pools >= env.min_pools
            and self.correlation_groups >= env.min_groups
            and self.placeable_vcpu >= self.reclaimable_vcpu
        )


def eligible_pools(pools: Iterable[PoolLike], tolerated_per_h: float) -> list[PoolLike]:
    """Reclaimable pools expected to interrupt no more often than the workload tolerates."""
    return [
        p
        for p in pools
        if p.purchase_model == "reclaimable"
        and p.capacity_vcpu > 0
        and p.expected_interruptions_per_h <= tolerated_per_h
    ]


def diversification(
    reclaimable_vcpu: int, pools: Sequence[PoolLike], env: FeasibilityEnv
) -> Diversification:
    """Water-filling bound: sum over groups of min(30% R, sum over pools of min(cap, 15% R))."""
    pool_cap = Fraction(reclaimable_vcpu * env.max_pool_percent, 100)
    group_cap = Fraction(reclaimable_vcpu * env.max_group_percent, 100)
    by_group: dict[str, Fraction] = defaultdict(Fraction)
    for pool in pools:
        by_group[pool.correlation_group] += min(Fraction(pool.capacity_vcpu), pool_cap)
    placeable = sum((min(group_cap, held) for held in by_group.values()), Fraction(0))
    return Diversification(
        reclaimable_vcpu=reclaimable_vcpu,
        eligible_pools=len(pools),
        correlation_groups=len(by_group),
        placeable_vcpu=math.floor(placeable),
    )


def _largest_placeable(pools: Sequence[PoolLike], env: FeasibilityEnv, upper: int) -> int:
    # Feasibility is monotone in R (halving R at most halves what each cap allows), so bisect.
    low, high = 0, upper
    while low < high:
        mid = (low + high + 1) // 2
        if diversification(mid, pools, env).feasible(env):
            low = mid
        else:
            high = mid - 1
    return low


def _rate_text(candidate: float, passes: Callable[[float], bool]) -> str:
    """The shortest decimal >= `candidate` (rounded up) at which `passes` holds, as written.

    ``f"{candidate:g}"`` rounds to the nearest: 0.012345649 became 0.0123456, which is below
    the pool's rate and still fails.
    """
    exact = Decimal(repr(candidate))
    for digits in range(2, 18):
        step = Decimal(1).scaleb(exact.adjusted() - digits + 1)
        rounded = exact.quantize(step, rounding=ROUND_CEILING)
        if float(rounded) >= candidate and passes(float(rounded)):
            return format(rounded.normalize(), "f")
    return repr(candidate)


def check_rate_diversifiable(contract: Contract, env: FeasibilityEnv) -> Finding | None:
    """(d) the tolerated rate leaves enough pools and groups to hold the reclaimable part."""
    if env.pools is None or contract.reclaimable_vcpu == 0:
        return None
    rate = contract.tolerated_interruptions_per_h
    pools = eligible_pools(env.pools, rate)
    found = diversification(contract.reclaimable_vcpu, pools, env)
    if found.feasible(env):
        return None
    reasons = []
    if found.eligible_pools < env.min_pools:
        reasons.append(
            f"only {found.eligible_pools} reclaimable pools expect at most {rate:g} "
            f"interruptions per hour ({env.min_pools} needed)"
        )
    if found.correlation_groups < env.min_groups:
        reasons.append(
            f"they span {found.correlation_groups} correlation groups ({env.min_groups} needed "
            f"with at most {env.max_group_percent}% in each)"
        )
    if found.placeable_vcpu < found.reclaimable_vcpu:
        reasons.append(
            f"with no pool above {env.max_pool_percent}% and no group above "
            f"{env.max_group_percent}% they hold {found.placeable_vcpu} of the "
            f"{found.reclaimable_vcpu} reclaimable vCPU (target_vcpu - floor_vcpu)"
        )
    fixes = []
    all_pools = env.pools

    def passes(candidate: float) -> bool:
        eligible = eligible_pools(all_pools, candidate)
        return diversification(contract.reclaimable_vcpu, eligible, env).feasible(env)

    for candidate in sorted({p.expected_interruptions_per_h for p in env.pools}):
        if candidate > rate and passes(candidate):
            suggested = _rate_text(candidate, passes)
            fixes.append(f"raise tolerated_interruptions_per_h to at least {suggested}")
            break
    largest = _largest_placeable(pools, env, contract.reclaimable_vcpu)
    if largest > 0:
        fixes.append(
            f"lower the reclaimable part (target_vcpu - floor_vcpu) to at most {largest} vCPU"
        )
    fixes.append("or raise floor_vcpu so more runs on committed capacity")
    return Finding(
        "rate-diversifiable",
        ("tolerated_interruptions_per_h",),
        "cannot be met under the diversification caps (ADR-08): " + "; ".join(reasons),
        ", ".join(fixes),
    )


def check_contract(contract: Contract, env: FeasibilityEnv) -> list[Finding]:
    """Rules (a), (b), (d) and (e) for one contract; (c) spans contracts (`check_floors`)."""
    checks = (
        check_checkpoint_fits_drain(contract, env),
        check_drain_within_notice(contract, env),
        check_rate_diversifiable(contract, env),
        check_spend_cap_has_approver(contract),
    )
    return [finding for finding in checks if finding is not None]
