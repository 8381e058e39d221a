"""What a replay came to, as plain JSON-able data (`spotcap replay --json`, and the tables the
command prints from it): the ledger per workload and in total, in micro-euros and as decimal
strings in euros, and with a recorded ledger the diff per workload and cost line."""

from __future__ import annotations

from typing import Any

from projections.ledger.rule import CAUSES, COST_CAUSES
from projections.money import eur_string
from replay.fold import LineKey
from replay.ledgers import DiffRow, by_workload, day_date, diff, net_saving
from replay.run import Replayed


def with_totals(line: dict[str, int]) -> dict[str, int]:
    """A ledger line with its cost (every cost cause) and its net saving."""
    return {**line, "cost": sum(line[c] for c in COST_CAUSES), "net_saving": net_saving(line)}


def replay_report(
    result: Replayed,
    source: str,
    first_day: int | None,
    last_day: int | None,
    recorded: dict[LineKey, int] | None,
) -> dict[str, Any]:
    """The replayed ledger per workload and in total; with `recorded`, the diff against it."""
    workloads = by_workload(result.amounts)
    total = dict.fromkeys(CAUSES, 0)
    for line in workloads.values():
        for cause, micros in line.items():
            total[cause] += micros

    def money(line: dict[str, int]) -> dict[str, Any]:
        micros = with_totals(line)
        return {"micros": micros, "eur": {k: eur_string(v) for k, v in micros.items()}}

    report: dict[str, Any] = {
        "rule": result.rule.name,
        "rule_file": result.rule.source,
        "engine": result.engine,
        "source": source,
        "from": day_date(first_day).isoformat() if first_day is not None else None,
        "to": day_date(last_day).isoformat() if last_day is not None else None,
        "events": result.events,
        "seconds": round(result.seconds, 3),
        "events_per_s": round(result.events_per_s),
        "unpriced_events": result.unpriced,
        "currency": "EUR",
        "workloads": [{"workload_id": w, **money(line)} for w, line in workloads.items()],
        "total": money(total),
    }
    if recorded is not None:
        rows = diff(recorded, result.amounts)
        changed = [r for r in rows if r.delta_micros]
        totals: dict[str, dict[str, int]] = {}
        for r in rows:
            t = totals.setdefault(r.cause, {"recorded_micros": 0, "what_if_micros": 0})
            t["recorded_micros"] += r.recorded_micros
            t["what_if_micros"] += r.what_if_micros
        for t in totals.values():
            t["delta_micros"] = t["what_if_micros"] - t["recorded_micros"]
        report["diff"] = {
            "identical": not changed,
            "workloads_compared": len({r.workload_id for r in rows}),
            "rows": [_diff_row(r) for r in changed],
            "totals": {cause: {**t, **_eur(t)} for cause, t in totals.items()},
        }
    return report


def _diff_row(row: DiffRow) -> dict[str, Any]:
    micros = {
        "recorded_micros": row.recorded_micros,
        "what_if_micros": row.what_if_micros,
        "delta_micros": row.delta_micros,
    }
    return {"workload_id": row.workload_id, "line": row.cause, **micros, **_eur(micros)}


def _eur(micros: dict[str, Any]) -> dict[str, str]:
    """Each ``*_micros`` amount also as a decimal string in euros (``*_eur``): the one money
    format of every ``--json``, the micro-euros beside it for machines that add them up."""
    return {k.removesuffix("_micros") + "_eur": eur_string(int(v)) for k, v in micros.items()}


__all__ = ["replay_report", "with_totals"]
