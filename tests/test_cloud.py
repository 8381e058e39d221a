"""The simulated region served as a cloud (`sim.cloud`), driven as a cloud is: through the real
openstacksdk and keystoneauth, mostly by the OpenStack adapter.

Keystone's token (password and application credential, secrets never echoed), Nova's servers
(pagination, metadata and tags as the simulation's tags, drift made behind spotcap's back),
Placement's headroom as the region's room, Blazar's leases holding capacity, and the feeds'
rate cards and forecasts as the simulator's own. The contract suite
(tests/test_provider_contract.py) runs the seam against the same cloud; the notice path and
determinism are in tests/test_cloud_notices.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from openstack.connection import Connection
from openstack.exceptions import BadRequestException, ConflictException

from provider.base import (
    OWNER_TAG,
    CapacityUnavailableError,
    DeleteRequest,
    LaunchRequest,
    NotOwnedError,
    UnknownInstanceError,
    owned_tags,
)
from provider.openstack import (
    InstanceNotFoundError,
    LeaseRequest,
    MutatingCall,
    NoCapacityError,
    OpenStackProvider,
    PoolMapping,
    UnauthorizedError,
)
from provider.openstack.config import open_openstack
from schemas.events import ForwardCapacity, RateCard
from schemas.pools import PoolCatalogue
from sim.clock import MINUTE_US, SECOND_US
from sim.cloud import CloudCredentials, ServedCloud
from sim.cloud.http import CloudHTTPServer, Request, Response, route
from sim.cloud.region import ExternalOrchestrator
from sim.cloud.serve import write_client_files
from sim.region import RegionSim
from tests.cloud_support import (
    COMMITTED_POOL,
    OWNER,
    POOL,
    SMALL_POOL,
    SPEED,
    adapter,
    clock_of,
    connect,
    create_server,
    quiet_config,
    served_clouds,
    settle,
)

PASSWORD = "correct horse battery staple"
HALL_B = '["==", "$hall", "hall-b"]'


@pytest.fixture
def clouds() -> Iterator[Callable[..., ServedCloud]]:
    yield from served_clouds()


@pytest.fixture
def cloud(clouds: Callable[..., ServedCloud]) -> ServedCloud:
    return clouds()


def launch(provider: OpenStackProvider, pool_id: str = POOL, workload: str = "wl-a") -> str:
    tags = owned_tags(provider.orchestrator_id, workload)
    return provider.launch(LaunchRequest(pool_id, workload, tags)).instance_id


# -- Keystone ---------------------------------------------------------------------------------


def test_password_and_application_credential_both_authenticate(cloud: ServedCloud) -> None:
    for appcred in (True, False):
        conn = connect(cloud.access, application_credential=appcred)
        assert sorted(f.name for f in conn.compute.flavors()) == ["c3.4", "c3.8"]
    assert cloud.identity.issued == 2


def test_a_wrong_secret_or_no_token_is_refused_and_no_secret_is_said_anywhere(
    clouds: Callable[..., ServedCloud], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    credentials = CloudCredentials.generate(password=PASSWORD)
    cloud = clouds(credentials=credentials)
    base = cloud.access.base_url
    wrong: dict[str, Any] = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "spotcap", "domain": {"name": "Default"}, "password": "not-the-password"}}},
        "scope": {"project": {"name": "spotcap", "domain": {"name": "Default"}}}}}  # fmt: skip
    refused = requests.post(f"{base}/v3/auth/tokens", json=wrong, timeout=30)
    assert refused.status_code == 401 and "X-Subject-Token" not in refused.headers
    assert "not-the-password" not in refused.text
    anonymous = requests.get(f"{base}/compute/v2.1/servers", timeout=30)
    assert anonymous.status_code == 401
    forged = requests.get(
        f"{base}/compute/v2.1/servers", headers={"X-Auth-Token": "gAAAAforged"}, timeout=30
    )
    assert forged.status_code == 401

    bad = cloud.access.connection_options(application_credential=False) | {"password": "nope"}
    with pytest.raises(UnauthorizedError):
        OpenStackProvider(
            Connection(**bad, api_timeout=30),
            orchestrator_id=OWNER,
            pools=cloud.region.names.pool_mapping(),
            feed_endpoint=cloud.access.feed_endpoint,
        ).list_by_tag(OWNER_TAG, OWNER)
    launch(adapter(cloud))  # and the right one works, logging its requests

    said = caplog.text + repr(cloud.access) + repr(cloud.config) + repr(credentials)
    assert "sim.cloud.http" in caplog.text  # the requests were logged ...
    for secret in (PASSWORD, credentials.application_credential_secret, "not-the-password"):
        assert secret not in said  # ... without a secret
    assert cloud.access.to_json()["password"] == PASSWORD  # printed once, where asked


# -- Nova -------------------------------------------------------------------------------------


def test_a_long_server_list_comes_in_pages_the_sdk_follows(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    launched = sorted(launch(provider, workload=f"wl-{i}") for i in range(7))
    conn = connect(cloud.access)
    pages = requests.get(
        f"{cloud.access.base_url}/compute/v2.1/servers?limit=3",
        headers={"X-Auth-Token": str(conn.session.get_token())},
        timeout=30,
    ).json()
    assert len(pages["servers"]) == 3 and pages["servers_links"][0]["rel"] == "next"
    assert [s.id for s in conn.compute.servers(limit=3)] == launched
    assert [i.instance_id for i in provider.list_by_tag(OWNER_TAG, OWNER)] == launched


def test_a_server_is_the_regions_instance_in_the_pool_its_flavor_zone_and_tags_say(
    cloud: ServedCloud,
) -> None:
    provider = adapter(cloud)
    server_id = launch(provider, SMALL_POOL)
    (live,) = cloud.region.sim.provider.list_by_tag(OWNER_TAG, OWNER)
    assert (live.instance_id, live.pool_id, live.workload_id) == (server_id, SMALL_POOL, "wl-a")
    shown = provider.get(server_id)
    assert (shown.pool_id, shown.vcpu, shown.purchase_model) == (SMALL_POOL, 8, "reclaimable")
    assert shown.launched_at // 1_000_000 == live.launched_at // 1_000_000  # Nova says seconds
    server = connect(cloud.access).compute.get_server(server_id)
    assert (server.availability_zone, server.flavor["original_name"]) == ("az-hall-b", "c3.8")


def test_drift_made_behind_spotcaps_back_is_what_the_adapter_then_sees(
    cloud: ServedCloud,
) -> None:
    """An owner tag changed, a server deleted by someone else, a server of another owner: the
    reconciler's drift, made through Nova's own API."""
    provider = adapter(cloud)
    retagged, removed, kept = (launch(provider, workload=f"wl-{i}") for i in range(3))
    by_hand = connect(cloud.access, application_credential=False)
    theirs = create_server(cloud, by_hand, POOL, {"spotcap.io:owner": "orch-other"},
                           ["spotcap.io:owner=orch-other"])  # fmt: skip

    by_hand.compute.set_server_metadata(retagged, **{"spotcap.io:owner": "orch-other"})
    by_hand.compute.delete_server(removed)

    assert [i.instance_id for i in provider.list_by_tag(OWNER_TAG, OWNER)] == [kept]
    others = adapter(cloud, "orch-other").list_by_tag(OWNER_TAG, "orch-other")
    assert [i.instance_id for i in others] == [theirs]  # the server tag still says ours
    with pytest.raises(NotOwnedError, match="orch-other"):
        provider.delete(DeleteRequest(retagged, "scale down"))
    with pytest.raises(UnknownInstanceError):
        provider.get(removed)
    # the simulation follows: the retagged instance is the other owner's there too
    in_sim = cloud.region.sim.provider.list_by_tag(OWNER_TAG, "orch-other")
    assert sorted(i.instance_id for i in in_sim) == sorted([retagged, theirs])
    assert not cloud.region.sim.provider.is_live(removed)


def test_a_deleted_server_is_gone_from_nova_and_from_the_region(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    server_id = launch(provider)
    provider.delete(DeleteRequest(server_id, "scale down"))
    with pytest.raises(InstanceNotFoundError):
        provider.get(server_id)
    assert not cloud.region.sim.provider.is_live(server_id)
    assert cloud.status.counts["instance_deleted"] == 1


# -- Placement --------------------------------------------------------------------------------


def test_headroom_is_the_regions_room_and_a_pressed_hall_lends_nothing(
    cloud: ServedCloud,
) -> None:
    provider = adapter(cloud)
    names = cloud.region.names
    launch(provider, SMALL_POOL)
    hall_b = provider.headroom(member_of=names.hall_aggregate("hall-b"))
    assert {h.name for h in hall_b} == {
        p.pool_id for p in cloud.region.sim.catalogue.in_hall("hall-b")
    }
    small = next(h for h in hall_b if h.name == SMALL_POOL)
    assert (small.resources["VCPU"].used, small.free("VCPU")) == (8, 8)
    assert small.free("VCPU") == cloud.region.sim.provider.room_vcpu(SMALL_POOL)

    with cloud.region.lock:  # a guaranteed tenant's surge in hall-b (what a wave does)
        cloud.region.sim.provider.set_hall_pressure("hall-b", True)
    small = next(h for h in provider.headroom() if h.name == SMALL_POOL)
    assert small.free("VCPU") == 0 and small.resources["VCPU"].used == 8
    with pytest.raises(CapacityUnavailableError):
        launch(provider, SMALL_POOL)
    committed = next(h for h in provider.headroom() if h.name == COMMITTED_POOL)
    assert committed.free("VCPU") == 64  # only reclaimable capacity is taken back


# -- Blazar -----------------------------------------------------------------------------------


def test_the_committed_pool_is_a_standing_lease_and_a_new_lease_holds_its_capacity(
    cloud: ServedCloud,
) -> None:
    drawn: list[MutatingCall] = []
    provider = adapter(cloud, acquire=drawn.append)
    (standing,) = provider.leases()
    assert (standing.name, standing.status, standing.reserved_vcpu) == (
        f"committed-{COMMITTED_POOL}", "ACTIVE", 64)  # fmt: skip

    now = provider.now_us()
    # Three sim hours ahead (10.8 s of wall time at the test speed): the lease is still pending
    # through the calls below on a loaded machine.
    start = now - now % MINUTE_US + 180 * MINUTE_US
    floor = provider.create_lease(
        LeaseRequest(
            "floor-wl-a",
            start,
            start + 24 * 60 * MINUTE_US,  # active through the launches below, however slow
            5,
            8,
            32768,
            80,
            resource_properties=HALL_B,
        )
    )
    (reservation,) = floor.reservations
    assert (floor.status, reservation.reserved_vcpu) == ("PENDING", 40)
    assert drawn == ["reserve"]
    with pytest.raises(NoCapacityError) as refused:
        provider.create_lease(
            LeaseRequest("too-big", start, start + MINUTE_US, 4, 8, 32768, 80, None, HALL_B)
        )
    assert isinstance(refused.value, CapacityUnavailableError) and refused.value.retryable

    with pytest.raises(BadRequestException, match="not active"):
        launch_by_lease(cloud, reservation.flavor_id)  # the lease has not started
    settle(cloud, start)
    assert {x.name: x.status for x in provider.leases()}["floor-wl-a"] == "ACTIVE"
    committed = next(h for h in provider.headroom() if h.name == COMMITTED_POOL)
    assert committed.free("VCPU") == 64 - 40  # the lease's unused part is held ...
    for _ in range(3):
        launch(provider, COMMITTED_POOL)
    with pytest.raises(CapacityUnavailableError):
        launch(provider, COMMITTED_POOL)  # ... from ordinary launches
    by_lease = launch_by_lease(cloud, reservation.flavor_id)  # ... and uses it
    assert provider.get(by_lease).pool_id == COMMITTED_POOL
    committed = next(h for h in provider.headroom() if h.name == COMMITTED_POOL)
    assert (committed.resources["VCPU"].used, committed.free("VCPU")) == (32, 0)
    for _ in range(4):
        launch_by_lease(cloud, reservation.flavor_id)
    with pytest.raises(ConflictException, match=r"reservation.s 5 are all in use"):
        launch_by_lease(cloud, reservation.flavor_id)


def launch_by_lease(cloud: ServedCloud, flavor_id: str | None) -> str:
    """A server launched with a lease's reservation flavor (as Blazar has it used)."""
    server = connect(cloud.access).compute.create_server(
        name="floor",
        flavor_id=flavor_id,
        image_id=cloud.region.names.image_id,
        networks=[{"uuid": cloud.region.names.network_id}],
        metadata={"spotcap.io:owner": OWNER, "spotcap.io:workload": "wl-a",
                  "spotcap.io:pool": COMMITTED_POOL, "spotcap.io:purchase-model": "committed"},
    )  # fmt: skip
    return str(server.id)


