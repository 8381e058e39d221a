"""The daily drill on a simulated region with the deciders in the loop and simulated agents:
one drill every `--every-h` sim hours, each of `--share` of the busiest reclaimable pool,
finished `--finish-s` sim seconds later; prints each drill's figures (or its refusal) and the
wall time of the run. The agents are simulated (a drain starts one sim second after the
notice), so notice to drain is the stand-in's; the replacement figures are the deciders' and
the actuator guard's own.

    .venv/bin/python -m bench.drill [--seed 1] [--workloads 220] [--days 1] [--every-h 3]
                                   [--share 0.1]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from provider.drill import DrillRequest, run_drill
from sim.clock import HOUR_US
from tests.drill_support import CONFIG, DrilledRegion


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workloads", type=int, default=220)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--every-h", type=float, default=3.0)
    parser.add_argument("--share", type=float, default=0.1)
    parser.add_argument("--finish-s", type=int, default=300)
    args = parser.parse_args()
    config = replace(CONFIG, seed=args.seed, workloads=args.workloads, days=args.days)
    began = time.perf_counter()
    region = DrilledRegion(config)
    step_us = int(args.every_h * HOUR_US)
    print("drill  pool                              result   n  drained  p99 ms  in time  cost €")
    while region.sim.now_us() + step_us < config.end_us:
        region.advance(step_us // 1_000_000 - args.finish_s, step_s=600)
        pool, _ = region.busiest_pool()
        drill_id = f"bench-{args.seed}-{region.sim.now_us()}"  # the same run, the same drills
        request = DrillRequest(pool, args.share, drill_id=drill_id)
        out = run_drill(region.provider, region.read, region.write, request)
        region.advance(args.finish_s, step_s=1)
        done = run_drill(region.provider, region.read, region.write, None).finished
        hour = (region.sim.now_us() - config.start_us) / HOUR_US
        if out.refused is not None:
            print(f"{hour:5.1f}  {pool:32}  refused ({out.refused.rule}): {out.refused.reason}")
        for f in done:
            print(f"{hour:5.1f}  {f.pool_id:32}  {'passed' if f.passed else 'FAILED':7}"
                  f"{f.reclaimed_count:3}  {f.drain_verified_count:7}  "
                  f"{f.notice_to_drain_p99_ms or 0:6,}  {f.replaced_in_time_count:7}  "
                  f"{f.cost_eur_micros / 1e6:6.2f}")  # fmt: skip
            for failure in f.failures:
                print(f"       {failure}")
    print(f"wall time {time.perf_counter() - began:.1f} s for {args.days} sim days")


if __name__ == "__main__":
    main()
