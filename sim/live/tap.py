"""The served region's own facts, written to the log: what a real cloud's estate reports by
other channels than the adapter's calls and feeds.

The actuator writes what the OpenStack adapter returns: the answers to its own calls
(launched, deleted) and what the provider's feeds publish (rate cards, forecasts, notices,
advisories). The rest of what happens in the simulated region has no other way into the log,
so the tap writes it as the region publishes it, in order, with the region's event ids: the
pools and reservations, the workloads' contracts, their schedulers' claims, their work
(usage intervals, checkpoints, wasted work) and the losses of instances.

It also stands in for the node agents of the nodes that run none (`SimulatedAgents`): on a
notice of one of spotcap's instances it writes the agent's `drain_started` (one sim second
later, under the id a real agent derives from the notice, so a real agent of the same node
writes the same event) and its `drain_completed` (`drain_s` later, before the deadline).

The schedulers' claims (the ``demand`` topic's events but the contracts) are held until
`release_demand`: the live run releases them once the actuator has put the provider's first
rate cards and forecasts on the log, so that the deciders never plan a claim without prices
(on a loaded machine the actuator starts many sim seconds after the region's first claims).
They keep their event time; the deciders take them in the order they arrive.

Handlers run under the region's lock and only queue; the tap's own thread writes and flushes
every `flush_s`, so the region never waits on the log. A flush the broker does not acknowledge
(paused, restarted) is written again by a new producer after a backoff, until acknowledged:
the log may then hold a record twice under one event id (readers drop such resends), never
lose one.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import threading
import time
from collections import deque

from schemas.codec import Codec
from schemas.events import (
    Advisory,
    ContractPublished,
    DrainCompleted,
    DrainStarted,
    Envelope,
    ForwardCapacity,
    InstanceDeleted,
    InstanceLaunched,
    NoticeReceived,
    Payload,
    RateCard,
)
from schemas.ids import derived_event_id
from sim.clock import SECOND_US
from sim.cloud import CloudRegion
from streams.log import EventLog, LogError
from streams.writer import EventWriter

log = logging.getLogger(__name__)

WRITTEN_BY_THE_ACTUATOR = frozenset(
    kind.EVENT_TYPE
    for kind in (RateCard, ForwardCapacity, NoticeReceived, Advisory, InstanceLaunched,
                 InstanceDeleted)
)  # fmt: skip
"""What the OpenStack adapter returns to the actuator, which writes it: the tap leaves it."""

AGENTS = "sim/agents"


class SimulatedAgents:
    """The drains of the nodes whose agents are simulated: due events, released in time."""

    def __init__(self, region: str, drain_s: int = 30) -> None:
        self.region = region
        self.drain_s = drain_s
        self._due: list[tuple[int, int, Envelope]] = []
        self._seq = 0
        self.real: set[str] = set()
        """Instances whose node runs a real agent: nothing is simulated for them."""

    def noticed(self, notice: Envelope) -> None:
        payload = notice.payload
        assert isinstance(payload, NoticeReceived)
        if payload.instance_id in self.real or not payload.workload_id:
            return
        started_at = notice.occurred_at + SECOND_US
        ends_at = min(started_at + self.drain_s * SECOND_US, payload.deadline_at - SECOND_US)
        ends_at = max(ends_at, started_at)
        budget_s = max(1, (payload.deadline_at - started_at) // SECOND_US)
        started_id = derived_event_id(notice.event_id, DrainStarted.EVENT_TYPE)
        instance_id, workload_id = payload.instance_id, payload.workload_id
        started = DrainStarted(instance_id, workload_id, "local", budget_s, "notice")
        done = DrainCompleted(
            payload.instance_id,
            payload.workload_id,
            "local",
            duration_s=(ends_at - started_at) / SECOND_US,
            verified=True,
            overrun=False,
            fell_back_to_local=False,
            deadline_margin_s=(payload.deadline_at - ends_at) / SECOND_US,
        )
        self._push(started_at, started_id, started, notice, notice.event_id)
        done_id = derived_event_id(notice.event_id, DrainCompleted.EVENT_TYPE)
        self._push(ends_at, done_id, done, notice, started_id)

    def due(self, now_us: int) -> list[Envelope]:
        """The drains' events at or before `now_us`, oldest first."""
        out = []
        while self._due and self._due[0][0] <= now_us:
            out.append(heapq.heappop(self._due)[2])
        return out

    def _push(
        self, at_us: int, event_id: str, payload: Payload, notice: Envelope, cause: str
    ) -> None:
        self._seq += 1
        envelope = Envelope(
            event_id=event_id,
            event_type=payload.EVENT_TYPE,
            occurred_at=at_us,
            recorded_at=at_us,
            region=self.region,
            key=notice.key,
            causation_id=cause,
            correlation_id=notice.correlation_id,
            producer=AGENTS,
            payload=payload,
        )
        heapq.heappush(self._due, (at_us, self._seq, envelope))


