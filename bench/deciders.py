"""Events per second through the deciders: embedded runner, Faust workers, and a bare loop.

One simulated region (``--workloads`` workloads, ``--days`` days) is written to a real Kafka
broker; then, in the same run, its input events go through:

- **bare**: the reference, no framework: a confluent-kafka consumer polls the input topics,
  fastavro decodes (`Codec.decode`), `DeciderCore.process` decides, a confluent-kafka producer
  writes the encoded decisions. Poll order, no merge (the cheapest correct-looking loop);
- **embedded**: `EmbeddedRunner` over the Kafka log (the merged history, then the core), what
  ``spotcap demo`` and replay use;
- **faust**: ``spotcap run streams``: the sequencer (merge to the journal, routing to the stage
  topics) in this process's thread and one Faust worker process, timed from the worker's start
  to the last of the embedded runner's decisions seen on the decisions topic. With
  ``--profile`` the worker runs under py-spy and its samples are summed by package.

Then a **hall-wide wave**: ``--wave`` instances launched in one hall's reclaimable pools, then
a notice for every one of them at once; the time from writing the notices to the last
replacement decision out, for the embedded core (in process) and the running Faust worker.

    .venv/bin/python bench/deciders.py [--workloads N] [--days D] [--wave N] [--profile]
        [--kafka HOST:PORT]
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from infra import servers
from schemas.codec import Codec
from schemas.events import Envelope, InstanceLaunched, NoticeReceived
from sim import ReclaimSettings, SimConfig, simulate
from streams.deciders import DeciderSettings, ExclusionWatcher, Scorer
from streams.kafka import KafkaLog
from streams.log import TopicSpec
from streams.runtime.core import DERIVED_PREFIX, Clock, DeciderCore, Item, input_topics
from streams.runtime.embedded import EmbeddedRunner, ListSink
from streams.runtime.journal import Header, RuntimeTopics
from streams.runtime.kafka_io import PartitionReader
from streams.runtime.sequencer import JournalRouter, Sequencer, prepare, run_sequencer
from streams.runtime.stages import (
    ActuatorPartition,
    KeyedPartition,
    StageRecord,
    WorkloadPartition,
)
from streams.topics import topic_name
from streams.writer import EventWriter

REGION = f"bench-d{os.getpid()}"  # a fresh region on a reused broker
CODEC = Codec()
SPOTCAP = str(Path(sys.executable).with_name("spotcap"))
PY_SPY = str(Path(sys.executable).with_name("py-spy"))
WAIT_S = 900.0


def scenario(workloads: int, days: float) -> list[Envelope]:
    config = SimConfig(
        days=days,
        seed=7,
        region=REGION,
        workloads=workloads,
        rate_card_interval_s=1800,
        reclaims=ReclaimSettings(waves_per_day=12.0, misbehaving_factor=30.0),
    )
    return [
        e
        for e in simulate(config)
        if e.payload.TOPIC in input_topics() and not e.producer.startswith(DERIVED_PREFIX)
    ]


def write(bootstrap: str, events: list[Envelope]) -> None:
    writer = EventWriter(KafkaLog(bootstrap), CODEC, REGION)
    for event in events:
        writer.write(event)
    writer.close()


# -- the three runs ---------------------------------------------------------------------------


def run_bare(bootstrap: str) -> tuple[float, int]:
    """Poll, decode, decide, produce every input event in the log: (seconds, events)."""
    topics = [topic_name(REGION, t) for t in input_topics()]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-bare-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    out = f"{REGION}.bench-bare-decisions"
    KafkaLog(bootstrap).apply_topics([TopicSpec(out, 6, 3_600_000, doc="the bare loop's output")])
    core = DeciderCore()
    partitions = [
        TopicPartition(t, p, OFFSET_BEGINNING)
        for t in topics
        for p in consumer.list_topics(t, timeout=10).topics[t].partitions
    ]
    count = sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions)
    consumer.assign(partitions)
    seen = 0
    started = time.perf_counter()
    deadline = time.monotonic() + WAIT_S
    while seen < count and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            if m.error() is not None:
                continue
            seen += 1
            for decision in core.process(CODEC.decode(m.value() or b"")):
                producer.produce(out, CODEC.encode(decision), key=decision.key.encode())
            producer.poll(0)
    producer.flush()
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < count:
        raise SystemExit(f"the bare loop read {seen:,} of {count:,} events in {WAIT_S:.0f} s")
    return elapsed, seen


def run_embedded(bootstrap: str) -> tuple[float, list[Envelope], int, int]:
    """(seconds, decisions, events read, items: inputs and clocks)"""
    sink = ListSink()
    report = EmbeddedRunner(KafkaLog(bootstrap), CODEC, REGION, sink).run()
    return report.seconds, sink.decisions, report.events_read, report.inputs


class MemoryJournal:
    """The journal's items by position, in memory (`stages.JournalItems`)."""

    def __init__(self, entries: list[tuple[int, Item]]) -> None:
        self.entries = entries
        self.positions = [p for p, _ in entries]

    def items(self, first: int, last: int) -> list[tuple[int, Item]]:
        lo = bisect.bisect_left(self.positions, first)
        hi = bisect.bisect_right(self.positions, last)
        return self.entries[lo:hi]


