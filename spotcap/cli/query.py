"""`spotcap query`, `spotcap why`, `spotcap report savings` and `planning`: the read side for people
(aligned tables, units, thousands separators) and for machines (`--json`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import closing
from typing import Any

import click
from rich.markup import escape

from projections.ledger.store import LedgerError
from projections.postgres.connection import FleetDatabaseError
from projections.postgres.lifecycle import STATES
from projections.read import fleet as fq
from projections.read.columns import (
    EXCLUSIONS,
    INSTANCES,
    LAG,
    POOLS,
    RANKINGS,
    WORKLOADS,
    Column,
    as_time,
)
from projections.read.lag import read_lag
from projections.read.planning import PLANNING_COLUMNS, planning, planning_rows
from projections.read.rows import json_row
from projections.read.savings import SAVINGS_COLUMNS, late_sentences, savings, savings_rows
from projections.read.times import TimeInputError, day_options, since_option
from projections.read.why import NotFoundError, why
from projections.stores import StoreError
from spotcap.cli.options import need_home, postgres_option, with_postgres
from spotcap.cli.output import console, emit_json, say, show, table
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.home import hold_home
from spotcap.wiring import open_log, stores


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[Column], title: str, as_json: bool,
         limit: int | None = None) -> None:  # fmt: skip
    """The rows as a table (or JSON); with `limit`, `rows` holds one more row than is shown
    when the limit cut some, and a line on stderr says so and how to see them."""
    cut = limit is not None and len(rows) > limit
    rows = rows[:limit] if cut else rows
    if cut:
        say(f"[yellow]the first {limit:,} rows only[/]: more match; --limit N shows more, or "
            "narrow the query (--pool, --workload, --since)", err=True)  # fmt: skip
    if as_json:
        emit_json([json_row(r) for r in rows])
        return
    shown = "the first " if cut else ""
    labels, right = [c[0] for c in columns], [c[0] for c in columns if c[3]]
    cells = ([fmt(row.get(key)) for _, key, fmt, _ in columns] for row in rows)
    show(table(f"{title} ({shown}{len(rows):,} rows)", labels, cells, right=right))


def _fleet(settings: Settings, postgres_dsn: str | None) -> Any:
    settings = need_home(with_postgres(settings, postgres_dsn), fleet=True)
    hold_home(settings)
    try:
        return stores(settings).open_fleet()
    except (StoreError, FleetDatabaseError) as error:
        fail(str(error))


common = [
    postgres_option,
    click.option(
        "--limit",
        type=click.IntRange(min=1),
        default=fq.DEFAULT_LIMIT,
        show_default=True,
        help="At most this many rows.",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print rows as JSON."),
]


def with_common(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(common):
        f = option(f)
    return f


@click.group()
def query() -> None:
    """SRE queries over the fleet state: pools, rankings, exclusions, instances, workloads, lag."""


def _query(settings: Settings, read: Callable[..., Any], columns: Sequence[Column], title: str,
           options: dict[str, Any]) -> None:  # fmt: skip
    """`read` over the fleet state with the command's filters, printed with `columns`."""
    dsn, as_json, limit = options.pop("postgres_dsn"), options.pop("as_json"), options.pop("limit")
    if "since" in options:
        try:
            options["since"] = since_option(options["since"])
        except TimeInputError as error:
            fail(str(error), error.fix, usage=True)
    rows = read(_fleet(settings, dsn), limit=limit + 1, **options)  # one more: was it cut?
    emit(rows, columns, title, as_json, limit)


_POOL = click.option("--pool", default=None, help="Only this pool.")
_WORKLOAD = click.option("--workload", default=None, help="Only this workload.")


@query.command("pools")
@_POOL
@click.option("--excluded/--admitted", default=None, help="Only excluded (or admitted) pools.")
@with_common
@click.pass_obj
def query_pools(settings: Settings, /, **options: Any) -> None:
    """Pools by rank: rate, forward capacity, exclusion."""
    _query(settings, fq.pools, POOLS, "pools", options)


@query.command("rankings")
@click.option("--pool", default=None, help="This pool's rankings (else the latest ranking).")
@click.option("--since", default=None, help="Rankings since this time (UTC), e.g. 2026-11-02.")
@with_common
@click.pass_obj
def query_rankings(settings: Settings, /, **options: Any) -> None:
    """The latest ranking of the region's pools (or a pool's history), with its inputs."""
    _query(settings, fq.rankings, RANKINGS, "rankings", options)


@query.command("exclusions")
@_POOL
@click.option("--active", is_flag=True, help="Only exclusions in force.")
@click.option("--since", default=None, help="Exclusions since this time (UTC).")
@with_common
@click.pass_obj
def query_exclusions(settings: Settings, /, **options: Any) -> None:
    """Exclusions with their evidence (event ids) and readmission."""
    _query(settings, fq.exclusions, EXCLUSIONS, "exclusions", options)


@query.command("instances")
@_WORKLOAD
@_POOL
@click.option(
    "--state",
    type=click.Choice(STATES),
    default=None,
    help="Only instances in this state of their lifecycle.",
)
@click.option("--since", default=None, help="Touched since this time (UTC).")
@with_common
@click.pass_obj
def query_instances(settings: Settings, /, **options: Any) -> None:
    """Instances by state, most recently touched first."""
    _query(settings, fq.instances, INSTANCES, "instances", options)


