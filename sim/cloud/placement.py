"""Placement (microversion 1.39), the subset spotcap reads: resource providers, their aggregates,
inventories and usages.

    GET /placement                                        versions
    GET /placement/resource_providers[?member_of=A|in:A,B][&name=N]
    GET /placement/resource_providers/<uuid>[/inventories|/usages|/aggregates]

Each pool is one resource provider named after it, in the aggregates of its hall and of its
correlation group (`sim.cloud.naming`). Its VCPU inventory is the pool's capacity; ``reserved``
is what the guaranteed tenants hold back now (everything not in use while a wave presses the
hall) plus what created Blazar leases hold, so Placement's own rule
``(total - reserved) x allocation_ratio - used`` is exactly the room an ordinary launch has.
MEMORY_MB follows the pool's instances. The generation moves with every launch and loss.
"""

from __future__ import annotations

from typing import Any

from schemas.events import Envelope, InstanceDeleted, InstanceLaunched, InstanceLost
from schemas.pools import Pool
from sim.cloud.blazar import Leases
from sim.cloud.errors import placement_error
from sim.cloud.http import Request, Response, Route, route
from sim.cloud.region import CloudRegion

MICROVERSION = "1.39"
_BASE = "/placement"
_RP = f"{_BASE}/resource_providers/([0-9a-f-]{{36}})"


class Placement:
    def __init__(self, region: CloudRegion, leases: Leases) -> None:
        self._region = region
        self._names = region.names
        self._leases = leases
        self._generation = {p.pool_id: 1 for p in region.sim.catalogue}
        for event_type in (InstanceLaunched, InstanceDeleted, InstanceLost):
            region.on(event_type.EVENT_TYPE, self._changed)

    def routes(self) -> list[Route]:
        return [
            route("GET", _BASE, self._versions, auth=False),
            route("GET", f"{_BASE}/resource_providers", self._providers),
            route("GET", _RP, self._provider),
            route("GET", f"{_RP}/inventories", self._inventories),
            route("GET", f"{_RP}/usages", self._usages),
            route("GET", f"{_RP}/aggregates", self._aggregates),
        ]

    def _changed(self, envelope: Envelope) -> None:
        pool_id = getattr(envelope.payload, "pool_id", None)
        if isinstance(pool_id, str) and pool_id in self._generation:
            self._generation[pool_id] += 1

    def _versions(self, request: Request, match: Any) -> Response:
        version = {
            "id": "v1.0",
            "max_version": MICROVERSION,
            "min_version": "1.0",
            "status": "CURRENT",
            "links": [{"rel": "self", "href": ""}],
        }
        return _ok({"versions": [version]})

    def _providers(self, request: Request, match: Any) -> Response:
        member_of = request.param("member_of")
        name = request.param("name")
        wanted: set[str] | None = None
        if member_of:
            wanted = set(member_of.removeprefix("in:").split(","))
        found = [
            (rp_id, pool)
            for rp_id, pool in sorted(self._names.providers.items())
            if (name is None or pool.pool_id == name)
            and (wanted is None or wanted & set(self._names.aggregates_of(pool)))
        ]
        return _ok({"resource_providers": [self._json(i, p) for i, p in found]})

    def _provider(self, request: Request, match: Any) -> Response:
        rp_id, pool = self._find(match.group(1))
        return _ok(self._json(rp_id, pool))

    def _inventories(self, request: Request, match: Any) -> Response:
        _, pool = self._find(match.group(1))
        flavor = self._names.flavor_of(pool)
        instances = pool.capacity_vcpu // pool.size_vcpu
        used = self._region.sim.provider.used_vcpu(pool.pool_id)
        room = self._region.sim.provider.room_vcpu(pool.pool_id)
        room -= self._leases.held_vcpu(pool.pool_id)
        inventories = {
            "VCPU": _inventory(
                pool.capacity_vcpu, max(0, pool.capacity_vcpu - used - room), pool.size_vcpu
            ),
            "MEMORY_MB": _inventory(instances * flavor.ram_mb, 0, flavor.ram_mb),
        }
        return _ok(
            {
                "resource_provider_generation": self._generation[pool.pool_id],
                "inventories": inventories,
            }
        )

    def _usages(self, request: Request, match: Any) -> Response:
        _, pool = self._find(match.group(1))
        used = self._region.sim.provider.used_vcpu(pool.pool_id)
        memory = used // pool.size_vcpu * self._names.flavor_of(pool).ram_mb
        return _ok(
            {
                "resource_provider_generation": self._generation[pool.pool_id],
                "usages": {"VCPU": used, "MEMORY_MB": memory},
            }
        )

    def _aggregates(self, request: Request, match: Any) -> Response:
        _, pool = self._find(match.group(1))
        return _ok(
            {
                "aggregates": self._names.aggregates_of(pool),
                "resource_provider_generation": self._generation[pool.pool_id],
            }
        )

    def _find(self, rp_id: str) -> tuple[str, Pool]:
        pool = self._names.providers.get(rp_id)
        if pool is None:
            raise placement_error(404, f"No resource provider with uuid {rp_id} found")
        return rp_id, pool

    def _json(self, rp_id: str, pool: Pool) -> dict[str, Any]:
        href = f"{_BASE}/resource_providers/{rp_id}"
        return {
            "uuid": rp_id,
            "name": pool.pool_id,
            "generation": self._generation[pool.pool_id],
            "parent_provider_uuid": None,
            "root_provider_uuid": rp_id,
            "links": [{"rel": "self", "href": href}]
            + [
                {"rel": rel, "href": f"{href}/{rel}"}
                for rel in ("inventories", "usages", "aggregates")
            ],
        }


def _inventory(total: int, reserved: int, max_unit: int) -> dict[str, Any]:
    return {
        "total": total,
        "reserved": reserved,
        "allocation_ratio": 1.0,
        "min_unit": 1,
        "max_unit": max_unit,
        "step_size": 1,
    }


def _ok(body: Any) -> Response:
    return Response(200, body, {"OpenStack-API-Version": f"placement {MICROVERSION}"})
