"""The console: HTML pages for people, served by `spotcap serve` at `/`.

Every figure on a page comes from the API's own handlers (`console.api`), called in the
process with the same arguments a request would give them: one data path, the same rows, the
same rendering (money as decimal strings in euros), only laid out as HTML. The pages are drawn on
the server (Jinja2, SVG charts from `charts`) and read without JavaScript; their one stylesheet
is served by the process (nothing is fetched from anywhere else).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from console import api, whatif
from console.access import ReadAccess, StoreUnavailableError
from console.errors import BadParameterError, NotConfiguredError
from console.pages import charts
from console.roles import viewer_of
from console.signin import SignInError
from projections.ledger.rule import COST_CAUSES
from projections.read.counts import fleet_counts
from projections.read.times import check_span, parse_day
from projections.read.why import NotFoundError

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(include_in_schema=False)
WAVE_LANES = ("advisory", "notice", "drain", "loss", "replacement")


MINUS = "\u2212"  # a minus sign, not a hyphen
MISSING = "\u2013"  # an en dash where a value is absent (unranked pool, no loss yet)


def eur(value: str | None) -> str:
    """A decimal string in euros as a person reads it: €1,234.57."""
    if value is None:
        return MISSING
    amount = Decimal(value)
    sign = MINUS if amount < 0 else ""
    return f"{sign}€{abs(amount):,.2f}"


def delta(value: str) -> str:
    """A difference in euros with its sign: +€1.50 (a minus sign before a negative one)."""
    return ("+" if Decimal(value) > 0 else "") + eur(value)


def when(value: str | None) -> str:
    """An API time (ISO 8601, UTC) as `2026-11-02 01:48:20` (UTC is said once per page)."""
    return MISSING if value is None else value.replace("T", " ").split(".")[0].rstrip("Z")


def share(value: float | None) -> str:
    return MISSING if value is None else f"{value:.0%}"


def by_projection_topic(rows: list[dict[str, Any]]) -> list[tuple[tuple[str, str], list[Any]]]:
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        groups.setdefault((r["projection"], r["topic"]), []).append(r)
    return list(groups.items())


templates.env.filters.update(
    eur=eur, delta=delta, when=when, share=share, groupby2=by_projection_topic
)
templates.env.globals.update(lanes=WAVE_LANES)


def _access(request: Request) -> ReadAccess:
    access: ReadAccess = request.app.state.access
    return access


def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status)


def guarded(request: Request, render: Callable[[], HTMLResponse]) -> HTMLResponse:
    """The page, or the API's sentence for what went wrong as a page with the same status."""
    try:
        return render()
    except BadParameterError as error:
        return page(request, "error.html", 400, title="Bad request", detail=str(error))
    except NotFoundError as error:
        return page(request, "error.html", 404, title="Not found", detail=str(error))
    except NotConfiguredError as error:
        return page(request, "error.html", 409, title="Not configured", detail=str(error))
    except StoreUnavailableError as error:
        return page(request, "error.html", 503, title="A store is down", detail=str(error))


def _day(name: str, value: str | None) -> date | None:
    if not value:
        return None
    try:
        return parse_day(value)
    except ValueError as error:
        raise BadParameterError(f"{name}={value[:40]!r}: {error}") from error


def _wave_chart(wave: dict[str, Any]) -> Markup:
    marks = [
        charts.Mark(datetime.fromisoformat(e["at"]), e["stage"],
                    f"{e['event_type']} {e['instance_id']} at {when(e['at'])}")
        for e in wave["events"]
    ]  # fmt: skip
    return charts.timeline(f"Wave {wave['wave_id']} over event time", WAVE_LANES, marks)


@router.get("/", response_class=HTMLResponse)
def fleet(request: Request) -> HTMLResponse:
    access = _access(request)

    def render() -> HTMLResponse:
        pools = api.get_pools(access, pool=None, excluded=None, limit=api.MAX_LIMIT)
        exclusions = api.get_exclusions(access, pool=None, active=False, since=None, limit=50)
        with access.fleet() as conn:
            by_state = fleet_counts(conn).instances_by_state
        try:
            wave: dict[str, Any] | None = api.read_wave(access)
        except NotFoundError:
            wave = None
        return page(
            request, "fleet.html", pools=pools, exclusions=exclusions, by_state=by_state,
            lag=api.read_lag(access), wave=wave,
            wave_chart=_wave_chart(wave) if wave else None,
        )  # fmt: skip

    return guarded(request, render)


