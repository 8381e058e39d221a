"""Projection throughput, events/s: the fleet state (PostgreSQL) and the ledger (ClickHouse,
chdb in-process), each against a bare loop over the same records in the same run, and the
rebuild time of both from a simulated region's log.

    .venv/bin/python bench/projections.py [--days D] [--workloads N] [--batch B] [--rounds R]
        [--serial] [--home DIR] [--no-rebuild] [--only fleet|ledger]

Batches are of B events (default: a catch-up's and a rebuild's, `BATCH_EVENTS`), for the
projection and its bare loop alike.

The region is simulated for D days (default 2; 30 for the rebuild figure of DESIGN.md §8) into
an embedded log under a temporary home. Every path decodes the same raw records:

- fleet: decode + `FleetWriter.write` (journal, state rows, append rows, offsets, one
  transaction per batch); bare: the same work with fastavro and psycopg alone
  (`bench/fleet_bare.py`): fastavro's decode to dicts, the same rows made plainly from them,
  COPYed into the projection's own tables (its migrations, in a schema of their own: the same
  columns, keys and indexes), the state rows merged per key in Python and into the stored
  ones by an ``ON CONFLICT`` statement of its own (the same merge rule, written from the tables'
  definitions), the offsets upserted, one transaction a batch.
  After each round both sides' tables are read back (outside the clocks) and compared: the
  report says whether the bare loop wrote the projection's rows, table by table.
- ledger: decode + `LedgerWriter.prepare` (the copy check, pricing, the Arrow tables) +
  `store_batch` (its batch row; events, and through their views rankings and rate cards;
  priced lines and facts; offsets); bare: the same work with fastavro and chdb alone: fastavro's
  decode to dicts, copies left out by id, the recorded rule's pricing written plainly over the
  dicts (`bench/ledger_bare.py`: no module of the ledger's, nor the codec), and chdb's Arrow
  inserts into the ledger's own tables (its DDL and views, applied before the clock starts):
  the batch row, the events (the views making the rankings and rate cards), the lines, what
  was priced and refused, the offsets. After each round both sides' tables are read back
  (outside the clocks: every row's text hashed and summed, per table) and compared.
- `--only fleet` or `--only ledger` measures that projection and its bare loop alone (the
  other's rounds skipped; with `--only ledger --no-rebuild` no PostgreSQL is started).
- rebuild: `spotcap rebuild all` (each projection in a process of its own reading the history
  for itself, `projections.side_by_side`; with `--one-reading`, as before it: the merged history
  read once in this process, each batch to both writers), wall time and CPU (this process's and
  its children's, not PostgreSQL's backend). `--rounds 0` runs only the simulation and the
  rebuild.

A projection's batches are written behind the decoding of the next (`WriteBehind`, as
`catch_up` and so a rebuild write them; the ledger's batches are prepared on the decoding
thread, as there, and only stored behind); `--serial` also runs each projection writing a batch
before decoding the next, in the same rounds. The bare loops are serial.

Rounds (default 4) alternate each projection with its bare loop (every other round the bare loop
first); the ratio is taken within a round and the table gives its median and range over rounds.
Each path is timed twice: wall clock, and CPU (this process's, with chdb's threads, plus, for
PostgreSQL, its backend's for the connection, from /proc): on a shared machine the wall clock
measures the neighbours as much as the code, and the CPU ratio is the one that repeats.

`--home DIR` keeps the simulated region there and reuses it on the next run (the same
`--days`, `--workloads` and region), so that a 30-day region is simulated once.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench import fleet_bare, ledger_bare
from infra import servers
from projections.catchup import BATCH_EVENTS, run_projections
from projections.ledger.store import ChdbStore
from projections.ledger.writer import LEDGER_TOPICS, LedgerWriter, apply_ddl, drop_all
from projections.postgres.connection import connect
from projections.postgres.migrate import drop, migrate
from projections.postgres.writer import FLEET_TOPICS, FleetWriter
from projections.stores import Stores
from projections.write_behind import WriteBehind
from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope
from sim.demo import run_demo
from sim.region import SimConfig
from streams.embedded import EmbeddedLog
from streams.log import EventLog, Record
from streams.topics import topic_name


def read_records(log: EmbeddedLog, region: str, topics: tuple[str, ...]) -> list[Record]:
    """Every record of the topics, in event-time order (as the merged history gives them)."""
    names = [topic_name(region, t) for t in topics]
    consumer = log.consumer(f"bench-{time.time_ns()}", names)
    records: list[Record] = []
    while batch := consumer.poll(50_000, timeout_s=0.5):
        records.extend(batch)
    consumer.close()
    records.sort(key=lambda r: (r.timestamp_ms, r.topic, r.partition, r.offset))
    return records


def open_home_log(home: Path) -> tuple[EventLog, Codec]:
    """The simulated region's log and a codec: what the rebuild's fleet-state process opens."""
    return EmbeddedLog(home / "log"), Codec()


def decoded(codec: Codec, batch: list[Record]) -> list[tuple[Origin, Envelope]]:
    return [(r.origin, codec.decode(r.value or b"", r.origin)) for r in batch]


def positions(rows: list[tuple[Origin, Envelope]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for o, _ in rows:
        out[(o.topic, o.partition)] = max(out.get((o.topic, o.partition), 0), o.offset + 1)
    return out


Timing = tuple[float, float]  # wall s, CPU s
# A path's name, its records, the projection (serial or not) and its bare loop.
Measured = tuple[str, list[Record], Callable[[bool], Timing], Callable[[], Timing]]
Rounds = dict[str, tuple[int, list[tuple[Timing, Timing]]]]  # path: events, (path, bare) timings


def write_all(
    write: Callable[[Any], object],
    codec: Codec,
    records: list[Record],
    size: int,
    serial: bool,
    *,
    prepare: Callable[[list[tuple[Origin, Envelope]]], Any] = lambda rows: rows,
) -> None:
    """Decode each batch, `prepare` it (the projection's Python work before its writes, where
    it has any: the ledger's pricing and tables) and write it: behind the decoding and preparing
    of the next (`WriteBehind`, as the rebuild does), or, with `serial`, before them."""
    if serial:
        for i in range(0, len(records), size):
            write(prepare(decoded(codec, records[i : i + size])))
        return
    with WriteBehind(write) as behind:
        for i in range(0, len(records), size):
            batch = prepare(decoded(codec, records[i : i + size]))
            behind.submit(f"the batch at record {i:,}", batch)


TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def stat_cpu_s(stat: Path) -> float:
    """User and system CPU seconds from a /proc `stat` file (a process's or a thread's)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime


class Clock:
    """Wall and CPU seconds from `start` to `stop`: this process's CPU (every thread, chdb's
    included) plus, when given, a PostgreSQL backend's (its /proc entry: the server is local)."""

    def __init__(self, backend_pid: int | None = None) -> None:
        self.backend_pid = backend_pid

    def _backend_cpu_s(self) -> float:
        if self.backend_pid is None:
            return 0.0
        return stat_cpu_s(Path(f"/proc/{self.backend_pid}/stat"))

    def start(self) -> None:
        self._wall = time.perf_counter()
        self._cpu = time.process_time() + self._backend_cpu_s()

    def stop(self) -> Timing:
        cpu_s = time.process_time() + self._backend_cpu_s() - self._cpu
        return time.perf_counter() - self._wall, cpu_s


# Per side ("project", "bare"): each round's tables as `fleet_bare.checksums` read them.
FLEET_SUMS: dict[str, list[dict[str, tuple[int, str]]]] = {"project": [], "bare": []}


def project_fleet(dsn: str, codec: Codec, records: list[Record], size: int, serial: bool) -> Timing:
    conn = connect(dsn, "bench")
    drop(conn, "bench")
    migrate(conn, "bench")
    writer = FleetWriter(conn)
    clock = Clock(conn.info.backend_pid)
    clock.start()
    write_all(lambda rows: writer.write(rows, positions(rows)), codec, records, size, serial)
    timing = clock.stop()
    FLEET_SUMS["project"].append(fleet_bare.checksums(conn))
    drop(conn, "bench")
    conn.close()
    return timing


def bare_fleet(dsn: str, records: list[Record], size: int) -> Timing:
    """fastavro + psycopg: the same tables (the projection's migrations, in a schema of their
    own) and the same rows (`bench/fleet_bare.py`), one transaction a batch with its offsets."""
    conn = connect(dsn, "bare")
    drop(conn, "bare")
    migrate(conn, "bare")
    bare = fleet_bare.BareFleet(conn)
    clock = Clock(conn.info.backend_pid)
    clock.start()
    for i in range(0, len(records), size):
        bare.write(records[i : i + size])
    timing = clock.stop()
    FLEET_SUMS["bare"].append(fleet_bare.checksums(conn))
    drop(conn, "bare")
    conn.close()
    return timing


def project_ledger(
    path: Path, codec: Codec, records: list[Record], size: int, serial: bool
) -> Timing:
    store = ChdbStore(path, "bench")
    drop_all(store)
    writer = LedgerWriter(store)
    clock = Clock()
    clock.start()
    prepare = lambda rows: writer.prepare(rows, positions(rows))  # noqa: E731
    write_all(writer.store_batch, codec, records, size, serial, prepare=prepare)
    timing = clock.stop()
    LEDGER_SUMS["project"].append(ledger_sums(store))
    store.command("DROP DATABASE bench")
    return timing


_UTC_US = pa.timestamp("us", tz="UTC")
_PIECES = pa.list_(pa.struct([("1", pa.int64()), ("2", pa.int64()), ("3", pa.int64())]))
_LEDGER_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=bytes.hex)