def _read_all(bootstrap: str, topic: str, partition: int) -> list[tuple[Header, bytes]]:
    reader = PartitionReader(bootstrap, topic, partition)
    end = reader.end()
    out = [(Header.decode(m.headers), m.value or b"") for m in reader.read_until(end - 1)]
    reader.close()
    return out


def run_stages(bootstrap: str, topics: RuntimeTopics) -> float:
    """The Faust app's stage classes in this process over the journal and the stage topics as
    the run left them, without Faust (decoding included): what the partitioned design costs."""
    raw_journal = _read_all(bootstrap, topics.journal, 0)
    raw = {
        (name, p): _read_all(bootstrap, topic, p)
        for name, topic, n in (
            ("pool", topics.pool, topics.pool_partitions),
            ("scorer", topics.scorer, 1),
            ("workload", topics.workload, topics.workload_partitions),
        )
        for p in range(n)
    }
    settings = DeciderSettings()
    started = time.perf_counter()

    def records(pairs: list[tuple[Header, bytes]]) -> list[StageRecord]:
        return [
            StageRecord(h, CODEC.decode(v) if h.kind in ("fact", "decision") else None)
            for h, v in pairs
        ]

    journal = MemoryJournal(
        [
            (h.position, Clock(h.clock_us) if h.clock_us is not None else CODEC.decode(v))
            for h, v in raw_journal
        ]
    )
    to_actuator: list[StageRecord] = []
    for (name, partition), pairs in raw.items():
        if name == "workload":
            out = WorkloadPartition(settings, journal).apply(records(pairs))
            for placed in out.to_actuator:
                header = Header("decision", placed.position, source=partition, order=placed.order)
                to_actuator.append(StageRecord(header, placed.envelope))
            if out.progress is not None:
                to_actuator.append(
                    StageRecord(Header("progress", out.progress, source=partition), None)
                )
        else:
            decider = ExclusionWatcher(settings) if name == "pool" else Scorer(settings)
            KeyedPartition(decider).apply(records(pairs))
    ActuatorPartition(settings, journal, topics.workload_partitions).apply(to_actuator)
    return time.perf_counter() - started


