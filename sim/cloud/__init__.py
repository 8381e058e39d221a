"""The simulated region served behind the subset of OpenStack that `provider.openstack` uses, so
that the real openstacksdk adapter drives it as it would a cloud (docs/providers.md).

What it owns: Keystone's token endpoint (`keystone`), Nova servers with metadata and tags and
flavors (`nova`), Placement resource providers, inventories and usages (`placement`), Blazar
leases (`blazar`), the provider-built rate-card, forward-capacity, notice and reclaim feeds
(`feeds`), the notices on NATS and the metadata endpoint (`outlet`), and ``/sim/v1`` (`status`),
over a `RegionSim` whose clock runs at a declared speed-up of wall time (`clock`, `region`).
Event time stays the simulator's. Entry points: `ServedCloud(CloudConfig(...))` in-process,
`serve_cloud(...)` for `spotcap cloud serve`.

What it may import: `schemas`, `provider` (the adapter's tag and mapping formats, the notice
path), the rest of `sim`; the standard library's http.server; PyYAML. Who calls it: the command
line, the live region, the tests.
"""

from sim.cloud.clock import ClockAnchor, SpeedClock
from sim.cloud.keystone import CloudCredentials
from sim.cloud.naming import CloudNames
from sim.cloud.region import CloudRegion, Mark
from sim.cloud.serve import CLOUD_NAME, CloudAccess, CloudConfig, ServedCloud, serve_cloud

__all__ = [
    "CLOUD_NAME",
    "ClockAnchor",
    "CloudAccess",
    "CloudConfig",
    "CloudCredentials",
    "CloudNames",
    "CloudRegion",
    "Mark",
    "ServedCloud",
    "SpeedClock",
    "serve_cloud",
]
