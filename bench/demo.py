"""Time `spotcap demo` and measure its peak memory.

1. Speed: a run of the default region (220 workloads, ~140 pools, the baseline orchestrator)
   written to a fresh embedded log, and, as the reference, the simulation alone (the same
   events, no encoding, no log). Prints wall time, events/s, the ratio, and events by topic.
   Target: a 7-day run in under a minute.
2. Peak RSS (issue 6: history in bounded memory): `spotcap demo --days D --no-projections`
   (the simulation and its writer into the log) in a fresh process for each of `--rss-days`
   (7 and 30 by default), its peak resident set from the kernel (`wait4`'s rusage of that
   child), next to the simulation alone in a fresh process for the same days; with
   `--projections`, the demo as it runs by default, materialising the projections after the
   run (`bench/projections.py` measures those). Target: the 30-day demo within 1.5x the 7-day
   one. These run first, while this process is small: Linux counts the parent's resident set
   at the child's `exec` in the child's peak, so a parent that had already run the demo would
   hide the child's own figure.

    .venv/bin/python bench/demo.py [--days 7] [--seed 1] [--profile]
                                   [--rss-days 7 30 | --no-rss] [--projections]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RSS_TARGET_RATIO = 1.5
# The reference child: the same simulation, its events counted and dropped.
_SIM_ALONE = """
import sys
from sim import RegionSim, SimConfig
config = SimConfig(seed=int(sys.argv[2]), days=float(sys.argv[1]), region="bench")
print(sum(len(batch) for batch in RegionSim(config).run()))
"""


def speed(days: float, seed: int, profile: bool) -> None:
    # Imported here, after the RSS children ran: they must not inherit this process's size.
    from schemas.codec import Codec
    from sim import RegionSim, SimConfig
    from sim.demo import run_demo
    from streams.embedded import EmbeddedLog

    config = SimConfig(seed=seed, days=days, region="bench")
    start = time.perf_counter()
    count = sum(len(batch) for batch in RegionSim(config).run())
    sim_s = time.perf_counter() - start
    print(f"simulation alone: {count:,} events in {sim_s:.1f} s ({count / sim_s:,.0f} events/s)")

    with tempfile.TemporaryDirectory(prefix="spotcap-bench-") as home:
        log = EmbeddedLog(Path(home) / "log")
        profiler = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        report = run_demo(log, Codec(), Path(home) / "log" / "_runs", config)
        if profiler:
            profiler.disable()
        log.close()
        wall_s = time.perf_counter() - start
        log_bytes = sum(p.stat().st_size for p in Path(home).rglob("*.avro"))
    events = report["events"]
    print(
        f"spotcap demo --days {days:g} --seed {seed}: {events:,} events, "
        f"{log_bytes / 2**20:,.0f} MiB of log, in {wall_s:.1f} s wall "
        f"({events / wall_s:,.0f} events/s; {sim_s / wall_s:.2f}x the simulation alone's rate; "
        f"target < 60 s for 7 days)"
    )
    for topic, n in sorted(report["events_by_topic"].items(), key=lambda kv: -kv[1]):
        print(f"  {topic:<10} {n:>9,} events")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def peak_rss_mib(command: list[str]) -> tuple[float, float]:
    """Run `command` in a child process; its peak RSS (MiB) and wall time (s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
    env["PYTHONPATH"] = str(ROOT)
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed with exit code {child.returncode}")
    return usage.ru_maxrss / 1024, time.perf_counter() - start  # Linux: ru_maxrss is in KiB


def memory(days_list: list[float], seed: int, projections: bool) -> None:
    python = sys.executable
    demo: dict[float, float] = {}
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    what = "with" if projections else "--no-projections: without"
    print(
        f"peak RSS, each run in a fresh process (seed {seed}; spotcap demo {what} the "
        f"projections; this process: {own:.0f} MiB):"
    )
    print(f"  {'sim days':>8}  {'simulation alone':>16}  {'spotcap demo':>12}  {'demo wall':>9}")
    for days in days_list:
        alone, _ = peak_rss_mib([python, "-c", _SIM_ALONE, str(days), str(seed)])
        with tempfile.TemporaryDirectory(prefix="spotcap-bench-rss-") as home:
            command = [python, "-m", "spotcap.cli", "--home", home, "--region", "bench"]
            options = ["--days", str(days), "--seed", str(seed), "--json"]
            if not projections:
                options.append("--no-projections")
            demo[days], wall_s = peak_rss_mib([*command, "demo", *options])
        print(f"  {days:>8g}  {alone:>12,.0f} MiB  {demo[days]:>8,.0f} MiB  {wall_s:>7.0f} s")
    if len(demo) >= 2:
        first, last = min(demo), max(demo)
        ratio = demo[last] / demo[first]
        verdict = "within" if ratio <= RSS_TARGET_RATIO else "ABOVE"
        print(
            f"  demo peak RSS {last:g} days / {first:g} days: {ratio:.2f}x "
            f"({verdict} the {RSS_TARGET_RATIO}x target)\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile the full run")
    parser.add_argument("--rss-days", type=float, nargs="+", default=[7.0, 30.0])
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS runs")
    parser.add_argument(
        "--projections", action="store_true", help="peak RSS of the demo with its projections"
    )
    args = parser.parse_args()
    if not args.no_rss:
        memory(args.rss_days, args.seed, args.projections)
    speed(args.days, args.seed, args.profile)


if __name__ == "__main__":
    main()
