"""`spotcap run`, the long-running services of the live topology (docs/operating.md):
`streams`, the deciders on Kafka, as Faust workers beside the region's one sequencer
(`streams.runtime.service`, docs/deciders.md); `intake`, claims for the schedulers' pending work
(`streams.intake.service.serve`); `projections`, the fleet state and the ledger following the
log (`projections.follow.serve`); `relay`, the outbox's capacity actions to the audit topic
(`projections.relay.serve`)."""

from __future__ import annotations

import logging
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import click

from contracts.approvals import KeyringError
from schemas.codec import Codec
from spotcap.cli.options import need_home, postgres_option, with_postgres
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.home import hold_home
from spotcap.wiring import make_codec, open_log, open_log_and_codec, stores
from streams.log import LogError
from streams.runtime.journal import RuntimeTopics
from streams.runtime.service import ROLES, decider_settings, run_streams


@click.group("run")
def run() -> None:
    """The live topology's long-running services (docs/operating.md)."""


# fmt: off
@run.command("streams")
@click.option("--role", type=click.Choice(ROLES), default="all", show_default=True,
              help="all: the region's sequencer and one worker; sequencer or worker: only that "
              "(one sequencer per region, any number of workers).")
@click.option("--pool-partitions", type=click.IntRange(1, 256), default=3, show_default=True,
              help="Partitions of the stage topic keyed by pool (fixed once the region's topics "
              "exist).")
@click.option("--workload-partitions", type=click.IntRange(1, 256), default=3, show_default=True,
              help="Partitions of the stage topic keyed by workload (fixed once the topics "
              "exist).")
@click.option("--session-timeout-s", type=click.FloatRange(6.0, 300.0), default=30.0,
              show_default=True,
              help="Seconds before the group gives a silent (killed) worker's partitions to the "
              "others.")
@click.option("--snapshot-every", type=click.IntRange(1, None), default=5000, show_default=True,
              help="Journal positions between two snapshots of a stage partition into its table.")
@click.option("--snapshot-interval-s", type=click.FloatRange(0.1, 3600.0), default=10.0,
              show_default=True,
              help="Seconds between two snapshots of a stage partition that has moved.")
@click.option("--commit-interval-s", type=click.FloatRange(0.1, 60.0), default=2.8,
              show_default=True,
              help="Seconds between two commits of the offsets the stored snapshots cover.")
