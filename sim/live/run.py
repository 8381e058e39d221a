"""`spotcap demo --live`: the live topology on one machine, over the simulated region served as
a cloud, for a span of sim time; then the demo's summary, read back from the log.

In order: the servers (Kafka, PostgreSQL, NATS; `processes.Servers`), the deciders on Faust
(``run streams``) and the projections (``run projections``), then the served cloud with its
facts' tap and the scenario (`scenario`, `tap`) in this process, then the actuator
(``run actuator`` on the cloud's provider file). The region's clock runs at `LiveConfig.speed`
sim seconds per wall second until the span is over; the run then waits until the deciders
are done with what the log holds (their committed offsets at its end), the log is quiet and
the projections have caught up, stops every service with SIGTERM (Ctrl-C stops the run the
same way), and summarises what the log holds (`sim.summary`, `sim.report`).

Folders under ``<home>/live/<region>/``: ``servers/`` (each server's data and log),
``logs/`` (each service's stderr and stdout), ``cloud/`` (the provider file and clouds.yaml),
``actuator/`` (the actuator's state).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.codec import Codec
from schemas.events import Envelope
from sim.cloud import CloudConfig, ServedCloud
from sim.cloud.serve import write_client_files
from sim.demo import events_in_log
from sim.live.agents import RealAgents
from sim.live.faults import Fault, Injector
from sim.live.processes import SPOTCAP, LiveError, Servers, Service, child_env, wait_until
from sim.live.scenario import OWNER, Plan, Scenario
from sim.live.tap import AGENTS, RegionTap
from sim.report import DecisionSummary
from sim.summary import RunSummary
from streams.kafka import KafkaLog
from streams.log import LogError
from streams.merged import MergedHistory
from streams.runtime.journal import RuntimeTopics
from streams.runtime.sequencer import deciders_behind
from streams.topics import EVENT_TOPICS, region_end_offsets, region_topics

Say = Callable[[str], None]


@dataclass(frozen=True)
class LiveConfig:
    """What a live run is: its scenario, how fast its clock runs, which servers it uses."""

    scenario: Scenario = field(default_factory=Scenario)
    speed: float = 30.0
    """Sim seconds per wall second."""
    kafka: str | None = None
    """A running broker (None: one is started)."""
    nats: str | None = None
    postgres: str | None = None
    patience_s: float = 300.0
    """The longest wait for any one step (a server, a service, the projections)."""
    quiet_s: float = 8.0
    """After the span: the log is quiet when no record arrived for this long."""
    faults: tuple[Fault, ...] = ()
    """Servers and services killed or paused during the span (`sim.live.faults`)."""


@dataclass
class LiveRun:
    """What a run started, for the summary and for stopping."""

    config: LiveConfig
    folder: Path
    home: Path
    say: Say
    servers: Servers = field(init=False)
    services: list[Service] = field(default_factory=list)
    cloud: ServedCloud | None = None
    tap: RegionTap | None = None
    kafka: str = ""
    postgres: str = ""
    nats: str = ""
    lines: dict[str, str] = field(default_factory=dict)
    plan: Plan | None = None
    agents: RealAgents | None = None
    injector: Injector | None = None
    restarts: dict[str, int] = field(default_factory=dict)
    """How often each service's supervisor started it again."""

    def __post_init__(self) -> None:
        self.servers = Servers(self.folder / "servers")

    @property
    def region(self) -> str:
        return self.config.scenario.region

    def globals(self) -> list[str]:
        return ["--home", str(self.home), "--region", self.region, "--kafka", self.kafka]

    def watched(self) -> list[Service]:
        """Every service and real agent, for their supervisors' checks."""
        agents = list(self.agents.agents.values()) if self.agents is not None else []
        return [*self.services, *agents]

    def by_name(self) -> dict[str, Service]:
        return {service.name: service for service in self.watched()}

    def sim_s(self) -> float:
        region = self.cloud.region if self.cloud is not None else None
        return 0.0 if region is None else (region.now_us() - region.config.start_us) / 1e6

    def service(self, name: str, *args: str) -> Service:
        service = Service(name, [*self.globals(), *args], self.folder / "logs").start()
        self.services.append(service)
        return service


