"""What the simulator's provider does beyond the seam's contract suite
(tests/test_provider_contract.py): reclaim facts that carry the exercise's correlation id, and,
over random sequences of calls at sim time, the rule that nothing not tagged as the
orchestrator's own is ever deleted or reclaimed."""

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
    DeleteRequest,
    Instance,
    LaunchRequest,
    NotOwnedError,
    ReclaimRequest,
    UnknownInstanceError,
    owned_tags,
)
from sim import ReclaimSettings, RegionSim, SimConfig
from sim.clock import SECOND_US

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


def test_the_reclaim_facts_carry_the_exercises_correlation_id() -> None:
    """The sim's own: the advisory, notice and loss of an API reclaim name the exercise
    (the seam's reclaim path itself is in tests/test_provider_contract.py)."""
    sim = _sim()
    provider = sim.provider
    mine = _launch(provider, ME)
    scheduled = provider.reclaim(
        ReclaimRequest(mine.instance_id, notice_s=150, advisory_lead_s=300, correlation_id="ex-1")
    )
    sim.run_until(scheduled.deadline_at + SECOND_US)
    kinds = ("advisory", "notice_received", "instance_lost")
    facts = [e for e in provider.poll_events() if e.event_type in kinds]
    assert [e.event_type for e in facts] == list(kinds)
    assert {e.correlation_id for e in facts} == {"ex-1"}


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
