"""Where the ledger writer's CPU goes, piece by piece: `LedgerWriter.write` over batches decoded
beforehand, with one piece of its work left out at a time, against the bare loop's insert.

    .venv/bin/python bench/ledger_parts.py --home H [--days D] [--batch B] [--rounds R]

`H` holds a region simulated by `bench/projections.py --home H` (the same `--days`). The records
are decoded once, before any clock starts, so each figure is the writer's own work: its Python
(the main thread) and chdb's threads (inserts, the views, merges), from /proc/self/task. Each
round runs every variant once, in turn; the table gives the median and the range over rounds
(the machine is shared: a variant's difference from `full` in the same rounds is what holds).

- full: `LedgerWriter.write` as it is (events and, through their views, rankings and rate
  cards; priced lines; offsets);
- no views / no rankings view / no rate cards view: the same with those views dropped;
- no lines insert / no offsets insert: the same, that insert left out (the pricing still runs);
- events only, no views: only the events insert (the pricing still runs, its lines not inserted);
- bare: a plain table of five columns and the offsets, one Arrow insert each per batch
  (`bench/projections.py`'s bare loop before it wrote the ledger's own tables).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench.projections import decoded, positions, read_records, stat_cpu_s
from projections.catchup import BATCH_EVENTS
from projections.ledger.store import ChdbStore, LedgerStore
from projections.ledger.writer import LEDGER_TOPICS, LedgerWriter, drop_all
from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope
from streams.embedded import EmbeddedLog

Batch = list[tuple[Origin, Envelope]]


class Skipping:
    """A ledger store that leaves out the inserts into `skipped` (everything else passes)."""

    def __init__(self, store: LedgerStore, skipped: frozenset[str]) -> None:
        self.store, self.skipped, self.database = store, skipped, store.database

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self.store.command(sql, params)

    def insert(self, table: str, data: pa.Table) -> None:
        if table not in self.skipped:
            self.store.insert(table, data)

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.store.query(sql, params)

    def query_table(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table | None:
        return self.store.query_table(sql, params)

    def describe(self) -> str:
        return self.store.describe()

    def close(self) -> None:
        self.store.close()


Prepare = Callable[[ChdbStore], Callable[[Batch], None]]


def writer_variant(drop_views: tuple[str, ...], skip: tuple[str, ...]) -> Prepare:
    def prepare(store: ChdbStore) -> Callable[[Batch], None]:
        drop_all(store)
        writer = LedgerWriter(Skipping(store, frozenset(skip)))
        for view in drop_views:
            store.command(f"DROP VIEW {view}")

        def write(rows: Batch) -> None:
            writer.write(rows, positions(rows))

        return write

    return prepare


def create_bare_events(store: ChdbStore) -> None:
    """The bare loop's table: five columns, a plain MergeTree."""
    store.command("DROP TABLE IF EXISTS bare_events")
    store.command(
        "CREATE TABLE bare_events (event_id UUID, event_type LowCardinality(String),"
        " occurred_at DateTime64(6, 'UTC'), key String, payload String)"
        " ENGINE = MergeTree ORDER BY (event_type, occurred_at)"
    )
    store.command("DROP TABLE IF EXISTS bare_offsets")
    store.command(
        "CREATE TABLE bare_offsets (topic String, partition Int32, next_offset Int64)"
        " ENGINE = ReplacingMergeTree ORDER BY (topic, partition)"
    )


def insert_bare_events(store: ChdbStore, rows: list[tuple[Origin, Envelope]]) -> None:
    """The bare loop's batch: one Arrow insert of its events' five columns."""
    store.insert(
        "bare_events",
        pa.table(
            {
                "event_id": [e.event_id for _, e in rows],
                "event_type": [e.event_type for _, e in rows],
                "occurred_at": pa.array(
                    [e.occurred_at for _, e in rows], pa.timestamp("us", tz="UTC")
                ),
                "key": [e.key for _, e in rows],
                "payload": [json.dumps(e.payload.to_avro()) for _, e in rows],
            }
        ),
    )
    done = positions(rows)
    store.insert(
        "bare_offsets",
        pa.table(
            {
                "topic": pa.array([t for t, _ in done], pa.string()),
                "partition": pa.array([p for _, p in done], pa.int32()),
                "next_offset": pa.array(list(done.values()), pa.int64()),
            }
        ),
    )


