"""The fault harness at length (issue 27): the live region under more faults and more seeds
than tests/faults/ runs in CI. For each seed, a schedule of every server of the region (Kafka,
PostgreSQL, NATS) and every service (deciders, projections, actuator, a real agent) killed and
paused `--rounds` times at seeded random moments of the span (`sim.live.faults.plan`, one
window per round), one live run on servers of its own (`tests/faults/harness.py`), then every
check of the harness. Prints, per run, the faults (what, at which sim second, how long) and the
checks (held, or what they found); ``--json`` writes everything to a file.

    .venv/bin/python bench/faults.py [--seeds 1 2 3] [--rounds 2] [--speed 15]
                                     [--span-s 7200] [--json FILE]

A run of 2 rounds over a 2-hour span at 15x takes ~10-15 minutes on the loaded 2-core
machine; the exit code is 1 when any check of any run failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.live.faults import Fault, plan
from tests.faults import harness


def schedule(seed: int, rounds: int, span_s: int) -> tuple[Fault, ...]:
    """`rounds` rounds of every fault, each round in its own window of the span's middle."""
    start, end = span_s // 6, span_s - span_s // 6
    width = (end - start) // rounds
    faults: list[Fault] = []
    for r in range(rounds):
        window = (start + r * width, start + (r + 1) * width - 1)
        faults += plan(seed * 100 + r, window)
    return tuple(faults)


def one_run(seed: int, rounds: int, speed: float, span_s: int) -> dict[str, Any]:
    faults = schedule(seed, rounds, span_s)
    began = time.monotonic()

    def say(text: str) -> None:
        print(f"  {text}", flush=True)

    with (
        tempfile.TemporaryDirectory(prefix=f"spotcap-faults-{seed}-") as scratch,
        harness.faulted_run(
            Path(scratch), faults, seed=seed, speed=speed, span_s=span_s, say=say
        ) as run,
    ):
        found = harness.check_all(run, Path(scratch))
        return {
            "seed": seed,
            "faults": run.report["live"]["faults"],
            "restarts": run.report["live"]["restarts"],
            "checks": found,
            "events": len(run.events),
            "wall_s": round(time.monotonic() - began, 1),
        }


def print_run(result: dict[str, Any]) -> None:
    print(f"seed {result['seed']}: {result['events']:,} events, {result['wall_s']:.0f} s")
    print(f"  {'fault':<46} {'sim s':>6} {'lasted s':>9}")
    for fault in result["faults"]:
        what = f"{fault['how']} {fault['target']}" + (
            f" ({fault['for_s']:g} s)" if fault["for_s"] else ""
        )
        print(f"  {what:<46} {fault['began_sim_s']:>6,} {fault['lasted_s']:>9.1f}")
    restarts = ", ".join(f"{n} {k}x" for n, k in sorted(result["restarts"].items()))
    print(f"  restarted by their supervisors: {restarts or 'none'}")
    for name, problem in result["checks"].items():
        print(f"  {name:<18} {'held' if not problem else 'FAILED: ' + problem}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--speed", type=float, default=15.0)
    parser.add_argument("--span-s", type=int, default=7200)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        print(f"seed {seed}: {args.rounds} rounds of faults over {args.span_s} sim s "
              f"at {args.speed:g}x", flush=True)  # fmt: skip
        result = one_run(seed, args.rounds, args.speed, args.span_s)
        print_run(result)
        results.append(result)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    failed = [r["seed"] for r in results if any(r["checks"].values())]
    print(f"{len(results)} runs, {sum(len(r['faults']) for r in results)} faults; "
          f"checks failed in seeds {failed}" if failed else "every check held")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
