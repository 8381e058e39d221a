"""`spotcap serve`: the read side over HTTP (`console`): the console's pages, the JSON API, its
OpenAPI description and the Prometheus metrics."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from spotcap.cli.options import need_home, postgres_option, read_public_key, with_postgres
from spotcap.cli.output import say
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.home import hold_home


# fmt: off
@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to listen on (0: any free port, printed at start).")
@postgres_option
@click.option("--archive", "location", default=None, metavar="DIR|s3://BUCKET/PREFIX",
              help="The archive the Archive page lists and verifies (default $SPOTCAP_ARCHIVE, "
              "else <home>/archive).")
@click.option("--archive-public-key", "public_key_file", default=None,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The archive signer's public key: the one key the Archive page's verify "
              "trusts (without it, the months are listed but not verified).")
@click.option("--oidc-issuer", envvar="SPOTCAP_OIDC_ISSUER", default=None, metavar="URL",
              help="Require sign-in with tokens of this OIDC issuer (docs/security.md).")
@click.option("--oidc-audience", envvar="SPOTCAP_OIDC_AUDIENCE", default=None, metavar="ID",
              help="This server's client id: the audience its tokens must name.")
@click.option("--log-level", type=click.Choice(["warning", "info", "debug"]), default="info",
              show_default=True, help="info logs each request (the access log) on stderr.")
@click.pass_obj
def serve(settings: Settings, *, host: str, port: int, postgres_dsn: str | None,
          location: str | None, public_key_file: Path | None, oidc_issuer: str | None,
          oidc_audience: str | None, log_level: str) -> None:
    # fmt: on
    """Serve the read side over HTTP, read-only: the console at /, the JSON API under
    /api/v1, its OpenAPI description at /openapi.json and Prometheus metrics at /metrics.

    The console's pages (docs/console.md) and the API answer the queries of `spotcap query`,
    `why` and `report savings`, `replay` with the shipped rules, and `archive verify` over the
    archive --archive names with the key --archive-public-key gives.

    With --oidc-issuer and --oidc-audience every request needs a token of that issuer, and
    each role reads its own part (docs/security.md); without them it serves everyone, and only
    on a loopback address.

    The server stays up when a store is down: the endpoints that need it answer 503 with a
    sentence saying how to bring it back. Ctrl-C (or SIGTERM) stops it.
    """
    # Imported here: the web stack takes a second to import, which no other command needs.
    from console.access import ReadAccess
    from console.app import create_app
    from console.archive import ArchiveDesk
    from console.server import ListenError, listen, serve, url_of
    from console.signin import SignInError, sign_in_for
    from replay.archive.storage import ArchiveError
    from spotcap.wiring import open_archive, open_log, stores

    try:
        issuer, no_sign_in = sign_in_for(host, oidc_issuer, oidc_audience)
    except SignInError as error:
        fail(str(error), usage=True)
    settings = need_home(with_postgres(settings, postgres_dsn), log=True, fleet=True, ledger=True)
    hold_home(settings)
    key = read_public_key(public_key_file) if public_key_file else None
    try:
        desk = ArchiveDesk(open_archive(settings, location), settings.region, key)
    except ArchiveError as error:
        fail(str(error), "check --archive")
    try:
        sock = listen(host, port)
    except ListenError as error:
        fail(str(error), usage=error.usage)
    access = ReadAccess(stores(settings), settings.region, lambda: open_log(settings))
    not_ready = access.prepare()
    if not_ready:
        say(
            f"[yellow]warning:[/] {escape(not_ready)}; serving anyway: the fleet state's "
            "endpoints answer 503 until it is back",
            err=True,
        )
    if no_sign_in:
        say(f"[yellow]warning:[/] {escape(no_sign_in)}", err=True)
    url = url_of(sock)
    click.echo(
        f"serving region {settings.region} of {settings.home} on {url}: console {url}/, API "
        f"{url}/api/v1, description {url}/openapi.json, metrics {url}/metrics (Ctrl-C stops)"
    )
    try:
        serve(create_app(access, desk, issuer), sock, log_level)
    finally:
        access.close()
    say("stopped", markup=False, err=True)
