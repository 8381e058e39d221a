"""Log throughput, events/s, through the project's paths and, in the same run on the same
events, through the libraries alone (`bench/log_bare.py`); prints the project/bare ratios.

    .venv/bin/python bench/log.py [--days 3] [--rounds 4] [--flush-every 50000]
                                  [--kafka HOST:PORT | --no-kafka] [--profile]
                                  [--rss-days 7,30 | --no-rss]

The events are a real `spotcap demo` run (the simulator, `--days` of the default region),
held by the bench and left out of the garbage collector's walks (`gc.freeze`, see `main`).
Four paths, each from typed envelopes to typed envelopes:

* Kafka produce: `EventWriter` on `KafkaLog` vs confluent-kafka's Producer (the same
  config: idempotent, acks=all, murmur2_random, linger.ms=5, lz4) + fastavro's schemaless
  writer; both flush every `--flush-every` events; the clock stops when all are acknowledged.
* Kafka consume + decode: `DecodingReader` over `KafkaLog.consumer` (what processors read
  through) vs a confluent-kafka consume + fastavro schemaless-reader loop building the same
  envelopes; a new group each time, the clock starts at its first records.
* Embedded append: `EventWriter` on `EmbeddedLog` vs fastavro's container writer (one file
  per topic, each fsynced every `--flush-every` events, as the embedded log fsyncs each flush).
* Embedded read + decode: `DecodingReader` over `EmbeddedLog.consumer` vs fastavro's
  container reader over those files, building the same envelopes.

Two more paths read through what the processors run, on both logs:

* Processor: `streams.processing.runner.Processor` (a `Message` per record through decode,
  the dead-letter guard, the step, the batch, a sink that takes the rows, the positions
  committed after each batch; 500 records a poll, as the projections run it) vs the bare
  read + decode loop of the same log.
* MergedHistory: `streams.merged.MergedHistory` over every event topic (the order catch-up,
  rebuild, replay and export read in) vs the bare read + decode loop with the envelopes put
  in history order: `heapq.merge` of the per-topic container files (each already in order),
  or, on Kafka, one `sorted` by (occurred_at, topic, partition, offset).

Each round runs every path's two sides, and the side that goes first alternates from round
to round (project first in odd rounds, bare first in even ones), so order effects on a shared
machine cancel; the ratio of each round is its own pair's, reported as the median and range
over the rounds (at least 4 for a figure worth quoting). The CPU ratio is the same over events
per CPU-second of this process (librdkafka's threads included, the broker's not), which the
machine's other load disturbs far less than wall time. Without --kafka, a single-node broker
is started with infra/servers/ for the run. `--profile` runs each project path once more under
cProfile and prints its top entries. At the end, the embedded log's peak memory (RSS) of
writing and of reading back a log of 7 and of 30 demo days (`bench/log_memory.py`).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import log_bare
from bench.log_memory import measure as measure_memory
from infra import servers
from schemas.codec import Codec
from schemas.events import Envelope
from streams.deadletter import DeadLetters
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import EventLog, TopicPartition
from streams.merged import MergedHistory
from streams.processing.dead_letters import DeadLetterGuard, DeadLetterPolicy
from streams.processing.factory import ChainFactory
from streams.processing.runner import Processor
from streams.reader import Decoded, Decoder, DecodingReader
from streams.topics import EVENT_TOPICS, region_topics, topic_name
from streams.writer import EventWriter

POLL_RECORDS = 5_000


@dataclasses.dataclass
class Measured:
    """One path: a project run and a bare run, each returning (events, seconds)."""

    name: str
    project: Callable[[int], tuple[int, float]]
    bare: Callable[[int], tuple[int, float]]
    rates: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {"project": [], "bare": []}
    )
    # Events per CPU-second of this process (librdkafka's threads included, the broker's
    # not): what the machine's other load disturbs least.
    cpu_rates: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {"project": [], "bare": []}
    )


def demo_events(days: float, seed: int) -> list[Envelope]:
    from sim import RegionSim, SimConfig

    config = SimConfig(seed=seed, days=days, region="bench")
    return [e for batch in RegionSim(config).run() for e in batch]


def with_region(events: list[Envelope], region: str) -> list[Envelope]:
    return [dataclasses.replace(e, region=region) for e in events]


def write_through_project(log: EventLog, events: list[Envelope], flush_every: int) -> float:
    writer = EventWriter(log, Codec(), events[0].region, flush_every=flush_every)
    start = time.perf_counter()
    for envelope in events:
        writer.write(envelope)
    writer.close()
    return time.perf_counter() - start


def read_through_project(
    log: EventLog, region: str, count: int, *, wait_first: bool
) -> tuple[int, float]:
    """Read `count` events through `DecodingReader`; with `wait_first` the clock starts after
    the first poll that returns events (Kafka's group join is not counted, nor are they).
    Returns the events timed and the seconds."""
    topics = [topic_name(region, t) for t in EVENT_TOPICS]
    group = f"bench-{uuid.uuid4().hex}"
    reader = DecodingReader(log.consumer(group, topics), Codec(), log.producer(), region, "bench")
    decoded = 0
    if wait_first:
        while not decoded:
            decoded = len(reader.poll(POLL_RECORDS, timeout_s=1.0).events)
    untimed = decoded
    start = time.perf_counter()
    while decoded < count:
        batch = reader.poll(POLL_RECORDS, timeout_s=1.0)
        if not batch.positions and not wait_first:
            break
        decoded += len(batch.events)
    seconds = time.perf_counter() - start
    reader.consumer.close()
    assert decoded == count, f"read {decoded} of {count} events"
    return count - untimed, seconds


class _Rows:
    """The processor's sink: takes each batch's rows (the positions are then committed)."""

    def __init__(self) -> None:
        self.rows = 0

    def write(
        self, rows: Sequence[Envelope], positions: Mapping[TopicPartition, int], timeout_s: float
    ) -> None:
        self.rows += len(rows)


def _envelope_of(decoded: Decoded) -> Sequence[Envelope]:
    return (decoded.envelope,)


def process_through_project(
    log: EventLog, region: str, count: int, *, wait_first: bool
) -> tuple[int, float]:
    """Run `count` events through a `Processor` (decode, guard, step, batch, sink, commit);
    with `wait_first` the clock starts once the first records were taken (Kafka's group join
    is not counted). Returns the events timed and the seconds."""
    codec = Codec()
    topics = [topic_name(region, t) for t in EVENT_TOPICS]
    guard = DeadLetterGuard(DeadLetters(log.producer(), codec, region, "bench"), DeadLetterPolicy())
    sink = _Rows()
    factory = ChainFactory(lambda partitions: _envelope_of, sink, Decoder(codec), guard)
    processor = Processor(log, f"bench-{uuid.uuid4().hex}", topics, factory)
    if wait_first:
        while not processor.processed:
            processor.run_once()
    untimed = processor.processed
    start = time.perf_counter()
    while processor.processed < count:
        processor.run_once()
    processor.close()  # joins the chain: the last batch written, its positions committed
    seconds = time.perf_counter() - start
    assert sink.rows == count, f"processed {sink.rows} of {count} events"
    return count - untimed, seconds


def merge_through_project(log: EventLog, region: str, count: int) -> tuple[int, float]:
    """Read every event topic through `MergedHistory` to its end."""
    start = time.perf_counter()
    merged = sum(1 for _ in MergedHistory(log, Codec(), region, EVENT_TOPICS))
    seconds = time.perf_counter() - start
    assert merged == count, f"merged {merged} of {count} events"
    return count, seconds


def embedded_paths(
    events: list[Envelope], plain: list[log_bare.Envelope], flush_every: int, tmp: Path
) -> list[Measured]:
    """`plain`: the same events as the bare loops' own envelopes."""
    n = len(events)
    region = events[0].region
    read_log = tmp / "read-log"
    read_bare = tmp / "read-bare"
    log = EmbeddedLog(read_log)
    log.apply_topics(region_topics(region))
    write_through_project(log, events, flush_every)
    log.close()
    log_bare.container_write(read_bare, plain, log_bare.topic_router(region), flush_every)

    def append_project(r: int) -> tuple[int, float]:
        log = EmbeddedLog(tmp / f"append-{r}")
        log.apply_topics(region_topics(region))
        seconds = write_through_project(log, events, flush_every)
        log.close()
        return n, seconds

    def append_bare(r: int) -> tuple[int, float]:
        start = time.perf_counter()
        route = log_bare.topic_router(region)
        log_bare.container_write(tmp / f"bare-{r}", plain, route, flush_every)
        return n, time.perf_counter() - start

    def read_project(r: int) -> tuple[int, float]:
        log = EmbeddedLog(read_log)
        timed = read_through_project(log, region, n, wait_first=False)
        log.close()
        return timed

    def read_bare_(r: int) -> tuple[int, float]:
        start = time.perf_counter()
        got = log_bare.container_read(read_bare)
        assert got == n, f"bare read {got} of {n}"
        return n, time.perf_counter() - start

    def process_project(r: int) -> tuple[int, float]:
        log = EmbeddedLog(read_log)
        timed = process_through_project(log, region, n, wait_first=False)
        log.close()
        return timed

    def merge_project(r: int) -> tuple[int, float]:
        log = EmbeddedLog(read_log)
        timed = merge_through_project(log, region, n)
        log.close()
        return timed

    def merge_bare(r: int) -> tuple[int, float]:
        start = time.perf_counter()
        got = log_bare.container_read_merged(read_bare)
        assert got == n, f"bare merged read {got} of {n}"
        return n, time.perf_counter() - start

    return [
        Measured("embedded append", append_project, append_bare),
        Measured("embedded read + decode", read_project, read_bare_),
        Measured("embedded Processor", process_project, read_bare_),
        Measured("embedded MergedHistory", merge_project, merge_bare),
    ]


def kafka_paths(
    bootstrap: str, events: list[Envelope], plain: list[log_bare.Envelope], flush_every: int
) -> list[Measured]:
    n = len(events)
    kafka = KafkaLog(bootstrap)
    region = events[0].region
    kafka.apply_topics(region_topics(region))
    # The events consumed: written once, to topics of their own.
    read_region = f"{region}r"
    kafka.apply_topics(region_topics(read_region))
    write_through_project(kafka, with_region(events, read_region), flush_every)
    read_topics = [topic_name(read_region, t) for t in EVENT_TOPICS]

    def produce_project(r: int) -> tuple[int, float]:
        return n, write_through_project(kafka, events, flush_every)

    def produce_bare(r: int) -> tuple[int, float]:
        start = time.perf_counter()
        log_bare.kafka_produce(bootstrap, plain, log_bare.topic_router(region), flush_every)
        return n, time.perf_counter() - start

    def consume_project(r: int) -> tuple[int, float]:
        return read_through_project(kafka, read_region, n, wait_first=True)

    def consume_bare(r: int) -> tuple[int, float]:
        steps = log_bare.kafka_consume(bootstrap, f"bare-{uuid.uuid4().hex}", read_topics, n)
        untimed = next(steps)  # the first records have come and are decoded
        start = time.perf_counter()
        timed = next(steps)
        seconds = time.perf_counter() - start
        assert untimed + timed == n, f"bare consume read {untimed + timed} of {n}"
        return timed, seconds

    def process_project(r: int) -> tuple[int, float]:
        return process_through_project(kafka, read_region, n, wait_first=True)

    def merge_project(r: int) -> tuple[int, float]:
        return merge_through_project(kafka, read_region, n)

    def merge_bare(r: int) -> tuple[int, float]:
        start = time.perf_counter()
        got = log_bare.kafka_consume_merged(bootstrap, f"bare-{uuid.uuid4().hex}", read_topics, n)
        assert got == n, f"bare merged consume read {got} of {n}"
        return n, time.perf_counter() - start

    return [
        Measured("Kafka produce", produce_project, produce_bare),
        Measured("Kafka consume + decode", consume_project, consume_bare),
        Measured("Kafka Processor", process_project, consume_bare),
        Measured("Kafka MergedHistory", merge_project, merge_bare),
    ]


def run_rounds(paths: list[Measured], rounds: int) -> None:
    for r in range(rounds):
        order = ("project", "bare") if r % 2 == 0 else ("bare", "project")
        for path in paths:
            for side in order:
                run = path.project if side == "project" else path.bare
                cpu = time.process_time()
                count, seconds = run(r)
                path.cpu_rates[side].append(count / (time.process_time() - cpu))
                path.rates[side].append(count / seconds)
        done = ", ".join(
            f"{p.name} {p.rates['project'][-1] / p.rates['bare'][-1]:.2f}x" for p in paths
        )
        load = os.getloadavg()[0]
        print(f"  round {r + 1}/{rounds} ({order[0]} first, load {load:.1f}): {done}", flush=True)


def report(paths: list[Measured]) -> None:
    print(
        f"\n{'path':<24} {'project events/s':>17} {'bare events/s':>17} "
        f"{'ratio: median (range)':>22} {'CPU ratio':>18}"
    )
    for p in paths:
        ratios = [a / b for a, b in zip(p.rates["project"], p.rates["bare"], strict=True)]
        cpu = [a / b for a, b in zip(p.cpu_rates["project"], p.cpu_rates["bare"], strict=True)]
        print(
            f"{p.name:<24} {_range(p.rates['project'], '{:,.0f}'):>17} "
            f"{_range(p.rates['bare'], '{:,.0f}'):>17} {_spread(ratios):>22} {_spread(cpu):>18}"
        )


def _spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} ({_range(ratios, '{:.2f}')})"


