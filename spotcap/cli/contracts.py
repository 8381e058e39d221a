"""`spotcap contracts`: compile, sign and verify interruption contracts (docs/contracts.md).

``compile`` writes nothing unless every contract is accepted, so a broken change can never
withdraw a published workload from admission; it exits 1 and prints each error as
``file:line: field: what is wrong (fix: how)``. Neither ``--unchecked`` nor ``--unsigned``
contracts are ever published. Everything that can still fail (signing, encoding and publishing
the events) happens before the first file is written. The command reads the clock once, for
the events' time (``--published-at`` to fix it); the compiler itself never does.
"""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table

from contracts.approvals import KeyringError, load_change_control, sign_contract_file
from contracts.bundles import BundleError, verify_bundle
from contracts.compiler import CompileResult, ContractFileError, compile_contracts, contract_files
from contracts.feasibility import FeasibilityEnv
from contracts.flags import NO_SIGNER, compile_flag_refusal
from contracts.output import render_outputs, write_rendered
from contracts.pool_file import POOL_FILE_HINT, PoolFileError, load_pools
from contracts.published import DEFAULT_NAMESPACE, PUBLISHED_JSON
from contracts.signing import SigningError, key_id_of, key_pair_json, write_key_pair
from schemas.contracts.model import parse_epoch_us
from schemas.contracts.units import UnitError, parse_size_bytes
from spotcap.cli.options import open_signer, read_public_key, signer_options
from spotcap.cli.output import emit_json, say, show, table
from spotcap.config import ConfigError, Settings
from spotcap.fail import fail

if TYPE_CHECKING:
    from schemas.codec import Codec


def _settings(ctx: click.Context) -> Settings:
    """The main CLI's settings when registered under it, else loaded from the environment."""
    found = ctx.find_object(Settings)
    if found is not None:
        return found
    try:
        return Settings.load()
    except ConfigError as error:
        fail(str(error))


