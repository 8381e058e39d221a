"""Which log a projection was built from, and which region it holds.

Each projection records, beside its offsets, the identity of every topic it has consumed
(`EventLog.topic_id`: a topic deleted and made again under its name has another). A catch-up
checks the log against it before it reads: a topic replaced since, or a stored position past a
partition's end, means the log was replaced (say by `spotcap demo --fresh` in the same home), and
going on would add a new history to an old state; it refuses with `LogReplacedError` and the
rebuild that mends it. The topics' names carry their region, so every command that opens a
store checks that the store holds the region it asks about (`RegionMismatchError`): a home holds
one region, and another region's data is never shown as this one's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from schemas.topics import LOGICAL_NAMES

if TYPE_CHECKING:  # the stores' libraries load where a store is used (failures import this)
    from projections.ledger.store import LedgerStore
    from projections.postgres.connection import Connection

TopicIds = Mapping[str, str | None]


class LogReplacedError(RuntimeError):
    """The log a projection was built from was replaced; the message says how to rebuild."""


class RegionMismatchError(RuntimeError):
    """A store holds another region than the one asked about; the message says which."""


def fleet_topics(conn: Connection, projection: str) -> dict[str, str | None]:
    rows = conn.execute(
        "SELECT topic, topic_id FROM consumed_topics WHERE projection = %s", (projection,)
    ).fetchall()
    return {str(t): (str(i) if i is not None else None) for t, i in rows}


def hold_fleet_topics(conn: Connection, projection: str, ids: TopicIds) -> None:
    with conn.transaction():
        for topic, identity in ids.items():
            conn.execute(
                "INSERT INTO consumed_topics (projection, topic, topic_id) VALUES (%s, %s, %s) "
                "ON CONFLICT (projection, topic) DO UPDATE SET topic_id = EXCLUDED.topic_id",
                (projection, topic, identity),
            )


def ledger_topics(store: LedgerStore, projection: str) -> dict[str, str | None]:
    from projections.ledger.store import table_names

    if "consumed_topics" not in table_names(store):
        return {}
    rows = store.query(
        "SELECT topic, topic_id FROM consumed_topics FINAL WHERE projection_name = {p:String}",
        {"p": projection},
    )
    return {str(r["topic"]): (str(r["topic_id"]) or None) for r in rows}


def hold_ledger_topics(store: LedgerStore, projection: str, ids: TopicIds) -> None:
    import pyarrow as pa

    now_us = time.time_ns() // 1000
    topics = sorted(ids)
    columns = {
        "projection_name": pa.array([projection] * len(topics), pa.string()),
        "topic": pa.array(topics, pa.string()),
        "topic_id": pa.array([ids[t] or "" for t in topics], pa.string()),
        "recorded_at": pa.array([now_us] * len(topics), pa.timestamp("us", tz="UTC")),
    }
    store.insert("consumed_topics", pa.table(columns))


def regions_of(topics: Mapping[str, object]) -> set[str]:
    """The regions whose topics a projection has consumed (a topic is ``<region>.<logical>``)."""
    return {t.rpartition(".")[0] for t in topics if t.rpartition(".")[2] in LOGICAL_NAMES}


def check_region(held: Mapping[str, object], region: str, store: str) -> None:
    """`RegionMismatchError` when `store` (in words) holds another region than `region`."""
    regions = regions_of(held)
    if regions and region not in regions:
        holds = ", ".join(sorted(regions))
        raise RegionMismatchError(
            f"{store} holds region {holds}, not {region}: give --region {min(regions)}, or use "
            f"a home (or servers) of region {region}'s own"
        )


def check_log(
    held: TopicIds,
    current: TopicIds,
    stored: Mapping[tuple[str, int], int],
    ends: Mapping[str, Mapping[int, int]],
    *,
    projection: str,
    rebuild: str,
) -> None:
    """`LogReplacedError` when the log is not the one `projection` was built from: a topic it
    consumed has another identity now (`current`), or a stored position lies past its
    partition's end (`ends`). `rebuild` names the command that mends it."""
    replaced = sorted(t for t, i in held.items() if t in current and current[t] != i)
    beyond = sorted(
        f"{t}[{p}]" for (t, p), at in stored.items() if t in ends and at > ends[t].get(p, 0)
    )
    if replaced or beyond:
        what = (
            f"{', '.join(replaced)} {'was' if len(replaced) == 1 else 'were'} made again since"
            if replaced
            else f"it has applied records past the end of {', '.join(beyond[:3])}"
        )
        raise LogReplacedError(
            f"the {projection} was built from another log: {what} (the log was replaced, for "
            f"instance by `spotcap demo --fresh`); nothing was applied: rebuild it from this log "
            f"with `{rebuild}`"
        )


__all__ = [
    "LogReplacedError",
    "RegionMismatchError",
    "check_log",
    "check_region",
    "fleet_topics",
    "hold_fleet_topics",
    "hold_ledger_topics",
    "ledger_topics",
    "regions_of",
]
