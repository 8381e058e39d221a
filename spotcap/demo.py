"""`spotcap demo`: the deciders drive a simulated region; every event goes to the log.

By default the deciders (`spotcap.loop.DecidersOrchestrator`) place, replace, fall back and
scale down the region's capacity; `--orchestrator baseline` runs the simulator's stand-in
instead. After a run of the deciders the same seed is simulated once more with the baseline
(nothing written) so the summary can set wasted work, shortfall and spend side by side.

The log's bytes are a function of the seed and the options alone: events carry sim time, the
record timestamp is the event time (`occurred_at` // 1000) and batches are flushed at fixed
points of the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from provider.sim.clock import DAY_US, HOUR_US
from provider.sim.orchestration import Orchestrator
from provider.sim.orchestrator import BaselineOrchestrator
from provider.sim.region import RegionSim, SimConfig, workload_contract_files
from provider.sim.summary import RunSummary
from schemas.events import EVENT_CLASSES
from schemas.pools import PoolCatalogue, PoolCatalogueError
from spotcap.cli_types import FiniteFloatRange
from spotcap.config import Settings
from spotcap.demo_fresh import fresh_plan, record_demo_ends
from spotcap.demo_record import RecordedRun, forget_run, record_run
from spotcap.demo_report import DecisionSummary, comparison, print_comparison, print_decisions
from spotcap.fail import fail
from spotcap.failures import unwritable_directory
from spotcap.loop import DecidersOrchestrator, owned_by
from spotcap.runs import run_marker
from spotcap.wiring import describe_log, make_codec, open_log
from streams.deciders.settings import DeciderSettings
from streams.embedded import EmbeddedLog
from streams.log import EventLog, LogError, UnknownTopicError
from streams.topics import EVENT_TOPICS, region_topics, topic_name
from streams.writer import EventWriter

FLUSH_EVENTS = 50_000

# What can drive the simulated region (`--orchestrator`): a name -> a new orchestrator for the
# config and the deciders' settings (which the baseline has none of). The deciders are the
# default; the baseline stand-in is what they are compared with.
ORCHESTRATORS: dict[str, Callable[[SimConfig, DeciderSettings], Orchestrator]] = {
    "deciders": lambda config, deciders: DecidersOrchestrator(
        config.orchestrator.orchestrator_id, deciders
    ),
    "baseline": lambda config, _: BaselineOrchestrator(config.orchestrator),
}
DEFAULT_ORCHESTRATOR = "deciders"
BASELINE = "baseline"

ProgressCallback = Callable[[float], None]


def events_in_log(log: EventLog, region: str) -> int:
    """How many records the region's event topics hold (0 when they do not exist yet)."""
    total = 0
    for logical in EVENT_TOPICS:
        try:
            total += sum(log.end_offsets(topic_name(region, logical)).values())
        except UnknownTopicError:
            continue  # no such topic yet
    return total


def write_run(
    sim: RegionSim,
    log: EventLog,
    settings: Settings,
    on_progress: ProgressCallback | None = None,
    decisions: DecisionSummary | None = None,
) -> RunSummary:
    """Run `sim` to its end, writing each event to its topic; returns what was written."""
    summary = RunSummary(sim.catalogue)
    writer = EventWriter(log, make_codec(settings), sim.config.region, flush_every=FLUSH_EVENTS)
    try:
        for batch in sim.run(HOUR_US):
            for envelope in batch:
                summary.observe(envelope)
                if decisions is not None:
                    decisions.observe(envelope)
                writer.write(envelope)
            if on_progress is not None:
                on_progress((sim.now_us() - sim.config.start_us) / DAY_US)
    finally:
        writer.close()
    return summary


def simulate_only(config: SimConfig, on_progress: ProgressCallback | None = None) -> RunSummary:
    """Run the baseline on `config` without writing anything: what the deciders are compared
    with on the same seed."""
    sim = RegionSim(config, orchestrator=ORCHESTRATORS[BASELINE](config, DeciderSettings()))
    summary = RunSummary(sim.catalogue)
    for batch in sim.run(HOUR_US):
        for envelope in batch:
            summary.observe(envelope)
        if on_progress is not None:
            on_progress((sim.now_us() - sim.config.start_us) / DAY_US)
    return summary


