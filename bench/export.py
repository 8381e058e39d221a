"""Archive export throughput, events/s: the project's `export_month` against a bare reference
doing the same work with the libraries alone, in the same run on the same log.

    .venv/bin/python bench/export.py [--days 7] [--rounds 4] [--home DIR] [--profile]

The log is a real `spotcap demo` run (`--days` of the default region, seed 1, from 2026-11-02)
with its ledger brought up to date, made once under --home (default
~/.cache/spotcap/bench-export/DAYSd) and reused while the envelope's schema is the same (made
again when it changed). The month exported is 2026-11 (every event of the log, for up to 28
days).

* project: what `spotcap archive export` runs after its ledger catch-up
  (`replay.archive.export.export_from_log` without `catch_up`): the month's history read by
  `--workers` processes (`replay.archive.columns.MonthReading`, default one per core) while
  this one queries the month's cost lines from the ledger and its audit lines, the rows merged
  in history order and the month written to a fresh local archive directory
  (`LocalStorage`): events.parquet, the typed and priced files, cost_lines.parquet, the Merkle
  tree (hashed by the workers while the files are written), the chain, the signed manifest
  and head;
* bare: the same files with fastavro, pyarrow and hashlib alone (`bench/export_bare.py`), with
  the same parallelism: the same container files read by fastavro's reader in `--workers`
  processes (each decoding its partitions, writing the payload JSON, hashing the leaves, to an
  Arrow file) while the parent queries the cost lines through chdb, the rows put in history
  order by one sort, the same Parquet files (columns, compression, row groups), the same tree,
  a manifest and head signed. No module of ours, not even the codec. The first round checks
  that both sides wrote the same data (`same_files`).

CPU is this process's and its children's (the workers, counted when they end).

Each round runs both sides, the side that goes first alternating (project first in odd
rounds); each round's ratio is its own pair's, reported as the median and range. `--profile`
runs the project's side once more under cProfile, in one process (`merged_records`, no
workers), before the rounds, and prints its top entries by own time (`--rounds 0`: the
profile alone).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MONTH = "2026-11"
REGION = "dev"


def say(text: str) -> None:
    print(text, flush=True)


def prepare(home: Path, days: float) -> None:
    """The log of `days` demo days and its ledger under `home`, made once."""
    from projections.catchup import catch_up, open_writer
    from projections.stores import Stores
    from schemas.codec import Codec
    from sim.demo import run_demo
    from sim.region import SimConfig
    from streams.embedded import EmbeddedLog

    done = home / "prepared"
    # The log is made again when the envelope's schema changed since (an older log's records
    # would be skipped by the project's export as of a schema this build does not know).
    made_for = f"{days:g} days, schema {Codec().fingerprint:016x}\n"
    if done.exists() and done.read_text() == made_for:
        return
    if home.exists():
        shutil.rmtree(home)  # an earlier preparation that did not finish, or an older schema
    home.mkdir(parents=True)
    say(f"simulating {days:g} days of the default region (once, under {home}) ...")
    started = time.monotonic()
    log = EmbeddedLog(home / "log")
    try:
        config = SimConfig(seed=1, days=days, region=REGION)
        run_demo(log, Codec(), home / "log" / "_runs", config, compare=False)
        say(f"  {time.monotonic() - started:.0f} s; bringing the ledger up to date (once) ...")
        started = time.monotonic()
        catch_up(log, Codec(), REGION, open_writer(Stores(home), "ledger"))
    finally:
        log.close()
    say(f"  {time.monotonic() - started:.0f} s")
    done.write_text(made_for)


def open_embedded(root: Path) -> tuple[Any, Any]:
    """The log and codec in an export's worker process (`replay.archive.columns.Opener`)."""
    from schemas.codec import Codec
    from streams.embedded import EmbeddedLog

    return EmbeddedLog(root), Codec()