class BareLedger:
    """The ledger's work with fastavro and chdb alone: fastavro's dicts, copies left out by id,
    priced plainly (`bench/ledger_bare.py`), and chdb's Arrow inserts into the ledger's own
    tables (its DDL and views): the batch row, the events (whose views make the rankings and
    rate cards), the priced lines, what was priced and refused, the offsets. Its own chdb session
    on the ledger's folder (`path`, the tables made in `database` beforehand), not the ledger's
    store."""

    def __init__(self, path: Path, database: str) -> None:
        import chdb.session

        self.session: Any = chdb.session.Session(str(path.resolve()))  # type: ignore[no-untyped-call]
        self.session.query(f"USE {database}")  # type: ignore[no-untyped-call]
        self.pricer = ledger_bare.BarePricer()
        self.number = 0
        self.prepared_to: dict[tuple[str, int], int] = {}
        self.ids: set[str] = set()

    def write(self, batch: list[Record]) -> None:
        rows = fleet_bare.decode(batch)
        self.number += 1
        done: dict[tuple[str, int], int] = {}
        for r, _ in rows:
            tp = (r.topic, r.partition)
            done[tp] = max(done.get(tp, 0), r.offset + 1)
        firsts, ids = [], self.ids
        for r, e in rows:
            if e["event_id"] not in ids:
                ids.add(e["event_id"])
                firsts.append((r, e))
        pricer = self.pricer
        lines: list[ledger_bare.Line] = []
        refused: list[tuple[Any, ...]] = []
        pricer.batch_items = []
        feed = pricer.feed
        for r, e in firsts:
            lines += feed(e, (r.topic, r.partition, r.offset), refused)
        lines += pricer.advance()
        held = sorted([t, p, o] for (t, p), o in self.prepared_to.items())
        starts = hashlib.sha256(json.dumps(held).encode()).hexdigest()
        for tp, o in done.items():
            self.prepared_to[tp] = max(self.prepared_to.get(tp, 0), o)
        insert, number = self.insert, self.number
        insert("ledger_batches", pa.table({"projection_name": ["ledger"],
               "batch": pa.array([number], pa.uint64()), "starts": [starts]}))  # fmt: skip
        encode = _LEDGER_JSON.encode
        insert(
            "events",
            pa.table(
                {
                    "event_id": [e["event_id"] for _, e in firsts],
                    "event_type": [e["event_type"] for _, e in firsts],
                    "occurred_at": pa.array([e["occurred_at"] for _, e in firsts], _UTC_US),
                    "recorded_at": pa.array([e["recorded_at"] for _, e in firsts], _UTC_US),
                    "region": [e["region"] for _, e in firsts],
                    "key": [e["key"] for _, e in firsts],
                    "causation_id": pa.array([e["causation_id"] for _, e in firsts], pa.string()),
                    "correlation_id": pa.array(
                        [e["correlation_id"] for _, e in firsts], pa.string()
                    ),
                    "producer": [e["producer"] for _, e in firsts],
                    "topic": [r.topic for r, _ in firsts],
                    "partition": pa.array([r.partition for r, _ in firsts], pa.uint32()),
                    "offset": pa.array([r.offset for r, _ in firsts], pa.uint64()),
                    "payload": [encode(e["payload"][1]) for _, e in firsts],
                }
            ),
        )
        columns = list(zip(*lines, strict=True)) if lines else [()] * 14
        names = ("workload_id", "day", "cause", "event_id", "amount_eur_micros", "quantity",
                 "unit", "pool_id", "purchase_model", "instance_id", "event_type", "occurred_at",
                 "rule", "decided_by")  # fmt: skip
        types = {"day": pa.date32(), "amount_eur_micros": pa.int64(), "quantity": pa.float64(),
                 "occurred_at": _UTC_US}  # fmt: skip
        table = {
            n: pa.array(c, types.get(n, pa.string())) for n, c in zip(names, columns, strict=True)
        }
        table["batch"] = pa.array([number] * len(lines), pa.uint64())
        insert("ledger_lines", pa.table(table))
        items = list({i[0]["event_id"]: i for i in pricer.batch_items}.values())
        if items:
            insert(
                "priced_facts",
                pa.table(
                    {
                        "event_id": [i[0]["event_id"] for i in items],
                        "event_type": [i[0]["event_type"] for i in items],
                        "occurred_at": pa.array([i[0]["occurred_at"] for i in items], _UTC_US),
                        "pool_id": [i[1] for i in items],
                        "from_us": pa.array([i[2] for i in items], pa.int64()),
                        "to_us": pa.array([i[3] for i in items], pa.int64()),
                        "record": [i[0]["payload"][0] for i in items],
                        "payload": [encode(i[0]["payload"][1]) for i in items],
                        "pieces": pa.array([ledger_bare.pieces_json(i) for i in items], _PIECES),
                        "decided_by": [i[5] for i in items],
                        "topic": [i[6][0] for i in items],
                        "partition": pa.array([i[6][1] for i in items], pa.uint32()),
                        "offset": pa.array([i[6][2] for i in items], pa.uint64()),
                        "batch": pa.array([number] * len(items), pa.uint64()),
                    }
                ),
            )
        if refused:
            late = list(zip(*refused, strict=True))
            late_names = ("event_id", "event_type", "key", "occurred_at", "applies_from",
                          "lateness_s", "allowed_s", "reason")  # fmt: skip
            late_types = {"occurred_at": _UTC_US, "applies_from": _UTC_US,
                          "lateness_s": pa.float64(), "allowed_s": pa.int64()}  # fmt: skip
            typed = zip(late_names, late, strict=True)
            arrays = [pa.array(c, late_types.get(n, pa.string())) for n, c in typed]
            insert("late_facts", pa.table(dict(zip(late_names, arrays, strict=True))))
        keys = sorted(done)
        insert(
            "consumed_offsets",
            pa.table(
                {
                    "projection_name": ["ledger"] * len(keys),
                    "topic": pa.array([t for t, _ in keys], pa.string()),
                    "partition": pa.array([p for _, p in keys], pa.uint32()),
                    "next_offset": pa.array([done[k] for k in keys], pa.uint64()),
                }
            ),
        )

    def insert(self, table: str, data: pa.Table) -> None:
        """`data`'s rows into `table`, as an Arrow IPC stream."""
        if not data.num_rows:
            return
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, data.schema) as stream:
            stream.write_table(data)
        with self.session.send_insert(f"INSERT INTO {table}", "ArrowStream") as inserter:
            inserter.append(sink.getvalue().to_pybytes())
            inserter.finish()

    def close(self) -> None:
        self.session.close()


