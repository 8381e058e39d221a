"""The topics of a region (DESIGN.md §3), the same for Kafka and the embedded log.

Names are region-prefixed (``eu-west.lifecycle``). Events are retained 400 days; the schema
topic holds current state (one schema per fingerprint) and is compacted.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.log import TopicSpec

DAY_MS = 86_400_000
EVENT_RETENTION_MS = 400 * DAY_MS


@dataclass(frozen=True, slots=True)
class LogicalTopic:
    name: str
    partitions: int
    key: str
    doc: str
    compacted: bool = False


LOGICAL_TOPICS: tuple[LogicalTopic, ...] = (
    LogicalTopic(
        "lifecycle",
        12,
        "instance_id",
        "Instance lifecycle: launches, advisories, notices, drains, checkpoints, losses; "
        "ordered per instance.",
    ),
    LogicalTopic("market", 6, "pool_id", "Rate cards, forward capacity and reservations."),
    LogicalTopic("demand", 6, "workload_id", "Contracts and capacity claims per workload."),
    LogicalTopic(
        "decisions",
        6,
        "pool_id, workload_id or region",
        "Rankings, exclusions, placements, fallbacks, actuation.",
    ),
    LogicalTopic("usage", 6, "workload_id", "Usage intervals and wasted work, for the ledger."),
    LogicalTopic(
        "deadletter", 3, "origin topic", "Records no processor could read, with their reason."
    ),
    LogicalTopic(
        "schemas",
        1,
        "fingerprint",
        "Writer schemas by fingerprint, so older readers can resolve newer records.",
        compacted=True,
    ),
)

LOGICAL_NAMES = frozenset(t.name for t in LOGICAL_TOPICS)


def topic_name(region: str, logical: str) -> str:
    """The physical topic name of a logical topic in `region`."""
    if logical not in LOGICAL_NAMES:
        raise KeyError(f"no topic {logical!r}; the topics are {sorted(LOGICAL_NAMES)}")
    return f"{region}.{logical}"


def region_topics(region: str, partitions_scale: float = 1.0) -> list[TopicSpec]:
    """Every topic of `region`; `partitions_scale` shrinks partition counts for tests."""
    specs = []
    for topic in LOGICAL_TOPICS:
        extra = {"min.compaction.lag.ms": "0"} if topic.compacted else {}
        specs.append(
            TopicSpec(
                name=topic_name(region, topic.name),
                partitions=max(1, round(topic.partitions * partitions_scale)),
                retention_ms=-1 if topic.compacted else EVENT_RETENTION_MS,
                compacted=topic.compacted,
                doc=topic.doc,
                extra_config=extra,
            )
        )
    return specs
