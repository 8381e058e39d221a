"""Soak the live region (issue 27 point 4): a day of simulated time at a high speed-up
(`spotcap demo --live`'s run, servers of its own), sampling every `--every-s` wall seconds the
resident memory and open files of every process of the run (the servers, the deciders, the
projections, the actuator, the real agents, and this process, which serves the region) and
the fleet state's lag behind the log (`spotcap query lag`). Prints the samples as they come
and a summary per process: RSS and open files at the first sample after `--warmup-s`, at the
end, and the largest; the lag's largest and last. Figures from the run, not from a test.

    .venv/bin/python bench/soak.py [--span-s 86400] [--speed 240] [--every-s 30]
                                   [--warmup-s 120] [--json FILE]

A day at 240x is six minutes of region time, ~10 minutes in all on the loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.live.processes import SPOTCAP, child_env
from tests.faults import harness


def _name(cmdline: list[str]) -> str | None:
    """What a process of the run is, from its command line."""
    text = " ".join(cmdline)
    if "kafka.Kafka" in text:
        return "kafka"
    if "nats-server" in text:
        return "nats"
    if cmdline and cmdline[0].endswith("postgres") and "-D" in cmdline:
        return "postgres"
    for words, name in ((" run streams", "deciders"), (" run projections", "projections"),
                        (" run actuator", "actuator")):  # fmt: skip
        if words in text:
            return name
    if " agent run " in text:
        config = cmdline[cmdline.index("--config") + 1] if "--config" in cmdline else ""
        return "agent-" + Path(config).parent.name[:8]
    return None


def _status(pid: int) -> tuple[float, int] | None:
    """RSS in MiB and open files of `pid`."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss_kib = next((int(line.split()[1]) for line in status.splitlines()
                    if line.startswith("VmRSS:")), 0)  # fmt: skip
    return rss_kib / 1024, fds


def _with_spawned(pid: int, status: tuple[float, int] | None) -> tuple[float, int] | None:
    """`status` of `pid` plus its spawned (multiprocessing) children's: the projections' ledger
    rounds run in a child of theirs, whose command line does not name the folder."""
    if status is None:
        return None
    rss, fds = status
    try:  # each thread's children (the one that spawned a child lists it)
        tasks = os.listdir(f"/proc/{pid}/task")
        children = [
            c for t in tasks for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()
        ]
    except OSError:
        return status
    for child in children:
        try:
            spawned = b"multiprocessing" in Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        more = _with_spawned(int(child), _status(int(child))) if spawned else None
        if more:
            rss, fds = rss + more[0], fds + more[1]
    return rss, fds


def processes(folder: Path) -> dict[str, tuple[float, int]]:
    """Every process whose command line names `folder`, by what it is; and this one."""
    found: dict[str, tuple[float, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(folder) not in cmdline:
            continue
        name = _name(cmdline.split("\0"))
        status = _with_spawned(int(entry), _status(int(entry))) if name else None
        if name and status:
            found[name] = status
    mine = _status(os.getpid())
    if mine:
        found["region (this process)"] = mine
    return found


def lag(folder: Path) -> int | None:
    """The fleet state's records behind the log (`spotcap query lag`), once it answers."""
    states = list((folder / "home" / "live").glob("*/servers/postgres/server.json"))
    kafka = list((folder / "home" / "live").glob("*/servers/kafka/server.json"))
    if not states or not kafka:
        return None
    region = states[0].parents[2].name
    dsn = json.loads(states[0].read_text())["address"]
    bootstrap = json.loads(kafka[0].read_text())["address"]
    done = subprocess.run(
        [SPOTCAP, "--home", str(folder / "home"), "--region", region, "--kafka", bootstrap,
         "query", "lag", "--postgres", dsn, "--json"],
        env=child_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return None
    rows = json.loads(done.stdout)
    return sum(int(r["lag"] or 0) for r in rows if r["projection"] == "fleet")


def sampler(folder: Path, every_s: float, stop: threading.Event, out: list[dict[str, Any]]) -> None:
    began = time.monotonic()
    while not stop.wait(every_s):
        procs = processes(folder)
        sample = {"t_s": round(time.monotonic() - began), "lag": lag(folder), "processes": procs}
        out.append(sample)
        rss = " ".join(f"{n.split(' ')[0]}={r:.0f}" for n, (r, _) in sorted(procs.items()))
        fds = sum(f for _, f in procs.values())
        print(f"  t={sample['t_s']:>5} s lag={sample['lag']} fds={fds} MiB: {rss}", flush=True)


def summary(samples: list[dict[str, Any]], warmup_s: float) -> list[str]:
    after = [s for s in samples if s["t_s"] >= warmup_s] or samples
    names = sorted({n for s in after for n in s["processes"]})
    lines = [f"{'process':<22} {'RSS MiB first':>13} {'last':>6} {'max':>6} "
             f"{'files first':>11} {'last':>5} {'max':>5}"]  # fmt: skip
    for name in names:
        seen = [s["processes"][name] for s in after if name in s["processes"]]
        rss, fds = [r for r, _ in seen], [f for _, f in seen]
        lines.append(f"{name:<22} {rss[0]:>13.0f} {rss[-1]:>6.0f} {max(rss):>6.0f} "
                     f"{fds[0]:>11} {fds[-1]:>5} {max(fds):>5}")  # fmt: skip
    lags = [s["lag"] for s in after if s["lag"] is not None]
    if lags:
        lines.append(f"fleet lag (records): max {max(lags):,}, last {lags[-1]:,}, "
                     f"{len(lags)} samples")  # fmt: skip
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--span-s", type=int, default=86_400)
    parser.add_argument("--speed", type=float, default=240.0)
    parser.add_argument("--every-s", type=float, default=30.0)
    parser.add_argument("--warmup-s", type=float, default=120.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    samples: list[dict[str, Any]] = []
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="spotcap-soak-") as scratch:
        folder = Path(scratch)
        thread = threading.Thread(target=sampler, args=(folder, args.every_s, stop, samples),
                                  daemon=True)  # fmt: skip
        thread.start()
        began = time.monotonic()
        try:
            with harness.faulted_run(folder, (), speed=args.speed, span_s=args.span_s,
                                     patience_s=900.0) as run:  # fmt: skip
                report = run.report
        finally:
            stop.set()
            thread.join(60)
    print(f"{args.span_s / 3600:g} sim hours at {args.speed:g}x: the region ran "
          f"{report['live']['sim_wall_s']:.0f} s, {time.monotonic() - began:.0f} s in all; "
          f"{len(run.events):,} events")  # fmt: skip
    for line in summary(samples, args.warmup_s):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps({"samples": samples, "live": report["live"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