# -- the feeds ----------------------------------------------------------------------------------


def test_rate_cards_and_forecasts_are_the_simulators_own(cloud: ServedCloud) -> None:
    events = adapter(cloud).poll_events()
    served = {
        (e.event_type, e.key, e.occurred_at, e.payload)
        for e in events
        if isinstance(e.payload, RateCard | ForwardCapacity)
    }
    plain = RegionSim(quiet_config(), orchestrator=ExternalOrchestrator())
    plain.run_until(plain.now_us() + 1)
    own = {
        (e.event_type, e.key, e.occurred_at, e.payload)
        for e in plain.provider.poll_events(len(plain.bus))
        if isinstance(e.payload, RateCard | ForwardCapacity)
    }
    assert served == own and len(own) == 2 * len(cloud.region.sim.catalogue)


def test_the_catalogue_and_the_pool_mapping_are_served_for_clients_elsewhere(
    cloud: ServedCloud,
) -> None:
    base = cloud.access.base_url
    catalogue = PoolCatalogue.from_yaml(requests.get(f"{base}/sim/v1/catalogue", timeout=30).text)
    mapping = PoolMapping.from_yaml(
        requests.get(f"{base}/sim/v1/pool-mapping", timeout=30).text, catalogue
    )
    assert catalogue == cloud.region.sim.catalogue
    spec = mapping.spec(POOL)  # the mapping boots each pool where this cloud serves it
    assert (spec.flavor, spec.availability_zone) == ("c3.8", "az-hall-a")


