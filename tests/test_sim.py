"""The region simulator: determinism, the provider contract in its events (notice >= 120 s, the
no-notice case), rate cards every 5 minutes, waves, misbehaving pools, and the cause chains."""

from __future__ import annotations

import gc
import random
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.base import OWNER_TAG
from schemas.events import (
    Advisory,
    CheckpointWritten,
    ContractPublished,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    RateCard,
    ReplacementRequested,
    UsageInterval,
    WorkWasted,
)
from sim import ReclaimSettings, RegionSim, RunSummary, SimConfig, simulate
from sim.bus import EventBus
from sim.clock import DAY_US, EPOCH_US, HOUR_US, SECOND_US, Scheduler
from sim.collector import THRESHOLDS, fewer_collections
from sim.demo import DemoRefusedError, checked_config, contract_files_sentence
from sim.materialise import projection_lines
from sim.report import misbehaving_pool_rows, wave_rows, waves_title

SMALL = SimConfig(
    seed=3,
    days=0.5,
    halls=2,
    workloads=30,
    reclaims=ReclaimSettings(no_notice_share=0.2, advisory_share=0.5, waves_per_day=2.0),
)


@pytest.fixture(scope="module")
def small_run() -> list[Envelope]:
    return list(simulate(SMALL))


def _of(events: list[Envelope], kind: type) -> list[Envelope]:
    return [e for e in events if isinstance(e.payload, kind)]


def check_invariants(events: list[Envelope]) -> None:
    """What every run must satisfy, whatever the seed."""
    assert len({e.event_id for e in events}) == len(events), "event ids are unique"
    seen: dict[str, Envelope] = {}
    notices: dict[str, Envelope] = {}
    launched: dict[str, InstanceLaunched] = {}
    previous_us = 0
    for e in events:
        assert e.occurred_at >= previous_us, "events come in event-time order"
        previous_us = e.occurred_at
        assert e.recorded_at == e.occurred_at
        # contract_published comes from the real compiler (sim/contracts.py).
        assert e.producer.startswith("sim/") or e.producer == "contracts/compiler"
        assert e.key == getattr(e.payload, e.payload.KEY)
        if e.causation_id is not None:
            assert e.causation_id in seen, f"{e.event_type} caused by an earlier event"
        p = e.payload
        if isinstance(p, InstanceLaunched):
            launched[p.instance_id] = p
        elif isinstance(p, NoticeReceived):
            assert p.deadline_at - e.occurred_at >= 120 * SECOND_US
            notices[p.instance_id] = e
        elif isinstance(p, InstanceLost):
            notice = notices.get(p.instance_id)
            if p.with_notice:
                assert notice is not None
                assert isinstance(notice.payload, NoticeReceived)
                assert e.causation_id == p.notice_event_id == notice.event_id
                assert e.occurred_at - notice.occurred_at >= 120 * SECOND_US
                assert e.occurred_at == notice.payload.deadline_at
            else:
                assert notice is None, "a loss without notice has no notice before it"
                assert e.causation_id is None and p.notice_event_id is None
        elif isinstance(p, InstanceDeleted):
            assert launched[p.instance_id].tags[OWNER_TAG] == SMALL.orchestrator.orchestrator_id
        elif isinstance(p, WorkWasted):
            cause = seen[e.causation_id or ""]
            assert isinstance(cause.payload, InstanceLost)
            assert cause.payload.instance_id == p.instance_id
            assert p.wasted_vcpu_s >= 0
        elif isinstance(p, CheckpointWritten) and p.final:
            cause = seen[e.causation_id or ""]
            assert isinstance(cause.payload, NoticeReceived)
            assert e.occurred_at < cause.payload.deadline_at
        elif isinstance(p, UsageInterval):
            assert p.start_at < p.end_at <= e.occurred_at
            assert p.used_vcpu_h == pytest.approx(p.vcpu * (p.end_at - p.start_at) / 3.6e9)
        seen[e.event_id] = e


