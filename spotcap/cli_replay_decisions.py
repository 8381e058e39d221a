"""`spotcap replay decisions`: the recorded demo run decided again with changed settings, and
what would have differed (docs/replay-decisions.md)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from projections.money import eur_text
from replay.ledgers import day_number
from spotcap.config import Settings
from spotcap.fail import fail
from streams.deciders.settings import DeciderSettings
from streams.deciders.settings_keys import (
    SettingError,
    allowed,
    as_data,
    parse_assignments,
    settable_keys,
    with_values,
)

ORCHESTRATOR_CHOICES = ("deciders", "baseline")


def _day(value: datetime | None) -> int | None:
    return None if value is None else day_number(value.date())


@click.command("decisions")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change one decider setting for the re-run, e.g. exclusion.rate_factor=5 or "
    "min_pools=6 (repeat for more; --list-settings shows every key and its range).",
)
@click.option(
    "--orchestrator",
    type=click.Choice(ORCHESTRATOR_CHOICES),
    default="deciders",
    show_default=True,
    help="What drives the re-run: the deciders (with --set), or the simulator's baseline "
    "stand-in, to compare the recorded run with.",
)
@click.option(
    "--from",
    "first",
    type=click.DateTime(["%Y-%m-%d"]),
    default=None,
    help="First UTC day counted (YYYY-MM-DD; default: the run's first). The whole run is "
    "simulated again either way.",
)
@click.option(
    "--to",
    "last",
    type=click.DateTime(["%Y-%m-%d"]),
    default=None,
    help="Last UTC day counted, inclusive (default: the run's last).",
)
@click.option(
    "--list-settings",
    is_flag=True,
    help="Print every settable key, its default and its range, and stop.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_obj
def decisions(
    settings: Settings,
    *,
    assignments: tuple[str, ...],
    orchestrator: str,
    first: datetime | None,
    last: datetime | None,
    list_settings: bool,
    as_json: bool,
) -> None:
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
    first_day, last_day = _day(first), _day(last)
    if first_day is not None and last_day is not None and first_day > last_day:
        fail("--from is after --to", usage=True)

    # Imported here: the simulator and the fold are what `--help` must not load.
    from spotcap.decisions_whatif import base_settings, what_if
    from spotcap.demo_record import RunRecordError, load_run
    from streams.log import LogError

    try:
        run = load_run(settings, settings.region)
    except RunRecordError as error:
        fail(str(error), error.hint)
    try:
        deciders = with_values(base_settings(run), values)
    except SettingError as error:
        fail(str(error), "spotcap replay decisions --list-settings shows every key", usage=True)
    progress = Progress(
        TextColumn("[bold]{task.description}[/]"),
        BarColumn(),
        TextColumn("{task.fields[done]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=as_json,
    )
    with progress:
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
            report = what_if(
                settings,
                run,
                deciders,
                orchestrator,
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
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        print_what_if(report, Console())


# -- output ---------------------------------------------------------------------------------


def _days(days: float) -> str:
    return f"{days:g} day" + ("" if days == 1 else "s")


def _value(value: float, unit: str, *, signed: bool = False) -> str:
    sign = "+" if signed and value > 0 else ""
    if unit == "EUR":
        return sign + eur_text(int(value))
    if unit == "vCPU-h":
        return f"{sign}{value:,.1f}"
    return f"{sign}{int(value):,}"


def print_what_if(report: dict[str, Any], console: Console) -> None:
    span = f"{report['from'] or 'the start'} to {report['to'] or 'the end'}"
    rerun = report["rerun"]
    changed = rerun["settings_changed"]
    what = (
        ", ".join(f"{c['key']} {c['recorded']:g} -> {c['rerun']:g}" for c in changed)
        if changed
        else "the recorded settings"
    )
    who = rerun["orchestrator"] if rerun["orchestrator"] == "baseline" else f"deciders, {what}"
    table = Table(
        title=f"region {report['region']} (seed {report['seed']}, {_days(report['sim_days'])}, "
        f"{report['workloads']} workloads), {span}: recorded ({report['recorded']['orchestrator']})"
        f" against a re-run ({who})",
        caption=f"money: the ledger under {report['rule']}, in EUR",
    )
    for column in ("", "figure", "recorded", "re-run", "delta"):
        table.add_column(column, justify="left" if column in ("", "figure") else "right")
    group = ""
    for row in report["figures"]:
        head = row["group"] if row["group"] != group else ""
        if head and group:
            table.add_section()
        group = row["group"]
        unit = f" ({row['unit']})" if row["unit"] and row["unit"] != "EUR" else ""
        table.add_row(
            head,
            row["label"] + unit,
            _value(row["recorded"], row["unit"]),
            _value(row["rerun"], row["unit"]),
            _value(row["delta"], row["unit"], signed=True) if row["delta"] else "0",
        )
    console.print(table)
    ex = report["exclusions"]
    lines = [
        ("excluded in both runs", ex["excluded_in_both"]),
        ("excluded only in the recorded run", ex["excluded_only_recorded"]),
        ("excluded only in the re-run", ex["excluded_only_rerun"]),
    ]
    for label, pools in lines:
        marked = [f"{p} (misbehaving)" if p in ex["misbehaving_pools"] else p for p in pools]
        console.print(
            f"{label}: {escape(', '.join(marked)) if marked else 'none'}",
            highlight=False,
            soft_wrap=True,
        )
    if report["identical"]:
        console.print(
            f"no difference: the re-run decides as the recorded run did "
            f"({report['recorded']['events']:,} events each)",
            highlight=False,
        )
    else:
        saving = next(r for r in report["figures"] if r["key"] == "ledger_net_saving")
        console.print(
            f"net saving {eur_text(saving['recorded'])} recorded, {eur_text(saving['rerun'])} "
            f"re-run ({_value(saving['delta'], 'EUR', signed=True)}); "
            f"{report['recorded']['events']:,} events recorded, "
            f"{rerun['events']:,} re-run",
            highlight=False,
            soft_wrap=True,
        )


def _print_settings(as_json: bool) -> None:
    defaults = as_data(DeciderSettings())
    rows = [
        {"key": key, "default": defaults[key], "allowed": allowed(key)} for key in settable_keys()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    table = Table(
        title="decider settings --set may change (the recorded run's values are the base)"
    )
    for column in ("key", "default", "allowed"):
        table.add_column(
            column, justify="right" if column == "default" else "left", no_wrap=column == "key"
        )
    for row in rows:
        table.add_row(str(row["key"]), f"{row['default']:g}", str(row["allowed"]))
    Console().print(table)
