"""`spotcap drill`: the daily drill (ADR-33; `provider.drill`, docs/operating.md)."""

from contextlib import closing
from typing import Any

import click

from provider import drill as d
from spotcap.cli.options import need_home
from spotcap.cli.output import emit_json, say, show, table
from spotcap.cli.services import PROBLEMS, owner_option, provider_for, provider_option
from spotcap.fail import fail
from spotcap.wiring import make_codec, open_log


@click.group()
def drill() -> None:
    """The daily drill: a share of a pool reclaimed, measured (docs/operating.md)."""


@drill.command("run")
@provider_option
@owner_option
@click.option("--pool", help="Drill this pool now (else the schedule's due entry).")
@click.option("--share", type=click.FloatRange(0, 0.25), default=0.05, help="Share to reclaim.")
@click.option("--wait", is_flag=True, help="Wait out the notices, then write the figures.")
@click.pass_obj
def run(settings: Any, /, **o: Any) -> None:
    """Finish the drills that are due, then drill --pool, else <home>/drills.yaml's due entry."""
    provider = provider_for(settings, o["provider_file"], o["orchestrator_id"])
    with closing(open_log(settings, service=True)) as log:
        asked = (o["pool"], o["share"], settings.home)
        try:
            outcome = d.drill_in_log(provider, log, make_codec(settings), asked, o["wait"])
        except (ValueError, *PROBLEMS) as error:
            fail(str(error))
    say("\n".join(d.describe(outcome)), markup=False)


@drill.command("report")
@click.option("--json", "as_json", is_flag=True, help="Every figure of every drill, as JSON.")
@click.pass_obj
def report(settings: Any, *, as_json: bool) -> None:
    """The region's drills: notice to drain, drains verified, replacements in time, cost."""
    with closing(open_log(need_home(settings, log=True))) as log:
        rows = d.drill_report(d.region_events(log, make_codec(settings), settings.region))
    if as_json:
        emit_json(d.as_json(rows))
        return
    show(table(f"drills of {settings.region}", d.COLUMNS, map(d.cells, rows), right=d.RIGHT,
               caption="\n".join(d.notes(rows)) or None))  # fmt: skip