def test_the_same_seed_gives_the_same_events(small_run: list[Envelope]) -> None:
    assert list(simulate(SMALL)) == small_run
    assert list(simulate(replace(SMALL, seed=4))) != small_run


@given(st.integers(0, 2**128 - 1), st.integers(0, 2**32))
def test_a_facts_id_is_the_text_of_a_version_4_uuid_of_the_id_stream(bits: int, seed: int) -> None:
    # The bus writes the id without making a UUID: the text must stay uuid's, byte for byte
    # (the ids are in every seeded log), for any 128 bits, all-zero and all-one included.
    class Stream(random.Random):
        def getrandbits(self, k: int) -> int:
            assert k == 128
            return bits

    bus = EventBus("r", Scheduler(EPOCH_US), Stream(seed))
    assert bus.fact_id() == str(uuid.UUID(int=bits, version=4))
    seeded, again = EventBus("r", Scheduler(EPOCH_US), random.Random(seed)), random.Random(seed)
    for _ in range(50):
        assert seeded.fact_id() == str(uuid.UUID(int=again.getrandbits(128), version=4))


def test_a_run_keeps_every_invariant(small_run: list[Envelope]) -> None:
    check_invariants(small_run)
    kinds = Counter(e.event_type for e in small_run)
    assert kinds["notice_received"] and kinds["advisory"] and kinds["checkpoint_written"]
    lost = [e.payload for e in _of(small_run, InstanceLost)]
    assert any(p.with_notice for p in lost if isinstance(p, InstanceLost))
    assert any(not p.with_notice for p in lost if isinstance(p, InstanceLost))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), no_notice=st.sampled_from([0.0, 0.3, 1.0]))
def test_invariants_hold_for_any_seed(seed: int, no_notice: float) -> None:
    reclaims = replace(SMALL.reclaims, no_notice_share=no_notice, misbehaving_factor=40.0)
    events = list(simulate(replace(SMALL, seed=seed, days=0.25, reclaims=reclaims)))
    check_invariants(events)
    lost = [e.payload for e in _of(events, InstanceLost) if isinstance(e.payload, InstanceLost)]
    if no_notice == 1.0:
        assert not _of(events, NoticeReceived)
        assert all(not p.with_notice for p in lost)
    if no_notice == 0.0:
        assert all(p.with_notice for p in lost)


def test_rate_cards_every_five_minutes_per_pool(small_run: list[Envelope]) -> None:
    sim = RegionSim(SMALL)
    times: defaultdict[str, list[int]] = defaultdict(list)
    for e in _of(small_run, RateCard):
        assert isinstance(e.payload, RateCard)
        times[e.payload.pool_id].append(e.occurred_at)
        assert e.payload.valid_until_at - e.payload.valid_from_at == 300 * SECOND_US
    assert set(times) == {p.pool_id for p in sim.catalogue}
    expected = [EPOCH_US + k * 300 * SECOND_US for k in range(int(SMALL.days * 288))]
    for pool_times in times.values():
        assert pool_times == expected


def test_misbehaving_pools_are_reclaimed_far_above_their_rate() -> None:
    config = SimConfig(seed=1, days=1.0, reclaims=ReclaimSettings(waves_per_day=0.0))
    sim = RegionSim(config)
    summary = RunSummary(sim.catalogue)
    for batch in sim.run():
        for e in batch:
            summary.observe(e)
    assert len(sim.misbehaving_pool_ids) == 2
    ratios = {}
    for pool in sim.catalogue.pools("reclaimable"):
        if summary.instance_h_by_pool.get(pool.pool_id, 0.0) >= 100:
            observed = summary.observed_per_instance_h(pool.pool_id)
            ratios[pool.pool_id] = observed / pool.expected_interruptions_per_h
    for pool_id in sim.misbehaving_pool_ids:
        assert ratios[pool_id] > 5, pool_id
    others = [r for p, r in ratios.items() if p not in sim.misbehaving_pool_ids]
    assert statistics.median(others) < 2


