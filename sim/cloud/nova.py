"""Nova's Compute API v2.1 (microversion 2.96), the subset spotcap uses: servers with metadata
and tags, and flavors.

    GET    /compute/v2.1                     version document
    GET    /compute/v2.1/flavors[/detail]    the region's flavors (``<family>.<size>``)
    GET    /compute/v2.1/flavors/<id>        one flavor (also a Blazar reservation's flavor)
    POST   /compute/v2.1/servers             202; the server is ACTIVE at once
    GET    /compute/v2.1/servers[/detail]    ?tags= ?tags-any= ?not-tags= ?not-tags-any=
                                             ?limit= ?marker= (by id; next link when full)
    GET    /compute/v2.1/servers/<id>        404 once deleted or lost
    DELETE /compute/v2.1/servers/<id>        204, any server of the project
    GET|PUT|POST /servers/<id>/metadata, GET|PUT|DELETE /servers/<id>/metadata/<key>
    GET|PUT|DELETE /servers/<id>/tags, GET|PUT|DELETE /servers/<id>/tags/<tag>

A server is an instance of the simulated region. Its pool is the flavor's SKU family and size,
the zone's hall, and the purchase model of its ``spotcap.io:purchase-model`` metadata
(``guaranteed`` without one); a ``spotcap.io:pool`` that names another pool is refused (400).
Without a zone, the first hall with room is taken. No room is answered at once, with the
409 the adapter reads as `CapacityUnavailableError` ("No valid host was found"), where a real
Nova would accept the request and put the server in ERROR. Metadata is the server's tags in the
simulation (so a changed owner or claim tag changes what the region sees); deleting is the
project's right, whoever the tags name: refusing another owner's server is the adapter's job.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from provider.base import WORKLOAD_TAG, CapacityUnavailableError, DeleteRequest, LaunchRequest
from provider.openstack import tags as spot_tags
from schemas.events import Envelope, InstanceLost
from schemas.pools import Pool, pool_id_for
from sim.cloud.blazar import Lease, Leases
from sim.cloud.errors import nova_error
from sim.cloud.http import Request, Response, Route, route
from sim.cloud.keystone import CloudCredentials, Principal
from sim.cloud.naming import Flavor
from sim.cloud.region import CloudRegion

MICROVERSION = "2.96"
MAX_LIMIT = 1000
_BASE = "/compute/v2.1"
_SERVER = f"{_BASE}/servers/([0-9a-f-]{{36}})"
_METADATA_KEY = re.compile(r"^[a-zA-Z0-9\-_:. ]{1,255}$")
_MAX_TAGS = 50
_NO_HOST = "No valid host was found. There are not enough hosts available."


@dataclass(slots=True)
class Server:
    server_id: str
    name: str
    flavor: Flavor
    zone: str
    pool: Pool
    metadata: dict[str, str]
    tags: list[str]
    created_us: int
    lease_id: str | None = None


class Nova:
    """The project's servers and the region's flavors."""

    def __init__(self, region: CloudRegion, leases: Leases, credentials: CloudCredentials) -> None:
        self._region = region
        self._names = region.names
        self._leases = leases
        self._credentials = credentials
        self.servers: dict[str, Server] = {}
        region.on(InstanceLost.EVENT_TYPE, self._lost)

    def routes(self) -> list[Route]:
        s = _SERVER
        return [
            route("GET", _BASE, self._version, auth=False),
            route("GET", "/compute", self._versions, auth=False),
            route("GET", f"{_BASE}/flavors", self._flavors),
            route("GET", f"{_BASE}/flavors/detail", self._flavors),
            route("GET", f"{_BASE}/flavors/([^/]+)", self._flavor),
            route("POST", f"{_BASE}/servers", self._create),
            route("GET", f"{_BASE}/servers", self._list),
            route("GET", f"{_BASE}/servers/detail", self._list),
            route("GET", s, self._show),
            route("DELETE", s, self._delete),
            route("GET", f"{s}/metadata", self._metadata),
            route("PUT", f"{s}/metadata", self._set_metadata),
            route("POST", f"{s}/metadata", self._set_metadata),
            route("GET", f"{s}/metadata/([^/]+)", self._metadata_item),
            route("PUT", f"{s}/metadata/([^/]+)", self._set_metadata_item),
            route("DELETE", f"{s}/metadata/([^/]+)", self._delete_metadata_item),
            route("GET", f"{s}/tags", self._tags),
            route("PUT", f"{s}/tags", self._set_tags),
            route("DELETE", f"{s}/tags", self._set_tags),
            route("GET", f"{s}/tags/([^/]+)", self._tag),
            route("PUT", f"{s}/tags/([^/]+)", self._add_tag),
            route("DELETE", f"{s}/tags/([^/]+)", self._remove_tag),
        ]

    # -- versions and flavors ------------------------------------------------------------------

    def _version(self, request: Request, match: Any) -> Response:
        return _ok({"version": self._version_doc(request.base_url)})

    def _versions(self, request: Request, match: Any) -> Response:
        return _ok({"versions": [self._version_doc(request.base_url)]})

    @staticmethod
    def _version_doc(base_url: str) -> dict[str, Any]:
        return {
            "id": "v2.1",
            "status": "CURRENT",
            "version": MICROVERSION,
            "min_version": "2.1",
            "updated": "2013-07-23T11:33:21Z",
            "links": [{"rel": "self", "href": f"{base_url}{_BASE}/"}],
            "media-types": [
                {
                    "base": "application/json",
                    "type": "application/vnd.openstack.compute+json;version=2.1",
                }
            ],
        }

    def _flavors(self, request: Request, match: Any) -> Response:
        detail = request.path.endswith("/detail")
        flavors = sorted(self._names.flavors.values(), key=lambda f: f.flavor_id)
        return _ok({"flavors": [self._flavor_json(f, request.base_url, detail) for f in flavors]})

    def _flavor(self, request: Request, match: Any) -> Response:
        flavor_id = match.group(1)
        flavor = self._names.flavors.get(flavor_id)
        lease = self._leases.by_flavor(flavor_id)
        if flavor is None and lease is not None:
            flavor = _lease_flavor(self._names.flavor_of(lease.pool), lease)
        if flavor is None:
            raise nova_error(404, f"Flavor {flavor_id} could not be found.")
        return _ok({"flavor": self._flavor_json(flavor, request.base_url, True)})

    @staticmethod
    def _flavor_json(flavor: Flavor, base_url: str, detail: bool) -> dict[str, Any]:
        link = f"{base_url}{_BASE}/flavors/{flavor.flavor_id}"
        brief: dict[str, Any] = {
            "id": flavor.flavor_id,
            "name": flavor.name,
            "links": [{"rel": "self", "href": link}],
        }
        if not detail:
            return brief
        return brief | {
            "vcpus": flavor.vcpus,
            "ram": flavor.ram_mb,
            "disk": flavor.disk_gb,
            "OS-FLV-EXT-DATA:ephemeral": 0,
            "swap": 0,
            "rxtx_factor": 1.0,
            "os-flavor-access:is_public": True,
            "OS-FLV-DISABLED:disabled": False,
            "description": None,
            "extra_specs": {},
        }

    # -- servers --------------------------------------------------------------------------------

    def _create(self, request: Request, match: Any) -> Response:
        body = request.json(lambda why: nova_error(400, why))
        spec = body.get("server") if isinstance(body, dict) else None
        if not isinstance(spec, dict):
            raise nova_error(400, "Invalid input for field/attribute server.")
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            raise nova_error(400, "Invalid input for field/attribute name.")
        flavor_ref = str(spec.get("flavorRef") or "").rstrip("/").rsplit("/", 1)[-1]
        lease = self._leases.by_flavor(flavor_ref)
        flavor = self._names.flavors.get(flavor_ref)
        if lease is not None:
            flavor = self._names.flavor_of(lease.pool)
        if flavor is None:
            raise nova_error(400, f"Flavor {flavor_ref} could not be found.")
        self._check_boot(spec)
        metadata = _metadata(spec.get("metadata", {}))
        tags = _tags(spec.get("tags", []))
        pool = self._pool(flavor, spec.get("availability_zone"), metadata, lease)
        server = self.boot(name, flavor, pool, metadata, tags=tags, lease=lease)
        link = f"{request.base_url}{_BASE}/servers/{server.server_id}"
        created = {
            "id": server.server_id,
            "links": [{"rel": "self", "href": link}],
            "OS-DCF:diskConfig": "MANUAL",
            "security_groups": [{"name": "default"}],
            "adminPass": hashlib.sha256(server.server_id.encode()).hexdigest()[:12],
        }
        return _ok({"server": created}, 202)

    def boot(
        self,
        name: str,
        flavor: Flavor,
        pool: Pool,
        metadata: dict[str, str],
        *,
        tags: list[str],
        lease: Lease | None = None,
    ) -> Server:
        """Boot a checked request's server in `pool` (a create's work after its checks; a
        benchmark seeds a large region with it). `CloudError` 409 when the pool has no room."""
        instance_tags = spot_tags.from_metadata(metadata)
        launch = LaunchRequest(pool.pool_id, instance_tags.get(WORKLOAD_TAG, ""), instance_tags)
        if lease is None and self._room(pool) < pool.size_vcpu:
            raise nova_error(409, _NO_HOST)
        if lease is not None and not lease.active(self._region.sim.now_us()):
            raise nova_error(
                400, f"Flavor {lease.reservation_id} belongs to a lease that is not active"
            )
        if lease is not None and len(lease.servers) >= lease.amount:
            raise nova_error(409, f"{_NO_HOST} The reservation's {lease.amount} are all in use.")
        try:
            instance = self._region.sim.provider.launch(launch)
        except CapacityUnavailableError:
            raise nova_error(409, _NO_HOST) from None
        server = Server(
            server_id=instance.instance_id,
            name=name,
            flavor=flavor,
            zone=self._names.zones[pool.hall],
            pool=pool,
            metadata=metadata,
            tags=tags,
            created_us=instance.launched_at,
            lease_id=lease.lease_id if lease is not None else None,
        )
        self.servers[server.server_id] = server
        if lease is not None:
            self._leases.bind(lease, server.server_id)
        return server

    def _list(self, request: Request, match: Any) -> Response:
        detail = request.path.endswith("/detail")
        every = _split(request.param("tags"))
        any_of = _split(request.param("tags-any"))
        not_every = _split(request.param("not-tags"))
        not_any = _split(request.param("not-tags-any"))
        limit = _limit(request.param("limit"))
        marker = request.param("marker") or ""
        found = []
        for server_id in sorted(self.servers):
            server = self.servers[server_id]
            tags = set(server.tags)
            if server_id <= marker or not every <= tags or (any_of and not any_of & tags):
                continue
            if (not_every and not_every <= tags) or not_any & tags:
                continue
            found.append(server)
            if len(found) == limit:
                break
        body: dict[str, Any] = {"servers": [self._json(s, request.base_url, detail) for s in found]}
        if len(found) == limit:
            kept = [(k, v[-1]) for k, v in sorted(request.query.items()) if k != "marker"]
            query = urlencode([*kept, ("marker", found[-1].server_id)])
            next_href = f"{request.base_url}{request.path}?{query}"
            body["servers_links"] = [{"rel": "next", "href": next_href}]
        return _ok(body)

    def _show(self, request: Request, match: Any) -> Response:
        return _ok({"server": self._json(self._find(match.group(1)), request.base_url, True)})

    def _delete(self, request: Request, match: Any) -> Response:
        server = self._find(match.group(1))
        owned = spot_tags.OWNER_TAG in spot_tags.from_metadata(server.metadata)
        delete = DeleteRequest(
            server.server_id,
            reason=f"DELETE {_BASE}/servers/{server.server_id}",
            deleted_by="orchestrator" if owned else "operator",
        )
        self._region.sim.provider.remove(delete, _principal(request.principal))
        self._forget(server.server_id)
        return Response(204, headers=_headers())

    # -- metadata and tags: the simulation's tags follow --------------------------------------

    def _metadata(self, request: Request, match: Any) -> Response:
        return _ok({"metadata": dict(self._find(match.group(1)).metadata)})

    def _set_metadata(self, request: Request, match: Any) -> Response:
        server = self._find(match.group(1))
        body = request.json(lambda why: nova_error(400, why))
        given = _metadata(body.get("metadata") if isinstance(body, dict) else None)
        merged = given if request.method == "PUT" else {**server.metadata, **given}
        self._retag(server, merged)
        return _ok({"metadata": dict(server.metadata)})

    def _metadata_item(self, request: Request, match: Any) -> Response:
        server, key = self._find(match.group(1)), match.group(2)
        if key not in server.metadata:
            raise nova_error(404, f"Metadata item was not found: {key}")
        return _ok({"meta": {key: server.metadata[key]}})

    def _set_metadata_item(self, request: Request, match: Any) -> Response:
        server, key = self._find(match.group(1)), match.group(2)
        body = request.json(lambda why: nova_error(400, why))
        meta = _metadata(body.get("meta") if isinstance(body, dict) else None)
        if list(meta) != [key]:
            raise nova_error(400, "Request body and URI mismatch")
        self._retag(server, {**server.metadata, **meta})
        return _ok({"meta": meta})

    def _delete_metadata_item(self, request: Request, match: Any) -> Response:
        server, key = self._find(match.group(1)), match.group(2)
        if key not in server.metadata:
            raise nova_error(404, f"Metadata item was not found: {key}")
        self._retag(server, {k: v for k, v in server.metadata.items() if k != key})
        return Response(204, headers=_headers())

    def _tags(self, request: Request, match: Any) -> Response:
        return _ok({"tags": list(self._find(match.group(1)).tags)})

    def _set_tags(self, request: Request, match: Any) -> Response:
        server = self._find(match.group(1))
        if request.method == "DELETE":
            server.tags = []
            return Response(204, headers=_headers())
        body = request.json(lambda why: nova_error(400, why))
        server.tags = _tags(body.get("tags") if isinstance(body, dict) else None)
        return _ok({"tags": list(server.tags)})

    def _tag(self, request: Request, match: Any) -> Response:
        server, tag = self._find(match.group(1)), match.group(2)
        if tag not in server.tags:
            raise nova_error(404, f"Tag {tag} could not be found on instance {server.server_id}")
        return Response(204, headers=_headers())

    def _add_tag(self, request: Request, match: Any) -> Response:
        server, tag = self._find(match.group(1)), match.group(2)
        if tag in server.tags:
            return Response(204, headers=_headers())
        server.tags = _tags([*server.tags, tag])
        link = f"{request.base_url}{_BASE}/servers/{server.server_id}/tags/{tag}"
        return Response(201, headers=_headers() | {"Location": link})

    def _remove_tag(self, request: Request, match: Any) -> Response:
        server, tag = self._find(match.group(1)), match.group(2)
        if tag not in server.tags:
            raise nova_error(404, f"Tag {tag} could not be found on instance {server.server_id}")
        server.tags = [t for t in server.tags if t != tag]
        return Response(204, headers=_headers())

    # -- inside -------------------------------------------------------------------------------

    def _find(self, server_id: str) -> Server:
        server = self.servers.get(server_id)
        if server is None:
            raise nova_error(404, f"Instance {server_id} could not be found.")
        return server

    def _forget(self, server_id: str) -> None:
        self.servers.pop(server_id, None)
        self._leases.release(server_id)

    def _lost(self, envelope: Envelope) -> None:
        lost = envelope.payload
        assert isinstance(lost, InstanceLost)
        self._forget(lost.instance_id)

    def _retag(self, server: Server, metadata: dict[str, str]) -> None:
        self._region.sim.provider.retag(server.server_id, spot_tags.from_metadata(metadata))
        server.metadata = metadata

    def _room(self, pool: Pool) -> int:
        """vCPU an ordinary launch may take: the region's room less what leases hold."""
        return self._region.sim.provider.room_vcpu(pool.pool_id) - self._leases.held_vcpu(
            pool.pool_id
        )

    def _check_boot(self, spec: dict[str, Any]) -> None:
        image = str(spec.get("imageRef") or "").rstrip("/").rsplit("/", 1)[-1]
        if image != self._names.image_id:
            raise nova_error(400, f"Image {image} could not be found.")
        networks = spec.get("networks", "auto")
        if networks in ("auto", "none"):
            return
        if not isinstance(networks, list):
            raise nova_error(400, "Invalid input for field/attribute networks.")
        for network in networks:
            net = network.get("uuid") if isinstance(network, dict) else None
            if net != self._names.network_id:
                raise nova_error(400, f"Network {net} could not be found.")

    def _pool(
        self, flavor: Flavor, zone: Any, metadata: dict[str, str], lease: Lease | None
    ) -> Pool:
        if lease is not None:
            return lease.pool
        tags = spot_tags.from_metadata(metadata)
        model = tags.get(spot_tags.PURCHASE_MODEL_TAG, "guaranteed")
        catalogue = self._region.sim.catalogue
        if zone is not None:
            hall = self._names.hall_of_zone.get(str(zone))
            if hall is None:
                raise nova_error(400, "The requested availability zone is not available")
            halls = [hall]
        else:
            halls = list(self._names.halls)
        pools = [
            catalogue.get(pid)
            for hall in halls
            if (pid := pool_id_for(flavor.sku_family, flavor.vcpus, hall, model)) in catalogue
        ]
        if not pools:
            where = f"zone {zone}" if zone is not None else "any zone"
            raise nova_error(400, f"no {model} capacity of flavor {flavor.name} in {where}")
        named = tags.get(spot_tags.POOL_TAG)
        if named is not None and named not in {p.pool_id for p in pools}:
            raise nova_error(
                400,
                f"metadata names pool {named}; flavor {flavor.name} in "
                f"{zone or 'any zone'} as {model} capacity is not that pool",
            )
        if len(pools) > 1:  # no zone asked: the first hall with room
            pools = [p for p in pools if self._room(p) >= p.size_vcpu] or pools
        return pools[0]

    def _json(self, server: Server, base_url: str, detail: bool) -> dict[str, Any]:
        link = f"{base_url}{_BASE}/servers/{server.server_id}"
        brief: dict[str, Any] = {
            "id": server.server_id,
            "name": server.name,
            "links": [{"rel": "self", "href": link}],
        }
        if not detail:
            return brief
        c, flavor = self._credentials, server.flavor
        created = _iso(server.created_us)
        digest = hashlib.sha256(server.server_id.encode()).digest()
        return brief | {
            "status": "ACTIVE",
            "tenant_id": c.project_id,
            "user_id": c.user_id,
            "metadata": dict(server.metadata),
            "tags": list(server.tags),
            "hostId": hashlib.sha224(server.pool.pool_id.encode()).hexdigest(),
            "description": None,
            "image": {"id": self._names.image_id},
            "flavor": {
                "vcpus": flavor.vcpus,
                "ram": flavor.ram_mb,
                "disk": flavor.disk_gb,
                "ephemeral": 0,
                "swap": 0,
                "original_name": flavor.name,
                "extra_specs": {},
            },
            "created": created,
            "updated": created,
            "addresses": {
                "fleet": [
                    {
                        "version": 4,
                        "addr": f"10.{digest[0]}.{digest[1]}.{digest[2]}",
                        "OS-EXT-IPS:type": "fixed",
                    }
                ]
            },
            "accessIPv4": "",
            "accessIPv6": "",
            "OS-DCF:diskConfig": "MANUAL",
            "OS-EXT-AZ:availability_zone": server.zone,
            "config_drive": "",
            "key_name": None,
            "OS-SRV-USG:launched_at": created.rstrip("Z"),
            "OS-SRV-USG:terminated_at": None,
            "OS-EXT-STS:task_state": None,
            "OS-EXT-STS:vm_state": "active",
            "OS-EXT-STS:power_state": 1,
            "os-extended-volumes:volumes_attached": [],
            "security_groups": [{"name": "default"}],
            "locked": False,
            "locked_reason": None,
            "trusted_image_certificates": None,
            "server_groups": [],
            "pinned_availability_zone": None,
        }


