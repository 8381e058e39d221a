"""Counts over the fleet state for the metrics endpoint: what an SRE graphs over time.

Each count is one cheap query over an indexed column or a small table; the metrics endpoint
reads them at scrape time, so Prometheus sees the stores' own figures (no counter kept in a
process that a restart would lose).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    result: str  # one of DRILL_RESULTS
    count: int


@dataclass(frozen=True, slots=True)
class FleetCounts:
    decisions_by_type: dict[str, int]  # every decision type, 0 when none was applied
    exclusions_active: int
    instances_by_state: dict[str, int]  # every state
    fallback_decisions_by_kind: dict[str, int]  # every kind (authority)
    fallback_spend_eur_micros_by_kind: dict[str, int]
    drains: list[Drains]
    drill_runs: list[DrillRuns]  # the daily drill's results by pool and result (ADR-33)
    breakers_open: dict[str, bool] = field(default_factory=dict)  # by breaker name
    exclusion_delays_s: list[float] = field(default_factory=list)
    fallback_days: list[FallbackDay] = field(default_factory=list)
    overruns_by_workload: dict[str, int] = field(default_factory=dict)  # every contracted one


@dataclass(frozen=True, slots=True)
class FallbackDay:
    """A workload's fallback spend on the newest day with a fallback decision, and its cap."""

    workload_id: str
    spend_eur_micros: int
    cap_eur_micros: int


# A drill's result as the alert rules read it (`spotcap_drill_runs_total{pool, result}`):
# refused (`drill_refused`), else from its `drill_finished`: passed; notice_missing when fewer
# nodes were noticed than reclaimed (the provider's notice path); replacement_late when every
# noticed node's drain was verified but a replacement came late; drain_late otherwise.
DRILL_RESULTS: tuple[str, ...] = (
    "passed", "refused", "notice_missing", "drain_late", "replacement_late",
)  # fmt: skip
_DRILL_RESULT_SQL = (
    "CASE WHEN event_type = 'drill_refused' THEN 'refused'"
    " WHEN (payload->>'passed')::boolean THEN 'passed'"
    " WHEN (payload->>'noticed_count')::int < (payload->>'reclaimed_count')::int"
    "  THEN 'notice_missing'"
    " WHEN (payload->>'drain_verified_count')::int >= (payload->>'noticed_count')::int"
    "  THEN 'replacement_late' ELSE 'drain_late' END"
)


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
    return FleetCounts(
        decisions, int(active), states, fallback_n, fallback_eur, drains,
        drill_runs(conn), breakers_open(conn), exclusion_delays_s(conn),
        fallback_days(conn), overruns_by_workload(conn),
    )  # fmt: skip


def overruns_by_workload(conn: Connection) -> dict[str, int]:
    """Drains that overran their contract's budget, for every workload with a contract (0 when
    none did: the series exists before the first overrun, so an alert sees it increase)."""
    return {
        str(w): int(n)
        for w, n in conn.execute(
            "SELECT w.workload_id, count(i.instance_id) FROM (SELECT DISTINCT workload_id"
            " FROM contracts) w LEFT JOIN instances i ON i.workload_id = w.workload_id"
            " AND i.drained_event_id IS NOT NULL AND i.drain_overrun GROUP BY 1"
        )
    }


def breakers_open(conn: Connection) -> dict[str, bool]:
    """Each breaker the actuator ever tripped: open unless its newest trip or reset is a reset."""
    return {
        str(name): kind == "breaker_tripped"
        for name, kind in conn.execute(
            "SELECT DISTINCT ON (payload->>'breaker') payload->>'breaker', event_type"
            " FROM journal WHERE event_type IN ('breaker_tripped', 'breaker_reset')"
            " ORDER BY payload->>'breaker', occurred_at DESC, recorded_at DESC"
        )
    }


def exclusion_delays_s(conn: Connection) -> list[float]:
    """For each exclusion, the seconds from its newest evidence event being recorded to the
    exclusion being recorded: how long the exclusion watcher took to act on what it saw (the
    promise: 60 s, ADR-07)."""
    return [
        max(0.0, float(delay))
        for (delay,) in conn.execute(
            "SELECT extract(epoch FROM x.recorded_at - max(e.recorded_at))"
            " FROM exclusions ex JOIN journal x ON x.event_id = ex.event_id"
            " JOIN journal e ON e.event_id = ANY(ex.evidence_event_ids)"
            " GROUP BY ex.event_id, x.recorded_at"
        )
    ]


def fallback_days(conn: Connection) -> list[FallbackDay]:
    """Each workload's spend so far on the newest UTC day with a fallback decision (its latest
    decision carries the day's running total) and the cap that decision ran under (ADR-23)."""
    return [
        FallbackDay(str(w), int(spend), int(cap))
        for w, spend, cap in conn.execute(
            "SELECT DISTINCT ON (workload_id) workload_id, spend_eur_micros, cap_eur_micros"
            " FROM fallbacks WHERE (occurred_at AT TIME ZONE 'UTC')::date = ("
            "  SELECT max((occurred_at AT TIME ZONE 'UTC')::date) FROM fallbacks)"
            " ORDER BY workload_id, occurred_at DESC, event_id DESC"
        )
    ]


def drill_runs(conn: Connection) -> list[DrillRuns]:
    """Drill runs by pool and result: every result of every reclaimable pool (and of any pool
    ever drilled), 0 until it happens, so the series exist before a pool's first drill and a
    rule sees its first failure as an increase."""
    runs = {
        (str(pool), str(result)): int(n)
        for pool, result, n in conn.execute(
            f"SELECT key, {_DRILL_RESULT_SQL}, count(*) FROM events"
            " WHERE event_type IN ('drill_finished', 'drill_refused') GROUP BY 1, 2"
        )
    }
    catalogue = conn.execute("SELECT pool_id FROM pools WHERE purchase_model = 'reclaimable'")
    pools = sorted({str(pool) for (pool,) in catalogue} | {pool for pool, _ in runs})
    return [DrillRuns(p, r, runs.get((p, r), 0)) for p in pools for r in DRILL_RESULTS]
