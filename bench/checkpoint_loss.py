"""The work a checkpoint interval lets reclaims destroy, measured on a simulated region hit by
hall-wide waves (ADR-20; docs/checkpoints.md).

Two runs of the same region (same seed: the same reclaims and waves). The first runs every
workload that resumes from checkpoints at its contract's declared interval and observes, per
workload, what the scorer observes per pool: interruptions per reclaimable instance-hour, waves
included, and the share of them that came without notice. From those figures and the
contract's budget (tolerated rate x declared interval / 2), the interval is derived as the
client derives it (`checkpoint.interval`); the second run uses the derived intervals. For each
run, over the checkpointing workloads: the work lost per hour of work against the budget (all
losses; the waves' share), how many workloads stayed within their own budget, and the mean loss
of one loss without a final checkpoint against half the interval. Once with the reclaimer's
default 5 % of reclaims without notice, once with every notice lost (ADR-05's floor).

    .venv/bin/python bench/checkpoint_loss.py [--seed 1] [--days 7] [--workloads 120]
                                              [--waves-per-day 1.0]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from checkpoint.interval import LossBudget, PoolRisk, periodic_interval
from schemas.events import InstanceLaunched, InstanceLost, UsageInterval, WorkWasted
from sim.reclaimer import ReclaimSettings
from sim.region import RegionSim, SimConfig


@dataclass
class Tally:
    budget_s_per_h: float = 0.0
    interval_s: float = 0.0
    used_vcpu_h: float = 0.0
    instance_h: float = 0.0
    losses: int = 0
    losses_without_notice: int = 0
    wasted_vcpu_s: float = 0.0
    wave_wasted_vcpu_s: float = 0.0
    costly_s: list[float] = field(default_factory=list)
    """Seconds of work each loss without a final checkpoint destroyed (per vCPU)."""

    @property
    def lost_s_per_h(self) -> float:
        return self.wasted_vcpu_s / self.used_vcpu_h if self.used_vcpu_h else 0.0


def run(config: SimConfig, intervals: dict[str, float] | None) -> tuple[dict[str, Tally], float]:
    """One run; `intervals` (workload -> s) replaces the declared ones."""
    sim = RegionSim(config)
    tallies: dict[str, Tally] = {}
    for workload in sim.workloads:
        contract = workload.contract
        declared_s = contract.checkpoint.periodic_interval_s
        if contract.restart.semantics != "resume" or not declared_s:
            continue
        budget = LossBudget.of_contract(contract.tolerated_interruptions_per_h, declared_s)
        tally = tallies[workload.workload_id] = Tally(budget.loss_s_per_h, declared_s)
        if intervals is not None:
            tally.interval_s = intervals[workload.workload_id]
            checkpoint = contract.checkpoint.model_copy(
                update={"periodic_interval_s": max(1, round(tally.interval_s))}
            )
            sim.work.use_contract(
                workload.workload_id, contract.model_copy(update={"checkpoint": checkpoint})
            )
    owner: dict[str, str] = {}
    vcpu: dict[str, int] = {}
    started = time.monotonic()
    for batch in sim.run():
        for envelope in batch:
            p = envelope.payload
            if isinstance(p, InstanceLaunched) and p.workload_id in tallies:
                owner[p.instance_id], vcpu[p.instance_id] = p.workload_id, p.vcpu
            elif isinstance(p, UsageInterval) and p.workload_id in tallies:
                if p.purchase_model == "reclaimable":
                    tallies[p.workload_id].used_vcpu_h += p.used_vcpu_h
                    tallies[p.workload_id].instance_h += p.used_vcpu_h / p.vcpu
            elif isinstance(p, InstanceLost) and p.instance_id in owner:
                tally = tallies[owner[p.instance_id]]
                tally.losses += 1
                tally.losses_without_notice += not p.with_notice
            elif isinstance(p, WorkWasted) and p.workload_id in tallies:
                tally = tallies[p.workload_id]
                tally.wasted_vcpu_s += p.wasted_vcpu_s
                if (envelope.correlation_id or "").startswith("wave"):
                    tally.wave_wasted_vcpu_s += p.wasted_vcpu_s
                if p.wasted_vcpu_s > 0:
                    tally.costly_s.append(p.wasted_vcpu_s / vcpu[p.instance_id])
    return tallies, time.monotonic() - started


def derive(sim_config: SimConfig, observed: dict[str, Tally]) -> dict[str, float]:
    """Each workload's interval from its budget and the rates its first run observed."""
    contracts = {w.workload_id: w.contract for w in RegionSim(sim_config).workloads}
    derived = {}
    for workload_id, tally in observed.items():
        contract = contracts[workload_id]
        rate = tally.losses / tally.instance_h if tally.instance_h else 0.0
        share = tally.losses_without_notice / tally.losses if tally.losses else 1.0
        write_s = contract.checkpoint.size_bytes / sim_config.checkpoint_bandwidth_bytes_per_s
        decision = periodic_interval(
            LossBudget(tally.budget_s_per_h, contract.checkpoint.periodic_interval_s),
            PoolRisk(rate, share),
            write_s=write_s,
            final_fits=write_s <= contract.drain_budget_s,
        )
        derived[workload_id] = decision.interval_s
    return derived


