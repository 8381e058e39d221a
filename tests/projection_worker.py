"""A projection process for the crash tests: `python -m tests.projection_worker MODE ...`.

It applies the same simulated events as the tests (`sim_events`), resuming from the offsets
its projection stored (as a consumer seeks on assignment), and with ``--kill STEP:N`` it kills
itself with SIGKILL the N-th time the writer reaches STEP: a crash at a chosen point.

Modes: ``fleet`` (PostgreSQL writer), ``relay`` (outbox relay to an embedded log's audit topic),
``ledger`` (chdb ledger writer), ``ledger-dump`` (print the ledger tables as JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from projections.write_behind import WriteBehind  # noqa: E402
from tests.projection_support import Positioned, batches, next_positions, sim_events  # noqa: E402

FLEET = ("lifecycle", "market", "demand", "decisions", "usage")
LEDGER = (*FLEET, "usage")
AUDIT_TOPIC = "demo.audit"


def killer(spec: str | None) -> Callable[[str], None] | None:
    if not spec:
        return None
    step, _, nth = spec.partition(":")
    count = {"n": 0}

    def hook(name: str) -> None:
        if name == step:
            count["n"] += 1
            if count["n"] == int(nth or 1):
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def pending(topics: tuple[str, ...], stored: dict[tuple[str, int], int]) -> list[Positioned]:
    """The events not yet applied: each partition from its stored offset (seek on assign)."""
    return [
        (o, e)
        for o, e in sim_events()
        if o.topic.split(".")[1] in topics and o.offset >= stored.get((o.topic, o.partition), 0)
    ]


def run_fleet(args: argparse.Namespace) -> None:
    from projections.postgres.connection import connect
    from projections.postgres.writer import FleetWriter

    with connect(args.dsn, args.schema) as conn:
        writer = FleetWriter(conn, on_step=killer(args.kill))

        def write(batch: list[Positioned]) -> object:
            return writer.write(batch, next_positions(batch))

        # Written behind (as a rebuild writes): the kill lands on the writer thread while the
        # caller holds the next batch.
        with WriteBehind(write) as behind:
            for n, batch in enumerate(batches(pending(FLEET, writer.stored_offsets()), args.batch)):
                behind.submit(f"batch {n}", batch)


def run_relay(args: argparse.Namespace) -> None:
    from projections.postgres.connection import connect
    from projections.postgres.outbox import OutboxRelay
    from streams.embedded import EmbeddedLog
    from streams.log import TopicSpec

    log = EmbeddedLog(Path(args.log))
    log.apply_topics([TopicSpec(AUDIT_TOPIC, 3, -1)])
    producer = log.producer()
    with connect(args.dsn, args.schema) as conn:
        relay = OutboxRelay(
            conn, producer, AUDIT_TOPIC, batch_size=args.batch, on_step=killer(args.kill)
        )
        relay.drain()
    producer.close()
    log.close()


def run_ledger(args: argparse.Namespace) -> None:
    from projections.ledger.store import ChdbStore
    from projections.ledger.writer import LedgerWriter

    store = ChdbStore(Path(args.path), args.database)
    writer = LedgerWriter(store, on_step=killer(args.kill))

    def write(batch: list[Positioned]) -> object:
        return writer.write(batch, next_positions(batch))

    with WriteBehind(write) as behind:
        for n, batch in enumerate(batches(pending(LEDGER, writer.stored_offsets()), args.batch)):
            behind.submit(f"batch {n}", batch)


def dump_ledger(args: argparse.Namespace) -> None:
    from projections.ledger.store import ChdbStore

    store = ChdbStore(Path(args.path), args.database)
    out = {}
    for table, order in (
        ("events", "event_id"),
        ("rankings", "event_id"),
        ("rate_cards", "event_id"),
        ("ledger_lines", "workload_id, day, cause, event_id"),
        ("consumed_offsets", "topic, partition"),
    ):
        # A line's batch is the writer's bookkeeping: another cut of the same log numbers it
        # otherwise.
        rest = " EXCEPT (batch)" if table == "ledger_lines" else ""
        rows = store.query(f"SELECT *{rest} FROM {table} FINAL ORDER BY {order}")
        out[table] = [{k: str(v) for k, v in r.items()} for r in rows]
        out[f"{table}_raw_count"] = store.query(f"SELECT count() AS n FROM {table}")[0]["n"]
    out["net_saving"] = [
        {k: str(v) for k, v in r.items()}
        for r in store.query("SELECT * FROM net_saving ORDER BY workload_id, day")
    ]
    print(json.dumps(out, sort_keys=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("fleet", "relay", "ledger", "ledger-dump"))
    parser.add_argument("--dsn")
    parser.add_argument("--schema")
    parser.add_argument("--log")
    parser.add_argument("--path")
    parser.add_argument("--database")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--kill")
    args = parser.parse_args()
    {"fleet": run_fleet, "relay": run_relay, "ledger": run_ledger, "ledger-dump": dump_ledger}[
        args.mode
    ](args)


if __name__ == "__main__":
    main()
