"""The fleet-state writer: one transaction per batch, offsets stored with the rows.

Per batch: insert the journal rows of the events not applied before (copied in; through
staging and ``ON CONFLICT (event_id) DO NOTHING`` when one of them is stored already, say by
another writer racing for the same events: an event already applied is skipped, whatever
offset it came from; a ranking's journal row is its `rankings` row, migration 0003); map
the new events to rows (pure; a batch's rows of one entity merged in Python); stage
the state rows and merge them into the stored ones in SQL (`merge_sql`: ``ON CONFLICT DO
UPDATE``, per group the better version); COPY the append rows (of new events only) straight
into their tables; upsert the offsets of the batch's partitions; commit. A crash anywhere before
the commit leaves nothing, and the consumer resumes from the stored offsets (`stored_offsets`,
used to seek on partition assignment), so no event is applied twice or skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from projections.postgres import schema as s
from projections.postgres.connection import Connection, FleetUnavailableError
from projections.postgres.mappers import (
    UNJOURNALED,
    Changes,
    journal_row,
    map_events,
    ranking_row,
)
from projections.postgres.merge_sql import upsert_statement
from projections.postgres.tables import AppendTable, StateTable
from schemas.errors import Origin
from schemas.events import Envelope

FLEET_PROJECTION = "fleet"
# Logical topics it consumes (usage for work_wasted; usage intervals are the ledger's).
FLEET_TOPICS = ("lifecycle", "market", "demand", "decisions", "usage")

TopicPartition = tuple[str, int]
# Called at each named step of a batch ("journal", "state", "append", "offsets", "commit",
# "committed"): the crash tests kill the process there; it could count or trace.
StepHook = Callable[[str], None]
# An event's row of a journal table (`journal_row`, `ranking_row`).
RowOf = Callable[[Origin, Envelope], tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class WriteResult:
    events: int  # events in the batch
    applied: int  # events applied now (the rest had been applied before)


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _cols(columns: Sequence[str]) -> sql.Composable:
    return sql.SQL(", ").join(map(_ident, columns))


class FleetWriter:
    def __init__(
        self,
        conn: Connection,
        projection: str = FLEET_PROJECTION,
        *,
        on_step: StepHook | None = None,
    ) -> None:
        self.conn = conn
        self.projection = projection
        self._on_step = on_step
        # jsonb loads as its text on this connection, as it always has (the writer no longer
        # reads rows back; kept so that readers sharing the connection see no change).
        conn.adapters.register_loader("jsonb", TextLoader)
        self._upserts = {
            t.name: sql.SQL(upsert_statement(t, f"stage_{t.name}")) for t in s.STATE_TABLES
        }
        with conn.transaction():
            # Append rows go straight to their tables; only the journals (a race's fallback)
            # and the state rows are staged.
            tables = [(t.name, t.columns) for t in (s.EVENTS, s.RANKINGS)]
            tables += [(t.name, t.columns) for t in s.STATE_TABLES]
            for name, columns in tables:
                # The staging table has the writer's columns and their types, no constraints.
                conn.execute(
                    sql.SQL(
                        "CREATE TEMP TABLE IF NOT EXISTS {} ON COMMIT DELETE ROWS AS "
                        "SELECT {} FROM {} WITH NO DATA"
                    ).format(_ident(f"stage_{name}"), _cols(columns), _ident(name))
                )

    def _step(self, name: str) -> None:
        if self._on_step is not None:
            self._on_step(name)

    def stored_offsets(self) -> dict[TopicPartition, int]:
        """The next offset to read of each partition this projection has applied."""
        rows = self.conn.execute(
            "SELECT topic, partition, next_offset FROM consumed_offsets WHERE projection = %s",
            (self.projection,),
        ).fetchall()
        return {(str(t), int(p)): int(o) for t, p, o in rows}

    def write(
        self,
        events: Sequence[tuple[Origin, Envelope]],
        positions: Mapping[TopicPartition, int],
        timeout_s: float | None = None,
    ) -> WriteResult:
        """Apply a batch and store `positions` (the next offsets to read) in one transaction;
        with `timeout_s`, every statement of it is bounded (PostgreSQL's statement_timeout)."""
        try:
            return self._write(events, positions, timeout_s)
        except psycopg.OperationalError as error:
            raise FleetUnavailableError(
                f"the fleet-state database did not take a batch: {error}"
            ) from error

    def _write(
        self,
        events: Sequence[tuple[Origin, Envelope]],
        positions: Mapping[TopicPartition, int],
        timeout_s: float | None,
    ) -> WriteResult:
        # The batch's own pairs, not new tuples: what the writer holds while it works on a batch
        # is what Python's garbage collector counts and, in its full collections, walks (all of
        # the process's objects each time; docs/performance.md, "Projections").
        unique: dict[str, tuple[Origin, Envelope]] = {}
        for pair in events:
            unique.setdefault(pair[1].event_id, pair)
        with self.conn.transaction():
            # The commit does not wait for its WAL to reach the disk (PostgreSQL's WAL writer
            # flushes it within a fraction of a second; the backend neither flushes nor waits).
            # Safe here: the batch's offsets commit with its rows, so a server crash that loses
            # the last commits loses their offsets too, and the consumer reads those records
            # again from the stored offsets (`stored_offsets`); nothing is skipped or applied
            # twice. The database stays consistent (no fsync is skipped, only waited for).
            # (The outbox relay ships only committed rows; if it ships one whose commit a crash
            # then loses, the batch is applied again and its action shipped again under the same
            # id, as after a relay crash between shipping and marking it sent.)
            if timeout_s is None:
                self.conn.execute("SET LOCAL synchronous_commit = off")
            else:
                # Both settings in one round trip (SET LOCAL, as set_config's third argument).
                self.conn.execute(
                    "SELECT set_config('synchronous_commit', 'off', true),"
                    " set_config('statement_timeout', %s, true)",
                    (str(max(1, int(timeout_s * 1000))),),
                )
            journal: list[tuple[Origin, Envelope]] = []
            rankings: list[tuple[Origin, Envelope]] = []
            for pair in unique.values():
                event_type = pair[1].event_type
                if event_type == s.RANKED:
                    rankings.append(pair)
                elif event_type not in UNJOURNALED:
                    journal.append(pair)
            new_ids = self._journal(
                ((s.EVENTS, journal_row, journal), (s.RANKINGS, ranking_row, rankings))
            )
            self._step("journal")
            if new_ids is None:  # all of them: the usual case
                fresh = [e for _, e in unique.values()]
            else:
                fresh = [
                    e
                    for _, e in unique.values()
                    if e.event_type in UNJOURNALED or _is_new(e.event_id, new_ids)
                ]
            changes = map_events(fresh)
            for state_table in s.STATE_TABLES:
                self._upsert_state(state_table, changes)
            self._step("state")
            for append_table in s.APPEND_TABLES:
                if append_table is not s.EVENTS and append_table is not s.RANKINGS:
                    self._insert_append(append_table, changes)
            self._step("append")
            self._store_offsets(positions)
            self._step("offsets")
            self._step("commit")
        self._step("committed")
        return WriteResult(len(events), len(fresh))

    # -- steps ------------------------------------------------------------------------------

    def _copy(self, table_name: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        stmt = sql.SQL("COPY {} ({}) FROM STDIN").format(_ident(table_name), _cols(columns))
        with self.conn.cursor() as cur, cur.copy(stmt) as copy:
            for row in rows:
                copy.write_row(row)

    def _journal(
        self, parts: Sequence[tuple[AppendTable, RowOf, list[tuple[Origin, Envelope]]]]
    ) -> set[str] | None:
        """Insert the journal rows (per table: the journal, the rankings; each row made from its
        event as it is copied) of the events not applied before; return their ids, or None when
        that is every one of them.

        Usually none of a batch's events is stored yet, so the rows are copied straight into
        their tables (half the server's work of staging them and inserting with ON CONFLICT,
        and no look-up of the ids first). If one is stored already (an event the log holds
        twice, or one that another writer committed: a partition's previous owner finishing its
        batch after a rebalance), a copy fails on the key: the copies are rolled back to their
        savepoint and the batch goes through staging and ``ON CONFLICT (event_id) DO NOTHING``,
        which waits for and skips the other writer's rows.
        """
        parts = [part for part in parts if part[2]]
        if not parts:
            return None
        try:
            with self.conn.transaction():
                for table, row_of, pairs in parts:
                    self._copy(table.name, table.columns, (row_of(o, e) for o, e in pairs))
        except psycopg.errors.UniqueViolation:
            return set().union(*(self._journal_staged(*part) for part in parts))
        return None

    def _journal_staged(
        self, table: AppendTable, row_of: RowOf, pairs: list[tuple[Origin, Envelope]]
    ) -> set[str]:
        self._copy(f"stage_{table.name}", table.columns, (row_of(o, e) for o, e in pairs))
        cols = _cols(table.columns)
        found = self.conn.execute(
            sql.SQL(
                "INSERT INTO {t} ({c}) SELECT {c} FROM {st} ON CONFLICT (event_id) DO NOTHING "
                "RETURNING event_id::text"
            ).format(t=_ident(table.name), c=cols, st=_ident(f"stage_{table.name}"))
        ).fetchall()
        return {r[0] for r in found}

    def _insert_append(self, table: AppendTable, changes: Changes) -> None:
        # Append rows are those of events new to the journal in this transaction (its ON
        # CONFLICT, or a concurrent writer's commit of the same event, decided that), so none
        # of them can be stored already: no staging, no ON CONFLICT.
        if changes.has_rows(table):
            self._copy(table.name, table.columns, changes.iter_rows(table))

    def _upsert_state(self, table: StateTable, changes: Changes) -> None:
        updates = changes.states.get(table.name)
        if not updates:
            return
        finish_row = table.finish_row
        self._copy(
            f"stage_{table.name}", table.columns, (finish_row(updates[k]) for k in sorted(updates))
        )
        self.conn.execute(self._upserts[table.name])

    def _store_offsets(self, positions: Mapping[TopicPartition, int]) -> None:
        if not positions:
            return
        with self.conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO consumed_offsets (projection, topic, partition, next_offset) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (projection, topic, partition) "
                "DO UPDATE SET next_offset = EXCLUDED.next_offset",
                [(self.projection, t, p, o) for (t, p), o in sorted(positions.items())],
            )


def _is_new(event_id: str, new_ids: set[str]) -> bool:
    """Whether the journal took `event_id` now (`new_ids`: as the batch spells them, or, from
    staging, as PostgreSQL prints them; an id written otherwise, say in capitals, is compared
    in that form)."""
    return event_id in new_ids or str(uuid.UUID(event_id)) in new_ids
