"""The JSON API, under /api/v1: the queries of `spotcap query`, `why` and the savings report,
through the same read functions (`projections.read`) and the same JSON rendering."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, get_args

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.routing import APIRoute
from pydantic import BeforeValidator, WithJsonSchema

from console.access import ReadAccess, StoreUnavailableError
from console.errors import BadParameterError
from console.models import (
    DailySavingsReport,
    Exclusion,
    Fallback,
    Health,
    Instance,
    InstanceState,
    Lag,
    Pool,
    Ranking,
    SavingsReport,
    SpreadRow,
    Wave,
    WhyAnswer,
    Workload,
)
from console.openapi import errors
from console.roles import hidden, reads_every_workload, viewer_of
from console.signin import EVERYONE, Viewer
from projections.ledger.writer import LEDGER_PROJECTION
from projections.postgres.writer import FLEET_PROJECTION
from projections.read import fleet as fq
from projections.read import savings as sv
from projections.read.lag import Positions, fleet_positions, lag_rows, ledger_positions
from projections.read.ownership import owned_by, subject_owned_by
from projections.read.rows import json_row
from projections.read.savings import DailySavings, savings, savings_by_day
from projections.read.spread import Caps, fallbacks, spread
from projections.read.times import DAY_FORM, MOMENT_FORMS, check_span, parse_day, parse_moment
from projections.read.wave import last_wave
from projections.read.why import NotFoundError, nothing_called, why, why_workload
from streams.deciders.settings import PlacementSettings

MAX_LIMIT = 10_000
# Ids are free text in the stores, but never control characters (PostgreSQL text cannot even
# hold NUL); a bounded length keeps a request line sane.
ID_PATTERN = r"^[^\u0000-\u001f\u007f]+$"

HINTS = {
    "pool": "give a pool id, 1 to 200 printable characters (see /api/v1/pools)",
    "workload": "give a workload id, 1 to 200 printable characters (see /api/v1/workloads)",
    "id": "give an event id, an instance id or a workload id, 1 to 200 printable characters",
    "state": "give one of " + ", ".join(get_args(InstanceState)),
    "since": f"write it as {MOMENT_FORMS}",
    "from": f"write the day as {DAY_FORM}",
    "to": f"write the day as {DAY_FORM}",
    "limit": f"give a whole number from 1 to {MAX_LIMIT:,}",
    "excluded": "write true or false",
    "active": "write true or false",
    "rule": "give the name of a rule shipped in replay/rules/, such as flat-guaranteed-rate",
    "month": "write the month as YYYY-MM, such as 2026-11",
}


# The two dependencies are coroutines: they do no I/O, and a plain function would cost a hop
# through the thread pool each.
async def _access(request: Request) -> ReadAccess:
    access: ReadAccess = request.app.state.access
    return access


async def _known_parameters(request: Request) -> None:
    """Refuse a query parameter the endpoint does not take (a typo would otherwise widen the
    query silently). What it takes is what its OpenAPI description says."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    operations = request.app.openapi()["paths"].get(route.path_format, {})
    operation = operations.get(request.method.lower(), {})
    known = [p["name"] for p in operation.get("parameters", ()) if p["in"] == "query"]
    for name in request.query_params:
        if name not in known:
            takes = f"it takes {', '.join(known)}" if known else "it takes none"
            raise BadParameterError(
                f"{route.path_format} takes no query parameter {name[:40]!r}: {takes}"
            )


async def _viewer(request: Request) -> Viewer:
    return viewer_of(request)


KnownParameters = Depends(_known_parameters)
Access = Annotated[ReadAccess, Depends(_access)]
Seen = Annotated[Viewer, Depends(_viewer)]  # who asks (console.roles let them through)
Id = Annotated[str, Path(min_length=1, max_length=200, pattern=ID_PATTERN,
                         description="An event id, an instance id or a workload id.")]  # fmt: skip
