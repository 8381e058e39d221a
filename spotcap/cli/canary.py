"""`spotcap canary`: canary releases of contract bundles (ADR-32; `provider.nodes.releases`)."""

from contextlib import closing
from typing import Any

import click

from provider.nodes import follow as f
from provider.nodes import releases as r
from spotcap.cli.options import need_home
from spotcap.cli.output import emit_json, say, show, table
from spotcap.fail import fail
from spotcap.wiring import make_codec, open_log


@click.group()
def canary() -> None:
    """Canary releases of contract bundles: see them, roll one back. A changed contract's
    bundle (`spotcap contracts compile --publish`) goes to a tenth of its pools first."""


@canary.command("status")
@click.option("--json", "as_json", is_flag=True, help="Every release, as JSON.")
@click.pass_obj
def status(settings: Any, *, as_json: bool) -> None:
    """The region's canary releases: running, promoted or rolled back, and why."""
    with closing(open_log(need_home(settings, log=True))) as log:
        rows = f.releases_of(log, make_codec(settings), settings.region).releases()
    if as_json:
        emit_json([row.as_json() for row in rows])
        return
    show(table(f"canary releases of {settings.region}", r.COLUMNS, map(r.cells, rows),
               caption=None if rows else "none: no changed contract was published"))  # fmt: skip


@canary.command("roll-back")
@click.argument("workload")
@click.option("--reason", default="rolled back by an operator", help="Why (in the event).")
@click.pass_obj
def roll_back(settings: Any, /, workload: str, reason: str) -> None:
    """End WORKLOAD's running canary now: its nodes get the bundle in force again."""
    with closing(open_log(need_home(settings, log=True), service=True)) as log:
        try:
            event = f.roll_back(log, make_codec(settings), settings.region, workload, reason)
        except f.NoCanaryError as error:
            fail(str(error), "`spotcap canary status` lists the running canaries")
    say(f"canary of {workload} rolled back: event {event.event_id}", markup=False)
