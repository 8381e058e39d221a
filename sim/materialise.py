"""The end of the demo: materialise both projections, then say what they hold: the savings
totals, and three `why` commands a person can paste."""

from __future__ import annotations

from typing import Any

from projections.catchup import ShowProgress, run_projections
from projections.money import eur_string, eur_text
from projections.read.savings import savings
from projections.stores import StoreError, Stores
from schemas.codec import Codec
from streams.log import EventLog, LogError

NO_PROJECTIONS = "or run the demo with --no-projections"


class ProjectionsError(RuntimeError):
    """The demo's projections cannot be checked or brought up to date; `hint` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def check_region(stores: Stores) -> None:
    """Before the demo runs: the projections hold this region (or none), so that a run of
    another region is refused before it simulates, not after; ProjectionsError if not."""
    from projections.ledger.store import LedgerError
    from projections.postgres.connection import FleetDatabaseError
    from projections.provenance import RegionMismatchError

    try:
        stores.check_region()
    except RegionMismatchError as error:
        hint = "run the demo of another region in a home of its own (--home)"
        raise ProjectionsError(str(error), hint) from error
    except (StoreError, FleetDatabaseError, LedgerError) as error:
        raise ProjectionsError(str(error), NO_PROJECTIONS) from error


def materialise(
    log: EventLog,
    codec: Codec,
    region: str,
    stores: Stores,
    *,
    rebuild: bool,
    show: ShowProgress | None = None,
) -> dict[str, Any]:
    """Bring both projections up to date (or rebuild them) and report on them;
    ProjectionsError when a store or the log fails."""
    from projections.ledger.store import LedgerError
    from projections.postgres.connection import FleetDatabaseError

    try:
        return _materialise(log, codec, region, stores, rebuild=rebuild, show=show)
    except (StoreError, FleetDatabaseError, LedgerError, LogError) as error:
        raise ProjectionsError(str(error), NO_PROJECTIONS) from error


def _materialise(
    log: EventLog,
    codec: Codec,
    region: str,
    stores: Stores,
    *,
    rebuild: bool,
    show: ShowProgress | None,
) -> dict[str, Any]:
    runs = run_projections(
        log, codec, region, stores, ("fleet", "ledger"), fresh=rebuild, show=show
    )
    total = savings(stores.open_ledger()).total
    conn = stores.open_fleet()
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


def projection_lines(report: dict[str, Any], home_args: str) -> list[str]:
    """What `materialise`'s report says to a person: the savings sentence, then the `why`
    commands to paste, each with `home_args` (`` --home H --region R``) after ``spotcap``."""
    money = report["savings_micros"]
    share = money["net_saving"] / money["counterfactual"] if money["counterfactual"] else 0.0
    lines = [
        f"net saving {eur_text(money['net_saving'])} of a {eur_text(money['counterfactual'])} "
        f"counterfactual ({share:.1%}), after {eur_text(money['cost'])} of costs; per workload: "
        f"spotcap{home_args} report savings"
    ]
    if report["why_examples"]:
        lines.append("ask why something happened:")
        lines.extend(
            f"  {command.replace('spotcap', 'spotcap' + home_args, 1)}"
            for command in report["why_examples"]
        )
    return lines
