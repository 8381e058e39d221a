"""Blazar's Reservation API v1, the subset spotcap uses: leases of instances (ADR-22).

    GET    /reservation/v1/leases            every lease of the project
    GET    /reservation/v1/leases/<id>
    POST   /reservation/v1/leases            one ``virtual:instance`` reservation; 201, or 409
    DELETE /reservation/v1/leases/<id>       ends the lease now (its servers stay)

Two kinds of lease are listed:

- **standing** ones, one per committed pool, from the region's `reservation_committed` facts:
  the organisation's committed capacity (the whole pool, 30 days from the start);
- **created** ones: a reservation of ``amount`` x ``vcpus`` on one guaranteed or committed pool
  (committed first) whose size is ``vcpus``, with at least ``memory_mb`` and ``disk_gb``, and that
  ``resource_properties`` selects (``["==", "$hall", "hall-b"]``, ``["and", ...]``; the properties
  are ``hall``, ``sku_family``, ``pool_id``, ``purchase_model``, ``host_aggregate``,
  ``correlation_group``). It is refused (409, "Not enough resources available") when the pool's
  capacity minus the created leases over the same time (and, for a lease that starts now, minus
  what runs there) is less. While it is active, its unused part is held: ordinary launches into
  the pool cannot take it, and a server launched with the reservation's flavor (``flavor_id``,
  the reservation's id, as Blazar makes it) uses it.

Dates are the region's sim time (``CCYY-MM-DD hh:mm`` in, ISO out, UTC). Unlike Blazar, the end
of a lease deletes none of its servers: it only stops holding the capacity.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from schemas.events import Envelope, ReservationCommitted
from schemas.pools import Pool
from sim.clock import MINUTE_US
from sim.cloud.errors import CloudError, blazar_error
from sim.cloud.http import Request, Response, Route, route
from sim.cloud.keystone import CloudCredentials
from sim.cloud.region import CloudRegion

_PROPERTIES = (
    "hall",
    "sku_family",
    "pool_id",
    "purchase_model",
    "host_aggregate",
    "correlation_group",
)
_LEASES = "/reservation/v1/leases"


@dataclass(slots=True)
class Lease:
    lease_id: str
    name: str
    pool: Pool
    start_us: int
    end_us: int
    amount: int
    vcpus: int
    memory_mb: int
    disk_gb: int
    created_us: int
    standing: bool
    affinity: bool | None = False
    resource_properties: str = ""
    servers: set[str] = field(default_factory=set)

    @property
    def reservation_id(self) -> str:
        return str(uuid.uuid5(uuid.UUID(self.lease_id), "reservation"))

    def active(self, now_us: int) -> bool:
        return self.start_us <= now_us < self.end_us

    def status(self, now_us: int) -> str:
        if now_us < self.start_us:
            return "PENDING"
        return "ACTIVE" if now_us < self.end_us else "TERMINATED"

    def held_vcpu(self, now_us: int) -> int:
        """vCPU this lease keeps from ordinary launches now: its unused part while active."""
        if self.standing or not self.active(now_us):
            return 0
        return max(0, self.amount - len(self.servers)) * self.vcpus


class Leases:
    """The project's leases, and what they hold of each pool."""

    def __init__(self, region: CloudRegion, credentials: CloudCredentials) -> None:
        self._region = region
        self._credentials = credentials
        self._leases: dict[str, Lease] = {}
        self._by_reservation: dict[str, Lease] = {}
        region.on(ReservationCommitted.EVENT_TYPE, self._standing)

    # -- what Nova asks -----------------------------------------------------------------------

    def held_vcpu(self, pool_id: str) -> int:
        now = self._region.sim.now_us()
        return sum(x.held_vcpu(now) for x in self._leases.values() if x.pool.pool_id == pool_id)

    def by_flavor(self, flavor_id: str) -> Lease | None:
        """The lease whose reservation flavor this is."""
        return self._by_reservation.get(flavor_id)

    def bind(self, lease: Lease, server_id: str) -> None:
        lease.servers.add(server_id)

    def release(self, server_id: str) -> None:
        for lease in self._leases.values():
            lease.servers.discard(server_id)

    # -- the API ------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        return [
            route("GET", _LEASES, self._list),
            route("POST", _LEASES, self._create),
            route("GET", f"{_LEASES}/([^/]+)", self._show),
            route("DELETE", f"{_LEASES}/([^/]+)", self._delete),
        ]

    def _list(self, request: Request, match: Any) -> Response:
        now = self._region.sim.now_us()
        return Response(200, {"leases": [self._json(x, now) for x in self._leases.values()]})

    def _show(self, request: Request, match: Any) -> Response:
        return Response(200, {"lease": self._json(self._find(match.group(1)), self._now())})

    def _delete(self, request: Request, match: Any) -> Response:
        lease = self._find(match.group(1))
        now = self._now()
        lease.end_us = min(lease.end_us, max(now, lease.start_us))
        return Response(204)

    def _create(self, request: Request, match: Any) -> Response:
        body = request.json(lambda why: blazar_error(400, why, "MalformedRequestBody"))
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise blazar_error(400, "a lease needs a 'name'", "MalformedRequestBody")
        reservations = body.get("reservations")
        if not isinstance(reservations, list) or len(reservations) != 1:
            raise _bad("the served cloud takes exactly one reservation per lease")
        wanted = reservations[0]
        if not isinstance(wanted, dict) or wanted.get("resource_type") != "virtual:instance":
            raise _bad("only 'virtual:instance' reservations are served")
        now = self._now()
        start = _date(body.get("start_date"), now)
        end = _date(body.get("end_date"), now)
        if start < now - now % MINUTE_US:
            raise _bad("Start date must be later than current date")
        if end <= start:
            raise _bad("End date must be later than start date")
        amount, vcpus = _count(wanted, "amount"), _count(wanted, "vcpus")
        memory_mb, disk_gb = _count(wanted, "memory_mb", 0), _count(wanted, "disk_gb", 0)
        properties = wanted.get("resource_properties") or ""
        chosen = None
        for pool in self._candidates(vcpus, memory_mb, disk_gb, str(properties)):
            if self._free_vcpu(pool, start, end, now) >= amount * vcpus:
                chosen = pool
                break
        if chosen is None:
            raise blazar_error(
                409,
                f"Not enough resources available with query {properties or '[]'}",
                "NotEnoughResourcesAvailable",
            )
        lease = Lease(
            lease_id=str(uuid.uuid5(uuid.UUID(int=0), f"lease/{len(self._leases)}/{body['name']}")),
            name=body["name"],
            pool=chosen,
            start_us=start,
            end_us=end,
            amount=amount,
            vcpus=vcpus,
            memory_mb=memory_mb,
            disk_gb=disk_gb,
            created_us=now,
            standing=False,
            affinity=wanted.get("affinity") if isinstance(wanted.get("affinity"), bool) else None,
            resource_properties=str(properties),
        )
        self._add(lease)
        return Response(201, {"lease": self._json(lease, now)})

    # -- inside -------------------------------------------------------------------------------

    def _now(self) -> int:
        return self._region.sim.now_us()

    def _find(self, lease_id: str) -> Lease:
        lease = self._leases.get(lease_id)
        if lease is None:
            raise blazar_error(
                404, f"Object with {{'lease_id': '{lease_id}'}} not found", "NotFound"
            )
        return lease

    def _add(self, lease: Lease) -> None:
        self._leases[lease.lease_id] = lease
        self._by_reservation[lease.reservation_id] = lease

    def _standing(self, envelope: Envelope) -> None:
        fact = envelope.payload
        assert isinstance(fact, ReservationCommitted)
        pool = self._region.sim.catalogue.get(fact.pool_id)
        flavor = self._region.names.flavor_of(pool)
        self._add(
            Lease(
                lease_id=fact.reservation_id,
                name=f"committed-{pool.pool_id}",
                pool=pool,
                start_us=fact.start_at,
                end_us=fact.end_at,
                amount=fact.reserved_vcpu // pool.size_vcpu,
                vcpus=pool.size_vcpu,
                memory_mb=flavor.ram_mb,
                disk_gb=flavor.disk_gb,
                created_us=envelope.occurred_at,
                standing=True,
                resource_properties=json.dumps(["==", "$pool_id", pool.pool_id]),
            )
        )

    def _candidates(self, vcpus: int, memory_mb: int, disk_gb: int, properties: str) -> list[Pool]:
        wanted = _filter(properties)
        names = self._region.names
        found = [
            p
            for p in self._region.sim.catalogue
            if p.purchase_model != "reclaimable"
            and p.size_vcpu == vcpus
            and names.flavor_of(p).ram_mb >= memory_mb
            and names.flavor_of(p).disk_gb >= disk_gb
            and all(str(getattr(p, k)) == v for k, v in wanted)
        ]
        return sorted(found, key=lambda p: (p.purchase_model != "committed", p.pool_id))

    def _free_vcpu(self, pool: Pool, start_us: int, end_us: int, now_us: int) -> int:
        """What a new lease over [start, end) may take of `pool`."""
        overlapping = sum(
            x.amount * x.vcpus
            for x in self._leases.values()
            if not x.standing and x.pool == pool and x.start_us < end_us and start_us < x.end_us
        )
        free = pool.capacity_vcpu - overlapping
        if start_us <= now_us:  # what runs there now, but not in a lease's own share
            in_leases = sum(
                len(x.servers) * x.vcpus
                for x in self._leases.values()
                if not x.standing and x.pool == pool and x.active(now_us)
            )
            free -= self._region.sim.provider.used_vcpu(pool.pool_id) - in_leases
        return free

    def _json(self, lease: Lease, now_us: int) -> dict[str, Any]:
        c = self._credentials
        status = lease.status(now_us)
        created = _blazar_time(lease.created_us).replace("T", " ")[:19]
        reservation = {
            "id": lease.reservation_id,
            "lease_id": lease.lease_id,
            "status": status.lower(),
            "missing_resources": False,
            "resources_changed": False,
            "resource_id": self._region.names.provider_id(lease.pool.pool_id),
            "resource_type": "virtual:instance",
            "amount": lease.amount,
            "vcpus": lease.vcpus,
            "memory_mb": lease.memory_mb,
            "disk_gb": lease.disk_gb,
            "affinity": lease.affinity,
            "resource_properties": lease.resource_properties,
            "flavor_id": lease.reservation_id,
            "server_group_id": None,
            "aggregate_id": None,
            "created_at": created,
            "updated_at": None,
        }
        events = [
            {
                "id": str(uuid.uuid5(uuid.UUID(lease.lease_id), kind)),
                "lease_id": lease.lease_id,
                "status": "DONE" if now_us >= at else "UNDONE",
                "event_type": kind,
                "time": _blazar_time(at),
                "created_at": created,
                "updated_at": None,
            }
            for kind, at in (("start_lease", lease.start_us), ("end_lease", lease.end_us))
        ]
        return {
            "id": lease.lease_id,
            "name": lease.name,
            "start_date": _blazar_time(lease.start_us),
            "end_date": _blazar_time(lease.end_us),
            "status": status,
            "degraded": False,
            "user_id": c.user_id,
            "project_id": c.project_id,
            "trust_id": None,
            "created_at": created,
            "updated_at": None,
            "reservations": [reservation],
            "events": events,
        }


