"""The planning report (ADR-22, ADR-26): per UTC day, the vCPU-hours run on each purchase model
and the committed reservations beside them: what they held, what ran on them, and the idle
floor (what nothing ran on, and what it cost). The ledger's reclaimable hours are the input to
guaranteed-capacity planning the source design asks for; the idle floor is the other half of
it (capacity bought for floors and not used).

Everything comes from the ledger's lines: a usage interval's spend and surplus lines carry the
vCPU-hours it ran (a waste line moves hours between lines, never adds them), and the idle
floor's lines carry the reserved vCPU-hours (a reservation's) and those something ran on (a
usage interval's, negative)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from projections.ledger.rule import (
    FALLBACK_SPEND,
    FLOOR_SPEND,
    IDLE_FLOOR,
    RECLAIMABLE_SPEND,
    SURPLUS,
)
from projections.ledger.store import LedgerStore
from projections.money import eur_string, eur_text
from projections.read.savings import _where

MODELS = ("reclaimable", "committed", "guaranteed")


@dataclass(slots=True)
class PlanningDay:
    day: date
    run_vcpu_h: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MODELS, 0.0))
    surplus_vcpu_h: float = 0.0  # of the hours run: beyond what the open claims asked for
    reserved_vcpu_h: float = 0.0
    occupied_vcpu_h: float = 0.0  # reserved capacity something ran on
    idle_floor_eur_micros: int = 0

    @property
    def idle_vcpu_h(self) -> float:
        return self.reserved_vcpu_h - self.occupied_vcpu_h

    def as_json(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "run_vcpu_h": {m: round(v, 3) for m, v in self.run_vcpu_h.items()},
            "surplus_vcpu_h": round(self.surplus_vcpu_h, 3),
            "reserved_vcpu_h": round(self.reserved_vcpu_h, 3),
            "occupied_vcpu_h": round(self.occupied_vcpu_h, 3),
            "idle_vcpu_h": round(self.idle_vcpu_h, 3),
            "idle_floor_eur": eur_string(self.idle_floor_eur_micros),
            "idle_floor_eur_micros": self.idle_floor_eur_micros,
        }


@dataclass(slots=True)
class PlanningReport:
    days: list[PlanningDay]

    @property
    def total(self) -> PlanningDay:
        total = PlanningDay(date.min)
        for d in self.days:
            for model, hours in d.run_vcpu_h.items():
                total.run_vcpu_h[model] += hours
            total.surplus_vcpu_h += d.surplus_vcpu_h
            total.reserved_vcpu_h += d.reserved_vcpu_h
            total.occupied_vcpu_h += d.occupied_vcpu_h
            total.idle_floor_eur_micros += d.idle_floor_eur_micros
        return total

    def as_json(self) -> dict[str, Any]:
        total = self.total.as_json()
        del total["day"]
        return {"days": [d.as_json() for d in self.days], "total": total}


def planning(
    store: LedgerStore, *, first_day: date | None = None, last_day: date | None = None
) -> PlanningReport:
    """Hours run by purchase model and the reservations' use, per UTC day, from the ledger."""
    where, params = _where(first_day, last_day, None)
    rows = store.query(
        "SELECT toString(day) AS day, cause, purchase_model AS model, event_type,"
        " sum(quantity) AS q, sum(amount_eur_micros) AS a FROM ledger_lines FINAL"
        f" {where}{' AND' if where else ' WHERE'} cause IN ('{RECLAIMABLE_SPEND}',"
        f" '{FLOOR_SPEND}', '{FALLBACK_SPEND}', '{SURPLUS}', '{IDLE_FLOOR}')"
        " GROUP BY day, cause, model, event_type ORDER BY day",
        params,
    )
    days: dict[str, PlanningDay] = {}
    for r in rows:
        key = str(r["day"])[:10]
        d = days.setdefault(key, PlanningDay(date.fromisoformat(key)))
        cause, model, kind, q = (
            str(r["cause"]),
            str(r["model"]),
            str(r["event_type"]),
            float(r["q"]),
        )
        if cause == IDLE_FLOOR:
            d.idle_floor_eur_micros += int(r["a"])
            if kind == "reservation_committed":
                d.reserved_vcpu_h += q
            elif kind == "usage_interval":
                d.occupied_vcpu_h -= q
        elif kind == "usage_interval" and model in d.run_vcpu_h:
            d.run_vcpu_h[model] += q
            if cause == SURPLUS:
                d.surplus_vcpu_h += q
    return PlanningReport([days[k] for k in sorted(days)])


PLANNING_COLUMNS = ("day", *(f"{m} vCPU-h" for m in MODELS), "surplus vCPU-h", "reserved vCPU-h",
                    "idle vCPU-h", "idle floor")  # fmt: skip
"""The columns of `planning_rows`."""


def planning_rows(report: PlanningReport) -> list[tuple[str, ...]]:
    """The report for people: one row per UTC day, then the total; vCPU-hours whole, the idle
    floor in euros."""
    days = [*((d, d.day.isoformat()) for d in report.days), (report.total, "total")]
    return [(label, *(f"{d.run_vcpu_h[m]:,.0f}" for m in MODELS), f"{d.surplus_vcpu_h:,.0f}",
             f"{d.reserved_vcpu_h:,.0f}", f"{d.idle_vcpu_h:,.0f}",
             eur_text(d.idle_floor_eur_micros)) for d, label in days]  # fmt: skip
