"""What-if accounting, for the API (/api/v1/reports/what-if) and the console's Savings page: one
of the rules shipped in replay/rules/ replayed over the ledger by the faster engine (ClickHouse,
as `spotcap replay` does by default), against the recorded ledger per workload and cost line.

Only a shipped rule, by name: a request never names a file. The ledger is read as the
projections have written it (the server is read-only: it does not bring the ledger up to date
first as `spotcap replay` does), the same ledger as the savings report's.
"""

from __future__ import annotations

from datetime import date
from functools import cache
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Query

from console.access import ReadAccess
from console.api import Access, FirstDay, KnownParameters, LastDay
from console.errors import BadParameterError
from console.models import WhatIf
from console.openapi import errors
from projections.ledger.rule import CAUSES
from projections.money import eur_string
from projections.read.times import check_span
from replay.ledgers import day_number, diff, recorded_amounts
from replay.rule import Rule
from replay.rule_file import load_rule, shipped_rule_path
from replay.run import replay_clickhouse
from replay.sql import LEDGER_RELATIONS

LINES = (*CAUSES, "net_saving")


def shipped_rules() -> list[str]:
    """The names of the rules in replay/rules/, recorded first."""
    names = sorted(
        p.name.removesuffix(".yaml")
        for p in resources.files("replay.rules").iterdir()
        if p.name.endswith(".yaml")
    )
    return sorted(names, key=lambda n: n != "recorded")


@cache
def shipped_rule(name: str) -> Rule:
    """A shipped rule by name; BadParameterError naming the shipped ones otherwise."""
    if name not in shipped_rules():
        raise BadParameterError(
            f"rule={name[:60]!r} is not a shipped rule: give one of {', '.join(shipped_rules())}"
        )
    return load_rule(shipped_rule_path(name))


def read_what_if(
    access: ReadAccess, name: str, first: date | None, last: date | None
) -> dict[str, Any]:
    """The rule's ledger against the recorded one: totals per line, and each workload line
    that differs (recorded, what-if, delta), money in euros."""
    rule = shipped_rule(name)
    try:
        check_span(first, last)
    except ValueError as error:
        raise BadParameterError(str(error)) from error
    first_day = day_number(first) if first else None
    last_day = day_number(last) if last else None
    with access.ledger() as store:
        result = replay_clickhouse(
            store, LEDGER_RELATIONS, rule, first_day=first_day, last_day=last_day
        )
        recorded = recorded_amounts(store, first_day, last_day)
    rows = diff(recorded, result.amounts)
    totals = {line: [0, 0] for line in LINES}
    for r in rows:
        totals[r.cause][0] += r.recorded_micros
        totals[r.cause][1] += r.what_if_micros
    changed = [r for r in rows if r.delta_micros]
    return {
        "rule": rule.name,
        "description": rule.description,
        "rule_file": f"replay/rules/{name}.yaml",
        "engine": result.engine,
        "from": first.isoformat() if first else None,
        "to": last.isoformat() if last else None,
        "currency": "EUR",
        "events": result.events,
        "identical": not changed,
        "workloads_compared": len({r.workload_id for r in rows}),
        "totals": [_line(line, *totals[line]) for line in LINES],
        "rows": [
            {"workload_id": r.workload_id, **_line(r.cause, r.recorded_micros, r.what_if_micros)}
            for r in changed
        ],
    }


def _line(line: str, recorded_micros: int, what_if_micros: int) -> dict[str, str]:
    return {
        "line": line,
        "recorded_eur": eur_string(recorded_micros),
        "what_if_eur": eur_string(what_if_micros),
        "delta_eur": eur_string(what_if_micros - recorded_micros),
    }


RuleName = Annotated[str, Query(min_length=1, max_length=80, description="A rule shipped in "
                                "replay/rules/, by name.",
                                json_schema_extra={"enum": shipped_rules()})]  # fmt: skip

router = APIRouter(prefix="/api/v1", dependencies=[KnownParameters])


@router.get("/reports/what-if", response_model=WhatIf, responses=errors(400, 503),
            summary="What-if accounting", description="The ledger replayed under a shipped "
            "accounting rule (replay/rules/) by the ClickHouse engine, against the recorded "
            "ledger: every line's totals and each workload line that differs (recorded, "
            "what-if, delta); money in euros as decimal strings. As `spotcap replay --rules "
            "replay/rules/RULE.yaml --diff --json` over a ledger that is up to date.")  # fmt: skip
def get_what_if(
    access: Access, rule: RuleName, first: FirstDay = None, last: LastDay = None
) -> dict[str, Any]:
    return read_what_if(access, rule, first, last)
