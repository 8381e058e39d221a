"""What the served cloud says about itself, beyond OpenStack (no token: nothing here is secret).

    GET /sim/v1/status           sim time, the clock's anchor, events and servers so far
    GET /sim/v1/marks/<at_us>    events before a mark and their digest (404 until reached)
    GET /sim/v1/catalogue        the region's pool catalogue (``schemas.pools`` YAML)
    GET /sim/v1/pool-mapping     the adapter's pool mapping file for this cloud (YAML)

The catalogue and the pool mapping are what `provider.openstack.PoolMapping.load` needs to
drive this cloud; the marks let two servings of one seed be compared (`sim.cloud.region`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from schemas.events import Envelope
from sim.cloud.errors import feed_error
from sim.cloud.http import Request, Response, Route, route
from sim.cloud.region import CloudRegion

_YAML = "application/yaml"


class Status:
    def __init__(self, region: CloudRegion) -> None:
        self._region = region
        self.counts: Counter[str] = Counter()
        region.on_every(self._count)

    def routes(self) -> list[Route]:
        return [
            route("GET", "/sim/v1/status", self._status, auth=False),
            route("GET", r"/sim/v1/marks/(\d+)", self._mark, auth=False),
            route("GET", "/sim/v1/catalogue", self._catalogue, auth=False),
            route("GET", "/sim/v1/pool-mapping", self._pool_mapping, auth=False),
        ]

    def summary(self) -> dict[str, Any]:
        region = self._region
        with region.lock:
            return {
                "region": region.region,
                "now_us": region.sim.now_us(),
                "start_us": region.config.start_us,
                "end_us": region.config.end_us,
                "ended": region.sim.now_us() >= region.config.end_us,
                "clock": region.clock.anchor.to_dict(),
                "lag_us": max(0, region.clock.now_us() - region.sim.now_us()),
                "events": region.events,
                "events_by_type": dict(sorted(self.counts.items())),
            }

    def _count(self, envelope: Envelope) -> None:
        self.counts[envelope.event_type] += 1

    def _status(self, request: Request, match: Any) -> Response:
        return Response(200, self.summary())

    def _mark(self, request: Request, match: Any) -> Response:
        mark = self._region.digest_at(int(match.group(1)))
        if mark is None:
            raise feed_error(
                404,
                "no_mark",
                f"no mark at {match.group(1)} (not reached yet, or "
                "not a multiple of the mark interval)",
            )
        return Response(200, {"at_us": mark.at_us, "events": mark.events, "digest": mark.digest})

    def _catalogue(self, request: Request, match: Any) -> Response:
        return Response(200, text=self._region.sim.catalogue.to_yaml(), content_type=_YAML)

    def _pool_mapping(self, request: Request, match: Any) -> Response:
        return Response(200, text=self._region.names.pool_mapping_yaml(), content_type=_YAML)
