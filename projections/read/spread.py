"""How a workload's live capacity spreads over pools, halls and correlation groups (ADR-08: no
pool above its cap share, no correlation group above its own), and its fallback decisions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.rows import dict_row

from projections.postgres.connection import Connection

LIVE_STATES = ("running", "advised", "noticed", "draining", "drained")
LEVELS = ("pool", "hall", "correlation_group")


@dataclass(frozen=True, slots=True)
class Caps:
    """The planner's caps, as shares of the workload's live reclaimable vCPU (the deciders'
    settings; the composition root passes them in)."""

    pool_share: float
    group_share: float

    def of(self, level: str) -> float | None:
        return {"pool": self.pool_share, "correlation_group": self.group_share}.get(level)


_SPREAD = """
SELECT p.pool_id AS pool, p.hall, p.correlation_group, i.purchase_model,
       sum(i.vcpu)::bigint AS vcpu, count(*) AS instances
FROM instances i JOIN pools p ON p.pool_id = i.pool_id
WHERE i.workload_id = %s AND i.state = ANY(%s)
GROUP BY 1, 2, 3, 4
"""


def spread(conn: Connection, workload: str, caps: Caps) -> list[dict[str, Any]]:
    """Per level (pool, hall, correlation group) and key: the live vCPU by purchase model, the
    reclaimable share and the cap it is held to (None where no cap applies), largest first."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_SPREAD, (workload, list(LIVE_STATES))).fetchall()
    reclaimable_total = sum(int(r["vcpu"]) for r in rows if r["purchase_model"] == "reclaimable")
    out: list[dict[str, Any]] = []
    for level in LEVELS:
        by_key: dict[str, dict[str, int]] = {}
        for r in rows:
            key = str(r[level] or "unknown")
            sums = by_key.setdefault(key, {"reclaimable": 0, "other": 0, "instances": 0})
            model = "reclaimable" if r["purchase_model"] == "reclaimable" else "other"
            sums[model] += int(r["vcpu"])
            sums["instances"] += int(r["instances"])
        cap = caps.of(level)
        level_rows: list[dict[str, Any]] = []
        for key, sums in by_key.items():
            share = sums["reclaimable"] / reclaimable_total if reclaimable_total else 0.0
            level_rows.append({
                "level": level, "key": key, "instances": sums["instances"],
                "reclaimable_vcpu": sums["reclaimable"], "other_vcpu": sums["other"],
                "reclaimable_share": round(share, 6), "cap_share": cap,
                "over_cap": cap is not None and share > cap + 1e-9,
            })  # fmt: skip
        level_rows.sort(
            key=lambda r: (-int(r["reclaimable_vcpu"]), -int(r["other_vcpu"]), r["key"])
        )
        out.extend(level_rows)
    return out


def fallbacks(conn: Connection, *, workload: str | None = None, limit: int) -> list[dict[str, Any]]:
    """Fallback decisions (within the floor, within the cap, escalated), newest first."""
    where = "WHERE workload_id = %s" if workload is not None else ""
    params: list[Any] = [workload] if workload is not None else []
    with conn.cursor(row_factory=dict_row) as cur:
        return list(
            cur.execute(
                "SELECT event_id, workload_id, kind, vcpu, spend_eur_micros, cap_eur_micros,"
                f" approver, reason, occurred_at FROM fallbacks {where}"
                " ORDER BY occurred_at DESC, event_id LIMIT %s",
                [*params, limit],
            ).fetchall()
        )
