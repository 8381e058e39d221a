"""The drills of a region as rows: each started, refused or finished drill, newest last.

`drill_report(events)` reads the drill events (`drill_started`, `drill_refused`,
`drill_finished`) and gives one `DrillRow` per drill (refusals one each): its figures when it
finished, "running" while it has not. `COLUMNS` and `cells` lay a row out for a table that fits
80 columns; `as_json` gives every figure for machines.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from schemas.events import DrillFinished, DrillRefused, DrillStarted, Envelope

if TYPE_CHECKING:
    from provider.drill.run import DrillOutcome


@dataclass(frozen=True, slots=True)
class DrillRow:
    drill_id: str
    pool_id: str
    at_us: int
    result: str  # passed | failed | running | refused
    reclaimed: int
    drained: int
    verified: int
    notice_to_drain_p99_ms: int | None
    replaced_in_time: int
    cost_eur_micros: int
    why: tuple[str, ...]  # failures, or the refusal's reason


COLUMNS = ("drill", "pool", "UTC", "result", "n", "drained", "p99 ms", "in time", "cost €")
RIGHT = ("n", "drained", "p99 ms", "in time", "cost €")


def drill_report(events: list[Envelope]) -> list[DrillRow]:
    rows: dict[str, DrillRow] = {}
    for event in events:
        p = event.payload
        if isinstance(p, DrillStarted):
            rows[p.drill_id] = DrillRow(p.drill_id, p.pool_id, event.occurred_at, "running",
                                        len(p.instance_ids), 0, 0, None, 0, 0, ())  # fmt: skip
        elif isinstance(p, DrillRefused):
            why = (f"{p.rule}: {p.reason}",)
            rows[event.event_id] = DrillRow(p.drill_id, p.pool_id, event.occurred_at, "refused",
                                            0, 0, 0, None, 0, 0, why)  # fmt: skip
        elif isinstance(p, DrillFinished) and p.drill_id in rows:
            at_us = rows[p.drill_id].at_us
            rows[p.drill_id] = DrillRow(
                p.drill_id, p.pool_id, at_us, "passed" if p.passed else "failed",
                p.reclaimed_count, p.drained_count, p.drain_verified_count,
                p.notice_to_drain_p99_ms, p.replaced_in_time_count, p.cost_eur_micros,
                tuple(p.failures),
            )  # fmt: skip
    return sorted(rows.values(), key=lambda r: r.at_us)


def cells(row: DrillRow) -> tuple[str, ...]:
    when = dt.datetime.fromtimestamp(row.at_us / 1e6, dt.UTC).strftime("%m-%d %H:%M")
    p99 = "-" if row.notice_to_drain_p99_ms is None else f"{row.notice_to_drain_p99_ms:,}"
    return (row.drill_id[:8], row.pool_id, when, row.result, f"{row.reclaimed}",
            f"{row.drained}/{row.verified}", p99, f"{row.replaced_in_time}",
            f"{row.cost_eur_micros / 1e6:,.2f}")  # fmt: skip


def as_json(rows: list[DrillRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def notes(rows: list[DrillRow], width: int = 80) -> list[str]:
    """Each failure or refusal, wrapped to `width`, for under the table."""
    return [
        line
        for r in rows
        for why in r.why
        for line in textwrap.wrap(
            f"{r.drill_id[:8]} {r.result}: {why}", width, subsequent_indent="  "
        )
    ]


def describe(outcome: DrillOutcome) -> list[str]:
    """What a run did, one line each, in the order it happened."""
    new = outcome.started.drill_id if outcome.started is not None else None
    lines = [_finished(f) for f in outcome.finished if f.drill_id != new]
    if outcome.started is not None:
        s = outcome.started
        lines.append(f"drill {s.drill_id} started: {len(s.instance_ids)} of "
                     f"{s.pool_instance_count} instances of {s.pool_id} reclaimed with "
                     f"{s.notice_s} s notice")  # fmt: skip
    lines += [f"reclaim refused by the provider: {e}" for e in outcome.reclaim_errors]
    lines += [_finished(f) for f in outcome.finished if f.drill_id == new]
    if outcome.refused is not None:
        lines.append(f"drill refused ({outcome.refused.rule}): {outcome.refused.reason}")
    if outcome.already_ran is not None and outcome.started is None:
        lines.append(f"drill {outcome.already_ran} already ran today")
    return lines or ["nothing to do: no drill due, none to finish"]


def _finished(f: DrillFinished) -> str:
    verdict = "passed" if f.passed else "FAILED: " + "; ".join(f.failures)
    p99 = "-" if f.notice_to_drain_p99_ms is None else f"{f.notice_to_drain_p99_ms:,} ms"
    return (f"drill {f.drill_id} finished ({f.reclaimed_count} reclaimed, notice to drain p99 "
            f"{p99}, {f.replaced_in_time_count} replaced in time): {verdict}")  # fmt: skip
