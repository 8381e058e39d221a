"""The daily drill's results as the metric the alert rules read: `spotcap_drill_runs_total{pool,
result}`, counted from the fleet state's journal (a real PostgreSQL) at scrape time."""

from __future__ import annotations

from console.metrics import _fleet_metrics
from projections.postgres.connection import Connection
from projections.postgres.writer import FleetWriter
from projections.read.counts import DRILL_RESULTS, DrillRuns, fleet_counts
from schemas.events import DrillFinished, DrillRefused, PoolRegistered
from tests.projection_support import event, positioned


def finished(drill_id: str, pool: str, passed: bool) -> DrillFinished:
    failures = () if passed else ("i-1: no replacement launched before its deadline",)
    return DrillFinished(drill_id, pool, 2, 2, 2, 2, 1000, 1000, 2, 2 if passed else 1, 0.0, 0,
                         passed, failures)  # fmt: skip


def test_drill_runs_are_counted_by_pool_and_result(fleet: Connection) -> None:
    events = [
        event(finished("d1", "pool-a", True), 0, name="d1"),
        event(finished("d2", "pool-a", False), 10, name="d2"),
        event(finished("d3", "pool-b", True), 20, name="d3"),
        event(DrillRefused("d4", "pool-a", 0.05, "breaker", "open", ()), 30, name="d4"),
        event(DrillRefused("d5", "pool-a", 0.05, "wave", "a wave", ()), 40, name="d5"),
        # a reclaimable pool never drilled: its series are there at 0 before its first drill
        event(PoolRegistered("pool-c", "c7", 4, "hall-a", "c7", "reclaimable", "hall-a:c7", 512,
                             {}), 45, name="pc"),
        event(PoolRegistered("pool-g", "c7", 4, "hall-a", "c7", "guaranteed", "hall-a:c7", 512,
                             {}), 46, name="pg"),
        # a node reclaimed and never noticed; a noticed node whose drain was never verified
        event(DrillFinished("d6", "pool-b", 2, 1, 1, 1, 900, 900, 2, 2, 0.0, 0, False, ("i",)), 50,
              name="d6"),
        event(DrillFinished("d7", "pool-b", 2, 2, 2, 1, 900, 900, 2, 2, 0.0, 0, False, ("i",)), 60,
              name="d7"),
    ]  # fmt: skip
    writer = FleetWriter(fleet)
    writer.write(positioned(events), {})
    writer.write(positioned(events), {})  # delivered again: counted once
    counts = fleet_counts(fleet)
    expected = {("pool-a", "passed"): 1, ("pool-a", "refused"): 2,
                ("pool-a", "replacement_late"): 1, ("pool-b", "passed"): 1,
                ("pool-b", "notice_missing"): 1, ("pool-b", "drain_late"): 1}  # fmt: skip
    # every result of every pool drilled, 0 until it happens (a rule sees the first increase)
    assert counts.drill_runs == [
        DrillRuns(pool, result, expected.get((pool, result), 0))
        for pool in ("pool-a", "pool-b", "pool-c")
        for result in DRILL_RESULTS
    ]
    [family] = [m for m in _fleet_metrics(counts) if m.name == "spotcap_drill_runs"]
    assert family.type == "counter"
    samples = {(s.name, s.labels["pool"], s.labels["result"]): s.value for s in family.samples}
    assert {k: v for k, v in samples.items() if v} == {
        ("spotcap_drill_runs_total", pool, result): float(n)
        for (pool, result), n in expected.items()
    }
    assert len(samples) == 3 * len(DRILL_RESULTS)