def run_demo(
    settings: Settings,
    config: SimConfig,
    on_progress: ProgressCallback | None = None,
    *,
    fresh: bool = False,
    orchestrator: str = DEFAULT_ORCHESTRATOR,
    compare: bool = True,
    on_baseline_progress: ProgressCallback | None = None,
    deciders: DeciderSettings | None = None,
) -> dict[str, Any]:
    """Apply the region's topics, refuse a log that already holds its events, run, report.

    With `fresh`, an embedded log's topics of the region are deleted first (never Kafka's).
    `orchestrator` names what drives the region (`ORCHESTRATORS`), the deciders with
    `deciders` (the source design's settings by default); with `compare` (and an
    orchestrator other than the baseline) the baseline runs the same config too, unwritten, and
    the report compares the two (`comparison`). A finished run records its configuration
    beside the log (`spotcap.demo_record`), for `spotcap replay decisions`.
    """
    deciders = owned_by(config.orchestrator.orchestrator_id, deciders)
    log = open_log(settings)
    try:
        if fresh:
            if not isinstance(log, EmbeddedLog):
                raise DemoRefusedError(
                    "--fresh deletes the region's topics and works on the embedded log only",
                    "delete Kafka topics deliberately with kafka-topics, or use another --region",
                )
            plan = fresh_plan(log, settings, config.region)
            if isinstance(plan, tuple):
                raise DemoRefusedError(*plan)
            if plan:
                Console(stderr=True).print(plan, highlight=False, soft_wrap=True)
            log.delete_topics(s.name for s in region_topics(config.region))
        existing = events_in_log(log, config.region)
        if existing:
            raise DemoRefusedError(
                f"the log ({describe_log(settings)}) already holds {existing:,} events of region "
                f"{config.region}; a second run would mix two histories",
                (
                    "use --fresh to replace them, another --home (or --region), "
                    f"or delete {settings.home}"
                    if isinstance(log, EmbeddedLog)
                    else "use another --region, or delete the region's topics on Kafka "
                    "deliberately (kafka-topics --delete)"
                ),
            )
        # A run killed part-way leaves its marker saying so (`spotcap topics list` shows it).
        with run_marker(settings, config.region):
            forget_run(settings, config.region)
            log.apply_topics(region_topics(config.region))
            driver = ORCHESTRATORS[orchestrator](config, deciders)
            sim = RegionSim(config, orchestrator=driver)
            decisions = DecisionSummary(sim.misbehaving_pool_ids)
            summary = write_run(sim, log, settings, on_progress, decisions)
            record_demo_ends(log, settings, config.region)
            record_run(
                settings,
                RecordedRun(config, orchestrator, None if orchestrator == BASELINE else deciders),
            )
    finally:
        log.close()
    report = summary.report(sim.misbehaving_pool_ids)
    report.update(
        region=config.region, seed=config.seed, pools=len(sim.catalogue), orchestrator=orchestrator
    )
    report["decisions"] = decisions.report()
    if isinstance(driver, DecidersOrchestrator):
        report["calls"] = dict(sorted(driver.counts.items()))
    if compare and orchestrator != BASELINE:
        baseline = simulate_only(config, on_baseline_progress).report(sim.misbehaving_pool_ids)
        report["baseline"] = baseline
        report["comparison"] = comparison(report, baseline)
    return report


class DemoRefusedError(RuntimeError):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def _checked_config(
    config: SimConfig, catalogue: Path | None, contracts_out: Path | None
) -> SimConfig:
    """The run's configuration with its catalogue, once every input is known to be usable.

    Checked before the run starts: a bad catalogue or an unusable --contracts-out stops the
    command before anything is simulated or written.
    """
    if catalogue is not None:
        try:
            loaded = PoolCatalogue.load(catalogue)
        except PoolCatalogueError as error:
            fail(str(error), "fix the catalogue file named above")
        config = replace(config, catalogue=loaded)
    if contracts_out is not None and _contract_files_in(contracts_out):
        fail(
            f"{contracts_out} already holds contract files; the simulated ones would mix with them",
            "choose an empty --contracts-out directory",
        )
    if contracts_out is not None and (problem := unwritable_directory(contracts_out)):
        fail(f"--contracts-out: {problem[0]}", "choose a --contracts-out directory you may write")
    return config


