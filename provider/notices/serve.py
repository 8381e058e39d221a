"""Serve the notice path from a provider's events: what the reclaimer side does (ADR-17).

Every `notice_received` is published on the instance's NATS subject and posted on the metadata
board; every `advisory` is published; an instance's loss or deletion withdraws its pending
notice. A relay that is down does not stop delivery: the metadata board still answers, which
is the slower path the agent polls (the subscriber de-duplicates by event id).

`serve_events` paces the events in (scaled) real time, so a simulated region can feed real node
agents: at ``speed`` 60, an hour of sim time passes in a minute of wall time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from provider.notices.metadata import NoticeBoard
from provider.notices.relay import NoticeRelay, RelayUnavailableError
from schemas.events import Advisory, Envelope, InstanceDeleted, InstanceLost, NoticeReceived
from schemas.notices import Notice, ReclaimAdvisory


@dataclass(slots=True)
class DispatchCounts:
    notices: int = 0
    advisories: int = 0
    withdrawn: int = 0
    relay_failures: int = 0

    COLUMNS = ("notices", "advisories", "withdrawn", "relay failures")
    """The columns of `spotcap notices serve`'s table: `row`'s cells."""

    def row(self) -> tuple[str, ...]:
        """The counts with thousands separators, one cell per `COLUMNS`."""
        counted = (self.notices, self.advisories, self.withdrawn, self.relay_failures)
        return tuple(f"{n:,}" for n in counted)


class NoticeDispatcher:
    """Turns a provider's lifecycle events into deliveries on the relay and the board."""

    def __init__(self, relay: NoticeRelay | None, board: NoticeBoard) -> None:
        self._relay = relay
        self.board = board
        self.counts = DispatchCounts()

    async def dispatch(self, envelope: Envelope) -> None:
        payload = envelope.payload
        if isinstance(payload, NoticeReceived):
            notice = Notice.from_event(envelope)
            self.board.post(notice)  # first: the poll path must not depend on the relay
            self.counts.notices += 1
            await self._publish(notice)
        elif isinstance(payload, Advisory):
            self.counts.advisories += 1
            await self._publish(ReclaimAdvisory.from_event(envelope))
        elif (
            isinstance(payload, InstanceLost | InstanceDeleted)
            and self.board.pending(payload.instance_id) is not None
        ):
            self.board.withdraw(payload.instance_id)
            self.counts.withdrawn += 1

    async def _publish(self, message: Notice | ReclaimAdvisory) -> None:
        if self._relay is None:
            return
        try:
            await self._relay.publish(message)
        except RelayUnavailableError:
            self.counts.relay_failures += 1


async def serve_events(
    batches: Iterable[list[Envelope]],
    dispatcher: NoticeDispatcher,
    *,
    speed: float | None = None,
    clock_s: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> DispatchCounts:
    """Dispatch every event, in order; with `speed`, at `speed` x the events' own pace."""
    start_wall_s: float | None = None
    start_event_us = 0
    for batch in batches:
        for envelope in batch:
            if speed is not None:
                if start_wall_s is None:
                    start_wall_s, start_event_us = clock_s(), envelope.occurred_at
                due_s = start_wall_s + (envelope.occurred_at - start_event_us) / 1e6 / speed
                delay_s = due_s - clock_s()
                if delay_s > 0:
                    await sleep(delay_s)
            await dispatcher.dispatch(envelope)
    return dispatcher.counts
