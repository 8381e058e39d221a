"""What the provider contract suite (tests/test_provider_contract.py) needs of each implementation.

The suite speaks only the seam (`provider.base.CapacityProvider`); a harness adds what the seam
cannot say: a pool with room, a launch the provider will refuse for lack of room, instances
that are not ours, one of ours on guaranteed capacity, and how to let time pass. Each
implementation declares which of the five commitments' events its `poll_events` gives.

* `SimHarness`: a quiet simulated region (no background reclaims, no workloads) at sim time;
  foreign instances are launched with another owner's tags, time passes with `run_until`.
* `ServedCloudHarness`: the OpenStack adapter, through the real openstacksdk and keystoneauth,
  against the same kind of quiet region served as a cloud (`sim.cloud`: Keystone, Nova,
  Placement, Blazar and the provider feeds on a real HTTP server on a free port), whose clock
  runs at a declared speed-up of wall time; foreign servers are created by hand through Nova,
  and time passes as the cloud's clock does. The adapter's clock is the cloud's. (The recorded
  exchanges of tests/recordings/openstack/ stay for what the served cloud cannot show: Nova's
  and the feeds' failures, and bodies that break the feeds' shape.)

Neither harness passes a token budget: the suite holds the provider to the seam alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from provider.base import CapacityProvider, LaunchRequest, owned_tags
from provider.openstack import OpenStackProvider
from schemas.events import Envelope
from sim import ReclaimSettings, RegionSim, SimConfig
from sim.clock import SECOND_US
from sim.cloud import ServedCloud
from tests.cloud_support import (
    GUARANTEED_POOL,
    POOL,
    SMALL_POOL,
    adapter,
    clock_of,
    connect,
    create_server,
    settle,
)

COMMITMENT_EVENTS = frozenset(
    {
        "notice_received",  # 1. the hard notice
        "instance_lost",  # 1. ... and the loss at its deadline
        "advisory",  # 2.
        "rate_card",  # 3.
        "forward_capacity",  # 4.
        "reservation_committed",  # 4.
    }
)
"""The events of the provider commitments 1-4 (5, the reclaim API, is a call)."""

WORKLOAD = "wl-render"
EXTRA_TAGS: Mapping[str, str] = {"team": "vfx"}
MAX_POLLS = 1_000  # a bound on `poll_all`: each fact comes out once, so far fewer are needed


class ProviderHarness(Protocol):
    """One implementation of the seam, set up for the contract suite."""

    @property
    def provider(self) -> CapacityProvider: ...

    @property
    def pool_id(self) -> str:
        """A reclaimable pool with room for the suite's launches."""
        ...

    @property
    def pool_vcpu(self) -> int: ...

    @property
    def commitment_events(self) -> frozenset[str]:
        """Which of `COMMITMENT_EVENTS` this implementation's `poll_events` gives."""
        ...

    def request_without_room(self) -> LaunchRequest:
        """A launch this provider refuses now for lack of room."""
        ...

    def foreign_instance_ids(self) -> list[str]:
        """Live instances that are not ours: another orchestrator's, and one nobody tagged."""
        ...

    def guaranteed_instance_id(self) -> str:
        """A live instance of ours on capacity that cannot be reclaimed."""
        ...

    def gone_instance_id(self) -> str:
        """An instance id the provider has no live instance of."""
        ...

    def settle(self, until_us: int) -> None:
        """Let the provider reach `until_us` (what was scheduled before it has happened)."""
        ...


def launch_request(harness: ProviderHarness, causation_id: str | None = None) -> LaunchRequest:
    """The suite's launch: our tags for the workload, and an extra tag of the request's own."""
    me = harness.provider.orchestrator_id
    return LaunchRequest(
        harness.pool_id, WORKLOAD, owned_tags(me, WORKLOAD, EXTRA_TAGS), causation_id
    )


def poll_all(provider: CapacityProvider) -> list[Envelope]:
    """Every fact the provider has now: polls until a poll gives nothing."""
    events: list[Envelope] = []
    for _ in range(MAX_POLLS):
        batch = provider.poll_events()
        if not batch:
            return events
        events += batch
    raise AssertionError(f"poll_events still gave events after {MAX_POLLS} polls")


# -- the simulator ----------------------------------------------------------------------------

SIM_ME = "spotcap-contract"