def export_project(home: Path, where: Path, key_pem: bytes, workers: int) -> tuple[int, float]:
    """`spotcap archive export --month MONTH` after its ledger catch-up, into `where`: the
    history read by `workers` processes (`replay.archive.columns`) while this one queries the
    cost lines (0: read here, `merged_records`)."""
    from contracts.signing import FileSigner
    from projections.stores import Stores
    from replay.archive.audit import audit_lines, read_audit
    from replay.archive.columns import MonthReading
    from replay.archive.export import export_month, month_cost_lines
    from replay.archive.history import merged_records
    from replay.archive.storage import LocalStorage
    from schemas.codec import Codec
    from streams.embedded import EmbeddedLog

    started = time.perf_counter()
    log = EmbeddedLog(home / "log")
    try:
        with ExitStack() as stack:
            reading = None
            if workers:
                opener = partial(open_embedded, home / "log")
                reading = stack.enter_context(
                    MonthReading(opener, log, REGION, MONTH, workers=workers)
                )
            store = Stores(home).open_ledger()
            try:
                lines = month_cost_lines(store, MONTH)
            finally:
                store.close()
            audit = audit_lines(read_audit(log, REGION), MONTH)
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-export-"))
            done = export_month(
                LocalStorage(where),
                FileSigner.from_bytes(key_pem),
                region=REGION,
                month=MONTH,
                records=merged_records(log, Codec(), REGION) if reading is None else (),
                reading=reading,
                cost_lines=lines,
                workdir=Path(tmp),
                now_us=int(time.time() * 1_000_000),
                audit=audit,
            )
    finally:
        log.close()
    return done.events, time.perf_counter() - started


COST_SQL = (
    "SELECT toString(workload_id) AS workload_id, day, toString(cause) AS cause,"
    " toString(event_id) AS event_id, amount_eur_micros, quantity, toString(unit) AS unit,"
    " toString(pool_id) AS pool_id, toString(purchase_model) AS purchase_model, instance_id,"
    " toString(event_type) AS event_type, occurred_at, toString(rule) AS rule, decided_by"
    " FROM spotcap.ledger_lines FINAL WHERE occurred_at >= fromUnixTimestamp64Micro({s}, 'UTC')"
    " AND occurred_at < fromUnixTimestamp64Micro({e}, 'UTC')"
    " ORDER BY occurred_at, event_id, day, cause"
)


def export_bare(home: Path, where: Path, key_pem: bytes, workers: int) -> tuple[int, float]:
    """The same month with the libraries alone (`bench/export_bare.py`), read by `workers`
    processes (at least one: a script would use them)."""
    from bench import export_bare
    from projections.ledger.writer import LEDGER_TOPICS, LINES_SCHEMA
    from replay.archive import layout
    from schemas.codec import Codec, strip_logical_types
    from streams.topics import topic_name

    schemas = {**layout.DERIVED_SCHEMAS, layout.EVENTS: layout.EVENTS_SCHEMA,
               layout.COST_LINES: LINES_SCHEMA}  # fmt: skip
    writer = dict(Codec().schema)
    shapes = export_bare.Shapes(schemas, strip_logical_types(writer), layout.PRICED_TYPES, writer)
    topics = [topic_name(REGION, t) for t in LEDGER_TOPICS]
    bounds = layout.month_bounds_us(MONTH)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-export-bare-") as tmp:
        events = export_bare.export(
            home / "log", topics=topics, ledger=home / "ledger", cost_sql=COST_SQL,
            month=bounds, shapes=shapes, key_pem=key_pem, workdir=Path(tmp),
            where=where / REGION / MONTH, workers=max(1, workers),
        )  # fmt: skip
    return events, time.perf_counter() - started


SAME_FILES = ("events.parquet", "usage.parquet", "checkpoints.parquet", "rate_cards.parquet",
              "priced_events.parquet", "cost_lines.parquet", "envelope.avsc")  # fmt: skip


