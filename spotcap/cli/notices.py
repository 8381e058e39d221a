"""`spotcap notices serve`: a simulated region's reclaim notices, live, for real node agents."""

from __future__ import annotations

import asyncio
import dataclasses

import click

from provider.notices import RelayUnavailableError
from sim.notices import serve_region_notices
from sim.region import SimConfig
from spotcap.cli.options import PORT, FiniteFloatRange
from spotcap.cli.output import emit_json, say, show, table
from spotcap.config import Settings
from spotcap.fail import fail


@click.group()
def notices() -> None:
    """The notice path (docs/agent.md): NATS subjects and the metadata endpoint."""


# fmt: off
@notices.command("serve")
@click.option("--nats", "nats_url", envvar="SPOTCAP_NATS_URL", default=None, metavar="URL",
              help="NATS to publish on (default $SPOTCAP_NATS_URL; none: metadata endpoint "
              "only).")
@click.option("--metadata-host", default="127.0.0.1", show_default=True,
              help="Address the metadata endpoint listens on (0.0.0.0: every interface, for "
              "agents on other nodes).")
@click.option("--metadata-port", type=PORT, default=0, show_default=True,
              help="Port of the metadata endpoint (0: a free port).")
@click.option("--days", type=FiniteFloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Sim days to run.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of every random choice.")
@click.option("--workloads", type=click.IntRange(min=0), default=220, show_default=True,
              help="Workloads in the simulated region.")
@click.option("--speed", type=FiniteFloatRange(min=0, min_open=True), default=60.0,
              show_default=True,
              help="Sim seconds per wall second (60: an hour of notices in a minute).")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON at the end.")
@click.pass_obj
def serve(settings: Settings, *, nats_url: str | None, metadata_host: str, metadata_port: int,
          days: float, seed: int, workloads: int, speed: float, as_json: bool) -> None:
    # fmt: on
    """Run the simulated region and deliver its notices and advisories as they fall due.

    Each notice is published on ``spotcap.<region>.notice.<instance>`` and served at
    ``GET /v1/instances/<instance>/notice`` until the instance is gone; advisories on
    ``spotcap.<region>.advisory.<instance>``. Stop with Ctrl-C.
    """
    config = SimConfig(seed=seed, days=days, workloads=workloads, region=settings.region)
    try:
        counts = asyncio.run(
            serve_region_notices(
                config,
                nats_url,
                host=metadata_host,
                port=metadata_port,
                speed=speed,
                say=lambda text: say(text, markup=False, err=True),
            )
        )
    except RelayUnavailableError as error:
        fail(f"{error}; start NATS or leave out --nats")
    except KeyboardInterrupt:
        say("stopped", err=True)
        return
    if as_json:
        emit_json(dataclasses.asdict(counts), indent=None)
        return
    title = f"notices served for region {settings.region}"
    show(table(title, counts.COLUMNS, [counts.row()], right=counts.COLUMNS))
