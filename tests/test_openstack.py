"""The OpenStack adapter against recorded OpenStack exchanges, through the real SDK HTTP stack.

The replay server (tests/test_openstack_replay.py) answers only the requests recorded in
tests/recordings/openstack/; anything else fails the test. The assertions are on what the
adapter returns and on the exact requests it sent. The recordings stay for what the simulated
region served as a cloud (`sim.cloud`, tests/test_openstack_served.py) cannot show: Nova's
403, 409 and 500 answers, no answer at all, Placement's inventories of real compute nodes
(allocation ratios, reserved amounts), Blazar's host reservations, a feed body that breaks the
contract, and the reclaim API's 403 outside the exercise window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provider.base import (
    DeleteRequest,
    LaunchRequest,
    ProviderError,
    ReclaimRequest,
    owned_tags,
)
from provider.openstack import (
    BlazarLeases,
    ConflictError,
    FeedFormatError,
    ForbiddenError,
    MutatingCall,
    NotFoundError,
    OpenStackCallError,
    OpenStackProvider,
    PoolMapping,
    ProviderFeeds,
    ServiceError,
    UnavailableError,
)
from provider.openstack.tags import from_metadata, owner_server_tag, to_metadata
from schemas.events import PurchaseModel
from schemas.pools import Pool, PoolCatalogue
from tests.test_openstack_replay import REGION, ReplayServer, connect, replay_servers

OWNER = "orch-eu1"
OWNED = "9b1f6c2e-4d3a-4b8e-9f7a-1c2d3e4f5a6b"
OWNED2 = "2a7e9d14-6b5c-4f3e-8d2a-7b6c5d4e3f21"
BUSY = "d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6"
GONE = "e2f3a4b5-c6d7-4e8f-90a1-b2c3d4e5f607"
POOL = "c3.8.hall2.reclaimable"
IMAGE = "0e3c2b1a-9f8e-4d7c-b6a5-948372615a0b"
NET = "6a5b4c3d-2e1f-4a0b-9c8d-7e6f5a4b3c2d"
MAPPING_FILE = (
    Path(__file__).resolve().parent.parent / "provider" / "openstack" / "pool-mapping.example.yaml"
)
T_NOW = 1_796_022_900_000_000  # the tests' wall clock, after every recorded feed time


def _pool(family: str, size: int, hall: str, model: PurchaseModel) -> Pool:
    reclaimable = model == "reclaimable"
    return Pool(
        sku_family=family,
        size_vcpu=size,
        memory_gib=size * 4,
        hall=hall,
        host_aggregate=f"{family}-general",
        purchase_model=model,
        capacity_vcpu=size * 64,
        expected_interruptions_per_h=0.01 if reclaimable else 0.0,
        price_per_vcpu_h_eur_micros=4200 if reclaimable else 14000,
        guaranteed_price_per_vcpu_h_eur_micros=14000,
    )


CATALOGUE = PoolCatalogue(
    REGION,
    [
        _pool("c3", 8, "hall2", "reclaimable"),
        _pool("c3", 8, "hall2", "guaranteed"),
        _pool("c3", 4, "hall1", "reclaimable"),
    ],
)


def pool_mapping() -> PoolMapping:
    """The documented example mapping over the tests' catalogue."""
    return PoolMapping.load(MAPPING_FILE, CATALOGUE)


@pytest.fixture
def replays() -> Iterator[Callable[..., ReplayServer]]:
    yield from replay_servers()


class Budget:
    """A token-budget hook that records what was drawn."""

    def __init__(self) -> None:
        self.drawn: list[MutatingCall] = []

    def __call__(self, kind: MutatingCall) -> None:
        self.drawn.append(kind)


def provider_for(
    replay: ReplayServer, budget: Budget | None = None, *, pools: PoolMapping | None = None
) -> OpenStackProvider:
    return OpenStackProvider(
        connect(replay),
        orchestrator_id=OWNER,
        pools=pools or pool_mapping(),
        feed_endpoint=f"{replay.base_url}/feed",
        acquire=budget or Budget(),
        timeout_s=5.0,
        clock=lambda: T_NOW,
    )