# The tables both ledger loops write (`consumed_topics` is written by neither).
LEDGER_COMPARED = ("events", "rankings", "rate_cards", "ledger_lines", "priced_facts",
                   "late_facts", "consumed_offsets", "ledger_batches")  # fmt: skip
# Per side ("project", "bare"): each run's tables, {table: (rows, a hash of all of them)}.
LEDGER_SUMS: dict[str, list[dict[str, tuple[int, str]]]] = {"project": [], "bare": []}


def ledger_sums(store: ChdbStore) -> dict[str, tuple[int, str]]:
    """Each ledger table's rows as the ledger reads them (FINAL: a table whose key repeats,
    the batches' and the offsets', keeps its last row whenever chdb merges it) and the sum of
    their hashes (of each row as text, NULLs and floats included)."""
    out = {}
    for table in LEDGER_COMPARED:
        rows = store.query(
            "SELECT count() AS n, toString(sum(cityHash64(toString(tuple(*))))) AS h"
            f" FROM {table} FINAL"
        )
        out[table] = (int(rows[0]["n"]), str(rows[0]["h"]))
    return out


def bare_ledger(path: Path, records: list[Record], size: int) -> Timing:
    """fastavro + chdb into the ledger's own tables (its DDL, views included, applied before
    the clock starts), priced plainly."""
    store = ChdbStore(path, "bench")
    drop_all(store)
    apply_ddl(store)
    bare = BareLedger(path, "bench")
    clock = Clock()
    clock.start()
    for i in range(0, len(records), size):
        bare.write(records[i : i + size])
    timing = clock.stop()
    bare.close()
    LEDGER_SUMS["bare"].append(ledger_sums(store))
    store.command("DROP DATABASE bench")
    return timing


