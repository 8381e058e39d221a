"""One contract suite for the capacity-provider seam (ADR-05), run against the simulator and the
OpenStack adapter (through the real openstacksdk, on the simulated region served as a cloud,
`sim.cloud`): launch with tags, list by tag, delete only of our own
instances, unknown pools, no room, the reclaim API and the notice path it takes, and
`poll_events` giving each provider commitment's facts once.

What each implementation must supply beyond the seam is in tests/provider_contract.py;
tests/test_sim_provider.py and tests/test_openstack_seam.py keep what is their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest

from provider.base import (
    OWNER_TAG,
    WORKLOAD_TAG,
    CapacityProvider,
    CapacityUnavailableError,
    DeleteRequest,
    Instance,
    NoticeTooShortError,
    NotOwnedError,
    NotReclaimableError,
    ProviderError,
    ReclaimRequest,
    ReclaimScheduled,
    UnknownInstanceError,
    UnknownPoolError,
)
from schemas.events import (
    Advisory,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
)
from sim.clock import SECOND_US
from tests.cloud_support import served_clouds
from tests.provider_contract import (
    COMMITMENT_EVENTS,
    ProviderHarness,
    ServedCloudHarness,
    SimHarness,
    launch_request,
    poll_all,
)

IMPLEMENTATIONS = ["sim", "openstack"]


@pytest.fixture(params=IMPLEMENTATIONS)
def harnesses(request: pytest.FixtureRequest) -> Iterator[Callable[[], ProviderHarness]]:
    """A factory of fresh harnesses of one implementation (served clouds closed after)."""
    if request.param == "sim":
        yield SimHarness
        return
    clouds = served_clouds()
    make_cloud = next(clouds)
    yield lambda: ServedCloudHarness(make_cloud())
    next(clouds, None)  # close every cloud


@pytest.fixture
def harness(harnesses: Callable[[], ProviderHarness]) -> ProviderHarness:
    return harnesses()


def about(events: list[Envelope], instance_id: str, event_type: str) -> list[Envelope]:
    return [e for e in events if e.key == instance_id and e.event_type == event_type]


def launch(harness: ProviderHarness, causation_id: str | None = None) -> Instance:
    return harness.provider.launch(launch_request(harness, causation_id))


# -- the seam ---------------------------------------------------------------------------------


def test_it_is_a_capacity_provider(harness: ProviderHarness) -> None:
    provider = harness.provider
    assert isinstance(provider, CapacityProvider)
    assert provider.region and provider.orchestrator_id
    assert provider.now_us() > 1_600_000_000_000_000  # microseconds since the epoch


# -- launch and list --------------------------------------------------------------------------


def test_launch_gives_an_instance_tagged_as_ours_and_its_launched_event(
    harness: ProviderHarness,
) -> None:
    provider = harness.provider
    request = launch_request(harness, causation_id="5d6e7f80-9a1b-4c2d-8e3f-4a5b6c7d8e9f")
    instance = provider.launch(request)

    assert (instance.pool_id, instance.workload_id) == (harness.pool_id, request.workload_id)
    assert (instance.vcpu, instance.purchase_model) == (harness.pool_vcpu, "reclaimable")
    assert instance.state == "active" and instance.owned_by(provider.orchestrator_id)
    assert dict(request.tags).items() <= dict(instance.tags).items()

    (launched,) = about(poll_all(provider), instance.instance_id, "instance_launched")
    assert launched.region == provider.region
    assert launched.occurred_at == instance.launched_at
    assert launched.causation_id == request.causation_id
    payload = launched.payload
    assert isinstance(payload, InstanceLaunched)
    assert (payload.pool_id, payload.workload_id, payload.vcpu, payload.purchase_model) == (
        instance.pool_id,
        instance.workload_id,
        instance.vcpu,
        instance.purchase_model,
    )
    assert payload.tags == instance.tags


def test_list_by_tag_gives_our_live_instances_by_id(harness: ProviderHarness) -> None:
    provider = harness.provider
    foreign = harness.foreign_instance_ids()
    instance = launch(harness)

    ours = provider.list_by_tag(OWNER_TAG, provider.orchestrator_id)
    ids = [i.instance_id for i in ours]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert instance.instance_id in ids and not set(foreign) & set(ids)
    assert all(i.owned_by(provider.orchestrator_id) and i.state != "gone" for i in ours)
    (listed,) = [i for i in ours if i.instance_id == instance.instance_id]
    assert (listed.pool_id, listed.workload_id, listed.vcpu) == (
        instance.pool_id,
        instance.workload_id,
        instance.vcpu,
    )
    assert dict(instance.tags).items() <= dict(listed.tags).items()

    by_workload = provider.list_by_tag(WORKLOAD_TAG, instance.workload_id)
    assert instance.instance_id in [i.instance_id for i in by_workload]
    assert all(i.tags.get(WORKLOAD_TAG) == instance.workload_id for i in by_workload)


def test_an_unknown_pool_is_refused_and_nothing_launched(harness: ProviderHarness) -> None:
    provider = harness.provider
    request = replace(launch_request(harness), pool_id="nope.8.hall9.reclaimable")
    with pytest.raises(UnknownPoolError, match=r"nope\.8\.hall9\.reclaimable") as caught:
        provider.launch(request)
    assert not caught.value.retryable
    assert not [e for e in poll_all(provider) if e.event_type == "instance_launched"]


def test_a_launch_without_room_is_capacity_unavailable_and_retryable(
    harness: ProviderHarness,
) -> None:
    provider = harness.provider
    request = harness.request_without_room()
    before = poll_all(provider)
    with pytest.raises(CapacityUnavailableError) as caught:
        provider.launch(request)
    assert caught.value.retryable and isinstance(caught.value, ProviderError)
    after = poll_all(provider)
    assert not [
        e
        for e in before + after
        if isinstance(e.payload, InstanceLaunched) and e.payload.workload_id == request.workload_id
    ]


# -- delete: ours only ------------------------------------------------------------------------


def test_delete_removes_an_instance_of_ours_and_says_who_asked(harness: ProviderHarness) -> None:
    provider = harness.provider
    instance = launch(harness)
    request = DeleteRequest(
        instance.instance_id, "scale down", "orchestrator", "c4d5e6f7", "wave-7"
    )
    gone = provider.delete(request)

    assert (gone.instance_id, gone.state) == (instance.instance_id, "gone")
    (deleted,) = about(poll_all(provider), instance.instance_id, "instance_deleted")
    assert (deleted.causation_id, deleted.correlation_id) == ("c4d5e6f7", "wave-7")
    payload = deleted.payload
    assert isinstance(payload, InstanceDeleted)
    assert (payload.pool_id, payload.workload_id) == (instance.pool_id, instance.workload_id)
    assert (payload.deleted_by, payload.reason) == ("orchestrator", "scale down")
    assert payload.principal  # who made the call, for the audit log
    listed = provider.list_by_tag(OWNER_TAG, provider.orchestrator_id)
    assert instance.instance_id not in [i.instance_id for i in listed]


def test_nothing_not_ours_is_deleted_or_reclaimed(harness: ProviderHarness) -> None:
    provider = harness.provider
    foreign = harness.foreign_instance_ids()
    poll_all(provider)
    for instance_id in foreign:
        with pytest.raises(NotOwnedError, match=instance_id) as refused:
            provider.delete(DeleteRequest(instance_id, "scale down"))
        assert not refused.value.retryable
        with pytest.raises(NotOwnedError, match=instance_id):
            provider.reclaim(ReclaimRequest(instance_id, correlation_id="exercise-foreign"))
    harness.settle(provider.now_us() + 600 * SECOND_US)
    touched = {"instance_deleted", "instance_lost", "notice_received", "advisory"}
    assert not [e for e in poll_all(provider) if e.key in foreign and e.event_type in touched]


def test_an_instance_that_is_gone_is_unknown(harness: ProviderHarness) -> None:
    with pytest.raises(UnknownInstanceError, match=harness.gone_instance_id()):
        harness.provider.delete(DeleteRequest(harness.gone_instance_id(), "scale down"))


# -- the reclaim API (commitment 5) and the notice path it takes (1, 2) ------------------------

NOTICE_S, ADVISORY_LEAD_S = 150, 300


@dataclass(frozen=True)
class Reclaimed:
    instance: Instance
    scheduled: ReclaimScheduled
    asked_between_us: tuple[int, int]
    """The provider's clock just before the reclaim was asked for and just after its answer."""
    events: list[Envelope]


