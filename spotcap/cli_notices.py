"""`spotcap notices serve`: a simulated region's reclaim notices, live, for real node agents."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import click
from rich.console import Console
from rich.table import Table

from provider.notices import MetadataServer, NoticeBoard, NoticeRelay, RelayUnavailableError
from provider.notices.serve import DispatchCounts, NoticeDispatcher, serve_events
from provider.sim.region import RegionSim, SimConfig
from spotcap.cli_types import PORT, FiniteFloatRange
from spotcap.config import Settings
from spotcap.fail import fail

console = Console(stderr=True)


@click.group()
def notices() -> None:
    """The notice path (ADR-17): NATS subjects and the metadata endpoint."""


@notices.command("serve")
@click.option(
    "--nats",
    "nats_url",
    envvar="SPOTCAP_NATS_URL",
    default=None,
    metavar="URL",
    help="NATS to publish on (default $SPOTCAP_NATS_URL; none: metadata endpoint only).",
)
@click.option(
    "--metadata-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metadata endpoint listens on (0.0.0.0: every interface, for agents on "
    "other nodes).",
)
@click.option(
    "--metadata-port",
    type=PORT,
    default=0,
    show_default=True,
    help="Port of the metadata endpoint (0: a free port).",
)
@click.option(
    "--days",
    type=FiniteFloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Sim days to run.",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of every random choice.")
@click.option(
    "--workloads",
    type=click.IntRange(min=0),
    default=220,
    show_default=True,
    help="Workloads in the simulated region.",
)
@click.option(
    "--speed",
    type=FiniteFloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Sim seconds per wall second (60: an hour of notices in a minute).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON at the end.")
@click.pass_obj
def serve(
    settings: Settings,
    *,
    nats_url: str | None,
    metadata_host: str,
    metadata_port: int,
    days: float,
    seed: int,
    workloads: int,
    speed: float,
    as_json: bool,
) -> None:
    """Run the simulated region and deliver its notices and advisories as they fall due.

    Each notice is published on ``spotcap.<region>.notice.<instance>`` and served at
    ``GET /v1/instances/<instance>/notice`` until the instance is gone; advisories on
    ``spotcap.<region>.advisory.<instance>``. Stop with Ctrl-C.
    """
    config = SimConfig(seed=seed, days=days, workloads=workloads, region=settings.region)
    try:
        counts = asyncio.run(_serve(config, nats_url, metadata_host, metadata_port, speed))
    except RelayUnavailableError as error:
        fail(f"{error}; start NATS or leave out --nats")
    except KeyboardInterrupt:
        console.print("stopped")
        return
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(counts), sort_keys=True))
        return
    table = Table(title=f"notices served for region {settings.region}")
    for column in ("notices", "advisories", "withdrawn", "relay failures"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{counts.notices:,}",
        f"{counts.advisories:,}",
        f"{counts.withdrawn:,}",
        f"{counts.relay_failures:,}",
    )
    console.print(table)


async def _serve(
    config: SimConfig, nats_url: str | None, host: str, port: int, speed: float
) -> DispatchCounts:
    board = NoticeBoard()
    relay = await NoticeRelay.connect(nats_url) if nats_url else None
    try:
        async with MetadataServer(board, host=host, port=port) as metadata:
            console.print(
                f"metadata endpoint {metadata.url}/v1/instances/<id>/notice; "
                + (
                    f"NATS {nats_url} subjects spotcap.{config.region}.notice.<id>"
                    if relay
                    else "no NATS (metadata only)"
                )
                + f"; {config.days:g} sim days at {speed:g}x"
            )
            dispatcher = NoticeDispatcher(relay, board)
            return await serve_events(RegionSim(config).run(), dispatcher, speed=speed)
    finally:
        if relay is not None:
            await relay.close()
