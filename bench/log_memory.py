"""Peak memory of the embedded log: writing a log of N demo days, and reading all of it back
from offset 0 through the decoding reader, each in a process of its own so that its peak
RSS (Linux's ``VmHWM``) is its own.

    .venv/bin/python bench/log_memory.py [--days 7,30] [--keep DIR]

The log has the demo's shape: about 73,000 events a day (`spotcap demo` writes 510,591 in 7
days), every event type routed to its topic, one flush per 50,000 events. `bench/log.py`
runs this after its throughput figures.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

EVENTS_PER_DAY = 73_000  # 510,591 / 7, the default demo region
REGION = "bench"


def _peak_rss_mib() -> float:
    """This process's peak resident memory. Linux's VmHWM belongs to the address space the
    process exec'd into; `ru_maxrss` would carry over the RSS of the (larger) parent it was
    forked from, as it does when `bench/log.py` starts it."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    (line,) = [x for x in status.splitlines() if x.startswith("VmHWM:")]
    return int(line.split()[1]) / 1024


def write(root: Path, days: float) -> dict[str, float]:
    """Write `days` of demo-sized events to a new embedded log under `root`."""
    from bench.sample import sample_envelopes
    from schemas.codec import Codec
    from streams.embedded import EmbeddedLog
    from streams.topics import region_topics
    from streams.writer import EventWriter

    pool = sample_envelopes(5_000)  # cycled: what is measured is the log, not the events
    before = _peak_rss_mib()
    log = EmbeddedLog(root)
    log.apply_topics(region_topics(REGION))
    writer = EventWriter(log, Codec(), REGION, flush_every=50_000)
    total = round(days * EVENTS_PER_DAY)
    start = time.perf_counter()
    for i in range(total):
        writer.write(pool[i % len(pool)])
    writer.close()
    log.close()
    return {
        "events": total,
        "seconds": time.perf_counter() - start,
        "rss_before_mib": before,
        "peak_rss_mib": _peak_rss_mib(),
    }


def read(root: Path) -> dict[str, float]:
    """Read every event topic of the log from offset 0 to its end through `DecodingReader`."""
    from schemas.codec import Codec
    from streams.embedded import EmbeddedLog
    from streams.reader import DecodingReader
    from streams.topics import EVENT_TOPICS, topic_name

    before = _peak_rss_mib()
    log = EmbeddedLog(root)
    topics = [topic_name(REGION, t) for t in EVENT_TOPICS]  # the schemas topic holds no events
    ends = sum(sum(log.end_offsets(t).values()) for t in topics)
    reader = DecodingReader(
        log.consumer("bench-rss", topics), Codec(), log.producer(), REGION, "bench"
    )
    events = 0
    start = time.perf_counter()
    while True:
        batch = reader.poll(max_records=5_000, timeout_s=0)
        if not batch.positions:
            break
        events += len(batch.events) + batch.dead_lettered
    seconds = time.perf_counter() - start
    reader.consumer.close()
    log.close()
    assert events == ends, f"read {events} of {ends} records"
    return {
        "events": events,
        "seconds": seconds,
        "rss_before_mib": before,
        "peak_rss_mib": _peak_rss_mib(),
    }


def _child(mode: str, root: Path, days: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--root", str(root), "--days", str(days)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure(days_list: list[float], keep: Path | None = None) -> None:
    """Print peak RSS of writing and of reading back a log of each length, and the ratios."""
    print("embedded log memory (each figure from a process of its own; peak RSS, VmHWM):")
    figures: dict[float, tuple[dict[str, float], dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="spotcap-rss-") as tmp:
        base = keep or Path(tmp)
        for days in days_list:
            root = base / f"log-{days:g}d"
            wrote = _child("write", root, days)
            log_mib = sum(p.stat().st_size for p in root.rglob("*.avro")) / 2**20
            got = _child("read", root, days)
            figures[days] = (wrote, got)
            print(
                f"  {days:>4g} days {int(got['events']):>10,} events {log_mib:>5,.0f} MiB of log  "
                f"write: peak RSS {wrote['peak_rss_mib']:>5,.0f} MiB   "
                f"read from offset 0 + decode: peak RSS {got['peak_rss_mib']:>5,.0f} MiB "
                f"(after imports {got['rss_before_mib']:,.0f} MiB; "
                f"{got['events'] / got['seconds']:,.0f} events/s)"
            )
    first = days_list[0]
    for days in days_list[1:]:
        w = figures[days][0]["peak_rss_mib"] / figures[first][0]["peak_rss_mib"]
        r = figures[days][1]["peak_rss_mib"] / figures[first][1]["peak_rss_mib"]
        print(f"  {days:g} days / {first:g} days: write {w:.2f}x, read {r:.2f}x (target <= 1.5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", default="7,30", help="log lengths in demo days, comma-separated")
    parser.add_argument("--keep", type=Path, default=None, help="write the logs here and keep them")
    parser.add_argument("--child", choices=("write", "read"), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "write":
        print(json.dumps(write(args.root, float(args.days))))
    elif args.child == "read":
        print(json.dumps(read(args.root)))
    else:
        measure([float(d) for d in args.days.split(",")], args.keep)


if __name__ == "__main__":
    main()