def test_the_run_summary_forgets_behind_its_horizon_and_reports_the_same() -> None:
    """The summary forgets rate cards and priced items behind its horizon (memory flat in the
    run's length): with 8 h (beyond the 6 h usage intervals) it reports exactly what a summary
    holding the whole run reports, holding a third of the cards; with 3 h a usage interval
    reaches behind it, which is an error, never a wrong sum."""
    config = SimConfig(seed=9, days=1.0, workloads=20, region="summary")
    events = [e for batch in RegionSim(config).run() for e in batch]
    catalogue = RegionSim(config).catalogue
    whole = RunSummary(catalogue, horizon_us=10 * DAY_US)
    recent = RunSummary(catalogue, horizon_us=8 * HOUR_US)
    for e in events:
        whole.observe(e)
        recent.observe(e)
    assert recent.report() == whole.report()
    assert recent.report()["ledger"]["net_saving_eur_micros"] != 0
    assert len(recent._pricer.book) * 2 < len(whole._pricer.book)
    # The priced items' ids go with them (a whole run's usage ids were once held to its end).
    held = {i.envelope.event_id for items in recent._source.by_pool.values() for i in items}
    assert recent._source.ids == held
    assert len(recent._source.ids) < len(whole._source.ids) * 0.75
    short = RunSummary(catalogue, 3 * HOUR_US)
    with pytest.raises(ValueError, match="longer horizon_us"):
        for e in events:
            short.observe(e)


def test_a_wave_reclaims_much_of_a_hall_within_minutes() -> None:
    # Background advisories stay on: a wave's instances must still follow the wave's decision.
    reclaims = ReclaimSettings(waves_per_day=3.0, advisory_share=0.3, no_notice_share=0.2)
    config = replace(SMALL, seed=5, days=1.0, workloads=60, reclaims=reclaims)
    sim = RegionSim(config)
    events = [e for batch in sim.run() for e in batch]
    assert {w.advised for w in sim.reclaimer.waves} == {True, False}
    pools = {p.pool_id: p for p in sim.catalogue}
    for wave in sim.reclaimer.waves:
        live = set()
        for e in events:
            if e.occurred_at >= wave.start_us:
                break
            p = e.payload
            if isinstance(p, InstanceLaunched) and pools[p.pool_id].hall == wave.hall:
                if p.purchase_model == "reclaimable":
                    live.add(p.instance_id)
            elif isinstance(p, InstanceLost | InstanceDeleted):
                live.discard(p.instance_id)
        mine = [e for e in events if e.correlation_id == wave.wave_id]
        lost = [e for e in mine if isinstance(e.payload, InstanceLost)]
        lost_pools = {e.payload.pool_id for e in mine if isinstance(e.payload, InstanceLost)}
        notices: dict[str, Envelope] = {}
        advisories: dict[str, Envelope] = {}
        for e in mine:
            if isinstance(e.payload, NoticeReceived):
                notices[e.payload.instance_id] = e
            elif isinstance(e.payload, Advisory):
                advisories[e.payload.instance_id] = e
        assert all(pools[pool_id].hall == wave.hall for pool_id in lost_pools)
        if len(live) >= 10:
            assert len(lost) >= 0.3 * len(live), (wave, len(lost), len(live))
        # The wave decides: a plain wave gives no advisories, an advised one one per notice,
        # all with the wave's lead and notice; so each kind falls within one `spread` window.
        spread_us, lead_us = wave.spread_s * SECOND_US, wave.advisory_lead_s * SECOND_US
        assert bool(wave.advisory_lead_s) == wave.advised
        assert set(advisories) == (set(notices) if wave.advised else set())
        for instance_id, e in advisories.items():
            assert wave.start_us <= e.occurred_at <= wave.start_us + spread_us
            assert notices[instance_id].occurred_at == e.occurred_at + lead_us
        for e in notices.values():
            assert isinstance(e.payload, NoticeReceived)
            assert e.payload.deadline_at - e.occurred_at == wave.notice_s * SECOND_US
            assert 0 <= e.occurred_at - wave.start_us - lead_us <= spread_us
        first_loss_us = wave.start_us + wave.path_s * SECOND_US
        for e in lost:
            assert first_loss_us <= e.occurred_at <= first_loss_us + spread_us
        assert all(e.occurred_at <= first_loss_us + spread_us for e in mine)


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    days=st.sampled_from([0.1, 0.3, 0.55]),
    usage_interval_s=st.sampled_from([21600, 3600, 5000]),
)
def test_usage_covers_every_instance_from_launch_to_its_end(
    seed: int, days: float, usage_interval_s: int
) -> None:
    """The usage intervals of an instance add up to vcpu x its whole life: from launch to its
    loss or deletion, or to the end of the run for those still running then."""
    config = replace(
        SMALL,
        seed=seed,
        days=days,
        workloads=20,
        reclaims=replace(SMALL.reclaims, waves_per_day=3.0),
        usage_interval_s=usage_interval_s,
    )
    events = list(simulate(config))
    launched: dict[str, tuple[int, int]] = {}
    ended: dict[str, int] = {}
    used: defaultdict[str, float] = defaultdict(float)
    for e in events:
        p = e.payload
        if isinstance(p, InstanceLaunched):
            launched[p.instance_id] = (e.occurred_at, p.vcpu)
        elif isinstance(p, InstanceLost | InstanceDeleted):
            ended[p.instance_id] = e.occurred_at
        elif isinstance(p, UsageInterval):
            used[p.instance_id] += p.used_vcpu_h
    assert launched and any(i not in ended for i in launched)
    assert set(used) <= set(launched)
    for instance_id, (launched_us, vcpu) in launched.items():
        end_us = ended.get(instance_id, config.end_us)
        expected = vcpu * (end_us - launched_us) / 3.6e9
        assert used[instance_id] == pytest.approx(expected, rel=1e-9, abs=1e-9), instance_id


