"""The topic table (DESIGN.md §3): the one definition of every logical topic of a region.

Each row names the topic, what it is keyed by, its partitions, its retention and whether it is
compacted, and says what it holds. `streams.topics` turns the rows into topic specs for Kafka
and the embedded log; the catalogue checks that every event names one of these topics; the
generator writes the docs from the same rows. Physical names are region-prefixed
(``eu-west.lifecycle``).
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 86_400_000
EVENT_RETENTION_MS = 400 * DAY_MS  # events are kept 400 days (DESIGN.md §8)


@dataclass(frozen=True, slots=True)
class LogicalTopic:
    name: str
    partitions: int
    key: str  # what the record key is
    doc: str
    compacted: bool = False  # holds current state: compacted, kept forever
    events: bool = True  # carries catalogue events (the schemas topic carries writer schemas)

    @property
    def retention_ms(self) -> int:
        """-1 (forever) for a compacted topic, else the event retention."""
        return -1 if self.compacted else EVENT_RETENTION_MS


LOGICAL_TOPICS: tuple[LogicalTopic, ...] = (
    LogicalTopic(
        "lifecycle",
        12,
        "instance_id",
        "What happens to instances: launches, deletions, advisories, notices, drains, "
        "checkpoints and losses. Keyed by instance, so each instance's story is in order.",
    ),
    LogicalTopic(
        "market",
        6,
        "pool_id",
        "What the private cloud offers: the pool catalogue, rate cards, forward capacity and "
        "committed reservations. Keyed by pool.",
    ),
    LogicalTopic(
        "demand",
        6,
        "workload_id",
        "What workloads declare and ask for: contracts, capacity claims, and approvers' answers "
        "to escalated fallback. Keyed by workload.",
    ),
    LogicalTopic(
        "decisions",
        6,
        "pool_id, workload_id or region",
        "What the deciders and the actuator decided: rankings, exclusions, placements, "
        "replacements, fallbacks, throttling and breakers. Keyed by pool, workload or region.",
    ),
    LogicalTopic(
        "usage",
        6,
        "workload_id",
        "What was used and what was wasted, for the ledger. Keyed by workload.",
    ),
    LogicalTopic(
        "deadletter",
        3,
        "origin topic",
        "Input no processor could read, kept whole with its reason.",
    ),
    LogicalTopic(
        "audit",
        3,
        "action_id",
        "Capacity actions (launches, terminations, placements, replacements, fallback spend) as "
        "JSON audit records, relayed from the fleet state's outbox (ADR-25). Keyed by action id: "
        "a resend after a relay crash carries the same id.",
        events=False,
    ),
    LogicalTopic(
        "schemas",
        1,
        "fingerprint",
        "Writer schemas by fingerprint, so older readers can resolve newer records.",
        compacted=True,
        events=False,
    ),
)

BY_NAME: dict[str, LogicalTopic] = {t.name: t for t in LOGICAL_TOPICS}
LOGICAL_NAMES = frozenset(BY_NAME)
EVENT_TOPICS: tuple[str, ...] = tuple(t.name for t in LOGICAL_TOPICS if t.events)


def topic_name(region: str, logical: str) -> str:
    """The physical topic name of a logical topic in `region`."""
    if logical not in BY_NAME:
        raise KeyError(f"no topic {logical!r}; the topics are {sorted(LOGICAL_NAMES)}")
    return f"{region}.{logical}"
