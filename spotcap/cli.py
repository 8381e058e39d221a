"""The `spotcap` command line: readable tables for people, `--json` for machines."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from spotcap.cli_root import GlobalOption, LazyCommand, SpotcapGroup
from spotcap.config import ConfigError, Settings
from spotcap.fail import fail

console = Console()
err_console = Console(stderr=True)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


# The subcommands defined in other modules, imported when they run (`spotcap.cli_root`); the
# help line is the command's own first sentence (tests/test_cli_tree.py holds them equal).
# Each loader imports its module with a literal import (the layering check reads them).
def _agent() -> click.Command:
    from spotcap.cli_agent import agent

    return agent


def _contracts() -> click.Command:
    from spotcap.cli_contracts import contracts

    return contracts


def _db() -> click.Command:
    from spotcap.cli_db import db

    return db


def _archive() -> click.Command:
    from spotcap.cli_archive import archive

    return archive


def _demo() -> click.Command:
    from spotcap.demo import demo

    return demo


def _log() -> click.Command:
    from spotcap.cli_log import log_group

    return log_group


def _notices() -> click.Command:
    from spotcap.cli_notices import notices

    return notices


def _project() -> click.Command:
    from spotcap.cli_projections import project

    return project


def _query() -> click.Command:
    from spotcap.cli_query import query

    return query


def _rebuild() -> click.Command:
    from spotcap.cli_projections import rebuild

    return rebuild


def _replay() -> click.Command:
    from spotcap.cli_replay import replay

    return replay


def _run() -> click.Command:
    from spotcap.cli_streams import run

    return run


def _serve() -> click.Command:
    from spotcap.cli_serve import serve

    return serve


def _report() -> click.Command:
    from spotcap.cli_query import report

    return report


def _why() -> click.Command:
    from spotcap.cli_query import why_command

    return why_command


LAZY_COMMANDS = {
    "agent": LazyCommand(
        _agent,
        "The node agent: notices in, drains out, every step in the spool.",
    ),
    "archive": LazyCommand(
        _archive,
        "The monthly archive: Parquet, a signed Merkle tree, Object Lock (docs/accounting.md).",
    ),
    "contracts": LazyCommand(
        _contracts,
        "Compile, sign and verify interruption contracts (ADR-01..04).",
    ),
    "db": LazyCommand(
        _db,
        "The fleet-state database (PostgreSQL): migrations and the embedded server.",
    ),
    "demo": LazyCommand(
        _demo,
        "Simulate a region (pools, reclaims, waves, 220 workloads) and write its events to the "
        "log.",
    ),
    "log": LazyCommand(
        _log,
        "Read events back from the log, and check the embedded log's files for damage.",
    ),
    "notices": LazyCommand(
        _notices,
        "The notice path (ADR-17): NATS subjects and the metadata endpoint.",
    ),
    "project": LazyCommand(
        _project,
        "Bring the projections up to date with the log (from the offsets they stored).",
    ),
    "query": LazyCommand(
        _query,
        "SRE queries over the fleet state: pools, rankings, exclusions, instances, workloads, lag.",
    ),
    "rebuild": LazyCommand(
        _rebuild,
        "Drop a projection and rebuild it from the log through the merged history.",
    ),
    "replay": LazyCommand(
        _replay,
        (
            "Price the history under an accounting rule: the per-workload ledger, or with"
            " --diff what changes against the recorded ledger (recorded, what-if, delta)."
        ),
    ),
    "run": LazyCommand(_run, "Long-running services on Kafka."),
    "serve": LazyCommand(
        _serve,
        "Serve the read side over HTTP, read-only: the console at /, the JSON API under "
        "/api/v1, its OpenAPI description at /openapi.json and Prometheus metrics at /metrics.",
    ),
    "report": LazyCommand(
        _report,
        "Reports for finance: the net saving per workload (ADR-26).",
    ),
    "why": LazyCommand(
        _why,
        "Why did this happen? The chain of causes behind an instance, a workload or an event, "
        "in plain sentences, oldest first, each with its time and event id.",
    ),
}

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
    "--home",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    help=_HOME_HELP,
)
@click.option("--region", default=None, metavar="NAME", help=_REGION_HELP)
@click.option(
    "--kafka",
    "kafka_bootstrap",
    default=None,
    metavar="HOST:PORT",
    help=_KAFKA_HELP,
)
@click.pass_context
def main(
    ctx: click.Context, home: Path | None, region: str | None, kafka_bootstrap: str | None
) -> None:
    """spotcap: interruptible work on reclaimable capacity, kept trustworthy.

    Every notice, placement, drain, loss and fallback is an Avro event on a log (Kafka, or
    Avro files under the data directory when nothing is configured).
    """
    try:
        ctx.obj = Settings.load(home=home, region=region, kafka_bootstrap=kafka_bootstrap)
    except ConfigError as error:
        fail(str(error))


# -- events -----------------------------------------------------------------------------------


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue as JSON.")
def events(as_json: bool) -> None:
    """List the event catalogue: every event type, its topic, key and meaning."""
    _print_catalogue(as_json)


def _print_catalogue(as_json: bool) -> None:
    from schemas.catalogue import event_types
    from schemas.codec import Codec

    types = event_types()
    if as_json:
        _emit_json(
            [
                {
                    "event_type": t.name,
                    "record": t.record_name,
                    "topic": t.topic,
                    "key": t.key,
                    "doc": t.doc,
                    "fields": [f["name"] for f in t.schema["fields"]],
                }
                for t in types
            ]
        )
        return
    table = Table(title=f"spotcap event catalogue ({len(types)} event types)", show_lines=False)
    table.add_column("event type", style="bold")
    table.add_column("topic")
    table.add_column("key")
    table.add_column("fields", justify="right")
    table.add_column("what it records")
    for t in types:
        table.add_row(t.name, t.topic, t.key, str(len(t.schema["fields"])), _first_sentence(t.doc))
    console.print(table)
    console.print(
        f"Envelope fingerprint (CRC-64-AVRO): {Codec().fingerprint:016x}. "
        "Field-level docs: docs/events.md."
    )


# -- schemas ----------------------------------------------------------------------------------


@main.group()
def schemas() -> None:
    """Check and release the event schemas (full compatibility, DESIGN.md §3)."""


@schemas.command("check")
@click.option(
    "--schemas",
    "schema_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Check the .avsc files in this folder instead of the installed catalogue.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def schemas_check(schema_dir: Path | None, as_json: bool) -> None:
    """Refuse a schema change that is not fully compatible with the last released version.

    A reader of the new schema must read records of the released one, and a reader of the
    released one must read records of the new one (new event types may be added).
    Exits 1 when the change is incompatible.
    """
    from schemas.catalogue import CatalogueError, envelope_schema, load_schema_dir
    from schemas.compat import check_against_released

    try:
        current = load_schema_dir(schema_dir) if schema_dir else envelope_schema()
    except CatalogueError as error:
        fail(str(error), "fix the schema file named above")
    result = check_against_released(current)
    if as_json:
        report = {
            "compatible": result.compatible,
            "released_version": result.released_version,
            "changed": result.changed,
            "added_event_types": list(result.added_event_types),
            "problems": [str(p) for p in result.problems],
        }
        if not result.compatible:
            fail("incompatible", json_report=report)
        _emit_json(report)
    elif result.compatible:
        version = result.released_version
        if version is None:
            console.print("No released schema yet: run `spotcap schemas release`.")
        elif not result.changed:
            console.print(f"[green]ok[/]: the schemas match released version {version}.")
        else:
            added = ", ".join(result.added_event_types) or "none"
            console.print(
                f"[green]ok[/]: fully compatible with released version {version} "
                f"(new event types: {added}). Record it with `spotcap schemas release`."
            )
    else:
        for problem in result.problems:
            err_console.print(f"  - {problem}", highlight=False, soft_wrap=True)
        fail(
            f"the schemas are incompatible with released version {result.released_version} "
            f"({len(result.problems)} problems above)",
            "give new fields a default, keep removed fields' defaults, never change a field's "
            "type or remove an event type, rename by expand/contract; see "
            "docs/events.md#evolution",
        )


@schemas.command("release")
@click.option(
    "--released-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    hidden=True,  # for tests: release somewhere other than the package's schemas/released/
    help="Release into this folder instead of the package's schemas/released/.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the version and file as JSON.")
def schemas_release(released_dir: Path | None, as_json: bool) -> None:
    """Record the current schemas as the next released version (schemas/released/).

    An unchanged schema is not released again: the newest version is reported as it is.
    """
    from schemas.catalogue import envelope_schema
    from schemas.codec import RELEASED_DIR
    from schemas.compat import release, released_versions

    folder = released_dir or RELEASED_DIR
    before = released_versions(folder)
    try:
        version, path = release(envelope_schema(), folder)
    except ValueError as error:
        fail(str(error), json_report={"ok": False, "error": str(error)} if as_json else None)
    new_version = not before or version != before[-1][0]
    if as_json:
        _emit_json({"ok": True, "version": version, "path": str(path), "new": new_version})
        return
    if new_version:
        console.print(f"released schema version {version}: {path}")
    else:
        console.print(f"unchanged since released schema version {version}: {path}")


# -- topics -----------------------------------------------------------------------------------


@main.group()
def topics() -> None:
    """Create and inspect the region's topics (on Kafka or in the embedded log)."""


