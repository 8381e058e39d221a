"""`spotcap archive`: export a month (Parquet, signed Merkle tree head, Object Lock), verify an
archive offline, prove one event's inclusion and check such a proof (docs/accounting.md).

Where the archive is: ``--archive`` (a directory, or ``s3://BUCKET/PREFIX``), else
$SPOTCAP_ARCHIVE, else ``<home>/archive``. S3's endpoint and credentials come from boto3's own
settings (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...).
"""

from __future__ import annotations

import json
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import click

from contracts.signing import SigningError
from projections.ledger.store import LedgerError
from projections.stores import StoreError
from replay.archive import layout
from replay.archive.export import export_from_log
from replay.archive.proof import check_proof, prove
from replay.archive.storage import ArchiveError
from replay.archive.verify import MonthReport, failure_sentence, verify_archive
from spotcap.cli.options import (
    archive_option,
    need_home,
    open_signer,
    read_public_key,
    signer_options,
)
from spotcap.cli.output import emit_json, say, show, spinner, table
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.home import hold_home
from spotcap.wiring import make_codec, open_archive, open_log, open_log_and_codec, stores
from streams.log import LogError

public_key_option = click.option(
    "--public-key",
    "public_key_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The signer's public key (PEM, 32 raw bytes or their base64): the one key you trust.",
)


def _month(value: str) -> str:
    try:
        return layout.check_month(value)
    except ValueError as error:
        fail(str(error), usage=True)


@click.group("archive")
def archive() -> None:
    """The monthly archive: Parquet, a signed Merkle tree, Object Lock (docs/accounting.md)."""


# fmt: off
@archive.command("export")
@click.option("--month", required=True, help="The month to archive, YYYY-MM (UTC).")
@archive_option
@signer_options
@click.option("--json", "as_json", is_flag=True, help="Print what was archived as JSON.")
@click.pass_obj
def export_command(settings: Settings, *, month: str, location: str | None, key_file: Path | None,
                   transit_key: str | None, transit_mount: str, as_json: bool) -> None:
    # fmt: on
    """Archive one month: its events and cost lines as Parquet, a manifest with every file's
    SHA-256, the Merkle tree head over the events signed and chained to the previous month,
    written with Object Lock (compliance mode, 7 years) when the archive is on S3.

    The ledger is brought up to date with the log first, so the cost lines are complete.
    """
    month = _month(month)
    need_home(settings, log=True, ledger=True)
    hold_home(settings)
    signer = open_signer(key_file, transit_key, transit_mount)
    if signer is None:
        fail(
            "the archive's tree heads are signed: give --key KEYFILE or --transit-key NAME",
            "create a key with `spotcap contracts keygen --out FILE`",
            usage=True,
        )
    try:
        storage = open_archive(settings, location, create=True)
        with closing(open_log(settings)) as log, spinner("", quiet=as_json) as step:
            task = step.add_task("starting", total=None)
            done = export_from_log(
                storage,
                signer,
                log=log,
                codec=make_codec(settings),
                region=settings.region,
                stores=stores(settings),
                month=month,
                on_step=lambda s: step.update(task, description=s),
                opener=partial(open_log_and_codec, settings),  # the history read in workers
            )
    except (ArchiveError, StoreError, LedgerError, LogError, SigningError) as error:
        fail(str(error))
    if as_json:
        emit_json({**done.as_json(), "archive": storage.describe(), "signed_by": signer.key_id})
        return
    said = done.describe(storage.describe(), signer.key_id, locked=storage.enforces_retention)
    say(said, markup=False)


# -- verify ---------------------------------------------------------------------------------


@archive.command("verify")
@click.option("--month", default=None, help="Check this month only (YYYY-MM); default all.")
@click.option("--through", default=None, metavar="YYYY-MM",
              help="The month the archive must reach (a deleted newest month is found so).")