def span(values: list[float], digits: int = 0) -> str:
    low, high = f"{min(values):,.{digits}f}", f"{max(values):,.{digits}f}"
    return low if low == high else f"{low}-{high}"


def ratio_span(values: list[float]) -> str:
    """The median ratio, then the range over rounds: `0.84 (0.80-0.88)`."""
    low, mid, high = min(values), statistics.median(values), max(values)
    spread = f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"
    return f"{mid:.2f}" if len(values) == 1 else f"{mid:.2f} ({spread})"


def simulate(home: Path, days: float, workloads: int) -> None:
    """The region into the embedded log under `home`, unless it holds it already."""
    marker = home / f"bench-{days:g}d-{workloads}w"
    if marker.exists():
        print(f"reusing the simulated {days:g} days under {home}")
        return
    t0 = time.perf_counter()
    config = SimConfig(days=days, workloads=workloads, region="bench")
    log = EmbeddedLog(home / "log")
    try:
        run_demo(log, Codec(), home / "log" / "_runs", config, fresh=True, compare=False)
    finally:
        log.close()
    marker.touch()
    print(f"simulated {days:g} days into the embedded log in {time.perf_counter() - t0:,.1f} s")


def measure(home: Path, dsn: str, chdb_path: Path, args: argparse.Namespace) -> Rounds:
    """Rounds of each projection and its bare loop over the region's records (with
    `args.serial`, the projection written serially too, against the same round's bare loop)."""
    log = EmbeddedLog(home / "log")
    codec = Codec()
    fleet_records = read_records(log, "bench", FLEET_TOPICS)
    ledger_records = read_records(log, "bench", LEDGER_TOPICS)
    log.close()
    # pyarrow imports pandas on its first array: paid here, before either clock starts.
    pa.array([0])
    fleet: Measured = (
        "fleet state (PostgreSQL)",
        fleet_records,
        lambda serial: project_fleet(dsn, codec, fleet_records, args.batch, serial),
        lambda: bare_fleet(dsn, fleet_records, args.batch),
    )
    ledger: Measured = (
        "ledger (ClickHouse, chdb)",
        ledger_records,
        lambda serial: project_ledger(chdb_path, codec, ledger_records, args.batch, serial),
        lambda: bare_ledger(chdb_path, ledger_records, args.batch),
    )
    # Rounds alternate each projection with its bare loop (the machine is shared: a ratio is
    # taken within a round, and the report gives the median and the range over rounds). Every
    # other round runs the bare loop first, so that a neighbour's load rising or falling through
    # a round does not always favour the same side.
    out: Rounds = {}
    serials = [False, True] if args.serial else [False]
    paths = [p for p in (fleet, ledger) if args.only in (None, p[0].split()[0])]
    for n in range(args.rounds):
        for name, records, project, bare in paths:
            bare_first = n % 2 == 1
            bare_timing = bare() if bare_first else (0.0, 0.0)
            timings = [project(serial) for serial in serials]
            bare_timing = bare_timing if bare_first else bare()
            for serial, timing in zip(serials, timings, strict=True):
                label = f"{name.split()[0]}, serial" if serial else name
                out.setdefault(label, (len(records), []))[1].append((timing, bare_timing))
    return out


