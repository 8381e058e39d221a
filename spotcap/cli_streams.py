"""``spotcap run streams``: the deciders on Kafka, as Faust workers (docs/deciders.md).

    spotcap --kafka HOST:PORT --region eu1 run streams                 # sequencer + one worker
    spotcap --kafka HOST:PORT --region eu1 run streams --role worker   # one more worker
    spotcap --kafka HOST:PORT --region eu1 run streams --role sequencer

A region has exactly one sequencer (the default role ``all`` runs it beside a worker) and as
many workers as its stage partitions can use; workers share the stage partitions as one Kafka
consumer group and take over a stopped or killed worker's partitions from its tables.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import click

from schemas.codec import Codec
from spotcap.config import Settings
from spotcap.fail import fail
from streams.log import LogError
from streams.runtime.journal import RuntimeTopics
from streams.runtime.sequencer import prepare, run_sequencer

ROLES = ("all", "sequencer", "worker")


@click.group("run")
def run() -> None:
    """Long-running services on Kafka."""


@run.command("streams")
@click.option(
    "--role",
    type=click.Choice(ROLES),
    default="all",
    show_default=True,
    help="all: the region's sequencer and one worker; sequencer or worker: only that "
    "(one sequencer per region, any number of workers).",
)
@click.option(
    "--pool-partitions",
    type=click.IntRange(1, 256),
    default=3,
    show_default=True,
    help="Partitions of the stage topic keyed by pool (fixed once the region's topics exist).",
)
@click.option(
    "--workload-partitions",
    type=click.IntRange(1, 256),
    default=3,
    show_default=True,
    help="Partitions of the stage topic keyed by workload (fixed once the topics exist).",
)
@click.option(
    "--session-timeout-s",
    type=click.FloatRange(6.0, 300.0),
    default=30.0,
    show_default=True,
    help="Seconds before the group gives a silent (killed) worker's partitions to the others.",
)
@click.option(
    "--snapshot-every",
    type=click.IntRange(1, None),
    default=5000,
    show_default=True,
    help="Journal positions between two snapshots of a stage partition into its table.",
)
@click.option(
    "--snapshot-interval-s",
    type=click.FloatRange(0.1, 3600.0),
    default=10.0,
    show_default=True,
    help="Seconds between two snapshots of a stage partition that has moved.",
)
@click.option(
    "--commit-interval-s",
    type=click.FloatRange(0.1, 60.0),
    default=2.8,
    show_default=True,
    help="Seconds between two commits of the offsets the stored snapshots cover.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="How much the workers log to stderr.",
)
@click.pass_obj
def streams_command(
    settings: Settings,
    *,
    role: str,
    pool_partitions: int,
    workload_partitions: int,
    session_timeout_s: float,
    snapshot_every: int,
    snapshot_interval_s: float,
    commit_interval_s: float,
    log_level: str,
) -> None:
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
        settings.region,
        pool_partitions=pool_partitions,
        workload_partitions=workload_partitions,
    )
    codec = Codec()
    try:
        prepare(bootstrap, codec, topics)
    except LogError as error:
        fail(
            f"Could not prepare the region's topics on Kafka at {bootstrap}: {error}",
            "check that the broker runs and that the partition counts match the existing topics",
        )
    if role == "sequencer":
        _run_sequencer_until_signal(bootstrap, codec, topics)
        return
    from streams.runtime.faust_app import FaustConfig, run_worker  # Faust loads slowly

    config = FaustConfig(
        bootstrap,
        topics,
        codec=codec,
        session_timeout_s=session_timeout_s,
        snapshot_every=snapshot_every,
        snapshot_interval_s=snapshot_interval_s,
        commit_interval_s=commit_interval_s,
        log_level=log_level,
    )
    if role == "worker":
        run_worker(config)
        return
    stop = threading.Event()
    sequencer = threading.Thread(
        target=_sequence, args=(bootstrap, codec, topics, stop), name="sequencer", daemon=True
    )
    sequencer.start()
    try:
        run_worker(config)  # until SIGTERM/SIGINT (Faust's worker handles both)
    finally:
        stop.set()
        sequencer.join(timeout=30.0)


def _sequence(bootstrap: str, codec: Codec, topics: RuntimeTopics, stop: threading.Event) -> None:
    try:
        run_sequencer(bootstrap, codec, topics, should_stop=stop.is_set)
    except Exception:  # the thread's death must be seen: stop the process, loudly
        logging.getLogger("spotcap.runtime.sequencer").exception("the sequencer stopped")
        signal.raise_signal(signal.SIGTERM)


def _run_sequencer_until_signal(bootstrap: str, codec: Codec, topics: RuntimeTopics) -> None:
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        run_sequencer(bootstrap, codec, topics, should_stop=stop.is_set)
    except LogError as error:
        fail(f"The sequencer of region {topics.region} stopped: {error}")