def report(name: str, tallies: dict[str, Tally], seconds: float) -> None:
    used = sum(t.used_vcpu_h for t in tallies.values())
    wasted = sum(t.wasted_vcpu_s for t in tallies.values())
    wave = sum(t.wave_wasted_vcpu_s for t in tallies.values())
    budget = sum(t.budget_s_per_h * t.used_vcpu_h for t in tallies.values())
    within = sum(1 for t in tallies.values() if t.lost_s_per_h <= t.budget_s_per_h)
    intervals = sorted(t.interval_s / 60 for t in tallies.values())
    median = intervals[len(intervals) // 2]
    costly = [x for t in tallies.values() for x in t.costly_s]
    halves = [t.interval_s / 2 for t in tallies.values() for _ in t.costly_s]
    print(f"{name} ({seconds:.0f} s of simulation)")
    print(
        f"  {len(tallies)} workloads, {used:,.0f} reclaimable vCPU-h; intervals "
        f"{intervals[0]:.0f} to {intervals[-1]:.0f} min, median {median:.0f}"
    )
    print(
        f"  lost {wasted / used:.1f} s of work per hour of work (their budgets, weighted: "
        f"{budget / used:.1f} s/h); the waves' losses {wave / max(wasted, 1e-9):.0%} of it"
    )
    worst = max(tallies.values(), key=lambda t: t.lost_s_per_h / t.budget_s_per_h)
    print(
        f"  within their own budget: {within} of {len(tallies)} workloads; the worst lost "
        f"{worst.lost_s_per_h:.0f} s/h against {worst.budget_s_per_h:.0f} "
        f"(interval {worst.interval_s / 60:.0f} min, {worst.losses} losses)"
    )
    if costly:
        print(f"  {len(costly)} losses without a final checkpoint destroyed "
              f"{sum(costly) / len(costly) / 60:.1f} min of work each on average "
              f"(half their interval: {sum(halves) / len(halves) / 60:.1f} min)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--workloads", type=int, default=120)
    parser.add_argument("--waves-per-day", type=float, default=1.0)
    args = parser.parse_args()
    for share in (0.05, 1.0):  # the reclaimer's default; every notice lost (ADR-05's floor)
        config = SimConfig(
            seed=args.seed,
            days=args.days,
            workloads=args.workloads,
            reclaims=ReclaimSettings(waves_per_day=args.waves_per_day, no_notice_share=share),
        )
        print(f"== {share:.0%} of reclaims without notice, {args.waves_per_day:g} waves a day")
        declared, seconds = run(config, None)
        report("declared intervals", declared, seconds)
        tallies, seconds = run(config, derive(config, declared))
        report("derived intervals", tallies, seconds)


if __name__ == "__main__":
    main()
