"""The `spotcap` command: the root group, its global options, and the table of subcommands,
each imported when it runs (`spotcap.cli.root`)."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import click

from spotcap.cli.root import GlobalOption, LazyCommand, SpotcapGroup
from spotcap.config import ConfigError, Settings
from spotcap.fail import fail

# The subcommands, each imported when it runs (a literal module name: the layering check reads
# it); the help line is the command's own first sentence (tests/test_cli_tree.py holds them
# equal), so `spotcap --help` imports none of their modules.
# fmt: off
LAZY_COMMANDS = {name: LazyCommand(load, short_help) for name, load, short_help in (
    ("agent", lambda: import_module("spotcap.cli.agent").agent,
     "The node agent: notices in, drains out, every step in the spool."),
    ("archive", lambda: import_module("spotcap.cli.archive").archive,
     "The monthly archive: Parquet, a signed Merkle tree, Object Lock (docs/accounting.md)."),
    ("canary", lambda: import_module("spotcap.cli.canary").canary,
     "Canary releases of contract bundles: see them, roll one back."),
    ("cloud", lambda: import_module("spotcap.cli.cloud").cloud,
     "The simulated region served as a cloud: Keystone, Nova, Placement, Blazar, the feeds."),
    ("contracts", lambda: import_module("spotcap.cli.contracts").contracts,
     "Compile, sign and verify interruption contracts (docs/contracts.md)."),
    ("db", lambda: import_module("spotcap.cli.db").db,
     "The fleet-state database (PostgreSQL): migrations and the embedded server."),
    ("demo", lambda: import_module("spotcap.cli.demo").demo,
     "Simulate a region (pools, reclaims, waves, 220 workloads) and write its events to the "
     "log."),
    ("drill", lambda: import_module("spotcap.cli.drill").drill,
     "The daily drill: a share of a pool reclaimed, measured (docs/operating.md)."),
    ("events", lambda: import_module("spotcap.cli.schemas").events,
     "List the event catalogue: every event type, its topic, key and meaning."),
    ("log", lambda: import_module("spotcap.cli.log").log_group,
     "Read events back from the log, and check the embedded log's files for damage."),
    ("notices", lambda: import_module("spotcap.cli.notices").notices,
     "The notice path (docs/agent.md): NATS subjects and the metadata endpoint."),
    ("project", lambda: import_module("spotcap.cli.projections").project,
     "Bring the projections up to date with the log (from the offsets they stored)."),
    ("query", lambda: import_module("spotcap.cli.query").query,
     "SRE queries over the fleet state: pools, rankings, exclusions, instances, workloads, "
     "lag."),
    ("rebuild", lambda: import_module("spotcap.cli.projections").rebuild,
     "Drop a projection and rebuild it from the log through the merged history."),
    ("replay", lambda: import_module("spotcap.cli.replay").replay,
     "Price the history under an accounting rule: the per-workload ledger, or with --diff what "
     "changes against the recorded ledger (recorded, what-if, delta)."),
    ("report", lambda: import_module("spotcap.cli.query").report,
     "Reports for finance: the net saving per workload (docs/accounting.md)."),
    ("run", lambda: import_module("spotcap.cli.streams").run,
     "The live topology's long-running services (docs/operating.md)."),
    ("schemas", lambda: import_module("spotcap.cli.schemas").schemas,
     "Check and release the event schemas (full compatibility, docs/events.md)."),
    ("serve", lambda: import_module("spotcap.cli.serve").serve,
     "Serve the read side over HTTP, read-only: the console at /, the JSON API under /api/v1, "
     "its OpenAPI description at /openapi.json and Prometheus metrics at /metrics."),
    ("topics", lambda: import_module("spotcap.cli.topics").topics,
     "Create and inspect the region's topics (on Kafka or in the embedded log)."),
    ("why", lambda: import_module("spotcap.cli.query").why_command,
     "Why did this happen? The chain of causes behind an instance, a workload or an event, in "
     "plain sentences, oldest first, each with its time and event id."),
)}
# fmt: on

_HOME_HELP = "Data directory holding all state of a run (default $SPOTCAP_HOME, else ./.spotcap)."
_REGION_HELP = "Region name; prefixes topics (default: dev)."
_KAFKA_HELP = (
    "Use Kafka at these bootstrap servers instead of the embedded log "
    "(default $SPOTCAP_KAFKA_BOOTSTRAP)."
)
GLOBAL_OPTIONS = (
    GlobalOption("home", "--home", "DIR", _HOME_HELP),
    GlobalOption("region", "--region", "NAME", _REGION_HELP),
    GlobalOption("kafka_bootstrap", "--kafka", "HOST:PORT", _KAFKA_HELP),
)


@click.group(
    cls=SpotcapGroup,
    lazy=LAZY_COMMANDS,
    global_options=GLOBAL_OPTIONS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="spotcap", message="%(prog)s %(version)s")
@click.option(
    "--home", type=click.Path(path_type=Path), default=None, metavar="DIR", help=_HOME_HELP
)
@click.option("--region", default=None, metavar="NAME", help=_REGION_HELP)
@click.option("--kafka", "kafka_bootstrap", default=None, metavar="HOST:PORT", help=_KAFKA_HELP)
@click.pass_context
def main(
    ctx: click.Context, home: Path | None, region: str | None, kafka_bootstrap: str | None
) -> None:
    """spotcap: interruptible work on reclaimable capacity, kept trustworthy.

    Every notice, placement, drain, loss and fallback is an Avro event on a log (Kafka, or
    Avro files under the data directory when nothing is configured). README.md leads each
    user to their commands; docs/ holds the guides.
    """
    try:
        ctx.obj = Settings.load(home=home, region=region, kafka_bootstrap=kafka_bootstrap)
    except ConfigError as error:
        fail(str(error))


if __name__ == "__main__":
    main()