@click.command("demo")
@click.option(
    "--days",
    type=FiniteFloatRange(min=0, min_open=True, max=400),
    default=7.0,
    show_default=True,
    help="Sim days to run.",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of every random choice.")
@click.option(
    "--workloads", type=click.IntRange(min=0), default=220, show_default=True, help="Workloads."
)
@click.option(
    "--catalogue",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Pool catalogue file (default: the demo region generated from the seed).",
)
@click.option(
    "--contracts-out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write each simulated workload's contract file (YAML) under this directory, "
    "for `spotcap contracts compile`.",
)
@click.option(
    "--orchestrator",
    type=click.Choice(sorted(ORCHESTRATORS)),
    default=DEFAULT_ORCHESTRATOR,
    show_default=True,
    help="What places, replaces and scales down the region's capacity: the deciders "
    "(exclusion, ranking, placement, replacement, fallback, the actuator), or the "
    "simulator's baseline stand-in.",
)
@click.option(
    "--compare/--no-compare",
    default=True,
    show_default=True,
    help="Also simulate the same seed with the baseline (nothing written) and compare wasted "
    "work, shortfall and spend.",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Replace the region's events from an earlier run (embedded log only).",
)
@click.option(
    "--projections/--no-projections",
    default=True,
    show_default=True,
    help="Materialise the fleet state (PostgreSQL) and the ledger (ClickHouse) from the log.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def demo(
    settings: Settings,
    *,
    days: float,
    seed: int,
    workloads: int,
    catalogue: Path | None,
    contracts_out: Path | None,
    orchestrator: str,
    compare: bool,
    fresh: bool,
    projections: bool,
    as_json: bool,
) -> None:
    """Simulate a region (pools, reclaims, waves, 220 workloads) and write its events to the log.

    Deterministic: the same seed and options write the same log, byte for byte.
    """
    err = Console(stderr=True)
    config = _checked_config(
        SimConfig(seed=seed, days=days, region=settings.region, workloads=workloads),
        catalogue,
        contracts_out,
    )
    progress = Progress(
        TextColumn("[bold]simulating[/] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.1f}/{task.total:.0f} sim-days"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=as_json,
    )
    with progress:
        task = progress.add_task(f"region {settings.region} ({orchestrator})", total=days)
        baseline_task = (
            progress.add_task("the baseline, to compare", total=days, start=False)
            if compare and orchestrator != BASELINE
            else None
        )

        def baseline_progress(done: float) -> None:
            if baseline_task is not None:
                progress.start_task(baseline_task)
                progress.update(baseline_task, completed=done)

        try:
            report = run_demo(
                settings,
                config,
                lambda d: progress.update(task, completed=d),
                fresh=fresh,
                orchestrator=orchestrator,
                compare=compare,
                on_baseline_progress=baseline_progress,
            )
        except DemoRefusedError as error:
            progress.stop()
            fail(str(error), error.hint)
        except LogError as error:
            progress.stop()
            fail(str(error))
    report["log"] = describe_log(settings)
    if projections:
        # Imported here: the stores' libraries (pyarrow, psycopg) weigh ~50 MiB of memory that
        # a run without projections does not need.
        from projections.ledger.store import LedgerError
        from projections.postgres.connection import FleetDatabaseError
        from spotcap.demo_projections import materialise
        from spotcap.stores import StoreError

        try:
            report["projections"] = materialise(settings, rebuild=fresh, quiet=as_json)
        except (StoreError, FleetDatabaseError, LedgerError, LogError) as error:
            fail(str(error), "or run the demo with --no-projections")
    if contracts_out is not None:
        files = write_contract_files(config, contracts_out)
        report["contracts_out"] = {"dir": str(contracts_out), "files": files}
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        print_report(report, settings, projections=projections)
    if contracts_out is not None and not as_json:
        pools = catalogue or Path("examples/region/demo-region.yaml")
        note = "" if catalogue or seed == 1 else f" ({pools} is the demo region of seed 1)"
        Console().print(
            f"wrote {report['contracts_out']['files']} contract files under {contracts_out}; "
            f"check them with `spotcap contracts compile {contracts_out} --out BUNDLES "
            f"--pools {pools} --unsigned` (or --key KEYFILE to sign){note}",
            highlight=False,
            soft_wrap=True,
        )


def print_report(report: dict[str, Any], settings: Settings, *, projections: bool) -> None:
    """The demo's readable summary: the run, the deciders' decisions, the baseline comparison
    and the projections."""
    console = Console()
    print_summary(report, console)
    if report["orchestrator"] != BASELINE:
        print_decisions(report["decisions"], console)
    if "comparison" in report:
        print_comparison(report["comparison"], console, report["seed"])
    if projections:
        from spotcap.demo_projections import print_projections

        home_args = f" --home {settings.home} --region {settings.region}"
        print_projections(report["projections"], Console(), home_args)


def write_contract_files(config: SimConfig, directory: Path) -> int:
    """Write the contract file of every simulated workload of `config` under `directory`, at its
    path in the (simulated) contract repository; returns how many."""
    files = workload_contract_files(config)
    for path, text in files.items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return len(files)


def _contract_files_in(directory: Path) -> bool:
    return directory.is_dir() and any(
        p.suffix in (".yaml", ".yml") for p in directory.rglob("*") if p.is_file()
    )


def print_summary(report: dict[str, Any], console: Console) -> None:
    """The summary for people: events by type, reclaims, waves, misbehaving pools, capacity."""
    events = Table(title=f"{report['events']:,} events written to {report['log']}")
    events.add_column("event type")
    events.add_column("topic")
    events.add_column("events", justify="right")
    for name, count in sorted(report["events_by_type"].items(), key=lambda kv: -kv[1]):
        events.add_row(name, EVENT_CLASSES[name].TOPIC, f"{count:,}")
    console.print(events)

    figures = Table(title=f"region {report['region']}, seed {report['seed']}", show_header=False)
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    used = report["used_vcpu_h"]
    rows = [
        ("sim days", f"{report['sim_days']:g}"),
        ("orchestrator", report["orchestrator"]),
        ("pools", str(report["pools"])),
        ("workloads", str(report["workloads"])),
        ("declared target vCPU (sum)", f"{report['target_vcpu']:,}"),
        ("peak running vCPU", f"{report['peak_vcpu']:,}"),
        *((f"vCPU-hours {model}", f"{vcpu_h:,.0f}") for model, vcpu_h in used.items()),
        ("advisories", f"{report['advisories']:,}"),
        ("notices", f"{report['notices']:,}"),
        ("losses with notice", f"{report['losses_with_notice']:,}"),
        ("losses without notice", f"{report['losses_without_notice']:,}"),
        ("wasted vCPU-hours", f"{report['wasted_vcpu_h']:,.0f}"),
        ("shortfall vCPU-hours (asked for, not running)", f"{report['shortfall_vcpu_h']:,.0f}"),
        ("spend at the rate cards (EUR)", f"{report['spend_eur']:,.0f}"),
        ("placements decided", f"{report['events_by_type'].get('placement_decided', 0):,}"),
        (
            "replacements requested",
            f"{report['events_by_type'].get('replacement_requested', 0):,}",
        ),
        ("wasted share of reclaimable hours", f"{report['wasted_share_of_reclaimable']:.2%}"),
    ]
    for label, value in rows:
        figures.add_row(label, value)
    console.print(figures)

    waves = report["waves"]
    if waves:
        sizes = [w["instances_lost"] for w in waves]
        title = f"{len(waves)} hall-wide waves ({min(sizes)}-{max(sizes)} instances lost each)"
        waves_table = Table(title=title)
        for column in ("wave", "hall", "instances lost"):
            waves_table.add_column(
                column, justify="right" if column == "instances lost" else "left"
            )
        for wave in waves:
            waves_table.add_row(wave["wave_id"], wave["hall"], str(wave["instances_lost"]))
        console.print(waves_table)
    else:
        console.print("no hall-wide wave in this run")

    pools = Table(
        title="misbehaving pools: reclaimed far above their record and price",
        caption="expected and observed: reclaims per instance-hour",
    )
    pools.add_column("pool", no_wrap=True)
    for column in ("expected", "observed", "reclaims", "inst-hours"):
        pools.add_column(column, justify="right")
    for pool in report["misbehaving_pools"]:
        pools.add_row(
            pool["pool_id"],
            f"{pool['expected_per_instance_h']:.4f}",
            f"{pool['observed_per_instance_h']:.4f}",
            str(pool["reclaims"]),
            f"{pool['instance_h']:,.0f}",
        )
    console.print(pools)
