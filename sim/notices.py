"""A simulated region's reclaim notices and advisories, delivered live to real node agents
(`spotcap notices serve`): each on its NATS subject and at the metadata endpoint, as it falls
due, at `speed` sim seconds per wall second."""

from __future__ import annotations

from collections.abc import Callable

from provider.notices import MetadataServer, NoticeBoard, NoticeRelay
from provider.notices.serve import DispatchCounts, NoticeDispatcher, serve_events
from sim.region import RegionSim, SimConfig


async def serve_region_notices(
    config: SimConfig,
    nats_url: str | None,
    *,
    host: str,
    port: int,
    speed: float,
    say: Callable[[str], None],
) -> DispatchCounts:
    """Run the region of `config`, publishing on NATS at `nats_url` (None: the metadata
    endpoint only, on `host`:`port`); `say` hears where everything is served. A NATS that
    cannot be reached is `provider.notices.RelayUnavailableError`."""
    board = NoticeBoard()
    relay = await NoticeRelay.connect(nats_url) if nats_url else None
    try:
        async with MetadataServer(board, host=host, port=port) as metadata:
            nats = (
                f"NATS {nats_url} subjects spotcap.{config.region}.notice.<id>"
                if relay
                else "no NATS (metadata only)"
            )
            say(
                f"metadata endpoint {metadata.url}/v1/instances/<id>/notice; {nats}; "
                f"{config.days:g} sim days at {speed:g}x"
            )
            dispatcher = NoticeDispatcher(relay, board)
            return await serve_events(RegionSim(config).run(), dispatcher, speed=speed)
    finally:
        if relay is not None:
            await relay.close()
