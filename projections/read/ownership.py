"""Whose workload a thing is: the read side of the workload owner's role (`console.roles`).

A workload belongs to the team its contract names (`workloads.owner`); an instance to its
workload's team; an event to the team of the workload or the instance it is keyed by. Anything
else (a pool, a ranking, a wave) belongs to no team: only fleet-wide readers see it.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from projections.postgres.connection import Connection


def owned_by(conn: Connection, workload: str, teams: Collection[str]) -> bool:
    """Whether `workload` exists and one of `teams` owns it."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM workloads WHERE workload_id = %s AND owner = ANY(%s))",
        (workload, list(teams)),
    ).fetchone()
    return bool(row and row[0])


def subject_owned_by(conn: Connection, ident: str, teams: Collection[str]) -> bool:
    """Whether `ident` (an event id, an instance id or a workload id, as `why` takes it) is, or
    concerns, a workload one of `teams` owns."""
    try:
        event_id: str | None = str(uuid.UUID(ident))
    except ValueError:
        event_id = None
    row = conn.execute(
        "WITH subject(k) AS ("
        "  SELECT %(ident)s::text"
        "  UNION SELECT key FROM events WHERE event_id = %(event)s::uuid"
        "), belongs(w) AS ("
        "  SELECT k FROM subject"
        "  UNION SELECT i.workload_id FROM instances i JOIN subject s ON i.instance_id = s.k"
        ") SELECT EXISTS (SELECT 1 FROM workloads WHERE workload_id IN (SELECT w FROM belongs)"
        "  AND owner = ANY(%(teams)s))",
        {"ident": ident, "event": event_id, "teams": list(teams)},
    ).fetchone()
    return bool(row and row[0])