class DecisionWatch:
    """Reads the region's decisions topic; `until` waits for a number of distinct ids."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-watch-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic_name(REGION, "decisions")])
        self.ids: dict[str, Envelope] = {}
        self.first_at: float | None = None
        self.copies = 0

    def until(self, done: set[str] | int, timeout_s: float = WAIT_S) -> float:
        deadline = time.monotonic() + timeout_s
        while not self._done(done):
            if time.monotonic() > deadline:
                raise SystemExit(f"the Faust worker did not make every decision in {timeout_s} s")
            for m in self.consumer.consume(2000, 0.2):
                if m.error() is not None:
                    continue
                event = CODEC.decode(m.value() or b"")
                if event.producer.startswith(DERIVED_PREFIX):
                    self.copies += 1
                    self.ids.setdefault(event.event_id, event)
                    if self.first_at is None:
                        self.first_at = time.perf_counter()
        return time.perf_counter()

    def _done(self, done: set[str] | int) -> bool:
        if isinstance(done, int):
            return len(self.ids) >= done
        return done <= self.ids.keys()


def start_worker(bootstrap: str, log_path: Path, profile: Path | None) -> subprocess.Popen[bytes]:
    args = [SPOTCAP, "--kafka", bootstrap, "--region", REGION, "run", "streams", "--role"]
    args += ["worker", "--session-timeout-s", "10"]
    if profile is not None:
        args = [PY_SPY, "record", "--format", "raw", "-r", "100", "-o", str(profile), "--", *args]
    log = log_path.open("ab")
    return subprocess.Popen(args, stdout=log, stderr=log)


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGINT if worker.args[0] == PY_SPY else signal.SIGTERM)  # type: ignore[index]
    try:
        worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


AREAS = (  # the first of these met from the innermost frame outwards takes the sample
    ("the deciders", ("/streams/deciders/",)),
    ("Avro decode and encode", ("/schemas/codec",)),
    ("snapshots (state codec, JSON)", ("/streams/runtime/state_codec", "/json/")),
    ("stage runners and host", ("/streams/runtime/",)),
    ("journal reads (executor thread)", ("/concurrent/", "/confluent_kafka/")),
    ("aiokafka", ("/aiokafka/",)),
    ("faust and mode", ("/faust/", "/mode/")),
    ("asyncio and the selector", ("/asyncio/", "/selectors.py")),
)


def where_time_goes(profile: Path) -> list[tuple[str, float]]:
    """py-spy's raw samples, each given to the first area of `AREAS` its stack meets from the
    innermost frame outwards (so time in a decider called by Faust counts as the decider's)."""
    by_area: Counter[str] = Counter()
    total = 0
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        by_area[_area(stack.split(";"))] += int(count)
    return [(area, 100.0 * n / max(1, total)) for area, n in by_area.most_common()]


def _area(frames: list[str]) -> str:
    for frame in reversed(frames):
        path = "/" + frame.rsplit("(", 1)[-1]
        for area, markers in AREAS:
            if any(m in path for m in markers):
                return area
    return "other"


# -- the wave ---------------------------------------------------------------------------------


def wave_events(history: list[Envelope], size: int) -> tuple[list[Envelope], list[Envelope]]:
    """`size` launches into one hall's reclaimable pools (spread over the workloads), and a
    notice for each, all at one instant after the history's end."""
    launches = [(e, e.payload) for e in history if isinstance(e.payload, InstanceLaunched)]
    template, template_payload = launches[-1]
    hall = Counter(p.pool_id.split(".")[2] for _, p in launches).most_common(1)[0][0]
    pools = sorted(
        {p.pool_id for _, p in launches if p.pool_id.split(".")[2] == hall}
        & {p.pool_id for _, p in launches if p.purchase_model == "reclaimable"}
    )
    workloads = sorted({p.workload_id for _, p in launches})
    end_us = max(e.occurred_at for e in history)
    launch_at = end_us + 60_000_000
    notice_at = launch_at + 600_000_000
    wave_id = "bench-wave"
    made: list[Envelope] = []
    notices: list[Envelope] = []
    for i in range(size):
        pool = pools[i % len(pools)]
        instance = str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-wave/{i}"))
        payload = dataclasses.replace(
            template_payload,
            instance_id=instance,
            pool_id=pool,
            workload_id=workloads[i % len(workloads)],
            vcpu=int(pool.split(".")[1]),
        )
        made.append(
            dataclasses.replace(
                template,
                event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-wave/launch/{i}")),
                occurred_at=launch_at + i,
                recorded_at=launch_at + i,
                key=instance,
                payload=payload,
            )
        )
        notices.append(
            Envelope(
                event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-wave/notice/{i}")),
                event_type="notice_received",
                occurred_at=notice_at,
                recorded_at=notice_at,
                region=REGION,
                key=instance,
                causation_id=None,
                correlation_id=wave_id,
                producer="agent",
                payload=NoticeReceived(
                    instance, pool, payload.workload_id, notice_at + 120_000_000, "metadata"
                ),
            )
        )
    return made, notices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=40)
    parser.add_argument("--days", type=float, default=0.5)
    parser.add_argument("--wave", type=int, default=800, help="notices in the hall-wide wave")
    parser.add_argument("--profile", action="store_true", help="run the worker under py-spy")
    parser.add_argument("--kafka", default=None, help="bootstrap servers of a running broker")
    args = parser.parse_args()
    events = scenario(args.workloads, args.days)
    launches, notices = wave_events(events, args.wave)
    print(f"{len(events):,} input events ({args.workloads} workloads, {args.days} days)")
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        bootstrap = args.kafka
        if bootstrap is None:
            server = servers.start_kafka(Path(tmp) / "kafka")
            bootstrap = server.address
        try:
            topics = RuntimeTopics(REGION)
            prepare(bootstrap, CODEC, topics)
            write(bootstrap, events)
            bare_s, bare_n = run_bare(bootstrap)
            embedded_s, decisions, read, items = run_embedded(bootstrap)
            expected = {d.event_id for d in decisions}
            print(
                f"{len(expected):,} decisions; events read: {read:,} by the embedded runner, "
                f"{bare_n:,} by the bare loop"
            )
            profile_dir = Path(tempfile.gettempdir()) if args.profile else None

            faust = run_faust(
                bootstrap, topics, expected, items, (events, launches, notices), profile_dir
            )
        finally:
            if server is not None:
                servers.stop(server)
        report(read, bare_s, embedded_s, faust)
    os._exit(0)  # librdkafka threads of the watch consumer need no orderly goodbye here


