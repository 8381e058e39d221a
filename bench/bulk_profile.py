"""Where a bulk path's time goes, stage by stage, and what its ceiling is (issue 26, point 5).

    .venv/bin/python bench/bulk_profile.py --home H --days D [--path fleet|ledger|replay]
        [--profile N]

Over a region simulated by `bench/projections.py --home H --days D` (reused), serially (one
thread, so that each stage's CPU is its own) and one batch of `BATCH_EVENTS` at a time:

- fleet: the log read and decoded (`Codec.decode`), the rows made (`map_events` and the rows
  the writer copies: `FleetWriter.write` less its server time), the server's CPU (the
  PostgreSQL backend's, from /proc), and the same batches through the bare loop
  (`bench/fleet_bare.py`: fastavro + psycopg, the same rows);
- ledger: decode, `LedgerWriter.prepare` (the copy check, pricing, the Arrow tables), and
  `store_batch` (chdb's inserts, its threads included);
- replay: the Python engine's two halves: the merged history read and decoded, and the fold
  (`replay.fold.Fold`) over the envelopes;

and for each the fastavro decode of the same records alone (the libraries' floor for the
read). Each stage prints CPU seconds and what that stage alone would allow in events per
CPU-second; `--profile N` adds cProfile's N costliest functions (by own time) of the run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fleet_bare
from bench.projections import positions, read_records, stat_cpu_s
from infra import servers
from projections.catchup import BATCH_EVENTS
from projections.ledger.store import ChdbStore
from projections.ledger.writer import LEDGER_TOPICS, LedgerWriter, drop_all
from projections.postgres.connection import connect
from projections.postgres.migrate import drop, migrate
from projections.postgres.writer import FLEET_TOPICS, FleetWriter
from replay.fold import Fold
from replay.rule_file import load_rule, shipped_rule_path
from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope
from streams.embedded import EmbeddedLog
from streams.log import Record
from streams.merged import MergedHistory


class Stages:
    """CPU seconds (this process's, and a PostgreSQL backend's when given) per named stage."""

    def __init__(self, backend_pid: int | None = None) -> None:
        self.cpu: dict[str, float] = {}
        self.backend = Path(f"/proc/{backend_pid}/stat") if backend_pid else None

    def run(self, name: str, work: Callable[[], Any], server: str | None = None) -> Any:
        before = time.process_time()
        served = stat_cpu_s(self.backend) if self.backend and server else 0.0
        out = work()
        self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - before
        if self.backend is not None and server is not None:
            self.cpu[server] = self.cpu.get(server, 0.0) + stat_cpu_s(self.backend) - served
        return out

    def report(self, events: int) -> None:
        for name, cpu_s in self.cpu.items():
            rate = f"{events / cpu_s:>12,.0f}" if cpu_s > 0 else f"{'-':>12}"
            print(f"  {name:<58}{cpu_s:>8.2f} s{rate} events/CPU-s")
        total = sum(self.cpu.values())
        print(f"  {'all of it':<58}{total:>8.2f} s{events / total:>12,.0f} events/CPU-s")


def batches(records: list[Record]) -> list[list[Record]]:
    return [records[i : i + BATCH_EVENTS] for i in range(0, len(records), BATCH_EVENTS)]


def decoded(codec: Codec, batch: list[Record]) -> list[tuple[Origin, Envelope]]:
    return [(r.origin, codec.decode(r.value or b"", r.origin)) for r in batch]


def fleet(dsn: str, records: list[Record]) -> None:
    codec = Codec()
    conn = connect(dsn, "bench")
    drop(conn, "bench")
    migrate(conn, "bench")
    writer = FleetWriter(conn)
    stages = Stages(conn.info.backend_pid)
    for batch in batches(records):
        rows = stages.run("decode (Codec.decode)", partial(decoded, codec, batch))
        stages.run(
            "rows and COPY (FleetWriter.write, Python)",
            partial(writer.write, rows, positions(rows)),
            server="PostgreSQL backend (COPY, merge, indexes, commit)",
        )
    drop(conn, "bench")
    print(f"fleet state, {len(records):,} events, serially:")
    stages.report(len(records))
    drop(conn, "bare")
    migrate(conn, "bare")
    conn.close()
    conn = connect(dsn, "bare")
    bare = fleet_bare.BareFleet(conn)
    stages = Stages(conn.info.backend_pid)
    for batch in batches(records):
        stages.run(
            "fastavro decode, rows and COPY (Python)",
            partial(bare.write, batch),
            server="PostgreSQL backend (COPY, merge, indexes, commit)",
        )
    drop(conn, "bare")
    conn.close()
    print(f"its bare loop (bench/fleet_bare.py), {len(records):,} events:")
    stages.report(len(records))


def ledger(path: Path, records: list[Record]) -> None:
    codec = Codec()
    store = ChdbStore(path, "bench")
    drop_all(store)
    writer = LedgerWriter(store)
    stages = Stages()
    for batch in batches(records):
        rows = stages.run("decode (Codec.decode)", partial(decoded, codec, batch))
        prepared = stages.run(
            "prepare (copy check, pricing, Arrow tables)",
            partial(writer.prepare, rows, positions(rows)),
        )
        stages.run("store_batch (chdb inserts, its threads)", partial(writer.store_batch, prepared))
    store.command("DROP DATABASE bench")
    print(f"ledger, {len(records):,} events, serially:")
    stages.report(len(records))


def replay(log: EmbeddedLog, records: list[Record]) -> None:
    rule = load_rule(shipped_rule_path("recorded"))
    stages = Stages()
    history = MergedHistory(log, Codec(), "bench", LEDGER_TOPICS, poll_records=2000,
                            buffer_per_partition=4000)  # fmt: skip
    envelopes = stages.run(
        "merged history: read, decode, merge (MergedHistory)",
        lambda: [d.envelope for d in history],
    )
    fold = Fold([rule])
    stages.run("fold (replay.fold.Fold.feed_all)", lambda: fold.feed_all(envelopes))
    stages.run("results", fold.results)
    print(f"replay, Python engine, {len(envelopes):,} events:")
    stages.report(len(envelopes))


def bare_decode(records: list[Record]) -> None:
    stages = Stages()
    stages.run("fastavro schemaless_reader alone, to dicts", lambda: fleet_bare.decode(records))
    print("the libraries' floor for the read:")
    stages.report(len(records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="bench/projections.py's --home")
    parser.add_argument("--path", choices=("fleet", "ledger", "replay"), action="append")
    parser.add_argument("--profile", type=int, default=0, help="cProfile's costliest N")
    args = parser.parse_args()
    paths = args.path or ["fleet", "ledger", "replay"]
    log = EmbeddedLog(args.home / "log")
    records = read_records(log, "bench", FLEET_TOPICS)
    with tempfile.TemporaryDirectory(prefix="spotcap-profile-") as tmp:
        pg = servers.start_postgres(Path(tmp) / "pg") if "fleet" in paths else None
        os.environ["SPOTCAP_CHDB_PATH"] = str(Path(tmp) / "chdb")
        profiler = cProfile.Profile() if args.profile else None
        try:
            bare_decode(records)
            if profiler is not None:
                profiler.enable()
            if "fleet" in paths:
                assert pg is not None
                fleet(pg.address, records)
            if "ledger" in paths:
                ledger(Path(tmp) / "chdb", records)
            if "replay" in paths:
                replay(log, records)
            if profiler is not None:
                profiler.disable()
        finally:
            if pg is not None:
                servers.stop(pg)
            log.close()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