@topics.command("apply")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
@click.pass_obj
def topics_apply(settings: Settings, as_json: bool) -> None:
    """Create missing topics and bring existing ones to their configuration; idempotent."""
    from spotcap.wiring import describe_log, open_log
    from streams.log import LogError
    from streams.topics import region_topics

    specs = region_topics(settings.region)
    try:
        log = open_log(settings)
        changes = log.apply_topics(specs)
    except LogError as error:
        fail(str(error))
    if as_json:
        _emit_json([{"topic": c.name, "action": c.action, "detail": c.detail} for c in changes])
        return
    by_name = {s.name: s for s in specs}
    table = Table(title=f"topics of region {settings.region} ({describe_log(settings)})")
    for column in ("topic", "partitions", "retention", "cleanup", "action", "detail"):
        table.add_column(column)
    for change in changes:
        spec = by_name[change.name]
        retention = "forever" if spec.retention_ms < 0 else f"{spec.retention_ms // 86_400_000} d"
        table.add_row(
            change.name,
            str(spec.partitions),
            retention,
            "compact" if spec.compacted else "delete",
            change.action,
            change.detail,
        )
    console.print(table)


@topics.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the topics as JSON.")
@click.pass_obj
def topics_list(settings: Settings, as_json: bool) -> None:
    """Show the region's topics: partitions, end offsets (the next offset each partition
    writes; their sum is the records written) and whether the last run writing the region
    finished. Damage inside the files does not show here: `spotcap log verify` finds it."""
    from spotcap.runs import last_run
    from spotcap.wiring import describe_log, open_log
    from streams.log import LogError, UnknownTopicError
    from streams.topics import region_topics

    rows: list[dict[str, Any]] = []
    run = last_run(settings, settings.region)
    run_json = None if run is None else {**asdict(run), "state": run.state}
    try:
        log = open_log(settings)
        for spec in region_topics(settings.region):
            try:
                ends = log.end_offsets(spec.name)
            except UnknownTopicError:  # a log that cannot be reached is an error, not "missing"
                ends = None
            rows.append(
                {
                    "topic": spec.name,
                    "exists": ends is not None,
                    "partitions": len(ends or {}),
                    "records": sum((ends or {}).values()),
                    "end_offsets": {str(p): o for p, o in (ends or {}).items()},
                    "last_run": run_json,
                }
            )
    except LogError as error:
        fail(str(error))
    if as_json:
        _emit_json(rows)
        return
    table = Table(title=f"topics of region {settings.region} ({describe_log(settings)})")
    table.add_column("topic")
    table.add_column("partitions", justify="right")
    table.add_column("end offsets (sum)", justify="right")
    table.add_column("end offset per partition")
    for row in rows:
        if row["exists"]:
            per = " ".join(f"{o:,}" for o in row["end_offsets"].values())
            table.add_row(str(row["topic"]), str(row["partitions"]), f"{row['records']:,}", per)
        else:
            table.add_row(str(row["topic"]), "-", "missing: run `spotcap topics apply`", "")
    console.print(table)
    if run is None:
        console.print(f"no run has written region {settings.region} from this home yet")
    elif run.state == "killed":
        console.print(f"[bold red]unfinished run[/]: {run.describe()}", soft_wrap=True)
    elif run.state == "failed":
        console.print(f"[yellow]failed run[/]: {run.describe()}", soft_wrap=True)
    else:
        console.print(run.describe(), highlight=False, soft_wrap=True)


if __name__ == "__main__":
    main()
