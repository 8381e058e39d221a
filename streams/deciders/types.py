"""What every decider shares: the decider shape, event-time ticks, and how decisions are stamped.

A decider is pure (DESIGN.md §4): ``evolve(state, input) -> state`` and
``decide(state, input, view) -> [Envelope]`` over keyed, frozen state, with no clock, no I/O and
no randomness. `step` is the one call a runtime makes per input; it fires the timers that are
due first, then decides on the input, then folds the input and the decisions into the state.

**Time is event time.** A decider's timers (the 5-minute ranking clock, readmission after
sustained health, the staggered fallback, the minimum dwell, the floor check) are due times kept
in its state. A runtime advances a key's time with each of its events, or with a `Tick` when
the region's event time (its watermark over the merged inputs) moves past a due time while the
key is quiet; either way a timer fires at its due time, so a replay fires it at the same instant.

**Decisions are stamped deterministically** (`decision`):

* ``event_id`` is derived (UUIDv5) from the cause's event id, the event type and a
  discriminator, so a replay produces the same ids and consumers remove duplicates by id;
* ``causation_id`` is the triggering event, or for a timer the event that armed it (the
  exclusion a readmission ends, the fallback a return ends), so the id does not depend on which
  event happened to move time on;
* ``correlation_id`` is the cause's (the wave or incident propagates);
* ``occurred_at`` is the decision's event time: the cause's ``occurred_at``, or the timer's due
  time; ``recorded_at`` equals ``occurred_at``. A decider has no clock, so its record time is its
  event time; how long a runtime took to emit a decision is a runtime metric, not event data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

from schemas.events import Envelope, Payload
from schemas.ids import derived_event_id

if TYPE_CHECKING:
    from streams.deciders.region import RegionView

S = TypeVar("S")

MAX_TIMER_FIRINGS = 10_000  # timers one step may fire before the decider is known broken
US = 1_000_000


@dataclass(frozen=True, slots=True)
class Tick:
    """Event time has reached `now_us` for a key: fire its timers due by then.

    `at_us` is the due time being fired (a decision made on the tick happens then); `now_us` is
    how far event time has got, which a periodic timer (the ranking clock) uses to skip rounds
    that no input separated.
    """

    at_us: int
    now_us: int


Input: TypeAlias = Envelope | Tick


@dataclass(frozen=True, slots=True)
class Cause:
    """What a decision names as its cause: enough of an envelope to stamp it later (a timer)."""

    event_id: str
    region: str
    correlation_id: str | None
    occurred_at: int

    @classmethod
    def of(cls, envelope: Envelope) -> Cause:
        return cls(
            envelope.event_id, envelope.region, envelope.correlation_id, envelope.occurred_at
        )


class Decider(Protocol[S]):
    """A pure decider over keyed state (see the module docstring)."""

    @property
    def name(self) -> str:
        """Short name; decisions carry ``producer = 'deciders/<name>'``."""
        ...

    @property
    def inputs(self) -> frozenset[str]:
        """The event types the decider reads from the log (never its own outputs)."""
        ...

    def key(self, event: Envelope) -> str | None:
        """The state an input belongs to (pool, workload or region id); None: not an input."""
        ...

    def initial(self, key: str) -> S:
        """The state of a key before its first input."""
        ...

    def evolve(self, state: S, event: Input) -> S:
        """The state after an input or after one of the decider's own decisions."""
        ...

    def decide(self, state: S, event: Input, view: RegionView) -> list[Envelope]:
        """The decisions an input calls for, given the state before it."""
        ...

    def due_at(self, state: S) -> int | None:
        """The earliest pending timer of the key, if any."""
        ...


class TimerLoopError(RuntimeError):
    """A decider kept a timer due after firing it; the message names the decider and key."""


def step(decider: Decider[S], state: S, event: Input, view: RegionView) -> tuple[S, list[Envelope]]:
    """Process one input for one key: due timers first, then the input; returns the new state
    and the decisions, in order. The view must already include the input (the runtime folds it
    into the region view before stepping the deciders)."""
    now_us = event.occurred_at if isinstance(event, Envelope) else event.now_us
    out: list[Envelope] = []
    for _ in range(MAX_TIMER_FIRINGS):
        due = decider.due_at(state)
        if due is None or due > now_us:
            break
        tick = Tick(due, now_us)
        fired = decider.decide(state, tick, view)
        state = _fold(decider, state, tick, fired)
        out.extend(fired)
    else:
        raise TimerLoopError(
            f"decider {decider.name!r} kept a timer due at or before {now_us} after "
            f"{MAX_TIMER_FIRINGS} firings: its evolve must clear or move a fired timer"
        )
    if isinstance(event, Envelope):
        made = decider.decide(state, event, view)
        state = _fold(decider, state, event, made)
        out.extend(made)
    return state, out


def _fold(decider: Decider[S], state: S, event: Input, made: Sequence[Envelope]) -> S:
    state = decider.evolve(state, event)
    for decision_ in made:
        state = decider.evolve(state, decision_)
    return state


def decision(
    payload: Payload,
    *,
    cause: Cause,
    at_us: int,
    decider: str,
    discriminator: str = "",
    key: str | None = None,
) -> Envelope:
    """A decision event stamped from its cause (see the module docstring for the rules).

    `discriminator` must separate decisions of one type from one cause (a pool, a due time).
    `key` defaults to the payload's key field, or the region for region-keyed events.
    """
    event_type = payload.EVENT_TYPE
    if key is None:
        key = cause.region if payload.KEY == "region" else str(getattr(payload, payload.KEY))
    return Envelope(
        event_id=derived_event_id(cause.event_id, event_type, f"{decider}/{discriminator}"),
        event_type=event_type,
        occurred_at=at_us,
        recorded_at=at_us,
        region=cause.region,
        key=key,
        causation_id=cause.event_id,
        correlation_id=cause.correlation_id,
        producer=f"deciders/{decider}",
        payload=payload,
    )