def feeds_for(replay: ReplayServer, budget: Budget | None = None) -> ProviderFeeds:
    return ProviderFeeds(
        connect(replay).session, f"{replay.base_url}/feed", budget or Budget(), timeout_s=5.0
    )


def launch_request(workload_id: str = "wl-render", pool_id: str = POOL) -> LaunchRequest:
    return LaunchRequest(
        pool_id=pool_id,
        workload_id=workload_id,
        tags=owned_tags(OWNER, workload_id, {"team": "vfx"}),
        causation_id="5d6e7f80-9a1b-4c2d-8e3f-4a5b6c7d8e9f",
    )


def delete_request(instance_id: str) -> DeleteRequest:
    return DeleteRequest(instance_id, reason="scale-down")


# -- tags -------------------------------------------------------------------------------------


def test_tags_round_trip_through_nova_metadata_keys() -> None:
    tags = {"spotcap.io/owner": OWNER, "spotcap.io/pool": POOL, "team": "vfx"}
    metadata = to_metadata(tags)
    assert metadata == {"spotcap.io:owner": OWNER, "spotcap.io:pool": POOL, "team": "vfx"}
    assert from_metadata(metadata) == tags
    with pytest.raises(ValueError, match="reserved"):
        to_metadata({"a:b": "x"})
    with pytest.raises(ValueError, match="not a valid Nova metadata key"):
        to_metadata({"spotcap.io/ünïcode": "x"})
    with pytest.raises(ValueError, match="cannot be a Nova server tag"):
        owner_server_tag("a,b")


# -- Nova -------------------------------------------------------------------------------------


