"""The simulator's loop forgets what was settled (`sim.loop.FORGET_AFTER_US`) and runs exactly
as a loop that remembers everything: its memory stays flat in the run's length (issue 26)."""

from __future__ import annotations

from typing import Any

from schemas.codec import Codec
from schemas.events import Envelope
from sim import RegionSim, SimConfig
from sim.clock import HOUR_US
from sim.loop import DecidersOrchestrator, owned_by
from sim.report import DecisionSummary

CONFIG = SimConfig(seed=1, days=0.5, region="bench")
_RUNS: dict[int | None, tuple[list[Envelope], dict[str, Any]]] = {}


def _run(forget_after_us: int | None) -> tuple[list[Envelope], dict[str, Any]]:
    """The events of the loop's run and its book at the end (each run once per session)."""
    if forget_after_us not in _RUNS:
        orchestrator_id = CONFIG.orchestrator.orchestrator_id
        driver = DecidersOrchestrator(
            orchestrator_id, owned_by(orchestrator_id), forget_after_us=forget_after_us
        )
        sim = RegionSim(CONFIG, orchestrator=driver)
        events = [e for batch in sim.run(HOUR_US) for e in batch]
        _RUNS[forget_after_us] = events, driver.book.snapshot()
    return _RUNS[forget_after_us]


def test_the_loop_forgets_what_was_settled_and_writes_the_same_events() -> None:
    codec = Codec()
    forgetting, kept = [codec.encode(e) for e in _run(HOUR_US)[0]], _run(HOUR_US)[1]
    remembering, everything = [codec.encode(e) for e in _run(None)[0]], _run(None)[1]
    assert forgetting == remembering  # the same events, byte for byte, in the same order
    assert len(remembering) > 20_000
    # An hour's worth held instead of the run's: each kind of entry well under half.
    for key in ("causes", "gone", "finished"):
        assert len(everything[key]) > 500, key
        assert len(kept[key]) < len(everything[key]) / 2, key
    assert len(kept["claims"]) < len(everything["claims"])


def test_the_decisions_summary_forgets_old_evidence_and_reports_the_same() -> None:
    """The demo's decisions summary keeps notices and losses for its horizon (beyond the
    exclusion windows, 6 h at most here), not the run: it reports what one keeping them all
    reports, holding fewer."""
    events = _run(HOUR_US)[0]
    everything = DecisionSummary(evidence_horizon_us=10 * 24 * HOUR_US)
    recent = DecisionSummary(evidence_horizon_us=7 * HOUR_US)
    for e in events:
        everything.observe(e)
        recent.observe(e)
    report = recent.report()
    assert report == everything.report()
    assert report["replacements"]["requested"] > 0 and report["exclusions"]
    assert len(recent._evidence_at) < len(everything._evidence_at) * 0.8
    assert recent._notices <= set(recent._evidence_at)
