"""The OpenStack adapter's own behaviour, through the real openstacksdk, on the simulated region
served as a cloud (`sim.cloud`): the requests it sends (the cloud keeps a log of them), the
tokens it draws, the events it queues and their ids, and how it reads the feeds.

What a served cloud cannot show (Nova's and the feeds' failures, Placement's allocation ratios
of real compute nodes, host reservations, feed bodies that break the contract) stays on the
recorded exchanges: tests/test_openstack.py and tests/test_openstack_seam.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from provider.base import (
    OWNER_TAG,
    WORKLOAD_TAG,
    AlreadyReclaimingError,
    CapacityUnavailableError,
    DeleteRequest,
    Instance,
    LaunchRequest,
    NoticeTooShortError,
    NotOwnedError,
    NotReclaimableError,
    ProviderError,
    ReclaimRequest,
    UnknownInstanceError,
    UnknownPoolError,
    instance_fact_id,
    owned_tags,
)
from provider.openstack import (
    PRODUCER,
    ConflictError,
    FeedPosition,
    InstanceNotFoundError,
    LeaseRequest,
    MappingMismatchError,
    MutatingCall,
    NoCapacityError,
    OpenStackProvider,
    PoolMapping,
    ProviderFeeds,
    ReclaimConflictError,
    compute,
)
from schemas.events import (
    Advisory,
    ForwardCapacity,
    InstanceDeleted,
    InstanceLaunched,
    NoticeReceived,
    RateCard,
)
from schemas.ids import derived_event_id
from schemas.notices import Notice, ReclaimAdvisory
from sim.clock import MINUTE_US, SECOND_US
from sim.cloud import ServedCloud
from tests.cloud_support import (
    CATALOGUE,
    GUARANTEED_POOL,
    OWNER,
    POOL,
    REGION,
    adapter,
    clock_of,
    connect,
    create_server,
    served_clouds,
    settle,
)

NOVA = "/compute/v2.1"
HALL_B = '["==", "$hall", "hall-b"]'


class Budget:
    """A token-budget hook that records what was drawn."""

    def __init__(self) -> None:
        self.drawn: list[MutatingCall] = []

    def __call__(self, kind: MutatingCall) -> None:
        self.drawn.append(kind)


@pytest.fixture
def cloud() -> Iterator[ServedCloud]:
    clouds = served_clouds()
    yield next(clouds)()
    next(clouds, None)


def sent(cloud: ServedCloud, prefix: str, since: int = 0) -> list[tuple[str, str]]:
    """(method, path with query) of the requests the cloud answered, from the `since`-th on."""
    calls = list(cloud.http.calls)[since:]
    return [(c.method, c.target) for c in calls if c.target.startswith(prefix)]


def launch_request(workload_id: str = "wl-render", pool_id: str = POOL) -> LaunchRequest:
    return LaunchRequest(
        pool_id=pool_id,
        workload_id=workload_id,
        tags=owned_tags(OWNER, workload_id, {"team": "vfx"}),
        causation_id="5d6e7f80-9a1b-4c2d-8e3f-4a5b6c7d8e9f",
    )


def tags_of(workload_id: str, pool_id: str = POOL, model: str = "reclaimable") -> dict[str, str]:
    return {
        "spotcap.io/owner": OWNER,
        "spotcap.io/workload": workload_id,
        "spotcap.io/pool": pool_id,
        "spotcap.io/purchase-model": model,
        "team": "vfx",
    }


# -- Nova -------------------------------------------------------------------------------------


def test_launch_sends_the_mapped_flavor_image_network_zone_and_tags(cloud: ServedCloud) -> None:
    budget = Budget()
    provider = adapter(cloud, acquire=budget)
    before = provider.now_us()
    instance = provider.launch(launch_request())

    assert instance == Instance(instance.instance_id, POOL, "wl-render", 8, "reclaimable",
                                tags_of("wl-render"), instance.launched_at, "active")  # fmt: skip
    assert before <= instance.launched_at <= provider.now_us()
    assert budget.drawn == ["launch"]
    server = connect(cloud.access).compute.get_server(instance.instance_id)
    names = cloud.region.names
    assert server.flavor["original_name"] == "c3.8"  # c3 at 8 vCPU -> flavor c3.8
    assert (server.image.id, server.availability_zone) == (names.image_id, "az-hall-a")
    assert server.metadata == {k.replace("/", ":"): v for k, v in tags_of("wl-render").items()}
    assert server.tags == [f"spotcap.io:owner={OWNER}"] and server.name.startswith("wl-render-")

    # The flavor is looked up once (reads draw no token), not on every launch.
    provider.launch(launch_request())
    assert sent(cloud, f"{NOVA}/flavors") == [
        ("GET", f"{NOVA}/flavors/c3.8"),
        ("GET", f"{NOVA}/flavors/detail?is_public=None"),
    ]
    assert budget.drawn == ["launch", "launch"]


def test_launch_queues_an_instance_launched_envelope_caused_by_the_request(
    cloud: ServedCloud,
) -> None:
    provider = adapter(cloud)
    request = launch_request()
    instance = provider.launch(request)

    (event,) = [e for e in provider.poll_events() if e.event_type == "instance_launched"]
    server_id = instance.instance_id
    assert event.event_id == instance_fact_id(REGION, server_id, "instance_launched")
    assert (event.key, event.region, event.producer) == (server_id, REGION, PRODUCER)
    assert event.occurred_at == event.recorded_at == instance.launched_at
    assert (event.causation_id, event.correlation_id) == (request.causation_id, None)
    assert event.payload == InstanceLaunched(
        server_id, POOL, "wl-render", 8, "reclaimable", dict(sorted(tags_of("wl-render").items()))
    )


def test_launch_of_a_pool_not_in_the_catalogue_sends_nothing(cloud: ServedCloud) -> None:
    budget = Budget()
    with pytest.raises(UnknownPoolError, match=r"c3\.8\.hall9\.reclaimable"):
        adapter(cloud, acquire=budget).launch(launch_request(pool_id="c3.8.hall9.reclaimable"))
    assert list(cloud.http.calls) == [] and budget.drawn == []


def test_a_mapped_flavor_whose_vcpu_is_not_the_pools_is_refused_before_the_create(
    cloud: ServedCloud,
) -> None:
    wrong = cloud.region.names.pool_mapping_yaml().replace("8: c3.8", "8: c3.4")
    budget = Budget()
    provider = OpenStackProvider(
        connect(cloud.access),
        orchestrator_id=OWNER,
        pools=PoolMapping.from_yaml(wrong, CATALOGUE),
        feed_endpoint=cloud.access.feed_endpoint,
        acquire=budget,
    )
    with pytest.raises(MappingMismatchError, match="4 vCPU, the pool 8") as caught:
        provider.launch(launch_request())
    assert isinstance(caught.value, ProviderError) and not caught.value.retryable
    assert budget.drawn == [] and not sent(cloud, f"{NOVA}/servers")


def test_list_by_tag_asks_nova_for_our_tag_and_checks_the_metadata(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    render = provider.launch(launch_request("wl-render"))
    ci = provider.launch(launch_request("wl-ci"))
    # Our server tag, another owner's metadata: not ours.
    create_server(cloud, connect(cloud.access), POOL, {"spotcap.io:owner": "orch-other"},
                  [f"spotcap.io:owner={OWNER}"])  # fmt: skip
    since = len(cloud.http.calls)

    ours = provider.list_by_tag(OWNER_TAG, OWNER)
    rendering = provider.list_by_tag(WORKLOAD_TAG, "wl-render")

    assert [i.instance_id for i in ours] == sorted([render.instance_id, ci.instance_id])
    (listed,) = rendering
    assert listed == Instance(render.instance_id, POOL, "wl-render", 8, "reclaimable",
                              tags_of("wl-render"), listed.launched_at, "active")  # fmt: skip
    in_region = cloud.region.sim.provider.list_by_tag(OWNER_TAG, OWNER)
    launched_at = {i.instance_id: i.launched_at for i in in_region}[render.instance_id]
    assert listed.launched_at == launched_at - launched_at % SECOND_US  # Nova's "created"
    assert (
        sent(cloud, f"{NOVA}/servers", since)
        == [("GET", f"{NOVA}/servers/detail?tags=spotcap.io%3Aowner%3D{OWNER}&limit=1000")] * 2
    )


def test_list_by_tag_follows_novas_pages(
    cloud: ServedCloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = adapter(cloud)
    launched = sorted(provider.launch(launch_request()).instance_id for _ in range(5))
    monkeypatch.setattr(compute, "LIST_PAGE", 2)
    since = len(cloud.http.calls)
    assert [i.instance_id for i in provider.list_by_tag(OWNER_TAG, OWNER)] == launched
    pages = sent(cloud, f"{NOVA}/servers", since)
    assert len(pages) == 3 and all("limit=2" in target for _, target in pages)
    assert [("marker=" in target) for _, target in pages] == [False, True, True]


def test_delete_of_an_owned_server_checks_ownership_then_deletes(cloud: ServedCloud) -> None:
    server_id = adapter(cloud).launch(launch_request()).instance_id
    budget = Budget()
    since = len(cloud.http.calls)
    deleted = adapter(cloud, acquire=budget).delete(DeleteRequest(server_id, "scale-down"))

    assert (deleted.instance_id, deleted.pool_id, deleted.state) == (server_id, POOL, "gone")
    assert deleted.owned_by(OWNER) and budget.drawn == ["delete"]
    assert sent(cloud, f"{NOVA}/servers", since) == [
        ("GET", f"{NOVA}/servers/{server_id}"),
        ("DELETE", f"{NOVA}/servers/{server_id}"),
    ]


@pytest.mark.parametrize(
    ("metadata", "found"),
    [({"spotcap.io:owner": "orch-us1"}, "owner tag 'orch-us1'"), ({}, "no owner tag")],
)
def test_delete_of_a_server_not_ours_raises_the_seams_not_owned_error_and_sends_no_delete(
    cloud: ServedCloud, metadata: dict[str, str], found: str
) -> None:
    server_id = create_server(cloud, connect(cloud.access), POOL, metadata)
    budget = Budget()
    since = len(cloud.http.calls)
    with pytest.raises(NotOwnedError) as caught:
        adapter(cloud, acquire=budget).delete(DeleteRequest(server_id, "scale-down"))

    assert type(caught.value) is NotOwnedError  # provider.base's own, not a look-alike
    assert server_id in str(caught.value) and found in str(caught.value)
    assert budget.drawn == []
    assert sent(cloud, f"{NOVA}/servers", since) == [("GET", f"{NOVA}/servers/{server_id}")]
    assert cloud.region.sim.provider.is_live(server_id)


def test_delete_queues_an_instance_deleted_envelope_naming_who_asked(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    server_id = provider.launch(launch_request()).instance_id
    request = DeleteRequest(server_id, "return from fallback", "orchestrator", "c4d5e6f7", "w-7")
    provider.delete(request)

    (event,) = [e for e in provider.poll_events() if e.event_type == "instance_deleted"]
    assert event.event_id == instance_fact_id(REGION, server_id, "instance_deleted")
    assert (event.causation_id, event.correlation_id, event.key) == ("c4d5e6f7", "w-7", server_id)
    appcred = cloud.credentials.application_credential_id  # the adapter's Keystone identity
    assert event.payload == InstanceDeleted(
        server_id, POOL, "wl-render", "orchestrator", f"appcred/{appcred}", "return from fallback"
    )


def test_a_budget_that_refuses_stops_the_call_before_any_request(cloud: ServedCloud) -> None:
    class BudgetExhaustedError(Exception):
        pass

    def refuse(kind: MutatingCall) -> None:
        raise BudgetExhaustedError(kind)

    with pytest.raises(BudgetExhaustedError):
        adapter(cloud, acquire=refuse).launch(launch_request())
    assert not [c for c in cloud.http.calls if c.method == "POST" and c.target.startswith(NOVA)]
    assert not cloud.nova.servers


# -- Blazar -----------------------------------------------------------------------------------


def whole_minute_after(provider: OpenStackProvider, minutes: int) -> int:
    now = provider.now_us()
    return now - now % MINUTE_US + minutes * MINUTE_US


def test_creating_a_lease_draws_one_reserve_token(cloud: ServedCloud) -> None:
    budget = Budget()
    provider = adapter(cloud, acquire=budget)
    start = whole_minute_after(provider, 24 * 60)  # a sim day: 86 s of wall time, still PENDING
    end = start + 60 * MINUTE_US
    lease = provider.create_lease(
        LeaseRequest("floor-wl-ci", start, end, 4, 8, 32768, 80, None, HALL_B)
    )
    assert (lease.name, lease.status, lease.reserved_vcpu) == ("floor-wl-ci", "PENDING", 32)
    assert (lease.start_at_us, lease.end_at_us) == (start, start + 60 * MINUTE_US)
    assert budget.drawn == ["reserve"]
    assert sent(cloud, "/reservation/") == [("POST", "/reservation/v1/leases")]
    assert [x.name for x in provider.leases()] == ["committed-c3.8.hall-b.committed", "floor-wl-ci"]


def test_a_lease_that_starts_now_starts_at_the_clouds_now(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    before = provider.now_us()
    lease = provider.create_lease(LeaseRequest("now", None, whole_minute_after(provider, 30),
                                               1, 8, 32768, 80))  # fmt: skip
    assert before <= lease.start_at_us <= provider.now_us() and lease.status == "ACTIVE"


def test_a_lease_without_room_is_a_conflict_and_capacity_unavailable(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    request = LeaseRequest("floor-too-big", None, whole_minute_after(provider, 60), 500, 8, 32768,
                           80)  # fmt: skip
    with pytest.raises(ConflictError) as caught:
        provider.create_lease(request)
    assert (caught.value.call, caught.value.status) == ("blazar.create_lease", 409)
    assert "floor-too-big" in caught.value.target
    assert "Not enough resources" in caught.value.detail
    assert isinstance(caught.value, NoCapacityError | CapacityUnavailableError)
    assert caught.value.retryable


def test_a_lease_time_off_the_minute_is_refused_before_any_request(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    start = whole_minute_after(provider, 2)
    with pytest.raises(ValueError, match="whole minute"):
        provider.create_lease(LeaseRequest("x", start + 1, start + MINUTE_US, 1, 8, 1, 1))
    assert sent(cloud, "/reservation/") == []


# -- the private cloud team's feeds -----------------------------------------------------------


def feeds(cloud: ServedCloud) -> ProviderFeeds:
    return ProviderFeeds(connect(cloud.access).session, cloud.access.feed_endpoint, timeout_s=30)


def test_rate_cards_and_forward_capacity_come_back_as_event_payloads(cloud: ServedCloud) -> None:
    client = feeds(cloud)
    cards = client.rate_cards()
    one = client.rate_cards(POOL)
    forecast = client.forward_capacity()

    start = cloud.region.config.start_us
    assert cards.published_at_us == forecast.published_at_us == start
    assert sorted(c.pool_id for c in cards.items) == sorted(p.pool_id for p in CATALOGUE)
    (card,) = one.items
    assert (card.pool_id, card.purchase_model, card.valid_from_at) == (POOL, "reclaimable", start)
    assert card.valid_until_at == start + 86_400 * SECOND_US  # the test region's round
    assert card.guaranteed_price_per_vcpu_h_eur_micros == 14_000
    assert {f.pool_id: (f.horizon_s, f.available_vcpu) for f in forecast.items}[POOL] == (
        86_400,
        800,
    )
    assert sent(cloud, "/feed/") == [
        ("GET", "/feed/v1/rate-cards"),
        ("GET", f"/feed/v1/rate-cards?pool_id={POOL}"),
        ("GET", "/feed/v1/forward-capacity"),
    ]


def test_the_notice_feed_pages_notices_and_advisories_by_cursor(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    first, second = (provider.launch(launch_request()).instance_id for _ in range(2))
    # The first's notice an hour after its advisory (3.6 s of wall time at the test speed), so
    # the second's notice, sent right after, comes between them however loaded the machine.
    advised = provider.reclaim(ReclaimRequest(first, 150, 3600, "ex-1"))
    provider.reclaim(ReclaimRequest(second, 120))
    settle(cloud, advised.notice_at + SECOND_US)

    page = feeds(cloud).notices()
    advisory, second_notice, first_notice = page.messages
    assert isinstance(advisory, ReclaimAdvisory) and advisory.instance_id == first
    assert advisory.expected_reclaim_at_us == advised.deadline_at
    assert isinstance(first_notice, Notice) and isinstance(second_notice, Notice)
    assert (first_notice.instance_id, first_notice.workload_id) == (first, "wl-render")
    assert first_notice.deadline_at_us == advised.deadline_at
    assert second_notice.instance_id == second and page.cursor == "c-000003"
    middle = feeds(cloud).notices(after="c-000001", limit=1)
    assert (middle.messages, middle.cursor) == ((second_notice,), "c-000002")
    assert feeds(cloud).notices(after="c-000003").messages == ()


def test_reclaim_checks_ownership_in_nova_then_calls_the_reclaim_api(cloud: ServedCloud) -> None:
    server_id = adapter(cloud).launch(launch_request()).instance_id
    budget = Budget()
    provider = adapter(cloud, acquire=budget)
    since = len(cloud.http.calls)
    before = provider.now_us()
    scheduled = provider.reclaim(ReclaimRequest(server_id, advisory_lead_s=60,
                                                correlation_id="exercise-2026-11-30"))  # fmt: skip
    assert before + 60 * SECOND_US <= scheduled.notice_at <= provider.now_us() + 60 * SECOND_US
    assert scheduled.deadline_at == scheduled.notice_at + 120 * SECOND_US
    assert (scheduled.instance_id, scheduled.correlation_id) == (server_id, "exercise-2026-11-30")
    assert budget.drawn == ["reclaim"]
    assert sent(cloud, f"{NOVA}/servers", since) + sent(cloud, "/feed/", since) == [
        ("GET", f"{NOVA}/servers/{server_id}"),
        ("POST", "/feed/v1/reclaim"),
    ]


def test_reclaim_refuses_servers_not_ours_or_not_reclaimable_sending_nothing(
    cloud: ServedCloud,
) -> None:
    foreign = create_server(cloud, connect(cloud.access), POOL, {
        "spotcap.io:owner": "orch-us1", "spotcap.io:purchase-model": "reclaimable"})  # fmt: skip
    guaranteed = adapter(cloud).launch(launch_request(pool_id=GUARANTEED_POOL)).instance_id
    budget = Budget()
    provider = adapter(cloud, acquire=budget)
    since = len(cloud.http.calls)
    with pytest.raises(NotOwnedError, match="orch-us1"):
        provider.reclaim(ReclaimRequest(foreign))
    with pytest.raises(NotReclaimableError, match="guaranteed"):
        provider.reclaim(ReclaimRequest(guaranteed))
    with pytest.raises(NoticeTooShortError, match=">= 120 s"):
        provider.reclaim(ReclaimRequest(guaranteed, notice_s=60))
    assert budget.drawn == [] and sent(cloud, "/feed/", since) == []
    assert sent(cloud, f"{NOVA}/servers", since) == [
        ("GET", f"{NOVA}/servers/{foreign}"),
        ("GET", f"{NOVA}/servers/{guaranteed}"),
    ]  # the short notice is refused before Nova is asked


# -- poll_events ------------------------------------------------------------------------------


def reclaimed_with_advice(cloud: ServedCloud) -> str:
    """One of ours, advised then noticed; the region past the notice."""
    provider = adapter(cloud)
    server_id = provider.launch(launch_request()).instance_id
    scheduled = provider.reclaim(ReclaimRequest(server_id, 150, 60))
    settle(cloud, scheduled.notice_at + SECOND_US)
    return server_id


def test_poll_events_gives_each_feed_fact_once_as_an_envelope(cloud: ServedCloud) -> None:
    server_id = reclaimed_with_advice(cloud)
    reader = adapter(cloud)  # an adapter that launched nothing: the feeds' facts only
    since = len(cloud.http.calls)
    first, second = reader.poll_events(), reader.poll_events()

    pools = len(CATALOGUE)
    assert [type(e.payload) for e in first] == [RateCard] * pools + [ForwardCapacity] * pools + [
        Advisory,
        NoticeReceived,
    ]  # oldest first: the snapshots at the start, then the advisory, then the notice
    assert second == []
    assert all((e.region, e.producer, e.causation_id) == (REGION, PRODUCER, None) for e in first)
    advisory, notice = first[-2:]
    (fed_advisory, fed_notice) = cloud.feeds.notices
    assert (advisory.event_id, advisory.key) == (fed_advisory["event_id"], server_id)
    assert (notice.event_id, notice.occurred_at) == (
        fed_notice["event_id"],
        fed_notice["issued_at"],
    )
    assert notice.payload == NoticeReceived(server_id, POOL, "wl-render",
                                            fed_notice["deadline_at"], "metadata")  # fmt: skip
    start = cloud.region.config.start_us
    card = next(e for e in first if e.key == POOL and e.event_type == "rate_card")
    assert card.event_id == derived_event_id(
        f"openstack:{REGION}:rate-cards@{start}", "rate_card", POOL
    )
    assert reader.position == FeedPosition("c-000002", start, start)
    assert reader.feed_errors == ()
    assert sent(cloud, "/feed/", since) == [
        ("GET", "/feed/v1/notices?limit=500"),
        ("GET", "/feed/v1/rate-cards"),
        ("GET", "/feed/v1/forward-capacity"),
        ("GET", "/feed/v1/notices?limit=500&after=c-000002"),
        ("GET", "/feed/v1/rate-cards"),
        ("GET", "/feed/v1/forward-capacity"),
    ]


def test_two_providers_reading_the_same_feed_give_the_same_event_ids(cloud: ServedCloud) -> None:
    reclaimed_with_advice(cloud)
    one, other = adapter(cloud).poll_events(), adapter(cloud).poll_events()
    assert [(e.event_id, e.payload) for e in one] == [(e.event_id, e.payload) for e in other]
    assert len({e.event_id for e in one}) == len(one) == 2 * len(CATALOGUE) + 2


def test_a_provider_resumed_from_a_position_repeats_nothing(cloud: ServedCloud) -> None:
    reclaimed_with_advice(cloud)
    first = adapter(cloud)
    first.poll_events()
    resumed = OpenStackProvider(
        connect(cloud.access),  # the same cloud, a new adapter (a restart)
        orchestrator_id=OWNER,
        pools=cloud.region.names.pool_mapping(),
        feed_endpoint=cloud.access.feed_endpoint,
        position=first.position,
        clock=clock_of(cloud.access).now_us,
    )
    assert resumed.poll_events() == []


def test_poll_events_hands_out_at_most_max_events_and_keeps_the_rest(cloud: ServedCloud) -> None:
    reclaimed_with_advice(cloud)
    provider = adapter(cloud)
    head, rest = provider.poll_events(max_events=2), provider.poll_events()
    assert [type(e.payload) for e in head] == [RateCard, RateCard]
    assert [type(e.payload) for e in rest][-2:] == [Advisory, NoticeReceived]
    assert len(head) + len(rest) == 2 * len(CATALOGUE) + 2 and provider.poll_events() == []


def test_a_noticed_instance_is_listed_as_noticed() -> None:
    # At 20x the notice's 150 s last 7.5 s of wall time: the instance is still there for the
    # listings on a loaded machine (at the suite's 1000x they last 0.15 s, and it could be gone).
    clouds = served_clouds(speed=20.0)
    cloud = next(clouds)()
    try:
        noticed = reclaimed_with_advice(cloud)
        provider = adapter(cloud)
        other = provider.launch(launch_request()).instance_id
        assert {i.instance_id: i.state for i in provider.list_by_tag(OWNER_TAG, OWNER)} == {
            noticed: "active",
            other: "active",
        }
        provider.poll_events()
        assert {i.instance_id: i.state for i in provider.list_by_tag(OWNER_TAG, OWNER)} == {
            noticed: "noticed",
            other: "active",
        }
    finally:
        next(clouds, None)


# -- errors are the seam's --------------------------------------------------------------------


def test_cloud_answers_that_mean_a_seam_error_are_that_seam_error(cloud: ServedCloud) -> None:
    provider = adapter(cloud)
    server_id = provider.launch(launch_request()).instance_id
    provider.delete(DeleteRequest(server_id, "scale-down"))
    with pytest.raises(UnknownInstanceError) as gone:
        provider.delete(DeleteRequest(server_id, "scale-down"))
    assert isinstance(gone.value, InstanceNotFoundError) and not gone.value.retryable

    twice = provider.launch(launch_request()).instance_id
    provider.reclaim(ReclaimRequest(twice, correlation_id="exercise"))
    with pytest.raises(AlreadyReclaimingError) as again:
        provider.reclaim(ReclaimRequest(twice, correlation_id="exercise-twice"))
    assert isinstance(again.value, ReclaimConflictError) and not again.value.retryable

    full = LaunchRequest("c3.8.hall-b.reclaimable", "wl-x", owned_tags(OWNER, "wl-x"))
    provider.launch(full)
    provider.launch(full)
    with pytest.raises(CapacityUnavailableError) as no_room:
        provider.launch(full)
    assert isinstance(no_room.value, NoCapacityError) and no_room.value.retryable


def test_every_call_the_adapter_makes_is_one_the_cloud_serves(cloud: ServedCloud) -> None:
    """Nothing the adapter sends in these tests goes unanswered by design (404/405 of routes)."""
    reclaimed_with_advice(cloud)
    provider = adapter(cloud)
    provider.headroom()
    provider.leases()
    provider.poll_events()
    unserved = {(c.method, c.target) for c in cloud.http.calls if c.status in (404, 405, 501)}
    assert unserved == {("GET", f"{NOVA}/flavors/c3.8")}  # find_flavor's lookup by name first
