"""Notice delivery latency, publish to receipt, over a real nats-server (ADR-17; target: a notice
reaches the node within 1 s).

Two runs of ``--notices`` notices each, every one a distinct event id, through the same code the
agent and the relay use (``NoticeRelay.publish``, ``NoticeIntake.get``):

- one by one: publish, wait for the subscriber to deliver it, then the next (idle latency);
- wave: ``--instances`` subscribers (one NATS connection each, as on as many nodes), every
  notice published back to back, as when a hall is reclaimed at once (latency under a burst).

Latency is taken from just before ``publish`` to the subscriber's delivery, on one monotonic
clock (relay and subscribers share one process and one event loop, so the figures include that
loop's scheduling). Starts its own nats-server unless ``--nats URL`` is given.

    .venv/bin/python bench/notices.py [--notices N] [--instances K] [--nats URL]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.intake import NoticeIntake
from infra import servers
from provider.notices import Notice, NoticeRelay

REGION = "bench-1"


def _mono_us() -> int:
    return time.perf_counter_ns() // 1_000


def _notice(instance_id: str, issued_at_us: int) -> Notice:
    return Notice(
        event_id=str(uuid.uuid4()),
        region=REGION,
        instance_id=instance_id,
        pool_id="c3.2xlarge.hall2.reclaimable",
        workload_id="wl-bench",
        deadline_at_us=issued_at_us + 120_000_000,
        issued_at_us=issued_at_us,
    )


def _report(label: str, latencies_us: list[int]) -> None:
    ordered = sorted(latencies_us)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] / 1_000

    print(
        f"  {label:<34} n={len(ordered):>5}  p50 {pct(0.50):7.3f} ms  p99 {pct(0.99):7.3f} ms  "
        f"max {ordered[-1] / 1_000:7.3f} ms"
    )


async def _one_by_one(address: str, count: int) -> list[int]:
    latencies: list[int] = []
    async with (
        NoticeIntake(REGION, "i-bench-0", nats_servers=[address], clock_us=_mono_us) as sub,
        await NoticeRelay.connect(address) as relay,
    ):
        if not await sub.wait_subscribed(timeout_s=10):
            raise SystemExit("the subscriber did not subscribe within 10 s")
        for _ in range(count):
            sent_us = _mono_us()
            await relay.publish(_notice("i-bench-0", sent_us))
            delivery = await sub.get(timeout_s=5)
            latencies.append(delivery.received_at_us - sent_us)
    return latencies


async def _wave(address: str, count: int, instances: int) -> list[int]:
    subs = [
        NoticeIntake(REGION, f"i-wave-{i}", nats_servers=[address], clock_us=_mono_us)
        for i in range(instances)
    ]
    for sub in subs:
        await sub.start()
    try:
        for sub in subs:
            if not await sub.wait_subscribed(timeout_s=10):
                raise SystemExit("a subscriber did not subscribe within 10 s")
        sent: dict[str, int] = {}
        async with await NoticeRelay.connect(address) as relay:
            for n in range(count):
                sent_us = _mono_us()
                note = _notice(f"i-wave-{n % instances}", sent_us)
                sent[note.event_id] = sent_us
                await relay.publish(note)
        latencies: list[int] = []
        for i, sub in enumerate(subs):
            for _ in range(count // instances + (1 if i < count % instances else 0)):
                delivery = await sub.get(timeout_s=10)
                latencies.append(delivery.received_at_us - sent[delivery.message.event_id])
        return latencies
    finally:
        await asyncio.gather(*(sub.close() for sub in subs))


async def _main(address: str, count: int, instances: int) -> None:
    print(f"{count} notices over NATS at {address}")
    _report("one by one (idle)", await _one_by_one(address, count))
    _report(f"wave over {instances} instances (burst)", await _wave(address, count, instances))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--notices", type=int, default=1_000)
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--nats", default=None, help="use this NATS instead of starting one")
    args = parser.parse_args()
    if args.nats:
        asyncio.run(_main(args.nats, args.notices, args.instances))
        return
    with tempfile.TemporaryDirectory(prefix="spotcap-bench-nats-") as tmp:
        server = servers.start_nats(Path(tmp))
        try:
            asyncio.run(_main(server.address, args.notices, args.instances))
        finally:
            servers.stop(server)


if __name__ == "__main__":
    main()
