"""Feasibility rules (a)-(e): each refuses what the platform cannot honour, and says how to fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import FeasibilityEnv, compile_contracts
from contracts.feasibility import (
    check_rate_diversifiable,
    diversification,
    eligible_pools,
)
from tests.test_contracts import BASE, T0_US, Pool, assert_located, compile_one, only_error


def reclaimable_pools(
    groups: int, per_group: int, capacity: int = 1000, rate: float = 0.01, prefix: str = "g"
) -> list[Pool]:
    """`groups` correlation groups of `per_group` pools each."""
    return [
        Pool(
            pool_id=f"p-{prefix}{g}-{i}",
            purchase_model="reclaimable",
            capacity_vcpu=capacity,
            expected_interruptions_per_h=rate,
            correlation_group=f"{prefix}{g}",
            hall=f"hall{g % 3}",
        )
        for g in range(groups)
        for i in range(per_group)
    ]


def committed(capacity: int) -> Pool:
    return Pool("committed-1", "committed", capacity, 0.0, "committed", "hall1")


ROOMY = FeasibilityEnv(pools=[*reclaimable_pools(6, 3), committed(1000)])


def test_a_feasible_contract_passes_every_rule() -> None:
    result = compile_one(BASE + "floor_vcpu: 50\n", ROOMY)
    assert result.errors == ()
    assert result.unchecked_rules == ()
    assert [c.contract.workload for c in result.accepted] == ["etl"]


# -- (a) the final checkpoint fits the drain budget -------------------------------------------


def test_a_checkpoint_that_does_not_fit_the_budget_asks_for_a_larger_budget() -> None:
    # 3 GiB at 50 MB/s = 64.4 s, + 5 s margin = 69.4 s > 60 s
    error = only_error(BASE.replace("1 GiB", "3 GiB") + "drain_budget_s: 60\n")
    assert error.rule == "checkpoint-fits-drain"
    assert_located(error, 11, "drain_budget_s", "64.4 s", "69.4 s", "at least 70")


def test_a_checkpoint_no_budget_can_hold_asks_to_shrink_it() -> None:
    # 8 GiB takes 171.8 s: more than the 115 s any budget may have
    error = only_error(BASE.replace("1 GiB", "8 GiB"))
    assert error.rule == "checkpoint-fits-drain"
    assert_located(error, 10, "checkpoint.size_bytes", "171.8 s", "5.1 GiB")


def test_the_boundary_of_rule_a_is_inclusive() -> None:
    # (90 - 5) s x 50 MB/s = 4.25 GB exactly fits a 90 s budget; one byte more does not.
    fits = BASE.replace("1 GiB", "4250000000")
    assert compile_one(fits).ok
    assert only_error(BASE.replace("1 GiB", "4250000001")).rule == "checkpoint-fits-drain"


def test_rule_a_uses_the_declared_store_throughput() -> None:
    slow = FeasibilityEnv(store_throughput_bytes_per_s=10_000_000)
    assert only_error(BASE, slow).rule == "checkpoint-fits-drain"


@pytest.mark.parametrize("throughput", [0, -1])
def test_a_store_throughput_that_is_not_positive_is_refused(throughput: int) -> None:
    with pytest.raises(ValueError, match="store_throughput_bytes_per_s must be a positive"):
        FeasibilityEnv(store_throughput_bytes_per_s=throughput)


# -- (b) the drain budget fits the notice -----------------------------------------------------


def test_a_drain_budget_beyond_the_notice_margins_is_refused() -> None:
    assert compile_one(BASE + "drain_budget_s: 115\n").ok
    error = only_error(BASE + "drain_budget_s: 116\n")
    assert error.rule == "drain-within-notice"
    assert_located(error, 11, "drain_budget_s", "115 s", "120 s notice", "at most 115")


# -- (c) floors fit the committed capacity ----------------------------------------------------


def test_a_floor_larger_than_the_committed_capacity_is_refused() -> None:
    env = FeasibilityEnv(pools=[*reclaimable_pools(6, 3), committed(40)])
    error = only_error(BASE + "floor_vcpu: 50\n", env)
    assert error.rule == "floor-within-committed"
    assert_located(error, 11, "floor_vcpu", "40 vCPU", "at most 40")


def test_floors_share_committed_capacity_by_priority() -> None:
    env = FeasibilityEnv(pools=[*reclaimable_pools(6, 3), committed(100)])
    first = BASE.replace("workload: etl", "workload: first") + "floor_vcpu: 60\npriority: 0\n"
    second = BASE.replace("workload: etl", "workload: second") + "floor_vcpu: 60\npriority: 5\n"
    files = {Path("contracts/z-first.yaml"): first, Path("contracts/a-second.yaml"): second}
    result = compile_contracts(files, env, published_at_us=T0_US)
    assert [c.contract.workload for c in result.accepted] == ["first"]
    (error,) = result.errors
    assert str(error).startswith("contracts/a-second.yaml:11: floor_vcpu: ")
    assert "first" in error.message and "at most 40" in error.fix


def test_a_tier_default_floor_is_blamed_on_the_tier_line() -> None:
    env = FeasibilityEnv(pools=[*reclaimable_pools(6, 3), committed(10)])
    text = BASE.replace("tier: t3", "tier: t1").replace("checkpoint:\n  size_bytes: 1 GiB\n", "")
    error = only_error(text, env)
    assert error.rule == "floor-within-committed"
    assert error.line == 7
    assert "tier t1 default" in error.message


# -- (d) the tolerated rate leaves enough pools under the caps --------------------------------


def test_too_few_pools_below_the_tolerated_rate() -> None:
    calm = reclaimable_pools(4, 1, rate=0.01, prefix="calm")
    busy = reclaimable_pools(6, 1, rate=0.3, prefix="busy")
    env = FeasibilityEnv(pools=[*calm, *busy])
    error = only_error(BASE + "tolerated_interruptions_per_h: 0.05\n", env)
    assert error.rule == "rate-diversifiable"
    assert_located(
        error, 11, "tolerated_interruptions_per_h", "only 4 reclaimable pools", "at least 0.3"
    )


def test_too_few_correlation_groups() -> None:
    env = FeasibilityEnv(pools=reclaimable_pools(3, 4))  # 12 pools, 3 groups
    error = only_error(BASE + "tolerated_interruptions_per_h: 0.05\n", env)
    assert error.rule == "rate-diversifiable"
    assert "3 correlation groups" in error.message and "4 needed" in error.message


def test_the_caps_cannot_hold_the_reclaimable_part() -> None:
    # R = 700: 105 per pool, 210 per group. 3 groups x 3 pools of 300 -> 630 < 700
    env = FeasibilityEnv(pools=reclaimable_pools(3, 3, capacity=300))
    text = BASE.replace("target_vcpu: 100", "target_vcpu: 700")
    error = only_error(text, env)
    assert "hold 630 of the 700" in error.message
    # the worked example of docs/contracts.md: a fourth group of two pools makes it feasible
    fourth = [Pool(f"p-g3-{i}", "reclaimable", 300, 0.01, "g3", "hall0") for i in range(2)]
    assert compile_one(text, FeasibilityEnv(pools=[*reclaimable_pools(3, 3, 300), *fourth])).ok


def test_a_workload_entirely_on_its_floor_needs_no_diversification() -> None:
    env = FeasibilityEnv(pools=[committed(1000)])
    assert compile_one(BASE + "floor_vcpu: 100\n", env).ok


@settings(max_examples=60, deadline=None)
@given(
    capacities=st.lists(st.integers(0, 400), min_size=1, max_size=20),
    groups=st.lists(st.integers(0, 6), min_size=20, max_size=20),
    smaller=st.integers(1, 2000),
    larger=st.integers(1, 2000),
)
def test_feasibility_is_monotone_in_the_reclaimable_part(
    capacities: list[int], groups: list[int], smaller: int, larger: int
) -> None:
    """Whatever holds R vCPU also holds any R' < R (the fix's bisection relies on it)."""
    smaller, larger = sorted((smaller, larger))
    pools = [
        Pool(f"p{i}", "reclaimable", c, 0.01, f"g{groups[i]}", "h")
        for i, c in enumerate(capacities)
    ]
    env = FeasibilityEnv()
    if diversification(larger, pools, env).feasible(env):
        assert diversification(smaller, pools, env).feasible(env)


def test_the_suggested_rate_is_feasible() -> None:
    pools = [
        *reclaimable_pools(2, 4, rate=0.01, prefix="calm"),
        *reclaimable_pools(6, 2, rate=0.2, prefix="busy"),
    ]
    env = FeasibilityEnv(pools=pools)
    result = compile_one(BASE + "tolerated_interruptions_per_h: 0.05\n", env)
    (error,) = result.errors
    assert "at least 0.2" in error.fix
    assert compile_one(BASE + "tolerated_interruptions_per_h: 0.2\n", env).ok
    assert len(eligible_pools(pools, 0.05)) == 8


def test_without_pools_rules_c_and_d_are_not_checked() -> None:
    contract = compile_one(BASE + "floor_vcpu: 100\n").accepted[0].contract
    assert check_rate_diversifiable(contract, FeasibilityEnv()) is None
    assert compile_one(BASE + "floor_vcpu: 100\n").unchecked_rules == (
        "floor-within-committed",
        "rate-diversifiable",
    )


# -- (e) a spend cap names its approver -------------------------------------------------------


def test_a_spend_cap_without_an_approver_is_refused_and_with_one_accepted() -> None:
    capped = BASE + 'fallback:\n  spend_cap_per_day_eur_micros: "EUR 50"\n'
    assert only_error(capped).rule == "spend-cap-has-approver"
    assert compile_one(capped + "  approver: ops@example.org\n").ok
    assert compile_one(BASE + "fallback:\n  spend_cap_per_day_eur_micros: 0\n").ok


def test_the_suggested_rate_is_rounded_up_to_one_that_passes() -> None:
    # The nearest 6-digit rendering of 0.012345649 (0.0123456) is below the pools' rate.
    pools = [
        *reclaimable_pools(3, 3, rate=0.01, prefix="calm"),
        *reclaimable_pools(4, 3, rate=0.012345649, prefix="busy"),
    ]
    env = FeasibilityEnv(pools=pools)
    text = BASE.replace("target_vcpu: 100", "target_vcpu: 7000")
    (error,) = compile_one(text + "tolerated_interruptions_per_h: 0.01\n", env).errors
    match = re.search(r"at least ([0-9.]+)", error.fix)
    assert match, error.fix
    suggested = match.group(1)
    assert float(suggested) >= 0.012345649
    assert compile_one(text + f"tolerated_interruptions_per_h: {suggested}\n", env).ok
