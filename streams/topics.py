"""The topics of a region as specs for Kafka and the embedded log, from the one table.

The table itself (names, keys, partitions, retention, compaction, docs) is `schemas.topics`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from schemas.topics import (
    DAY_MS,
    EVENT_RETENTION_MS,
    EVENT_TOPICS,
    LOGICAL_NAMES,
    LOGICAL_TOPICS,
    LogicalTopic,
    topic_name,
)
from streams.log import EventLog, TopicChange, TopicSpec, UnknownTopicError
from streams.runs import RunMarker

__all__ = [
    "DAY_MS",
    "EVENT_RETENTION_MS",
    "EVENT_TOPICS",
    "LOGICAL_NAMES",
    "LOGICAL_TOPICS",
    "LogicalTopic",
    "applied_rows",
    "end_offset_rows",
    "end_offsets_json",
    "physical_name",
    "region_end_offsets",
    "region_topics",
    "topic_name",
]


def region_topics(region: str, partitions_scale: float = 1.0) -> list[TopicSpec]:
    """Every topic of `region`; `partitions_scale` shrinks partition counts for tests."""
    return [
        TopicSpec(
            name=topic_name(region, topic.name),
            partitions=max(1, round(topic.partitions * partitions_scale)),
            retention_ms=topic.retention_ms,
            compacted=topic.compacted,
            doc=topic.doc,
            extra_config={"min.compaction.lag.ms": "0"} if topic.compacted else {},
        )
        for topic in LOGICAL_TOPICS
    ]


def physical_name(region: str, name: str) -> str:
    """A topic's physical name: a logical name (`lifecycle`) gets `region`'s prefix; any other
    name is taken as physical already."""
    return topic_name(region, name) if name in LOGICAL_NAMES else name


def region_end_offsets(log: EventLog, region: str) -> dict[str, dict[int, int] | None]:
    """Each topic of `region`: the next offset each partition writes, or None when the log
    has no such topic (a log that cannot be reached raises: it is an error, not "missing")."""
    ends: dict[str, dict[int, int] | None] = {}
    for spec in region_topics(region):
        try:
            ends[spec.name] = log.end_offsets(spec.name)
        except UnknownTopicError:
            ends[spec.name] = None
    return ends


EndOffsets = Mapping[str, Mapping[int, int] | None]
"""Each topic of a region: its partitions' end offsets, or None when it does not exist."""


def applied_rows(
    region: str, changes: Iterable[TopicChange]
) -> list[tuple[str, str, str, str, str, str]]:
    """Each applied topic of `region` for people: (topic, partitions, retention, cleanup,
    action, detail)."""
    specs = {s.name: s for s in region_topics(region)}
    rows = []
    for change in changes:
        spec = specs[change.name]
        retention = "forever" if spec.retention_ms < 0 else f"{spec.retention_ms // DAY_MS} d"
        cleanup = "compact" if spec.compacted else "delete"
        rows.append(
            (change.name, str(spec.partitions), retention, cleanup, change.action, change.detail)
        )
    return rows


def end_offsets_json(ends_of: EndOffsets, last_run: RunMarker | None) -> list[dict[str, Any]]:
    """Each topic as JSON: whether it exists, its partitions, records and end offsets, and
    `last_run` (the last run writing the region, `streams.runs`)."""
    run = None if last_run is None else last_run.as_json()
    return [
        {
            "topic": topic,
            "exists": ends is not None,
            "partitions": len(ends or {}),
            "records": sum((ends or {}).values()),
            "end_offsets": {str(p): o for p, o in (ends or {}).items()},
            "last_run": run,
        }
        for topic, ends in ends_of.items()
    ]


def end_offset_rows(ends_of: EndOffsets) -> list[tuple[str, str, str, str]]:
    """Each topic for people: (topic, partitions, the end offsets' sum, each partition's end
    offset); a missing topic says how to create it."""
    return [
        (
            topic,
            str(len(ends)),
            f"{sum(ends.values()):,}",
            " ".join(f"{o:,}" for o in ends.values()),
        )
        if ends is not None
        else (topic, "-", "missing: run `spotcap topics apply`", "")
        for topic, ends in ends_of.items()
    ]