@click.option("--stall-s", type=click.FloatRange(5.0, 3600.0), help="Seconds a worker may "
              "leave records undelivered before it exits for its supervisor to start it again "
              "(default: four session timeouts, at least 60).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True, help="How much the workers log to stderr.")
@click.option("--keyring", type=click.Path(dir_okay=False, path_type=Path),
              envvar="SPOTCAP_KEYRING", help="Keys a raised floor or cap, or a new approver, "
              "must be signed by (spotcap.keyring/v1, as for contracts compile); the "
              "sequencer records them in the journal, where the workers read them.")
@click.pass_obj
def streams_command(settings: Settings, /, *, role: str, pool_partitions: int,
                    workload_partitions: int, log_level: str, keyring: Path | None,
                    **worker: Any) -> None:
    # fmt: on
    """Run the deciders on Kafka: the region's sequencer and Faust workers.

    Decisions go to the region's ``decisions`` topic, each under an id derived from its cause:
    after a crash a worker may send a decision again (same id, same bytes); consumers drop
    duplicates by event id. Stop with SIGTERM or Ctrl-C.
    """
    try:
        worker["settings"] = decider_settings(keyring)
    except KeyringError as error:
        fail(str(error), "give --keyring a spotcap.keyring/v1 file (docs/security.md)")
    bootstrap = settings.kafka_bootstrap
    if bootstrap is None:
        fail(
            "spotcap run streams needs Kafka and none is configured.",
            "pass --kafka HOST:PORT (or set SPOTCAP_KAFKA_BOOTSTRAP); without Kafka the "
            "deciders run embedded in `spotcap demo`",
            usage=True,
        )
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    topics = RuntimeTopics(
        settings.region, pool_partitions=pool_partitions, workload_partitions=workload_partitions
    )
    try:
        # `worker`: the Faust worker's session timeout, snapshot and commit intervals
        run_streams(role, bootstrap, Codec(), topics, log_level=log_level, **worker)
    except LogError as error:
        fail(
            f"the deciders of region {settings.region} on Kafka at {bootstrap} stopped: {error}",
            "check that the broker runs and that the partition counts match the existing topics",
        )


# fmt: off
@run.command("intake")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Watch the pods of this kubeconfig's cluster.")
@click.option("--slurmrestd", metavar="unix:PATH", help="Poll the slurmrestd on this socket.")
@click.option("--cluster", default="default", show_default=True,
              help="The cluster's name in claims (Kubernetes and Slurm alike).")
@click.option("--poll-interval-s", type=click.FloatRange(0.5, 3600), default=5.0,
              show_default=True, help="Seconds between two polls of slurmrestd.")
@click.pass_obj
def intake_command(settings: Settings, /, **options: Any) -> None:
    """Write capacity claims for pending pods and Slurm jobs with a contract, until SIGTERM."""
    from streams.intake.service import IntakeError, serve

    with closing(open_log(settings, service=True)) as event_log:
        try:
            report = serve(event_log, make_codec(settings), settings.region, **options)
        except IntakeError as error:
            fail(str(error), "docs/operating.md says how to run the intake", usage=error.usage)
    click.echo(report.describe())


# fmt: off
@run.command("projections")
@click.argument("what", type=click.Choice(["all", "fleet", "ledger"]), default="all",
                required=False)
@postgres_option
@click.option("--interval-s", type=click.FloatRange(0.1, 3600), default=2.0, show_default=True,
              help="Seconds between two catch-up rounds of the ledger.")
@click.pass_obj
def projections_command(settings: Settings, what: str, postgres_dsn: str | None,
                        interval_s: float) -> None:
    # fmt: on
    """Keep the projections up to date with the log as it grows, until SIGTERM.

    WHAT is fleet (PostgreSQL, a consumer group: on Kafka several followers share it), ledger
    (ClickHouse, a catch-up round every --interval-s: one per region) or all (the default).
    `spotcap project` does the same once and stops.
    """
    from projections.catchup import PROJECTIONS
    from projections.follow import serve
    from projections.ledger.store import LedgerError
    from projections.postgres.connection import FleetDatabaseError
    from projections.stores import StoreError

    settings = need_home(with_postgres(settings, postgres_dsn), log=True)
    hold_home(settings)
    with closing(open_log(settings)) as event_log:  # the ledger's rounds: in a child (chdb)
        try:
            report = serve(event_log, make_codec(settings), settings.region, stores(settings),
                           PROJECTIONS[what], interval_s=interval_s,
                           ledger_opener=partial(open_log_and_codec, settings))
        except (StoreError, FleetDatabaseError, LedgerError, LogError) as error:
            fail(f"the projections of region {settings.region} stopped: {error}")
    click.echo(report.describe())


# fmt: off
@run.command("relay")
@postgres_option
@click.option("--once", is_flag=True,
              help="Send what is pending, then stop (for a timer instead of a service).")
@click.option("--interval-s", type=click.FloatRange(0.1, 3600), default=1.0, show_default=True,
              help="Seconds between two looks at the outbox when nothing is pending.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=500, show_default=True,
              help="Actions sent and marked in one transaction.")
@click.pass_obj
def relay_command(settings: Settings, postgres_dsn: str | None, once: bool, interval_s: float,
                  batch_size: int) -> None:
    # fmt: on
    """Send the fleet state's capacity actions to the region's audit topic, until SIGTERM.

    An action is marked sent once the log has acknowledged it; a relay killed in between sends
    it again on restart, under the same action id.
    """
    from projections.postgres.connection import FleetDatabaseError
    from projections.relay import RelayError, serve
    from projections.stores import StoreError

    settings = need_home(with_postgres(settings, postgres_dsn), fleet=True)
    hold_home(settings)
    with closing(open_log(settings)) as event_log:
        try:
            with closing(stores(settings).open_fleet()) as conn:
                report = serve(event_log, conn, settings.region, once=once, interval_s=interval_s,
                               batch_size=batch_size)
        except (StoreError, FleetDatabaseError, RelayError, LogError) as error:
            fail(f"the outbox relay of region {settings.region} stopped: {error}")
    click.echo(f"audit: {report.sent} actions sent, {report.pending} pending")


def _services() -> None:
    from spotcap.cli.services import actuator, bundles, reconciler

    for command in (actuator, reconciler, bundles):
        run.add_command(command)


_services()
