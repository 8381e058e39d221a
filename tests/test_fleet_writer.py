"""The fleet-state writer against a real PostgreSQL: migrations, batches, duplicates, offsets,
out-of-order facts, and the same tables whatever the order of the batches."""

from __future__ import annotations

import json
import random
import threading
import time
from datetime import datetime

import psycopg
import pytest

from infra import servers
from projections.eventtime import stamp
from projections.postgres import schema as s
from projections.postgres.audit import ACTIONS
from projections.postgres.connection import (
    KEEPALIVES,
    Connection,
    FleetDatabaseError,
    FleetUnavailableError,
    connect,
)
from projections.postgres.lifecycle import IMPLIED_STATE
from projections.postgres.mappers import UNJOURNALED, journal_row, ranking_row
from projections.postgres.migrate import Migration, drop, migrate, migrations, status
from projections.postgres.schema import RANKED
from projections.postgres.writer import FLEET_TOPICS, FleetWriter, WriteResult
from schemas.errors import Origin
from schemas.events import (
    DrainCompleted,
    InstanceLaunched,
    InstanceLost,
    PoolExcluded,
    PoolReadmitted,
    ReplacementRequested,
)
from tests.projection_support import (
    T0_US,
    Positioned,
    batches,
    dump_fleet,
    event,
    new_schema,
    next_positions,
    positioned,
    sim_events,
)


def fleet_part(events: tuple[Positioned, ...]) -> list[Positioned]:
    topics = FLEET_TOPICS
    return [pe for pe in events if pe[0].topic.split(".")[1] in topics]


def write_all(conn: Connection, events: list[Positioned], size: int) -> FleetWriter:
    writer = FleetWriter(conn)
    for batch in batches(events, size):
        writer.write(batch, next_positions(batch))
    return writer


def test_migrate_is_idempotent_and_records_each_file(postgres: servers.Server) -> None:
    schema = new_schema()
    with connect(postgres.address, schema) as conn:
        try:
            first = migrate(conn, schema)
            assert [m.version for m in first] == [m.version for m in migrations()]
            assert migrate(conn, schema) == []
            assert all(s.applied for s in status(conn, schema))
        finally:
            drop(conn, schema)
        assert not any(s.applied for s in status(conn, schema))


def test_an_applied_migration_whose_file_changed_is_refused(postgres: servers.Server) -> None:
    schema = new_schema()
    with connect(postgres.address, schema) as conn:
        try:
            migrate(conn, schema)
            conn.execute(f"UPDATE {schema}.schema_migrations SET checksum = 'x' WHERE version = 1")
            with pytest.raises(FleetDatabaseError, match="different file"):
                migrate(conn, schema)
        finally:
            drop(conn, schema)


def test_a_bad_dsn_is_one_sentence() -> None:
    with pytest.raises(
        FleetDatabaseError, match=r"cannot connect to PostgreSQL at .*SPOTCAP_POSTGRES_DSN"
    ):
        connect("postgresql://nobody:secret@127.0.0.1:1/x", connect_timeout_s=2)


def test_a_dsn_that_is_not_one_is_one_sentence_without_its_password() -> None:
    with pytest.raises(FleetDatabaseError, match="not a PostgreSQL connection string") as caught:
        connect("user=spotcap password=s3cret-pw dbname")
    assert "s3cret-pw" not in str(caught.value)


def test_connections_carry_tcp_keepalives_unless_the_dsn_says_otherwise(
    postgres: servers.Server,
) -> None:
    """A server whose host vanished ends the connection in about a minute, not hours."""
    with connect(postgres.address) as conn:
        given = conn.info.get_parameters()
        assert {k: int(given[k]) for k in KEEPALIVES} == KEEPALIVES
    separator = "&" if "?" in postgres.address else "?"
    with connect(f"{postgres.address}{separator}keepalives_idle=7") as conn:
        given = conn.info.get_parameters()
        assert given["keepalives_idle"] == "7" and given["keepalives_count"] == "3"


