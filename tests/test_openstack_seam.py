"""The OpenStack adapter behind the provider seam, in what is its own, on recorded exchanges.

The seam's contract is the shared suite (tests/test_provider_contract.py), and the adapter's
own behaviour (the requests it sends, the tokens it draws, its events and their ids, reading
the feeds once) runs on the simulated region served as a cloud (tests/test_openstack_served.py).
What stays here is what a served cloud cannot show, through the real SDK HTTP stack against the
replay server (tests/test_openstack_replay.py): a feed that fails while the others answer, notice
pages with elements that break the contract and a page that breaks the feed's shape, Nova's
quota and busy answers, the default wall clock; and the pool mapping file, with no server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from provider.base import (
    AlreadyReclaimingError,
    CapacityUnavailableError,
    ProviderError,
    UnknownInstanceError,
    UnknownPoolError,
)
from provider.openstack import (
    NOTICE_FEED_TOPIC,
    PRODUCER,
    ConflictError,
    FeedFormatError,
    FeedPosition,
    OpenStackProvider,
    PoolMapping,
    PoolMappingError,
    QuotaExceededError,
    ServiceError,
    wall_clock_us,
)
from provider.openstack.errors import error_for_status
from schemas.events import (
    DeadLettered,
)
from schemas.ids import derived_event_id
from schemas.pools import PoolCatalogue
from tests.test_openstack import (
    BUSY,
    CATALOGUE,
    IMAGE,
    MAPPING_FILE,
    NET,
    OWNED2,
    OWNER,
    POOL,
    T_NOW,
    _pool,
    delete_request,
    launch_request,
    pool_mapping,
    provider_for,
)
from tests.test_openstack_replay import REGION, ReplayServer, connect, replay_servers

T0 = 1_796_022_000_000_000  # the feeds' published_at


@pytest.fixture
def replays() -> Iterator[Callable[..., ReplayServer]]:
    yield from replay_servers()


def test_now_us_reads_the_wall_clock_by_default(replays: Callable[..., ReplayServer]) -> None:
    replay = replays("discovery")
    provider = OpenStackProvider(
        connect(replay), orchestrator_id=OWNER, pools=pool_mapping(), feed_endpoint="http://x"
    )
    before = wall_clock_us()
    assert before <= provider.now_us() <= wall_clock_us()
    assert before > T0  # microseconds, not seconds or nanoseconds


# -- launch -----------------------------------------------------------------------------------


# -- delete -----------------------------------------------------------------------------------


# -- poll_events ------------------------------------------------------------------------------


def test_a_failing_feed_does_not_hold_back_the_others_and_is_read_again(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "feeds_outage")
    provider = provider_for(replay)

    first = provider.poll_events()
    assert [e.event_type for e in first] == ["forward_capacity", "notice_received"]
    (error,) = provider.feed_errors
    assert isinstance(error, ServiceError) and error.call == "feed.rate_cards" and error.retryable
    assert "rate-card store is restarting" in str(error)

    second = provider.poll_events()
    assert [e.event_type for e in second] == ["rate_card"]
    assert provider.feed_errors == ()
    assert provider.poll_events() == []


BAD_PAGE_CAUSE = f"openstack:{REGION}:notices@start"  # the page read from the feed's start
GOOD_ID = "4d5e6f7a-8b9c-4d0e-9f1a-2b3c4d5e6f70"  # feeds_bad_elements.json


def test_bad_notice_elements_are_dead_lettered_and_the_good_ones_delivered(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "feeds_bad_elements")
    provider = provider_for(replay)

    first = provider.poll_events()
    notice, *dead = first
    assert (notice.event_type, notice.event_id, notice.key) == ("notice_received", GOOD_ID, OWNED2)
    assert [e.event_type for e in dead] == ["dead_lettered"] * 3
    letters = [e.payload for e in dead]
    assert all(isinstance(p, DeadLettered) for p in letters)
    foreign, bad_id, not_object = (p for p in letters if isinstance(p, DeadLettered))
    # the foreign region (element 1); element 2, a server spotcap did not launch, is skipped
    assert (foreign.origin_topic, foreign.origin_partition, foreign.origin_offset) == (
        NOTICE_FEED_TOPIC,
        0,
        1,
    )
    assert foreign.processor == PRODUCER
    assert foreign.error_class == "provider.openstack.errors.FeedFormatError"
    assert "notice feed" in foreign.reason and "element 1" in foreign.reason
    assert "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f70819" in foreign.reason
    assert "'us-east-2'" in foreign.reason
    assert json.loads(foreign.raw_value)["region"] == "us-east-2"
    assert bad_id.origin_offset == 3 and "'adv-17'" in bad_id.reason
    assert "not a UUID" in bad_id.reason
    assert not_object.origin_offset == 4 and "without an event_id" in not_object.reason
    assert not_object.error_class == "schemas.notices.NoticeFormatError"
    assert json.loads(not_object.raw_value) == "reclaim 8e5fa043"
    assert [e.event_id for e in dead] == [
        derived_event_id(BAD_PAGE_CAUSE, "dead_lettered", str(i)) for i in (1, 3, 4)
    ]
    assert all(e.key == NOTICE_FEED_TOPIC and e.region == REGION for e in dead)
    assert provider.notices_not_ours == 1
    assert provider.feed_errors == ()
    assert provider.position.notices_after == "c-000212"  # the cursor moved past the bad ones

    assert provider.poll_events() == []
    assert provider.notices_not_ours == 1
    assert replay.requests("/feed/v1/notices") == [
        ("GET", "/feed/v1/notices?limit=500"),
        ("GET", "/feed/v1/notices?limit=500&after=c-000212"),
    ]


def test_two_providers_dead_letter_the_same_bad_elements_under_the_same_ids(
    replays: Callable[..., ReplayServer],
) -> None:
    one = provider_for(replays("discovery", "feeds_bad_elements")).poll_events()
    other = provider_for(replays("discovery", "feeds_bad_elements")).poll_events()
    assert len(one) == 4
    assert one == other  # the same ids, and (the same clock) the same envelopes


def test_a_notice_page_that_is_not_the_feeds_shape_holds_the_cursor(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "feeds_bad_elements")
    provider = OpenStackProvider(
        connect(replay),
        orchestrator_id=OWNER,
        pools=pool_mapping(),
        feed_endpoint=f"{replay.base_url}/feed",
        position=FeedPosition("c-000900"),
        clock=lambda: T_NOW,
    )
    assert provider.poll_events() == []
    (error,) = provider.feed_errors
    assert isinstance(error, FeedFormatError) and error.call == "feed.notices"
    assert "'notices' must be a list" in str(error)
    assert provider.position.notices_after == "c-000900"
    assert provider.poll_events() == [] and len(provider.feed_errors) == 1
    assert (
        replay.requests("/feed/v1/notices")
        == [
            ("GET", "/feed/v1/notices?limit=500&after=c-000900"),
        ]
        * 2
    )


# -- errors are the seam's --------------------------------------------------------------------


def test_nova_failures_that_mean_a_seam_error_are_that_seam_error(
    replays: Callable[..., ReplayServer],
) -> None:
    """A quota and a busy server: answers the served cloud never gives (it answers the seam's
    own, gone, already reclaiming and no room, in tests/test_openstack_served.py)."""
    replay = replays("discovery", "nova_flavors", "nova_errors")
    provider = provider_for(replay)

    with pytest.raises(CapacityUnavailableError) as quota:
        provider.launch(launch_request("wl-quota"))
    assert isinstance(quota.value, QuotaExceededError) and quota.value.retryable

    with pytest.raises(ConflictError) as busy:  # a task runs: retry, but not a seam error
        provider.delete(delete_request(BUSY))
    assert not isinstance(busy.value, CapacityUnavailableError | UnknownInstanceError)


@pytest.mark.parametrize(
    ("call", "status", "detail", "seam"),
    [
        ("nova.get_server", 404, "Instance x could not be found.", UnknownInstanceError),
        ("feed.reclaim", 404, "unknown instance", UnknownInstanceError),
        ("placement.list_inventories", 404, "No resource provider", None),
        ("nova.create_server", 403, "Quota exceeded for instances", CapacityUnavailableError),
        ("nova.create_server", 403, "Policy doesn't allow os_compute_api", None),
        ("blazar.create_lease", 409, "Not enough resources available", CapacityUnavailableError),
        ("blazar.create_lease", 409, "Lease with name x already exists", None),
        ("feed.reclaim", 409, "already on the reclaim path", AlreadyReclaimingError),
        ("nova.delete_server", 409, "task_state deleting", None),
    ],
)
def test_the_status_and_the_call_decide_the_seam_error(
    call: str, status: int, detail: str, seam: type[ProviderError] | None
) -> None:
    error = error_for_status(call, "target", status, detail)
    seam_errors = (UnknownInstanceError, CapacityUnavailableError, AlreadyReclaimingError)
    assert [s for s in seam_errors if isinstance(error, s)] == ([seam] if seam else [])
    assert error.status == status and isinstance(error, ProviderError)


# -- the pool mapping file --------------------------------------------------------------------


def test_the_example_mapping_maps_every_pool_of_the_catalogue() -> None:
    mapping = pool_mapping()
    spec = mapping.spec(POOL)
    assert (spec.flavor, spec.image_id, spec.network_ids, spec.availability_zone) == (
        "c3.2xlarge",
        IMAGE,
        (NET,),
        "az-hall2",
    )
    assert mapping.spec("c3.4.hall1.reclaimable").availability_zone == "az-hall1"
    assert mapping.region == REGION
    with pytest.raises(UnknownPoolError):
        mapping.spec("c3.8.hall9.reclaimable")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("region: eu-west-1", "region: us-east-1"), "not the catalogue's 'eu-west-1'"),
        (("format: spotcap.openstack-pools/v1", "format: v0"), "expected 'spotcap.openstack-pools"),
        (("  hall1: az-hall1\n", ""), r"c3\.4\.hall1\.reclaimable \(no availability zone"),
        (("    4: c3.xlarge\n", ""), r"c3\.4\.hall1\.reclaimable \(no flavor for c3 at 4"),
        (("image: ", "images: "), "images: Extra inputs are not permitted"),
        (("networks:", "networks: []\nx:"), "networks"),
    ],
)
def test_a_mapping_file_that_cannot_be_used_is_refused_naming_the_file_and_why(
    edit: tuple[str, str], message: str
) -> None:
    text = MAPPING_FILE.read_text()
    assert edit[0] in text
    with pytest.raises(PoolMappingError, match=message) as caught:
        PoolMapping.from_yaml(text.replace(*edit), CATALOGUE, source="pools.yaml")
    assert str(caught.value).startswith("pools.yaml: ")


def test_a_catalogue_pool_the_file_does_not_map_is_found_on_load() -> None:
    bigger = PoolCatalogue(REGION, [*CATALOGUE, _pool("m5", 32, "hall3", "guaranteed")])
    with pytest.raises(PoolMappingError, match=r"m5\.32\.hall3\.guaranteed") as caught:
        PoolMapping.load(MAPPING_FILE, bigger)
    assert "no flavor for m5 at 32" in str(caught.value)
    assert "no availability zone for hall hall3" in str(caught.value)