def run_live(config: LiveConfig, home: Path, say: Say) -> dict[str, Any]:
    """Run the live region (see the module's doc); its report, as `sim.demo.run_demo`'s plus
    ``live``: the services' own summaries, the cloud's, the wall times. `LiveError` says why a
    run could not go on; Ctrl-C (KeyboardInterrupt) stops everything and propagates."""
    scenario = config.scenario
    run = LiveRun(config, home / "live" / scenario.region, home, say)
    started = time.monotonic()
    try:
        _servers(run)
        codec = Codec()
        log = KafkaLog(run.kafka)
        try:
            if existing := events_in_log(log, scenario.region):
                raise LiveError(
                    f"Kafka at {run.kafka} already holds {existing:,} events of region "
                    f"{scenario.region}; a second run would mix two histories",
                    "use another --region",
                )
            log.apply_topics(region_topics(scenario.region))
            _deciders_and_projections(run)
            sim_started = time.monotonic()
            _cloud_and_actuator(run, log, codec)
            _until_the_span_is_over(run)
            _until_the_faults_are_over(run)
            sim_wall_s = time.monotonic() - sim_started
            _until_settled(run, log, codec)
            run.say("stopping the services")
            _stop_services(run)
            _catch_up(run)
            report = summarise(log, codec, run)
        finally:
            log.close()
    finally:
        if run.injector is not None:
            run.injector.close()
        _stop_services(run)
        if run.tap is not None:
            run.tap.close()
        if run.cloud is not None:
            run.cloud.close()
        run.servers.stop()
    report["live"] |= {
        "speed": config.speed,
        "span_s": scenario.span_s,
        "sim_wall_s": round(sim_wall_s, 1),
        "wall_s": round(time.monotonic() - started, 1),
        "folder": str(run.folder),
        "faults": run.injector.done if run.injector is not None else [],
        "restarts": run.restarts,
    }
    return report


# -- the steps --------------------------------------------------------------------------------


def _servers(run: LiveRun) -> None:
    config = run.config
    for name, given in (("kafka", config.kafka), ("postgres", config.postgres),
                        ("nats", config.nats)):  # fmt: skip
        if given is None:
            run.say(f"starting {name}")
        setattr(run, name, given or run.servers.start(name, config.patience_s))


def _deciders_and_projections(run: LiveRun) -> None:
    run.say("starting the deciders (Faust) and the projections")
    deciders = run.service("deciders", "run", "streams", "--role", "all", "--session-timeout-s",
                           "6", "--log-level", "info")  # fmt: skip
    run.service("projections", "run", "projections", "--postgres", run.postgres)
    wait_until(lambda: "Ready" in deciders.said(), run.config.patience_s,
               "the deciders' Faust worker to be ready", run.services, every_s=1.0)  # fmt: skip


def _cloud_and_actuator(run: LiveRun, log: KafkaLog, codec: Codec) -> None:
    config, scenario = run.config, run.config.scenario
    cloud = ServedCloud(CloudConfig(scenario.sim_config(), config.speed, nats_url=run.nats))
    run.cloud = cloud
    run.plan = scenario.plan(cloud.region.sim)
    run.tap = RegionTap(cloud.region, log, codec)
    run.tap.start()
    cloud.start()
    provider = write_client_files(cloud, run.folder / "cloud")
    run.say(
        f"the region {scenario.region} is served at {cloud.access.base_url}, its clock at "
        f"{config.speed:g}x: {scenario.span_s / 60:g} sim minutes take "
        f"{scenario.span_s / config.speed:.0f} s"
    )
    run.service("actuator", "run", "actuator", "--provider", str(provider), "--orchestrator-id",
                OWNER, "--state", str(run.folder / "actuator"))  # fmt: skip
    if scenario.agents:
        run.agents = RealAgents(run.folder / "agents", run.globals(), cloud)
        run.agents.prepare(scenario.sim_config(), run.folder / "cloud" / "catalogue.yaml")
    tap = run.tap  # the log's market records beyond the tap's are the actuator's
    wait_until(
        lambda: _market_facts(log, run.region) > tap.market_taken,
        run.config.patience_s,
        "the actuator to put the provider's first rate cards on the log",
        run.services,
    )
    tap.release_demand()
    if config.faults:
        run.injector = Injector(config.faults, run.servers, run.by_name, run.sim_s, run.say)
        run.injector.start()


def _market_facts(log: KafkaLog, region: str) -> int:
    """How many records the region's market topic holds."""
    ends = region_end_offsets(log, region).get(f"{region}.market") or {}
    return sum(ends.values())