def test_nova_403_409_500_and_404_become_typed_errors_naming_the_call(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_flavors", "nova_errors")
    budget = Budget()
    provider = provider_for(replay, budget)

    with pytest.raises(ForbiddenError) as quota:
        provider.launch(launch_request("wl-quota"))
    assert quota.value.call == "nova.create_server"
    assert quota.value.status == 403
    assert POOL in quota.value.target and "wl-quota-" in quota.value.target
    assert "Quota exceeded for cores" in str(quota.value)

    with pytest.raises(ConflictError) as busy:
        provider.delete(delete_request(BUSY))
    assert (busy.value.call, busy.value.status) == ("nova.delete_server", 409)
    assert BUSY in busy.value.target and POOL in busy.value.target
    assert "task_state rebuilding" in busy.value.detail
    assert busy.value.request_id == "req-2b3c4d5e-0003-4f6a-9b0c-1d2e3f4a5b03"
    assert busy.value.retryable

    with pytest.raises(ServiceError) as fault:
        provider.list_by_tag("spotcap.io/owner", OWNER)
    assert (fault.value.call, fault.value.status) == ("nova.list_servers", 500)
    assert "DBConnectionError" in fault.value.detail

    with pytest.raises(NotFoundError) as gone:
        provider.delete(delete_request(GONE))
    assert (gone.value.call, gone.value.status) == ("nova.get_server", 404)

    # One token per mutating request sent: the refused launch and the refused delete.
    assert budget.drawn == ["launch", "delete"]


def test_no_response_is_an_unavailable_error_and_a_missing_endpoint_is_not_retryable() -> None:
    replay = ReplayServer("discovery")
    conn = connect(replay)
    conn.compute.get_endpoint()  # token, catalog and Nova's version document from the replay
    replay.close()  # then the cloud goes away
    conn.session.session.close()  # and so do the kept-alive connections to it
    provider = OpenStackProvider(
        conn, orchestrator_id=OWNER, pools=pool_mapping(), feed_endpoint="http://127.0.0.1:9"
    )
    feeds = ProviderFeeds(conn.session, "http://127.0.0.1:9")
    for attempt, call in ((lambda: provider.list_by_tag("spotcap.io/owner", OWNER),
                           "nova.list_servers"),
                          (feeds.rate_cards, "feed.rate_cards")):  # fmt: skip
        with pytest.raises(UnavailableError) as caught:
            attempt()
        assert caught.value.status is None and caught.value.call == call
        assert caught.value.retryable and isinstance(caught.value, ProviderError)

    elsewhere = BlazarLeases(conn, region_name="nowhere-1")
    with pytest.raises(OpenStackCallError, match="EndpointNotFound") as missing:
        elsewhere.leases()
    assert type(missing.value) is OpenStackCallError and not missing.value.retryable


# -- Placement --------------------------------------------------------------------------------

AGGREGATE = "a3f1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
RP1 = "4e8ac7a1-2b3c-4d5e-9f60-718293a4b5c6"
RP2 = "5f9bd8b2-3c4d-4e5f-a071-8293a4b5c6d7"


def test_headroom_is_inventory_less_reserved_times_ratio_less_usage(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "placement_headroom")
    budget = Budget()
    node1, node2 = provider_for(replay, budget).headroom(member_of=AGGREGATE)

    assert (node1.resource_provider_id, node1.name, node1.generation) == (
        RP1,
        "cmp-hall2-r07-n01",
        12,
    )
    vcpu = node1.resources["VCPU"]
    assert (vcpu.capacity, vcpu.used, vcpu.free) == ((64 - 4) * 4, 200, 40)
    assert node1.free("MEMORY_MB") == 524288 - 8192 - 491520
    assert node1.free("DISK_GB") == 1400
    assert node1.free("VGPU") == 0  # no inventory of it
    assert node2.free("VCPU") == 0  # fully allocated
    assert node2.resources["MEMORY_MB"].capacity == int((1048576 - 16384) * 1.5)
    assert node2.free("MEMORY_MB") == int((1048576 - 16384) * 1.5) - 1_000_000
    assert budget.drawn == []  # reads draw nothing
    assert replay.requests("/placement/") == [
        ("GET", f"/placement/resource_providers?member_of={AGGREGATE}"),
        ("GET", f"/placement/resource_providers/{RP1}/inventories"),
        ("GET", f"/placement/resource_providers/{RP1}/usages"),
        ("GET", f"/placement/resource_providers/{RP2}/inventories"),
        ("GET", f"/placement/resource_providers/{RP2}/usages"),
    ]


# -- Blazar -----------------------------------------------------------------------------------

DEC_1 = 1_796_083_200_000_000  # 2026-12-01T00:00:00Z
JAN_1 = 1_798_761_600_000_000  # 2027-01-01T00:00:00Z


def test_blazar_leases_are_listed_through_the_reservation_endpoint(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "blazar_leases")
    floor, hosts = provider_for(replay).leases()

    assert (floor.name, floor.status, floor.start_at_us, floor.end_at_us) == (
        "floor-wl-render-2026-12",
        "ACTIVE",
        DEC_1,
        JAN_1,
    )
    assert floor.reserved_vcpu == 24 * 8
    assert floor.reservations[0].flavor_id == "ddc45423-f863-4e4e-8e7a-51d27cfec962"
    assert hosts.reservations[0].resource_type == "physical:host"
    assert (hosts.reservations[0].min_hosts, hosts.reservations[0].max_hosts) == (2, 4)
    assert hosts.reserved_vcpu == 0
    assert replay.requests("/reservation/") == [("GET", "/reservation/v1/leases")]


# -- the private cloud team's feeds -----------------------------------------------------------


def test_a_feed_answer_that_breaks_the_contract_is_a_feed_format_error(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "feeds")
    with pytest.raises(FeedFormatError, match="price_per_vcpu_h_eur_micros") as caught:
        feeds_for(replay).rate_cards("broken")
    assert isinstance(caught.value, ProviderError) and not caught.value.retryable


def test_a_reclaim_403_is_a_forbidden_error_with_the_feed_message(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_servers", "feeds")
    with pytest.raises(ForbiddenError) as caught:
        provider_for(replay).reclaim(ReclaimRequest(OWNED, correlation_id="exercise-at-night"))
    assert (caught.value.call, caught.value.status) == ("feed.reclaim", 403)
    assert OWNED in caught.value.target
    assert "09:00-16:00 UTC" in caught.value.detail
    assert not caught.value.retryable
