"""The daily drill (ADR-33): reclaim a share of a pool through the provider's own reclaim path,
on a schedule, and measure what the real notice path did with it.

Owns: running a drill (`run_drill`: finish what is due, ask the gate, reclaim), measuring it
(`measure`, pure), the schedule file (`load_plan`, `due`) and the report rows (`drill_report`).
The gate itself ("may a drill run now") is a pure decider in `streams.deciders.drill`. May
import: schemas, streams (the gate), provider. Called by `spotcap drill` and the tests.
"""

from provider.drill.log import drill_in_log, region_events, write_events
from provider.drill.measure import measure
from provider.drill.plan import DrillPlanError, PlanEntry, due, load_plan
from provider.drill.report import (
    COLUMNS,
    RIGHT,
    DrillRow,
    as_json,
    cells,
    describe,
    drill_report,
    notes,
)
from provider.drill.run import DrillOutcome, DrillRequest, finish_due, run_drill, run_plan

__all__ = [
    "COLUMNS",
    "RIGHT",
    "DrillOutcome",
    "DrillPlanError",
    "DrillRequest",
    "DrillRow",
    "PlanEntry",
    "as_json",
    "cells",
    "describe",
    "drill_in_log",
    "drill_report",
    "due",
    "finish_due",
    "load_plan",
    "measure",
    "notes",
    "region_events",
    "run_drill",
    "run_plan",
    "write_events",
]
