"""Placement: headroom per resource provider, from its inventories and usages.

Placement's own rule gives the capacity of a resource class on a provider:
``int((total - reserved) * allocation_ratio)``; headroom is that capacity minus what is used.
Providers can be narrowed to a host aggregate (``member_of``), which is how halls and the
correlation groups built from them are expressed on premises (ADR-05).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from openstack.connection import Connection

from provider.openstack._calls import translated


@dataclass(frozen=True, slots=True)
class ResourceHeadroom:
    """One resource class (VCPU, MEMORY_MB, DISK_GB, ...) on one resource provider."""

    resource_class: str
    total: int
    reserved: int
    allocation_ratio: float
    used: int
    max_unit: int
    """The largest amount a single allocation may take."""

    @property
    def capacity(self) -> int:
        """What Placement lets allocations add up to."""
        return max(0, int((self.total - self.reserved) * self.allocation_ratio))

    @property
    def free(self) -> int:
        """Headroom: capacity not yet allocated (never negative)."""
        return max(0, self.capacity - self.used)


@dataclass(frozen=True, slots=True)
class ProviderHeadroom:
    """The headroom of one resource provider (a compute node, usually)."""

    resource_provider_id: str
    name: str
    generation: int | None
    resources: Mapping[str, ResourceHeadroom]

    def free(self, resource_class: str) -> int:
        """Free units of ``resource_class`` (0 when the provider has none)."""
        found = self.resources.get(resource_class)
        return found.free if found is not None else 0


class PlacementHeadroom:
    """Reads headroom through ``conn.placement``."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def providers(self, *, member_of: str | None = None) -> list[ProviderHeadroom]:
        """Headroom of every resource provider (in the aggregate ``member_of``, if given)."""
        query = {"member_of": member_of} if member_of else {}
        target = f"aggregate {member_of}" if member_of else "all resource providers"
        with translated("placement.list_resource_providers", target):
            found = list(self._conn.placement.resource_providers(**query))
        return [self.provider(str(rp.id), name=str(rp.name)) for rp in found]

    def provider(self, resource_provider_id: str, *, name: str = "") -> ProviderHeadroom:
        """Headroom of one resource provider: its inventories minus its usages."""
        target = f"resource provider {name or resource_provider_id}"
        with translated("placement.list_inventories", target):
            inventories = list(
                self._conn.placement.resource_provider_inventories(resource_provider_id)
            )
        with translated("placement.get_usages", target):
            with_usages = self._conn.placement.fetch_resource_provider_usages(resource_provider_id)
        usages: Mapping[str, int] = with_usages.usages or {}
        generation = None
        resources: dict[str, ResourceHeadroom] = {}
        for inv in inventories:
            rc = str(inv.resource_class)
            generation = inv.resource_provider_generation
            resources[rc] = ResourceHeadroom(
                resource_class=rc,
                total=int(inv.total),
                reserved=int(inv.reserved or 0),
                allocation_ratio=float(inv.allocation_ratio or 1.0),
                used=int(usages.get(rc, 0)),
                max_unit=int(inv.max_unit if inv.max_unit is not None else inv.total),
            )
        return ProviderHeadroom(
            resource_provider_id=resource_provider_id,
            name=name,
            generation=int(generation) if generation is not None else None,
            resources=resources,
        )
