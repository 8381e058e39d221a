"""Events and helpers for the projection tests: a small simulated region, hand-made instance
stories, and table dumps to compare two databases row for row."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from projections.postgres.connection import Connection
from schemas.errors import Origin
from schemas.events import Envelope, Payload, PoolRanked, RateCard
from schemas.ids import derived_event_id
from sim.clock import HOUR_US
from sim.region import RegionSim, SimConfig

T0_US = 1_796_000_000_000_000  # 2026-11-30T00:00Z-ish, inside every retention window
SECOND_US = 1_000_000

Positioned = tuple[Origin, Envelope]


@functools.cache
def sim_events(days: float = 0.25, workloads: int = 30, seed: int = 7) -> tuple[Positioned, ...]:
    """A simulated region's events, each at a position of its topic (one partition a topic),
    with a scorer's ranking of a pool after every fourth rate card (`ranked_after`: the
    simulator has no deciders, and rankings are most of the fleet state's journal)."""
    sim = RegionSim(SimConfig(seed=seed, days=days, workloads=workloads))
    offsets: dict[str, int] = {}
    out: list[Positioned] = []
    cards = 0
    for batch in sim.run(HOUR_US):
        for e in batch:
            made = [e]
            if isinstance(e.payload, RateCard):
                cards += 1
                if cards % 4 == 0:
                    made.append(ranked_after(e, cards))
            for m in made:
                topic = f"{m.region}.{m.payload.TOPIC}"
                offset = offsets.get(topic, 0)
                offsets[topic] = offset + 1
                out.append((Origin(topic, 0, offset), m))
    return tuple(out)


def ranked_after(card: Envelope, n: int) -> Envelope:
    """A ranking of the rate card's pool, caused by it (as the scorer's decisions are by their
    last input), its score a float that JSON and PostgreSQL both have to keep exact."""
    p = card.payload
    assert isinstance(p, RateCard)
    return Envelope(
        event_id=derived_event_id(card.event_id, "pool_ranked"),
        event_type="pool_ranked",
        occurred_at=card.occurred_at,
        recorded_at=card.recorded_at + 1,
        region=card.region,
        key=p.pool_id,
        causation_id=card.event_id,
        correlation_id=card.correlation_id,
        producer="deciders/scorer",
        payload=PoolRanked(
            ranking_id=f"ranking-{card.occurred_at}",
            pool_id=p.pool_id,
            rank=1 + n % 5,
            pool_count=5,
            score=n / 7 - 3.25,
            available_vcpu=64 * (n % 9),
            observed_interruption_per_h=(n % 13) / 1000,
            price_per_vcpu_h_eur_micros=p.price_per_vcpu_h_eur_micros,
            correlation_group=f"g{n % 3}",
            window_s=3600,
            input_event_ids=(card.event_id,),
        ),
    )


def batches(events: Sequence[Positioned], size: int) -> list[list[Positioned]]:
    return [list(events[i : i + size]) for i in range(0, len(events), size)]


def next_positions(events: Sequence[Positioned]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for origin, _ in events:
        tp = (origin.topic, origin.partition)
        out[tp] = max(out.get(tp, 0), origin.offset + 1)
    return out


def event(
    payload: Payload,
    at_s: float,
    *,
    name: str,
    causation_id: str | None = None,
    correlation_id: str | None = None,
    region: str = "t",
) -> Envelope:
    """An envelope around `payload` at T0 + `at_s`, its id derived from `name`."""
    at = T0_US + int(at_s * SECOND_US)
    key_field = payload.KEY
    return Envelope(
        event_id=derived_event_id(f"test/{name}", payload.EVENT_TYPE),
        event_type=payload.EVENT_TYPE,
        occurred_at=at,
        recorded_at=at,
        region=region,
        key=str(getattr(payload, key_field, region)),
        causation_id=causation_id,
        correlation_id=correlation_id,
        producer="tests",
        payload=payload,
    )


def positioned(events: Sequence[Envelope]) -> list[Positioned]:
    offsets: dict[str, int] = {}
    out: list[Positioned] = []
    for e in events:
        topic = f"{e.region}.{e.payload.TOPIC}"
        offsets[topic] = offsets.get(topic, -1) + 1
        out.append((Origin(topic, 0, offsets[topic]), e))
    return out


FLEET_TABLES = (
    "events",
    "pools",
    "rankings",
    "exclusions",
    "readmissions",
    "instances",
    "instance_events",
    "workloads",
    "contracts",
    "claims",
    "placements",
    "placement_allocations",
    "replacements",
    "fallbacks",
    "fallback_returns",
    "fallback_reviews",
    "consumed_offsets",
)


def dump_fleet(conn: Connection, tables: Sequence[str] = FLEET_TABLES) -> dict[str, list[Any]]:
    """Every row of the fleet tables, sorted, as text (and the outbox without its send state)."""
    out: dict[str, list[Any]] = {}
    for table in tables:
        rows = conn.execute(f"SELECT t::text FROM {table} t").fetchall()
        out[table] = sorted(r[0] for r in rows)
    rows = conn.execute(
        "SELECT action_id::text, event_id::text, action, record::text FROM outbox"
    ).fetchall()
    out["outbox"] = sorted(map(tuple, rows))
    return out


def new_schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, read from /proc (none if it ended meanwhile)."""
    try:  # each thread lists the children it started
        tasks = os.listdir(f"/proc/{pid}/task")
        children = [
            c for t in tasks for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()
        ]
    except OSError:  # ended meanwhile
        return []
    return [pid, *(p for child in children for p in process_tree(int(child)))]


def ended(pid: int) -> bool:
    """Process `pid` has ended (gone, or a zombie not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
