"""The exclusion watcher (ADR-07): take a misbehaving pool out of placement within 60 s.

**Key: pool.** Inputs: `pool_registered` (the pool's record), `instance_launched`,
`instance_deleted` and `instance_lost` (the pool's live instances, hence its exposure in
instance-hours) and the reclamations themselves: a `notice_received`, or an `instance_lost`
reclaimed without a notice the watcher saw. A notice and the loss that follows it are one
reclamation, counted at the notice (the earliest evidence). Other inputs of the pool (rate
cards, forward capacity) only move its event time on. Outputs: `pool_excluded`,
`pool_readmitted`.

**Rules**, judged on every input of the pool, in event time. Both compare the reclamations seen
in a window with what the pool's record predicts for the instance-hours it held there (the
Poisson mean lambda = expected rate x exposure), and fire only when the count is at least
`rate_factor` x the expected rate *and* so unlikely under it (tail probability below
`significance`) that chance does not explain it:

* **burst**: at least `burst_min_reclaims` in the last `burst_window_s` (60 s);
* **rate**: at least `rate_min_reclaims` in the last `rate_window_s`.

The exclusion is decided on the input that completes the case, so in event time it comes 0 s
after its last evidence and, for a burst, at most 60 s after its first. It lists the ids of its
evidence events and every figure it compared.

**Readmission (hysteresis):** an excluded pool is readmitted once it has been *healthy* for
`readmission_healthy_s`: no burst, and no more reclamations in that window than
`readmission_factor` (below `rate_factor`) x its expectation. A reclamation that leaves the pool
unhealthy restarts the clock; the readmission is a timer due at ``healthy_since + period``,
which judges health again when it fires. A pool excluded again within `strike_memory_s` of its
readmission must stay healthy twice as long each time (up to 2^`readmission_backoff_doublings`
x the period), and the evidence a readmission forgave is never judged again: a pool is not
re-excluded on stale evidence, and one that keeps misbehaving stays out instead of flapping.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.events import (
    Envelope,
    ExclusionReason,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    PoolExcluded,
    PoolReadmitted,
    PoolRegistered,
)
from streams.deciders.maps import replace
from streams.deciders.observe import Exposure, poisson_tail
from streams.deciders.region import RegionView
from streams.deciders.settings import DeciderSettings, ExclusionSettings
from streams.deciders.types import US, Cause, Input, Tick, decision

NAME = "exclusion"
INPUTS = frozenset(
    {
        "pool_registered",
        "instance_launched",
        "instance_deleted",
        "instance_lost",
        "notice_received",
        "rate_card",
        "forward_capacity",
    }
)


@dataclass(frozen=True, slots=True)
class Reclaim:
    """One reclamation of the pool: when, the evidence event, and the instance."""

    at_us: int
    event_id: str
    instance_id: str


@dataclass(frozen=True, slots=True)
class Judgement:
    """What a rule found over a window; `fires` says whether it excludes."""

    reason: ExclusionReason
    start_us: int
    end_us: int
    reclaims: tuple[Reclaim, ...]
    exposure_instance_h: float
    expected_per_h: float
    threshold_per_h: float
    tail_probability: float
    fires: bool

    @property
    def expected_reclaims(self) -> float:
        return self.expected_per_h * self.exposure_instance_h

    @property
    def observed_per_h(self) -> float:
        if self.exposure_instance_h > 0:
            return len(self.reclaims) / self.exposure_instance_h
        return float(len(self.reclaims)) * 3600 * US / max(1, self.end_us - self.start_us)


@dataclass(frozen=True, slots=True)
class PoolWatch:
    """The watcher's state of one pool."""

    pool_id: str
    horizon_us: int
    expected_per_h: float | None = None
    reclaimable: bool = True
    now_us: int = 0
    live: frozenset[str] = frozenset()
    noticed: frozenset[str] = frozenset()  # live instances already counted at their notice
    exposure: Exposure = field(default_factory=lambda: Exposure(0))
    reclaims: tuple[Reclaim, ...] = ()  # inside the longest window, oldest first
    excluded_by: Cause | None = None  # the pool_excluded event while excluded
    excluded_at_us: int = 0
    healthy_since_us: int = 0
    strikes: int = 0  # exclusions in a row, each within strike_memory_s of a readmission
    readmitted_at_us: int | None = None
    forgiven_until_us: int = 0  # evidence up to the last readmission was judged: not again


