"""Replay throughput, events/s, by each engine against its bare reference (the same work with
the libraries alone); on a generated 400-day history; the archive's export and verify time.

    .venv/bin/python bench/replay.py [--days 1] [--rounds 4] [--engine python|clickhouse]
    .venv/bin/python bench/replay.py --month [--home DIR] [--long-days 400] [--python-long]

By default, rounds on a demo's log (`--days` of the default region, seed 1, in a temporary
home, or once under --home): each engine and its bare reference in the same round, the side
that goes first alternating, their amounts checked equal outside the clock; the median and
range of the CPU and wall ratios (`bench/replay_rounds.py`, `bench/replay_bare.py`,
`bench/replay_sql_bare.py`).

With --month, the 30-day history (`spotcap demo --days 30`, the default region: 138 pools,
220 workloads, seed 1) and its ledger, made once under --home (default
~/.cache/spotcap/bench-replay; tens of minutes on a loaded machine) and reused:

- python: `spotcap replay --engine python` (the merged history of the log, decoded, and the
  fold under the recorded rule); bare: `bench/replay_bare.py` (fastavro over the segments,
  `heapq.merge`, the ledger's pricing written plainly), the amounts checked equal;
- export and verify of 2026-11 into a fresh local archive (`spotcap archive export`, `verify`);
- clickhouse: the SQL of the recorded rule over the ledger's tables (bare: the recorded rule's
  query written plainly, `bench/replay_sql_bare.py`, the amounts checked equal) and over the
  month's archive files (events.parquet and the typed rate_cards.parquet and usage.parquet);
  beside the files, one chdb query over the same typed files, the usage intervals ASOF-joined
  to the card in force and summed per workload and day (a fraction of the engine's work: no
  demand, no lines but one, no waste nor reservations; kept as a floor);
- the long history: the month's events.parquet repeated with its times shifted (and its event
  ids renamed) until --long-days days are covered, each copy with its typed files derived as
  the export derives them, written once under --home; the SQL engine and the one query over
  it, and rounds of the SQL engine against its bare reference over the same files
  (`bench/replay_parquet_bare.py`). The Python engine on it only with --python-long (the
  month's events decoded and shifted in Python, about 20 minutes).

With --long-only, only the long history, from the month's files under --home
(`<home>/2026-11/`, kept by an earlier full run); the ledger is not brought up to date (a
scratch chdb runs the queries), and the SQL engine over the month's files alone first (the
30 days). Its rate_cards.parquet files written before the archive's
format 3 get their integrals once. With --python-days N as well, only the Python engine over
the first N days of the long history (a bounded part: all of it would take hours).

With --archive-month DIR (once or more, in order), rounds of the ClickHouse engine over those
month folders of an archive (the files `spotcap archive export` writes: events.parquet and the
derived files of the archive's format 4) against `bench/replay_parquet_bare.py`, the same
query over the same files by chdb alone, its amounts checked equal each round.

With --archive-only, only the export and verify of the month: `export_month` from the log's
merged history, as `archive export` runs it, but with the ledger's lines of the month as they
stand (the command first brings the ledger up to date: the projection's cost, measured in its
own section of docs/performance.md), then `archive verify`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.parquet as pq

from bench import replay_bare, replay_rounds, replay_sql_bare
from contracts.signing import FileSigner, generate_key_pem, load_public_key
from projections.catchup import catch_up, open_writer
from projections.ledger.store import ChdbStore, LedgerStore
from projections.ledger.writer import LEDGER_TOPICS
from projections.stores import Stores
from replay.archive import layout
from replay.archive.export import (
    export_from_log,
    export_month,
    month_cost_lines,
    with_card_integrals,
    write_typed_files,
)
from replay.archive.read import archive_history
from replay.archive.storage import LocalStorage
from replay.archive.verify import verify_archive
from replay.fold import DAY_US
from replay.rule_file import load_rule, shipped_rule_path
from replay.run import replay_clickhouse, replay_python
from replay.sql import LEDGER_RELATIONS, ParquetMonth, parquet_relations
from schemas.catalogue import envelope_schema
from schemas.codec import Codec
from schemas.events import Envelope
from sim.demo import run_demo
from sim.region import SimConfig
from streams.embedded import EmbeddedLog
from streams.log import EventLog
from streams.merged import MergedHistory

MONTH = "2026-11"
REGION = "dev"
SHIFTED = ("start_at", "end_at", "valid_from_at", "valid_until_at")  # payload times priced by


def say(text: str) -> None:
    print(text, flush=True)


def row(
    what: str, events: int, seconds: float, bare_s: float | None = None, against: str = "bare"
) -> None:
    """A line of figures; `against`: what the reference is (the bare side, or a floor)."""
    rate = events / seconds
    ratio = ""
    if bare_s is not None:
        bare = f"{against} {events / bare_s:>11,.0f} ev/s ({bare_s:6.1f} s)"
        ratio = f"   {bare}   ratio {bare_s / seconds:.2f}"
    say(f"{what:<44} {events:>12,} ev {seconds:7.1f} s {rate:>11,.0f} ev/s{ratio}")


# -- the 30-day history ---------------------------------------------------------------------


def prepare(home: Path, ledger: bool = True) -> Stores:
    """The 30-day region under `home` (simulated once), its ledger up to date unless not
    `ledger`; its stores."""
    stores = Stores(home)
    if not (home / "log").exists():
        say("simulating 30 days of the default region (once) ...")
        started = time.monotonic()
        log = EmbeddedLog(home / "log")
        try:
            run_demo(
                log, Codec(), home / "log" / "_runs", SimConfig(seed=1, days=30, region=REGION)
            )
        finally:
            log.close()
        say(f"  {time.monotonic() - started:.0f} s")
    if not ledger:
        return stores
    say("bringing the ledger up to date with the log (once) ...")
    started = time.monotonic()
    log = EmbeddedLog(home / "log")
    try:
        catch_up(log, Codec(), REGION, open_writer(stores, "ledger"))
    finally:
        log.close()
    say(f"  {time.monotonic() - started:.0f} s")
    return stores


def merged_history(log: EventLog) -> MergedHistory:
    """The ledger topics in event-time order, as `replay` and `archive export` read them."""
    return MergedHistory(
        log,
        Codec(),
        REGION,
        LEDGER_TOPICS,
        poll_records=2000,
        buffer_per_partition=4000,
    )


def python_engine(stores: Stores) -> tuple[int, float]:
    rule = load_rule(shipped_rule_path("recorded"))
    log = EmbeddedLog(stores.home / "log")
    try:
        history = merged_history(log)
        result = replay_python([rule], (d.envelope for d in history))[0]
    finally:
        log.close()
    python_amounts.clear()
    python_amounts.update(result.amounts)
    return result.events, result.seconds


python_amounts: dict[tuple[str, int, str], int] = {}  # the engine's last, for the check


def python_bare(stores: Stores) -> tuple[int, float]:
    """`bench/replay_bare.py` over the log (its amounts checked against the engine's after)."""
    started = time.monotonic()
    events, amounts = replay_bare.replay(stores.home / "log", REGION, envelope_schema())
    seconds = time.monotonic() - started
    assert amounts == python_amounts, "the bare fold's amounts differ from the engine's"
    return events, seconds


# -- the archive ----------------------------------------------------------------------------


def export_only(stores: Stores, where: Path) -> tuple[int, float, float, float]:
    """`export_month` of MONTH from the log (the merged history, as `archive export` reads it)
    with the ledger's lines of the month as they stand, without bringing the ledger up to date
    first (that is the projection's cost, docs/performance.md); then `archive verify`. Returns
    the rows, export wall and CPU seconds, verify seconds."""
    private_pem, public_pem = generate_key_pem()
    (where.parent / "k").write_bytes(private_pem)
    (where.parent / "k.pub").write_bytes(public_pem)
    log = EmbeddedLog(stores.home / "log")
    try:
        started, cpu = time.monotonic(), time.process_time()
        lines = month_cost_lines(stores.open_ledger(), MONTH)
        history = merged_history(log)
        with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
            done = export_month(
                LocalStorage(where),
                FileSigner.from_bytes(private_pem),
                region=REGION,
                month=MONTH,
                history=((d.origin, d.envelope) for d in history),
                cost_lines=lines,
                workdir=Path(tmp),
                now_us=int(time.time() * 1_000_000),
            )
        export_s, export_cpu = time.monotonic() - started, time.process_time() - cpu
    finally:
        log.close()
    say(
        f"  (export: {done.events:,} events, {done.cost_lines:,} cost lines from the ledger as it"
        f" stands; {export_s:.1f} s, {export_cpu:.1f} s of CPU time)"
    )
    started, cpu = time.monotonic(), time.process_time()
    verify(where, public_pem)
    verify_s = time.monotonic() - started
    cpu_s("verify", time.process_time() - cpu)
    return done.events, export_s, export_cpu, verify_s


def verify(where: Path, public_pem: bytes) -> None:
    """`archive verify` of the month: every file, signature, tree and the chain."""
    reports = verify_archive(LocalStorage(where), load_public_key(public_pem), REGION, None)
    problems = [str(f) for r in reports for f in r.findings if f.error]
    assert not problems and reports, problems


def export_and_verify(stores: Stores, where: Path) -> tuple[int, float, float]:
    """`archive export` (the ledger brought up to date first) and `archive verify`."""
    private_pem, public_pem = generate_key_pem()
    started = time.monotonic()
    log = EmbeddedLog(stores.home / "log")
    try:
        export_from_log(
            LocalStorage(where),
            FileSigner.from_bytes(private_pem),
            log=log,
            codec=Codec(),
            region=REGION,
            stores=stores,
            month=MONTH,
        )
    finally:
        log.close()
    export_s = time.monotonic() - started
    started = time.monotonic()
    verify(where, public_pem)
    verify_s = time.monotonic() - started
    rows = pq.ParquetFile(where / layout.key(REGION, MONTH, layout.EVENTS)).metadata.num_rows
    return rows, export_s, verify_s


# -- ClickHouse -----------------------------------------------------------------------------


def sql_engine(store: LedgerStore, files: list[ParquetMonth] | None) -> tuple[int, float]:
    rule = load_rule(shipped_rule_path("recorded"))
    relations = LEDGER_RELATIONS if files is None else parquet_relations(files)
    steps: list[tuple[str, float]] = []
    cpu = time.process_time()
    result = replay_clickhouse(
        store, relations, rule, on_step=lambda name: steps.append((name, time.process_time()))
    )
    end = time.process_time()
    sql_amounts.clear()
    sql_amounts.update(result.amounts)
    cpu_s("the engine", end - cpu)
    for (name, at), (_, until) in zip(steps, [*steps[1:], ("", end)], strict=True):
        say(f"    {name}: {until - at:.1f} s of CPU time")
    return result.events, result.seconds


sql_amounts: dict[tuple[str, int, str], int] = {}  # the engine's last, for the check


def cpu_s(what: str, seconds: float) -> None:
    """chdb runs in this process: its threads' CPU time is ours. On a machine shared with other
    work the wall time says more about the neighbours than about the query; this does not."""
    say(f"  ({what}: {seconds:.1f} s of CPU time)")


def sql_bare(store: LedgerStore, files: list[ParquetMonth]) -> tuple[int, float]:
    """One query over the same files: usage intervals priced at the card in force at their
    start, summed (the typed files of the archive's format 2, as the engine reads them). A
    fraction of the engine's work (no demand, one line, no waste nor reservations): a floor,
    not a bare reference."""

    def union(name: str, columns: str) -> str:
        return " UNION ALL ".join(
            f"SELECT {columns} FROM file('{getattr(f, name)}', Parquet)" for f in files
        )

    cards = union(
        "rate_cards",
        "pool_id AS pool, valid_from_at AS vf, guaranteed_price_per_vcpu_h_eur_micros AS g",
    )
    usage = union("usage", "workload_id AS w, pool_id AS pool, start_at AS s, used_vcpu_h AS used")
    sql = f"""
SELECT w, intDiv(s, {DAY_US}) AS day, sum(used * c.g) AS micros
FROM ({usage}) AS u ASOF LEFT JOIN ({cards}) AS c ON u.pool = c.pool AND u.s >= c.vf
GROUP BY w, day"""
    started, cpu = time.monotonic(), time.process_time()
    store.query(sql)
    seconds = time.monotonic() - started
    cpu_s("the bare query", time.process_time() - cpu)
    events = " UNION ALL ".join(f"SELECT event_id FROM file('{f.events}', Parquet)" for f in files)
    n = store.query(f"SELECT count() AS n FROM ({events})")[0]["n"]
    return int(n), seconds


def typed(events_file: Path) -> ParquetMonth:
    """An events.parquet with its typed files beside it (derived once, as the export does)."""
    folder = events_file.parent
    if not all((folder / name).exists() for name in layout.TYPED_FILES):
        write_typed_files(events_file, folder)
    elif not (folder / layout.PRICED).exists():
        write_typed_files(events_file, folder, typed=False)
    cards = folder / layout.RATE_CARDS
    if layout.IN_FORCE not in pq.read_schema(cards).names:  # format 2: add the integrals
        old = pq.read_table(cards).sort_by(layout.RATE_CARDS_ORDER)
        pq.write_table(with_card_integrals(old), cards, compression="zstd")
    return ParquetMonth(
        str(events_file),
        str(folder / layout.RATE_CARDS),
        str(folder / layout.USAGE),
        str(folder / layout.CHECKPOINTS),
        str(folder / layout.PRICED),
    )


# -- the long history -----------------------------------------------------------------------


def _span_days(month_file: str, store: LedgerStore) -> tuple[int, int]:
    got = store.query(
        "SELECT toUnixTimestamp64Micro(min(occurred_at)) AS a,"
        f" toUnixTimestamp64Micro(max(occurred_at)) AS b FROM file('{month_file}', Parquet)"
    )[0]
    first_day = int(got["a"]) // DAY_US
    return first_day, int(got["b"]) // DAY_US - first_day + 1


def generate_long(store: LedgerStore, month_file: str, home: Path, days: int) -> list[ParquetMonth]:
    """The month repeated, shifted by its span each time, cut at `days` days: one folder per
    repetition, event ids renamed (the first 8 hex digits are the repetition's number), with
    the typed files derived from each as the archive's export derives them."""
    first_day, span = _span_days(month_file, store)
    tiles = -(-days // span)
    folder = home / f"long-{days}d"
    files = [str(folder / f"tile-{k:03d}" / layout.EVENTS) for k in range(tiles)]
    if all(Path(f).exists() for f in files):
        return [typed(Path(f)) for f in files]
    folder.mkdir(parents=True, exist_ok=True)
    end_us = (first_day + days) * DAY_US
    say(f"generating {days} days: the {span}-day month repeated {tiles} times (once) ...")
    started = time.monotonic()
    for k, target in enumerate(files):
        shift = k * span * DAY_US
        payload = "payload"
        for key in SHIFTED:
            old = f"JSONExtractInt(payload, '{key}')"
            payload = (
                f"replaceOne({payload}, concat('\"{key}\":', toString({old})),"
                f" concat('\"{key}\":', toString({old} + {shift})))"
            )
        rename = "concat(leftPad(hex(toUInt32({k})), 8, '0'), substring({c}, 9))"
        Path(target).parent.mkdir(exist_ok=True)
        Path(target).unlink(missing_ok=True)
        store.command(
            f"INSERT INTO FUNCTION file('{target}', Parquet)"
            f" SELECT {rename.format(k=k, c='event_id')} AS event_id, event_type,"
            f" fromUnixTimestamp64Micro(toUnixTimestamp64Micro(occurred_at) + {shift}, 'UTC')"
            " AS occurred_at,"
            f" if(causation_id IS NULL, NULL, {rename.format(k=k, c='causation_id')})"
            f" AS causation_id, {payload} AS payload, topic, partition, offset"
            # The cut in a subquery: in the outer WHERE, occurred_at would be the shifted alias.
            f" FROM (SELECT * FROM file('{month_file}', Parquet)"
            f" WHERE toUnixTimestamp64Micro(occurred_at) + {shift} < {end_us})"
            " ORDER BY occurred_at, topic, partition, offset"
        )
    long_files = [typed(Path(f)) for f in files]
    say(f"  {time.monotonic() - started:.0f} s")
    return long_files


def shifted_history(month_file: Path, first_day: int, span: int, days: int) -> Iterator[Envelope]:
    """The long history for the Python engine: the month decoded and shifted in Python."""
    end_us = (first_day + days) * DAY_US
    for k in range(-(-days // span)):
        shift = k * span * DAY_US
        prefix = f"{k:08x}"
        for e in archive_history([(MONTH, month_file)]):
            if e.occurred_at + shift >= end_us:
                break
            p: Any = e.payload
            times = {f: getattr(p, f) + shift for f in SHIFTED if getattr(p, f, None) is not None}
            cause = e.causation_id
            yield dataclasses.replace(
                e,
                event_id=prefix + e.event_id[8:],
                occurred_at=e.occurred_at + shift,
                causation_id=None if cause is None else prefix + cause[8:],
                payload=dataclasses.replace(p, **times) if times else p,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=1.0, help="demo days of the rounds' log")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--engine", choices=("python", "clickhouse"), action="append", help="(default: both)"
    )
    parser.add_argument(
        "--month", action="store_true", help="the 30-day history, the archive, the long history"
    )
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--long-days", type=int, default=400)
    parser.add_argument("--python-long", action="store_true")
    parser.add_argument(
        "--long-only", action="store_true", help="only the long history (the month file cached)"
    )
    parser.add_argument(
        "--archive-only",
        action="store_true",
        help="only export and verify of the month, from the log, with the ledger's lines as they"
        " stand (the ledger not brought up to date)",
    )
    parser.add_argument(
        "--archive-month",
        type=Path,
        action="append",
        metavar="DIR",
        help="rounds over these month folders of an archive against the bare query on the files",
    )
    parser.add_argument(
        "--python-days",
        type=int,
        default=None,
        metavar="N",
        help="the Python engine on the first N days of the long history only (with --long-only)",
    )
    args = parser.parse_args()
    if not (args.month or args.long_only or args.archive_only):
        replay_rounds.run(
            args.home,
            args.days,
            args.rounds,
            args.engine or ["python", "clickhouse"],
            args.archive_month,
        )
        return
    args.home = args.home or Path.home() / ".cache" / "spotcap" / "bench-replay"
    # The long history needs no ledger: chdb runs the queries over the Parquet files.
    stores = prepare(args.home, ledger=not (args.long_only or args.archive_only))
    if args.archive_only:
        with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
            rows, export_s, _, verify_s = export_only(stores, Path(tmp) / "archive")
        row(f"archive export {MONTH} (ledger not caught up)", rows, export_s)
        row(f"archive verify {MONTH}", rows, verify_s)
        return
    # The long history needs no ledger: a scratch chdb, so that a run beside another bench
    # (which holds the ledger's path) does not wait on it.
    scratch = tempfile.TemporaryDirectory(prefix="bench-replay-chdb-")
    store = ChdbStore(Path(scratch.name)) if args.long_only else stores.open_ledger()

    month_file = args.home / MONTH / layout.EVENTS
    if args.long_only:
        long(args, store, month_file)
        return
    say("\n30 days of the default region (recorded rule)")
    events, seconds = python_engine(stores)
    bare = python_bare(stores)
    row("python engine (log, merged history, fold)", events, seconds, bare[1])

    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        where = Path(tmp) / "archive"
        rows, export_s, verify_s = export_and_verify(stores, where)
        row(f"archive export {MONTH}", rows, export_s)
        row(f"archive verify {MONTH}", rows, verify_s)
        month_file.parent.mkdir(exist_ok=True)
        for name in (layout.EVENTS, *layout.DERIVED_FILES):
            (month_file.parent / name).write_bytes(
                (where / layout.key(REGION, MONTH, name)).read_bytes()
            )

    events, seconds = sql_engine(store, None)
    path, database = stores.ledger_location()
    started = time.monotonic()
    bare_events, bare_amounts = replay_sql_bare.PlainReplay(path, database).run()
    bare_s = time.monotonic() - started
    assert bare_events == events and bare_amounts == sql_amounts, "the plain query differs"
    row("clickhouse engine (ledger tables)", events, seconds, bare_s)
    files = [typed(month_file)]
    bare = sql_bare(store, files)
    events, seconds = sql_engine(store, files)
    row(f"clickhouse engine ({MONTH} events.parquet)", events, seconds, bare[1], "one query")

    long(args, store, month_file)


def long(args: argparse.Namespace, store: LedgerStore, month_file: Path) -> None:
    long_files = generate_long(store, str(month_file), args.home, args.long_days)
    say(f"\n{args.long_days} days generated from {MONTH} (recorded rule)")
    if not args.python_days:
        events, seconds = sql_engine(store, long_files[:1])
        row(f"clickhouse engine ({MONTH} alone, its files)", events, seconds)
        bare = sql_bare(store, long_files)
        events, seconds = sql_engine(store, long_files)
        row(
            f"clickhouse engine ({len(long_files)} Parquet files)",
            events,
            seconds,
            bare[1],
            "one query",
        )
        if isinstance(store, ChdbStore):
            folders = [Path(f.events).parent for f in long_files]
            replay_rounds.archive(store, folders, args.rounds)
    if args.python_long or args.python_days:
        first_day, span = _span_days(str(month_file), store)
        rule = load_rule(shipped_rule_path("recorded"))
        days = args.python_days or args.long_days
        history = shifted_history(month_file, first_day, span, days)
        cpu = time.process_time()
        result = replay_python([rule], history)[0]
        cpu_s("the python engine", time.process_time() - cpu)
        row(f"python engine, first {days} days (shifted in Python)", result.events, result.seconds)


if __name__ == "__main__":
    main()
