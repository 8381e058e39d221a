"""The simulator's orchestrator seam: an orchestrator sees every event in event-time order and
acts at the event's own microsecond; it launches and deletes through the provider seam and
wakes itself up; the seam refuses calls outside `act`; and the baseline records its decisions
(`placement_decided`, `replacement_requested`) well-formed, with derived ids."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import pytest

from provider.base import (
    POOL_TAG,
    CapacityProvider,
    CapacityUnavailableError,
    DeleteRequest,
    LaunchRequest,
    owned_tags,
)
from schemas.codec import Codec
from schemas.events import (
    CapacityClaimClosed,
    CapacityClaimOpened,
    CapacityReleased,
    CheckpointWritten,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    PlacementDecided,
    RateCard,
    ReplacementRequested,
    UsageInterval,
)
from schemas.ids import derived_event_id
from sim import (
    CLAIM_TAG,
    BaselineOrchestrator,
    OrchestratorHost,
    OrchestratorMisuseError,
    ReclaimSettings,
    RegionSim,
    SimConfig,
)
from sim.clock import SECOND_US

CONFIG = SimConfig(
    seed=11,
    days=0.5,
    halls=2,
    workloads=30,
    reclaims=ReclaimSettings(waves_per_day=3.0, misbehaving_factor=40.0, no_notice_share=0.2),
)


def _run(sim: RegionSim) -> list[Envelope]:
    return [e for batch in sim.run() for e in batch]


def _of(events: list[Envelope], kind: type) -> list[Envelope]:
    return [e for e in events if isinstance(e.payload, kind)]


# -- an orchestrator sees every event, in order, and acts at its microsecond ------------------


class Recording(BaselineOrchestrator):
    """The baseline, recording what the seam shows it: each event with the sim time it was
    observed at and whether that was inside `act`, and the time of every `act`."""

    def __init__(self) -> None:
        super().__init__()
        self.observed: list[tuple[Envelope, int, bool]] = []
        self.acts: list[int] = []
        self.acting = False
        self.clock: OrchestratorHost | None = None

    def start(self, host: OrchestratorHost) -> None:
        self.clock = host
        super().start(host)

    def observe(self, event: Envelope) -> None:
        assert self.clock is not None
        self.observed.append((event, self.clock.now_us(), self.acting))
        super().observe(event)

    def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
        self.acts.append(now_us)
        self.acting = True
        try:
            super().act(now_us, provider, due)
        finally:
            self.acting = False


def test_the_orchestrator_sees_every_event_in_order_within_a_second() -> None:
    recording = Recording()
    sim = RegionSim(CONFIG, orchestrator=recording)
    events = _run(sim)
    seen = [event for event, _, _ in recording.observed]
    assert seen == events, "every event of the log, in the log's order"
    assert [e.occurred_at for e in seen] == sorted(e.occurred_at for e in seen)
    assert _of(events, NoticeReceived) and _of(events, InstanceLost)
    acts = sorted(set(recording.acts))
    for event, seen_at_us, inside_act in recording.observed:
        assert seen_at_us == event.occurred_at, "observed when it happens"
        if event.occurred_at == CONFIG.end_us:
            continue  # the last usage intervals, as the run closes: nothing acts after the end
        if not inside_act:  # what the orchestrator did not cause itself is acted on at once
            next_act = acts[_first_at_or_after(acts, event.occurred_at)]
            assert next_act - event.occurred_at <= SECOND_US
            assert next_act == event.occurred_at


def _first_at_or_after(times: list[int], at_us: int) -> int:
    lo, hi = 0, len(times)
    while lo < hi:
        mid = (lo + hi) // 2
        if times[mid] < at_us:
            lo = mid + 1
        else:
            hi = mid
    return lo


# -- another orchestrator drives the region through the provider seam --------------------------


class Eager:
    """Places each claim at once on the cheapest-listed reclaimable pools with room, replaces an
    instance the moment its notice arrives, and scales a claim down 30 s after its release."""

    RELEASE_DELAY_US = 30 * SECOND_US

    def __init__(self) -> None:
        self.host: OrchestratorHost | None = None
        self.pending: list[Envelope] = []
        self.claims: dict[str, CapacityClaimOpened] = {}
        self.due_at: dict[str, int] = {}
        self.woken: list[tuple[str, int]] = []

    def start(self, host: OrchestratorHost) -> None:
        self.host = host

    def observe(self, event: Envelope) -> None:
        if isinstance(event.payload, CapacityClaimOpened | NoticeReceived | CapacityReleased):
            self.pending.append(event)

    def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
        assert self.host is not None and isinstance(provider, CapacityProvider)
        for name in due:
            assert self.due_at.pop(name) == now_us, "woken exactly when asked"
            self.woken.append((name, now_us))
            claim_id = name.removeprefix("release ")
            for instance in provider.list_by_tag(CLAIM_TAG, claim_id):
                provider.delete(DeleteRequest(instance.instance_id, "scaled down"))
        pending, self.pending = self.pending, []
        for event in pending:
            payload = event.payload
            if isinstance(payload, CapacityClaimOpened):
                self.claims[payload.claim_id] = payload
                self._launch(provider, payload, payload.requested_vcpu, event.event_id)
            elif isinstance(payload, NoticeReceived):
                tags = _tags_of(provider, payload.instance_id)
                claim = self.claims.get(tags.get(CLAIM_TAG, ""))
                if claim is not None:
                    self._launch(provider, claim, 1, event.event_id, avoid=payload.pool_id)
            elif isinstance(payload, CapacityReleased):
                name = f"release {payload.claim_id}"
                self.due_at[name] = now_us + self.RELEASE_DELAY_US
                self.host.wake_at(now_us + self.RELEASE_DELAY_US, name)

    def _launch(
        self,
        provider: CapacityProvider,
        claim: CapacityClaimOpened,
        vcpu: int,
        cause: str,
        avoid: str = "",
    ) -> None:
        assert self.host is not None
        pools = sorted(
            (
                p
                for p in self.host.catalogue.pools("reclaimable")
                if p.sku_family in claim.sku_families
                and p.size_vcpu in claim.sizes_vcpu
                and p.pool_id != avoid
            ),
            key=lambda p: (p.price_per_vcpu_h_eur_micros, p.pool_id),
        )
        for pool in pools:
            while vcpu > 0 and self.host.room_vcpu(pool.pool_id) >= pool.size_vcpu:
                tags = owned_tags(
                    provider.orchestrator_id,
                    claim.workload_id,
                    {POOL_TAG: pool.pool_id, CLAIM_TAG: claim.claim_id},
                )
                try:
                    provider.launch(LaunchRequest(pool.pool_id, claim.workload_id, tags, cause))
                except CapacityUnavailableError:
                    break
                vcpu -= pool.size_vcpu


def _tags_of(provider: CapacityProvider, instance_id: str) -> dict[str, str]:
    for instance in provider.list_by_tag("spotcap.io/owner", provider.orchestrator_id):
        if instance.instance_id == instance_id:
            return dict(instance.tags)
    return {}


def test_another_orchestrator_launches_replaces_and_deletes_through_the_seam() -> None:
    eager = Eager()
    sim = RegionSim(CONFIG, orchestrator=eager)
    events = _run(sim)
    by_id = {e.event_id: e for e in events}
    launched = _of(events, InstanceLaunched)
    assert launched and not _of(events, PlacementDecided), "the baseline is not there"

    # Placed at the claim's own microsecond; the claim closes then, fulfilled.
    closed: dict[str, Envelope] = {}
    for e in _of(events, CapacityClaimClosed):
        assert isinstance(e.payload, CapacityClaimClosed)
        closed[e.payload.claim_id] = e
    fulfilled = 0
    for opened in _of(events, CapacityClaimOpened):
        payload = opened.payload
        assert isinstance(payload, CapacityClaimOpened)
        mine = [e.payload for e in launched if e.causation_id == opened.event_id]
        assert all(e.occurred_at == opened.occurred_at for e in launched if e.payload in mine)
        end = closed[payload.claim_id]
        assert isinstance(end.payload, CapacityClaimClosed)
        if sum(p.vcpu for p in mine if isinstance(p, InstanceLaunched)) >= payload.requested_vcpu:
            assert end.payload.outcome == "fulfilled" and end.occurred_at == opened.occurred_at
            fulfilled += 1
        else:
            assert end.payload.outcome == "expired"
            assert end.occurred_at == opened.occurred_at + CONFIG.claim_deadline_s * SECOND_US
    assert fulfilled >= 0.8 * len(closed)

    # Replaced the moment the notice came: far inside a 60-second window.
    notices = _of(events, NoticeReceived)
    replaced = [e for e in launched if e.causation_id in {n.event_id for n in notices}]
    assert replaced
    for e in replaced:
        assert e.occurred_at == by_id[e.causation_id or ""].occurred_at

    # Scaled down 30 s after each release, through list_by_tag and delete.
    released = _of(events, CapacityReleased)
    assert released and len(eager.woken) == len(released) and not eager.due_at
    scale_down_us = {e.occurred_at + Eager.RELEASE_DELAY_US for e in released}
    deleted = _of(events, InstanceDeleted)
    assert deleted and all(e.occurred_at in scale_down_us for e in deleted)

    # The workloads' side runs on whatever the orchestrator launched.
    ours = {e.payload.instance_id for e in launched}  # type: ignore[union-attr]
    checkpointed = {e.payload.instance_id for e in _of(events, CheckpointWritten)}  # type: ignore[union-attr]
    used = {e.payload.instance_id for e in _of(events, UsageInterval)}  # type: ignore[union-attr]
    assert checkpointed and checkpointed <= ours and used == ours


class Impatient:
    """Calls the provider from observe(): the seam must refuse."""

    def start(self, host: OrchestratorHost) -> None:
        self.host = host

    def observe(self, event: Envelope) -> None:
        if isinstance(event.payload, CapacityClaimOpened):
            self.host.emit(event.payload, "test", causation_id=event.event_id)

    def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
        provider.poll_events()


def test_calls_outside_act_and_polling_are_refused() -> None:
    sim = RegionSim(replace(CONFIG, workloads=3), orchestrator=Impatient())
    with pytest.raises(OrchestratorMisuseError, match="poll"):
        sim.run_until(sim.now_us() + 60 * SECOND_US)

    class Observing(Impatient):
        def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
            pass

    sim = RegionSim(replace(CONFIG, workloads=3), orchestrator=Observing())
    with pytest.raises(OrchestratorMisuseError, match="outside act"):
        sim.run_until(sim.config.end_us)


# -- the baseline records its decisions -------------------------------------------------------


@pytest.fixture(scope="module")
def baseline_run() -> list[Envelope]:
    return _run(RegionSim(CONFIG))


def test_placements_are_recorded_before_their_launches(baseline_run: list[Envelope]) -> None:
    events = baseline_run
    by_id = {e.event_id: e for e in events}
    position = {e.event_id: i for i, e in enumerate(events)}
    prices: dict[str, int] = {}
    launches = defaultdict(list)
    for e in _of(events, InstanceLaunched):
        launches[e.causation_id].append(e)
    placements_of: defaultdict[str, int] = defaultdict(int)
    placements = _of(events, PlacementDecided)
    assert placements
    caps_seen: set[bool] = set()
    for e in events:
        p = e.payload
        if isinstance(p, RateCard):
            prices[p.pool_id] = p.price_per_vcpu_h_eur_micros
        if not isinstance(p, PlacementDecided):
            continue
        claim = by_id[e.causation_id or ""]
        assert isinstance(claim.payload, CapacityClaimOpened)
        assert p.claim_id == claim.payload.claim_id and p.workload_id == claim.payload.workload_id
        placements_of[p.claim_id] += 1
        assert e.event_id == derived_event_id(
            claim.event_id, "placement_decided", str(placements_of[p.claim_id])
        )
        assert uuid.UUID(e.event_id).version == 5
        mine = launches[e.event_id]
        assert all(position[x.event_id] > position[e.event_id] for x in mine)
        placed: defaultdict[str, int] = defaultdict(int)
        for x in mine:
            assert isinstance(x.payload, InstanceLaunched)
            placed[x.payload.pool_id] += x.payload.vcpu
            assert x.payload.tags[CLAIM_TAG] == p.claim_id
        assert {a.pool_id: a.vcpu for a in p.allocations} == placed
        assert [a.pool_id for a in p.allocations] == sorted(placed)
        assert p.floor_vcpu <= sum(placed.values())
        assert p.cost_per_h_eur_micros == sum(v * prices[pool] for pool, v in placed.items())
        assert p.premium_per_h_eur_micros == (
            p.cost_per_h_eur_micros - p.price_first_cost_per_h_eur_micros
        )
        assert p.excluded_pool_ids == () and p.ranking_id is None
        assert p.unplaced_vcpu == max(0, p.requested_vcpu - sum(placed.values()))
        assert (p.caps_reason is None) == (p.caps_held and not p.unplaced_vcpu)
        if p.eligible_pool_count < 8:
            assert not p.caps_held and p.pool_cap_vcpu == p.group_cap_vcpu == 0
        else:
            assert 0 <= p.pool_cap_vcpu <= p.group_cap_vcpu
        caps_seen.add(p.caps_held)
    assert caps_seen == {True, False}, "the baseline keeps the caps sometimes, not always"
    # The first placement of each claim is recorded even when nothing had room.
    closed = {e.payload for e in _of(events, CapacityClaimClosed)}
    assert set(placements_of) == {p.claim_id for p in closed if isinstance(p, CapacityClaimClosed)}


def test_replacements_are_requested_for_losses(baseline_run: list[Envelope]) -> None:
    events = baseline_run
    by_id = {e.event_id: e for e in events}
    position = {e.event_id: i for i, e in enumerate(events)}
    launches = defaultdict(list)
    for e in _of(events, InstanceLaunched):
        launches[e.causation_id].append(e)
    requests = _of(events, ReplacementRequested)
    assert requests
    for e in requests:
        p = e.payload
        assert isinstance(p, ReplacementRequested)
        loss = by_id[e.causation_id or ""]
        assert isinstance(loss.payload, InstanceLost)
        assert loss.payload.instance_id == p.replaces_instance_id
        assert e.occurred_at == loss.occurred_at + 45 * SECOND_US
        assert e.event_id == derived_event_id(
            loss.event_id, "replacement_requested", p.purchase_model
        )
        assert 0 < p.vcpu <= loss.payload.vcpu
        assert p.excluded_pool_ids == tuple(sorted(p.excluded_pool_ids))
        if p.excluded_pool_ids:
            assert loss.payload.pool_id in p.excluded_pool_ids
        else:
            assert p.caps_reason and "could not keep out of" in p.caps_reason
        assert p.replaces_pool_id == loss.payload.pool_id
        placed: defaultdict[str, int] = defaultdict(int)
        for x in launches[e.event_id]:
            assert isinstance(x.payload, InstanceLaunched)
            placed[x.payload.pool_id] += x.payload.vcpu
        assert {a.pool_id: a.vcpu for a in p.allocations} == placed
        assert p.unplaced_vcpu == max(0, p.vcpu - sum(placed.values()))
        for x in launches[e.event_id]:
            assert isinstance(x.payload, InstanceLaunched)
            assert position[x.event_id] > position[e.event_id]
            assert x.payload.purchase_model == p.purchase_model
            assert x.payload.pool_id not in p.excluded_pool_ids
    assert sum(1 for e in requests if launches[e.event_id]) >= 0.5 * len(requests)


def test_released_claims_are_scaled_down(baseline_run: list[Envelope]) -> None:
    events = baseline_run
    released = {e.event_id: e for e in _of(events, CapacityReleased)}
    assert released
    live_by_claim: defaultdict[str, set[str]] = defaultdict(set)
    for e in events:
        p = e.payload
        if isinstance(p, InstanceLaunched):
            live_by_claim[p.tags[CLAIM_TAG]].add(p.instance_id)
        elif isinstance(p, InstanceLost):
            for live in live_by_claim.values():
                live.discard(p.instance_id)
        elif isinstance(p, InstanceDeleted):
            cause = released[e.causation_id or ""]
            assert isinstance(cause.payload, CapacityReleased)
            assert e.occurred_at == cause.occurred_at
            live_by_claim[cause.payload.claim_id].remove(p.instance_id)
    assert _of(events, InstanceDeleted)
    for e in released.values():
        assert isinstance(e.payload, CapacityReleased)
        assert not live_by_claim[e.payload.claim_id]


def test_decisions_survive_the_codec(baseline_run: list[Envelope]) -> None:
    codec = Codec()
    decisions = [e for e in baseline_run if e.payload.TOPIC == "decisions"]
    assert decisions
    for e in decisions:
        assert codec.decode(codec.encode(e)) == e