def _bad(message: str) -> CloudError:
    return blazar_error(400, message, "InvalidInput")


def _count(obj: dict[str, Any], name: str, minimum: int = 1) -> int:
    value = obj.get(name, minimum if minimum == 0 else None)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _bad(f"'{name}' must be an integer of at least {minimum}")
    return value


def _date(value: Any, now_us: int) -> int:
    if value == "now":
        return now_us
    if not isinstance(value, str):
        raise _bad(f"a date must be 'now' or 'CCYY-MM-DD hh:mm', not {value!r}")
    try:
        parsed = datetime.strptime(value, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    except ValueError:
        raise _bad(f"a date must be 'now' or 'CCYY-MM-DD hh:mm', not {value!r}") from None
    return int(parsed.timestamp()) * 1_000_000


def _blazar_time(at_us: int) -> str:
    return datetime.fromtimestamp(at_us / 1e6, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


def _filter(properties: str) -> list[tuple[str, str]]:
    """``resource_properties`` as (property, value) pairs that must all hold."""
    if not properties:
        return []
    try:
        parsed = json.loads(properties)
    except ValueError:
        raise _bad(f"resource_properties is not JSON: {properties!r}") from None
    terms = parsed[1:] if isinstance(parsed, list) and parsed[:1] == ["and"] else [parsed]
    pairs = []
    for term in terms:
        if (
            not isinstance(term, list)
            or len(term) != 3
            or term[0] != "=="
            or not isinstance(term[1], str)
            or term[1].removeprefix("$") not in _PROPERTIES
        ):
            raise _bad(
                f"resource_properties term {term!r}: the served cloud takes "
                f'["==", "$<property>", value] of {", ".join(_PROPERTIES)}, or "and" of them'
            )
        pairs.append((term[1].removeprefix("$"), str(term[2])))
    return pairs
