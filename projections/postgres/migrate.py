"""SQL migrations: numbered files applied in order, once each, recorded in a table.

`migrate` is idempotent: it applies the files not yet recorded, each in its own transaction
with its record, under an advisory lock so that two migrators never race. A recorded migration
whose file changed since is refused (a released migration is never edited: add a new one).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from projections.postgres.connection import (
    DEFAULT_SCHEMA,
    Connection,
    FleetDatabaseError,
    check_schema_name,
)

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x5C0CA9  # pg_advisory_xact_lock key of the migrator


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def label(self) -> str:
        """``0001_name``: how `spotcap db` names a migration."""
        return f"{self.version:04d}_{self.name}"


def migrations() -> list[Migration]:
    """The migration files shipped in ``projections/postgres/migrations``, by version."""
    found: list[Migration] = []
    folder = resources.files("projections.postgres") / "migrations"
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise FleetDatabaseError(f"two migration files share a version number: {versions}")
    return found


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    version: int
    name: str
    applied: bool

    def as_json(self) -> dict[str, Any]:
        return {"version": self.version, "name": self.name, "applied": self.applied}


def _ensure_table(conn: Connection, schema: str) -> None:
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
        " version int PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )


def _recorded(conn: Connection, schema: str) -> dict[int, tuple[str, str]]:
    rows = conn.execute(
        f"SELECT version, name, checksum FROM {schema}.schema_migrations"
    ).fetchall()
    return {int(v): (str(n), str(c)) for v, n, c in rows}


def migrate(conn: Connection, schema: str = DEFAULT_SCHEMA) -> list[Migration]:
    """Apply the migrations not yet applied to `schema`; return those applied now."""
    check_schema_name(schema)
    applied: list[Migration] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        _ensure_table(conn, schema)
    for migration in migrations():
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            recorded = _recorded(conn, schema)
            if migration.version in recorded:
                name, checksum = recorded[migration.version]
                if checksum != migration.checksum:
                    raise FleetDatabaseError(
                        f"migration {migration.version:04d}_{name} was applied to schema "
                        f"{schema!r} from a different file: restore the file as released and "
                        "add a new migration for the change"
                    )
                continue
            conn.execute(f"SET LOCAL search_path TO {schema}, public")
            conn.execute(migration.sql.encode())
            conn.execute(
                f"INSERT INTO {schema}.schema_migrations (version, name, checksum) "
                "VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
            applied.append(migration)
    return applied


def status(conn: Connection, schema: str = DEFAULT_SCHEMA) -> list[MigrationStatus]:
    """Every shipped migration and whether `schema` has it."""
    check_schema_name(schema)
    exists = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.schema_migrations",)
    ).fetchone()
    recorded = _recorded(conn, schema) if exists and exists[0] else {}
    return [MigrationStatus(m.version, m.name, m.version in recorded) for m in migrations()]


def drop(conn: Connection, schema: str = DEFAULT_SCHEMA) -> None:
    """Drop the whole schema (every table, view and the migrations record): for rebuilds."""
    check_schema_name(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def migrate_report(
    database: str, applied: list[Migration], states: list[MigrationStatus]
) -> dict[str, Any]:
    """`spotcap db migrate --json`: the database (its DSN redacted), what this run applied and
    every migration's status."""
    return {
        "database": database,
        "applied": [m.label for m in applied],
        "migrations": [s.as_json() for s in states],
    }


def status_rows(states: list[MigrationStatus]) -> list[tuple[str, str, str]]:
    """`spotcap db status`'s rows: version, name, applied (a pending one in yellow)."""
    return [(f"{s.version:04d}", s.name, "yes" if s.applied else "[yellow]no[/]") for s in states]
