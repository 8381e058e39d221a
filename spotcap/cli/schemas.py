"""`spotcap events` and `spotcap schemas`: the event catalogue, and the schemas' full
compatibility check and release (docs/events.md)."""

from __future__ import annotations

from pathlib import Path

import click

from spotcap.cli.output import console, emit_json, say, show, table
from spotcap.fail import fail


@click.command("events")
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue as JSON.")
def events(as_json: bool) -> None:
    """List the event catalogue: every event type, its topic, key and meaning."""
    from schemas.catalogue import CATALOGUE_COLUMNS, event_types
    from schemas.codec import Codec

    types = event_types()
    if as_json:
        emit_json([t.as_json() for t in types])
        return
    catalogue = table(
        f"spotcap event catalogue ({len(types)} event types)",
        CATALOGUE_COLUMNS,
        (t.row() for t in types),
        right=("fields",),
    )
    catalogue.columns[0].style = "bold"
    show(catalogue)
    console.print(
        f"Envelope fingerprint (CRC-64-AVRO): {Codec().fingerprint:016x}. "
        "Field-level docs: docs/events.md."
    )


@click.group("schemas")
def schemas() -> None:
    """Check and release the event schemas (full compatibility, docs/events.md)."""


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
    from schemas.compat import EVOLVE_FIX, check_against_released

    try:
        current = load_schema_dir(schema_dir) if schema_dir else envelope_schema()
    except CatalogueError as error:
        fail(str(error), "fix the schema file named above")
    result = check_against_released(current)
    if as_json:
        report = result.as_json()
        if not result.compatible:
            fail("incompatible", json_report=report)
        emit_json(report)
    elif result.compatible:
        ok = "" if result.released_version is None else "[green]ok[/]: "
        console.print(f"{ok}{result.summary()}")
    else:
        for problem in result.problems:
            say(f"  - {problem}", err=True)
        fail(
            f"the schemas are incompatible with released version {result.released_version} "
            f"({len(result.problems)} problems above)",
            EVOLVE_FIX,
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
    from schemas.compat import release_report

    try:
        report = release_report(envelope_schema(), released_dir or RELEASED_DIR)
    except ValueError as error:
        fail(str(error), json_report={"ok": False, "error": str(error)} if as_json else None)
    if as_json:
        emit_json(report)
        return
    done = "released" if report["new"] else "unchanged since released"
    console.print(f"{done} schema version {report['version']}: {report['path']}")
