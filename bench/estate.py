"""An estate of regions at once: every region's wave, its notice-to-drain-signal p99, its deciders'
decision latency and the memory of every process.

Two parts, each with ``--regions`` regions (``estate-1`` ...) side by side on one machine:

- **agents**: ``--nodes`` full ``agent.service.Agent`` objects per region (`bench.agent`'s worker:
  intake, signed bundle, drain thread, spool writer, a stand-in drain path that marks the
  signal), packed ``--processes`` worker processes per region, all on one real ``nats-server``;
  then a wave of ``--wave`` notices in every region at once (published interleaved, one flush).
  Per region: notice to drain signal p50/p99/max (CLOCK_MONOTONIC, publish to signal). Memory:
  the peak resident set (VmHWM) of every worker process and of the NATS server.
- **deciders**: one process per region running `DeciderCore` (the deciders' whole logic, what
  one partition of each stage runs) over a simulated history of ``--workloads`` workloads and
  ``--days`` days, then ``--wave`` launches into one hall and a notice for each at one instant;
  per region: the time from the first notice to the last replacement decision (each decision's
  latency is the time it came out, the notices being handled in order), decisions per second,
  and the process's peak resident set. The regions run at once, as their deciders would.

Projection lag is not run here: the fleet and ledger projections' rows/s per partition are
`bench/projections.py`'s (docs/performance.md), and docs/scaling.md derives the lag of a wave
from them.

    .venv/bin/python bench/estate.py [--regions 3] [--nodes 5000] [--wave 800]
        [--processes 8] [--workloads 270] [--days 0.5] [--skip-agents] [--skip-deciders]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agent import SETTLE_S, _agents, _instance, _notice, _pct  # noqa: E402


def _region(k: int) -> str:
    return f"estate-{k + 1}"


def _hwm_mib(pid: int) -> float:
    """Peak resident set of `pid` (VmHWM), MiB; 0 if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- agents ---------------------------------------------------------------------------------------


def _agent_worker(  # noqa: PLR0917 (multiprocessing passes them positionally)
    region: str, first: int, count: int, nats_url: str, folder: str, ready: Any, stop: Any,
    out: Any,
) -> None:  # fmt: skip
    import logging

    logging.basicConfig(level=logging.ERROR)
    signals = asyncio.run(_agents(first, count, nats_url, Path(folder), ready, stop, region))
    out.put(signals)


async def _publish_waves(nats_url: str, waves: dict[str, int]) -> dict[str, dict[str, int]]:
    """A wave in every region at once: notices interleaved region by region, one flush."""
    from nats.aio.client import Client

    client = Client()
    await client.connect([nats_url], name="estate-publisher")
    notes = {r: [_notice(_instance(n), r) for n in range(size)] for r, size in waves.items()}
    published: dict[str, dict[str, int]] = {r: {} for r in waves}
    try:
        for n in range(max(waves.values())):
            for region, region_notes in notes.items():
                if n < len(region_notes):
                    note = region_notes[n]
                    published[region][note.event_id] = time.monotonic_ns()
                    await client.publish(note.subject, note.to_json())
        await client.flush(timeout=30)
    finally:
        await client.close()
    return published