def same_files(project: Path, bare: Path) -> None:
    """The two sides wrote the same data: events.parquet and envelope.avsc byte for byte, the
    other files the same tables (priced_events.parquet may differ in a byte of its encoding:
    the project writes it from the file's row groups, the bare side from one array)."""
    import pyarrow.parquet as pq

    for name in SAME_FILES:
        a, b = project / name, bare / REGION / MONTH / name
        if name in {"events.parquet", "envelope.avsc"}:
            assert a.read_bytes() == b.read_bytes(), f"{name}: the two sides' bytes differ"
        else:
            assert pq.read_table(a).equals(pq.read_table(b)), f"{name}: the two sides differ"
    ours = json.loads((project / "manifest.json").read_bytes())
    theirs = json.loads((bare / REGION / MONTH / "manifest.json").read_bytes())
    assert ours["merkle"] == {**theirs["merkle"], "leaf": ours["merkle"]["leaf"]}, "the trees"
    assert ours["chain"]["frontier"] == theirs["frontier"], "the two sides' frontiers differ"
    say("  the two sides wrote the same data files and the same tree")


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (the workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def spread(values: list[float], fmt: str) -> str:
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return f"{fmt.format(statistics.median(values))} ({lo}-{hi})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=7.0, help="demo days in the log")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--home", type=Path, default=None, help="where the log is kept")
    parser.add_argument("--profile", action="store_true", help="profile the project's side")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes reading the log, each side (0: the project reads in "
                             "its own process, the bare side in one worker)")  # fmt: skip
    args = parser.parse_args()
    home = args.home or Path.home() / ".cache" / "spotcap" / "bench-export" / f"{args.days:g}d"
    prepare(home, args.days)
    if args.prepare_only:
        return
    from contracts.signing import generate_key_pem

    key_pem, _ = generate_key_pem()
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        if args.profile:
            profiler = cProfile.Profile()
            events, seconds = profiler.runcall(
                export_project, home, Path(tmp) / "profiled", key_pem, 0
            )
            say(f"profiled: {events:,} events in {seconds:.1f} s")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        sides: dict[str, Callable[[Path, Path, bytes, int], tuple[int, float]]] = {
            "project": export_project,
            "bare": export_bare,
        }
        rates: dict[str, list[float]] = {"project": [], "bare": []}
        cpu_rates: dict[str, list[float]] = {"project": [], "bare": []}
        counts = set()
        for r in range(args.rounds):
            order = ("project", "bare") if r % 2 == 0 else ("bare", "project")
            for side in order:
                where = Path(tmp) / f"{side}-{r}"
                cpu = _cpu_s()
                events, seconds = sides[side](home, where, key_pem, args.workers)
                cpu_rates[side].append(events / (_cpu_s() - cpu))
                rates[side].append(events / seconds)
                counts.add(events)
            if r == 0:
                same_files(Path(tmp) / "project-0" / REGION / MONTH, Path(tmp) / "bare-0")
            for side in order:
                shutil.rmtree(Path(tmp) / f"{side}-{r}")
            ratio = rates["project"][-1] / rates["bare"][-1]
            say(
                f"  round {r + 1}/{args.rounds} ({order[0]} first): project "
                f"{rates['project'][-1]:,.0f} events/s, bare {rates['bare'][-1]:,.0f}, "
                f"ratio {ratio:.2f}"
            )
    if not args.rounds:
        return
    assert len(counts) == 1, f"the two sides exported different counts: {counts}"
    ratios = [a / b for a, b in zip(rates["project"], rates["bare"], strict=True)]
    cpu_ratios = [a / b for a, b in zip(cpu_rates["project"], cpu_rates["bare"], strict=True)]
    say(f"\n{counts.pop():,} events of {MONTH} ({args.days:g} demo days), {args.rounds} rounds")
    say(f"{'':<10} {'events/s, median (range)':>28} {'per CPU-second':>28}")
    for side in ("project", "bare"):
        say(
            f"{side:<10} {spread(rates[side], '{:,.0f}'):>28} "
            f"{spread(cpu_rates[side], '{:,.0f}'):>28}"
        )
    say(f"{'ratio':<10} {spread(ratios, '{:.2f}'):>28} {spread(cpu_ratios, '{:.2f}'):>28}")


if __name__ == "__main__":
    main()
