"""`spotcap run streams`: the deciders on Kafka, as Faust workers beside the region's one
sequencer (`streams.runtime.service`, docs/deciders.md)."""

from __future__ import annotations

import logging

import click

from schemas.codec import Codec
from spotcap.config import Settings
from spotcap.fail import fail
from streams.log import LogError
from streams.runtime.journal import RuntimeTopics
from streams.runtime.service import ROLES, run_streams


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
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True, help="How much the workers log to stderr.")
@click.pass_obj
def streams_command(settings: Settings, *, role: str, pool_partitions: int,
                    workload_partitions: int, session_timeout_s: float, snapshot_every: int,
                    snapshot_interval_s: float, commit_interval_s: float, log_level: str) -> None:
    # fmt: on
    """Run the deciders on Kafka: the region's sequencer and Faust workers.

    Decisions go to the region's ``decisions`` topic, each under an id derived from its cause:
    after a crash a worker may send a decision again (same id, same bytes); consumers drop
    duplicates by event id. Stop with SIGTERM or Ctrl-C.
    """
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
        run_streams(
            role,
            bootstrap,
            Codec(),
            topics,
            session_timeout_s=session_timeout_s,
            snapshot_every=snapshot_every,
            snapshot_interval_s=snapshot_interval_s,
            commit_interval_s=commit_interval_s,
            log_level=log_level,
        )
    except LogError as error:
        fail(
            f"the deciders of region {settings.region} on Kafka at {bootstrap} stopped: {error}",
            "check that the broker runs and that the partition counts match the existing topics",
        )


def _services() -> None:
    from spotcap.cli.services import actuator, reconciler

    run.add_command(actuator)
    run.add_command(reconciler)


_services()