class ExclusionWatcher:
    """The exclusion watcher as a `Decider[PoolWatch]` (key: pool id)."""

    name = NAME
    inputs = INPUTS

    def __init__(self, settings: DeciderSettings | None = None) -> None:
        self.settings: ExclusionSettings = (settings or DeciderSettings()).exclusion
        s = self.settings
        self._horizon_us = max(s.rate_window_s, s.burst_window_s, s.readmission_healthy_s) * US
        self._last: tuple[PoolWatch, Envelope, PoolWatch] | None = None

    def key(self, event: Envelope) -> str | None:
        if event.event_type not in INPUTS:
            return None
        return str(getattr(event.payload, "pool_id", "")) or None

    def initial(self, key: str) -> PoolWatch:
        return PoolWatch(key, self._horizon_us, exposure=Exposure(self._horizon_us))

    def due_at(self, state: PoolWatch) -> int | None:
        if state.excluded_by is None:
            return None
        return state.healthy_since_us + self.healthy_period_s(state) * US

    def healthy_period_s(self, state: PoolWatch) -> int:
        """How long the pool must stay healthy to be readmitted: longer for repeat offenders."""
        s = self.settings
        doublings = min(max(0, state.strikes - 1), s.readmission_backoff_doublings)
        return s.readmission_healthy_s << doublings

    # -- evolve ------------------------------------------------------------------------------

    def evolve(self, state: PoolWatch, event: Input) -> PoolWatch:
        if isinstance(event, Tick):
            return self._after_tick(state, event)
        p = event.payload
        if isinstance(p, PoolExcluded):
            at = event.occurred_at
            last = state.readmitted_at_us
            repeat = last is not None and at - last < self.settings.strike_memory_s * US
            return replace(
                state,
                excluded_by=Cause.of(event),
                excluded_at_us=at,
                healthy_since_us=at,
                strikes=state.strikes + 1 if repeat else 1,
            )
        if isinstance(p, PoolReadmitted):
            at = event.occurred_at
            return replace(state, excluded_by=None, readmitted_at_us=at, forgiven_until_us=at)
        seen = self._observe(state, event)
        # Only a reclamation can make an excluded pool unhealthy; one that does restarts the
        # health clock (windows sliding on cannot, they only drop old reclamations).
        troubled = seen.reclaims != state.reclaims and not self._healthy(seen, seen.now_us)
        if seen.excluded_by is not None and troubled:
            seen = replace(seen, healthy_since_us=seen.now_us)
        return seen

    def _after_tick(self, state: PoolWatch, tick: Tick) -> PoolWatch:
        # A readmission that fired is folded in by its own event; one that found the pool
        # unhealthy restarts the health clock at the tick, so the timer moves on.
        due = self.due_at(state)
        if due is not None and due <= tick.at_us:
            return replace(state, healthy_since_us=tick.at_us, now_us=max(state.now_us, tick.at_us))
        return state

    def _observe(self, state: PoolWatch, event: Envelope) -> PoolWatch:
        # `step` asks `decide` and then `evolve` about the same (state, input): the last pair's
        # answer is kept (by identity: both are immutable), not worked out twice.
        last = self._last
        if last is not None and last[0] is state and last[1] is event:
            return last[2]
        seen = self._observed(state, event)
        self._last = (state, event, seen)
        return seen

    def _observed(self, state: PoolWatch, event: Envelope) -> PoolWatch:
        now_us = max(state.now_us, event.occurred_at)
        if now_us != state.now_us:
            state = replace(state, now_us=now_us)
        p = event.payload
        if isinstance(p, PoolRegistered):
            return replace(
                state,
                expected_per_h=p.expected_interruption_per_h,
                reclaimable=p.purchase_model == "reclaimable",
            )
        if isinstance(p, InstanceLaunched):
            return _live(state, state.live | {p.instance_id})
        if isinstance(p, NoticeReceived):
            if p.instance_id in state.noticed:
                return state
            state = _reclaimed(state, Reclaim(now_us, event.event_id, p.instance_id))
            if p.instance_id in state.live:
                state = replace(state, noticed=state.noticed | {p.instance_id})
            return state
        if isinstance(p, InstanceLost):
            counted = p.instance_id in state.noticed
            if p.reason == "reclaimed" and not counted:
                state = _reclaimed(state, Reclaim(now_us, event.event_id, p.instance_id))
            state = replace(state, noticed=state.noticed - {p.instance_id})
            return _live(state, state.live - {p.instance_id})
        if isinstance(p, InstanceDeleted):
            state = replace(state, noticed=state.noticed - {p.instance_id})
            return _live(state, state.live - {p.instance_id})
        return state

    # -- decide ------------------------------------------------------------------------------

    def decide(self, state: PoolWatch, event: Input, view: RegionView) -> list[Envelope]:
        if isinstance(event, Tick):
            return self._readmit(state, event)
        if event.event_type not in INPUTS:
            return []
        seen = self._observe(state, event)
        if seen.excluded_by is not None or not seen.reclaimable:
            return []
        if len(seen.reclaims) == len(state.reclaims) and seen.reclaims == state.reclaims:
            return []  # no new evidence: nothing to judge
        for judgement in (self.burst(seen, seen.now_us), self.rate(seen, seen.now_us)):
            if judgement.fires:
                return [self._exclusion(seen, judgement, event)]
        return []

    def burst(self, state: PoolWatch, now_us: int) -> Judgement:
        s = self.settings
        return self._judge(state, "burst", now_us, s.burst_window_s, s.burst_min_reclaims)

    def rate(self, state: PoolWatch, now_us: int) -> Judgement:
        s = self.settings
        return self._judge(state, "rate", now_us, s.rate_window_s, s.rate_min_reclaims)

    def _judge(
        self,
        state: PoolWatch,
        reason: ExclusionReason,
        now_us: int,
        window_s: int,
        min_reclaims: int,
    ) -> Judgement:
        s = self.settings
        # Evidence a readmission already forgave is not judged again: the case starts afresh.
        start_us = max(now_us - window_s * US, state.forgiven_until_us)
        inside = tuple(r for r in state.reclaims if start_us < r.at_us <= now_us)
        exposure_h = state.exposure.instance_h(start_us, now_us)
        expected = self._expected(state)
        threshold = s.rate_factor * expected
        tail = poisson_tail(len(inside), expected * exposure_h)
        judgement = Judgement(
            reason, start_us, now_us, inside, exposure_h, expected, threshold, tail, False
        )
        fires = (
            len(inside) >= min_reclaims
            and judgement.observed_per_h >= threshold
            and tail < s.significance
        )
        return replace(judgement, fires=fires)

    def _healthy(self, state: PoolWatch, now_us: int) -> bool:
        s = self.settings
        if self.burst(state, now_us).fires:
            return False
        start_us = now_us - s.readmission_healthy_s * US
        count = sum(1 for r in state.reclaims if start_us < r.at_us <= now_us)
        exposure_h = state.exposure.instance_h(start_us, now_us)
        return count <= s.readmission_factor * self._expected(state) * exposure_h

    def _expected(self, state: PoolWatch) -> float:
        if state.expected_per_h is None:
            return self.settings.unrecorded_expected_per_h
        return state.expected_per_h

    def _exclusion(self, state: PoolWatch, j: Judgement, event: Envelope) -> Envelope:
        payload = PoolExcluded(
            pool_id=state.pool_id,
            reason=j.reason,
            observed_interruption_per_h=j.observed_per_h,
            expected_interruption_per_h=j.expected_per_h,
            reclaimed_instances=len(j.reclaims),
            window_start_at=j.start_us,
            window_end_at=j.end_us,
            evidence_event_ids=tuple(r.event_id for r in j.reclaims),
            threshold_per_h=j.threshold_per_h,
            exposure_instance_h=j.exposure_instance_h,
            expected_reclaims=j.expected_reclaims,
            tail_probability=j.tail_probability,
        )
        # At the pool's event time: a late piece of evidence completes the case when it arrives.
        return decision(
            payload,
            cause=Cause.of(event),
            at_us=state.now_us,
            decider=NAME,
            discriminator=state.pool_id,
        )

    def _readmit(self, state: PoolWatch, tick: Tick) -> list[Envelope]:
        due = self.due_at(state)
        if due is None or due > tick.at_us or state.excluded_by is None:
            return []
        if not self._healthy(state, tick.at_us):
            return []
        s = self.settings
        start_us = tick.at_us - s.readmission_healthy_s * US
        inside = tuple(r for r in state.reclaims if start_us < r.at_us <= tick.at_us)
        exposure_h = state.exposure.instance_h(start_us, tick.at_us)
        observed = len(inside) / exposure_h if exposure_h > 0 else 0.0
        payload = PoolReadmitted(
            pool_id=state.pool_id,
            healthy_s=(tick.at_us - state.healthy_since_us) // US,
            observed_interruption_per_h=observed,
            expected_interruption_per_h=self._expected(state),
            evidence_event_ids=tuple(r.event_id for r in inside),
            exclusion_event_id=state.excluded_by.event_id,
        )
        return [
            decision(
                payload,
                cause=state.excluded_by,
                at_us=tick.at_us,
                decider=NAME,
                discriminator=f"{state.pool_id}/{tick.at_us}",
            )
        ]


def _live(state: PoolWatch, live: frozenset[str]) -> PoolWatch:
    if live == state.live:
        return state
    return replace(state, live=live, exposure=state.exposure.set_count(state.now_us, len(live)))


def _reclaimed(state: PoolWatch, reclaim: Reclaim) -> PoolWatch:
    cutoff = state.now_us - state.horizon_us
    kept = tuple(r for r in state.reclaims if r.at_us > cutoff)
    return replace(state, reclaims=(*kept, reclaim))