def _until_the_span_is_over(run: LiveRun) -> None:
    cloud, region = run.cloud, run.cloud.region if run.cloud else None
    assert cloud is not None and region is not None
    span_us = run.config.scenario.span_s * 1_000_000
    next_say = time.monotonic() + 15.0
    timeout_s = run.config.scenario.span_s / run.config.speed + run.config.patience_s
    deadline = time.monotonic() + timeout_s
    while not region.ended:
        for service in run.watched():
            service.check()
        _check_faults(run)
        _start_agents(run)
        if run.tap is not None and run.tap.failure is not None:
            raise LiveError(f"the region's facts could not be written: {run.tap.failure}")
        if time.monotonic() > deadline:
            raise LiveError(f"the region did not reach its end within {timeout_s:.0f} s")
        if time.monotonic() >= next_say:
            done_s = (region.now_us() - region.config.start_us) / 1e6
            run.say(f"sim time {done_s / 60:.0f} of {span_us / 6e7:.0f} minutes; "
                    f"{cloud.summary()['servers']} servers")  # fmt: skip
            next_say += 15.0
        time.sleep(0.5)


def _check_faults(run: LiveRun) -> None:
    if run.injector is not None and run.injector.failure is not None:
        raise LiveError(f"a fault could not be injected: {run.injector.failure}")


def _until_the_faults_are_over(run: LiveRun) -> None:
    """Faults still due when the span ended run before the run winds down."""
    injector = run.injector
    if injector is None:
        return

    def over() -> bool:
        _check_faults(run)
        return injector.finished

    wait_until(over, run.config.patience_s, "the faults to be over", run.watched(), every_s=1.0)


def _start_agents(run: LiveRun) -> None:
    """A real agent on each node the scenario chose, once chosen (the tap stops simulating
    that node's agent first)."""
    agents, plan, cloud, tap = run.agents, run.plan, run.cloud, run.tap
    if agents is None or plan is None or cloud is None or tap is None:
        return
    for instance_id, workload_id, pool_id in plan.agent_instances:
        if instance_id not in agents.agents:
            with cloud.region.lock:
                tap.agents.real.add(instance_id)
            run.say(f"starting a real agent on {instance_id} ({workload_id})")
            agents.start(instance_id, workload_id, pool_id)


def _until_settled(run: LiveRun, log: KafkaLog, codec: Codec) -> None:
    """Until the deciders are done with everything the log holds (`deciders_behind`: every
    input sequenced, every journal item routed, every stage record committed by the Faust
    workers, so every decision is on the log), every service runs, nothing arrived for
    `quiet_s` (the actuator and the agents have acted on the last decisions), and the fleet
    state is at the log's end."""
    run.say("the span is over: waiting until the deciders are done with the log, the log is "
            "quiet and the fleet state caught up")  # fmt: skip
    topics = RuntimeTopics(run.region)
    last_ends: list[object] = [None]
    last_change_s = [time.monotonic()]
    behind = ["not asked yet"]

    def settled() -> bool:
        ends = region_end_offsets(log, run.region)
        if ends != last_ends[0] or not all(s.alive() for s in run.watched()):
            last_ends[0], last_change_s[0] = ends, time.monotonic()
            return False
        if time.monotonic() - last_change_s[0] < run.config.quiet_s:
            return False
        try:
            now_behind = deciders_behind(log, codec, topics)
        except LogError as error:
            now_behind = [f"not known ({error})"]
        if now_behind and now_behind != behind:
            run.say(f"quiet, but the deciders are behind: {'; '.join(now_behind[:4])}")
        behind[:] = now_behind
        return not behind and region_end_offsets(log, run.region) == ends

    try:
        wait_until(settled, run.config.patience_s, "the deciders to be done with the log",
                   run.watched(), every_s=1.0)  # fmt: skip
    except LiveError as error:
        raise LiveError(f"{error}; behind: {'; '.join(behind[:8])}", error.hint) from error
    wait_until(lambda: _fleet_caught_up(run), run.config.patience_s,
               "the fleet state to catch up", run.watched(), every_s=2.0)  # fmt: skip


