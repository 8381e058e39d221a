"""May the daily drill run now? (ADR-33): a pure fold over the region's events and a verdict.

The drill reclaims a share of a pool through the provider's own reclaim path, so it must never
add to a real incident: it is refused while a real wave is in progress (at least
`wave_min_notices` notices the drills did not cause within the last `wave_window_s` of event
time, or any notice the provider marked as part of a wave or incident by its correlation id),
while an actuator breaker is open (a `breaker_tripped` not yet followed by its
`breaker_reset`), and while another drill has not finished. Each refusal names its evidence.

`DrillGate.evolve` folds one event; `DrillGate.judge` gives the verdict at an event time.
Nothing here reads a clock, does I/O or draws a random number: the I/O side (`provider.drill`)
passes the time the provider reports, and the same events and time give the same verdict, so
a replay reproduces the drill's `drill_started` or `drill_refused` byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import (
    BreakerReset,
    BreakerTripped,
    DrillFinished,
    DrillRefused,
    DrillStarted,
    Envelope,
    NoticeReceived,
)
from schemas.ids import derived_event_id
from streams.deciders.maps import replace

US = 1_000_000
PRODUCER = "drill"


@dataclass(frozen=True, slots=True)
class DrillSettings:
    """The gate's parameters (planning values: the proof phase replaces them)."""

    wave_window_s: int = 600
    # Background reclaims of the default simulated region reach 11 notices in 5 minutes; a
    # hall-wide wave, dozens (docs/operating.md, "The daily drill").
    wave_min_notices: int = 20
    max_share_ratio: float = 0.25
    grace_s: int = 120  # after the last deadline, for the replacement to land and be seen


@dataclass(frozen=True, slots=True)
class GateState:
    latest_us: int = 0
    notices: tuple[tuple[int, str, bool], ...] = ()  # (occurred_at, event id, in a wave)
    breakers: tuple[tuple[str, str], ...] = ()  # (breaker, trip event id), open ones
    running: tuple[tuple[str, str], ...] = ()  # (drill id, drill_started event id)
    drills: frozenset[str] = frozenset()  # every drill id seen started
    drilled: frozenset[str] = frozenset()  # every instance a drill reclaimed


@dataclass(frozen=True, slots=True)
class Refusal:
    rule: str
    reason: str
    evidence_event_ids: tuple[str, ...]


