"""The daily drill's results as the metric the alert rules read: `spotcap_drill_runs_total{pool,
result}`, counted from the fleet state's journal (a real PostgreSQL) at scrape time."""

from __future__ import annotations

from console.metrics import _fleet_metrics
from projections.postgres.connection import Connection
from projections.postgres.writer import FleetWriter
from projections.read.counts import DrillRuns, fleet_counts
from schemas.events import DrillFinished, DrillRefused
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
    ]
    writer = FleetWriter(fleet)
    writer.write(positioned(events), {})
    writer.write(positioned(events), {})  # delivered again: counted once
    counts = fleet_counts(fleet)
    assert counts.drill_runs == [
        DrillRuns("pool-a", "failed", 1),
        DrillRuns("pool-a", "passed", 1),
        DrillRuns("pool-a", "refused", 2),
        DrillRuns("pool-b", "passed", 1),
    ]
    [family] = [m for m in _fleet_metrics(counts) if m.name == "spotcap_drill_runs"]
    assert family.type == "counter"
    samples = {(s.name, s.labels["pool"], s.labels["result"]): s.value for s in family.samples}
    assert samples == {
        ("spotcap_drill_runs_total", "pool-a", "failed"): 1.0,
        ("spotcap_drill_runs_total", "pool-a", "passed"): 1.0,
        ("spotcap_drill_runs_total", "pool-a", "refused"): 2.0,
        ("spotcap_drill_runs_total", "pool-b", "passed"): 1.0,
    }
