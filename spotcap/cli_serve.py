"""`spotcap serve`: the read side over HTTP (JSON API, OpenAPI description, Prometheus metrics)."""

from __future__ import annotations

import copy
import errno
import signal
import socket
from pathlib import Path
from types import FrameType

import click
from rich.console import Console
from rich.markup import escape

from spotcap.cli_db import postgres_option, with_postgres
from spotcap.config import Settings
from spotcap.fail import fail

GRACEFUL_SHUTDOWN_S = 10  # requests in flight get this long after Ctrl-C or SIGTERM

_stderr = Console(stderr=True)


class _Terminated(Exception):  # noqa: N818 - a signal, not an error
    """SIGTERM, after uvicorn's graceful shutdown."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts, so that a port in use or a host
    that is not this machine's is one sentence at start."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        fail(f"cannot listen on --host {host}: it is not an address of this machine "
             f"({error.strerror}); give an address such as 127.0.0.1", usage=True)  # fmt: skip
    family, kind, proto, _, address = infos[0]
    # The protocol number matters: asyncio sets TCP_NODELAY only on connections of a socket made
    # with IPPROTO_TCP (socket.create_server leaves it 0), and without it a keep-alive client
    # waits out a delayed ACK (~40 ms) on every response written in two parts.
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        return sock
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            fail(f"port {port} on {host} is already in use: stop what listens there "
                 "or choose another with --port")  # fmt: skip
        if error.errno == errno.EACCES:
            fail(f"port {port} needs privileges this user does not have: choose one above "
                 "1023 with --port")  # fmt: skip
        fail(f"cannot listen on {host}:{port} ({error.strerror}): check --host and --port")


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on (0: any free port, printed at start).",
)
@postgres_option
@click.option(
    "--archive",
    "location",
    default=None,
    metavar="DIR|s3://BUCKET/PREFIX",
    help="The archive the Archive page lists and verifies (default $SPOTCAP_ARCHIVE, else "
    "<home>/archive).",
)
@click.option(
    "--archive-public-key",
    "public_key_file",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The archive signer's public key: the one key the Archive page's verify trusts "
    "(without it, the months are listed but not verified).",
)
@click.option(
    "--log-level",
    type=click.Choice(["warning", "info", "debug"]),
    default="info",
    show_default=True,
    help="info logs each request (the access log) on stderr.",
)
@click.pass_obj
def serve(settings: Settings, *, host: str, port: int, postgres_dsn: str | None,
          location: str | None, public_key_file: Path | None, log_level: str) -> None:  # fmt: skip
    """Serve the read side over HTTP, read-only: the console at /, the JSON API under
    /api/v1, its OpenAPI description at /openapi.json and Prometheus metrics at /metrics.

    The console's pages (docs/console.md) and the API answer the queries of `spotcap query`,
    `why` and `report savings`, `replay` with the shipped rules, and `archive verify` over the
    archive --archive names with the key --archive-public-key gives.

    The server stays up when a store is down: the endpoints that need it answer 503 with a
    sentence saying how to bring it back. Ctrl-C (or SIGTERM) stops it.
    """
    # Imported here: the web stack takes a second to import, which no other command needs.
    import uvicorn

    from replay.archive.storage import ArchiveError
    from spotcap.cli_archive import open_archive, read_public_key
    from spotcap.serve.access import ReadAccess
    from spotcap.serve.app import create_app
    from spotcap.serve.archive import ArchiveDesk

    settings = with_postgres(settings, postgres_dsn)
    key = read_public_key(public_key_file) if public_key_file else None
    try:
        desk = ArchiveDesk(open_archive(settings, location), settings.region, key)
    except ArchiveError as error:
        fail(str(error), "check --archive")
    sock = listen(host, port)
    access = ReadAccess(settings)
    not_ready = access.prepare()
    if not_ready:
        _stderr.print(
            f"[yellow]warning:[/] {escape(not_ready)}; serving anyway: the fleet state's "
            "endpoints answer 503 until it is back",
            highlight=False,
            soft_wrap=True,
        )
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    url = f"http://{shown}:{bound_port}"
    # uvicorn's own logging, with the access log on stderr beside the rest (stdout is for the
    # one line that says where the server listens).
    logging_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    logging_config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    config = uvicorn.Config(
        create_app(access, desk),
        log_config=logging_config,
        log_level=log_level,
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    click.echo(
        f"serving region {settings.region} of {settings.home} on {url}: console {url}/, API "
        f"{url}/api/v1, description {url}/openapi.json, metrics {url}/metrics (Ctrl-C stops)"
    )
    # uvicorn shuts down gracefully on SIGINT and SIGTERM, then raises the signal again for the
    # handler it found: a KeyboardInterrupt, and for SIGTERM this one, so both end here, cleanly.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
        access.close()
    _stderr.print("stopped", highlight=False)
