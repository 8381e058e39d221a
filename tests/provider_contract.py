"""What the provider contract suite (tests/test_provider_contract.py) needs of each implementation.

The suite speaks only the seam (`provider.base.CapacityProvider`); a harness adds what the seam
cannot say: a pool with room, a launch the provider will refuse for lack of room, instances
that are not ours, one of ours on guaranteed capacity, and how to let time pass. Each
implementation declares which of the five commitments' events its `poll_events` gives.

* `SimHarness`: a quiet simulated region (no background reclaims, no workloads) at sim time;
  foreign instances are launched with another owner's tags, time passes with `run_until`.
* `OpenStackHarness`: the adapter through the real SDK against the recorded exchanges
  (tests/recordings/openstack/, ``provider_contract.json`` first: the server the suite
  launches, lists, deletes and reclaims, and the feed's notices of that reclaim). Time passing
  is the recording's: the feed answers as it would after it, and the adapter's clock moves on.

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
from tests.test_openstack import (
    FOREIGN,
    GONE,
    GUARANTEED,
    OWNER,
    POOL,
    T_NOW,
    UNTAGGED,
    pool_mapping,
)
from tests.test_openstack_replay import ReplayServer, connect

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


# -- the OpenStack adapter over recorded exchanges ----------------------------------------------

OPENSTACK_RECORDINGS = (
    "provider_contract",
    "discovery",
    "nova_flavors",
    "nova_servers",
    "nova_errors",
    "feeds",
)


class OpenStackHarness:
    def __init__(self, replay: ReplayServer) -> None:
        self.replay = replay
        self.now_us = T_NOW
        self._provider = OpenStackProvider(
            connect(replay),
            orchestrator_id=OWNER,
            pools=pool_mapping(),
            feed_endpoint=f"{replay.base_url}/feed",
            timeout_s=5.0,
            clock=lambda: self.now_us,
        )

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
        # Not yet: the loss at the deadline (the adapter does not read losses from Nova), and
        # reservations as events (Blazar leases are read with `leases()`).
        return COMMITMENT_EVENTS - {"instance_lost", "reservation_committed"}

    def request_without_room(self) -> LaunchRequest:
        # nova_errors.json: Nova refuses this workload's create for the project's core quota.
        return LaunchRequest(POOL, "wl-quota", owned_tags(OWNER, "wl-quota", EXTRA_TAGS))

    def foreign_instance_ids(self) -> list[str]:
        return [FOREIGN, UNTAGGED]

    def guaranteed_instance_id(self) -> str:
        return GUARANTEED

    def gone_instance_id(self) -> str:
        return GONE

    def settle(self, until_us: int) -> None:
        self.now_us = max(self.now_us, until_us)


__all__ = [
    "COMMITMENT_EVENTS",
    "OPENSTACK_RECORDINGS",
    "SECOND_US",
    "OpenStackHarness",
    "ProviderHarness",
    "SimHarness",
    "launch_request",
    "poll_all",
]