def test_a_simulated_region_lands_in_the_tables(fleet: Connection) -> None:
    events = fleet_part(sim_events())
    writer = write_all(fleet, events, 700)
    rows = fleet.execute("SELECT state, count(*) FROM instances GROUP BY 1").fetchall()
    counts: dict[str, int] = dict(rows)
    launched = sum(1 for _, e in events if e.event_type == "instance_launched")
    assert sum(counts.values()) == launched
    # The simulator's baseline orchestrator requests a replacement for most losses (after
    # them): such an instance ends `replaced`, the others `lost`.
    lost = sum(1 for _, e in events if e.event_type == "instance_lost")
    replaced = {
        e.payload.replaces_instance_id
        for _, e in events
        if isinstance(e.payload, ReplacementRequested)
    }
    assert replaced and counts.get("replaced", 0) == len(replaced)
    assert counts.get("lost", 0) == lost - len(replaced)
    pools = fleet.execute(
        "SELECT count(*), count(price_per_vcpu_h_eur_micros) FROM pools"
    ).fetchone()
    registered = sum(1 for _, e in events if e.event_type == "pool_registered")
    assert pools == (registered, registered)
    assert writer.stored_offsets() == next_positions(events)
    # Rate cards and forward capacity are not journaled; everything else is.
    journaled = fleet.execute("SELECT count(*) FROM events").fetchone()
    assert journaled == (sum(1 for _, e in events if e.event_type not in UNJOURNALED),)
    outbox = fleet.execute("SELECT count(*) FROM outbox WHERE sent_at IS NULL").fetchone()
    # Capacity actions: launches, deletions, and the baseline orchestrator's decisions.
    actions = sum(1 for _, e in events if e.event_type in ACTIONS)
    assert {e.event_type for _, e in events} & set(ACTIONS) >= {
        "instance_launched",
        "instance_deleted",
        "placement_decided",
        "replacement_requested",
    }
    assert outbox == (actions,)


def test_a_batch_delivered_again_changes_nothing(fleet: Connection) -> None:
    events = fleet_part(sim_events())
    writer = write_all(fleet, events, 1000)
    before = dump_fleet(fleet)
    # The same events again, from other offsets (a producer retry): applied once.
    again = [(Origin(o.topic, 9, o.offset), e) for o, e in events[:3000]]
    result = writer.write(again, {})
    assert result.applied == sum(1 for _, e in again if e.event_type in UNJOURNALED)
    assert dump_fleet(fleet) == before


def test_the_tables_do_not_depend_on_the_order_or_size_of_batches(postgres: servers.Server) -> None:
    events = fleet_part(sim_events())
    dumps = []
    # One batch of everything: its rows merged in Python only (`StateTable.merge`), against
    # batches whose rows merge into the stored ones in SQL (`merge_sql`) in shuffled orders.
    for seed, size in ((None, len(events)), (None, 500), (3, 97), (11, 2500)):
        schema = new_schema()
        with connect(postgres.address, schema) as conn:
            migrate(conn, schema)
            chunks = batches(events, size)
            if seed is not None:
                random.Random(seed).shuffle(chunks)
            writer = FleetWriter(conn)
            for chunk in chunks:
                writer.write(chunk, {})
            writer.write([], next_positions(events))
            dumps.append(dump_fleet(conn))
            drop(conn, schema)
    assert dumps[0] == dumps[1] == dumps[2] == dumps[3]


def test_out_of_order_and_impossible_facts_are_recorded_never_fatal(fleet: Connection) -> None:
    i, w, p = "i-9", "wl-z", "pool-z"
    launch = event(InstanceLaunched(i, p, w, 4, "reclaimable", {}), 0, name="9-launch")
    lost = event(InstanceLost(i, p, w, 4, "reclaimable", False, "reclaimed"), 100, name="9-lost")
    # The agent's spool arrives late: a drain that completed (but never started) before the loss.
    drained = event(DrainCompleted(i, w, "local", 30.0, False, True, True, None), 90, name="9-dr")
    replace = event(ReplacementRequested(w, i, 4, "reclaimable", (p,)), 101, name="9-rep")
    writer = FleetWriter(fleet)
    for e in (launch, lost, drained, replace):
        writer.write(positioned([e]), {})
    row = fleet.execute(
        "SELECT state, drain_verified, drain_overrun, replacement_event_id::text"
        " FROM instances WHERE instance_id = %s",
        (i,),
    ).fetchone()
    assert row == ("replaced", False, True, replace.event_id)
    anomalies = fleet.execute(
        "SELECT event_type, from_state, to_state FROM instance_anomalies WHERE instance_id = %s",
        (i,),
    ).fetchall()
    assert anomalies == [("drain_completed", "running", "drained")]


def test_exclusions_keep_their_evidence_and_readmission(fleet: Connection) -> None:
    p = "pool-x"
    evidence = tuple(
        event(
            InstanceLost(f"i-{n}", p, "w", 4, "reclaimable", False, "reclaimed"), n, name=f"ev{n}"
        ).event_id
        for n in range(3)
    )
    excluded = event(
        PoolExcluded(p, "burst", 3.0, 0.1, 3, T0_US, T0_US + 60_000_000, evidence), 61, name="exc"
    )
    writer = FleetWriter(fleet)
    writer.write(positioned([excluded]), {})
    active = fleet.execute(
        "SELECT pool_id, evidence_event_ids::text[] FROM exclusions_active"
    ).fetchall()
    assert active == [(p, list(evidence))]
    readmit = event(PoolReadmitted(p, 3600, 0.05, 0.1, (), excluded.event_id), 4000, name="re")
    writer.write(positioned([readmit]), {})
    assert fleet.execute("SELECT count(*) FROM exclusions_active").fetchone() == (0,)
    history = fleet.execute(
        "SELECT readmission_event_id::text, healthy_s FROM exclusion_history"
    ).fetchall()
    assert history == [(readmit.event_id, 3600)]


