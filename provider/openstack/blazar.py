"""Blazar: committed reservations (leases) and the forward calendar they form (ADR-22).

openstacksdk has no proxy for Blazar, so the calls go through the SDK's keystoneauth session
with ``service_type='reservation'``: the endpoint comes from the catalog and the token from the
session, like every other call. Paths follow the Reservation API v1 reference (``/leases``
under the catalog endpoint, which ends in ``/v1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keystoneauth1.adapter import Adapter
from openstack.connection import Connection

from provider.openstack._calls import raise_for_response, translated
from provider.openstack._time import iso_to_us, us_to_blazar
from provider.openstack.budget import Acquire, unbounded
from provider.openstack.errors import FeedFormatError


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """An instance reservation (``virtual:instance``): ``amount`` servers of a shape."""

    name: str
    start_at_us: int | None
    """Start, on a whole minute (Blazar's precision); None starts the lease now."""
    end_at_us: int
    amount: int
    vcpus: int
    memory_mb: int
    disk_gb: int
    affinity: bool | None = False
    """False spreads the servers over hosts, True packs them, None does not care."""
    resource_properties: str = ""
    """Blazar's JSON filter on host capabilities, e.g. ``["==", "$hall", "hall2"]``."""


@dataclass(frozen=True, slots=True)
class LeaseReservation:
    """One reservation inside a lease."""

    reservation_id: str
    resource_type: str
    """``virtual:instance``, ``physical:host`` or ``flavor:instance``."""
    status: str
    amount: int | None = None
    vcpus: int | None = None
    memory_mb: int | None = None
    disk_gb: int | None = None
    flavor_id: str | None = None
    """The flavor Blazar made for an instance reservation: launch with it to use the lease."""
    min_hosts: int | None = None
    max_hosts: int | None = None

    @property
    def reserved_vcpu(self) -> int:
        """vCPU this reservation holds (0 for host reservations, whose size is the hosts')."""
        return (self.amount or 0) * (self.vcpus or 0)


@dataclass(frozen=True, slots=True)
class Lease:
    """A Blazar lease."""

    lease_id: str
    name: str
    status: str
    start_at_us: int
    end_at_us: int
    project_id: str
    degraded: bool
    reservations: tuple[LeaseReservation, ...]

    @property
    def reserved_vcpu(self) -> int:
        return sum(r.reserved_vcpu for r in self.reservations)


class BlazarLeases:
    """List and create leases through the session's ``reservation`` endpoint."""

    def __init__(
        self,
        conn: Connection,
        acquire: Acquire = unbounded,
        *,
        region_name: str | None = None,
        interface: str = "public",
        timeout_s: float = 30.0,
    ) -> None:
        self._adapter = Adapter(
            session=conn.session,
            service_type="reservation",
            interface=interface,
            region_name=region_name or conn.config.get_region_name("reservation"),
        )
        self._acquire = acquire
        self._timeout_s = timeout_s

    def leases(self) -> list[Lease]:
        """Every lease of the project (``GET /v1/leases``)."""
        call = "blazar.list_leases"
        with translated(call, "leases"):
            response = self._adapter.get("/leases", raise_exc=False, timeout=self._timeout_s)
        raise_for_response(call, "leases", response)
        body = _json(call, response.json())
        leases = body.get("leases")
        if not isinstance(leases, list):
            raise FeedFormatError(call, "no 'leases' list")
        return [_lease(call, item) for item in leases]

    def create_lease(self, request: LeaseRequest) -> Lease:
        """Reserve ``amount`` instances of a shape (``POST /v1/leases``; one budget token)."""
        call, target = "blazar.create_lease", f"lease {request.name}"
        start = request.start_at_us
        body = {
            "name": request.name,
            "start_date": "now" if start is None else us_to_blazar(start),
            "end_date": us_to_blazar(request.end_at_us),
            "reservations": [
                {
                    "resource_type": "virtual:instance",
                    "amount": request.amount,
                    "vcpus": request.vcpus,
                    "memory_mb": request.memory_mb,
                    "disk_gb": request.disk_gb,
                    "affinity": request.affinity,
                    "resource_properties": request.resource_properties,
                }
            ],
            "events": [],
        }
        self._acquire("reserve")
        with translated(call, target):
            response = self._adapter.post(
                "/leases", json=body, raise_exc=False, timeout=self._timeout_s
            )
        raise_for_response(call, target, response)
        lease = _json(call, response.json()).get("lease")
        return _lease(call, lease)


def _json(call: str, data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise FeedFormatError(call, "the body is not a JSON object")
    return data


def _opt_int(value: Any) -> int | None:
    return int(value) if value is not None else None


def _lease(call: str, data: Any) -> Lease:
    item = _json(call, data)
    try:
        return Lease(
            lease_id=str(item["id"]),
            name=str(item["name"]),
            status=str(item.get("status")),
            start_at_us=iso_to_us(str(item["start_date"])),
            end_at_us=iso_to_us(str(item["end_date"])),
            project_id=str(item.get("project_id", "")),
            degraded=bool(item.get("degraded", False)),
            reservations=tuple(
                LeaseReservation(
                    reservation_id=str(r["id"]),
                    resource_type=str(r["resource_type"]),
                    status=str(r.get("status")),
                    amount=_opt_int(r.get("amount")),
                    vcpus=_opt_int(r.get("vcpus")),
                    memory_mb=_opt_int(r.get("memory_mb")),
                    disk_gb=_opt_int(r.get("disk_gb")),
                    flavor_id=r.get("flavor_id"),
                    min_hosts=_opt_int(r.get("min")),
                    max_hosts=_opt_int(r.get("max")),
                )
                for r in item.get("reservations") or []
            ),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise FeedFormatError(call, f"malformed lease: {exc!r}") from exc
