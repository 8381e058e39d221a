"""Replayed and recorded ledgers side by side: amounts per workload and cost line, and the diff.

A ledger here is a mapping (workload, UTC day, cause) -> micro-euros. The recorded one is read
from the ClickHouse ledger (`ledger_lines FINAL`); a replayed one comes from either engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from projections.ledger.rule import CAUSES, COST_CAUSES, COUNTERFACTUAL
from projections.ledger.store import LedgerStore

LineKey = tuple[str, int, str]
EPOCH_DAY = date(1970, 1, 1)


def day_number(day: date) -> int:
    return (day - EPOCH_DAY).days


def day_span(first: datetime | None, last: datetime | None) -> tuple[int | None, int | None]:
    """The first and last days (``--from``, ``--to``; None: open) as day numbers; ValueError
    when the first is after the last."""
    first_day = None if first is None else day_number(first.date())
    last_day = None if last is None else day_number(last.date())
    if first_day is not None and last_day is not None and first_day > last_day:
        raise ValueError("--from is after --to")
    return first_day, last_day


def day_date(number: int) -> date:
    return EPOCH_DAY + timedelta(days=number)


def recorded_amounts(
    store: LedgerStore, first_day: int | None = None, last_day: int | None = None
) -> dict[LineKey, int]:
    """The recorded ledger's amounts per workload, day and cause (days inclusive)."""
    conditions, params = [], {}
    if first_day is not None:
        conditions.append("day >= {f:Date}")
        params["f"] = day_date(first_day).isoformat()
    if last_day is not None:
        conditions.append("day <= {t:Date}")
        params["t"] = day_date(last_day).isoformat()
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    rows = store.query(
        "SELECT toString(workload_id) AS w, toUInt32(day) AS d, toString(cause) AS c,"
        f" sum(amount_eur_micros) AS a FROM ledger_lines FINAL {where}"
        " GROUP BY w, d, c HAVING a != 0",
        params,
    )
    return {(str(r["w"]), int(r["d"]), str(r["c"])): int(r["a"]) for r in rows}


def by_workload(amounts: Mapping[LineKey, int]) -> dict[str, dict[str, int]]:
    """Per workload, the amount of each cause over all days (every cause present, 0 if none)."""
    out: dict[str, dict[str, int]] = {}
    for (workload, _, cause), micros in amounts.items():
        line = out.setdefault(workload, dict.fromkeys(CAUSES, 0))
        line[cause] = line.get(cause, 0) + micros
    return dict(sorted(out.items()))


def net_saving(line: Mapping[str, int]) -> int:
    return line.get(COUNTERFACTUAL, 0) - sum(line.get(c, 0) for c in COST_CAUSES)


@dataclass(frozen=True, slots=True)
class DiffRow:
    workload_id: str
    cause: str  # a cause, or "net_saving"
    recorded_micros: int
    what_if_micros: int

    @property
    def delta_micros(self) -> int:
        return self.what_if_micros - self.recorded_micros


def diff(recorded: Mapping[LineKey, int], what_if: Mapping[LineKey, int]) -> list[DiffRow]:
    """Per workload and cost line (and net saving): recorded, what-if; every pair, in order."""
    left, right = by_workload(recorded), by_workload(what_if)
    rows: list[DiffRow] = []
    for workload in sorted(set(left) | set(right)):
        a = left.get(workload, dict.fromkeys(CAUSES, 0))
        b = right.get(workload, dict.fromkeys(CAUSES, 0))
        for cause in CAUSES:
            rows.append(DiffRow(workload, cause, a.get(cause, 0), b.get(cause, 0)))
        rows.append(DiffRow(workload, "net_saving", net_saving(a), net_saving(b)))
    return rows


def differing_lines(
    recorded: Mapping[LineKey, int], what_if: Mapping[LineKey, int]
) -> dict[LineKey, tuple[int, int]]:
    """Every (workload, day, cause) whose amounts differ: (recorded, what-if)."""
    keys = set(recorded) | set(what_if)
    return {
        k: (recorded.get(k, 0), what_if.get(k, 0))
        for k in sorted(keys)
        if recorded.get(k, 0) != what_if.get(k, 0)
    }