def test_contracts_are_published_first_by_the_compiler(small_run: list[Envelope]) -> None:
    sim = RegionSim(SMALL)
    contracts = _of(small_run, ContractPublished)
    assert len(contracts) == SMALL.workloads
    assert all(e.occurred_at == EPOCH_US for e in contracts)
    assert tuple(contracts) == sim.contracts.events  # tests/test_sim_contracts.py says more
    by_id = {w.workload_id: w for w in sim.workloads}
    for e in contracts:
        p = e.payload
        assert isinstance(p, ContractPublished)
        assert p.tier == by_id[p.workload_id].contract.tier


def test_the_default_population_covers_five_kinds_and_tiers() -> None:
    sim = RegionSim(SimConfig(days=0.01))
    assert len(sim.workloads) == 220
    assert {w.kind for w in sim.workloads} == {"spark", "pytorch", "ci", "service", "slurm"}
    tiers = {"t1", "t2", "t3", "t4", "t5", "bespoke"}
    assert {w.contract.tier for w in sim.workloads} == tiers
    assert 12_000 <= sum(w.contract.target_vcpu for w in sim.workloads) <= 60_000


def test_losses_are_relaunched_and_waste_is_charged(small_run: list[Envelope]) -> None:
    losses = {e.event_id for e in _of(small_run, InstanceLost)}
    requests = {e.event_id: e.causation_id for e in _of(small_run, ReplacementRequested)}
    relaunched = {requests.get(e.causation_id or "") for e in _of(small_run, InstanceLaunched)}
    wasted = {e.causation_id for e in _of(small_run, WorkWasted)}
    assert wasted == losses
    assert len(relaunched & losses) >= 0.5 * len(losses)


def test_no_wall_clock_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*_: object) -> float:
        raise AssertionError("the simulation read the wall clock")

    clocks: list[tuple[str, Callable[..., object]]] = [
        ("time", time.time),
        ("time_ns", time.time_ns),
        ("monotonic", time.monotonic),
        ("perf_counter", time.perf_counter),
    ]
    for name, _ in clocks:
        monkeypatch.setattr(time, name, forbidden)
    events = list(simulate(replace(SMALL, days=0.1)))
    monkeypatch.undo()
    assert events and events[-1].occurred_at < EPOCH_US + DAY_US