@public_key_option
@archive_option
@click.option("--json", "as_json", is_flag=True, help="Print every finding as JSON.")
@click.pass_obj
def verify_command(
    settings: Settings,
    *,
    month: str | None,
    through: str | None,
    public_key_file: Path,
    location: str | None,
    as_json: bool,
) -> None:
    """Check the archive with only the archive and the public key (no database, no log):
    every file's SHA-256, the signatures, the Merkle trees, the chain between months, the
    signed head (the newest month) and the Object Lock retention. Exit 1 and name exactly what
    is wrong if anything is."""
    public_key = read_public_key(public_key_file)
    month = _month(month) if month else None
    through = _month(through) if through else None
    if month and through:
        fail("--month checks one month and --through the whole archive: give one", usage=True)
    try:
        storage = open_archive(settings, location)
        with spinner("", quiet=as_json) as step:
            task = step.add_task("verifying", total=None)
            reports = verify_archive(
                storage,
                public_key,
                settings.region,
                month,
                on_month=lambda m: step.update(task, description=f"verifying {m}"),
                through=through,
            )
    except ArchiveError as error:
        fail(str(error))
    ok = all(r.ok for r in reports)
    if as_json:
        report = {
            "ok": ok,
            "archive": storage.describe(),
            "region": settings.region,
            "months": [r.as_json() for r in reports],
        }
        if not ok:
            fail(failure_sentence(reports), json_report=report)
        emit_json(report)
        return

    def result(r: MonthReport) -> str:
        return f"[red]{r.result()}[/]" if r.problems else f"[green]{r.result()}[/]"

    title = f"{storage.describe()}, region {settings.region}"
    rows = ((r.month, f"{r.events:,}", result(r)) for r in reports)
    show(table(title, ("month", "events", "result"), rows, right=("events",)))
    for r in reports:
        for f in r.findings:
            say(f"{'[red]problem[/]' if f.error else '[dim]note[/]'} {f}")
    if not ok:
        fail(failure_sentence(reports), "each problem above names the file and what changed")


# -- proofs ---------------------------------------------------------------------------------


@archive.command("prove")
@click.argument("event_id")
@click.option("--month", required=True, help="The month the event occurred in (YYYY-MM).")
@archive_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the proof to this file (default: standard output).",
)
@click.pass_obj
def prove_command(
    settings: Settings, event_id: str, month: str, location: str | None, out: Path | None
) -> None:
    """Print the inclusion proof of one event (JSON): its bytes, its audit path to the month's
    Merkle tree head, and the signed manifest. `spotcap archive check-proof` checks it."""
    month = _month(month)
    try:
        proof = prove(open_archive(settings, location), settings.region, month, event_id)
    except ArchiveError as error:
        fail(str(error))
    text = json.dumps(proof, indent=2, sort_keys=True) + "\n"
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        say(f"wrote the proof of {event_id} to {out}", markup=False, err=True)


@archive.command("check-proof")
@click.argument("proof_file", type=click.File("r", encoding="utf-8"))
@public_key_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def check_proof_command(proof_file: Any, public_key_file: Path, as_json: bool) -> None:
    """Check an inclusion proof (a file, or - for standard input) against the public key:
    the manifest's signature, then the event's path to the signed tree head. Exit 1 if not."""
    public_key = read_public_key(public_key_file)
    try:
        proof = json.load(proof_file)
    except ValueError as error:
        fail(f"{proof_file.name} is not JSON: {error}", "give a file written by `archive prove`")
    result = check_proof(proof if isinstance(proof, dict) else {}, public_key)
    if as_json:
        report = {"ok": result.ok, "message": result.message, "event": result.event}
        if not result.ok:
            fail(result.message, json_report=report)
        emit_json(report)
    elif result.ok:
        what = result.event
        extra = f" ({what['event_type']} at {what['occurred_at']})" if what.get("decoded") else ""
        say(f"[green]proof holds[/]: {result.message}{extra}")
    else:
        fail(f"the proof fails: {result.message}", "ask for a new proof with `archive prove`")