def _fleet_caught_up(run: LiveRun) -> bool:
    """The fleet state's follower at the log's end (`query lag`; the ledger's rows are left
    out: its follower holds the ledger's files between rounds, and its last round is checked
    by `_catch_up` once it stopped)."""
    done = subprocess.run(
        [SPOTCAP, *run.globals(), "query", "lag", "--postgres", run.postgres, "--json"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=run.config.patience_s,
        check=False,
    )
    if done.returncode != 0:
        return False
    rows = [r for r in json.loads(done.stdout) if r["projection"] == "fleet"]
    return bool(rows) and all(r["next_offset"] is not None and r["lag"] == 0 for r in rows)


def _catch_up(run: LiveRun) -> None:
    """Once the followers stopped: `spotcap project`, which applies what they left (nothing,
    when they were at the log's end) and says so."""
    done = subprocess.run(
        [SPOTCAP, *run.globals(), "project", "--postgres", run.postgres],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=run.config.patience_s,
        check=False,
    )
    if done.returncode != 0:
        raise LiveError(f"the projections' last catch-up failed: {done.stderr.strip()[-2000:]}")
    run.lines["catch-up after the followers stopped"] = " ".join(done.stdout.split())


def _stop_services(run: LiveRun) -> None:
    for service in run.watched():
        if service.restarts:
            run.restarts[service.name] = len(service.restarts)
    if run.agents is not None:
        for name, line in run.agents.stop().items():
            if line:
                run.lines[name] = line
    for service in reversed(run.services):
        line = service.stop()
        if line:
            run.lines[service.name] = line
    run.services.clear()


# -- the summary ------------------------------------------------------------------------------


def region_events(log: KafkaLog, codec: Codec, region: str) -> Iterator[Envelope]:
    """Every event of the region's topics, once each (by id), in the merged history's order."""
    seen: set[str] = set()
    for decoded in MergedHistory(log, codec, region, EVENT_TOPICS):
        if decoded.envelope.event_id not in seen:
            seen.add(decoded.envelope.event_id)
            yield decoded.envelope


def summarise(log: KafkaLog, codec: Codec, run: LiveRun) -> dict[str, Any]:
    assert run.cloud is not None
    sim = run.cloud.region.sim
    misbehaving = run.plan.misbehaving_pool_ids if run.plan is not None else ()
    summary = RunSummary(sim.catalogue)
    decisions = DecisionSummary(misbehaving)
    drains: list[Envelope] = []
    logged: set[str] = set()
    for envelope in region_events(log, codec, run.region):
        logged.add(envelope.event_id)
        summary.observe(envelope)
        decisions.observe(envelope)
        if envelope.event_type == "drain_started":
            drains.append(envelope)
    report = summary.report(misbehaving)
    report.update(
        region=run.region,
        seed=run.config.scenario.seed,
        pools=len(sim.catalogue),
        orchestrator="deciders (live)",
        log=f"Kafka at {run.kafka}",
    )
    report["decisions"] = decisions.report()
    cloud = run.cloud.summary()
    report["live"] = {
        "drains": {
            "by real agents": sum(1 for e in drains if e.producer != AGENTS),
            "by simulated agents": sum(1 for e in drains if e.producer == AGENTS),
        },
        "services": dict(run.lines),
        "cloud": {k: cloud[k] for k in ("servers", "requests", "notices_published")},
        "tap_written": run.tap.written if run.tap is not None else 0,
        "tap_missing": len(run.tap.written_ids - logged) if run.tap is not None else 0,
        "tap_rewrites": run.tap.rewrites if run.tap is not None else 0,
    }
    return report


def live_lines(report: dict[str, Any]) -> list[str]:
    """What the live run itself did, for people: its times, the cloud, each service's own
    last words, and where its logs are."""
    live = report["live"]
    cloud = live["cloud"]
    lines = [
        f"live: {live['span_s'] / 60:g} sim minutes at {live['speed']:g}x took "
        f"{live['sim_wall_s']:.0f} s of wall time ({live['wall_s']:.0f} s in all)",
        f"the cloud answered {cloud['requests']:,} requests, published "
        f"{cloud['notices_published']:,} notices and ran {cloud['servers']:,} servers at the end",
        f"the region's own facts written by its tap: {live['tap_written']:,}",
        "drains started: " + ", ".join(f"{n:,} {who}" for who, n in live["drains"].items()),
    ]
    if live["tap_missing"] or live["tap_rewrites"]:
        lines.append(f"facts written again after the broker failed: {live['tap_rewrites']:,}; "
                     f"missing from the log: {live['tap_missing']:,}")  # fmt: skip
    for fault in live.get("faults", []):
        lines.append(f"fault at sim second {fault['began_sim_s']:,}: {fault['target']} "
                     f"{fault['how']} ({fault['lasted_s']:g} s)")  # fmt: skip
    if live.get("restarts"):
        lines.append("restarted by their supervisors: " + ", ".join(
            f"{name} {n}x" for name, n in sorted(live["restarts"].items())))  # fmt: skip
    lines += [f"{name}: {line}" for name, line in sorted(live["services"].items())]
    lines.append(f"servers' data, services' logs and state: {live['folder']}")
    return lines
