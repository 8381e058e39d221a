"""The served cloud (`sim.cloud`) for the tests: a small quiet region behind a real HTTP server
on a free port, driven by the real openstacksdk through the OpenStack adapter.

Time passes as the served cloud's clock says (a declared speed-up of wall time); `settle` waits,
bounded and generously, until the region has reached a sim time. No test asserts a wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from openstack.connection import Connection

from provider.openstack import Acquire, OpenStackProvider, unbounded
from schemas.events import PurchaseModel
from schemas.pools import Pool, PoolCatalogue
from sim import ReclaimSettings, SimConfig
from sim.cloud import CloudAccess, CloudConfig, ServedCloud, SpeedClock

REGION = "served-eu1"
OWNER = "orch-served"
SPEED = 1000.0  # sim seconds per wall second: a 150 s notice passes in 0.15 s
DAY_S = 86_400
QUIET = ReclaimSettings(background=False, waves_per_day=0.0)


def _pool(size: int, hall: str, model: PurchaseModel, instances: int) -> Pool:
    reclaimable = model == "reclaimable"
    return Pool(
        sku_family="c3",
        size_vcpu=size,
        memory_gib=size * 4,
        hall=hall,
        host_aggregate="c3-general",
        purchase_model=model,
        capacity_vcpu=size * instances,
        expected_interruptions_per_h=0.01 if reclaimable else 0.0,
        price_per_vcpu_h_eur_micros=4200 if reclaimable else 14000,
        guaranteed_price_per_vcpu_h_eur_micros=14000,
    )


CATALOGUE = PoolCatalogue(
    REGION,
    [
        _pool(8, "hall-a", "reclaimable", 100),  # room for every launch of a test
        _pool(8, "hall-b", "reclaimable", 2),  # full after two
        _pool(8, "hall-a", "guaranteed", 20),
        _pool(8, "hall-b", "committed", 8),
        _pool(4, "hall-b", "reclaimable", 50),
    ],
)
POOL = "c3.8.hall-a.reclaimable"
SMALL_POOL = "c3.8.hall-b.reclaimable"
GUARANTEED_POOL = "c3.8.hall-a.guaranteed"
COMMITTED_POOL = "c3.8.hall-b.committed"


def quiet_config(**changes: Any) -> SimConfig:
    """A region with no workloads and no reclaims of its own; one rate-card and one forecast
    round (at the start) within a day, so a test sees each snapshot once."""
    config = SimConfig(
        seed=2,
        days=2.0,
        region=REGION,
        workloads=0,
        catalogue=CATALOGUE,
        reclaims=QUIET,
        rate_card_interval_s=DAY_S,
        forward_capacity_interval_s=DAY_S,
    )
    return replace(config, **changes)


def served_clouds(
    **defaults: Any,
) -> Iterator[Callable[..., ServedCloud]]:
    """Body of a fixture: a factory of started clouds (`CloudConfig` fields as keywords, `sim`
    a `SimConfig`), closed after the test."""
    clouds: list[ServedCloud] = []

    def make(**options: Any) -> ServedCloud:
        settings = {"sim": quiet_config(), "speed": SPEED, **defaults, **options}
        cloud = ServedCloud(CloudConfig(**settings))
        clouds.append(cloud)
        cloud.start()
        return cloud

    yield make
    for cloud in clouds:
        cloud.close()


def connect(access: CloudAccess, *, application_credential: bool = True) -> Connection:
    """A Connection through the real SDK and keystoneauth stack to the served cloud."""
    options = access.connection_options(application_credential=application_credential)
    return Connection(**options, api_timeout=30, connect_retries=0)


def clock_of(access: CloudAccess) -> SpeedClock:
    """The cloud's clock, computed here from its anchor (as a client in another process would)."""
    return SpeedClock.from_anchor(access.to_json()["clock"])


def adapter(
    cloud: ServedCloud, owner: str = OWNER, acquire: Acquire = unbounded
) -> OpenStackProvider:
    """The OpenStack adapter on the served cloud, stamping its events in the region's time."""
    access = cloud.access
    return OpenStackProvider(
        connect(access),
        orchestrator_id=owner,
        pools=cloud.region.names.pool_mapping(),
        feed_endpoint=access.feed_endpoint,
        acquire=acquire,
        timeout_s=30.0,
        clock=clock_of(access).now_us,
    )


def create_server(
    cloud: ServedCloud,
    conn: Connection,
    pool_id: str,
    metadata: Mapping[str, str],
    tags: list[str] | None = None,
) -> str:
    """A server created by hand through Nova (someone else's, or nobody's) with `pool_id`'s
    flavor and zone; its pool is the one its metadata's purchase model says (guaranteed
    without one)."""
    names = cloud.region.names
    pool = cloud.region.sim.catalogue.get(pool_id)
    server = conn.compute.create_server(
        name=f"by-hand-{pool_id}",
        flavor_id=names.flavor_of(pool).flavor_id,
        image_id=names.image_id,
        networks=[{"uuid": names.network_id}],
        availability_zone=names.zones[pool.hall],
        metadata=dict(metadata),
        tags=tags or [],
    )
    return str(server.id)


def settle(cloud: ServedCloud, until_us: int, *, patience_s: float = 120.0) -> None:
    """Wait until the served region has reached `until_us` (bounded: its clock's wall time to
    get there, plus `patience_s` for a loaded machine)."""
    clock = cloud.region.clock
    deadline = time.monotonic() + clock.wall_s_until(until_us) + patience_s
    while cloud.region.advance() < until_us:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the served region stayed at {cloud.region.now_us()}, short of {until_us}"
            )
        time.sleep(min(0.05, max(0.002, clock.wall_s_until(until_us))))
