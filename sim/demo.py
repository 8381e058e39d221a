"""The demo: the deciders drive a simulated region and every event goes to the log.

By default the deciders (`sim.loop.DecidersOrchestrator`) place, replace, fall back and scale
down the region's capacity; the ``baseline`` orchestrator runs the simulator's stand-in instead.
After a run of the deciders the same seed is simulated once more with the baseline (nothing
written) so the report can set wasted work, shortfall and spend side by side.

The log's bytes are a function of the seed and the options alone: events carry sim time, the
record timestamp is the event time (`occurred_at` // 1000) and batches are flushed at fixed
points of the run.

`spotcap demo` calls `run_demo`, then `sim.materialise.materialise`; `spotcap replay decisions`
(`replay.decisions`) writes a re-run with `write_run`.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from schemas.codec import Codec
from schemas.pools import PoolCatalogue, PoolCatalogueError
from sim.clock import DAY_US, HOUR_US
from sim.collector import fewer_collections
from sim.fresh import fresh_plan, record_demo_ends
from sim.loop import DecidersOrchestrator, owned_by
from sim.orchestration import Orchestrator
from sim.orchestrator import BaselineOrchestrator
from sim.record import RecordedRun, forget_run, record_run
from sim.region import RegionSim, SimConfig, workload_contract_files
from sim.report import EVIDENCE_HORIZON_US, DecisionSummary, comparison
from sim.summary import RunSummary
from streams.children import name_process, pool_initializer
from streams.deciders.settings import DeciderSettings
from streams.embedded import EmbeddedLog
from streams.log import EventLog, UnknownTopicError
from streams.runs import run_marker
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


class LogFollower(Protocol):
    """What reads the log while the demo writes it (the projections: `sim.materialise.Follower`):
    started once the region's topics exist, told after each flush how far the log is written
    (every event below that event time is in it, and none below it comes later), and when it
    is complete; `disordered` if an event ever came below what it was told (it must then read
    the finished log again); `stop` if the run failed."""

    def start(self) -> None: ...
    def flushed(self, below_us: int) -> None: ...
    def disordered(self) -> None: ...
    def complete(self) -> None: ...
    def stop(self) -> None: ...


class DemoRefusedError(RuntimeError):
    """The demo would mix or destroy histories; `hint` says what to do instead."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def checked_config(
    config: SimConfig, catalogue: Path | None, contracts_out: Path | None
) -> SimConfig:
    """The run's configuration with its catalogue, once every input is known to be usable: a
    bad catalogue, or a `contracts_out` that already holds contract files, raises
    `DemoRefusedError` before anything runs."""
    if catalogue is not None:
        try:
            loaded = PoolCatalogue.load(catalogue)
        except PoolCatalogueError as error:
            raise DemoRefusedError(str(error), "fix the catalogue file named above") from error
        config = replace(config, catalogue=loaded)
    if contracts_out is not None and holds_contract_files(contracts_out):
        raise DemoRefusedError(
            f"{contracts_out} already holds contract files; the simulated ones would mix with them",
            "choose an empty --contracts-out directory",
        )
    return config


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
    codec: Codec,
    on_progress: ProgressCallback | None = None,
    decisions: DecisionSummary | None = None,
    *,
    follower: LogFollower | None = None,
    flush_every: int = FLUSH_EVENTS,
) -> RunSummary:
    """Run `sim` to its end, writing each event to its topic; returns what was written.
    `follower` is told after each flush the event time below which the log is complete (the
    latest written: the simulation publishes in event-time order), and when it all is."""
    summary = RunSummary(sim.catalogue)
    writer = EventWriter(log, codec, sim.config.region, flush_every=flush_every)
    latest = told = -1  # the latest event time written, and the last told to the follower
    try:
        for batch in sim.run(HOUR_US):
            for envelope in batch:
                summary.observe(envelope)
                if decisions is not None:
                    decisions.observe(envelope)
                written = writer.written
                writer.write(envelope)
                if follower is not None:
                    at = envelope.occurred_at
                    if at < told:  # below what the follower was told: it must read again
                        follower.disordered()
                        follower = None
                        continue
                    latest = max(latest, at)
                    if writer.written != written:  # that write flushed
                        follower.flushed(told := latest)
            if on_progress is not None:
                on_progress((sim.now_us() - sim.config.start_us) / DAY_US)
    finally:
        writer.close()
    if follower is not None:
        follower.complete()
    return summary