def report(times: Rounds) -> None:
    print(
        f"\n{'path':<27}{'events':>9}{'events/s':>14}{'bare events/s':>15}{'ratio':>18}"
        f"{'CPU s':>11}{'bare CPU s':>12}{'CPU ratio':>18}"
    )
    for label, (n, rounds) in times.items():
        print(
            f"{label:<27}{n:>9,}{span([n / p[0] for p, _ in rounds]):>14}"
            f"{span([n / b[0] for _, b in rounds]):>15}"
            f"{ratio_span([b[0] / p[0] for p, b in rounds]):>18}"
            f"{span([p[1] for p, _ in rounds], 1):>11}{span([b[1] for _, b in rounds], 1):>12}"
            f"{ratio_span([b[1] / p[1] for p, b in rounds]):>18}"
        )


def same_rows(name: str, sums: dict[str, list[dict[str, tuple[int, str]]]]) -> None:
    """Whether every run of a bare loop and of its projection (each round's, serial or written
    behind) wrote the same rows as the first bare run, table by table."""
    project, bare = sums["project"], sums["bare"]
    if not bare:
        return
    first = bare[0]
    differ = sorted(
        {f"{t} ({run[t][0]:,} rows, bare {first[t][0]:,})"
         for run in (*project, *bare) for t in first if run[t] != first[t]}
    )  # fmt: skip
    rows = sum(n for n, _ in bare[0].values())
    tables = ", ".join(f"{t} {n:,}" for t, (n, _) in first.items())
    print(
        f"\n{name}, bare loop against the projection: {rows:,} rows in {len(bare[0])} tables, "
        + ("the same in every round" if not differ else f"differing in {', '.join(differ)}")
        + f" ({tables})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=2.0, help="sim days of the region")
    parser.add_argument("--workloads", type=int, default=220, help="workloads of the region")
    parser.add_argument(
        "--batch",
        type=int,
        default=BATCH_EVENTS,
        help=f"events per batch (default: a catch-up's, {BATCH_EVENTS:,})",
    )
    parser.add_argument(
        "--rounds", type=int, default=4, help="rounds of projection + bare loop (0: none)"
    )
    parser.add_argument("--home", type=Path, help="keep (and reuse) the simulated region here")
    parser.add_argument(
        "--serial", action="store_true", help="also write each batch before decoding the next"
    )
    parser.add_argument("--no-rebuild", action="store_true", help="skip `rebuild all`")
    parser.add_argument(
        "--one-reading",
        action="store_true",
        help="rebuild both from one reading in one process (as before the side-by-side rebuild)",
    )
    parser.add_argument(
        "--only", choices=("fleet", "ledger"), help="this projection (and its bare loop) only"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spotcap-bench-") as tmp:
        root = Path(tmp)
        home = args.home or root / "home"
        os.environ["SPOTCAP_CHDB_PATH"] = str(root / "chdb")
        need_pg = args.only != "ledger" or not args.no_rebuild
        pg = servers.start_postgres(root / "pg") if need_pg else None
        try:
            dsn = pg.address if pg is not None else ""
            simulate(home, args.days, args.workloads)
            if args.rounds:
                times = measure(home, dsn, root / "chdb", args)
            if not args.no_rebuild:
                log = EmbeddedLog(home / "log")
                clock = Clock()
                clock.start()
                children_s, load_at_start = _children_cpu_s(), os.getloadavg()[0]
                reports = run_projections(
                    log,
                    Codec(),
                    "bench",
                    Stores(home, dsn or None),
                    ("fleet", "ledger"),
                    fresh=True,
                    opener=None if args.one_reading else functools.partial(open_home_log, home),
                )
                rebuild_s, rebuild_cpu_s = clock.stop()
                children_s = _children_cpu_s() - children_s
                log.close()
        finally:
            if pg is not None:
                servers.stop(pg)
    if args.rounds:
        report(times)
        same_rows("fleet", FLEET_SUMS)
        same_rows("ledger", LEDGER_SUMS)
    if not args.no_rebuild:
        events = sum(r.events for r in reports)
        how = "the history read once" if args.one_reading else "each in a process of its own"
        print(
            f"\nrebuild all ({args.days:g} days, {events:,} events applied over both "
            f"projections, {how}): {rebuild_s:,.1f} s, {rebuild_cpu_s:,.1f} s of this "
            f"process's CPU and {children_s:,.1f} s of its children's; load average "
            f"{load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        )


def _children_cpu_s() -> float:
    """CPU seconds of this process's ended (waited for) children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
