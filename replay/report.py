"""What a replay came to, as plain JSON-able data (`spotcap replay --json`, and the tables the
command prints from it): the ledger per workload and in total, in micro-euros and as decimal
strings in euros, and with a recorded ledger the diff per workload and cost line."""

from __future__ import annotations

from typing import Any

from projections.ledger.rule import CAUSES, COST_CAUSES
from projections.money import eur_string, eur_text
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


# -- for people: the rows of `spotcap replay`'s tables (the command styles and prints them) ----

SHORT = {
    "counterfactual": "counterfactual",
    "reclaimable_spend": "reclaimable",
    "floor_spend": "floor",
    "fallback_spend": "fallback",
    "surplus": "surplus",
    "wasted_work": "wasted",
    "headroom": "headroom",
    "checkpoint_storage": "checkpoints",
    "footprint": "footprint",
    "idle_floor": "idle floor",
    "net_saving": "net saving",
}
"""Each ledger line's column heading."""
LINES = [*CAUSES, "net_saving"]


def span(report: dict[str, Any]) -> str:
    """The days a report covers, in words."""
    return f"{report['from'] or 'the start'} to {report['to'] or 'the end'}"


def delta_text(micros: int) -> str:
    """A difference in euros with its sign (``+€1.20``, ``-€0.40``, ``€0.00``)."""
    return ("+" if micros > 0 else "") + eur_text(micros)


def engine_text(result: Replayed) -> str:
    return f"{result.events:,} events in {result.seconds:,.1f} s by the {result.engine} engine"


def ledger_rows(
    report: dict[str, Any], limit: int
) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    """The ledger's rows per workload (the first `limit`, then a line saying how many more)
    and its total row, in euros."""
    rows = [(w["workload_id"], *(eur_text(w["micros"][c]) for c in LINES))
            for w in report["workloads"][:limit]]  # fmt: skip
    if len(report["workloads"]) > limit:
        more = f"... {len(report['workloads']) - limit:,} more (--limit, --json)"
        rows.append((more, *([""] * len(LINES))))
    total = ("total", *(eur_text(report["total"]["micros"][c]) for c in LINES))
    return rows, total


def diff_totals(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Per ledger line: recorded, what-if and delta in total."""
    totals = report["diff"]["totals"]
    return [(SHORT[c], eur_text(totals[c]["recorded_micros"]),
             eur_text(totals[c]["what_if_micros"]), delta_text(totals[c]["delta_micros"]))
            for c in LINES]  # fmt: skip


def diff_lines(rows: list[DiffRow]) -> list[tuple[str, str, str, str, str]]:
    """The workload lines that differ (net saving left out: it follows from the others)."""
    return [(r.workload_id, SHORT[r.cause], eur_text(r.recorded_micros),
             eur_text(r.what_if_micros), delta_text(r.delta_micros))
            for r in rows if r.delta_micros and r.cause != "net_saving"]  # fmt: skip


def diff_lines_title(count: int, limit: int) -> str:
    """The title of the table of `count` differing lines, of which --limit shows `limit`."""
    cut = f" (the first {limit}; --json for all)" if count > limit else ""
    return f"{count:,} workload lines differ{cut}"


def diff_sentences(result: Replayed, report: dict[str, Any]) -> tuple[str, str]:
    """What to say when nothing differs, and the closing line when something does."""
    d = report["diff"]
    same = (f"no difference: rule {result.rule.name} reproduces the recorded ledger exactly "
            f"({d['workloads_compared']:,} workloads, every cost line, {span(report)}; "
            f"{engine_text(result)})")  # fmt: skip
    saving = d["totals"]["net_saving"]
    closing = (f"net saving {eur_text(saving['recorded_micros'])} recorded, "
               f"{eur_text(saving['what_if_micros'])} under {result.rule.name} "
               f"({delta_text(saving['delta_micros'])}); {engine_text(result)}")  # fmt: skip
    return same, closing