def simulate_only(
    config: SimConfig,
    on_progress: ProgressCallback | None = None,
    *,
    orchestrator: str = BASELINE,
    deciders: DeciderSettings | None = None,
) -> RunSummary:
    """Run `config` without writing anything (the baseline by default: what the deciders are
    compared with on the same seed); `deciders` are the deciders' settings, if they run."""
    settings = owned_by(config.orchestrator.orchestrator_id, deciders)
    sim = RegionSim(config, orchestrator=ORCHESTRATORS[orchestrator](config, settings))
    summary = RunSummary(sim.catalogue)
    for batch in sim.run(HOUR_US):
        for envelope in batch:
            summary.observe(envelope)
        if on_progress is not None:
            on_progress((sim.now_us() - sim.config.start_us) / DAY_US)
    summary.misbehaving = sim.misbehaving_pool_ids
    return summary


def baseline_report(config: SimConfig, misbehaving_pool_ids: tuple[str, ...]) -> dict[str, Any]:
    """The baseline's report on `config` (nothing written), with the deciders' run's
    misbehaving pools: what `run_demo` compares with, computed in a process of its own."""
    with fewer_collections():
        return simulate_only(config).report(misbehaving_pool_ids)


def _baseline_apart(
    config: SimConfig, misbehaving_pool_ids: tuple[str, ...]
) -> tuple[ProcessPoolExecutor, Future[dict[str, Any]]]:
    """`baseline_report` started in a fresh (spawned) process, beside the deciders' run: the
    second core simulates the baseline while this one runs the deciders and writes the log.
    It writes nothing, so the log's bytes do not depend on it; it ends with this process
    (a demo killed with SIGKILL leaves no baseline simulating on)."""
    spawn = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        1, mp_context=spawn, initializer=pool_initializer,
        initargs=(os.getpid(), partial(name_process, "spotcap-compare")),
    )  # fmt: skip
    return pool, pool.submit(baseline_report, config, misbehaving_pool_ids)


def _stop_apart(pool: ProcessPoolExecutor, baseline: Future[dict[str, Any]]) -> None:
    """A run that failed does not wait for its baseline: the baseline's process is stopped (a
    60-day baseline takes minutes, and the failure is what the user is waiting for)."""
    if not baseline.done():
        # Python 3.14 has pool.terminate_workers(); before it, the processes are the pool's own.
        for process in list(pool._processes.values()):
            process.terminate()
    pool.shutdown(cancel_futures=True)


def compare_seed(config: SimConfig, deciders: DeciderSettings | None = None) -> dict[str, Any]:
    """The deciders and the baseline on `config`, nothing written: both reports and the
    comparison `spotcap demo` prints (bench/honest.py runs it over seeds)."""
    ours = simulate_only(config, orchestrator=DEFAULT_ORCHESTRATOR, deciders=deciders)
    theirs = simulate_only(config)
    report = ours.report(ours.misbehaving)
    baseline = theirs.report(theirs.misbehaving)
    return {
        "orchestrator": report,
        "baseline": baseline,
        "comparison": comparison(report, baseline),
    }


def _decisions_summary(sim: RegionSim, deciders: DeciderSettings) -> DecisionSummary:
    """The summary of the run's decisions, keeping notices and losses twice as long as the
    longest exclusion window (a day at least): the evidence an exclusion names."""
    windows_s = (deciders.exclusion.burst_window_s, deciders.exclusion.rate_window_s)
    horizon_us = max(EVIDENCE_HORIZON_US, 2 * max(windows_s) * 1_000_000)
    return DecisionSummary(sim.misbehaving_pool_ids, horizon_us)