def _positive_size_bytes(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    """An option's size (``50 MB`` or a number of bytes) as bytes; a usage error unless > 0."""
    try:
        size = parse_size_bytes(value)
    except UnitError as error:
        raise click.BadParameter(f"{error.message} ({error.fix})") from error
    if size <= 0:
        raise click.BadParameter(f"{value!r} is not more than 0 bytes")
    return size


@click.group("contracts")
def contracts() -> None:
    """Compile, sign and verify interruption contracts (docs/contracts.md)."""


# -- compile ----------------------------------------------------------------------------------


def _checked_codec(settings: Settings, result: CompileResult, publish: bool) -> Codec:
    """The codec to publish with, once every ``contract_published`` event has been encoded
    with it, or a clean error before anything is written.

    Without ``--publish`` the events are checked with the local codec (no registry).
    """
    from schemas.codec import Codec
    from schemas.errors import CodecError
    from schemas.registry import RegistryError
    from spotcap.wiring import make_codec

    try:
        codec = make_codec(settings) if publish else Codec()
        for envelope in result.events:
            codec.encode(envelope)
    except (CodecError, RegistryError) as error:
        fail(f"the contract_published events cannot be encoded: {error}; nothing was written")
    return codec


def _publish(settings: Settings, result: CompileResult, codec: Codec) -> int:
    """Write the events through the one write path (`streams.writer`: each event to its type's
    topic, the writer schema on the schemas topic first); return how many."""
    from spotcap.wiring import describe_log, open_log
    from streams.log import LogError
    from streams.writer import publish

    try:
        with closing(open_log(settings)) as log:
            return publish(log, codec, settings.region, result.events)
    except LogError as error:
        fail(f"publishing to {describe_log(settings)} failed: {error}; nothing was written")


def _table(result: CompileResult) -> Table:
    rows = [(*r[:4], "[green]accepted[/]" if r[4] is None else f"[red]refused[/] ({r[4]} errors)")
            for r in result.rows()]  # fmt: skip
    out = table("interruption contracts", ("file", "workload", "tier", "scheduler", "result"), rows)
    out.columns[0].overflow = "fold"
    return out


def _published_at_us(published_at: str | None) -> int:
    if published_at is None:
        return time.time_ns() // 1000
    try:
        return parse_epoch_us(published_at)
    except ValueError:
        fail(f"--published-at {published_at!r} is not an ISO 8601 timestamp with a timezone",
             "write it like 2026-11-30T09:00:00Z", usage=True)  # fmt: skip


def _change_control(files: dict[Path, bytes], out_dir: Path, keyring: Path | None) -> Any:
    try:
        return load_change_control(files, out_dir / PUBLISHED_JSON, keyring)
    except KeyringError as error:
        fail(str(error), "fix the keyring (format spotcap.keyring/v1) or the file named")


# fmt: off
@contracts.command("compile")
@click.argument("contract_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                metavar="DIR")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Bundle directory: <workload>.bundle.json and the admission lists are "
              "written here.")
@click.option("--pools", "pools_file",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Pool catalogue file (format spotcap.pools/v1, YAML or JSON, e.g. "
              "examples/region/demo-region.yaml) for rules (c) and (d). Required unless "
              "--unchecked.")
@click.option("--unchecked", is_flag=True,
              help="Without --pools, write the bundles anyway with rules (c) "
              "floor-within-committed and (d) rate-diversifiable not checked (recorded in "
              "published-contracts.json): for trying contracts out before a pool catalogue "
              "exists.")
@signer_options
@click.option("--unsigned", is_flag=True,
              help="Without --key or --transit-key, write the bundles unsigned (every node "
              "refuses them) and the admission lists anyway: for trying contracts out. Never "
              "published.")
@click.option("--store-throughput", default="50 MB", metavar="SIZE", callback=_positive_size_bytes,
              show_default=True,
              help="Checkpoint store write throughput of one writer, per second (bytes or e.g. "
              "'50 MB'; more than 0).")
@click.option("--publish", is_flag=True, help="Write contract_published events to the log.")
@click.option("--published-at", help="Event time (ISO 8601 with timezone); default: now.")
@click.option("--source-commit", help="Commit of the contract repository the files come from.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
              help="Namespace of the spotcap-published-contracts ConfigMap.")
@click.option("--keyring", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Owners' and higher authorities' public keys (spotcap.keyring/v1): a raised "
              "floor or cap or a new approver needs both signatures (docs/contracts.md).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def compile_command(ctx: click.Context, *, contract_dir: Path, out_dir: Path, keyring: Path | None,
                    pools_file: Path | None, unchecked: bool, key_file: Path | None,
                    transit_key: str | None, transit_mount: str, unsigned: bool,
                    store_throughput: int, publish: bool, published_at: str | None,
                    source_commit: str | None, namespace: str, as_json: bool) -> None:
    # fmt: on
    """Check every contract in DIR, then write signed bundles and admission lists to --out.

    Rules (c) and (d) need the pool catalogue, so --pools is required; --unchecked writes
    without checking them, for trying contracts out before a pool catalogue exists. Bundles
    are signed with --key or --transit-key; --unsigned writes them unsigned, for trying
    contracts out. Unchecked or unsigned contracts are never published.
    """
    settings = _settings(ctx)
    signing = key_file is not None or transit_key is not None
    flags = compile_flag_refusal(pools=pools_file is not None, unchecked=unchecked,
                                 signing=signing, unsigned=unsigned, publish=publish)  # fmt: skip
    if flags is not None:
        fail(*flags, usage=True)
    pools = None
    if pools_file is not None:
        try:
            pools = load_pools(pools_file.as_posix(), pools_file.read_text(encoding="utf-8"))
        except PoolFileError as error:
            fail(str(error), POOL_FILE_HINT)
    files = contract_files(contract_dir)
    if not files:
        fail(f"no contract files (*.yaml, *.yml) under {contract_dir}")
    env = FeasibilityEnv(pools=pools, store_throughput_bytes_per_s=store_throughput)
    result = compile_contracts(files, env, published_at_us=_published_at_us(published_at),
                               region=settings.region, source_commit=source_commit,
                               change_control=_change_control(files, out_dir, keyring))  # fmt: skip
    for warning in result.unchecked_warnings:
        say(f"[yellow]warning:[/] {escape(warning)}", err=True)
    for note in result.notes:
        say(f"note: {note}", markup=False, err=True)
    written: list[Path] = []
    published: int | None = None
    if result.ok:
        signer = open_signer(key_file, transit_key, transit_mount)
        if signer is None and not unsigned:
            fail(*NO_SIGNER, usage=True)
        if signer is None:
            say(
                "[yellow]warning:[/] --unsigned: bundles are written unsigned and every node "
                "agent will refuse them",
                err=True,
            )
        # Everything that can still fail happens before the first file is written.
        try:
            rendered = render_outputs(result, signer, namespace)
        except SigningError as error:
            fail(f"signing failed: {error}; nothing was written")
        codec = _checked_codec(settings, result, publish)
        if publish:
            published = _publish(settings, result, codec)
        written = write_rendered(out_dir, rendered)
    report = result.as_json(written, published) if as_json else None
    if report is not None and result.ok:
        emit_json(report)
    elif report is None:
        show(_table(result))
        for refusal in result.errors:
            say(str(refusal), markup=False, err=True)
        if result.ok:
            say(f"wrote {len(written)} files to {out_dir}")
        if published is not None:
            say(f"published {published} contract_published events to {settings.region}.demand")
    if not result.ok:
        fail(
            f"{len(result.refused)} contracts refused; nothing was written",
            "fix each error at the file and line named above, then compile again",
            json_report=report,
        )


@contracts.command("sign")
@click.argument("contract_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--as", "name", required=True, help="Who signs: the owner, or an authority.")
@signer_options
def sign_command(contract_file: Path, name: str, key_file: Path | None, transit_key: str | None,
                 transit_mount: str) -> None:  # fmt: skip
    """Sign this version of a contract file as NAME (docs/contracts.md, two signatures)."""
    signer = open_signer(key_file, transit_key, transit_mount)
    if signer is None:
        fail("no --key or --transit-key to sign with", "give the signer's key", usage=True)
    try:
        written = sign_contract_file(contract_file, signer, name)
    except (ContractFileError, SigningError) as error:
        fail(f"{contract_file} was not signed: {error}", "fix the contract, then sign again")
    say(f"{name} signed {contract_file} ({signer.key_id}) into {written}")


# -- verify and keygen ------------------------------------------------------------------------


@contracts.command("verify")
@click.argument("bundle_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--pubkey",
    "pubkey_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Ed25519 public key: PEM, 32 raw bytes, or their base64.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify_command(bundle_file: Path, pubkey_file: Path, as_json: bool) -> None:
    """Check a bundle's signature as a node does; exit 1 if it must not be used."""
    public_key = read_public_key(pubkey_file)
    try:
        bundle = verify_bundle(bundle_file.read_bytes(), public_key)
    except BundleError as error:
        report = error.as_json() if as_json else None
        fail(f"{bundle_file}: refused ({type(error).__name__}): {error}", json_report=report)
    if as_json:
        emit_json({"ok": True, "bundle": bundle.model_dump(mode="json")}, indent=None)
        return
    say(f"[green]ok[/]: {bundle_file} is signed by {key_id_of(public_key)}")
    for name, value in bundle.model_dump(mode="json").items():
        say(f"  {name}: {value}", markup=False)


@contracts.command("keygen")
@click.option(
    "--out",
    "key_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Private key file (PEM); the public key goes to <out>.pub.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the key files and key id as JSON.")
def keygen_command(key_file: Path, as_json: bool) -> None:
    """Create an Ed25519 signing key (PEM, mode 0600) and its public key (<out>.pub)."""
    try:
        public_file, public_key = write_key_pair(key_file)
    except SigningError as error:
        fail(str(error))
    if as_json:
        emit_json(key_pair_json(key_file, public_file, public_key))
        return
    say(f"wrote {key_file} and {public_file} (key {key_id_of(public_key)})", markup=False)