PoolId = Annotated[str | None, Query(min_length=1, max_length=200, pattern=ID_PATTERN,
                                     description="Only this pool.")]  # fmt: skip
WorkloadId = Annotated[str | None, Query(min_length=1, max_length=200, pattern=ID_PATTERN,
                                         description="Only this workload.")]  # fmt: skip


def _moment(value: object) -> object:
    return parse_moment(value) if isinstance(value, str) else value


def _day(value: object) -> object:
    return parse_day(value) if isinstance(value, str) else value


# Parsed by the same functions as the CLI's options (pydantic alone would also take numbers as
# seconds since the epoch, which the description does not promise).
Moment = Annotated[datetime, BeforeValidator(_moment), WithJsonSchema(
    {"type": "string", "anyOf": [{"format": "date"}, {"format": "date-time"}]})]  # fmt: skip
Day = Annotated[date, BeforeValidator(_day), WithJsonSchema({"type": "string", "format": "date"})]
Since = Annotated[Moment | None, Query(
    description=f"Only rows at or after this time: {MOMENT_FORMS}.")]  # fmt: skip
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many rows.")]
Excluded = Annotated[bool | None, Query(description="Only excluded (true) or admitted (false).")]
Active = Annotated[bool, Query(description="Only exclusions in force.")]
State = Annotated[InstanceState | None, Query(description="Only instances in this state.")]
FirstDay = Annotated[Day | None, Query(alias="from", description="First UTC day (inclusive).")]
LastDay = Annotated[Day | None, Query(alias="to", description="Last UTC day (inclusive).")]

router = APIRouter(prefix="/api/v1", dependencies=[KnownParameters])


@router.get("/pools", response_model=list[Pool], responses=errors(400, 503),
            summary="Pools by rank", description="Pools by rank (unranked last): rate, forward "
            "capacity, exclusion. As `spotcap query pools --json`.")  # fmt: skip
def get_pools(
    access: Access,
    pool: PoolId = None,
    excluded: Excluded = None,
    limit: Limit = fq.DEFAULT_LIMIT,
) -> list[dict[str, Any]]:
    with access.fleet() as conn:
        return [json_row(r) for r in fq.pools(conn, pool=pool, excluded=excluded, limit=limit)]


@router.get("/rankings", response_model=list[Ranking], responses=errors(400, 503),
            summary="Rankings", description="The latest ranking of the region's pools, or with "
            "`pool` or `since` the rankings matching them, newest first, with how many inputs "
            "each rank rests on. As `spotcap query rankings --json`.")  # fmt: skip
