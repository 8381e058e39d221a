"""The last hall-wide wave: its notices, drains, losses and replacements over event time.

A wave is what the provider tags with one correlation id (a hall's reclaimable pools reclaimed
together: advisories, notices, losses). Drains and replacements carry no correlation id (the
agent and the orchestrator act per instance), so they join the wave through the instances it
reclaimed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from projections.postgres.connection import Connection
from projections.read.rows import utc_text

# What the timeline shows, by event type: the four stages of a wave a person follows.
STAGES: dict[str, str] = {
    "advisory": "advisory",
    "notice_received": "notice",
    "drain_started": "drain",
    "drain_completed": "drain",
    "instance_lost": "loss",
    "replacement_requested": "replacement",
}


@dataclass(frozen=True, slots=True)
class WaveEvent:
    at: datetime
    stage: str
    event_type: str
    instance_id: str
    event_id: str


@dataclass(frozen=True, slots=True)
class Wave:
    wave_id: str
    hall: str | None  # the hall most of its instances were in
    events: list[WaveEvent]  # oldest first

    @property
    def counts(self) -> dict[str, int]:
        seen = Counter(e.stage for e in self.events)
        return {stage: seen[stage] for stage in dict.fromkeys(STAGES.values())}

    def as_json(self) -> dict[str, Any]:
        return {
            "wave_id": self.wave_id,
            "hall": self.hall,
            "started_at": utc_text(self.events[0].at) if self.events else None,
            "ended_at": utc_text(self.events[-1].at) if self.events else None,
            "counts": self.counts,
            "events": [
                {"at": utc_text(e.at), "stage": e.stage, "event_type": e.event_type,
                 "instance_id": e.instance_id, "event_id": e.event_id}
                for e in self.events
            ],
        }  # fmt: skip


_LAST_WAVE = (
    "SELECT correlation_id FROM events WHERE correlation_id IS NOT NULL"
    " AND event_type = ANY(%s) ORDER BY occurred_at DESC, event_id DESC LIMIT 1"
)
# The wave's own events, then the drains and replacements of the instances it reclaimed (from
# the wave's start on: an instance's earlier drains belong to earlier reclaims).
_EVENTS = """
WITH own AS (
    SELECT occurred_at, event_type, payload->>'instance_id' AS instance_id, event_id
    FROM events WHERE correlation_id = %(wave)s AND event_type = ANY(%(stages)s)
), reclaimed AS (
    SELECT DISTINCT instance_id FROM own WHERE instance_id IS NOT NULL
), since AS (SELECT min(occurred_at) AS at FROM own)
SELECT * FROM own
UNION ALL
SELECT e.occurred_at, e.event_type, e.payload->>'instance_id', e.event_id FROM events e, since
WHERE e.event_type IN ('drain_started', 'drain_completed') AND e.occurred_at >= since.at
  AND e.payload->>'instance_id' IN (SELECT instance_id FROM reclaimed)
UNION ALL
SELECT e.occurred_at, e.event_type, e.payload->>'replaces_instance_id', e.event_id
FROM events e, since
WHERE e.event_type = 'replacement_requested' AND e.occurred_at >= since.at
  AND e.payload->>'replaces_instance_id' IN (SELECT instance_id FROM reclaimed)
ORDER BY 1, 2, 4
"""
_HALL = """
SELECT p.hall FROM events e JOIN pools p ON p.pool_id = e.payload->>'pool_id'
WHERE e.correlation_id = %s AND p.hall IS NOT NULL
GROUP BY p.hall ORDER BY count(*) DESC, p.hall LIMIT 1
"""


def last_wave(conn: Connection) -> Wave | None:
    """The wave whose last event is the latest, or None when the history has none."""
    found = conn.execute(_LAST_WAVE, (list(STAGES),)).fetchone()
    if found is None:
        return None
    wave_id = str(found[0])
    rows = conn.execute(_EVENTS, {"wave": wave_id, "stages": list(STAGES)}).fetchall()
    events = [
        WaveEvent(at, STAGES[str(kind)], str(kind), str(instance or ""), str(event_id))
        for at, kind, instance, event_id in rows
    ]
    hall = conn.execute(_HALL, (wave_id,)).fetchone()
    return Wave(wave_id, str(hall[0]) if hall else None, events)
