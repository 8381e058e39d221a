"""The simulated region a cloud serves: a `RegionSim` that nobody orchestrates from inside,
advanced to the `SpeedClock`'s sim time before every call and by the driver in between.

Every call of the API runs under one lock, at the sim time the clock says when it arrives:
the region is first advanced to that time (everything due before it happens), then the call
acts (a launch is an `instance_launched` at that microsecond). The facts the region publishes
go, in publication order (which is event-time order), to the services that keep a view of them
(`on(event_type, handler)`): Nova forgets a lost server, the feeds keep the rate cards, the
forecasts and the notices, Blazar the standing reservations, and the notice outlet puts each
notice on NATS and the metadata endpoint.

Determinism: the region's own facts (rate cards, forecasts, waves, the reclaims they cause)
depend on the seed alone; a fact an API call causes happens at the sim time the call arrived.
The region is advanced through every mark (each `mark_s` of sim time from the start) and the
count and SHA-256 digest of every event before the mark are kept (`digest_at`), so two servings
of the same seed can be compared event by event without keeping the events.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from provider.base import CapacityProvider
from schemas.events import Envelope
from sim.clock import SECOND_US
from sim.cloud.clock import SpeedClock, wall_us
from sim.cloud.naming import CloudNames
from sim.orchestration import OrchestratorHost
from sim.region import RegionSim, SimConfig

EventHandler = Callable[[Envelope], None]
_MARKS_KEPT = 10_000


class ExternalOrchestrator:
    """The region's orchestrator seam, left empty: spotcap acts from outside, through the API."""

    def start(self, host: OrchestratorHost) -> None:
        pass

    def observe(self, event: Envelope) -> None:
        pass

    def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Mark:
    """How many events the region published before `at_us`, and their digest."""

    at_us: int
    events: int
    digest: str


class CloudRegion:
    """A `RegionSim` behind a lock, on a `SpeedClock`."""

    def __init__(
        self,
        config: SimConfig,
        speed: float,
        *,
        mark_s: int = 3600,
        wall: Callable[[], int] = wall_us,
    ) -> None:
        self.config = config
        self.region = config.region
        self.sim = RegionSim(config, orchestrator=ExternalOrchestrator())
        self.names = CloudNames(self.sim.catalogue)
        self.lock = threading.RLock()
        self._handlers: dict[str, list[EventHandler]] = {}
        self._every: list[EventHandler] = []
        self._events = 0
        self._digest = hashlib.sha256()
        self._mark_us = mark_s * SECOND_US
        self._next_mark_us = config.start_us + self._mark_us
        self._marks: OrderedDict[int, Mark] = OrderedDict()
        self._held: list[Envelope] = list(self._drained())  # what the start published
        self.clock = SpeedClock.starting_now(config.start_us, speed, config.end_us, wall)

    # -- wiring -------------------------------------------------------------------------------

    def on(self, event_type: str, handler: EventHandler) -> None:
        """Hand every event of `event_type` to `handler`, under the lock, in order."""
        self._handlers.setdefault(event_type, []).append(handler)

    def on_every(self, handler: EventHandler) -> None:
        self._every.append(handler)

    def open(self) -> None:
        """Deliver what the region published while it was built, now that handlers are on."""
        with self.lock:
            held, self._held = self._held, []
            for envelope in held:
                self._route(envelope)

    # -- time ---------------------------------------------------------------------------------

    def now_us(self) -> int:
        """Sim time of the region (advanced to the clock's)."""
        with self.lock:
            return self.sim.now_us()

    def advance(self) -> int:
        """Advance the region to the clock's sim time; the region's sim time after."""
        target_us = self.clock.now_us()
        with self.lock:
            while self.sim.now_us() < target_us:
                step_us = min(target_us, self._next_mark_us)
                self.sim.run_until(step_us)
                for envelope in self._drained():
                    self._route(envelope)
                if self.sim.now_us() >= self._next_mark_us:
                    self._keep_mark(self._next_mark_us)
                    self._next_mark_us += self._mark_us
            return self.sim.now_us()

    @property
    def next_due_us(self) -> int | None:
        """When the region next does something on its own (None: nothing is scheduled)."""
        with self.lock:
            due = self.sim.clock.next_due_us
            return min(due, self._next_mark_us) if due is not None else self._next_mark_us

    @property
    def ended(self) -> bool:
        return self.now_us() >= self.config.end_us

    # -- what it published ------------------------------------------------------------------

    @property
    def events(self) -> int:
        with self.lock:
            return self._events

    def digest_at(self, at_us: int) -> Mark | None:
        """The mark at `at_us` (a multiple of `mark_s` from the start), once reached."""
        with self.lock:
            return self._marks.get(at_us)

    def _drained(self) -> list[Envelope]:
        return self.sim.provider.poll_events(len(self.sim.bus))

    def _route(self, envelope: Envelope) -> None:
        self._events += 1
        self._digest.update(
            f"{envelope.event_id}|{envelope.event_type}|{envelope.occurred_at}|"
            f"{envelope.key}\n".encode()
        )
        for handler in self._handlers.get(envelope.event_type, ()):
            handler(envelope)
        for handler in self._every:
            handler(envelope)

    def _keep_mark(self, at_us: int) -> None:
        self._marks[at_us] = Mark(at_us, self._events, self._digest.hexdigest())
        while len(self._marks) > _MARKS_KEPT:
            self._marks.popitem(last=False)