def _headers() -> dict[str, str]:
    return {
        "OpenStack-API-Version": f"compute {MICROVERSION}",
        "X-OpenStack-Nova-API-Version": MICROVERSION,
    }


def _ok(body: Any, status: int = 200) -> Response:
    return Response(status, body, _headers())


def _principal(principal: Principal | None) -> str:
    if principal is None:
        return "anonymous"
    if principal.application_credential_id:
        return f"appcred/{principal.application_credential_id}"
    return f"user/{principal.user_id}"


def _lease_flavor(flavor: Flavor, lease: Lease) -> Flavor:
    return Flavor(
        lease.reservation_id,
        f"reservation:{lease.reservation_id}",
        flavor.sku_family,
        flavor.vcpus,
        flavor.ram_mb,
        flavor.disk_gb,
    )


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise nova_error(400, "Invalid input for field/attribute metadata.")
    for key, item in value.items():
        if not _METADATA_KEY.match(key) or not isinstance(item, str) or len(item) > 255:
            raise nova_error(400, f"Invalid input for field/attribute metadata. Key: {key!r}")
    return dict(value)


def _tags(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > _MAX_TAGS:
        raise nova_error(400, f"Invalid input for field/attribute tags (at most {_MAX_TAGS}).")
    for tag in value:
        if not isinstance(tag, str) or not 0 < len(tag) <= 60 or "," in tag or "/" in tag:
            raise nova_error(400, f"Invalid input for field/attribute tags. Tag: {tag!r}")
    return list(dict.fromkeys(value))


def _split(value: str | None) -> set[str]:
    return {t for t in (value or "").split(",") if t}


def _limit(value: str | None) -> int:
    if value is None:
        return MAX_LIMIT
    try:
        limit = int(value)
    except ValueError:
        raise nova_error(400, f"limit must be an integer, not {value!r}") from None
    if limit < 0:
        raise nova_error(400, "limit must be >= 0")
    return min(limit, MAX_LIMIT) or MAX_LIMIT


def _iso(at_us: int) -> str:
    return datetime.fromtimestamp(at_us // 1_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["MICROVERSION", "Nova", "Server"]
