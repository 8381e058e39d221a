"""Time `spotcap demo`: a run of the default region (220 workloads, ~140 pools) written to a fresh
embedded log, and the simulation alone for comparison. Prints wall time, events/s and events by
topic. Target: a 7-day run in under a minute.

    .venv/bin/python bench/demo.py [--days 7] [--seed 1] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provider.sim import RegionSim, SimConfig
from spotcap.config import Settings
from spotcap.demo import run_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile the full run")
    args = parser.parse_args()
    config = SimConfig(seed=args.seed, days=args.days, region="bench")

    start = time.perf_counter()
    count = sum(len(batch) for batch in RegionSim(config).run())
    sim_s = time.perf_counter() - start
    print(f"simulation alone: {count:,} events in {sim_s:.1f} s ({count / sim_s:,.0f} events/s)")

    with tempfile.TemporaryDirectory(prefix="spotcap-bench-") as home:
        settings = Settings(home=Path(home), region="bench")
        profiler = cProfile.Profile() if args.profile else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        report = run_demo(settings, config)
        if profiler:
            profiler.disable()
        wall_s = time.perf_counter() - start
        log_bytes = sum(p.stat().st_size for p in Path(home).rglob("*.avro"))
    events = report["events"]
    print(
        f"spotcap demo --days {args.days:g} --seed {args.seed}: {events:,} events, "
        f"{log_bytes / 2**20:,.0f} MiB of log, in {wall_s:.1f} s wall "
        f"({events / wall_s:,.0f} events/s; target < 60 s for 7 days)"
    )
    for topic, n in sorted(report["events_by_topic"].items(), key=lambda kv: -kv[1]):
        print(f"  {topic:<10} {n:>9,} events")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