@router.get("/workloads", response_class=HTMLResponse)
def workloads(request: Request) -> HTMLResponse:
    access = _access(request)
    return guarded(
        request,
        lambda: page(request, "workloads.html",
                      workloads=api.get_workloads(access, viewer_of(request), workload=None,
                                                  limit=api.MAX_LIMIT)),
    )  # fmt: skip


@router.get("/workloads/{workload_id}", response_class=HTMLResponse)
def workload(request: Request, workload_id: str) -> HTMLResponse:
    access, viewer = _access(request), viewer_of(request)

    def render() -> HTMLResponse:
        # NotFoundError for an unknown workload, or another team's
        spread = api.read_spread(access, workload_id, viewer)
        (contract,) = api.get_workloads(access, viewer, workload=workload_id, limit=1)
        fallbacks = api.get_fallbacks(access, viewer, workload=workload_id, limit=api.MAX_LIMIT)
        instances = api.get_instances(access, viewer, workload=workload_id, pool=None,
                                      state=None, since=None, limit=api.MAX_LIMIT)  # fmt: skip
        daily = api.get_daily_savings(access, viewer, first=None, last=None,
                                      workload=workload_id)  # fmt: skip
        groups = [
            (d["day"], [charts.Bar("counterfactual", Decimal(d["eur"]["counterfactual"]),
                                   charts.PALETTE[0]),
                        charts.Bar("cost", Decimal(d["eur"]["cost"]), charts.PALETTE[1]),
                        charts.Bar("net saving", Decimal(d["eur"]["net_saving"]),
                                   charts.PALETTE[2])])
            for d in daily["days"]
        ]  # fmt: skip
        chart = charts.columns(f"{workload_id}: counterfactual, cost and net saving per day",
                               groups)  # fmt: skip
        return page(
            request, "workload.html", w=contract, spread=spread, fallbacks=fallbacks,
            instances=instances, daily=daily, chart=chart, causes=COST_CAUSES,
        )  # fmt: skip

    return guarded(request, render)


@router.get("/why", response_class=HTMLResponse)
def why(request: Request, id: str | None = None) -> HTMLResponse:
    access = _access(request)
    ident = (id or "").strip()

    def render() -> HTMLResponse:
        if not ident:
            return page(request, "why.html", ident="", answer=None)
        if len(ident) > 200 or any(ord(c) < 32 or ord(c) == 127 for c in ident):
            raise BadParameterError(
                "an id is 1 to 200 printable characters: paste an event, instance or workload id"
            )
        answer = api.get_why(access, viewer_of(request), ident)
        return page(request, "why.html", ident=ident, answer=answer)

    return guarded(request, render)


def _what_if_chart(what_if: dict[str, Any]) -> Markup:
    deltas = [
        charts.Bar(t["line"].replace("_", " "), Decimal(t["delta_eur"]),
                   charts.PALETTE[n % len(charts.PALETTE)])
        for n, t in enumerate(what_if["totals"])
    ]  # fmt: skip
    return charts.bars(f"What-if minus recorded per line under {what_if['rule']}", deltas)


@router.get("/savings", response_class=HTMLResponse)
def savings(request: Request) -> HTMLResponse:
    access = _access(request)
    params = request.query_params

    def render() -> HTMLResponse:
        first, last = _day("from", params.get("from")), _day("to", params.get("to"))
        try:
            check_span(first, last)
        except ValueError as error:
            raise BadParameterError(str(error)) from error
        viewer = viewer_of(request)
        report = api.get_savings(access, viewer, first=first, last=last, workload=None)
        rule = params.get("rule") or ""
        if rule and "finance" not in viewer.roles:
            raise SignInError(403, "what-if is for the finance role, and your token does not "
                              "grant it: ask for the group spotcap-finance")  # fmt: skip
        what_if = whatif.read_what_if(access, rule, first, last) if rule else None
        net = [charts.Bar(w["workload_id"], Decimal(w["eur"]["net_saving"]), charts.PALETTE[2])
               for w in report["workloads"]]  # fmt: skip
        by_cause = [
            charts.Bar(c.replace("_", " "), Decimal(report["total"][c]),
                       charts.PALETTE[n % len(charts.PALETTE)])
            for n, c in enumerate(COST_CAUSES)
        ]  # fmt: skip
        return page(
            request, "savings.html", report=report, causes=COST_CAUSES,
            first=first.isoformat() if first else "", last=last.isoformat() if last else "",
            net_chart=charts.bars("Net saving per workload", net),
            cause_chart=charts.bars("Cost lines over every workload", by_cause),
            rules=whatif.shipped_rules(), rule=rule, what_if=what_if,
            what_if_chart=_what_if_chart(what_if) if what_if else None,
        )  # fmt: skip

    return guarded(request, render)