def bare(store: ChdbStore) -> Callable[[Batch], None]:
    create_bare_events(store)
    return lambda rows: insert_bare_events(store, rows)


VIEWS = ("rankings_from_events", "rate_cards_from_events")
VARIANTS: dict[str, Prepare] = {
    "full": writer_variant((), ()),
    "no views": writer_variant(VIEWS, ()),
    "no rankings view": writer_variant(("rankings_from_events",), ()),
    "no rate cards view": writer_variant(("rate_cards_from_events",), ()),
    "no lines insert": writer_variant((), ("ledger_lines",)),
    "no offsets insert": writer_variant((), ("consumed_offsets",)),
    "events only, no views": writer_variant(VIEWS, ("ledger_lines", "consumed_offsets")),
    "bare": bare,
}


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds of each thread of this process: the main thread's, and the others' summed."""
    main, others = 0.0, 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            cpu = stat_cpu_s(Path(f"/proc/self/task/{tid}/stat"))
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        if tid == str(os.getpid()):
            main += cpu
        else:
            others += cpu
    return {"main": main, "others": others}


def run(path: Path, variant: str, batches: list[Batch]) -> tuple[float, float, float]:
    """The variant over every batch: (CPU s, main thread s, chdb's threads s)."""
    store = ChdbStore(path, "bench")
    store.command("DROP DATABASE IF EXISTS bench")
    store = ChdbStore(path, "bench")
    write = VARIANTS[variant](store)
    gc.collect()
    before, cpu = thread_cpu_s(), time.process_time()
    for rows in batches:
        write(rows)
    cpu = time.process_time() - cpu
    after = thread_cpu_s()
    store.command("DROP DATABASE bench")
    return cpu, after["main"] - before["main"], after["others"] - before["others"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a region simulated there")
    parser.add_argument("--days", type=float, default=1.0, help="its sim days")
    parser.add_argument("--workloads", type=int, default=220, help="its workloads")
    parser.add_argument("--batch", type=int, default=BATCH_EVENTS, help="events per batch")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every variant")
    args = parser.parse_args()
    marker = args.home / f"bench-{args.days:g}d-{args.workloads}w"
    if not marker.exists():
        parser.error(f"no region under {args.home}: run bench/projections.py --days "
                     f"{args.days:g} --rounds 0 --no-rebuild --home {args.home} first")  # fmt: skip
    log = EmbeddedLog(args.home / "log")
    codec = Codec()
    records = read_records(log, "bench", LEDGER_TOPICS)
    log.close()
    t0 = time.process_time()
    size = args.batch
    batches = [decoded(codec, records[i : i + size]) for i in range(0, len(records), size)]
    decode_s = time.process_time() - t0
    pa.array([0])
    print(f"{len(records):,} events in {len(batches)} batches of up to {args.batch:,};"
          f" decoding them took {decode_s:.2f} s of CPU (not counted below)")  # fmt: skip
    results: dict[str, list[tuple[float, float, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="spotcap-ledger-parts-") as tmp:
        path = Path(tmp) / "chdb"
        for n in range(args.rounds):
            for variant in VARIANTS:
                results[variant].append(run(path, variant, batches))
            print(f"round {n + 1} of {args.rounds} done", file=sys.stderr)
    full = statistics.median(r[0] for r in results["full"])
    print(f"\n{'variant':<24}{'CPU s (median)':>16}{'range':>13}{'main':>8}{'chdb':>8}"
          f"{'vs full':>9}")  # fmt: skip
    for variant, rows in results.items():
        cpu = [r[0] for r in rows]
        median = statistics.median(cpu)
        print(f"{variant:<24}{median:>16.2f}{f'{min(cpu):.2f}-{max(cpu):.2f}':>13}"
              f"{statistics.median(r[1] for r in rows):>8.2f}"
              f"{statistics.median(r[2] for r in rows):>8.2f}{median - full:>+9.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