@dataclasses.dataclass
class FaustRun:
    sequenced_s: float
    seconds: float
    steady_s: float
    items: int
    copies: int
    ids: int
    wave_replacements: int
    core_wave_s: float
    faust_wave_s: float
    profile: Path | None
    stages_s: float


def run_faust(  # noqa: PLR0917 (one bench step's inputs)
    bootstrap: str,
    topics: RuntimeTopics,
    expected: set[str],
    items: int,
    streams: tuple[list[Envelope], list[Envelope], list[Envelope]],
    profile_dir: Path | None,
) -> FaustRun:
    """The sequencer in a thread and one worker process: the history, then the wave."""
    events, launches, notices = streams
    stop = threading.Event()
    routed_at: list[float] = []

    def on_step(_sequencer: Sequencer, router: JournalRouter) -> None:
        if not routed_at and router.routed >= items:
            routed_at.append(time.perf_counter())

    sequencer = threading.Thread(
        target=run_sequencer,
        args=(bootstrap, CODEC, topics),
        kwargs={"should_stop": stop.is_set, "on_step": on_step},
        daemon=True,
    )
    watch = DecisionWatch(bootstrap)
    profile = None if profile_dir is None else profile_dir / f"{REGION}-worker.pyspy"
    log = Path(tempfile.gettempdir()) / f"bench-deciders-worker-{os.getpid()}.log"
    started = time.perf_counter()
    sequencer.start()
    worker = start_worker(bootstrap, log, profile)
    try:
        done_at = watch.until(expected)
        stages_s = run_stages(bootstrap, topics)

        # the wave: launches first (they make no decision to wait for), then the notices at once
        core = DeciderCore()
        for e in [*events, *launches]:
            core.process(e)
        t0 = time.perf_counter()
        wave_made = [d for n in notices for d in core.process(n)]
        core_wave_s = time.perf_counter() - t0
        replacements = {d.event_id for d in wave_made if d.event_type == "replacement_requested"}
        write(bootstrap, launches)
        time.sleep(5.0)
        t0 = time.perf_counter()
        write(bootstrap, notices)
        faust_wave_s = watch.until(replacements) - t0
    finally:
        stop_worker(worker)
        stop.set()
        sequencer.join(timeout=30)
    return FaustRun(
        (routed_at[0] if routed_at else done_at) - started,
        done_at - started,
        done_at - (watch.first_at or started),
        items,
        watch.copies,
        len(watch.ids),
        len(replacements),
        core_wave_s,
        faust_wave_s,
        profile,
        stages_s,
    )


def report(n: int, bare_s: float, embedded_s: float, faust: FaustRun) -> None:
    print()
    print(f"{'runtime':<34} {'seconds':>9} {'events/s':>10} {'vs bare':>8}")
    rows = [
        ("bare loop (poll, decode, decide)", bare_s),
        ("embedded runner (merged history)", embedded_s),
        ("stages in one process, no Faust", faust.stages_s),
        ("sequencer + router (in the bench)", faust.sequenced_s),
        ("faust: sequencer + 1 worker", faust.seconds),
        ("faust: first to last decision", faust.steady_s),
    ]
    for label, seconds in rows:
        print(f"{label:<34} {seconds:>9.2f} {n / seconds:>10,.0f} {bare_s / seconds:>8.3f}")
    print(f"decisions read from Kafka: {faust.copies:,} copies of {faust.ids:,} ids")
    print()
    print(
        f"wave: {faust.wave_replacements} replacement decisions; embedded core "
        f"{faust.core_wave_s * 1000:,.0f} ms, Faust {faust.faust_wave_s:,.2f} s "
        "(notices written to the last replacement decision read)"
    )
    if faust.profile is not None and faust.profile.exists():
        print("\nwhere the Faust worker's time goes (py-spy samples, all threads):")
        for area, share in where_time_goes(faust.profile):
            print(f"  {share:5.1f} %  {area}")
        print(f"  (samples kept in {faust.profile})")


if __name__ == "__main__":
    main()
