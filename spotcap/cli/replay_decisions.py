"""`spotcap replay decisions`: the recorded demo run decided again with changed settings, and
what would have differed (`replay.decisions`, docs/replay-decisions.md)."""

from __future__ import annotations

from contextlib import closing
from datetime import datetime
from typing import Any

import click
from rich.progress import BarColumn, TaskID, TextColumn, TimeElapsedColumn

from replay.decisions_text import (
    exclusion_lines,
    settings_rows,
    what_if_rows,
    what_if_summary,
    what_if_title,
)
from replay.ledgers import day_span
from spotcap.cli.options import need_home
from spotcap.cli.output import bars, emit_json, say, show, table
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.home import hold_home
from streams.deciders.settings_keys import (
    SettingError,
    parse_assignments,
    settings_table,
    with_values,
)

ORCHESTRATOR_CHOICES = ("deciders", "baseline")


# fmt: off
@click.command("decisions")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
              help="Change one decider setting for the re-run, e.g. exclusion.rate_factor=5 or "
              "min_pools=6 (repeat for more; --list-settings shows every key and its range).")
@click.option("--orchestrator", type=click.Choice(ORCHESTRATOR_CHOICES), default="deciders",
              show_default=True,
              help="What drives the re-run: the deciders (with --set), or the simulator's "
              "baseline stand-in, to compare the recorded run with.")
@click.option("--from", "first", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="First UTC day counted (YYYY-MM-DD; default: the run's first). The whole run "
              "is simulated again either way.")
@click.option("--to", "last", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="Last UTC day counted, inclusive (default: the run's last).")
@click.option("--list-settings", is_flag=True,
              help="Print every settable key, its default and its range, and stop.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_obj
def decisions(settings: Settings, *, assignments: tuple[str, ...], orchestrator: str,
              first: datetime | None, last: datetime | None, list_settings: bool, as_json: bool
             ) -> None:
    # fmt: on
    """Re-run the deciders over the recorded run with changed settings and compare.

    The recorded demo run (its seed, catalogue and configuration, recorded beside the log) is
    simulated again in closed loop, driven by the deciders with the --set settings (or by the
    baseline stand-in), and both histories are counted the same way: exclusions, placements,
    fallbacks, losses, wasted work and the ledger under the recorded rule, with the net saving.
    Deterministic: the same settings give the same result, byte for byte.
    """
    if list_settings:
        _print_settings(as_json)
        return
    try:
        values = parse_assignments(assignments)
    except SettingError as error:
        fail(str(error), "spotcap replay decisions --list-settings shows every key", usage=True)
    if orchestrator == "baseline" and values:
        fail(
            "--set changes the deciders' settings, and the baseline stand-in has none",
            "drop --set, or re-run with --orchestrator deciders",
            usage=True,
        )
    try:
        first_day, last_day = day_span(first, last)
    except ValueError as error:
        fail(str(error), usage=True)

    need_home(settings, log=True)
    hold_home(settings)
    report = _what_if(settings, values, orchestrator, first_day, last_day, quiet=as_json)
    if as_json:
        emit_json(report)
    else:
        print_what_if(report)


def _what_if(
    settings: Settings,
    values: dict[str, int | float],
    orchestrator: str,
    first_day: int | None,
    last_day: int | None,
    *,
    quiet: bool,
) -> dict[str, Any]:
    """`replay.decisions.what_if` of the recorded run with `values` set, with progress."""
    # Imported here: the simulator and the fold are what `--help` must not load.
    from replay.decisions import base_settings, what_if
    from sim.record import RunRecordError, load_run
    from spotcap.wiring import make_codec, open_log, runs_dir
    from streams.log import LogError

    demo = f"spotcap demo --home {settings.home} --region {settings.region} --fresh"
    try:
        run = load_run(runs_dir(settings), settings.region, demo)
    except RunRecordError as error:
        fail(str(error), error.hint)
    try:
        deciders = with_values(base_settings(run), values)
    except SettingError as error:
        fail(str(error), "spotcap replay decisions --list-settings shows every key", usage=True)
    progress = bars(quiet, TextColumn("[bold]{task.description}[/]"), BarColumn(),
                    TextColumn("{task.fields[done]}"), TimeElapsedColumn())  # fmt: skip
    with closing(open_log(settings)) as log, progress:
        sim = progress.add_task(
            f"simulating again ({orchestrator})", total=run.config.days, done=""
        )
        rec = progress.add_task("counting the recorded log", total=None, start=False, done="")
        new = progress.add_task("counting the re-run", total=None, start=False, done="")

        def days(task: TaskID) -> Any:
            return lambda d, t: progress.update(
                task, completed=d, total=t, done=f"{d:.1f}/{t:g} sim-days"
            )

        def records(task: TaskID) -> Any:
            def update(d: float, t: float) -> None:
                progress.start_task(task)
                progress.update(task, completed=d, total=t, done=f"{d:,.0f}/{t:,.0f} records")

            return update

        try:
            return what_if(
                log,
                make_codec(settings),
                run,
                deciders,
                orchestrator,
                runs_dir=runs_dir(settings),
                scratch_parent=settings.home,
                first_day=first_day,
                last_day=last_day,
                on_simulate=days(sim),
                on_read_recorded=records(rec),
                on_read_rerun=records(new),
            )
        except RunRecordError as error:
            progress.stop()
            fail(str(error), error.hint)
        except LogError as error:
            progress.stop()
            fail(str(error))


# -- output ---------------------------------------------------------------------------------


def print_what_if(report: dict[str, Any]) -> None:
    values = ("recorded", "re-run", "delta")
    shown = table(what_if_title(report), ("", "figure", *values), (), right=values,
                  caption=f"money: the ledger under {report['rule']}, in EUR")  # fmt: skip
    for row in what_if_rows(report):
        if row[0] and shown.row_count:
            shown.add_section()
        shown.add_row(*row)
    show(shown)
    for line in [*exclusion_lines(report), what_if_summary(report)]:
        say(line, markup=False)


def _print_settings(as_json: bool) -> None:
    rows = settings_table()
    if as_json:
        emit_json(rows)
        return
    title = "decider settings --set may change (the recorded run's values are the base)"
    shown = table(title, ("key", "default", "allowed"), settings_rows(rows), right=("default",))
    shown.columns[0].no_wrap = True
    show(shown)
