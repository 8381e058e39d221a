"""Replaying the same inputs gives byte-identical decisions, stamped from their causes.

The inputs are a simulated region's events (the shapes `sim` really emits: a
misbehaving pool, a hall-wide wave, claims, notices, losses); the second pass reads them back
through the codec as a replay from the log would.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

from schemas.codec import Codec
from schemas.events import Envelope, InstanceLost, NoticeReceived, PoolExcluded
from sim import ReclaimSettings, SimConfig, simulate
from streams.deciders import DeciderSettings
from tests.decider_driver import Driver

CODEC = Codec()
CONFIG = SimConfig(
    days=0.25, seed=3, reclaims=ReclaimSettings(waves_per_day=6.0, misbehaving_factor=30.0)
)


@cache
def inputs() -> tuple[Envelope, ...]:
    # The region's facts, without the baseline orchestrator's own decisions (its
    # placement_decided and replacement_requested are not the deciders' to actuate).
    return tuple(e for e in simulate(CONFIG) if e.payload.TOPIC != "decisions")


@cache
def first_run() -> tuple[Envelope, ...]:
    return tuple(Driver().feed_all(inputs()))


def test_a_replay_of_the_same_events_gives_byte_identical_decisions() -> None:
    replayed = [CODEC.decode(CODEC.encode(e)) for e in inputs()]
    second = Driver().feed_all(replayed)
    first = first_run()
    assert len(first) == len(second) > 0
    assert [CODEC.encode(d) for d in first] == [CODEC.encode(d) for d in second]


def test_the_run_exercises_every_decider() -> None:
    kinds = Counter(d.event_type for d in first_run())
    for kind in ("pool_excluded", "pool_ranked", "placement_decided", "replacement_requested"):
        assert kinds[kind], f"no {kind} in {dict(kinds)}"
    assert any(d.correlation_id for d in first_run() if d.event_type == "replacement_requested")


def test_every_decision_names_its_cause_and_carries_its_correlation() -> None:
    known = {e.event_id: e for e in inputs()}
    decisions = first_run()
    ids = [d.event_id for d in decisions]
    assert len(set(ids)) == len(ids)
    assert not set(ids) & set(known)
    for d in decisions:
        known[d.event_id] = d
    for d in decisions:
        assert d.causation_id in known, d
        assert d.recorded_at == d.occurred_at
        assert d.producer.startswith("deciders/")
        cause = known[d.causation_id]
        assert d.correlation_id == cause.correlation_id
        assert d.occurred_at >= cause.occurred_at


def test_every_exclusion_rests_on_reclamations_of_its_pool_within_the_window() -> None:
    by_id = {e.event_id: e for e in inputs()}
    window_us = DeciderSettings().exclusion.burst_window_s * 1_000_000
    exclusions = [d for d in first_run() if isinstance(d.payload, PoolExcluded)]
    assert exclusions
    for d in exclusions:
        p = d.payload
        assert isinstance(p, PoolExcluded)
        evidence = [by_id[i] for i in p.evidence_event_ids]
        assert len(evidence) == p.reclaimed_instances >= 3
        for e in evidence:
            assert isinstance(e.payload, NoticeReceived | InstanceLost)
            assert e.payload.pool_id == p.pool_id
            assert p.window_start_at < e.occurred_at <= p.window_end_at == d.occurred_at
        assert d.occurred_at - max(e.occurred_at for e in evidence) == 0
        if p.reason == "burst":
            assert d.occurred_at - min(e.occurred_at for e in evidence) <= window_us
