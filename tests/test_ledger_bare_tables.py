"""The ledger's bare loop (`BareLedger` in `bench/projections.py`: fastavro, its own pricing and
chdb alone) writes the ledger's rows, table by table, on the embedded ledger: the check
`bench/projections.py` makes every round (`ledger_sums`) holds on a small simulated region, in
batches small enough that an instance's usage is priced over several; and the check sees a row
that differs."""

from __future__ import annotations

import uuid
from pathlib import Path

from bench.projections import BareLedger, ledger_sums, positions
from projections.ledger.store import ChdbStore
from projections.ledger.writer import LEDGER_TOPICS, LedgerWriter, apply_ddl
from schemas.codec import Codec
from streams.log import new_record
from tests.projection_support import sim_events

BATCH = 97


def test_the_bare_ledger_writes_the_ledgers_rows(chdb_path: Path) -> None:
    codec = Codec()
    history = [(o, e) for o, e in sim_events(0.25, 30) if o.topic.split(".")[-1] in LEDGER_TOPICS]
    records = [
        new_record(o.topic, o.partition, o.offset, e.key.encode(), codec.encode(e),
                   e.occurred_at // 1000, ())
        for o, e in history
    ]  # fmt: skip
    project = ChdbStore(chdb_path, f"lp_{uuid.uuid4().hex[:10]}")
    bare_store = ChdbStore(chdb_path, f"lb_{uuid.uuid4().hex[:10]}")
    try:
        writer = LedgerWriter(project)
        for i in range(0, len(history), BATCH):
            rows = history[i : i + BATCH]
            writer.store_batch(writer.prepare(rows, positions(rows)))
        apply_ddl(bare_store)
        bare = BareLedger(chdb_path, bare_store.database)
        for i in range(0, len(records), BATCH):
            bare.write(records[i : i + BATCH])
        bare.close()
        theirs, mine = ledger_sums(project), ledger_sums(bare_store)
        assert mine == theirs
        assert theirs["ledger_lines"][0] > 0 and theirs["events"][0] == len(history)
        # And the check sees one changed row.
        bare_store.command(
            "ALTER TABLE ledger_lines UPDATE amount_eur_micros = amount_eur_micros + 1"
            " WHERE event_id = (SELECT min(event_id) FROM ledger_lines) SETTINGS mutations_sync = 1"
        )
        assert ledger_sums(bare_store)["ledger_lines"] != theirs["ledger_lines"]
    finally:
        for store in (project, bare_store):
            store.command(f"DROP DATABASE IF EXISTS {store.database}")
            store.close()
