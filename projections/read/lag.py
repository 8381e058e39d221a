"""How far each projection is behind the log: per projection and partition, the log's end
offset, the next offset the projection will apply (its stored position) and the difference.

The positions come from each projection's own store (written with its rows), the end offsets
from the log (`end_offsets_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from projections.ledger.store import LedgerError, LedgerStore, table_names
from projections.ledger.writer import LEDGER_PROJECTION, LEDGER_TOPICS
from projections.postgres.connection import Connection
from projections.postgres.writer import FLEET_PROJECTION, FLEET_TOPICS
from projections.stores import StoreError, Stores
from schemas.topics import topic_name
from streams.log import EventLog, UnknownTopicError

TopicPartition = tuple[str, int]
Positions = Mapping[TopicPartition, int]
PROJECTION_TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (FLEET_PROJECTION, FLEET_TOPICS),
    (LEDGER_PROJECTION, LEDGER_TOPICS),
)


def fleet_positions(conn: Connection) -> dict[TopicPartition, int]:
    """The fleet state's stored offsets (next offset to apply, per partition)."""
    rows = conn.execute(
        "SELECT topic, partition, next_offset FROM consumed_offsets WHERE projection = %s",
        (FLEET_PROJECTION,),
    ).fetchall()
    return {(str(t), int(p)): int(o) for t, p, o in rows}


def ledger_positions(store: LedgerStore) -> dict[TopicPartition, int]:
    """The ledger's stored offsets; none when the ledger was never materialised."""
    if "consumed_offsets" not in table_names(store):
        return {}
    rows = store.query(
        "SELECT topic, partition, next_offset FROM consumed_offsets FINAL"
        " WHERE projection_name = {p:String}",
        {"p": LEDGER_PROJECTION},
    )
    return {(str(r["topic"]), int(r["partition"])): int(r["next_offset"]) for r in rows}


def lag_rows(
    region: str,
    end_offsets: Callable[[str], Mapping[int, int] | None],
    positions: Mapping[str, Positions | None],
) -> list[dict[str, Any]]:
    """Rows of (projection, topic, partition, end_offset, next_offset, lag).

    `end_offsets(topic)` is None for a topic the log does not have (no rows); a projection
    whose positions are None (its store could not be read) has None for next_offset and lag:
    unknown, not behind.
    """
    rows: list[dict[str, Any]] = []
    for projection, topics in PROJECTION_TOPICS:
        stored = positions.get(projection)
        for logical in topics:
            name = topic_name(region, logical)
            ends = end_offsets(name)
            if ends is None:
                continue
            for partition, end in sorted(ends.items()):
                at = None if stored is None else stored.get((name, partition), 0)
                rows.append(
                    {
                        "projection": projection,
                        "topic": name,
                        "partition": partition,
                        "end_offset": end,
                        "next_offset": at,
                        "lag": None if at is None else max(end - at, 0),
                    }
                )
    return rows


def end_offsets_of(log: EventLog) -> Callable[[str], Mapping[int, int] | None]:
    """`topic -> {partition: end offset}`, None for a topic the log does not have."""

    def ends(topic: str) -> Mapping[int, int] | None:
        try:
            return log.end_offsets(topic)
        except UnknownTopicError:  # a log that cannot be reached is an error, not "absent"
            return None

    return ends


def read_lag(log: EventLog, region: str, conn: Connection, stores: Stores) -> list[dict[str, Any]]:
    """`lag_rows` of both projections: the fleet state's positions from `conn`, the ledger's
    from `stores` (unknown when the ledger cannot be opened: shown blank, not as behind)."""
    positions: dict[str, Positions | None] = {FLEET_PROJECTION: fleet_positions(conn)}
    try:
        positions[LEDGER_PROJECTION] = ledger_positions(stores.open_ledger())
    except (LedgerError, StoreError):
        positions[LEDGER_PROJECTION] = None
    return lag_rows(region, end_offsets_of(log), positions)
