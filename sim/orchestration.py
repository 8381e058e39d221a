"""The orchestrator seam of the simulated region: who places, replaces and scales down.

The region (`sim.region`) keeps the market and the demand: rate cards, forward
capacity, reclaims and waves, the workloads and their claims, checkpoints, work wasted, usage.
Everything an orchestrator does (placement, replacement after a loss or a notice, top-up,
deletion when a claim's work finishes) goes through an `Orchestrator`:

* `observe(event)` is called for **every** event the region publishes, at the moment it is
  published, in publication order (which is event-time order): the market's and the demand's
  facts, the provider's answers to the orchestrator's own calls, and its own decision events.
  It only updates the orchestrator's state; it must not call the provider or publish.
* `act(now_us, provider, due)` is called at sim time `now_us` after every step of the
  simulation in which the orchestrator observed an event (so a notice or a loss is acted on at
  its own microsecond, well inside a 60-second window), and at each wake-up it asked for with
  `host.wake_at` (`due` names them; it is empty after events). There it calls the provider seam
  (`launch`, `delete`, `list_by_tag`, `reclaim`) and publishes its decisions (`host.emit` or
  `host.publish`), which go to the log with the region's events and come back to `observe`.
  Events it causes while acting are observed but do not call `act` again: it just acted.

A step is one action of the region's scheduler: everything the region does at one microsecond
for one cause (a notice, a loss, a run that starts, a rate card round). The orchestrator
therefore sees the region as a stream of events and answers it at the same sim time, as the
deciders (`streams/deciders/`) do under their embedded runner; their adapter implements this
Protocol above `provider` (the provider package imports no streams types).

`RegionHost` is the region's side of the seam. The provider it hands to `act` refuses calls
made outside `act` (from `observe`, or after it returned) and has no `poll_events`: the region
delivers events to `observe`, and the log gets them from the region.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Protocol

from provider.base import (
    CapacityProvider,
    DeleteRequest,
    Instance,
    LaunchRequest,
    ReclaimRequest,
    ReclaimScheduled,
)
from schemas.events import Envelope, Payload
from schemas.pools import PoolCatalogue
from sim.bus import EventBus
from sim.clock import Scheduler
from sim.provider import SimProvider


class OrchestratorHost(Protocol):
    """What the simulated region offers its orchestrator besides the provider."""

    @property
    def region(self) -> str: ...

    @property
    def catalogue(self) -> PoolCatalogue: ...

    def now_us(self) -> int: ...

    def room_vcpu(self, pool_id: str) -> int:
        """vCPU the pool can lend now: the simulator's truth, for the stand-in. A real
        orchestrator knows only the `forward_capacity` events."""
        ...

    def wake_at(self, when_us: int, timer: str, *, last: bool = False) -> None:
        """Call `act` at `when_us` (not before now) with `timer` among its `due` names; after
        every action of that microsecond scheduled before this call, or with `last` after
        every action of that microsecond whenever scheduled (the instant is then complete:
        nothing the region does at `when_us` comes after it)."""
        ...

    def emit(
        self,
        payload: Payload,
        producer: str,
        causation_id: str,
        correlation_id: str | None = None,
        discriminator: str = "",
    ) -> Envelope:
        """Publish a decision now, with the id derived from its cause (`derived_event_id`)."""
        ...

    def publish(self, envelope: Envelope) -> None:
        """Publish a decision built elsewhere (a decider's), as is; it must occur now."""
        ...


class Orchestrator(Protocol):
    """Places, replaces and scales down the region's capacity, at sim time."""

    def start(self, host: OrchestratorHost) -> None:
        """Called once, before the first `observe`; may set wake-ups."""
        ...

    def observe(self, event: Envelope) -> None:
        """Every event the region publishes, as it is published. State only: no calls."""
        ...

    def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
        """Act at `now_us` on what was observed, and on the wake-ups named in `due`."""
        ...


class OrchestratorMisuseError(RuntimeError):
    """The orchestrator broke the seam's rules (a provider call or a decision outside `act`)."""


class SimOrchestratorProvider:
    """The provider seam as the orchestrator sees it (a `provider.base.CapacityProvider`):
    the simulated provider's calls, allowed only while the orchestrator acts."""

    def __init__(self, provider: SimProvider, host: RegionHost) -> None:
        self._provider = provider
        self._host = host

    @property
    def region(self) -> str:
        return self._provider.region

    @property
    def orchestrator_id(self) -> str:
        return self._provider.orchestrator_id

    def now_us(self) -> int:
        return self._provider.now_us()

    def launch(self, request: LaunchRequest) -> Instance:
        self._host.check_acting("launch")
        return self._provider.launch(request)

    def delete(self, request: DeleteRequest) -> Instance:
        self._host.check_acting("delete")
        return self._provider.delete(request)

    def list_by_tag(self, key: str, value: str) -> list[Instance]:
        self._host.check_acting("list_by_tag")
        return self._provider.list_by_tag(key, value)

    def get(self, instance_id: str) -> Instance:
        self._host.check_acting("get")
        return self._provider.get(instance_id)

    def reclaim(self, request: ReclaimRequest) -> ReclaimScheduled:
        self._host.check_acting("reclaim")
        return self._provider.reclaim(request)

    def poll_events(self, max_events: int = 10_000) -> list[Envelope]:
        raise OrchestratorMisuseError(
            "the orchestrator polled the simulated provider's events: the region delivers "
            "every event to observe(), and writes them to the log itself"
        )


class RegionHost:
    """The region's side of the seam: delivers events, calls `act`, keeps the wake-ups."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        catalogue: PoolCatalogue,
        provider: SimProvider,
        bus: EventBus,
        clock: Scheduler,
    ) -> None:
        self._orchestrator = orchestrator
        self._catalogue = catalogue
        self._provider = provider
        self._bus = bus
        self._clock = clock
        self._seam = SimOrchestratorProvider(provider, self)
        self._early: list[Envelope] = []  # published before start: delivered at start
        self._dirty = False  # observed something since the last act
        self._acting = False
        bus.tap(self._early.append)

    def start(self) -> None:
        """Start the orchestrator, then hand it what the region published so far."""
        self._orchestrator.start(self)
        early, self._early = self._early, []
        self._bus.tap(self._observe)
        for envelope in early:
            self._observe(envelope)
        self._clock.on_step = self._settle

    # -- OrchestratorHost --------------------------------------------------------------------

    @property
    def region(self) -> str:
        return self._bus.region

    @property
    def catalogue(self) -> PoolCatalogue:
        return self._catalogue

    def now_us(self) -> int:
        return self._clock.now_us

    def room_vcpu(self, pool_id: str) -> int:
        return self._provider.room_vcpu(pool_id)

    def wake_at(self, when_us: int, timer: str, *, last: bool = False) -> None:
        if when_us < self._clock.now_us:
            raise OrchestratorMisuseError(
                f"wake-up {timer!r} asked for {when_us}, before now ({self._clock.now_us})"
            )
        self._clock.at(when_us, partial(self._act, (timer,)), last=last)

    def emit(
        self,
        payload: Payload,
        producer: str,
        causation_id: str,
        correlation_id: str | None = None,
        discriminator: str = "",
    ) -> Envelope:
        self.check_acting(f"publish {payload.EVENT_TYPE}")
        return self._bus.emit(payload, producer, causation_id, correlation_id, discriminator)

    def publish(self, envelope: Envelope) -> None:
        self.check_acting(f"publish {envelope.event_type}")
        if envelope.region != self.region:
            raise OrchestratorMisuseError(
                f"decision {envelope.event_id} is for region {envelope.region!r}, "
                f"not {self.region!r}"
            )
        self._bus.publish(envelope)

    # -- the region's side -------------------------------------------------------------------

    def check_acting(self, what: str) -> None:
        if not self._acting:
            raise OrchestratorMisuseError(
                f"the orchestrator tried to {what} outside act(): observe() only updates "
                f"state; calls and decisions belong in act(), at sim time"
            )

    def _observe(self, envelope: Envelope) -> None:
        self._orchestrator.observe(envelope)
        self._dirty = True

    def _settle(self) -> None:
        """After each step: act on what the step published."""
        if self._dirty:
            self._act(())

    def _act(self, due: tuple[str, ...]) -> None:
        self._acting = True
        try:
            self._orchestrator.act(self._clock.now_us, self._seam, due)
        finally:
            self._acting = False
            self._dirty = False
