"""Time `spotcap demo`, stage by stage, and measure its wall time, CPU time and peak memory.

1. The demo as `spotcap demo` runs it (`--days`, seed 1, the deciders, the baseline compared,
   both projections; `--no-projections` leaves them out), in a fresh process for each of
   `--rss-days` (7 and 30 by default): its wall time, CPU time (user + system, the process
   and its children: the embedded PostgreSQL counts) and peak resident set (`wait4`'s rusage
   of that child). Targets (issue 26): 7 days in at most 90 s wall and 400 MiB, the 30-day
   peak at most 1.2x the 7-day one. These run first, while this process is small: Linux counts
   the parent's resident set at the child's `exec` in the child's peak.
2. The stages of the same work, one after the other in this process (the events held in
   memory between them, so the RSS column is this bench's, not the demo's): simulate and
   decide (the deciders' share timed apart), the baseline compared, encode (`Codec.encode`),
   append (the encoded records through the embedded log's producer, a flush per 50,000 as the
   demo flushes) and project (`sim.materialise`: both projections brought up to date). Each
   stage: wall, CPU (`time.process_time`), its own peak RSS (the kernel's high-water mark reset
   before it) and events/s.

    .venv/bin/python bench/demo.py [--days 7] [--seed 1] [--profile]
                                   [--rss-days 7 30 | --no-rss] [--no-projections]
                                   [--no-stages]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schemas.codec import Codec
    from schemas.events import Envelope
    from sim import SimConfig
    from streams.log import EventLog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RSS_TARGET_RATIO = 1.2
RSS_TARGET_MIB = 400
WALL_TARGET_S = 90.0
# The reference child: the same simulation, its events counted and dropped.
_SIM_ALONE = """
import sys
from sim import RegionSim, SimConfig
config = SimConfig(seed=int(sys.argv[2]), days=float(sys.argv[1]), region="bench")
print(sum(len(batch) for batch in RegionSim(config).run()))
"""


@dataclasses.dataclass
class Stage:
    name: str
    events: int
    wall_s: float
    cpu_s: float
    peak_mib: float
    child_peak_mib: float = math.nan  # the largest child process's peak (the projections')


class _Timed:
    """A callable that adds its own wall and CPU time to totals (the deciders' share of the
    loop: what the orchestrator's calls take, the events they publish included)."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call
        self.seconds = 0.0
        self.cpu_s = 0.0

    def __call__(self, *args: Any) -> Any:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return self.call(*args)
        finally:
            self.seconds += time.perf_counter() - start
            self.cpu_s += time.process_time() - cpu


def _reset_peak() -> None:
    """Reset the kernel's high-water mark of this process's resident set (Linux 4.0+)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def _peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _stage(name: str, events: int, work: Callable[[], Any]) -> tuple[Stage, Any]:
    _reset_peak()
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    stage = Stage(name, events, time.perf_counter() - wall, time.process_time() - cpu, _peak_mib())
    return stage, result


def stages(days: float, seed: int, projections: bool, profile: bool) -> None:
    # Imported here, after the RSS children ran: they must not inherit this process's size.
    from schemas.codec import Codec
    from sim import SimConfig

    config = SimConfig(seed=seed, days=days, region="bench")
    codec = Codec()
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    done, events = _simulation_stages(config)
    stage, encoded = _stage("encode", len(events), lambda: [codec.encode(e) for e in events])
    done.append(stage)
    done += _log_stages(config, codec, events, encoded, projections)
    if profiler:
        profiler.disable()
    print(
        f"\nstages of a {days:g}-day demo (seed {seed}), {len(events):,} events, "
        "one after the other:"
    )
    print(
        f"  {'stage':<20} {'wall s':>8} {'CPU s':>8} {'peak RSS':>10} {'events/s':>10}"
        "  (largest child's peak)"
    )
    for st in done:
        rss = "" if math.isnan(st.peak_mib) else f"{st.peak_mib:,.0f} MiB"
        child = "" if math.isnan(st.child_peak_mib) else f"  ({st.child_peak_mib:,.0f} MiB)"
        cpu_text = "" if math.isnan(st.cpu_s) else f"{st.cpu_s:,.1f}"
        rate = st.events / st.wall_s
        print(f"  {st.name:<20} {st.wall_s:>8,.1f} {cpu_text:>8} {rss:>10} {rate:>10,.0f}{child}")
    total = [st for st in done if not st.name.startswith(" ")]
    wall, cpu = sum(s.wall_s for s in total), sum(s.cpu_s for s in total)
    print(f"  {'total':<20} {wall:>8,.1f} {cpu:>8,.1f}")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def _simulation_stages(config: SimConfig) -> tuple[list[Stage], list[Envelope]]:
    """The deciders' run (their share timed apart), then the baseline's for the comparison."""
    from sim import RegionSim
    from sim.clock import HOUR_US
    from sim.demo import simulate_only
    from sim.loop import DecidersOrchestrator, owned_by

    settings = owned_by(config.orchestrator.orchestrator_id)
    driver = DecidersOrchestrator(config.orchestrator.orchestrator_id, settings)
    observe, act = _Timed(driver.observe), _Timed(driver.act)
    driver.observe, driver.act = observe, act  # type: ignore[method-assign,assignment]

    def simulate() -> list[Envelope]:
        sim = RegionSim(config, orchestrator=driver)
        return [e for batch in sim.run(HOUR_US) for e in batch]

    stage, events = _stage("simulate + decide", 0, simulate)
    n = stage.events = len(events)
    decide_cpu = observe.cpu_s + act.cpu_s
    decide = Stage("  of which decide", n, observe.seconds + act.seconds, decide_cpu, math.nan)
    baseline, _ = _stage("baseline compared", n, lambda: simulate_only(config))
    return [stage, decide, baseline], events


def _log_stages(
    config: SimConfig,
    codec: Codec,
    events: list[Envelope],
    encoded: list[bytes],
    projections: bool,
) -> list[Stage]:
    """Append the encoded events to a fresh embedded log, then project it."""
    from projections.stores import Stores
    from sim.demo import FLUSH_EVENTS
    from sim.materialise import materialise
    from streams.embedded import EmbeddedLog
    from streams.schema_store import publish_schema
    from streams.topics import region_topics, topic_name

    region, n = config.region, len(events)
    kinds = {type(e.payload) for e in events}
    topics = {kind: topic_name(region, kind.TOPIC) for kind in kinds}
    done = []
    with tempfile.TemporaryDirectory(prefix="spotcap-bench-") as home:
        log = EmbeddedLog(Path(home) / "log")
        log.apply_topics(region_topics(region))

        def append() -> None:
            producer = log.producer()
            first_ms = events[0].occurred_at // 1000
            publish_schema(producer, region, codec.schema, timestamp_ms=first_ms)
            for i, (envelope, value) in enumerate(zip(events, encoded, strict=True), 1):
                producer.produce(
                    topics[type(envelope.payload)],
                    value,
                    key=envelope.key.encode(),
                    timestamp_ms=envelope.occurred_at // 1000,
                )
                if i % FLUSH_EVENTS == 0:
                    producer.flush()
            producer.flush()
            producer.close()

        done.append(_stage("append", n, append)[0])
        if projections:
            log.close()  # the writer lock goes; the projections' children open the log
            stores = Stores(Path(home), region=region)
            opener = partial(_open_log, Path(home) / "log")
            try:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                stage, _ = _stage(
                    "project", n, lambda: materialise(opener, region, stores, rebuild=True)
                )
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                # The children's CPU (each projection's process; the PostgreSQL server is not
                # among them) and the largest child's peak beside this process's own.
                stage.cpu_s += after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                stage.child_peak_mib = after.ru_maxrss / 1024
                done.append(stage)
            finally:
                stores.stop_embedded_postgres()
        else:
            log.close()
    return done


def _open_log(root: Path) -> tuple[EventLog, Codec]:
    """The bench's log and codec, opened in a projection's child process."""
    from schemas.codec import Codec
    from streams.embedded import EmbeddedLog

    return EmbeddedLog(root), Codec()


# Runs the command given and writes, to the file named first, as JSON: each process's peak
# RSS (KiB) and CPU (user + system, s) by its name (`/proc/PID/comm`: the demo's children name
# themselves: spotcap-project, spotcap-compare, spotcap-check), the command's own as "own", the
# largest peak among the processes it started as "tree": each process's high-water mark (VmHWM)
# and CPU read from /proc every 0.2 s while it runs (wait4's rusage would give the largest of
# the whole tree as the command's own; a process's last 0.2 s of CPU can be missed).
_TREE = """
import json, os, subprocess, sys, time

TICK = os.sysconf("SC_CLK_TCK")

def hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0

def cpu_and_name(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
        with open(f"/proc/{pid}/comm") as comm:
            name = comm.read().strip()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK, name

def children(pid):
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as listed:
                found += [int(c) for c in listed.read().split()]
    except OSError:
        pass
    return found

child = subprocess.Popen(sys.argv[2:])
seen = {}  # pid -> [name, peak KiB, CPU s]
while True:
    pending, walked = [child.pid], set()
    while pending:
        pid = pending.pop()
        if pid in walked:
            continue
        walked.add(pid)
        now = cpu_and_name(pid)
        if now is not None:
            row = seen.setdefault(pid, ["own" if pid == child.pid else now[1], 0, 0.0])
            if pid != child.pid:
                row[0] = now[1]
            row[1], row[2] = max(row[1], hwm(pid)), now[0]
        pending += children(pid)
    if child.poll() is not None:
        break
    time.sleep(0.2)
by_name = {}
for name, peak, cpu in seen.values():
    was = by_name.get(name, (0, 0.0))
    by_name[name] = (max(was[0], peak), was[1] + cpu)
tree = max([peak for pid, (_, peak, _) in seen.items() if pid != child.pid] or [0])
with open(sys.argv[1], "w") as out:
    json.dump({"processes": by_name, "tree": tree}, out)
sys.exit(child.returncode)
"""


@dataclasses.dataclass
class Run:
    peak_mib: float  # the command's own process
    tree_peak_mib: float  # the largest of the processes it started (0: none seen)
    wall_s: float
    cpu_s: float  # user + system, its reaped children's included
    # Each process by name: (peak RSS MiB, CPU s as last sampled), the command's own as "own".
    processes: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)


def peak_rss_mib(command: list[str], out: Path | None = None) -> Run:
    """Run `command` in a child process (through a small one that watches its memory): its
    peak RSS (MiB) and its largest child's, wall time (s) and CPU time (s, user + system, its
    children's included; a server it leaves running, the embedded PostgreSQL, is not counted:
    neither its CPU nor its memory), and each process's peak and CPU by name."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
    env["PYTHONPATH"] = str(ROOT)
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.NamedTemporaryFile("r", prefix="spotcap-bench-rss-") as peaks:
        wrapped = [sys.executable, "-c", _TREE, peaks.name, *command]
        with open(out or os.devnull, "wb") as stdout:
            done = subprocess.run(wrapped, env=env, stdout=stdout, cwd=ROOT, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed with exit code {done.returncode}")
        seen = json.loads(Path(peaks.name).read_text())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall_s = time.perf_counter() - start
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    processes = {name: (kib / 1024, cpu) for name, (kib, cpu) in seen["processes"].items()}
    own = processes.get("own", (0.0, 0.0))[0]
    return Run(own, seen["tree"] / 1024, wall_s, cpu_s, processes)


def memory(days_list: list[float], seed: int, projections: bool) -> None:
    python = sys.executable
    demo: dict[float, Run] = {}
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    what = "with" if projections else "--no-projections: without"
    print(
        f"spotcap demo {what} the projections, each run in a fresh process (seed {seed}; "
        f"this process: {own:.0f} MiB); targets at 7 days: {WALL_TARGET_S:.0f} s wall, "
        f"{RSS_TARGET_MIB} MiB; load average before: {os.getloadavg()[0]:.1f}"
    )
    print(
        f"  {'sim days':>8}  {'events':>10}  {'wall':>7}  {'CPU':>7}  {'peak RSS':>9}  "
        f"{'largest child':>13}  {'sim alone':>9}"
    )
    for days in days_list:
        alone = peak_rss_mib([python, "-c", _SIM_ALONE, str(days), str(seed)]).peak_mib
        with tempfile.TemporaryDirectory(prefix="spotcap-bench-rss-") as home:
            command = [python, "-m", "spotcap.cli", "--home", home, "--region", "bench"]
            options = ["--days", str(days), "--seed", str(seed), "--json"]
            if not projections:
                options.append("--no-projections")
            out = Path(home) / "report.json"
            try:
                run = demo[days] = peak_rss_mib([*command, "demo", *options], out)
            finally:
                _stop_postgres(Path(home))
            events = json.loads(out.read_text())["events"]
        print(
            f"  {days:>8g}  {events:>10,}  {run.wall_s:>5.0f} s  {run.cpu_s:>5.0f} s  "
            f"{run.peak_mib:>5,.0f} MiB  {run.tree_peak_mib:>9,.0f} MiB  {alone:>5,.0f} MiB"
            f"  (load average after: {os.getloadavg()[0]:.1f})"
        )
        for name, (peak, cpu) in sorted(run.processes.items()):
            print(f"  {'':>8}  {name:>22}: peak RSS {peak:>6,.0f} MiB, CPU {cpu:>6,.1f} s")
    if len(demo) >= 2:
        first, last = min(demo), max(demo)
        for name, a, b in (
            ("the demo's process", demo[first].peak_mib, demo[last].peak_mib),
            ("its largest child", demo[first].tree_peak_mib, demo[last].tree_peak_mib),
        ):
            ratio = b / a if a else math.nan
            verdict = "within" if ratio <= RSS_TARGET_RATIO else "ABOVE"
            print(
                f"  peak RSS of {name}, {last:g} days / {first:g} days: {ratio:.2f}x "
                f"({verdict} the {RSS_TARGET_RATIO}x target)"
            )
        print()


def _stop_postgres(home: Path) -> None:
    from projections.stores import Stores

    if (home / "postgres").exists():
        Stores(home).stop_embedded_postgres()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=7.0, help="days of the stages' run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile the stages")
    parser.add_argument("--rss-days", type=float, nargs="+", default=[7.0, 30.0])
    parser.add_argument("--no-rss", action="store_true", help="skip the whole-demo runs")
    parser.add_argument("--no-stages", action="store_true", help="skip the stages")
    parser.add_argument(
        "--no-projections", action="store_true", help="leave the projections out of both"
    )
    args = parser.parse_args()
    if not args.no_rss:
        memory(args.rss_days, args.seed, not args.no_projections)
    if not args.no_stages:
        stages(args.days, args.seed, not args.no_projections, args.profile)


if __name__ == "__main__":
    main()
