"""Where the simulated region's facts go: an envelope per event, to the outbox and to listeners.

Every event is stamped with sim time (`occurred_at` = `recorded_at`), the region and the key its
payload class names (`KEY`). Ids are never `uuid4`: facts from outside get an id drawn from the
seeded id stream; derived events get `derived_event_id` of their cause (DESIGN.md §3).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from schemas.events import Envelope, Payload
from schemas.ids import derived_event_id
from sim.clock import Scheduler

Listener = Callable[[Envelope], None]
# What `uuid.UUID(version=4)` clears and sets of the 128 bits: the variant (RFC 4122, bits
# 62-63 of the low half: 10) and the version (bits 76-79: 4).
_UUID4_KEEP = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)


class EventBus:
    def __init__(self, region: str, clock: Scheduler, id_rng: random.Random) -> None:
        self.region = region
        self._clock = clock
        self._ids = id_rng
        self._outbox: deque[Envelope] = deque()
        self._listeners: dict[str, list[Listener]] = {}
        self._tap: Listener | None = None

    def subscribe(self, event_type: str, listener: Listener) -> None:
        self._listeners.setdefault(event_type, []).append(listener)

    def tap(self, listener: Listener) -> None:
        """Hand every envelope to `listener` as it is published, before the listeners of its
        type run: so the tap sees events in publication order even when a listener publishes
        more (the loss before the work it wasted). One tap (the orchestrator's host); a new
        one replaces the last."""
        self._tap = listener

    def fact_id(self) -> str:
        """A fresh id for a fact from outside, from the seeded id stream: the text of
        `uuid.UUID(int=<128 random bits>, version=4)`, without making the UUID (a third of a
        run's events are facts: rate cards, usage, checkpoints; issue 26)."""
        x = "%032x" % (self._ids.getrandbits(128) & _UUID4_KEEP | _UUID4_SET)
        return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"

    def emit(
        self,
        payload: Payload,
        producer: str,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        discriminator: str = "",
    ) -> Envelope:
        """Publish `payload` now; its id is derived from `causation_id` when there is one."""
        event_type = payload.EVENT_TYPE
        if causation_id is None:
            event_id = self.fact_id()
        else:
            event_id = derived_event_id(causation_id, event_type, discriminator)
        now_us = self._clock.now_us
        envelope = Envelope(
            event_id=event_id,
            event_type=event_type,
            occurred_at=now_us,
            recorded_at=now_us,
            region=self.region,
            key=getattr(payload, payload.KEY),
            causation_id=causation_id,
            correlation_id=correlation_id,
            producer=producer,
            payload=payload,
        )
        # Inlined `_deliver`: this runs for every event of a run.
        self._outbox.append(envelope)
        if self._tap is not None:
            self._tap(envelope)
        for listener in self._listeners.get(event_type, ()):
            listener(envelope)
        return envelope

    def publish(self, envelope: Envelope) -> None:
        """Publish an envelope built outside the simulation (the contract compiler's), as is."""
        if envelope.occurred_at != self._clock.now_us:
            raise ValueError(
                f"{envelope.event_type} {envelope.event_id} occurred at {envelope.occurred_at}, "
                f"not now ({self._clock.now_us}): sim time is event time"
            )
        self._deliver(envelope)

    def _deliver(self, envelope: Envelope) -> None:
        self._outbox.append(envelope)
        if self._tap is not None:
            self._tap(envelope)
        for listener in self._listeners.get(envelope.event_type, ()):
            listener(envelope)

    def drain(self, max_events: int) -> list[Envelope]:
        """Up to `max_events` published envelopes, oldest first, removed from the outbox."""
        out = self._outbox
        count = min(max_events, len(out))
        return [out.popleft() for _ in range(count)]

    def __len__(self) -> int:
        return len(self._outbox)
