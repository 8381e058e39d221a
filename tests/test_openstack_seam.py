"""The OpenStack adapter behind the provider seam, in what is its own.

The seam's contract (launch with tags, list, delete of our own only, unknown pools, no room,
reclaim, the commitments' facts) is the shared suite, tests/test_provider_contract.py, run on
the simulator and on this adapter. Here, through the real SDK HTTP stack against the replay
server (tests/test_openstack_replay.py): the mapped Nova request is the one recorded, a refused
call sends nothing and draws no token, the adapter's event ids do not change, and
`poll_events` reads the feeds once, past failing feeds and bad elements.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from provider.base import (
    AlreadyReclaimingError,
    CapacityUnavailableError,
    DeleteRequest,
    Instance,
    NotOwnedError,
    ProviderError,
    ReclaimRequest,
    UnknownInstanceError,
    UnknownPoolError,
)
from provider.openstack import (
    NOTICE_FEED_TOPIC,
    PRODUCER,
    ConflictError,
    FeedFormatError,
    FeedPosition,
    InstanceNotFoundError,
    LeaseRequest,
    MappingMismatchError,
    NoCapacityError,
    OpenStackProvider,
    PoolMapping,
    PoolMappingError,
    QuotaExceededError,
    ReclaimConflictError,
    ServiceError,
    wall_clock_us,
)
from provider.openstack.errors import error_for_status
from schemas.events import (
    Advisory,
    DeadLettered,
    ForwardCapacity,
    InstanceDeleted,
    InstanceLaunched,
    NoticeReceived,
    RateCard,
)
from schemas.ids import derived_event_id
from schemas.pools import PoolCatalogue
from tests.test_openstack import (
    BUSY,
    CATALOGUE,
    FLAVOR_ID,
    FOREIGN,
    GONE,
    IMAGE,
    MAPPING_FILE,
    NET,
    NEW,
    NOVA,
    OWNED,
    OWNED2,
    OWNER,
    POOL,
    T_NOW,
    UNTAGGED,
    Budget,
    _pool,
    delete_request,
    launch_request,
    pool_mapping,
    provider_for,
)
from tests.test_openstack_replay import REGION, ReplayServer, connect, replay_servers

T0 = 1_796_022_000_000_000  # the feeds' published_at
ADVISORY_ID = "0f1e2d3c-4b5a-4969-8877-665544332211"  # the feed's own ids (feeds.json)
NOTICE_ID = "1a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c6d"
USER_ID = "3f1e9a6c2b8d4f07a5c1e2d3b4a59687"  # the Keystone user of discovery.json's token


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


def test_launch_sends_the_mapped_flavor_image_network_zone_and_tags(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_flavors", "nova_servers")
    budget = Budget()
    provider = provider_for(replay, budget)
    request = launch_request()
    instance = provider.launch(request)

    tags = {
        "spotcap.io/owner": OWNER,
        "spotcap.io/workload": "wl-render",
        "spotcap.io/pool": POOL,
        "spotcap.io/purchase-model": "reclaimable",
        "team": "vfx",
    }
    assert instance == Instance(NEW, POOL, "wl-render", 8, "reclaimable", tags, T_NOW, "active")
    assert instance.owned_by(OWNER)
    assert budget.drawn == ["launch"]
    (create,) = [c for c in replay.calls if c.method == "POST" and c.path.startswith(NOVA)]
    server = create.body["server"]
    assert server["flavorRef"] == FLAVOR_ID  # c3 at 8 vCPU -> flavor c3.2xlarge -> its id
    assert server["imageRef"] == IMAGE
    assert server["networks"] == [{"uuid": NET}]
    assert server["availability_zone"] == "az-hall2"  # hall2 -> az-hall2
    assert server["metadata"] == {k.replace("/", ":"): v for k, v in tags.items()}
    assert server["tags"] == [f"spotcap.io:owner={OWNER}"]
    assert server["name"].startswith("wl-render-")

    # The flavor is looked up once (reads draw no token), not on every launch.
    provider.launch(request)
    assert replay.requests(f"{NOVA}/flavors") == [
        ("GET", f"{NOVA}/flavors/c3.2xlarge"),
        ("GET", f"{NOVA}/flavors/detail?is_public=None"),
    ]


def test_launch_queues_an_instance_launched_envelope_caused_by_the_request(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_flavors", "nova_servers", "feeds")
    provider = provider_for(replay)
    request = launch_request()
    provider.launch(request)

    launched = [e for e in provider.poll_events() if e.event_type == "instance_launched"]
    assert len(launched) == 1
    (event,) = launched
    assert event.event_id == derived_event_id(f"{REGION}:instance/{NEW}", "instance_launched")
    assert (event.key, event.region, event.producer) == (NEW, REGION, PRODUCER)
    assert (event.occurred_at, event.recorded_at) == (T_NOW, T_NOW)
    assert (event.causation_id, event.correlation_id) == (request.causation_id, None)
    assert event.payload == InstanceLaunched(
        instance_id=NEW,
        pool_id=POOL,
        workload_id="wl-render",
        vcpu=8,
        purchase_model="reclaimable",
        tags={
            "spotcap.io/owner": OWNER,
            "spotcap.io/pool": POOL,
            "spotcap.io/purchase-model": "reclaimable",
            "spotcap.io/workload": "wl-render",
            "team": "vfx",
        },
    )


def test_launch_of_a_pool_not_in_the_catalogue_sends_nothing(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery")
    budget = Budget()
    with pytest.raises(UnknownPoolError, match=r"c3\.8\.hall9\.reclaimable"):
        provider_for(replay, budget).launch(launch_request(pool_id="c3.8.hall9.reclaimable"))
    assert replay.calls == [] and budget.drawn == []


def test_a_mapped_flavor_whose_vcpu_is_not_the_pools_is_refused_before_the_create(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_flavors")
    wrong = MAPPING_FILE.read_text().replace("8: c3.2xlarge", "8: c3.4xlarge")
    budget = Budget()
    provider = provider_for(replay, budget, pools=PoolMapping.from_yaml(wrong, CATALOGUE))
    with pytest.raises(MappingMismatchError, match="16 vCPU, the pool 8") as caught:
        provider.launch(launch_request())
    assert isinstance(caught.value, ProviderError) and not caught.value.retryable
    assert budget.drawn == []
    assert not [c for c in replay.calls if c.method == "POST" and c.path.startswith(NOVA)]


# -- delete -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "found"), [(FOREIGN, "owner tag 'orch-us1'"), (UNTAGGED, "no owner tag")]
)
def test_delete_of_a_server_not_ours_raises_the_seams_not_owned_error_and_sends_no_delete(
    replays: Callable[..., ReplayServer], server: str, found: str
) -> None:
    replay = replays("discovery", "nova_servers")
    budget = Budget()
    provider = provider_for(replay, budget)
    with pytest.raises(NotOwnedError) as caught:
        provider.delete(delete_request(server))

    assert type(caught.value) is NotOwnedError  # provider.base's own, not a look-alike
    assert server in str(caught.value) and found in str(caught.value)
    assert budget.drawn == []
    assert replay.requests(f"{NOVA}/servers") == [("GET", f"{NOVA}/servers/{server}")]
    assert not [c for c in replay.calls if c.method == "DELETE"]


def test_delete_queues_an_instance_deleted_envelope_naming_who_asked(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_servers", "feeds")
    provider = provider_for(replay)
    request = DeleteRequest(OWNED, "return from fallback", "orchestrator", "c4d5e6f7", "wave-7")
    provider.delete(request)

    (event,) = [e for e in provider.poll_events() if e.event_type == "instance_deleted"]
    assert event.event_id == derived_event_id(f"{REGION}:instance/{OWNED}", "instance_deleted")
    assert (event.causation_id, event.correlation_id, event.key) == ("c4d5e6f7", "wave-7", OWNED)
    assert event.payload == InstanceDeleted(
        instance_id=OWNED,
        pool_id=POOL,
        workload_id="wl-render",
        deleted_by="orchestrator",
        principal=f"user/{USER_ID}",
        reason="return from fallback",
    )


# -- poll_events ------------------------------------------------------------------------------


def test_poll_events_gives_each_feed_fact_once_as_an_envelope(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "feeds")
    provider = provider_for(replay)

    first = provider.poll_events()
    second = provider.poll_events()

    assert [type(e.payload) for e in first] == [
        Advisory,
        RateCard,
        RateCard,
        ForwardCapacity,
        ForwardCapacity,
        NoticeReceived,
    ]  # oldest first: the advisory and the snapshots at T0, the notice 300 s later
    assert second == []
    assert all(
        (e.region, e.producer, e.recorded_at, e.causation_id) == (REGION, PRODUCER, T_NOW, None)
        for e in first
    )
    advisory, card, _, forecast, _, notice = first
    assert (advisory.event_id, advisory.occurred_at, advisory.key) == (ADVISORY_ID, T0, OWNED)
    assert advisory.payload == Advisory(OWNED, POOL, T0 + 600_000_000)
    assert (notice.event_id, notice.occurred_at) == (NOTICE_ID, T0 + 300_000_000)
    assert notice.payload == NoticeReceived(OWNED, POOL, "wl-render", T0 + 420_000_000, "metadata")
    assert card.event_id == derived_event_id(
        f"openstack:{REGION}:rate-cards@{T0}", "rate_card", POOL
    )
    assert (card.occurred_at, card.key) == (T0, POOL)
    assert forecast.event_id == derived_event_id(
        f"openstack:{REGION}:forward-capacity@{T0}", "forward_capacity", f"{POOL}/3600"
    )
    assert provider.position == FeedPosition("c-000043", T0, T0)
    assert provider.feed_errors == ()
    assert replay.requests("/feed/") == [
        ("GET", "/feed/v1/notices?limit=500"),
        ("GET", "/feed/v1/rate-cards"),
        ("GET", "/feed/v1/forward-capacity"),
        ("GET", "/feed/v1/notices?limit=500&after=c-000043"),
        ("GET", "/feed/v1/rate-cards"),
        ("GET", "/feed/v1/forward-capacity"),
    ]


def test_two_providers_reading_the_same_feed_give_the_same_event_ids(
    replays: Callable[..., ReplayServer],
) -> None:
    one = provider_for(replays("discovery", "feeds")).poll_events()
    other = provider_for(replays("discovery", "feeds")).poll_events()
    assert [e.event_id for e in one] == [e.event_id for e in other]
    assert one == other  # the same clock in both: the envelopes are equal throughout
    assert len({e.event_id for e in one}) == len(one) == 6


def test_a_provider_resumed_from_a_position_repeats_nothing(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "feeds")
    first = provider_for(replay)
    first.poll_events()
    resumed = OpenStackProvider(
        connect(replay),  # the same cloud, a new adapter (a restart)
        orchestrator_id=OWNER,
        pools=pool_mapping(),
        feed_endpoint=f"{replay.base_url}/feed",
        position=first.position,
        clock=lambda: T_NOW,
    )
    assert resumed.poll_events() == []


def test_poll_events_hands_out_at_most_max_events_and_keeps_the_rest(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "feeds")
    provider = provider_for(replay)
    head = provider.poll_events(max_events=2)
    rest = provider.poll_events()
    assert [type(e.payload) for e in head] == [Advisory, RateCard]
    assert [type(e.payload) for e in rest] == [
        RateCard,
        ForwardCapacity,
        ForwardCapacity,
        NoticeReceived,
    ]


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


def test_a_noticed_instance_is_listed_as_noticed(replays: Callable[..., ReplayServer]) -> None:
    replay = replays("discovery", "nova_servers", "feeds")
    provider = provider_for(replay)
    assert {i.instance_id: i.state for i in provider.list_by_tag("spotcap.io/owner", OWNER)} == {
        OWNED: "active",
        OWNED2: "active",
    }
    provider.poll_events()
    assert {i.instance_id: i.state for i in provider.list_by_tag("spotcap.io/owner", OWNER)} == {
        OWNED: "noticed",
        OWNED2: "active",
    }


# -- errors are the seam's --------------------------------------------------------------------


def test_cloud_answers_that_mean_a_seam_error_are_that_seam_error(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "nova_flavors", "nova_errors", "nova_servers", "feeds")
    provider = provider_for(replay)

    with pytest.raises(CapacityUnavailableError) as quota:
        provider.launch(launch_request("wl-quota"))
    assert isinstance(quota.value, QuotaExceededError) and quota.value.retryable

    with pytest.raises(UnknownInstanceError) as gone:
        provider.delete(delete_request(GONE))
    assert isinstance(gone.value, InstanceNotFoundError) and not gone.value.retryable

    with pytest.raises(ConflictError) as busy:  # a task runs: retry, but not a seam error
        provider.delete(delete_request(BUSY))
    assert not isinstance(busy.value, CapacityUnavailableError | UnknownInstanceError)

    with pytest.raises(AlreadyReclaimingError) as twice:
        provider.reclaim(ReclaimRequest(OWNED, correlation_id="exercise-twice"))
    assert isinstance(twice.value, ReclaimConflictError) and not twice.value.retryable


def test_a_blazar_lease_without_room_is_capacity_unavailable(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery", "blazar_leases")
    request = LeaseRequest("floor-too-big", None, 1_801_440_000_000_000, 500, 4, 16384, 40)
    with pytest.raises(CapacityUnavailableError) as caught:
        provider_for(replay).create_lease(request)
    assert isinstance(caught.value, NoCapacityError) and caught.value.retryable


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
