"""The comparison of `replay.decisions.what_if` in words: rows of text and sentences a front end
lays out (`spotcap replay decisions`), as `sim.report` gives the demo's."""

from __future__ import annotations

from typing import Any

from projections.money import eur_text


def value_text(value: float, unit: str, *, signed: bool = False) -> str:
    """One figure in its unit: money (micro-euros) in euros, vCPU-hours to a tenth, counts."""
    sign = "+" if signed and value > 0 else ""
    if unit == "EUR":
        return sign + eur_text(int(value))
    if unit == "vCPU-h":
        return f"{sign}{value:,.1f}"
    return f"{sign}{int(value):,}"


def _days(days: float) -> str:
    return f"{days:g} day" + ("" if days == 1 else "s")


def what_if_title(report: dict[str, Any]) -> str:
    """What is compared with what: the run, the days counted, and who decided the re-run."""
    span = f"{report['from'] or 'the start'} to {report['to'] or 'the end'}"
    rerun = report["rerun"]
    changed = rerun["settings_changed"]
    what = (
        ", ".join(f"{c['key']} {c['recorded']:g} -> {c['rerun']:g}" for c in changed)
        if changed
        else "the recorded settings"
    )
    who = rerun["orchestrator"] if rerun["orchestrator"] == "baseline" else f"deciders, {what}"
    return (
        f"region {report['region']} (seed {report['seed']}, {_days(report['sim_days'])}, "
        f"{report['workloads']} workloads), {span}: recorded ({report['recorded']['orchestrator']})"
        f" against a re-run ({who})"
    )


def what_if_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Each figure: (its group on the group's first row, else "", the figure with its unit,
    recorded, re-run, delta)."""
    rows = []
    group = ""
    for row in report["figures"]:
        head = row["group"] if row["group"] != group else ""
        group = row["group"]
        unit = f" ({row['unit']})" if row["unit"] and row["unit"] != "EUR" else ""
        rows.append((
            head,
            row["label"] + unit,
            value_text(row["recorded"], row["unit"]),
            value_text(row["rerun"], row["unit"]),
            value_text(row["delta"], row["unit"], signed=True) if row["delta"] else "0",
        ))  # fmt: skip
    return rows


def exclusion_lines(report: dict[str, Any]) -> list[str]:
    """Which pools each run excluded (the misbehaving ones marked), one line per side."""
    ex = report["exclusions"]
    lines = [
        ("excluded in both runs", ex["excluded_in_both"]),
        ("excluded only in the recorded run", ex["excluded_only_recorded"]),
        ("excluded only in the re-run", ex["excluded_only_rerun"]),
    ]
    out = []
    for label, pools in lines:
        marked = [f"{p} (misbehaving)" if p in ex["misbehaving_pools"] else p for p in pools]
        out.append(f"{label}: {', '.join(marked) if marked else 'none'}")
    return out


def what_if_summary(report: dict[str, Any]) -> str:
    """The last sentence: no difference, or the net saving of both runs and their events."""
    if report["identical"]:
        return (
            f"no difference: the re-run decides as the recorded run did "
            f"({report['recorded']['events']:,} events each)"
        )
    saving = next(r for r in report["figures"] if r["key"] == "ledger_net_saving")
    return (
        f"net saving {eur_text(saving['recorded'])} recorded, {eur_text(saving['rerun'])} "
        f"re-run ({value_text(saving['delta'], 'EUR', signed=True)}); "
        f"{report['recorded']['events']:,} events recorded, "
        f"{report['rerun']['events']:,} re-run"
    )


def settings_rows(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """`streams.deciders.settings_keys.settings_table` as text: (key, default, allowed)."""
    return [(str(r["key"]), f"{r['default']:g}", str(r["allowed"])) for r in rows]


__all__ = [
    "exclusion_lines",
    "settings_rows",
    "value_text",
    "what_if_rows",
    "what_if_summary",
    "what_if_title",
]
