"""The I/O side of the actuator's budget: a provider adapter's ``acquire(kind)`` hook (ADR-12).

`BudgetHook` is what a provider adapter calls immediately before each mutating request (the
OpenStack adapter's ``acquire`` seam, `provider.openstack.budget`). It asks the pure actuator
guard (`streams.deciders.actuator.ActuatorGuard.admit`) at the provider's time, so every
mutating call of every provider draws from the one regional budget, and then waits until the
guard's ``not_before`` (bounded by `max_wait_s`) or raises when the guard refuses. The guard's
events (a throttled or refused call, a tripped breaker) go to `on_event`, for the caller to
write to the log: every throttled or refused action is an event.

The provider's time is its ``now_us()``: the wall clock for a real cloud, the region's clock
for a simulated region served as a cloud, whose sim time runs ``clock_speed`` times as fast as
real time (weeks behind the wall clock). The adapter is built with the hook already in it, so
the hook starts on the wall clock and `BudgetHook.follow` binds it to the adapter once built;
the guard's events are then stamped in the time of every other event the adapter writes, and a
wait for a token, in the provider's time, is slept in real seconds (divided by the speed-up).

The hook is thread-safe; the decision path (decisions replayed in event time) uses the guard
directly and never this class.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from schemas.events import ActuationCall, Envelope
from schemas.ids import derived_event_id
from streams.deciders.actuator import ActuatorGuard, Call, GuardState
from streams.deciders.types import Cause

# The provider operations the hook accepts, and the actuator call each draws as: a reclaim
# (the exercise job's call, ADR-33) ends in a termination, so it counts as a delete.
CALLS: dict[str, ActuationCall] = {
    "launch": "launch",
    "delete": "delete",
    "reserve": "reserve",
    "reclaim": "delete",
}


class ActuationRefusedError(RuntimeError):
    """The actuator refused a mutating call; the message says which rule and why."""


class BudgetWaitError(RuntimeError):
    """A call would have waited longer than the hook's bound for a token."""


class ProviderClock(Protocol):
    """The provider's time: what its adapter stamps its own events with, and how fast it runs."""

    def now_us(self) -> int: ...

    @property
    def clock_speed(self) -> float:
        """The provider's seconds per real second (1 for a real cloud's wall clock)."""
        ...


P = TypeVar("P", bound=ProviderClock)


class BudgetHook:
    """``acquire(kind)`` for a provider adapter, drawing from the actuator guard's budget at
    `clock_us`, whose time runs `speed` times as fast as real time; `max_wait_s` is in real
    seconds, how long a caller may block."""

    def __init__(
        self,
        guard: ActuatorGuard,
        region: str,
        *,
        max_wait_s: float = 30.0,
        on_event: Callable[[Envelope], None] = lambda event: None,
        clock_us: Callable[[], int] = lambda: time.time_ns() // 1000,
        speed: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed {speed!r}: the clock's seconds per real second, above 0")
        self._guard = guard
        self._lock = threading.Lock()
        self._clock_us = clock_us
        self._speed = speed
        self.state: GuardState = guard.initial(region)
        self._sleep = sleep
        self._on_event = on_event
        self.max_wait_s = max_wait_s
        self._seq = 0

    def follow(self, provider: P) -> P:
        """Draw at `provider`'s time from now on (its ``now_us``, at its ``clock_speed``);
        returns `provider`, for the composition root that built it around this hook."""
        speed = provider.clock_speed
        if not speed > 0:
            raise ValueError(f"the provider's clock_speed is {speed!r}: expected above 0")
        with self._lock:
            self._clock_us, self._speed = provider.now_us, speed
        return provider

    def __call__(self, kind: str) -> None:
        call_kind = CALLS.get(kind)
        if call_kind is None:
            raise ValueError(f"unknown mutating call {kind!r}: expected one of {sorted(CALLS)}")
        with self._lock:
            now_us, speed = self._clock_us(), self._speed
            self._seq += 1
            cause = Cause(
                derived_event_id(f"{self.state.region}/hook/{now_us}/{self._seq}", kind),
                self.state.region,
                None,
                now_us,
            )
            # The adapter refuses, before drawing a token, to delete what is not tagged as ours
            # (it reads the instance's tags); the hook does not know the instance.
            operation = None if kind == call_kind else kind
            call = Call(call_kind, cause, operation=operation, owner_checked=True)
            judged = self._guard.admit(self.state, call, now_us)
            self.state = judged.state
            for event in judged.events:
                self.state = self._guard.evolve(self.state, event)
        for event in judged.events:
            self._on_event(event)
        [verdict] = judged.verdicts
        if verdict.not_before_us is None:
            raise ActuationRefusedError(
                f"the actuator refused a {kind} call (rule {verdict.rule}): "
                + "; ".join(str(getattr(e.payload, "reason", "")) for e in judged.events)
            )
        # The guard's not_before is in the provider's time; the caller waits in real time.
        wait_s = (verdict.not_before_us - now_us) / 1_000_000 / speed
        if wait_s > self.max_wait_s:
            raise BudgetWaitError(
                f"a {kind} call would wait {wait_s:.1f} s for a token, more than the hook's "
                f"{self.max_wait_s:.1f} s: the regional budget is spent; retry later"
            )
        if wait_s > 0:
            self._sleep(wait_s)