def test_the_provider_file_gives_the_adapter_the_regions_clock_and_its_speed_up(
    cloud: ServedCloud, tmp_path: Path
) -> None:
    """What a client elsewhere opens (`spotcap run actuator --provider`): its adapter's time
    is the region's, and it knows how fast that runs (the actuator's budget hook sleeps by it)."""
    provider = open_openstack(write_client_files(cloud, tmp_path), orchestrator_id=OWNER)
    assert provider.clock_speed == cloud.access.clock.speed == SPEED
    region = clock_of(cloud.access)
    before = region.now_us()
    assert before <= provider.now_us() <= region.now_us()


# -- failures of the served cloud itself --------------------------------------------------------


def test_a_failure_inside_the_region_stops_the_cloud_and_wait_raises_it(cloud: ServedCloud) -> None:
    def broken() -> None:
        raise RuntimeError("the region broke")

    with cloud.region.lock:
        cloud.region.sim.clock.at(cloud.region.sim.now_us() + SECOND_US, broken)
    give_up = threading.Event()  # a bound on the wait, never reached when the test passes
    patience = threading.Timer(120.0, give_up.set)
    patience.start()
    try:
        with pytest.raises(RuntimeError, match="the region broke"):
            cloud.wait(give_up)
    finally:
        patience.cancel()


def test_a_bug_in_a_handler_is_a_500_and_the_server_goes_on(
    cloud: ServedCloud, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(request: Request, match: object) -> Response:
        raise KeyError("a bug")

    server = CloudHTTPServer([route("GET", "/broken", broken, auth=False)], cloud.identity)
    server.start()
    try:
        answer = requests.get(f"{server.base_url}/broken", timeout=30)
        again = requests.get(f"{server.base_url}/elsewhere", timeout=30)
    finally:
        server.close()
    assert answer.status_code == 500 and "a bug" not in answer.text
    assert again.status_code == 404
    assert "GET /broken failed" in caplog.text and "KeyError" in caplog.text
