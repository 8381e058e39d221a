"""`spotcap demo`: the deciders drive a simulated region (`sim.demo`); every event goes to the
log, then the projections are materialised (`sim.materialise`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from sim.demo import (
    BASELINE,
    DEFAULT_ORCHESTRATOR,
    ORCHESTRATORS,
    DemoRefusedError,
    checked_config,
    contract_files_sentence,
    run_demo,
    write_contract_files,
)
from sim.region import SimConfig
from sim.report import TableSpec, comparison_rows, decision_tables, summary_tables
from spotcap.cli.options import FiniteFloatRange
from spotcap.cli.output import console, emit_json, err_console, progress, say, show, table
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.failures import unwritable_directory
from spotcap.home import hold_home
from spotcap.wiring import (
    describe_log,
    make_codec,
    open_log,
    open_log_and_codec,
    runs_dir,
    stores,
)
from streams.log import LogError

if TYPE_CHECKING:
    from sim.live import LiveConfig
    from sim.materialise import Follower


# fmt: off
@click.command("demo")
@click.option("--days", type=FiniteFloatRange(min=0, min_open=True, max=400), default=None,
              help="Sim days to run (default 7; with --live 1/24: one sim hour).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of every random choice.")
@click.option("--workloads", type=click.IntRange(min=0), default=None,
              help="Workloads (default 220; with --live 10).")
@click.option("--catalogue", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Pool catalogue file (default: the demo region generated from the seed).")
@click.option("--contracts-out", type=click.Path(file_okay=False, path_type=Path),
              help="Also write each simulated workload's contract file (YAML) under this "
              "directory, for `spotcap contracts compile`.")
@click.option("--orchestrator", type=click.Choice(sorted(ORCHESTRATORS)),
              default=DEFAULT_ORCHESTRATOR, show_default=True,
              help="What places, replaces and scales down the region's capacity: the deciders "
              "(exclusion, ranking, placement, replacement, fallback, the actuator), or the "
              "simulator's baseline stand-in.")
@click.option("--compare/--no-compare", default=True, show_default=True,
              help="Also simulate the same seed with the baseline (nothing written) and compare "
              "wasted work, shortfall and spend.")
@click.option("--fresh", is_flag=True,
              help="Replace the region's events from an earlier run (embedded log only).")
@click.option("--projections/--no-projections", default=True, show_default=True,
              help="Materialise the fleet state (PostgreSQL) and the ledger (ClickHouse) from "
              "the log.")
@click.option("--all-exclusions", is_flag=True,
              help="List every exclusion in the summary (default: the first ten).")
@click.option("--live", is_flag=True, help="Run the live topology instead, every service a real "
              "process on real servers, over the region served as a cloud (docs/operating.md).")
@click.option("--speed", type=click.FloatRange(min=1, max=1000), default=30.0, show_default=True,
              help="With --live: sim seconds per wall second.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def demo(settings: Settings, *, days: float | None, seed: int, workloads: int | None,
         catalogue: Path | None, contracts_out: Path | None, orchestrator: str, compare: bool,
         fresh: bool, projections: bool, all_exclusions: bool, live: bool, speed: float,
         as_json: bool) -> None:
    # fmt: on
    """Simulate a region (pools, reclaims, waves, 220 workloads) and write its events to the log.

    Deterministic: the same seed and options write the same log, byte for byte.
    """
    if live and (catalogue or contracts_out or fresh or orchestrator != DEFAULT_ORCHESTRATOR):
        fail("--live runs the deciders over a region of its own: --catalogue, --contracts-out, "
             "--fresh and --orchestrator do not apply", "leave them out, or leave out --live")
    if live:  # sim.live imported here: its servers' clients (OpenStack, NATS) slow every demo
        from sim.live import LiveConfig, Scenario

        scenario = Scenario(seed, round((days or 1 / 24) * 86_400),
                            10 if workloads is None else workloads, settings.region)  # fmt: skip
        return _live(settings, LiveConfig(scenario, speed, kafka=settings.kafka_bootstrap), as_json)
    days, workloads = days or 7.0, 220 if workloads is None else workloads
    try:
        wanted = SimConfig(seed=seed, days=days, region=settings.region, workloads=workloads)
        config = checked_config(wanted, catalogue, contracts_out)
    except DemoRefusedError as error:
        fail(str(error), error.hint)
    if contracts_out is not None and (problem := unwritable_directory(contracts_out)):
        fail(f"--contracts-out: {problem[0]}", "choose a --contracts-out directory you may write")
    hold_home(settings, exclusive=fresh)  # --fresh deletes the region's history
    follower = _follower(settings, rebuild=fresh) if projections else None
    bar = Progress(
        TextColumn("[bold]simulating[/] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.1f}/{task.total:.0f} sim-days"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=as_json,
    )
    # The log is closed before the projections read: the embedded log's writer lock goes with it.
    with closing(open_log(settings)) as log, bar:
        task = bar.add_task(f"region {settings.region} ({orchestrator})", total=days)
        baseline_task = (
            bar.add_task("the baseline, to compare", total=days, start=False)
            if compare and orchestrator != BASELINE
            else None
        )

        def baseline_progress(done: float) -> None:
            if baseline_task is not None:
                bar.start_task(baseline_task)
                bar.update(baseline_task, completed=done)

        try:
            report = run_demo(
                log,
                make_codec(settings),
                runs_dir(settings),
                config,
                lambda d: bar.update(task, completed=d),
                fresh=fresh,
                orchestrator=orchestrator,
                compare=compare,
                on_baseline_progress=baseline_progress,
                say=lambda text: say(text, markup=False, err=True),
                follower=follower,
            )
        except DemoRefusedError as error:
            bar.stop()
            fail(str(error), error.hint)
        except LogError as error:
            bar.stop()
            fail(str(error))
    report["log"] = describe_log(settings)
    if follower is not None:
        report["projections"] = _materialise(follower, rebuild=fresh, quiet=as_json)
    if contracts_out is not None:
        files = write_contract_files(config, contracts_out)
        report["contracts_out"] = {"dir": str(contracts_out), "files": files}
    if as_json:
        emit_json(report)
        return
    most = None if all_exclusions else 10
    print_report(report, settings, projections=projections, exclusions=most)
    if contracts_out is not None:
        files = report["contracts_out"]["files"]
        say(contract_files_sentence(files, contracts_out, catalogue, seed), markup=False)


def _live(settings: Settings, config: LiveConfig, as_json: bool) -> None:
    from sim.live import LiveError, live_lines, run_live
    try:
        report = run_live(config, settings.home, lambda text: say(text, markup=False, err=True))
    except LiveError as error:
        fail(str(error), error.hint)
    if as_json:
        emit_json(report)
        return
    print_summary(report)
    print_decisions(report["decisions"], 10)
    for line in live_lines(report):
        say(line, markup=False)


def _follower(settings: Settings, *, rebuild: bool) -> Follower:
    """Before anything runs: the home's projections hold this region (or none); then what
    brings them up to date while the run writes the log (`sim.materialise.Follower`)."""
    from sim.materialise import Follower, ProjectionsError, check_region

    try:
        check_region(stores(settings))
    except ProjectionsError as error:
        fail(str(error), error.hint)
    opener = partial(open_log_and_codec, settings)
    return Follower(opener, settings.region, stores(settings), rebuild=rebuild)


def _materialise(follower: Follower, *, rebuild: bool, quiet: bool) -> dict[str, Any]:
    # The projections run in processes of their own: the stores' libraries stay out of this one.
    from sim.materialise import ProjectionsError

    try:
        return follower.result(_projecting(rebuild, quiet))
    except ProjectionsError as error:
        fail(str(error), error.hint)


def _projecting(rebuild: bool, quiet: bool) -> Any:
    """One bar for both projections (`spotcap.cli.projections` imports the catch-up, whose
    libraries the demo's process leaves to the children that project)."""
    label = "fleet state (PostgreSQL) and ledger (ClickHouse)"

    @contextmanager
    def bar(_: Sequence[str]) -> Iterator[Callable[[Any], None]]:
        with progress(f"[bold]{'rebuilding' if rebuild else 'projecting'}[/] {label}",
                      quiet=quiet) as shown:  # fmt: skip
            task = shown.add_task(label, total=None)
            yield lambda p: shown.update(task, completed=p.records_read, total=p.records_total)

    return bar


# -- the report for people ------------------------------------------------------------------


def print_report(report: dict[str, Any], settings: Settings, *, projections: bool,
                 exclusions: int | None) -> None:  # fmt: skip
    """The run, the deciders' decisions, the baseline comparison and the projections."""
    print_summary(report)
    if report["orchestrator"] != BASELINE:
        print_decisions(report["decisions"], exclusions)
    if "comparison" in report:
        print_comparison(report["comparison"], report["seed"])
    if projections:
        print_projections(
            report["projections"], f" --home {settings.home} --region {settings.region}"
        )


def print_summary(report: dict[str, Any]) -> None:
    """Events by type, the run's figures, the waves and the misbehaving pools."""
    _show(summary_tables(report))


def print_decisions(decisions: dict[str, Any], most: int | None) -> None:
    """The decisions of a run for people: exclusions, placements, replacements, fallbacks."""
    _show(decision_tables(decisions, most))


def _show(specs: Sequence[TableSpec | str]) -> None:
    for t in specs:
        if isinstance(t, str):
            console.print(t)
            continue
        out = table(t.title, t.columns, t.rows, right=t.right, caption=t.caption,
                    show_header=t.show_header)  # fmt: skip
        out.columns[0].no_wrap = t.first_no_wrap
        show(out)


def print_comparison(compared: dict[str, Any], seed: int) -> None:
    title = f"against the baseline stand-in on the same seed ({seed})"
    columns = ("figure", "deciders", "baseline", "change")
    show(table(title, columns, comparison_rows(compared), right=columns[1:]))


def print_projections(report: dict[str, Any], home_args: str) -> None:
    """The savings the projections hold, and `why` commands a person can paste."""
    from sim.materialise import projection_lines

    for line in projection_lines(report, home_args):
        say(line, markup=False)