@query.command("workloads")
@_WORKLOAD
@with_common
@click.pass_obj
def query_workloads(settings: Settings, /, **options: Any) -> None:
    """Workloads: their contract and the capacity live for them now."""
    _query(settings, fq.workloads, WORKLOADS, "workloads", options)


@query.command("lag")
@postgres_option
@click.option("--json", "as_json", is_flag=True, help="Print rows as JSON.")
@click.pass_obj
def query_lag(settings: Settings, *, postgres_dsn: str | None, as_json: bool) -> None:
    """How far each projection is behind the log, per partition."""
    need_home(settings, log=True, ledger=True)
    conn = _fleet(settings, postgres_dsn)
    with closing(open_log(settings)) as log:
        rows = read_lag(log, settings.region, conn, stores(with_postgres(settings, postgres_dsn)))
    emit(rows, LAG, "projection lag", as_json)


@click.command("why")
@click.argument("ident", metavar="ID")
@postgres_option
@click.option("--json", "as_json", is_flag=True, help="Print the chain as JSON.")
@click.pass_obj
def why_command(settings: Settings, *, ident: str, postgres_dsn: str | None, as_json: bool) -> None:
    """Why did this happen? The chain of causes behind an instance, a workload or an event, in
    plain sentences, oldest first, each with its time and event id."""
    fleet = _fleet(settings, postgres_dsn)  # a missing home is a sentence, not made
    try:
        ledger = stores(settings).open_ledger()  # the surplus behind a workload, if it opens
    except (LedgerError, StoreError):
        ledger = None
    try:
        answer = why(fleet, ident, ledger)
    except NotFoundError as error:
        fail(str(error))
    if as_json:
        emit_json(answer.as_json(), sort_keys=False)
        return
    console.print(
        f"[bold]why {answer.kind} {answer.subject}[/] ({len(answer.steps)} events, oldest first)"
    )
    for s in answer.steps:  # one line per step: ids stay whole for copying
        say(f"{as_time(s.at)}  {escape(s.sentence)}  [dim]{s.event_id}[/]")


@click.group()
def report() -> None:
    """Reports for finance: the net saving per workload (docs/accounting.md)."""


@report.command("savings")
@click.option("--from", "first", default=None, help="First UTC day (inclusive), e.g. 2026-11-02.")
@click.option("--to", "last", default=None, help="Last UTC day (inclusive).")
@click.option("--workload", default=None, help="Only this workload.")
@click.option("--json", "as_json", is_flag=True, help="Money as decimal strings in euros.")
@click.pass_obj
def report_savings(
    settings: Settings, *, first: str | None, last: str | None, workload: str | None, as_json: bool
) -> None:
    """Per workload, every cost line and the net saving, with totals (from the ledger)."""
    need_home(settings, ledger=True)
    hold_home(settings)
    try:
        first_day, last_day = day_options(first, last)
    except TimeInputError as error:
        fail(str(error), error.fix, usage=True)
    try:
        result = savings(
            stores(settings).open_ledger(),
            first_day=first_day,
            last_day=last_day,
            workload=workload,
        )
    except (LedgerError, StoreError) as error:
        fail(str(error))
    if as_json:
        emit_json(result.as_json())
        return
    span = f"{first or 'the start'} to {last or 'the end'}"
    title = f"net saving per workload, {span} (rate-card saving)"
    out = table(title, SAVINGS_COLUMNS, savings_rows(result), right=SAVINGS_COLUMNS[1:])
    out.rows[-1].style = "bold"  # the total
    show(out)
    for sentence in late_sentences(result):  # prose: wrapped between words, ids stay whole
        console.print(sentence, markup=False, highlight=False)


@report.command("planning")
@click.option("--from", "first", default=None, help="First UTC day (inclusive), e.g. 2026-11-02.")
@click.option("--to", "last", default=None, help="Last UTC day (inclusive).")
@click.option("--json", "as_json", is_flag=True, help="vCPU-hours, and money as euro strings.")
@click.pass_obj
def report_planning(settings: Settings, *, first: str | None, last: str | None,
                    as_json: bool) -> None:  # fmt: skip
    """Per UTC day, vCPU-hours run by purchase model beside the reservations and the idle
    floor: the input to guaranteed-capacity planning (docs/accounting.md)."""
    try:
        first_day, last_day = day_options(first, last)
        result = planning(stores(settings).open_ledger(), first_day=first_day, last_day=last_day)
    except TimeInputError as error:
        fail(str(error), error.fix, usage=True)
    except ValueError as error:
        fail(str(error), usage=True)
    except (LedgerError, StoreError) as error:
        fail(str(error))
    if as_json:
        emit_json(result.as_json())
        return
    title = "vCPU-hours run and the reservations beside them (from the ledger)"
    out = table(title, PLANNING_COLUMNS, planning_rows(result), right=PLANNING_COLUMNS[1:])
    out.rows[-1].style = "bold"  # the total
    show(out)
