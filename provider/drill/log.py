"""The region's events a drill reads, and the writing of its own, through the log seam."""

from __future__ import annotations

from pathlib import Path

from provider.base import CapacityProvider
from provider.drill.plan import due, load_plan
from provider.drill.run import DrillOutcome, DrillRequest, run_plan
from schemas.codec import Codec
from schemas.events import Envelope
from streams.log import EventLog
from streams.merged import MergedHistory
from streams.topics import region_topics, topic_name
from streams.writer import publish

TOPICS = ("lifecycle", "market", "decisions", "usage")
"""Notices, drains, launches and losses; rate cards; breakers, replacements and the drills'
own events; wasted work."""


def region_events(log: EventLog, codec: Codec, region: str) -> list[Envelope]:
    """Every event of the drill's topics, in the merged history's order (the whole retention:
    a daily job's read; see docs/operating.md for its cost)."""
    wanted = {topic_name(region, t) for t in TOPICS}
    log.apply_topics([spec for spec in region_topics(region) if spec.name in wanted])
    history = MergedHistory(log, codec, region, TOPICS, poll_records=2000)
    try:
        return [decoded.envelope for decoded in history]
    finally:
        history.close()


def write_events(log: EventLog, codec: Codec, region: str, events: list[Envelope]) -> None:
    """Write the drill's events and wait until the log has them (before any reclaim call)."""
    publish(log, codec, region, events)


def drill_in_log(
    provider: CapacityProvider,
    log: EventLog,
    codec: Codec,
    asked: tuple[str | None, float, Path],
    wait: bool = False,
) -> DrillOutcome:
    """`run_plan` over the log: `asked` is (pool, share, home): the pool when given, else the
    entries of the schedule `<home>/drills.yaml` due at the provider's time (none without the
    file), and in any case the drills due to finish are finished."""
    pool, share, home = asked
    plan = home / "drills.yaml"
    region = provider.region
    requests = (
        [DrillRequest(pool, share)]
        if pool
        else due(load_plan(plan), provider.now_us(), region)
        if plan.exists()
        else []
    )
    return run_plan(
        provider,
        lambda: region_events(log, codec, region),
        lambda events: write_events(log, codec, region, events),
        requests,
        wait=wait,
    )
