"""The drill schedule: which pools are drilled each day, how much, and when (a YAML file).

    drills:
      - pool: c1.large.h1.reclaimable
        share: 0.05          # of the pool's running instances, at most 0.25
        at: "10:30"          # UTC, daily; due from then until the day ends
        notice_s: 120        # optional, at least 120

`due(plan, at_us, region)` gives the entries due at `at_us` as requests whose drill id is
derived from (region, pool, time, day): a cron job that runs `spotcap drill run --plan FILE`
every few minutes starts each entry once a day (a run that finds the day's drill started
does nothing; a refused one is asked again on the next run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provider.base import MIN_NOTICE_S
from provider.drill.run import DrillRequest
from schemas.ids import derived_event_id

DAY_US = 86_400_000_000
_AT = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


class DrillPlanError(ValueError):
    """The schedule file cannot be used; the message says which entry and how to fix it."""


@dataclass(frozen=True, slots=True)
class PlanEntry:
    pool_id: str
    share_ratio: float
    at_s: int  # seconds after midnight UTC
    notice_s: int = MIN_NOTICE_S


def load_plan(path: Path) -> list[PlanEntry]:
    try:
        data: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise DrillPlanError(f"cannot read the drill schedule {path}: {error}") from None
    entries = data.get("drills") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise DrillPlanError(f"{path} has no 'drills:' list (see docs/operating.md)")
    plan = []
    for n, entry in enumerate(entries, 1):
        where = f"{path}, drill {n}"
        if not isinstance(entry, dict) or not isinstance(entry.get("pool"), str):
            raise DrillPlanError(f"{where}: give 'pool', 'share' and 'at'")
        at = _AT.match(str(entry.get("at", "")))
        if at is None:
            raise DrillPlanError(f"{where}: 'at' is a UTC time of day, e.g. \"10:30\"")
        share = entry.get("share")
        notice_s = entry.get("notice_s", MIN_NOTICE_S)
        if not isinstance(share, (int, float)) or not 0 < share <= 0.25:
            raise DrillPlanError(f"{where}: 'share' is a number in (0, 0.25]")
        if not isinstance(notice_s, int) or notice_s < MIN_NOTICE_S:
            raise DrillPlanError(f"{where}: 'notice_s' is a whole number >= {MIN_NOTICE_S}")
        at_s = int(at.group(1)) * 3600 + int(at.group(2)) * 60
        plan.append(PlanEntry(entry["pool"], float(share), at_s, notice_s))
    return plan


def due(plan: list[PlanEntry], at_us: int, region: str) -> list[DrillRequest]:
    """The entries due at `at_us` (their time of day reached), in the file's order."""
    day = at_us // DAY_US
    since_midnight_s = (at_us % DAY_US) // 1_000_000
    out = []
    for e in plan:
        if since_midnight_s >= e.at_s:
            name = f"{e.pool_id} at {e.at_s // 3600:02d}:{e.at_s % 3600 // 60:02d}"
            drill_id = derived_event_id(f"drill/{region}/{name}/day-{day}", "drill_planned")
            out.append(DrillRequest(e.pool_id, e.share_ratio, e.notice_s, f"schedule {name}",
                                    drill_id))  # fmt: skip
    return out