class SimHarness:
    def __init__(self) -> None:
        config = SimConfig(
            seed=2,
            days=2.0,
            halls=2,
            workloads=0,
            reclaims=ReclaimSettings(background=False, waves_per_day=0.0),
        )
        config = replace(config, orchestrator=replace(config.orchestrator, orchestrator_id=SIM_ME))
        self.sim = RegionSim(config)
        pools = sorted(self.sim.catalogue, key=lambda p: p.pool_id)
        self._pool = next(p for p in pools if p.purchase_model == "reclaimable")
        self._full = next(
            p for p in pools if p.purchase_model == "reclaimable" and p is not self._pool
        )
        self._guaranteed = next(p for p in pools if p.purchase_model != "reclaimable")

    @property
    def provider(self) -> CapacityProvider:
        return self.sim.provider

    @property
    def pool_id(self) -> str:
        return self._pool.pool_id

    @property
    def pool_vcpu(self) -> int:
        return self._pool.size_vcpu

    @property
    def commitment_events(self) -> frozenset[str]:
        return COMMITMENT_EVENTS

    def request_without_room(self) -> LaunchRequest:
        pool = self._full
        filler = LaunchRequest(pool.pool_id, "wl-filler", owned_tags(SIM_ME, "wl-filler"))
        while self.sim.provider.room_vcpu(pool.pool_id) >= pool.size_vcpu:
            self.sim.provider.launch(filler)
        return LaunchRequest(pool.pool_id, WORKLOAD, owned_tags(SIM_ME, WORKLOAD, EXTRA_TAGS))

    def foreign_instance_ids(self) -> list[str]:
        # The simulator tags an instance as the request says, so others' instances are launched
        # here with their tags (the OpenStack adapter always writes its own owner tag).
        others = owned_tags("another-orchestrator", "wl-theirs")
        return [
            self.sim.provider.launch(LaunchRequest(self.pool_id, "wl-theirs", tags)).instance_id
            for tags in (others, {"team": "someone-else"})
        ]

    def guaranteed_instance_id(self) -> str:
        request = LaunchRequest(self._guaranteed.pool_id, WORKLOAD, owned_tags(SIM_ME, WORKLOAD))
        return self.sim.provider.launch(request).instance_id

    def gone_instance_id(self) -> str:
        return "00000000-0000-4000-8000-000000000000"

    def settle(self, until_us: int) -> None:
        self.sim.run_until(until_us)


# -- the OpenStack adapter on the served cloud --------------------------------------------------

SERVED_ME = "orch-contract"


class ServedCloudHarness:
    def __init__(self, cloud: ServedCloud) -> None:
        self.cloud = cloud
        self._provider: OpenStackProvider = adapter(cloud, SERVED_ME)
        self._clock = clock_of(cloud.access)
        self._by_hand = connect(cloud.access, application_credential=False)

    @property
    def provider(self) -> CapacityProvider:
        return self._provider  # mypy --strict checks here that the adapter is the seam

    @property
    def pool_id(self) -> str:
        return POOL

    @property
    def pool_vcpu(self) -> int:
        return 8

    @property
    def commitment_events(self) -> frozenset[str]:
        # Not yet: the loss at the deadline (the adapter does not read losses from Nova; the
        # served cloud forgets the server then, which test_cloud.py shows), and reservations
        # as events (Blazar leases are read with `leases()`).
        return COMMITMENT_EVENTS - {"instance_lost", "reservation_committed"}

    def request_without_room(self) -> LaunchRequest:
        filler = LaunchRequest(SMALL_POOL, "wl-filler", owned_tags(SERVED_ME, "wl-filler"))
        self._provider.launch(filler)
        self._provider.launch(filler)  # the pool holds two
        return LaunchRequest(SMALL_POOL, WORKLOAD, owned_tags(SERVED_ME, WORKLOAD, EXTRA_TAGS))

    def foreign_instance_ids(self) -> list[str]:
        theirs = {"spotcap.io:owner": "another-orchestrator", "spotcap.io:workload": "wl-theirs",
                  "spotcap.io:purchase-model": "reclaimable"}  # fmt: skip
        return [
            create_server(self.cloud, self._by_hand, POOL, theirs,
                          ["spotcap.io:owner=another-orchestrator"]),
            create_server(self.cloud, self._by_hand, POOL, {"team": "someone-else"}),
        ]  # fmt: skip

    def guaranteed_instance_id(self) -> str:
        request = LaunchRequest(GUARANTEED_POOL, WORKLOAD, owned_tags(SERVED_ME, WORKLOAD))
        return self._provider.launch(request).instance_id

    def gone_instance_id(self) -> str:
        return "00000000-0000-4000-8000-000000000000"

    def settle(self, until_us: int) -> None:
        settle(self.cloud, until_us)


__all__ = [
    "COMMITMENT_EVENTS",
    "SECOND_US",
    "ProviderHarness",
    "ServedCloudHarness",
    "SimHarness",
    "launch_request",
    "poll_all",
]
