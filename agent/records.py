"""The agent's events: envelopes for what it did, with ids derived from their cause.

Every event of a drain derives its id from the notice (or advisory) that started it (UUIDv5,
`schemas.ids`), so an agent restarted mid-drain that sees the notice again and repeats the
steps writes the same ids, and the consumers' de-duplication by ``event_id`` keeps one of each.
The notice's own record, ``notice_received``, carries the notice's event id.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.clock import Clock
from schemas.events import Envelope, Payload
from schemas.ids import derived_event_id


class Recorder:
    """Builds envelopes for one instance and hands them to `sink` (the spool writer)."""

    def __init__(
        self, region: str, producer: str, clock: Clock, sink: Callable[[Envelope], None]
    ) -> None:
        self.region = region
        self.producer = producer
        self.clock = clock
        self._sink = sink

    def record(
        self,
        payload: Payload,
        *,
        cause: str,
        discriminator: str = "",
        event_id: str | None = None,
        occurred_at_us: int | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Envelope:
        """Record `payload`; its id derives from `cause` unless `event_id` is given."""
        now_us = self.clock.now_us()
        envelope = Envelope(
            event_id=event_id or derived_event_id(cause, payload.EVENT_TYPE, discriminator),
            event_type=payload.EVENT_TYPE,
            occurred_at=now_us if occurred_at_us is None else occurred_at_us,
            recorded_at=now_us,
            region=self.region,
            key=str(getattr(payload, payload.KEY)),
            causation_id=causation_id,
            correlation_id=correlation_id,
            producer=self.producer,
            payload=payload,
        )
        self._sink(envelope)
        return envelope
