"""`spotcap db`: the fleet-state database (PostgreSQL): migrations, status, the embedded server."""

from __future__ import annotations

import click

from projections.postgres.connection import FleetDatabaseError, connect, redact
from projections.postgres.migrate import migrate, migrate_report, status, status_rows
from projections.stores import StoreError
from spotcap.cli.options import need_home, postgres_option, with_postgres
from spotcap.cli.output import console, emit_json, show, table
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.wiring import stores


@click.group()
def db() -> None:
    """The fleet-state database (PostgreSQL): migrations and the embedded server."""


@db.command("migrate")
@postgres_option
@click.option("--json", "as_json", is_flag=True, help="Print what was applied as JSON.")
@click.pass_obj
def db_migrate(settings: Settings, postgres_dsn: str | None, as_json: bool) -> None:
    """Apply the SQL migrations not yet applied (idempotent: a second run applies nothing)."""
    try:
        dsn = stores(with_postgres(settings, postgres_dsn)).fleet_dsn()
        with connect(dsn) as conn:
            applied = migrate(conn)
            states = status(conn)
    except (StoreError, FleetDatabaseError) as error:
        fail(str(error))
    if as_json:
        emit_json(migrate_report(redact(dsn), applied, states))
        return
    if applied:
        for m in applied:
            console.print(f"applied {m.label}")
    else:
        console.print(f"up to date: {len(states)} migrations applied")
    console.print(f"[dim]{redact(dsn)}[/]")


@db.command("status")
@postgres_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_obj
def db_status(settings: Settings, postgres_dsn: str | None, as_json: bool) -> None:
    """Which migrations are applied, and whether the embedded server runs."""
    where = stores(need_home(with_postgres(settings, postgres_dsn), fleet=True))
    try:
        with connect(where.fleet_dsn()) as conn:
            states = status(conn)
        embedded = None if where.postgres_dsn else where.embedded_postgres_status()
    except (StoreError, FleetDatabaseError) as error:
        fail(str(error))
    if as_json:
        emit_json({"embedded": embedded, "migrations": [s.as_json() for s in states]})
        return
    columns = ("version", "name", "applied")
    show(table("fleet-state migrations", columns, status_rows(states), right=("version",)))
    if embedded is not None:
        address, log = embedded.get("address", "?"), embedded.get("log_path")
        console.print(f"embedded PostgreSQL at {address} (log {log})")


@db.command("stop")
@click.pass_obj
def db_stop(settings: Settings) -> None:
    """Stop the home's embedded PostgreSQL (the next command that needs it starts it again)."""
    where = stores(settings)
    try:
        stopped = where.stop_embedded_postgres()
    except StoreError as error:
        fail(str(error))
    if stopped:
        console.print(f"stopped the embedded PostgreSQL under {where.postgres_dir}")
    else:
        console.print(f"no embedded PostgreSQL runs under {where.postgres_dir}")
