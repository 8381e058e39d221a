"""The simulator as a `CapacityProvider` at sim time: launch/delete/list/reclaim, typed errors,
and the rule that nothing not tagged as the orchestrator's own is ever deleted or reclaimed."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.base import (
    OWNER_TAG,
    AlreadyReclaimingError,
    CapacityProvider,
    CapacityUnavailableError,
    DeleteRequest,
    Instance,
    LaunchRequest,
    NoticeTooShortError,
    NotOwnedError,
    NotReclaimableError,
    ReclaimRequest,
    UnknownInstanceError,
    UnknownPoolError,
    owned_tags,
)
from provider.sim import ReclaimSettings, RegionSim, SimConfig
from provider.sim.clock import SECOND_US
from schemas.events import Advisory, InstanceDeleted, InstanceLost, NoticeReceived

ME = "spotcap-test"
QUIET = SimConfig(
    seed=2,
    days=3.0,
    halls=2,
    workloads=0,
    reclaims=ReclaimSettings(background=False, waves_per_day=0.0),
)
QUIET = replace(QUIET, orchestrator=replace(QUIET.orchestrator, orchestrator_id=ME))
RECLAIMABLE = "c7-amd.16.hall-a.reclaimable"
COMMITTED = "c7-amd.16.hall-a.committed"


def _sim() -> RegionSim:
    sim = RegionSim(QUIET)
    sim.provider.poll_events()  # the catalogue and reservations published at the start
    return sim


def _launch(provider: CapacityProvider, owner: str | None, pool_id: str = RECLAIMABLE) -> Instance:
    tags = owned_tags(owner, "wl-1") if owner else {"team": "someone-else"}
    return provider.launch(LaunchRequest(pool_id, "wl-1", tags))


def test_the_sim_provider_is_a_capacity_provider() -> None:
    sim = _sim()
    assert isinstance(sim.provider, CapacityProvider)
    assert sim.provider.region == "demo"
    assert sim.provider.orchestrator_id == ME


def test_launch_list_delete() -> None:
    sim = _sim()
    provider = sim.provider
    mine = _launch(provider, ME)
    assert mine.tags[OWNER_TAG] == ME and mine.vcpu == 16 and mine.state == "active"
    assert provider.list_by_tag(OWNER_TAG, ME) == [mine]
    gone = provider.delete(DeleteRequest(mine.instance_id, "scale down", causation_id=None))
    assert gone.state == "gone"
    assert provider.list_by_tag(OWNER_TAG, ME) == []
    events = provider.poll_events()
    assert [e.event_type for e in events] == ["instance_launched", "instance_deleted"]
    deleted = events[1].payload
    assert isinstance(deleted, InstanceDeleted)
    assert deleted.principal == f"appcred/{ME}" and deleted.reason == "scale down"


def test_typed_errors() -> None:
    sim = _sim()
    provider = sim.provider
    with pytest.raises(UnknownPoolError):
        _launch(provider, ME, "nope.1.hall-z.reclaimable")
    with pytest.raises(UnknownInstanceError):
        provider.delete(DeleteRequest("i-missing", "x"))
    committed = _launch(provider, ME, COMMITTED)
    with pytest.raises(NotReclaimableError):
        provider.reclaim(ReclaimRequest(committed.instance_id))
    mine = _launch(provider, ME)
    with pytest.raises(NoticeTooShortError, match="119 s breaks the provider contract"):
        provider.reclaim(ReclaimRequest(mine.instance_id, notice_s=119))
    pool = sim.catalogue.get(RECLAIMABLE)
    while sim.provider.room_vcpu(RECLAIMABLE) >= pool.size_vcpu:
        _launch(provider, ME)
    with pytest.raises(CapacityUnavailableError) as caught:
        _launch(provider, ME)
    assert caught.value.retryable


def test_the_reclaim_api_takes_the_notice_path() -> None:
    sim = _sim()
    provider = sim.provider
    mine = _launch(provider, ME)
    start_us = provider.now_us()
    scheduled = provider.reclaim(
        ReclaimRequest(mine.instance_id, notice_s=150, advisory_lead_s=300, correlation_id="ex-1")
    )
    assert scheduled.notice_at == start_us + 300 * SECOND_US
    assert scheduled.deadline_at == scheduled.notice_at + 150 * SECOND_US
    sim.run_until(scheduled.deadline_at + SECOND_US)
    events = provider.poll_events()[1:]  # after the launch
    facts = [e for e in events if e.event_type in ("advisory", "notice_received", "instance_lost")]
    advisory, notice, lost = facts
    assert isinstance(advisory.payload, Advisory) and advisory.occurred_at == start_us
    assert isinstance(notice.payload, NoticeReceived)
    assert notice.occurred_at == scheduled.notice_at
    assert isinstance(lost.payload, InstanceLost) and lost.payload.with_notice
    assert lost.occurred_at == scheduled.deadline_at
    assert {e.correlation_id for e in facts} == {"ex-1"}
    assert provider.list_by_tag(OWNER_TAG, ME) == []


def _live_ids(provider: CapacityProvider) -> set[str]:
    return {i.instance_id for i in provider.list_by_tag("spotcap.io/workload", "wl-1")}


def _call(provider: CapacityProvider, op: str, instance_id: str) -> None:
    if op == "delete":
        provider.delete(DeleteRequest(instance_id, "test"))
    else:
        provider.reclaim(ReclaimRequest(instance_id))


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("launch"), st.sampled_from([ME, "other-orchestrator", None])),
        st.tuples(st.just("delete"), st.integers(0, 30)),
        st.tuples(st.just("reclaim"), st.integers(0, 30)),
        st.tuples(st.just("advance"), st.integers(1, 600)),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_nothing_not_owned_is_ever_deleted_or_reclaimed(ops: list[tuple[str, object]]) -> None:
    sim = _sim()
    provider = sim.provider
    launched: list[Instance] = []
    for op, arg in ops:
        if op == "launch":
            launched.append(_launch(provider, arg if isinstance(arg, str) else None))
            continue
        if op == "advance":
            assert isinstance(arg, int)
            sim.run_until(provider.now_us() + arg * SECOND_US)
            continue
        if not launched:
            continue
        assert isinstance(arg, int)
        target = launched[arg % len(launched)]
        live_before = _live_ids(provider)
        if not target.owned_by(ME):
            with pytest.raises(NotOwnedError, match=f"refusing to {op} it"):
                _call(provider, op, target.instance_id)
            assert _live_ids(provider) == live_before
        else:
            # An owned instance may be gone already, or already on the reclaim path.
            with contextlib.suppress(UnknownInstanceError, AlreadyReclaimingError):
                _call(provider, op, target.instance_id)
    sim.run_until(provider.now_us() + 3600 * SECOND_US)
    owners = {i.instance_id: i.tags.get(OWNER_TAG) for i in launched}
    for event in provider.poll_events():
        if event.event_type in ("instance_deleted", "instance_lost", "notice_received"):
            assert owners[event.key] == ME, event
