"""From the seam's pool id to what Nova needs to boot a server there (ADR-05, ADR-06).

A pool is SKU family x size x hall x purchase model (``schemas.pools``). Nova knows none of
those words: it wants a flavor, an image, networks and an availability zone. `PoolMapping` joins
the pool catalogue with a small reviewed file that says, for the region, which Nova flavor is a
SKU family at a size, which availability zone is a hall, and which image and networks every
server gets (``format: spotcap.openstack-pools/v1``)::

    format: spotcap.openstack-pools/v1
    region: eu-west-1                   # must be the catalogue's region
    image: 0e3c2b1a-9f8e-4d7c-b6a5-948372615a0b    # Glance image id
    networks:                           # Neutron network ids, in attachment order
      - 6a5b4c3d-2e1f-4a0b-9c8d-7e6f5a4b3c2d
    flavors:                            # SKU family -> vCPU -> Nova flavor name (or id)
      c3:
        4: c3.xlarge
        8: c3.2xlarge
        16: c3.4xlarge
    availability_zones:                 # hall -> Nova availability zone
      hall1: az-hall1
      hall2: az-hall2

The purchase model does not change the server: a reclaimable and a guaranteed pool of the same
SKU, size and hall boot the same flavor in the same zone; the difference is the
``spotcap.io/purchase-model`` tag and how the private cloud accounts for it. Every pool of the
catalogue must be mapped (checked on load, so a gap is found at start, not at the first launch);
entries for SKUs or halls the catalogue does not have are allowed (one file can serve several
catalogue revisions). The flavor's vCPU is checked against the pool's size when Nova is first
asked for the flavor (``provider.openstack.compute``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provider.base import UnknownPoolError
from schemas.pools import Pool, PoolCatalogue

FORMAT = "spotcap.openstack-pools/v1"


class PoolMappingError(ValueError):
    """A pool mapping file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """What Nova is asked for to launch one instance of ``pool`` (internal to the adapter)."""

    pool: Pool
    flavor: str
    """The Nova flavor name (or id); resolved to its id, and its vCPU checked, on first use."""
    image_id: str
    network_ids: tuple[str, ...]
    availability_zone: str


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str
    region: str = Field(min_length=1)
    image: str = Field(min_length=1)
    networks: tuple[str, ...] = Field(min_length=1)
    flavors: dict[str, dict[int, str]]
    availability_zones: dict[str, str]


class PoolMapping:
    """The catalogue's pools, each with the Nova flavor, image, networks and zone it boots."""

    def __init__(
        self,
        catalogue: PoolCatalogue,
        *,
        image_id: str,
        network_ids: tuple[str, ...],
        flavors: dict[str, dict[int, str]],
        availability_zones: dict[str, str],
        source: str = "<pool mapping>",
    ) -> None:
        missing = [
            f"{p.pool_id} (no flavor for {p.sku_family} at {p.size_vcpu} vCPU)"
            for p in catalogue
            if p.size_vcpu not in flavors.get(p.sku_family, {})
        ] + [
            f"{p.pool_id} (no availability zone for hall {p.hall})"
            for p in catalogue
            if p.hall not in availability_zones
        ]
        if missing:
            raise PoolMappingError(f"{source}: pools not mapped: " + "; ".join(missing))
        self.catalogue = catalogue
        self._specs = {
            p.pool_id: ServerSpec(
                pool=p,
                flavor=flavors[p.sku_family][p.size_vcpu],
                image_id=image_id,
                network_ids=network_ids,
                availability_zone=availability_zones[p.hall],
            )
            for p in catalogue
        }

    @property
    def region(self) -> str:
        return self.catalogue.region

    def spec(self, pool_id: str) -> ServerSpec:
        """The server spec of ``pool_id``; `UnknownPoolError` for a pool not in the catalogue."""
        found = self._specs.get(pool_id)
        if found is None:
            raise UnknownPoolError(f"no pool {pool_id!r} in region {self.region}'s catalogue")
        return found

    def pool(self, pool_id: str) -> Pool | None:
        """The catalogue's pool, or None (a server tagged with a pool since removed)."""
        found = self._specs.get(pool_id)
        return found.pool if found is not None else None

    @classmethod
    def load(cls, path: Path, catalogue: PoolCatalogue) -> PoolMapping:
        return cls.from_yaml(path.read_text(encoding="utf-8"), catalogue, source=str(path))

    @classmethod
    def from_yaml(
        cls, text: str, catalogue: PoolCatalogue, source: str = "<pool mapping>"
    ) -> PoolMapping:
        try:
            raw: Any = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PoolMappingError(f"{source}: not YAML: {exc}") from exc
        try:
            parsed = _File.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
            )
            raise PoolMappingError(f"{source}: {problems}") from exc
        if parsed.format != FORMAT:
            raise PoolMappingError(f"{source}: format is {parsed.format!r}, expected {FORMAT!r}")
        if parsed.region != catalogue.region:
            raise PoolMappingError(
                f"{source}: region {parsed.region!r} is not the catalogue's {catalogue.region!r}"
            )
        return cls(
            catalogue,
            image_id=parsed.image,
            network_ids=parsed.networks,
            flavors=parsed.flavors,
            availability_zones=parsed.availability_zones,
            source=source,
        )
