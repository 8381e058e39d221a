"""`spotcap project` and `spotcap rebuild`: materialise the projections from the log."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from projections.ledger.store import LedgerError
from projections.postgres.connection import FleetDatabaseError
from spotcap.cli_db import postgres_option, with_postgres
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.projecting import RunReport, Which, Writer, catch_up_together, open_writer
from spotcap.stores import StoreError
from spotcap.wiring import describe_log, open_log
from streams.log import LogError

console = Console()
CHOICES: dict[str, tuple[Which, ...]] = {
    "fleet": ("fleet",),
    "postgres": ("fleet",),
    "ledger": ("ledger",),
    "clickhouse": ("ledger",),
    "all": ("fleet", "ledger"),
}
LABEL = {"fleet": "fleet state (PostgreSQL)", "ledger": "ledger (ClickHouse)"}


def run_projections(
    settings: Settings, which: Sequence[Which], *, fresh: bool, quiet: bool = False
) -> list[RunReport]:
    """Catch up (or, with `fresh`, rebuild) each projection, with a progress bar. Projections
    that start from the same offsets (always, in a rebuild) share one read of the history."""
    log = open_log(settings)
    try:
        writers = [open_writer(settings, name, fresh=fresh) for name in which]
        groups: list[list[Writer]] = []
        for writer in writers:
            same = next(
                (
                    g
                    for g in groups
                    if g[0].topics == writer.topics
                    and g[0].stored_offsets() == writer.stored_offsets()
                ),
                None,
            )
            if same is None:
                groups.append([writer])
            else:
                same.append(writer)
        reports: list[RunReport] = []
        for group in groups:
            label = " and ".join(LABEL[w.which] for w in group)
            progress = Progress(
                TextColumn(f"[bold]{'rebuilding' if fresh else 'projecting'}[/] {label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("records"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
                disable=quiet,
            )
            with progress:
                task = progress.add_task(label, total=None)

                def show(p: object, task: object = task, progress: Progress = progress) -> None:
                    read, total = getattr(p, "records_read", 0), getattr(p, "records_total", None)
                    progress.update(task, completed=read, total=total)  # type: ignore[arg-type]

                reports += catch_up_together(settings, log, group, on_progress=show)
    finally:
        log.close()
    return reports


def _run(settings: Settings, what: str, *, fresh: bool, as_json: bool) -> None:
    try:
        reports = run_projections(settings, CHOICES[what], fresh=fresh, quiet=as_json)
    except (StoreError, FleetDatabaseError, LedgerError, LogError) as error:
        fail(str(error))
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "projection": r.projection,
                        "events": r.events,
                        "seconds": round(r.seconds, 3),
                        "events_per_s": round(r.events_per_s),
                        "unpriced": r.unpriced,
                    }
                    for r in reports
                ],
                indent=2,
            )
        )
        return
    verb = "rebuilt" if fresh else "brought up to date"
    for r in reports:
        extra = f"; {r.unpriced:,} events could not be priced (dead-lettered)" if r.unpriced else ""
        console.print(
            f"{LABEL[r.projection]} {verb}: {r.events:,} events in {r.seconds:,.1f} s "
            f"({r.events_per_s:,.0f} events/s) from the {describe_log(settings)}{extra}"
        )


_which = click.argument("what", type=click.Choice(sorted(CHOICES)), default="all", required=False)


@click.command("project")
@_which
@postgres_option
@click.option("--json", "as_json", is_flag=True, help="Print what was applied as JSON.")
@click.pass_obj
def project(settings: Settings, what: str, postgres_dsn: str | None, as_json: bool) -> None:
    """Bring the projections up to date with the log (from the offsets they stored).

    WHAT is fleet (PostgreSQL), ledger (ClickHouse) or all (the default).
    """
    _run(with_postgres(settings, postgres_dsn), what, fresh=False, as_json=as_json)


@click.command("rebuild")
@_which
@postgres_option
@click.option("--json", "as_json", is_flag=True, help="Print what was rebuilt as JSON.")
@click.pass_obj
def rebuild(settings: Settings, what: str, postgres_dsn: str | None, as_json: bool) -> None:
    """Drop a projection and rebuild it from the log through the merged history.

    WHAT is postgres, clickhouse or all (the default). The rebuilt tables equal the
    incrementally built ones, row for row. The outbox's send marks are lost with the tables:
    its actions are sent again, recognisably (same action ids).
    """
    _run(with_postgres(settings, postgres_dsn), what, fresh=True, as_json=as_json)