class RegionTap:
    """Writes the region's own facts (and the simulated agents' drains) to `log`."""

    def __init__(
        self, region: CloudRegion, log_: EventLog, codec: Codec, *, flush_s: float = 0.2
    ) -> None:
        self._region = region
        self._log, self._codec = log_, codec
        self._writer = EventWriter(log_, codec, region.region, flush_every=10_000)
        self.rewrites = 0
        self.written_ids: set[str] = set()
        """The ids of every fact written and acknowledged (a run checks the log holds each)."""
        """Flushes the broker did not acknowledge, written again."""
        self._flush_s = flush_s
        self._queue: deque[Envelope] = deque()
        self._held: list[Envelope] | None = []  # the claims, until released (None: released)
        self.agents = SimulatedAgents(region.region)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: Exception | None = None
        self.written = 0
        self.market_taken = 0
        """Market facts (pools, reservations) taken to write so far."""
        region.on_every(self._take)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="region-tap", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 30.0) -> None:
        """Write what is queued, then stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        with contextlib.suppress(LogError):  # what it held was acknowledged or written again
            self._writer.close()

    def _take(self, envelope: Envelope) -> None:  # under the region's lock
        if envelope.event_type == NoticeReceived.EVENT_TYPE:
            self.agents.noticed(envelope)
        if envelope.event_type in WRITTEN_BY_THE_ACTUATOR:
            return
        if type(envelope.payload).TOPIC == "market":
            self.market_taken += 1
        if self._held is not None and _is_claim(envelope):
            self._held.append(envelope)
        else:
            self._queue.append(envelope)

    def release_demand(self) -> None:
        """Write the claims held so far, and every claim from now on as it comes."""
        with self._region.lock:
            if self._held is not None:
                self._queue.extend(self._held)
                self._held = None

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._flush_s):
                self._write()
            self._write()
        except Exception as error:  # the log failed: the run says so and stops
            log.exception("the region's facts could not be written")
            self.failure = error

    def _write(self) -> None:
        with self._region.lock:
            taken = list(self._queue)
            self._queue.clear()
            taken += self.agents.due(self._region.now_us())
        if taken:
            self._write_until_acknowledged(taken)
            self.written += len(taken)
            self.written_ids.update(envelope.event_id for envelope in taken)

    def _write_until_acknowledged(self, taken: list[Envelope]) -> None:
        wait_s, attempts = 0.5, 0
        while True:
            attempts += 1
            try:
                for envelope in taken:
                    self._writer.write(envelope)
                self._writer.flush()
                return
            except LogError as error:
                if attempts >= 30:  # ~5 minutes: the broker is not coming back
                    raise
                log.warning("the log did not take %d facts (%s); writing them again in %.1f s",
                            len(taken), error, wait_s)  # fmt: skip
            time.sleep(wait_s)
            wait_s = min(wait_s * 2, 10.0)
            self.rewrites += 1
            old, self._writer = (
                self._writer,
                EventWriter(self._log, self._codec, self._region.region, flush_every=10_000),
            )
            with contextlib.suppress(LogError):
                old.close()


def _is_claim(envelope: Envelope) -> bool:
    return (
        type(envelope.payload).TOPIC == "demand"
        and envelope.event_type != ContractPublished.EVENT_TYPE
    )