def _range(values: list[float], fmt: str) -> str:
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def profile(paths: list[Measured], rounds: int) -> None:
    for path in paths:
        print(f"\nprofile: {path.name} (project), by own time")
        profiler = cProfile.Profile()
        profiler.runcall(path.project, rounds)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=3.0, help="demo days of events")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--flush-every", type=int, default=50_000, help="events per flush")
    parser.add_argument("--kafka", default=None, help="bootstrap servers of a running broker")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--profile", action="store_true", help="profile each project path")
    parser.add_argument(
        "--only", default="", help="run only the paths whose name holds this text (e.g. embedded)"
    )
    parser.add_argument("--rss-days", default="7,30", help="log lengths for the memory figures")
    parser.add_argument("--no-rss", action="store_true", help="leave out the memory figures")
    args = parser.parse_args()
    events = demo_events(args.days, args.seed)
    # The bare loops' own envelopes of the same events (made here, before any clock).
    plain = [log_bare.from_record(e.to_avro()) for e in events]
    # The bench holds every event (to write them, and to reuse them each round): hundreds of
    # thousands of objects a processor does not hold. Each side's garbage collections would
    # walk them all, more often for the side that keeps more objects alive a while (a poll's
    # batch, a decoded block) than for the bare loops, which drop each envelope at once.
    # Frozen, the collector leaves them out (the bare loops' copies too); both sides run so.
    gc.collect()
    gc.freeze()
    codec = Codec()
    mean = sum(len(codec.encode(e)) for e in events[:20_000]) / min(len(events), 20_000)
    print(
        f"{len(events):,} events of a {args.days:g}-day demo (seed {args.seed}), "
        f"mean {mean:.0f} bytes encoded; flush every {args.flush_every:,}; "
        f"{args.rounds} rounds, the side run first alternating"
    )
    with tempfile.TemporaryDirectory(prefix="spotcap-bench-log-") as tmp:
        paths = embedded_paths(events, plain, args.flush_every, Path(tmp))
        server = None
        if not args.no_kafka:
            bootstrap = args.kafka
            if bootstrap is None:
                server = servers.start_kafka(Path(tmp) / "kafka")
                bootstrap = server.address
            paths += kafka_paths(bootstrap, events, plain, args.flush_every)
        paths = [p for p in paths if args.only.lower() in p.name.lower()]
        try:
            run_rounds(paths, args.rounds)
            report(paths)
            if args.profile:
                profile(paths, args.rounds)
        finally:
            if server is not None:
                servers.stop(server)
    if not args.no_rss:
        print()
        measure_memory([float(d) for d in args.rss_days.split(",")])


if __name__ == "__main__":
    main()