def run_demo(
    log: EventLog,
    codec: Codec,
    runs_dir: Path,
    config: SimConfig,
    on_progress: ProgressCallback | None = None,
    *,
    fresh: bool = False,
    orchestrator: str = DEFAULT_ORCHESTRATOR,
    compare: bool = True,
    on_baseline_progress: ProgressCallback | None = None,
    deciders: DeciderSettings | None = None,
    say: Callable[[str], None] | None = None,
    follower: LogFollower | None = None,
    flush_every: int = FLUSH_EVENTS,
) -> dict[str, Any]:
    """Apply the region's topics, refuse a log that already holds its events, run, report.

    With `fresh`, an embedded log's topics of the region are deleted first (never Kafka's),
    after `say` is told what goes. `orchestrator` names what drives the region
    (`ORCHESTRATORS`), the deciders with `deciders` (the source design's settings by default);
    with `compare` (and an orchestrator other than the baseline) the baseline runs the same
    config too, unwritten, in a process of its own while this one runs (`on_baseline_progress`
    is told when it is done), and the report compares the two (`sim.report.comparison`). The run
    is marked in `runs_dir` (`streams.runs`); a finished run records its configuration there
    (`sim.record`), for `spotcap replay decisions`. The caller closes `log`. A `follower` is
    started once the topics exist and follows the run as `write_run` writes it (stopped if the
    run fails). `flush_every`: events per flush (the log's bytes depend on it; tests make it
    small).
    """
    deciders = owned_by(config.orchestrator.orchestrator_id, deciders)
    if fresh:
        if not isinstance(log, EmbeddedLog):
            raise DemoRefusedError(
                "--fresh deletes the region's topics and works on the embedded log only",
                "delete Kafka topics deliberately with kafka-topics, or use another --region",
            )
        plan = fresh_plan(log, runs_dir, config.region)
        if isinstance(plan, tuple):
            raise DemoRefusedError(*plan)
        if plan and say is not None:
            say(plan)
        log.delete_topics(s.name for s in region_topics(config.region))
    existing = events_in_log(log, config.region)
    if existing:
        raise DemoRefusedError(
            f"the log ({log.describe()}) already holds {existing:,} events of region "
            f"{config.region}; a second run would mix two histories",
            (
                "use --fresh to replace them, another --home (or --region), "
                f"or delete {log.root.parent}"
                if isinstance(log, EmbeddedLog)
                else "use another --region, or delete the region's topics on Kafka "
                "deliberately (kafka-topics --delete)"
            ),
        )
    # A run killed part-way leaves its marker saying so (`spotcap topics list` shows it).
    with run_marker(runs_dir, config.region):
        forget_run(runs_dir, config.region)
        log.apply_topics(region_topics(config.region))
        driver = ORCHESTRATORS[orchestrator](config, deciders)
        sim = RegionSim(config, orchestrator=driver)
        apart = None
        if compare and orchestrator != BASELINE:
            apart = _baseline_apart(config, sim.misbehaving_pool_ids)
        try:
            if follower is not None:
                follower.start()
            decisions = _decisions_summary(sim, deciders)
            with fewer_collections():
                summary = write_run(
                    sim, log, codec, on_progress, decisions, follower=follower,
                    flush_every=flush_every,
                )  # fmt: skip
            record_demo_ends(log, runs_dir, config.region)
            record_run(
                runs_dir,
                RecordedRun(config, orchestrator, None if orchestrator == BASELINE else deciders),
            )
            baseline = None if apart is None else apart[1].result()
        except BaseException:
            if follower is not None:
                follower.stop()
            raise
        finally:
            if apart is not None:
                _stop_apart(*apart)
    report = summary.report(sim.misbehaving_pool_ids)
    report.update(
        region=config.region, seed=config.seed, pools=len(sim.catalogue), orchestrator=orchestrator
    )
    report["decisions"] = decisions.report()
    if isinstance(driver, DecidersOrchestrator):
        report["calls"] = dict(sorted(driver.counts.items()))
    if baseline is not None:
        if on_baseline_progress is not None:
            on_baseline_progress(config.days)
        report["baseline"] = baseline
        report["comparison"] = comparison(report, baseline)
    return report


def write_contract_files(config: SimConfig, directory: Path) -> int:
    """Write the contract file of every simulated workload of `config` under `directory`, at its
    path in the (simulated) contract repository; returns how many."""
    files = workload_contract_files(config)
    for path, text in files.items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return len(files)


def contract_files_sentence(files: int, directory: Path, catalogue: Path | None, seed: int) -> str:
    """What `write_contract_files` wrote under `directory`, and the command that checks them
    against the run's catalogue (the demo region's file stands for seed 1's catalogue)."""
    pools = catalogue or Path("examples/region/demo-region.yaml")
    note = "" if catalogue or seed == 1 else f" ({pools} is the demo region of seed 1)"
    return (
        f"wrote {files} contract files under {directory}; "
        f"check them with `spotcap contracts compile {directory} --out BUNDLES "
        f"--pools {pools} --unsigned` (or --key KEYFILE to sign){note}"
    )


def holds_contract_files(directory: Path) -> bool:
    """Whether `directory` already holds contract files (the simulated ones would mix in)."""
    return directory.is_dir() and any(
        p.suffix in (".yaml", ".yml") for p in directory.rglob("*") if p.is_file()
    )


__all__ = [
    "BASELINE",
    "DEFAULT_ORCHESTRATOR",
    "ORCHESTRATORS",
    "DemoRefusedError",
    "LogFollower",
    "baseline_report",
    "checked_config",
    "contract_files_sentence",
    "events_in_log",
    "holds_contract_files",
    "run_demo",
    "simulate_only",
    "write_contract_files",
    "write_run",
]
