"""The savings report (ADR-26, ADR-27 showback): per workload, every cost line and the net
saving over a span of UTC days, with totals; money stays integer micro-euros.

The platform's lines (the idle floor: committed reservations nothing ran on) come under the
workload `(platform)`, so the total's net saving is the region's. The report also says what
late facts did: the rate cards and reservations refused past the allowed lateness, and the
correction lines late rate cards made (docs/accounting.md, "Late facts")."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from projections.ledger.rule import CAUSES, COST_CAUSES, COUNTERFACTUAL, IDLE_FLOOR, SURPLUS
from projections.ledger.store import LedgerStore
from projections.money import eur_string, eur_text


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


@dataclass(frozen=True, slots=True)
class LateFact:
    """A fact refused past the allowed lateness."""

    event_id: str
    event_type: str
    key: str
    lateness_s: float
    allowed_s: int
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "key": self.key,
            "lateness_s": self.lateness_s,
            "allowed_lateness_s": self.allowed_s,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Corrections:
    """What late rate cards re-priced: their correction lines and what those add up to."""

    lines: int = 0
    cards: int = 0
    net_saving_eur_micros: int = 0  # the corrections' effect on the net saving

    def as_json(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "late_cards": self.cards,
            "net_saving_eur": eur_string(self.net_saving_eur_micros),
        }


@dataclass(slots=True)
class SavingsReport:
    first_day: date | None
    last_day: date | None
    workloads: list[WorkloadSavings]
    refused: list[LateFact] = field(default_factory=list)
    corrections: Corrections = field(default_factory=Corrections)

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
            "late_facts": {
                "refused": [f.as_json() for f in self.refused],
                "corrections": self.corrections.as_json(),
            },
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
    return SavingsReport(
        first_day,
        last_day,
        list(by_workload.values()),
        refused_facts(store),
        corrections(store, first_day, last_day, workload),
    )


SAVINGS_COLUMNS = ("workload", *(cause.replace("_", " ") for cause in CAUSES), "net saving")
"""The columns of `savings_rows`: the workload, each cost line, the net saving."""


def savings_rows(report: SavingsReport) -> list[tuple[str, ...]]:
    """The report for people: one row per workload, then the total; money as euro text."""
    return [
        (w.workload_id, *(eur_text(w.by_cause[c]) for c in CAUSES), eur_text(w.net_saving))
        for w in [*report.workloads, report.total]
    ]


def late_sentences(report: SavingsReport) -> list[str]:
    """What the total's platform line and late facts mean, in sentences for people."""
    total = report.total
    out = [
        f"idle floor: {eur_text(total.by_cause[IDLE_FLOOR])} of committed reservations nothing "
        "ran on (the platform's line); surplus: "
        f"{eur_text(total.by_cause[SURPLUS])} of capacity running beyond what the open claims "
        "asked for (`why WORKLOAD` names the decisions that launched it)"
    ]
    c = report.corrections
    if c.lines:
        out.append(
            f"{c.lines:,} correction lines from {c.cards:,} rate cards that arrived after what "
            f"they price changed the net saving by {eur_text(c.net_saving_eur_micros)}"
        )
    if report.refused:
        allowed = report.refused[0].allowed_s
        out.append(
            f"{len(report.refused):,} facts published more than {allowed / 3600:g} h after "
            "they apply were refused (not priced; dead-lettered): "
            + "; ".join(
                f"{f.event_type} {f.event_id} for {f.key}, {f.lateness_s / 3600:.1f} h late"
                for f in report.refused[:5]
            )
            + (" ..." if len(report.refused) > 5 else "")
        )
    else:
        out.append("no fact was refused past the allowed lateness")
    return out


def refused_facts(store: LedgerStore) -> list[LateFact]:
    """The facts the ledger refused past its allowed lateness, oldest first."""
    rows = store.query(
        "SELECT toString(event_id) AS id, event_type, key, lateness_s, allowed_s, reason"
        " FROM late_facts FINAL ORDER BY occurred_at, id"
    )
    return [
        LateFact(str(r["id"]), str(r["event_type"]), str(r["key"]), float(r["lateness_s"]),
                 int(r["allowed_s"]), str(r["reason"]))
        for r in rows
    ]  # fmt: skip


def corrections(
    store: LedgerStore, first_day: date | None, last_day: date | None, workload: str | None
) -> Corrections:
    """The correction lines late rate cards made (their event is the card) over the span."""
    where, params = _where(first_day, last_day, workload)
    rows = store.query(
        "SELECT count() AS n, uniqExact(event_id) AS cards,"
        f" sumIf(amount_eur_micros, cause = '{COUNTERFACTUAL}') -"
        f" sumIf(amount_eur_micros, cause != '{COUNTERFACTUAL}') AS net FROM ledger_lines FINAL"
        f" {where}{' AND' if where else ' WHERE'} event_type = 'rate_card'",
        params,
    )
    r = rows[0] if rows else {"n": 0, "cards": 0, "net": 0}
    return Corrections(int(r["n"]), int(r["cards"]), int(r["net"] or 0))


def _where(
    first_day: date | None, last_day: date | None, workload: str | None
) -> tuple[str, dict[str, Any]]:
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
    return (f"WHERE {' AND '.join(conditions)}" if conditions else ""), params


def _by(
    store: LedgerStore,
    column: str,  # "workload_id" or "day": a name of ours, never the caller's
    first_day: date | None,
    last_day: date | None,
    workload: str | None,
) -> dict[str, WorkloadSavings]:
    where, params = _where(first_day, last_day, workload)
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
