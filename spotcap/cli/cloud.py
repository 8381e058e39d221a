"""`spotcap cloud serve`: the simulated region behind the OpenStack API subset (sim.cloud)."""

from pathlib import Path
from typing import Any

import click

from sim.cloud import serve_cloud
from spotcap.cli.options import PORT, FiniteFloatRange
from spotcap.cli.output import emit_json
from spotcap.config import Settings

POSITIVE = FiniteFloatRange(0, min_open=True)


@click.group()
def cloud() -> None:
    """The simulated region served as a cloud: Keystone, Nova, Placement, Blazar, the feeds."""


@cloud.command("serve")
@click.option("--speed", type=POSITIVE, default=60.0, help="Sim seconds per wall second (60).")
@click.option("--days", type=POSITIVE, default=1.0, help="Sim days to serve, then stop (1).")
@click.option("--seed", type=int, default=1, help="Seed of every random choice (1).")
@click.option("--workloads", type=click.IntRange(0), default=220, help="Workloads (220).")
@click.option("--nats", "nats_url", envvar="SPOTCAP_NATS_URL", help="NATS to publish notices on.")
@click.option("--port", type=PORT, default=0, help="Port of the APIs (0: a free one).")
@click.option("--password", envvar="SPOTCAP_CLOUD_PASSWORD", help="Keystone password (or drawn).")
@click.option(
    "--client-dir",
    type=click.Path(path_type=Path),
    help="Write clouds.yaml and the "
    "provider file (provider.yaml) the services' --provider takes here.",
)
@click.pass_obj
def serve(settings: Settings, /, **options: Any) -> None:
    """Serve until the days end or SIGTERM: the access as one JSON line first, the summary last."""
    emit_json(serve_cloud(region=settings.region, ready=click.echo, **options), indent=None)
