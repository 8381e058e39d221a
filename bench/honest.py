"""The deciders against the baseline stand-in on the ledger's own figure, seed by seed.

For each seed the default region is simulated twice, nothing written (`sim.demo.compare_seed`):
driven by the deciders and by the baseline. Both runs are priced by the ledger writer's rule
in memory (`projections.ledger.pricer`: useful work is what the open claims asked for, surplus
and the idle floor are costs), so the net saving compared is the one the ledger would record.
The table gives, per seed, each figure for both and the targets of issue 22:

- net saving (deciders) higher than the baseline's;
- shortfall (asked for, not running) and wasted work lower;
- instances lost per 1,000 instance-hours lower;
- surplus (running, not asked for) at most 1.2 x the baseline's.

    .venv/bin/python bench/honest.py [--seeds 1 2 3 4 5] [--days 7] [--workloads 220]
                                     [--jobs 2] [--set scoring.saving_weight=60 ...]

A 7-day seed takes about five minutes of one core for both runs; `--jobs 2` runs two seeds at a
time (the machine has two cores). The markdown table goes to stdout (docs/deciders.md holds the
last one, with this command).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim import SimConfig
from sim.demo import compare_seed
from streams.deciders import settings_keys
from streams.deciders.settings import DeciderSettings

SURPLUS_RATIO = 1.2


def settings_with(pairs: list[str]) -> DeciderSettings:
    """DeciderSettings with `section.name=value` pairs changed, each checked against its range
    (as `spotcap replay decisions --set`)."""
    return settings_keys.apply(DeciderSettings(), pairs)


def one_seed(seed: int, days: float, workloads: int, pairs: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    config = SimConfig(seed=seed, days=days, workloads=workloads)
    result = compare_seed(config, settings_with(pairs))
    result["seed"], result["seconds"] = seed, time.monotonic() - started
    return result


def figures(result: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """(deciders, baseline) of each figure the targets are about."""
    c = result["comparison"]
    return {
        key: (c[key]["orchestrator"], c[key]["baseline"])
        for key in (
            "net_saving_eur",
            "shortfall_vcpu_h",
            "wasted_vcpu_h",
            "losses_per_1000_instance_h",
            "surplus_vcpu_h",
        )
    }


def met(f: dict[str, tuple[float, float]]) -> dict[str, bool]:
    return {
        "net saving higher": f["net_saving_eur"][0] > f["net_saving_eur"][1],
        "shortfall lower": f["shortfall_vcpu_h"][0] < f["shortfall_vcpu_h"][1],
        "wasted work lower": f["wasted_vcpu_h"][0] < f["wasted_vcpu_h"][1],
        "losses per instance-hour lower": (
            f["losses_per_1000_instance_h"][0] < f["losses_per_1000_instance_h"][1]
        ),
        f"surplus at most {SURPLUS_RATIO}x": f["surplus_vcpu_h"][0]
        <= SURPLUS_RATIO * f["surplus_vcpu_h"][1],
    }


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| seed | net saving, deciders | baseline | change | shortfall vCPU-h | wasted vCPU-h "
        "| losses /1k inst-h | surplus vCPU-h | surplus ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        f = figures(r)
        net = f["net_saving_eur"]
        change = (net[0] - net[1]) / abs(net[1]) if net[1] else 0.0
        losses = f["losses_per_1000_instance_h"]
        surplus = f["surplus_vcpu_h"]
        ratio = f"{surplus[0] / surplus[1]:.2f}x" if surplus[1] else "n/a"
        rows.append(
            f"| {r['seed']} | EUR {net[0]:,.0f} | EUR {net[1]:,.0f} | {change:+.1%} "
            f"| {f['shortfall_vcpu_h'][0]:,.0f} / {f['shortfall_vcpu_h'][1]:,.0f} "
            f"| {f['wasted_vcpu_h'][0]:,.0f} / {f['wasted_vcpu_h'][1]:,.0f} "
            f"| {losses[0]:.2f} / {losses[1]:.2f} "
            f"| {surplus[0]:,.0f} / {surplus[1]:,.0f} | {ratio} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--workloads", type=int, default=220)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--set", dest="pairs", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(one_seed, seed, args.days, args.workloads, args.pairs)
            for seed in args.seeds
        ]
        results = [f.result() for f in futures]
    settings = ", ".join(args.pairs) or "the default DeciderSettings"
    print(f"{args.days:g} days, {args.workloads} workloads, {settings}; deciders / baseline\n")
    print(table(results))
    print()
    verdicts = [met(figures(r)) for r in results]
    for target in verdicts[0]:
        seeds = [r["seed"] for r, v in zip(results, verdicts, strict=True) if not v[target]]
        print(f"- {target}: {'every seed' if not seeds else 'NOT on seeds ' + str(seeds)}")
    wall = time.monotonic() - started
    cpu = sum(r["seconds"] for r in results)
    runs = f"{cpu:,.0f} s of runs, {args.jobs} at a time"
    print(f"\n{len(results)} seeds in {wall:,.0f} s wall ({runs})")


if __name__ == "__main__":
    main()
