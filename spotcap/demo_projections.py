"""The end of `spotcap demo`: materialise both projections, then say what they hold: the
savings totals, and three `why` commands a person can paste."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from projections.money import eur_string, eur_text
from projections.read.savings import savings
from spotcap.cli_projections import run_projections
from spotcap.config import Settings
from spotcap.stores import open_fleet, open_ledger


def materialise(settings: Settings, *, rebuild: bool, quiet: bool) -> dict[str, Any]:
    """Bring both projections up to date (or rebuild them) and report on them."""
    runs = run_projections(settings, ("fleet", "ledger"), fresh=rebuild, quiet=quiet)
    total = savings(open_ledger(settings)).total
    conn = open_fleet(settings)
    examples: list[str] = []
    lost = conn.execute(
        "SELECT instance_id, notice_event_id::text FROM instances WHERE state IN ('lost',"
        " 'replaced') ORDER BY (notice_event_id IS NULL), (drain_started_event_id IS NULL),"
        " lost_at, instance_id LIMIT 1"
    ).fetchone()
    if lost:
        examples.append(f"spotcap why {lost[0]}")
    escalated = conn.execute(
        "SELECT event_id::text FROM fallbacks WHERE kind = 'escalated' ORDER BY occurred_at LIMIT 1"
    ).fetchone()
    if escalated:
        examples.append(f"spotcap why {escalated[0]}")
    elif lost and lost[1]:
        examples.append(f"spotcap why {lost[1]}")
    workload = conn.execute(
        "SELECT workload_id FROM instances WHERE state IN ('lost', 'replaced')"
        " GROUP BY workload_id ORDER BY count(*) DESC, workload_id LIMIT 1"
    ).fetchone()
    if workload:
        examples.append(f"spotcap why {workload[0]}")
    return {
        "projections": [
            {
                "projection": r.projection,
                "events": r.events,
                "seconds": round(r.seconds, 3),
                "unpriced": r.unpriced,
            }
            for r in runs
        ],
        "savings_eur": {
            "counterfactual": eur_string(total.counterfactual),
            "cost": eur_string(total.cost),
            "net_saving": eur_string(total.net_saving),
        },
        "savings_micros": {
            "counterfactual": total.counterfactual,
            "cost": total.cost,
            "net_saving": total.net_saving,
        },
        "why_examples": examples,
    }


def print_projections(report: dict[str, Any], console: Console, home_args: str) -> None:
    money = report["savings_micros"]
    share = money["net_saving"] / money["counterfactual"] if money["counterfactual"] else 0.0
    console.print(
        f"net saving {eur_text(money['net_saving'])} of a {eur_text(money['counterfactual'])} "
        f"counterfactual ({share:.1%}), after {eur_text(money['cost'])} of costs; per workload: "
        f"spotcap{home_args} report savings",
        highlight=False,
        soft_wrap=True,
    )
    if report["why_examples"]:
        console.print("ask why something happened:", highlight=False)
        for command in report["why_examples"]:
            console.print(
                f"  {command.replace('spotcap', 'spotcap' + home_args, 1)}",
                highlight=False,
                soft_wrap=True,
            )
