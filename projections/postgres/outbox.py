"""The outbox relay (ADR-25): ships capacity actions from the fleet state to the audit topic.

Each round takes the oldest unsent actions (``FOR UPDATE SKIP LOCKED``, so two relays never
ship the same row at once), produces them, waits until the log acknowledges every one, then
marks them sent and commits. A crash before the commit leaves them unsent: they go again, with
the same action id as key and in the record, which is how the audit log recognises a resend.
Nothing is marked sent that the log has not acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from projections.postgres.connection import Connection

AUDIT_CONTENT_TYPE = b"application/json; spotcap-audit=1"
Headers = tuple[tuple[str, bytes], ...]


class AuditSink(Protocol):
    """Where audit records go: the event log's producer fits (``streams.log.Producer``)."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> Sequence[object]:
        """Return once every produced record is acknowledged; raise if any failed."""
        ...


@dataclass(frozen=True, slots=True)
class RelayRound:
    sent: int
    pending: int  # unsent actions left after this round


class OutboxRelay:
    def __init__(
        self,
        conn: Connection,
        sink: AuditSink,
        topic: str,
        *,
        batch_size: int = 500,
        flush_timeout_s: float = 30.0,
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        self.conn = conn
        self.sink = sink
        self.topic = topic
        self.batch_size = batch_size
        self.flush_timeout_s = flush_timeout_s
        self._on_step = on_step

    def _step(self, name: str) -> None:
        if self._on_step is not None:
            self._on_step(name)

    def relay_once(self) -> RelayRound:
        """Ship up to `batch_size` unsent actions, oldest first."""
        with self.conn.transaction():
            rows = self.conn.execute(
                "SELECT action_id, record::text, occurred_at FROM outbox WHERE sent_at IS NULL "
                "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED",
                (self.batch_size,),
            ).fetchall()
            for action_id, record, occurred_at in rows:
                self.sink.produce(
                    self.topic,
                    record.encode(),
                    key=str(action_id).encode(),
                    headers=(("content-type", AUDIT_CONTENT_TYPE),),
                    timestamp_ms=int(occurred_at.timestamp() * 1000),
                )
            self._step("produced")
            if rows:
                self.sink.flush(self.flush_timeout_s)
            self._step("flushed")
            if rows:
                self.conn.execute(
                    "UPDATE outbox SET sent_at = now(), send_attempts = send_attempts + 1 "
                    "WHERE action_id = ANY(%s)",
                    ([r[0] for r in rows],),
                )
            self._step("marked")
        self._step("committed")
        return RelayRound(len(rows), self.pending())

    def pending(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM outbox WHERE sent_at IS NULL").fetchone()
        return int(row[0]) if row else 0

    def drain(self, max_rounds: int = 1_000_000) -> int:
        """Relay until nothing is pending (bounded by `max_rounds`); return how many were sent."""
        sent = 0
        for _ in range(max_rounds):
            result = self.relay_once()
            sent += result.sent
            if result.sent == 0 or result.pending == 0:
                break
        return sent
