"""The simulated region's pools in OpenStack's words: flavors, zones, an image, a network,
resource providers and aggregates; and the pool mapping the adapter reads them back with.

A pool is SKU family x size x hall x purchase model (`schemas.pools`). Served as a cloud:

- each SKU family at each size is a Nova **flavor** named ``<family>.<size>`` (``c7-amd.16``),
  with the pool's vCPU and memory and 10 GB of disk per vCPU;
- each hall is an **availability zone** ``az-<hall>``;
- every server boots the one **image** and attaches to the one **network** of the region;
- each pool is one Placement **resource provider** named after the pool, a member of two
  **aggregates**: its hall (``hall:<hall>``) and its correlation group (``group:<group>``);
- the purchase model is the server's ``spotcap.io:purchase-model`` metadata, as on premises
  (the same flavor in the same zone is reclaimable or guaranteed capacity by its tag).

Ids are UUIDv5 of the region and the name, so the same catalogue gives the same ids in every
run. `pool_mapping_yaml` is the mapping file (``provider.openstack.mapping``) that makes the
adapter boot each pool where this cloud serves it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import yaml

from provider.openstack.mapping import FORMAT, PoolMapping
from schemas.pools import Pool, PoolCatalogue

_NAMESPACE = uuid.UUID("3b0a6f4e-9d21-4c8e-b7f5-1e2d3c4b5a69")
DISK_GB_PER_VCPU = 10


@dataclass(frozen=True, slots=True)
class Flavor:
    flavor_id: str
    name: str
    sku_family: str
    vcpus: int
    ram_mb: int
    disk_gb: int


class CloudNames:
    """The OpenStack names and ids of a catalogue's pools."""

    def __init__(self, catalogue: PoolCatalogue) -> None:
        self.catalogue = catalogue
        self.region = catalogue.region
        self.image_id = self.id_of("image", "spotcap-node")
        self.network_id = self.id_of("network", "fleet")
        self.flavors: dict[str, Flavor] = {}
        self._by_shape: dict[tuple[str, int], Flavor] = {}
        for pool in sorted(catalogue, key=lambda p: (p.sku_family, p.size_vcpu)):
            shape = (pool.sku_family, pool.size_vcpu)
            if shape in self._by_shape:
                continue
            name = f"{pool.sku_family}.{pool.size_vcpu}"
            flavor = Flavor(
                flavor_id=self.id_of("flavor", name),
                name=name,
                sku_family=pool.sku_family,
                vcpus=pool.size_vcpu,
                ram_mb=pool.memory_gib * 1024,
                disk_gb=pool.size_vcpu * DISK_GB_PER_VCPU,
            )
            self.flavors[flavor.flavor_id] = flavor
            self._by_shape[shape] = flavor
        self.halls = catalogue.halls()
        self.zones = {hall: f"az-{hall}" for hall in self.halls}
        self.hall_of_zone = {zone: hall for hall, zone in self.zones.items()}
        self.providers = {self.provider_id(p.pool_id): p for p in catalogue}

    def id_of(self, kind: str, name: str) -> str:
        return str(uuid.uuid5(_NAMESPACE, f"{self.region}/{kind}/{name}"))

    def flavor_of(self, pool: Pool) -> Flavor:
        return self._by_shape[(pool.sku_family, pool.size_vcpu)]

    def provider_id(self, pool_id: str) -> str:
        """The Placement resource provider of a pool."""
        return self.id_of("resource-provider", pool_id)

    def hall_aggregate(self, hall: str) -> str:
        return self.id_of("aggregate", f"hall:{hall}")

    def group_aggregate(self, group: str) -> str:
        return self.id_of("aggregate", f"group:{group}")

    def aggregates_of(self, pool: Pool) -> list[str]:
        return [self.hall_aggregate(pool.hall), self.group_aggregate(pool.correlation_group)]

    def pool_mapping_yaml(self) -> str:
        """The pool mapping file (``spotcap.openstack-pools/v1``) of this cloud."""
        flavors: dict[str, dict[int, str]] = {}
        for flavor in self.flavors.values():
            flavors.setdefault(flavor.sku_family, {})[flavor.vcpus] = flavor.name
        document = {
            "format": FORMAT,
            "region": self.region,
            "image": self.image_id,
            "networks": [self.network_id],
            "flavors": {
                family: dict(sorted(sizes.items())) for family, sizes in sorted(flavors.items())
            },
            "availability_zones": dict(self.zones),
        }
        return yaml.safe_dump(document, sort_keys=False)

    def pool_mapping(self) -> PoolMapping:
        """The adapter's `PoolMapping` of this cloud."""
        return PoolMapping.from_yaml(self.pool_mapping_yaml(), self.catalogue, "<served cloud>")