def test_a_failed_batch_leaves_nothing(fleet: Connection) -> None:
    events = fleet_part(sim_events())[:200]
    writer = FleetWriter(fleet)

    def boom(step: str) -> None:
        if step == "append":
            raise RuntimeError("injected")

    writer._on_step = boom
    with pytest.raises(RuntimeError, match="injected"):
        writer.write(events, next_positions(events))
    assert fleet.execute("SELECT count(*) FROM events").fetchone() == (0,)
    assert writer.stored_offsets() == {}
    writer._on_step = None
    writer.write(events, next_positions(events))
    assert writer.stored_offsets() == next_positions(events)


def test_a_batch_racing_another_writer_for_the_same_events_applies_them_once(
    fleet: Connection,
) -> None:
    """The journal looks its ids up and copies the new rows straight in; when another writer
    (a partition's previous owner, say) commits the same events in between, the copy fails on
    the key and the batch goes through staging and ON CONFLICT instead."""
    events = fleet_part(sim_events())[:400]
    schema = fleet.execute("SELECT current_schema()").fetchone()
    assert schema is not None
    results: list[object] = []
    with connect(fleet.info.dsn, schema[0]) as other:
        rival = FleetWriter(other)
        writer = FleetWriter(fleet)
        with other.transaction():
            # The rival's batch, written and not yet committed: the look-up cannot see it.
            rival.write(events, next_positions(events))
            racer = threading.Thread(
                target=lambda: results.append(writer.write(events, next_positions(events)))
            )
            racer.start()
            # Bounded wait until the racing copy blocks on the rival's uncommitted keys.
            deadline = time.monotonic() + 60
            while other.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
                (fleet.info.backend_pid,),
            ).fetchone() != (1,):
                assert time.monotonic() < deadline, "the racing batch never waited on the rival"
                time.sleep(0.05)
        racer.join(timeout=60)
        assert not racer.is_alive(), "the racing batch did not finish after the rival committed"
    (result,) = results
    assert isinstance(result, WriteResult)
    # Only the market feeds (not journaled, merged idempotently) count as applied again.
    assert result.applied == sum(1 for _, e in events if e.event_type in UNJOURNALED)
    alone = new_schema()
    with connect(fleet.info.dsn, alone) as conn:
        migrate(conn, alone)
        FleetWriter(conn).write(events, next_positions(events))
        expected = dump_fleet(conn)
        drop(conn, alone)
    assert dump_fleet(fleet) == expected


def test_migrations_are_numbered_files() -> None:
    found = migrations()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert all(isinstance(m, Migration) and m.sql.strip() for m in found)
    assert psycopg.__version__ >= "3.2"