def reclaimed(harness: ProviderHarness) -> Reclaimed:
    """Launch one of ours, reclaim it through the API, let its deadline pass; every event."""
    provider = harness.provider
    instance = launch(harness)
    request = ReclaimRequest(
        instance.instance_id, NOTICE_S, ADVISORY_LEAD_S, correlation_id="exercise-contract"
    )
    before_us = provider.now_us()
    scheduled = provider.reclaim(request)
    after_us = provider.now_us()
    harness.settle(scheduled.deadline_at + 600 * SECOND_US)
    return Reclaimed(instance, scheduled, (before_us, after_us), poll_all(provider))


def test_a_reclaim_gives_the_advisory_then_the_notice_then_the_loss(
    harness: ProviderHarness,
) -> None:
    done = reclaimed(harness)
    instance, scheduled, events = done.instance, done.scheduled, done.events

    assert (scheduled.instance_id, scheduled.correlation_id) == (
        instance.instance_id,
        "exercise-contract",
    )
    # A cloud's clock moves while it is called: the advisory starts when the reclaim arrived,
    # somewhere between the asking and the answer (the simulator's clock stands still).
    before_us, after_us = done.asked_between_us
    assert before_us <= scheduled.notice_at - ADVISORY_LEAD_S * SECOND_US <= after_us
    assert scheduled.deadline_at == scheduled.notice_at + NOTICE_S * SECOND_US
    (advisory,) = about(events, instance.instance_id, "advisory")
    (notice,) = about(events, instance.instance_id, "notice_received")
    assert isinstance(advisory.payload, Advisory) and isinstance(notice.payload, NoticeReceived)
    assert advisory.payload.expected_reclaim_at == scheduled.deadline_at
    assert advisory.occurred_at < notice.occurred_at == scheduled.notice_at
    assert notice.payload.deadline_at == scheduled.deadline_at
    assert notice.payload.deadline_at - notice.occurred_at >= 120 * SECOND_US
    assert (notice.payload.pool_id, notice.payload.workload_id) == (
        instance.pool_id,
        instance.workload_id,
    )
    losses = about(events, instance.instance_id, "instance_lost")
    if "instance_lost" in harness.commitment_events:
        (lost,) = losses
        assert isinstance(lost.payload, InstanceLost)
        assert lost.payload.with_notice and lost.payload.notice_event_id == notice.event_id
        assert lost.occurred_at == scheduled.deadline_at
    else:
        assert losses == []


