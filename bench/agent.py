"""Node agents under a real NATS relay: notice-to-drain-signal latency, and one agent's idle cost.

Latency (the design's target: p99 <= 2 s; this project's: p99 <= 100 ms): ``--agents`` full
``agent.service.Agent`` objects (intake, signed bundle, drainer, spool writer thread, metrics
registry), one NATS connection each as on as many nodes, packed ``--processes`` worker processes
to a 2-core machine. Their drain path is a stand-in that only marks the drain signal, so the
figure is the agent's own path: NATS delivery, de-duplication, the bundle, the notice and
drain-started records, the drain thread, up to the first signal a real path would send. Two
patterns, each to agents that have not drained yet:

- one by one: ``--idle`` notices, 20 ms apart (an ordinary day);
- wave: ``--wave`` notices published back to back (a hall reclaimed at once).

Latency runs from just before the publish to the drain signal, both on CLOCK_MONOTONIC (one
clock for every process on Linux). The bare reference runs the same layout with bare nats-py
subscribers that only take the time on receipt; the ratio is agent / bare.

CPU per wave notice: each worker process samples its CPU time (every thread) from just before
the wave; the CPU from the wave's first publish to the process's last drain signal, over the
process's wave notices, is what the wave's latency is made of on a shared CPU, and unlike the
latency it hardly moves with the machine's load (other engineers' work on a shared machine).

Idle cost: one ``spotcap agent run`` process with NATS, the metadata poll (every 5 s, default)
and the metrics endpoint on, measured over ``--idle-s`` seconds after a warm-up: CPU in
millicores (every thread's time on a CPU from /proc/PID/task/*/schedstat, to the nanosecond)
and resident memory; a bare nats-py subscriber process is the reference.

    .venv/bin/python bench/agent.py [--agents 1000] [--processes 4] [--wave 800] [--idle 200]
                                    [--idle-s 60] [--nats URL] [--skip-idle]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REGION = "bench-1"
SETTLE_S = 3.0
START_BATCH = 50
MARK_S = 0.3  # the CPU samples start this long before the wave
SAMPLE_S = 0.005
SAMPLE_FOR_S = 3.0


def _instance(n: int) -> str:
    return f"i-{n:06d}"


# -- worker processes ---------------------------------------------------------------------------


class _SignalPath:
    """A drain path that only marks the drain signal and says when (CLOCK_MONOTONIC, ns)."""

    name = "local"

    def __init__(self, signals: dict[str, int]) -> None:
        self._signals = signals

    def drain(self, ctx: Any) -> Any:
        from agent.drain.base import DrainResult

        self._signals[ctx.request.cause_event_id] = time.monotonic_ns()
        ctx.mark_signal()
        return DrainResult("local", True, False, "bench")


async def _agents(  # noqa: PLR0917 (a worker's arguments, passed positionally by mp)
    first: int, count: int, nats_url: str, folder: Path, ready: Any, stop: Any, region: str = REGION
) -> dict[str, int]:
    from agent.config import parse_config
    from agent.service import Agent, settle_heap
    from tests.agent_support import bundle, write_bundle

    write_bundle(folder, bundle(checkpoint_method="none"))
    signals: dict[str, int] = {}
    path = _SignalPath(signals)
    agents = []
    for n in range(first, first + count):
        config = parse_config(
            {
                "instance_id": _instance(n),
                "region": region,
                "state_dir": str(folder / _instance(n)),
                "metrics_listen": "",
                "bundle": {
                    "path": str(folder / "bundle.json"),
                    "public_key": str(folder / "bundle.pub"),
                },
                "notices": {"nats": [nats_url]},
            }
        )
        agents.append(Agent(config, paths={"local": path}, serve_metrics=False))  # type: ignore[dict-item]
    for at in range(0, len(agents), START_BATCH):  # hundreds of handshakes at once on a loaded
        batch = agents[at : at + START_BATCH]  # machine miss their 2 s connect timeout and retry
        for node in batch:
            await node.start()
        for node in batch:
            if not await node.intake.wait_subscribed(600.0):
                raise SystemExit(f"{node.config.instance_id} did not subscribe within 600 s")
    settle_heap()  # as `spotcap agent run` does once its agent started
    ready.put(count)
    while not stop.is_set():
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    for node in agents:
        node.drainer.wait(5.0)
    for node in agents:
        await node.close(drain_wait_s=1.0)
    return signals


async def _bare(first: int, count: int, nats_url: str, ready: Any, stop: Any) -> dict[str, int]:
    import json

    from nats.aio.client import Client

    from schemas.notices import notice_subject

    signals: dict[str, int] = {}

    async def on_msg(msg: Any) -> None:
        signals[json.loads(msg.data)["event_id"]] = time.monotonic_ns()

    clients = []
    for n in range(first, first + count):
        client = Client()
        await client.connect([nats_url], name=f"bare-{n}")
        await client.subscribe(notice_subject(REGION, _instance(n)), cb=on_msg)
        clients.append(client)
    for client in clients:
        await client.flush()
    ready.put(count)
    while not stop.is_set():
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    for client in clients:
        await client.close()
    return signals


def _sample_cpu(wave: Any, samples: list[tuple[int, int]]) -> None:
    """From the wave's mark, the process's CPU time (every thread) every `SAMPLE_S` for
    `SAMPLE_FOR_S`: read at each drain signal instead, the read itself (the kernel sums every
    thread's time: 1,250 of them in an agent process) would be counted as the agent's."""
    wave.wait()
    end = time.monotonic() + SAMPLE_FOR_S
    while time.monotonic() < end:
        samples.append((time.monotonic_ns(), time.process_time_ns()))
        time.sleep(SAMPLE_S)


def _worker(  # noqa: PLR0917 (multiprocessing passes them positionally)
    kind: str,
    first: int,
    count: int,
    nats_url: str,
    folder: str,
    ready: Any,
    stop: Any,
    wave: Any,
    out: Any,
) -> None:
    import logging
    import threading

    logging.basicConfig(level=logging.ERROR)
    samples: list[tuple[int, int]] = []
    sampler = threading.Thread(target=_sample_cpu, args=(wave, samples), daemon=True)
    sampler.start()
    if kind == "agent":
        signals = asyncio.run(_agents(first, count, nats_url, Path(folder), ready, stop))
    else:
        signals = asyncio.run(_bare(first, count, nats_url, ready, stop))
    wave.set()  # a run without a wave: the sampler ends too
    sampler.join(SAMPLE_FOR_S + 5)
    out.put((os.getpid(), signals, samples))


# -- the publisher ------------------------------------------------------------------------------


def _notice(instance: str, region: str = REGION) -> Any:
    from schemas.notices import Notice

    now_us = time.time_ns() // 1000
    return Notice(
        event_id=str(uuid.uuid4()),
        region=region,
        instance_id=instance,
        pool_id="c3.2xlarge.hall2.reclaimable",
        workload_id="etl",
        deadline_at_us=now_us + 120_000_000,
        issued_at_us=now_us,
    )


async def _publish(
    nats_url: str, idle: int, wave: int, agents: int, mark: Any = None
) -> tuple[dict[str, int], list[str], list[str]]:
    from provider.notices import NoticeRelay

    relay = await NoticeRelay.connect(nats_url)
    published: dict[str, int] = {}
    idle_ids, wave_ids = [], []
    try:
        for n in range(idle):
            note = _notice(_instance(n))
            published[note.event_id] = time.monotonic_ns()
            await relay.publish(note)
            idle_ids.append(note.event_id)
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0 - MARK_S)
        if mark is not None:
            mark.set()  # the workers' CPU samples start
        await asyncio.sleep(MARK_S)
        notes = [_notice(_instance(idle + n)) for n in range(min(wave, agents - idle))]
        client = relay._client  # back to back: one flush for the whole wave
        for note in notes:
            published[note.event_id] = time.monotonic_ns()
            await client.publish(note.subject, note.to_json())
            wave_ids.append(note.event_id)
        await client.flush(timeout=30)
    finally:
        await relay.close()
    return published, idle_ids, wave_ids


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _cpu_at(samples: list[tuple[int, int]], at_ns: int) -> float | None:
    """The process's CPU time (ns) at `at_ns` (CLOCK_MONOTONIC), between its two samples."""
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        if t0 <= at_ns <= t1:
            return c0 + (c1 - c0) * (at_ns - t0) / max(1, t1 - t0)
    return None


def _wave_cpu(
    outs: list[tuple[int, dict[str, int], list[tuple[int, int]]]],
    published: dict[str, int],
    wave_ids: list[str],
) -> list[tuple[int, float]]:
    """For each process that got wave notices: how many, and its CPU time (every thread) from
    the wave's first publish to its last drain signal (ms)."""
    start = min((published[i] for i in wave_ids), default=0)
    found = []
    for _, signals, samples in outs:
        mine = [signals[i] for i in wave_ids if i in signals]
        if not mine:
            continue
        first, last = _cpu_at(samples, start), _cpu_at(samples, max(mine))
        if first is not None and last is not None:
            found.append((len(mine), (last - first) / 1e6))
    return found


def _run_layout(
    kind: str, args: argparse.Namespace, nats_url: str
) -> tuple[dict[str, list[float]], list[tuple[int, float]]]:
    ctx = mp.get_context("spawn")
    ready, out, stop, wave = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
    per = -(-args.agents // args.processes)
    procs = []
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as folder:
        started = time.monotonic()
        for p in range(args.processes):
            first, count = p * per, min(per, args.agents - p * per)
            if count <= 0:
                break
            sub = Path(folder) / f"w{p}"
            proc = ctx.Process(
                target=_worker,
                args=(kind, first, count, nats_url, str(sub), ready, stop, wave, out),
            )
            proc.start()
            procs.append(proc)
        subscribed = sum(ready.get(timeout=600) for _ in procs)
        print(
            f"  {kind:>5}: {subscribed:,} subscribed in {len(procs)} processes "
            f"({time.monotonic() - started:.1f} s)",
            flush=True,
        )
        time.sleep(SETTLE_S)
        published, idle_ids, wave_ids = asyncio.run(
            _publish(nats_url, args.idle, args.wave, args.agents, wave)
        )
        time.sleep(SAMPLE_FOR_S)
        stop.set()
        signals: dict[str, int] = {}
        outs = [out.get(timeout=600) for _ in procs]
        for _, got, _ in outs:
            signals.update(got)
        for proc in procs:
            proc.join(60)
    result = {}
    for label, ids in (("one by one", idle_ids), (f"wave of {len(wave_ids)}", wave_ids)):
        missing = [i for i in ids if i not in signals]
        if missing:
            print(f"  {kind}: {len(missing)} of {len(ids)} notices without a drain signal")
        result[label] = [(signals[i] - published[i]) / 1e6 for i in ids if i in signals]
    return result, _wave_cpu(outs, published, wave_ids)


def _print_wave_cpu(cpu: dict[str, list[tuple[int, float]]]) -> None:
    """CPU per wave notice, from the wave's first publish to each process's last drain signal:
    what the wave's latency is made of on a CPU shared with the publisher and `nats-server`, and
    unlike the latency it hardly moves with the machine's load."""
    print(
        "\n  wave, CPU per notice: every thread of a process, from the first publish to its\n"
        f"  last drain signal (sampled every {SAMPLE_S * 1000:g} ms)"
    )
    per = {}
    for kind in ("agent", "bare"):
        found = cpu[kind]
        if not found:
            print(f"  {kind:>6}: no CPU samples around the wave")
            continue
        busiest = max(found)
        per[kind] = sum(ms for _, ms in found) / sum(n for n, _ in found) * 1000
        print(
            f"  {kind:>6}: {per[kind]:6.1f} µs a notice over {len(found)} processes; the "
            f"busiest ({busiest[0]} notices) {busiest[1] / busiest[0] * 1000:6.1f} µs"
        )
    if len(per) == 2:
        print(f"  {'ratio':>6}: {per['agent'] / per['bare']:6.1f}x")


# -- idle cost ----------------------------------------------------------------------------------


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of `pid`, to the nanosecond (schedstat; /proc/PID/stat counts
    clock ticks, 10 ms: a window of 30 s could not tell 0 from 0.3 millicores)."""
    total_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            total_ns += int((task / "schedstat").read_text().split()[0])
    return total_ns / 1e9


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _measure(pid: int, warmup_s: float, window_s: float) -> tuple[float, float]:
    time.sleep(warmup_s)
    cpu0, t0 = _proc_cpu_s(pid), time.monotonic()
    time.sleep(window_s)
    cpu1, t1 = _proc_cpu_s(pid), time.monotonic()
    return (cpu1 - cpu0) / (t1 - t0) * 1000, _rss_mib(pid)


def _idle_cost(nats_url: str, window_s: float) -> None:
    import threading

    from provider.notices import MetadataServer, NoticeBoard
    from tests.agent_support import bundle, write_bundle

    with tempfile.TemporaryDirectory(prefix="bench-agent-idle-") as folder_name:
        folder = Path(folder_name)
        write_bundle(folder, bundle())
        loop = asyncio.new_event_loop()
        metadata = MetadataServer(NoticeBoard())
        loop.run_until_complete(metadata.start())
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        config = folder / "agent.toml"
        config.write_text(
            f'instance_id = "i-idle"\nregion = "{REGION}"\nstate_dir = "{folder / "state"}"\n'
            'metrics_listen = "127.0.0.1:0"\nvcpu = 16\n'
            f'[bundle]\npath = "{folder / "bundle.json"}"\npublic_key = "{folder / "bundle.pub"}"\n'
            f'[notices]\nnats = ["{nats_url}"]\nmetadata_url = "{metadata.url}"\n'
        )
        agent = subprocess.Popen(
            [sys.executable, "-m", "spotcap.cli", "agent", "run", "--config", str(config)],
            cwd=ROOT,
            stderr=subprocess.DEVNULL,
        )
        bare_code = (
            "import asyncio\nfrom nats.aio.client import Client\n"
            "async def cb(m):\n    pass\n"
            "async def main():\n    c = Client()\n"
            f"    await c.connect(['{nats_url}'])\n"
            "    await c.subscribe('spotcap.bench-1.notice.i-bare', cb=cb)\n"
            "    await asyncio.sleep(10**6)\nasyncio.run(main())\n"
        )
        bare = subprocess.Popen([sys.executable, "-c", bare_code])
        try:
            milli, rss = _measure(agent.pid, 10.0, window_s)
            bare_milli, bare_rss = _measure(bare.pid, 0.0, window_s)
        finally:
            for proc in (agent, bare):
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
        print(
            f"\nidle cost, each process measured for {window_s:g} s (the agent after a 10 s "
            "warm-up), CPU from schedstat"
        )
        for label, cpu, mem in (
            ("agent (NATS, metadata poll every 5 s, metrics)", milli, rss),
            ("bare nats-py subscriber", bare_milli, bare_rss),
        ):
            print(f"  {label:<48} {cpu:7.2f} millicores  RSS {mem:6.1f} MiB")
        print(
            f"  ratio{'':<43} {milli / max(bare_milli, 0.01):7.1f}x{'':<12}{rss / bare_rss:6.1f}x"
        )


# -- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--idle", type=int, default=200, help="notices one by one")
    parser.add_argument("--wave", type=int, default=800, help="notices at once")
    parser.add_argument("--idle-s", type=float, default=60.0, help="idle measurement window")
    parser.add_argument("--nats", default=None, help="use this NATS instead of starting one")
    parser.add_argument("--skip-idle", action="store_true")
    args = parser.parse_args()
    if args.idle + args.wave > args.agents:
        parser.error("--idle + --wave must not exceed --agents (one notice per agent)")
    from infra import servers

    server = None
    nats_url = args.nats
    nats_dir = Path(tempfile.mkdtemp(prefix="bench-agent-nats-"))
    if nats_url is None:
        server = servers.start_nats(nats_dir)
        nats_url = server.address
    try:
        print(
            f"{args.agents:,} agents in {args.processes} processes on {os.cpu_count()} cores, "
            f"NATS {nats_url}: notice to drain signal"
        )
        runs = {kind: _run_layout(kind, args, nats_url) for kind in ("agent", "bare")}
        figures = {kind: run[0] for kind, run in runs.items()}
        print(f"\n  {'pattern':<16} {'':>6} {'n':>6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
        for label in figures["agent"]:
            for kind in ("agent", "bare"):
                values = figures[kind][label]
                if values:
                    print(
                        f"  {label:<16} {kind:>6} {len(values):>6,} {_pct(values, 0.5):>9.2f} "
                        f"{_pct(values, 0.99):>9.2f} {max(values):>9.2f}"
                    )
            a, b = figures["agent"][label], figures["bare"][label]
            if a and b:
                print(
                    f"  {label:<16} {'ratio':>6} {'':>6} {_pct(a, 0.5) / _pct(b, 0.5):>9.1f}x "
                    f"{_pct(a, 0.99) / _pct(b, 0.99):>8.1f}x"
                )
        _print_wave_cpu({kind: run[1] for kind, run in runs.items()})
        if not args.skip_idle:
            _idle_cost(nats_url, args.idle_s)
    finally:
        if server is not None:
            servers.stop(server)
        shutil.rmtree(nats_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