def get_rankings(
    access: Access, pool: PoolId = None, since: Since = None, limit: Limit = fq.DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    with access.fleet() as conn:
        rows = fq.rankings(conn, pool=pool, since=since, limit=limit)
        return [json_row(r) for r in rows]


@router.get("/exclusions", response_model=list[Exclusion], responses=errors(400, 503),
            summary="Exclusions", description="Exclusions with their evidence (event ids) and "
            "readmission, newest first. As `spotcap query exclusions --json`.")  # fmt: skip
def get_exclusions(
    access: Access,
    pool: PoolId = None,
    active: Active = False,
    since: Since = None,
    limit: Limit = fq.DEFAULT_LIMIT,
) -> list[dict[str, Any]]:
    with access.fleet() as conn:
        rows = fq.exclusions(conn, pool=pool, active=active, since=since, limit=limit)
        return [json_row(r) for r in rows]


@router.get("/instances", response_model=list[Instance], responses=errors(400, 503),
            summary="Instances", description="Instances, most recently touched first. As "
            "`spotcap query instances --json`.")  # fmt: skip
def get_instances(
    access: Access,
    viewer: Seen,
    *,
    workload: WorkloadId = None,
    pool: PoolId = None,
    state: State = None,
    since: Since = None,
    limit: Limit = fq.DEFAULT_LIMIT,
) -> list[dict[str, Any]]:
    if hidden(access, viewer, workload, every=viewer.fleet_wide):
        return []
    with access.fleet() as conn:
        rows = fq.instances(
            conn, workload=workload, pool=pool, state=state, since=since, limit=limit
        )
        return [json_row(r) for r in rows]


@router.get("/workloads", response_model=list[Workload], responses=errors(400, 503),
            summary="Workloads", description="Workloads: their contract and the capacity live "
            "for them now. As `spotcap query workloads --json`.")  # fmt: skip
def get_workloads(
    access: Access, viewer: Seen, workload: WorkloadId = None, limit: Limit = fq.DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    with access.fleet() as conn:
        if viewer.fleet_wide:
            return [json_row(r) for r in fq.workloads(conn, workload=workload, limit=limit)]
        rows = fq.workloads(conn, workload=workload, limit=MAX_LIMIT)
        return [json_row(r) for r in rows if r["owner"] in viewer.teams][:limit]


PLACEMENT = PlacementSettings()
CAPS = Caps(PLACEMENT.pool_cap_share, PLACEMENT.group_cap_share)


def read_spread(
    access: ReadAccess, workload: str, viewer: Viewer = EVERYONE
) -> list[dict[str, Any]]:
    """The workload's spread; NotFoundError when there is no such workload (or none the
    viewer may see)."""
    with access.fleet() as conn:
        if not fq.workloads(conn, workload=workload, limit=1) or not (
            viewer.fleet_wide or owned_by(conn, workload, viewer.teams)
        ):
            raise NotFoundError(
                f"no workload {workload[:80]!r} in the fleet state: the workloads are listed "
                "at /api/v1/workloads"
            )
        return spread(conn, workload, CAPS)


@router.get("/workloads/{id}/spread", response_model=list[SpreadRow],
            responses=errors(400, 404, 503), summary="A workload's spread",
            description="How the workload's live capacity spreads over pools, halls and "
            "correlation groups, each share against the planner's cap (ADR-08).")  # fmt: skip
def get_spread(access: Access, viewer: Seen, id: Id) -> list[dict[str, Any]]:
    return read_spread(access, id, viewer)


@router.get("/fallbacks", response_model=list[Fallback], responses=errors(400, 503),
            summary="Fallback decisions", description="Fallback decisions by authority "
            "(restoring the floor, within the spend cap, escalated to the approver), newest "
            "first.")  # fmt: skip
def get_fallbacks(
    access: Access, viewer: Seen, workload: WorkloadId = None, limit: Limit = fq.DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    if hidden(access, viewer, workload, every=viewer.fleet_wide):
        return []
    with access.fleet() as conn:
        return [json_row(r) for r in fallbacks(conn, workload=workload, limit=limit)]


def read_wave(access: ReadAccess) -> dict[str, Any]:
    with access.fleet() as conn:
        wave = last_wave(conn)
    if wave is None:
        raise NotFoundError(
            "no hall-wide wave in this history: a wave is what the provider reclaims under one "
            "correlation id"
        )
    return wave.as_json()


@router.get("/waves/last", response_model=Wave, responses=errors(400, 404, 503),
            summary="The last hall-wide wave", description="The last wave the provider tagged "
            "with a correlation id: its advisories, notices, drains, losses and replacements "
            "over event time.")  # fmt: skip
def get_last_wave(access: Access) -> dict[str, Any]:
    return read_wave(access)


def read_lag(access: ReadAccess) -> list[dict[str, Any]]:
    """The lag rows; the ledger's positions are null (unknown) while the ledger is held."""
    with access.fleet() as conn:
        positions: dict[str, Positions | None] = {FLEET_PROJECTION: fleet_positions(conn)}
    try:
        with access.ledger() as store:
            positions[LEDGER_PROJECTION] = ledger_positions(store)
    except StoreUnavailableError:
        positions[LEDGER_PROJECTION] = None
    return lag_rows(access.region, access.end_offsets, positions)


@router.get("/lag", response_model=list[Lag], responses=errors(400, 503),
            summary="Projection lag", description="How far each projection is behind the log, "
            "per partition. As `spotcap query lag --json`.")  # fmt: skip
def get_lag(access: Access) -> list[dict[str, Any]]:
    return read_lag(access)


@router.get("/why/{id}", response_model=WhyAnswer, responses=errors(400, 404, 503),
            summary="Why", description="The chain of causes behind an event, an instance or a "
            "workload (tried in that order), oldest first, each step a sentence with its time "
            "and event id. As `spotcap why ID --json`.")  # fmt: skip
def get_why(access: Access, viewer: Seen, id: Id) -> dict[str, Any]:
    with access.fleet() as conn:
        if not viewer.fleet_wide and not subject_owned_by(conn, id, viewer.teams):
            raise nothing_called(id)  # another team's, answered as nothing at all
        answer = why(conn, id)
        if answer.kind != "workload":
            # Only a workload's chain reads the ledger (its surplus): opening the embedded one
            # costs a chdb session, 100-200 ms, which an event's or an instance's need not pay.
            return answer.as_json()
        with access.ledger() as ledger:
            return why_workload(conn, id, ledger=ledger).as_json()


@router.get("/reports/savings", response_model=SavingsReport, responses=errors(400, 503),
            summary="Savings report", description="Per workload, every cost line and the net "
            "saving over UTC days, with totals; money in euros as decimal strings. As `spotcap "
            "report savings --json`.")  # fmt: skip
def get_savings(
    access: Access,
    viewer: Seen,
    first: FirstDay = None,
    last: LastDay = None,
    workload: WorkloadId = None,
) -> dict[str, Any]:
    try:
        check_span(first, last)
    except ValueError as error:
        raise BadParameterError(str(error)) from error
    if hidden(access, viewer, workload, every=reads_every_workload(viewer)):
        return sv.SavingsReport(first, last, []).as_json()
    with access.ledger() as store:
        return savings(store, first_day=first, last_day=last, workload=workload).as_json()


@router.get("/reports/savings/daily", response_model=DailySavingsReport,
            responses=errors(400, 503), summary="Savings per day", description="Every cost "
            "line and the net saving per UTC day, for one workload or the whole region; money "
            "in euros as decimal strings.")  # fmt: skip
def get_daily_savings(
    access: Access,
    viewer: Seen,
    first: FirstDay = None,
    last: LastDay = None,
    workload: WorkloadId = None,
) -> dict[str, Any]:
    try:
        check_span(first, last)
    except ValueError as error:
        raise BadParameterError(str(error)) from error
    if hidden(access, viewer, workload, every=reads_every_workload(viewer)):
        return DailySavings(workload, {}).as_json()
    with access.ledger() as store:
        report = savings_by_day(store, first_day=first, last_day=last, workload=workload)
        return report.as_json()


@router.get("/health", response_model=Health, responses=errors(400),
            summary="Health", description="Whether the server can reach each store it reads "
            "(200 even when one is down: the server itself is up).")  # fmt: skip
def get_health(access: Access) -> dict[str, Any]:
    stores: dict[str, dict[str, Any]] = {}
    try:
        with access.fleet() as conn:
            conn.execute("SELECT 1")
        stores["fleet"] = {"up": True, "detail": None}
    except StoreUnavailableError as error:
        stores["fleet"] = {"up": False, "detail": str(error)}
    try:
        with access.ledger() as store:
            store.query("SELECT 1 AS one")
        stores["ledger"] = {"up": True, "detail": None}
    except StoreUnavailableError as error:
        stores["ledger"] = {"up": False, "detail": str(error)}
    status = "ok" if all(s["up"] for s in stores.values()) else "degraded"
    return {"status": status, "stores": stores}
