"""The topics of a region as specs for Kafka and the embedded log, from the one table.

The table itself (names, keys, partitions, retention, compaction, docs) is `schemas.topics`.
"""

from __future__ import annotations

from schemas.topics import (
    DAY_MS,
    EVENT_RETENTION_MS,
    EVENT_TOPICS,
    LOGICAL_NAMES,
    LOGICAL_TOPICS,
    LogicalTopic,
    topic_name,
)
from streams.log import EventLog, TopicSpec, UnknownTopicError

__all__ = [
    "DAY_MS",
    "EVENT_RETENTION_MS",
    "EVENT_TOPICS",
    "LOGICAL_NAMES",
    "LOGICAL_TOPICS",
    "LogicalTopic",
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
