"""Counts over the fleet state for the metrics endpoint: what an SRE graphs over time.

Each count is one cheap query over an indexed column or a small table; the metrics endpoint
reads them at scrape time, so Prometheus sees the stores' own figures (no counter kept in a
process that a restart would lose).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from projections.postgres.connection import Connection
from projections.postgres.lifecycle import STATES
from schemas.events import EVENT_CLASSES, FallbackKind

DECISION_TYPES: tuple[str, ...] = tuple(
    sorted(t for t, cls in EVENT_CLASSES.items() if cls.TOPIC == "decisions")
)
FALLBACK_KINDS: tuple[str, ...] = get_args(FallbackKind)


@dataclass(frozen=True, slots=True)
class Drains:
    path: str
    verified: bool
    overrun: bool
    count: int


@dataclass(frozen=True, slots=True)
class DrillRuns:
    pool: str
    result: str  # passed | failed | refused
    count: int


@dataclass(frozen=True, slots=True)
class FleetCounts:
    decisions_by_type: dict[str, int]  # every decision type, 0 when none was applied
    exclusions_active: int
    instances_by_state: dict[str, int]  # every state
    fallback_decisions_by_kind: dict[str, int]  # every kind (authority)
    fallback_spend_eur_micros_by_kind: dict[str, int]
    drains: list[Drains]
    drill_runs: list[DrillRuns]  # the daily drill's results by pool (ADR-33)


def fleet_counts(conn: Connection) -> FleetCounts:
    decisions = dict.fromkeys(DECISION_TYPES, 0)
    for event_type, n in conn.execute(
        "SELECT event_type, count(*) FROM events WHERE event_type = ANY(%s) GROUP BY event_type",
        (list(DECISION_TYPES),),
    ):
        decisions[str(event_type)] = int(n)
    (active,) = conn.execute("SELECT count(*) FROM exclusions_active").fetchone() or (0,)
    states = dict.fromkeys(STATES, 0)
    for state, n in conn.execute("SELECT state, count(*) FROM instances GROUP BY state"):
        states[str(state)] = int(n)
    fallback_n = dict.fromkeys(FALLBACK_KINDS, 0)
    fallback_eur = dict.fromkeys(FALLBACK_KINDS, 0)
    for kind, n, spend in conn.execute(
        "SELECT kind, sum(decisions)::bigint, sum(spend_eur_micros)::bigint"
        " FROM fallback_spend_by_authority GROUP BY kind"
    ):
        fallback_n[str(kind)] = int(n)
        fallback_eur[str(kind)] = int(spend)
    drains = [
        Drains(str(path), bool(verified), bool(overrun), int(n))
        for path, verified, overrun, n in conn.execute(
            "SELECT drain_path, coalesce(drain_verified, false), coalesce(drain_overrun, false),"
            " count(*) FROM instances WHERE drained_event_id IS NOT NULL"
            " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        )
    ]
    drill_runs = [
        DrillRuns(str(pool), str(result), int(n))
        for pool, result, n in conn.execute(
            "SELECT key, CASE WHEN event_type = 'drill_refused' THEN 'refused'"
            " WHEN (payload->>'passed')::boolean THEN 'passed' ELSE 'failed' END, count(*)"
            " FROM events WHERE event_type IN ('drill_finished', 'drill_refused')"
            " GROUP BY 1, 2 ORDER BY 1, 2"
        )
    ]
    return FleetCounts(decisions, int(active), states, fallback_n, fallback_eur, drains, drill_runs)
