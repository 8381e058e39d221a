"""The fleet state's bare loop (`bench/fleet_bare.py`: fastavro and psycopg alone, its merge
SQL written in the bench) writes the projection's rows, table by table, on a real PostgreSQL:
the check `bench/projections.py` makes every round (`fleet_bare.checksums`) holds on a small
simulated region with two events of every type it reads besides, in batches small enough that rows
merge into stored ones; and the check sees a row that differs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import fleet_bare
from infra import servers
from projections.postgres.connection import Connection
from projections.postgres.writer import FLEET_TOPICS, FleetWriter
from schemas.catalogue import event_types
from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope
from streams.log import Record, new_record
from tests.conftest import fleet_schema
from tests.factories import example_envelope
from tests.projection_support import sim_events

BATCH = 97  # small, so that most state rows merge into stored ones


def _history() -> list[tuple[Origin, Envelope]]:
    """The simulated region's events, then two of every event type the projection reads, each
    at its topic's next offset."""
    events = list(sim_events(0.25, 30))
    offsets: dict[str, int] = {}
    for o, _ in events:
        offsets[o.topic] = max(offsets.get(o.topic, 0), o.offset + 1)
    for t in event_types():
        if t.topic not in FLEET_TOPICS:
            continue
        for seed in (0, 1):
            e = example_envelope(t.name, seed, region="sim")
            topic = f"sim.{t.topic}"
            offset = offsets.get(topic, 0)
            offsets[topic] = offset + 1
            events.append((Origin(topic, 0, offset), e))
    return events


@pytest.fixture
def other(postgres: servers.Server) -> Iterator[Connection]:
    yield from fleet_schema(postgres, "b")


def test_the_bare_loop_writes_the_projections_rows(fleet: Connection, other: Connection) -> None:
    codec = Codec()
    history = _history()
    records: list[Record] = [
        new_record(o.topic, o.partition, o.offset, e.key.encode(), codec.encode(e),
                   e.occurred_at // 1000, ())
        for o, e in history
    ]  # fmt: skip
    writer = FleetWriter(fleet)
    for i in range(0, len(history), BATCH):
        rows = history[i : i + BATCH]
        positions: dict[tuple[str, int], int] = {}
        for o, _ in rows:
            positions[(o.topic, o.partition)] = max(positions.get((o.topic, o.partition), 0),
                                                    o.offset + 1)  # fmt: skip
        writer.write(rows, positions)
    bare = fleet_bare.BareFleet(other)
    for i in range(0, len(records), BATCH):
        bare.write(records[i : i + BATCH])
    project, plain = fleet_bare.checksums(fleet), fleet_bare.checksums(other)
    assert plain == project
    # Every table the bench compares holds rows here (the comparison is not of empty tables).
    empty = sorted(name for name, (n, _) in plain.items() if n == 0)
    assert empty == [], f"no rows in {empty}"
    # And the check sees one changed value.
    other.execute("UPDATE instances SET state = 'requested' WHERE state = 'lost'")
    changed = fleet_bare.checksums(other)
    assert changed["instances"] != project["instances"]
    assert {k: v for k, v in changed.items() if k != "instances"} == {
        k: v for k, v in project.items() if k != "instances"
    }