def test_a_batch_can_be_bounded_in_time(fleet: Connection) -> None:
    events = fleet_part(sim_events())[:50]
    writer = FleetWriter(fleet)
    assert writer.write(events, next_positions(events), timeout_s=30).applied == 50
    # A lock held elsewhere: the bounded batch gives up instead of waiting for ever.
    schema = fleet.execute("SELECT current_schema()").fetchone()
    assert schema is not None
    with connect(fleet.info.dsn, schema[0]) as other, other.transaction():
        other.execute("LOCK TABLE consumed_offsets IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(FleetUnavailableError, match="statement timeout"):
            writer.write(events, next_positions(events), timeout_s=0.5)


def test_a_batch_commits_without_waiting_for_its_wal_flush_and_only_the_batch(
    fleet: Connection,
) -> None:
    # synchronous_commit is off for the batch's transaction alone (its offsets commit with its
    # rows, so a commit lost in a server crash is read again), bounded in time or not.
    events = fleet_part(sim_events())[:50]
    seen: list[tuple[str, str]] = []

    def settings(step: str) -> None:
        if step in ("journal", "commit", "committed"):
            row = fleet.execute("SELECT current_setting('synchronous_commit')").fetchone()
            assert row is not None
            seen.append((step, str(row[0])))

    writer = FleetWriter(fleet, on_step=settings)
    writer.write(events[:25], next_positions(events[:25]))
    writer.write(events[25:], next_positions(events[25:]), timeout_s=30)
    assert seen == [("journal", "off"), ("commit", "off"), ("committed", "on")] * 2


def _read_events(conn: Connection) -> list[tuple[object, ...]]:
    rows = conn.execute(
        "SELECT event_id::text, event_type, occurred_at, recorded_at, key, causation_id::text,"
        ' correlation_id, producer, topic, partition, "offset", payload::text FROM events'
        " ORDER BY event_id"
    ).fetchall()
    return [(*envelope, json.loads(payload)) for *envelope, payload in rows]


def _as_journaled(events: list[Positioned]) -> list[tuple[object, ...]]:
    rows = []
    for o, e in sorted(events, key=lambda pe: pe[1].event_id):
        if e.event_type in UNJOURNALED:
            continue
        event_id, event_type, occurred, recorded, *envelope, payload = journal_row(o, e)
        at, recorded_at = datetime.fromisoformat(occurred), datetime.fromisoformat(recorded)
        rows.append((event_id, event_type, at, recorded_at, *envelope, json.loads(payload)))
    return rows


def test_the_events_view_reads_every_journaled_event_as_it_came(fleet: Connection) -> None:
    # A ranking is journaled once, in `rankings` (migration 0003): the view `events` gives its
    # envelope and its payload back as the journal would have held them.
    events = fleet_part(sim_events())
    write_all(fleet, events, 900)
    assert any(e.event_type == RANKED for _, e in events)
    assert _read_events(fleet) == _as_journaled(events)
    stored = fleet.execute("SELECT count(*) FROM journal WHERE event_type = %s", (RANKED,))
    assert stored.fetchone() == (0,)


def test_the_instance_events_view_reads_each_instance_event_of_the_journal(
    fleet: Connection,
) -> None:
    # An instance's events are the journal's (migration 0004): its id from the payload (a
    # replacement's, the instance it replaces) and the state the event implies.
    events = fleet_part(sim_events())
    write_all(fleet, events, 900)
    expected = []
    for _, e in sorted(events, key=lambda pe: pe[1].event_id):
        if e.event_type not in IMPLIED_STATE:
            continue
        p = e.payload.to_avro()
        instance = p["replaces_instance_id" if e.event_type == "replacement_requested" else
                     "instance_id"]  # fmt: skip
        at = datetime.fromisoformat(stamp(e.occurred_at))
        expected.append((e.event_id, instance, e.event_type, IMPLIED_STATE[e.event_type], at))
    assert {row[2] for row in expected} >= {"instance_launched", "checkpoint_written",
                                           "replacement_requested"}  # fmt: skip
    rows = fleet.execute(
        "SELECT event_id::text, instance_id, event_type, implied_state, occurred_at"
        " FROM instance_events"
    ).fetchall()
    assert sorted(rows) == expected


def test_migration_3_moves_the_journaled_rankings_into_rankings(postgres: servers.Server) -> None:
    events = [pe for pe in fleet_part(sim_events()) if pe[1].event_type not in UNJOURNALED]
    events = events[:2000]
    assert any(e.event_type == RANKED for _, e in events)
    schema = new_schema()
    with connect(postgres.address, schema) as conn:
        try:
            # A schema at migration 2, written as before migration 3: every journaled event in
            # `events`, and the rankings' payload columns in `rankings`.
            migrate(conn, schema)
            drop(conn, schema)
            conn.execute(f"CREATE SCHEMA {schema}")
            conn.execute(
                f"CREATE TABLE {schema}.schema_migrations (version int PRIMARY KEY, name text"
                " NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL"
                " DEFAULT now())"
            )
            for m in migrations()[:2]:
                conn.execute(f"SET search_path TO {schema}, public")
                conn.execute(m.sql.encode())
                conn.execute(
                    f"INSERT INTO {schema}.schema_migrations VALUES (%s, %s, %s)",
                    (m.version, m.name, m.checksum),
                )
            with conn.cursor() as cur:
                with cur.copy(f"COPY {schema}.events FROM STDIN") as copy:
                    for o, e in events:
                        copy.write_row(journal_row(o, e))
                columns = s.RANKINGS.columns.index("occurred_at") + 1  # before migration 3
                with cur.copy(f"COPY {schema}.rankings FROM STDIN") as copy:
                    for o, e in events:
                        if e.event_type == RANKED:
                            copy.write_row(ranking_row(o, e)[:columns])
            conn.commit()
            assert [m.version for m in migrate(conn, schema)] == [3, 4, 5, 6]
            conn.execute(f"SET search_path TO {schema}, public")
            assert _read_events(conn) == _as_journaled(events)
            # And the writer goes on from there: the same events again change nothing.
            before = dump_fleet(conn)
            assert FleetWriter(conn).write(events, {}).applied == 0
            assert dump_fleet(conn) == before
        finally:
            drop(conn, schema)