# -- the demo's words and its checked inputs ---------------------------------------------------


def test_waves_and_misbehaving_pools_in_rows() -> None:
    waves = [
        {"wave_id": "w1", "hall": "hall-a", "instances_lost": 12},
        {"wave_id": "w2", "hall": "hall-b", "instances_lost": 40},
    ]
    assert waves_title(waves) == "2 hall-wide waves (12-40 instances lost each)"
    assert wave_rows(waves) == [("w1", "hall-a", "12"), ("w2", "hall-b", "40")]
    pool = {
        "pool_id": "c7.8.hall-a.reclaimable",
        "expected_per_instance_h": 0.00712,
        "observed_per_instance_h": 0.2102,
        "reclaims": 6,
        "instance_h": 1234.4,
    }
    rows = misbehaving_pool_rows({"misbehaving_pools": [pool]})
    assert rows == [("c7.8.hall-a.reclaimable", "0.0071", "0.2102", "6", "1,234")]


def test_the_projections_say_their_savings_and_why_commands() -> None:
    report = {
        "savings_micros": {
            "counterfactual": 2_000_000_000,
            "cost": 500_000_000,
            "net_saving": 1_500_000_000,
        },
        "why_examples": ["spotcap why i-1"],
    }
    assert projection_lines(report, " --home h") == [
        "net saving €1,500.00: 75.0% of a €2,000.00 counterfactual,",
        "  after €500.00 of costs; per workload:",
        "  spotcap --home h report savings",
        "ask why something happened:",
        "  spotcap --home h why i-1",
    ]
    nothing = {"savings_micros": dict.fromkeys(("counterfactual", "cost", "net_saving"), 0)}
    assert projection_lines({**nothing, "why_examples": []}, "") == [
        "net saving €0.00: 0.0% of a €0.00 counterfactual,",
        "  after €0.00 of costs; per workload:",
        "  spotcap report savings",
    ]
    # A person reads them at 80 columns, even with a large history's amounts.
    large = dict.fromkeys(("counterfactual", "cost", "net_saving"), -987_654_321_000_000)
    lines = projection_lines({"savings_micros": large, "why_examples": []}, "")
    assert max(len(line) for line in lines) <= 80


def test_the_demos_inputs_are_checked_before_it_runs(tmp_path: Path) -> None:
    config = SimConfig(seed=1, days=0.1)
    assert checked_config(config, None, tmp_path / "new") == config
    broken = tmp_path / "pools.yaml"
    broken.write_text("format: spotcap.pools/v1\nregion: x\npools: [{hall: hall-a}]\n")
    with pytest.raises(DemoRefusedError, match="pool #1") as refused:
        checked_config(config, broken, None)
    assert refused.value.hint == "fix the catalogue file named above"
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "a.yaml").write_text("x: 1\n")
    with pytest.raises(DemoRefusedError, match="already holds contract files"):
        checked_config(config, None, tmp_path / "used")


def test_the_contract_files_sentence_names_the_catalogue_to_check_them_with() -> None:
    said = contract_files_sentence(3, Path("out"), None, seed=2)
    assert said.startswith("wrote 3 contract files under out; check them with `spotcap contracts")
    assert said.endswith(" (examples/region/demo-region.yaml is the demo region of seed 1)")
    assert "--pools mine.yaml --unsigned`" in contract_files_sentence(
        3, Path("out"), Path("mine.yaml"), seed=2
    )


def test_the_demos_processes_collect_at_fewer_thresholds_and_restore_them() -> None:
    before = gc.get_threshold()
    assert before != THRESHOLDS
    with fewer_collections():
        assert gc.get_threshold() == THRESHOLDS
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a run that fails")
    assert gc.get_threshold() == before