def run_agents(args: argparse.Namespace, nats_url: str, nats_pid: int | None) -> None:
    ctx = mp.get_context("spawn")
    ready, out, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    per = -(-args.nodes // args.processes)
    procs: list[tuple[str, Any]] = []
    regions = [_region(k) for k in range(args.regions)]
    with tempfile.TemporaryDirectory(prefix="bench-estate-") as folder:
        started = time.monotonic()
        for region in regions:
            for p in range(args.processes):
                first, count = p * per, min(per, args.nodes - p * per)
                if count <= 0:
                    break
                sub = Path(folder) / region / f"w{p}"
                proc = ctx.Process(
                    target=_agent_worker,
                    args=(region, first, count, nats_url, str(sub), ready, stop, out),
                )
                proc.start()
                procs.append((region, proc))
        subscribed = sum(ready.get(timeout=1800) for _ in procs)
        print(
            f"agents: {subscribed:,} subscribed in {len(procs)} processes "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        time.sleep(SETTLE_S)
        wave = min(args.wave, args.nodes)
        published = asyncio.run(_publish_waves(nats_url, dict.fromkeys(regions, wave)))
        time.sleep(5.0)
        memory = {proc.pid: (region, _hwm_mib(proc.pid or 0)) for region, proc in procs}
        nats_mib = _hwm_mib(nats_pid) if nats_pid else 0.0
        stop.set()
        signals: dict[str, int] = {}
        for _ in procs:
            signals.update(out.get(timeout=600))
        for _, proc in procs:
            proc.join(60)
    print(f"\nnotice to drain signal, a wave of {wave} in each of {len(regions)} regions at once")
    print(f"  {'region':<10} {'n':>6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}  missing")
    for region in regions:
        ids = published[region]
        values = [(signals[i] - t) / 1e6 for i, t in ids.items() if i in signals]
        missing = len(ids) - len(values)
        if values:
            print(
                f"  {region:<10} {len(values):>6,} {_pct(values, 0.5):>9.1f} "
                f"{_pct(values, 0.99):>9.1f} {max(values):>9.1f}  {missing}"
            )
    print("\nmemory (peak resident set)")
    for region in regions:
        mibs = [m for r, m in memory.values() if r == region]
        print(
            f"  {region:<10} {len(mibs)} agent processes: {sum(mibs):,.0f} MiB in all, "
            f"{max(mibs):,.0f} MiB the largest, {sum(mibs) / args.nodes:.2f} MiB per agent"
        )
    if nats_pid:
        print(f"  nats-server: {nats_mib:,.0f} MiB ({subscribed:,} connections)")


# -- deciders -------------------------------------------------------------------------------------


def _decider_worker(workloads: int, days: float, wave: int, out: Any) -> None:
    from bench.deciders import scenario, wave_events
    from streams.runtime.core import DeciderCore

    t0 = time.perf_counter()
    history = scenario(workloads, days)
    simulated_s = time.perf_counter() - t0
    launches, notices = wave_events(history, wave)
    core = DeciderCore()
    t0 = time.perf_counter()
    made = 0
    for event in [*history, *launches]:
        made += len(core.process(event))
    history_s = time.perf_counter() - t0
    nodes = len({e.key for e in [*history, *launches] if e.event_type == "instance_launched"})
    latencies: list[float] = []
    decisions = 0
    t0 = time.perf_counter()
    for notice in notices:
        out_now = core.process(notice)
        decisions += len(out_now)
        if out_now:
            latencies.append(time.perf_counter() - t0)
    wave_s = time.perf_counter() - t0
    out.put(
        {
            "pid": os.getpid(),
            "nodes": nodes,
            "history": len(history) + len(launches),
            "history_s": history_s,
            "simulated_s": simulated_s,
            "history_decisions": made,
            "wave_s": wave_s,
            "decisions": decisions,
            "latencies": latencies,
            "rss_mib": _hwm_mib(os.getpid()),
        }
    )


def run_deciders(args: argparse.Namespace) -> None:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_decider_worker, args=(args.workloads, args.days, args.wave, out))
        for _ in range(args.regions)
    ]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=3600) for _ in procs]
    for proc in procs:
        proc.join(60)
    print(
        f"\ndeciders: {args.regions} regions at once, one DeciderCore process each "
        f"({args.workloads} workloads, {args.days:g} days, then a wave of {args.wave})"
    )
    print(
        f"  {'region':<10} {'nodes':>6} {'history/s':>10} {'wave s':>8} {'decisions':>9} "
        f"{'per s':>8} {'p50 ms':>8} {'p99 ms':>8} {'RSS MiB':>8}"
    )
    for k, r in enumerate(results):
        lat = [x * 1000 for x in r["latencies"]] or [0.0]
        print(
            f"  {_region(k):<10} {r['nodes']:>6,} {r['history'] / r['history_s']:>10,.0f} "
            f"{r['wave_s']:>8.2f} {r['decisions']:>9,} {r['decisions'] / r['wave_s']:>8,.0f} "
            f"{_pct(lat, 0.5):>8.0f} {_pct(lat, 0.99):>8.0f} {r['rss_mib']:>8.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--regions", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=5000, help="agents per region")
    parser.add_argument("--wave", type=int, default=800, help="notices per region, at once")
    parser.add_argument("--processes", type=int, default=8, help="agent processes per region")
    parser.add_argument("--workloads", type=int, default=270, help="per region (deciders)")
    parser.add_argument("--days", type=float, default=0.5, help="history per region (deciders)")
    parser.add_argument("--skip-agents", action="store_true")
    parser.add_argument("--skip-deciders", action="store_true")
    args = parser.parse_args()
    print(f"{args.regions} regions on {os.cpu_count()} cores", flush=True)
    if not args.skip_deciders:
        run_deciders(args)
    if not args.skip_agents:
        from infra import servers

        with tempfile.TemporaryDirectory(prefix="bench-estate-nats-") as nats_dir:
            server = servers.start_nats(Path(nats_dir))
            try:
                run_agents(args, server.address, server.pid)
            finally:
                servers.stop(server)


if __name__ == "__main__":
    main()
