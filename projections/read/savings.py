"""The savings report (ADR-26, ADR-27 showback): per workload, every cost line and the net
saving over a span of UTC days, with totals; money stays integer micro-euros."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from projections.ledger.rule import CAUSES, COST_CAUSES, COUNTERFACTUAL
from projections.ledger.store import LedgerStore
from projections.money import eur_string


@dataclass(slots=True)
class WorkloadSavings:
    workload_id: str
    by_cause: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))

    @property
    def counterfactual(self) -> int:
        return self.by_cause[COUNTERFACTUAL]

    @property
    def cost(self) -> int:
        return sum(self.by_cause[c] for c in COST_CAUSES)

    @property
    def net_saving(self) -> int:
        return self.counterfactual - self.cost

    def as_json(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "eur": {c: eur_string(v) for c, v in self.by_cause.items()}
            | {"cost": eur_string(self.cost), "net_saving": eur_string(self.net_saving)},
        }


@dataclass(slots=True)
class SavingsReport:
    first_day: date | None
    last_day: date | None
    workloads: list[WorkloadSavings]

    @property
    def total(self) -> WorkloadSavings:
        total = WorkloadSavings("total")
        for w in self.workloads:
            for cause, amount in w.by_cause.items():
                total.by_cause[cause] += amount
        return total

    def as_json(self) -> dict[str, Any]:
        return {
            "from": self.first_day.isoformat() if self.first_day else None,
            "to": self.last_day.isoformat() if self.last_day else None,
            "currency": "EUR",
            "workloads": [w.as_json() for w in self.workloads],
            "total": self.total.as_json()["eur"],
        }


def savings(
    store: LedgerStore,
    *,
    first_day: date | None = None,
    last_day: date | None = None,
    workload: str | None = None,
) -> SavingsReport:
    """Sum of the ledger lines per workload and cause over [first_day, last_day] (inclusive)."""
    by_workload = _by(store, "workload_id", first_day, last_day, workload)
    return SavingsReport(first_day, last_day, list(by_workload.values()))


def _by(
    store: LedgerStore,
    column: str,  # "workload_id" or "day": a name of ours, never the caller's
    first_day: date | None,
    last_day: date | None,
    workload: str | None,
) -> dict[str, WorkloadSavings]:
    conditions, params = [], {}
    if first_day is not None:
        conditions.append("day >= {f:Date}")
        params["f"] = first_day.isoformat()
    if last_day is not None:
        conditions.append("day <= {t:Date}")
        params["t"] = last_day.isoformat()
    if workload is not None:
        conditions.append("workload_id = {w:String}")
        params["w"] = workload
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    rows = store.query(
        f"SELECT {column} AS key, cause, sum(amount_eur_micros) AS amount FROM ledger_lines FINAL "
        f"{where} GROUP BY key, cause ORDER BY key, cause",
        params,
    )
    by_key: dict[str, WorkloadSavings] = {}
    for r in rows:
        key = str(r["key"])
        w = by_key.setdefault(key, WorkloadSavings(key))
        w.by_cause[str(r["cause"])] = w.by_cause.get(str(r["cause"]), 0) + int(r["amount"])
    return by_key


@dataclass(slots=True)
class DailySavings:
    """One workload's (or the whole region's) cost lines and net saving per UTC day."""

    workload_id: str | None
    days: dict[date, WorkloadSavings]

    def as_json(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "currency": "EUR",
            "days": [
                {"day": d.isoformat(), "eur": w.as_json()["eur"]} for d, w in self.days.items()
            ],
        }


def savings_by_day(
    store: LedgerStore,
    *,
    first_day: date | None = None,
    last_day: date | None = None,
    workload: str | None = None,
) -> DailySavings:
    """The same sums as `savings`, per UTC day instead of per workload (oldest day first)."""
    report = _by(store, "day", first_day, last_day, workload)
    days = {date.fromisoformat(str(k)[:10]): w for k, w in sorted(report.items())}
    return DailySavings(workload, days)