def test_a_reclaim_refuses_guaranteed_capacity_and_a_short_notice(
    harness: ProviderHarness,
) -> None:
    provider = harness.provider
    with pytest.raises(NotReclaimableError, match="reclaimable"):
        provider.reclaim(ReclaimRequest(harness.guaranteed_instance_id()))
    instance = launch(harness)
    too_short = r"notice of 119 s .*breaks the provider contract"
    with pytest.raises(NoticeTooShortError, match=too_short):
        provider.reclaim(ReclaimRequest(instance.instance_id, notice_s=119))


# -- poll_events ------------------------------------------------------------------------------


def test_poll_events_gives_the_facts_of_the_commitments_it_declares(
    harness: ProviderHarness,
) -> None:
    events = reclaimed(harness).events
    provider = harness.provider
    assert {e.event_type for e in events} & COMMITMENT_EVENTS == harness.commitment_events
    assert len({e.event_id for e in events}) == len(events)  # each fact once
    for event in events:
        assert event.region == provider.region
        key = getattr(event.payload, event.payload.KEY, None)
        assert event.key == (key if isinstance(key, str) else event.key)
    assert provider.poll_events() == []


def test_poll_events_in_small_batches_hands_out_the_same_facts_in_the_same_order(
    harnesses: Callable[[], ProviderHarness],
) -> None:
    batched, whole = harnesses(), harnesses()
    for harness in (batched, whole):
        launch(harness)
        harness.settle(harness.provider.now_us() + 900 * SECOND_US)
    in_batches: list[Envelope] = []
    while batch := batched.provider.poll_events(max_events=3):
        assert len(batch) <= 3
        in_batches += batch
    expected = [e.event_id for e in poll_all(whole.provider)]
    assert [e.event_id for e in in_batches] == expected and expected
