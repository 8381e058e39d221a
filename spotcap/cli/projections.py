"""`spotcap project` and `spotcap rebuild`: the projections from the log (`projections.catchup`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import click

from projections.catchup import LABELS, PROJECTIONS, ShowProgress, Which, run_projections
from projections.ledger.store import LedgerError
from projections.postgres.connection import FleetDatabaseError
from projections.stores import StoreError
from spotcap.cli.options import need_home, postgres_option, with_postgres
from spotcap.cli.output import emit_json, progress, say
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.home import hold_home
from spotcap.wiring import describe_log, make_codec, open_log, open_log_and_codec, stores
from streams.log import LogError


def show_progress(fresh: bool, quiet: bool) -> ShowProgress:
    """A progress bar per group of projections read together."""

    @contextmanager
    def bar(which: Sequence[Which]) -> Iterator[Callable[[Any], None]]:
        label = " and ".join(LABELS[w] for w in which)
        with progress(
            f"[bold]{'rebuilding' if fresh else 'projecting'}[/] {label}", quiet=quiet
        ) as shown:
            task = shown.add_task(label, total=None)
            yield lambda p: shown.update(task, completed=p.records_read, total=p.records_total)

    return bar


def _run(settings: Settings, what: str, *, fresh: bool, as_json: bool) -> None:
    need_home(settings, log=True)
    hold_home(settings, exclusive=fresh)  # a rebuild drops the tables others read
    with closing(open_log(settings)) as log:
        try:
            reports = run_projections(
                log,
                make_codec(settings),
                settings.region,
                stores(settings),
                PROJECTIONS[what],
                fresh=fresh,
                show=show_progress(fresh, as_json),
                opener=partial(open_log_and_codec, settings),  # each projection reads apart
            )
        except (StoreError, FleetDatabaseError, LedgerError, LogError) as error:
            fail(str(error))
    if as_json:
        emit_json([r.as_json() for r in reports], sort_keys=False)
        return
    for r in reports:
        say(r.describe(rebuilt=fresh, source=describe_log(settings)))


_which = click.argument(
    "what", type=click.Choice(sorted(PROJECTIONS)), default="all", required=False
)


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
@click.option(
    "--from-provider", "provider_file", metavar="FILE",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="postgres only: the instances from the provider's tags (the provider file) and the "
    "log's tail, read-only, in minutes; `spotcap project fleet` then fills in the rest.",
)  # fmt: skip
@click.option("--orchestrator-id", default=None, metavar="ID",
              help="With --from-provider: the owner tag of spotcap's instances.")  # fmt: skip
@click.pass_obj
def rebuild(settings: Settings, /, what: str, postgres_dsn: str | None, *, as_json: bool,
            provider_file: Path | None, orchestrator_id: str | None) -> None:  # fmt: skip
    """Drop a projection and rebuild it from the log through the merged history.

    WHAT is postgres, clickhouse or all (the default). The rebuilt tables equal the
    incrementally built ones, row for row. The outbox's send marks are lost with the tables:
    its actions are sent again, recognisably (same action ids). After a loss of PostgreSQL,
    --from-provider rebuilds what runs before anything acts (docs/operating.md).
    """
    settings = with_postgres(settings, postgres_dsn)
    if provider_file is None:
        _run(settings, what, fresh=True, as_json=as_json)
        return
    if PROJECTIONS[what] != ("fleet",):
        fail(f"--from-provider rebuilds the fleet state only, not {what}",
             "run `spotcap rebuild postgres --from-provider FILE`, then "
             "`spotcap rebuild clickhouse`")  # fmt: skip
    from provider.reconcile import rebuild_fleet
    from spotcap.cli.services import OWNER, PROBLEMS, provider_for

    need_home(settings, log=True)
    hold_home(settings, exclusive=True)
    with closing(open_log(settings)) as log:
        try:
            provider = provider_for(settings, provider_file, orchestrator_id or OWNER)
            report = rebuild_fleet(stores(settings), provider, log, make_codec(settings))
        except PROBLEMS as error:
            fail(f"the rebuild from the provider stopped: {error}")
    if as_json:
        emit_json(report.as_json(), sort_keys=False)
        return
    say(report.describe())