class DrillGate:
    def __init__(self, settings: DrillSettings | None = None) -> None:
        self.settings = settings or DrillSettings()

    def fold(self, events: list[Envelope], state: GateState | None = None) -> GateState:
        state = state or GateState()
        for event in events:
            state = self.evolve(state, event)
        return state

    def evolve(self, state: GateState, event: Envelope) -> GateState:
        latest_us = max(state.latest_us, event.occurred_at)
        p = event.payload
        if isinstance(p, NoticeReceived):
            # A drill's own notice: by its correlation id, or by its instance where the notice
            # path does not carry the reclaim's correlation id (the OpenStack feeds).
            if event.correlation_id in state.drills or p.instance_id in state.drilled:
                return replace(state, latest_us=latest_us)
            horizon = latest_us - self.settings.wave_window_s * US
            in_wave = event.correlation_id is not None
            kept = tuple(n for n in state.notices if n[0] > horizon)
            return replace(
                state,
                latest_us=latest_us,
                notices=(*kept, (event.occurred_at, event.event_id, in_wave)),
            )
        if isinstance(p, BreakerTripped):
            others = tuple(b for b in state.breakers if b[0] != p.breaker)
            opened = (*others, (p.breaker, event.event_id))
            return replace(state, latest_us=latest_us, breakers=opened)
        if isinstance(p, BreakerReset):
            kept_b = tuple(b for b in state.breakers if b[0] != p.breaker)
            return replace(state, latest_us=latest_us, breakers=kept_b)
        if isinstance(p, DrillStarted):
            return replace(
                state,
                latest_us=latest_us,
                running=(*state.running, (p.drill_id, event.event_id)),
                drills=state.drills | {p.drill_id},
                drilled=state.drilled | set(p.instance_ids),
            )
        if isinstance(p, DrillFinished):
            kept_r = tuple(r for r in state.running if r[0] != p.drill_id)
            return replace(state, latest_us=latest_us, running=kept_r)
        return replace(state, latest_us=latest_us)

    def judge(self, state: GateState, at_us: int) -> Refusal | None:
        """None: the drill may run at `at_us`; else the first rule that refuses it."""
        if state.running:
            ids = ", ".join(r[0] for r in state.running)
            return Refusal(
                "drill_running",
                f"drill {ids} has not finished; one drill at a time "
                "(spotcap drill run finishes it once its deadlines have passed)",
                tuple(r[1] for r in state.running),
            )
        if state.breakers:
            names = ", ".join(b[0] for b in state.breakers)
            return Refusal(
                "breaker",
                f"the {names} breaker is open; a drill waits for its breaker_reset",
                tuple(b[1] for b in state.breakers),
            )
        horizon = at_us - self.settings.wave_window_s * US
        recent = [n for n in state.notices if horizon < n[0] <= at_us]
        waves = [n for n in recent if n[2]]
        if waves:
            return Refusal(
                "wave",
                f"{len(waves)} notices of a wave or incident (a correlation id not a drill's) "
                f"in the last {self.settings.wave_window_s} s; the drill waits for it to end",
                tuple(n[1] for n in waves),
            )
        if len(recent) >= self.settings.wave_min_notices:
            return Refusal(
                "wave",
                f"{len(recent)} real notices in the last {self.settings.wave_window_s} s "
                f"(a wave from {self.settings.wave_min_notices}); the drill waits for it to end",
                tuple(n[1] for n in recent),
            )
        return None


def choose(instance_ids: list[str], share_ratio: float, drill_id: str) -> list[str]:
    """The instances a drill reclaims: ceil(share x count) of them (at least one of a pool that
    has any), ordered by a hash of the drill's id and the instance's, so each drill picks a
    different spread and the same drill always picks the same instances."""
    if not instance_ids:
        return []
    count = max(1, -(-round(share_ratio * len(instance_ids) * 1_000_000) // 1_000_000))
    ordered = sorted(set(instance_ids), key=lambda i: derived_event_id(drill_id, "pick", i))
    return sorted(ordered[:count])


def started(
    drill_id: str,
    region: str,
    at_us: int,
    payload: DrillStarted,
) -> Envelope:
    return _stamp(drill_id, region, at_us, payload)


def refused(drill_id: str, region: str, at_us: int, payload: DrillRefused) -> Envelope:
    """A refusal's id also names its time: a scheduled drill refused now may be asked again."""
    return _stamp(drill_id, region, at_us, payload, discriminator=str(at_us))


def finished(
    drill_id: str, region: str, at_us: int, payload: DrillFinished, cause_id: str
) -> Envelope:
    return _stamp(drill_id, region, at_us, payload, cause_id=cause_id)


def _stamp(
    drill_id: str,
    region: str,
    at_us: int,
    payload: DrillStarted | DrillRefused | DrillFinished,
    *,
    cause_id: str | None = None,
    discriminator: str = "",
) -> Envelope:
    """A drill's event: its id derived from the drill's id, so writing it again (a retried
    run) gives the same event, which consumers drop as a duplicate."""
    return Envelope(
        event_id=derived_event_id(drill_id, payload.EVENT_TYPE, discriminator),
        event_type=payload.EVENT_TYPE,
        occurred_at=at_us,
        recorded_at=at_us,
        region=region,
        key=payload.pool_id,
        causation_id=cause_id,
        correlation_id=drill_id,
        producer=PRODUCER,
        payload=payload,
    )
