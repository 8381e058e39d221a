"""Log throughput, events/s: append (produce + acknowledged flush) and consume (+ decode), for
the embedded log and for a real Kafka broker, with the same encoded events.

    .venv/bin/python bench/log.py [--events N] [--batch B] [--kafka HOST:PORT | --no-kafka]
                                  [--rss-days 7,30 | --no-rss]

Without --kafka, a single-node broker is started with infra/servers/ for the run. At the end,
the embedded log's peak memory (RSS) of writing and of reading back a log of 7 and of 30 demo
days, each in a process of its own (`bench/log_memory.py`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.log_memory import measure as measure_memory
from bench.sample import sample_envelopes
from infra import servers
from schemas.codec import Codec
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import EventLog, Record
from streams.topics import region_topics, topic_name


def run(label: str, log: EventLog, values: list[tuple[bytes, bytes]], batch: int) -> None:
    codec = Codec()
    region = f"b{uuid.uuid4().hex[:8]}"
    log.apply_topics(region_topics(region))
    topic = topic_name(region, "lifecycle")
    producer = log.producer()
    producer.produce(topic, values[0][1], key=b"warm-up")  # connect, get the producer id
    producer.flush()
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(values), batch):
        for key, value in values[i : i + batch]:
            producer.produce(topic, value, key=key)
        producer.flush()
    append_s, append_cpu_s = time.perf_counter() - start, time.process_time() - cpu

    # Kafka needs a few seconds to assign partitions to a new group: the clock starts at the
    # first records, and those are not counted.
    consumer = log.consumer(f"bench-{uuid.uuid4().hex}", [topic])
    first: list[Record] = []
    deadline = time.perf_counter() + 300
    while not first and time.perf_counter() < deadline:
        first = consumer.poll(max_records=5000, timeout_s=1.0)
    records: list[Record] = []
    start, cpu = time.perf_counter(), time.process_time()
    while len(first) + len(records) < len(values) + 1 and time.perf_counter() < deadline:
        records.extend(consumer.poll(max_records=5000, timeout_s=1.0))
    consume_s, consume_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    counted = len(records)
    records = [r for r in first + records if r.key != b"warm-up"]
    start = time.perf_counter()
    for record in records:
        codec.decode(record.value or b"", record.origin)
    decode_s = time.perf_counter() - start
    consumer.close()
    n = len(values)
    assert len(records) == n, f"{label}: consumed {len(records)} of {n}"
    decode_rate = n / decode_s
    consume_rate = counted / consume_s
    print(
        f"  {label:<10} append {n / append_s:>9,.0f} events/s (flush every {batch})   "
        f"consume {consume_rate:>9,.0f} events/s   decode {decode_rate:>8,.0f} events/s   "
        f"consume+decode {1 / (1 / consume_rate + 1 / decode_rate):>8,.0f} events/s"
    )
    if label == "embedded":
        # CPU time, which other load on the machine does not inflate (the embedded log's work
        # is all in this process; Kafka's is mostly in the broker).
        print(
            f"  {'':<10} CPU time: append {n / append_cpu_s:>9,.0f} events/s   "
            f"consume {counted / consume_cpu_s:>9,.0f} events/s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", default="1000,10000,50000", help="flush sizes, comma-separated")
    parser.add_argument("--kafka", default=None, help="bootstrap servers of a running broker")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--rss-days", default="7,30", help="log lengths for the memory figures")
    parser.add_argument("--no-rss", action="store_true", help="leave out the memory figures")
    args = parser.parse_args()
    codec = Codec()
    events = sample_envelopes(args.events)
    values = [(e.key.encode(), codec.encode(e)) for e in events]
    mean = sum(len(v) for _, v in values) / len(values)
    print(f"{len(values)} events, mean {mean:.0f} bytes")
    with tempfile.TemporaryDirectory() as tmp:
        batches = [int(b) for b in args.batch.split(",")]
        for batch in batches:
            run("embedded", EmbeddedLog(Path(tmp) / f"log-{batch}"), values, batch)
        if not args.no_kafka:
            run_kafka(args.kafka, batches, values, Path(tmp))
    if not args.no_rss:
        measure_memory([float(d) for d in args.rss_days.split(",")])


def run_kafka(
    bootstrap: str | None, batches: list[int], values: list[tuple[bytes, bytes]], tmp: Path
) -> None:
    """The same figures on Kafka (a broker started for the run when none is given)."""
    server = None
    if bootstrap is None:
        server = servers.start_kafka(tmp / "kafka")
        bootstrap = server.address
    try:
        for batch in batches:
            run("kafka", KafkaLog(bootstrap), values, batch)
    finally:
        if server is not None:
            servers.stop(server)


if __name__ == "__main__":
    main()
