"""The scorer (ADR-07): rank the region's pools on a five-minute clock, keeping the inputs.

**Key: region** (one ranking per region; the scorer is the slow, judging half of ADR-07 and
needs every pool at once). Inputs: `pool_registered`, `rate_card`, `forward_capacity`, and the
lifecycle events that give each pool's observed interruption: `instance_launched`,
`instance_deleted`, `instance_lost` (exposure) and reclamations (`notice_received`, or a
reclaimed `instance_lost` without one). Output: one `pool_ranked` per pool per round.

**The clock is event time:** a round is due at every `ranking_interval_s` boundary; it fires
when the region's event time reaches the boundary (the first input at or past it, or a tick),
on the inputs that came before it. Rounds that no input separates are one round: the latest.

**The score** of a pool is ``log10(1 + forward vCPU) - interruption_weight x observed rate -
price_weight x price + saving_weight x (guaranteed rate - price)`` (prices in EUR per
vCPU-hour; the saving, never below 0, is what the ledger credits a useful vCPU-hour on the
pool with), every term of which the `pool_ranked` event carries, so a ranking can be
recomputed from its own events. The observed rate is reclamations per
instance-hour of the orchestrator's instances over `observation_window_s` (in buckets); with
less than `min_exposure_instance_h` the pool's record stands in for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.events import (
    Envelope,
    ForwardCapacity,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    PoolRanked,
    PoolRegistered,
    RateCard,
)
from schemas.ids import derived_event_id
from streams.deciders.maps import put, replace
from streams.deciders.observe import US_PER_H
from streams.deciders.region import PoolFacts, RegionView
from streams.deciders.settings import DeciderSettings, ScoringSettings
from streams.deciders.types import US, Cause, Input, Tick, decision

NAME = "scorer"
INPUTS = frozenset(
    {
        "pool_registered",
        "rate_card",
        "forward_capacity",
        "instance_launched",
        "instance_deleted",
        "instance_lost",
        "notice_received",
    }
)


@dataclass(frozen=True, slots=True)
class Observed:
    """A pool's live instances and, per bucket, reclamations and instance-microseconds.

    `reclaims` and `inst_us` are the sums over `buckets`, kept as the buckets change, so a
    round reads a pool's window without summing a day of buckets."""

    live: frozenset[str] = frozenset()
    noticed: frozenset[str] = frozenset()
    last_us: int = 0
    # (bucket start, reclamations, instance-microseconds), oldest first
    buckets: tuple[tuple[int, int, int], ...] = ()
    reclaims: int = 0
    inst_us: int = 0


@dataclass(frozen=True, slots=True)
class Latest:
    """The latest value of a ranking input and the event it came from."""

    value: int
    event_id: str
    at_us: int


@dataclass(frozen=True, slots=True)
class ScorerState:
    region: str
    now_us: int = 0
    next_round_us: int | None = None
    last_input: Cause | None = None
    pools: Mapping[str, PoolFacts] = field(default_factory=dict)
    prices: Mapping[str, Latest] = field(default_factory=dict)
    guaranteed: Mapping[str, int] = field(default_factory=dict)  # the card's guaranteed rate
    forward: Mapping[str, Latest] = field(default_factory=dict)
    observed: Mapping[str, Observed] = field(default_factory=dict)


class Scorer:
    """The scorer as a `Decider[ScorerState]` (key: region)."""

    name = NAME
    inputs = INPUTS

    def __init__(self, settings: DeciderSettings | None = None) -> None:
        self.settings: ScoringSettings = (settings or DeciderSettings()).scoring

    def key(self, event: Envelope) -> str | None:
        return event.region if event.event_type in INPUTS else None

    def initial(self, key: str) -> ScorerState:
        return ScorerState(key)

    def due_at(self, state: ScorerState) -> int | None:
        return state.next_round_us

    # -- evolve ------------------------------------------------------------------------------

    def evolve(self, state: ScorerState, event: Input) -> ScorerState:
        if isinstance(event, Tick):
            if state.next_round_us is not None and state.next_round_us <= event.at_us:
                return replace(state, next_round_us=self._round_at(event.now_us) + self._step)
            return state
        if event.event_type not in INPUTS:
            return state  # its own pool_ranked events: nothing to fold
        now_us = max(state.now_us, event.occurred_at)
        changes: dict[str, object] = {
            "now_us": now_us,
            "last_input": Cause.of(event),
            "region": event.region,
        }
        if state.next_round_us is None:
            changes["next_round_us"] = self._round_at(now_us) + self._step
        p = event.payload
        if isinstance(p, RateCard):
            price = Latest(p.price_per_vcpu_h_eur_micros, event.event_id, now_us)
            changes["prices"] = put(state.prices, p.pool_id, price)
            g = p.guaranteed_price_per_vcpu_h_eur_micros
            if state.guaranteed.get(p.pool_id) != g:
                changes["guaranteed"] = put(state.guaranteed, p.pool_id, g)
        elif isinstance(p, InstanceLaunched | InstanceLost | InstanceDeleted | NoticeReceived):
            seen = self._observe(state.observed.get(p.pool_id, Observed()), p, now_us)
            changes["observed"] = put(state.observed, p.pool_id, seen)
        elif isinstance(p, ForwardCapacity):
            forward = Latest(p.available_vcpu, event.event_id, now_us)
            changes["forward"] = put(state.forward, p.pool_id, forward)
        elif isinstance(p, PoolRegistered):
            changes["pools"] = put(state.pools, p.pool_id, PoolFacts.of(p))
        return replace(state, **changes)

    @property
    def _step(self) -> int:
        return self.settings.ranking_interval_s * US

    def _round_at(self, now_us: int) -> int:
        """The latest round boundary at or before `now_us`."""
        return now_us - now_us % self._step

    def _observe(
        self,
        seen: Observed,
        p: InstanceLaunched | InstanceLost | InstanceDeleted | NoticeReceived,
        now_us: int,
    ) -> Observed:
        seen = self._accrue(seen, now_us)
        if isinstance(p, InstanceLaunched):
            return replace(seen, live=seen.live | {p.instance_id})
        if isinstance(p, NoticeReceived):
            if p.instance_id in seen.noticed:
                return seen
            return self._count_reclaim(
                replace(seen, noticed=seen.noticed | {p.instance_id}), now_us
            )
        unseen = p.instance_id not in seen.noticed
        if isinstance(p, InstanceLost) and p.reason == "reclaimed" and unseen:
            seen = self._count_reclaim(seen, now_us)
        return replace(
            seen, live=seen.live - {p.instance_id}, noticed=seen.noticed - {p.instance_id}
        )

    def _accrue(self, seen: Observed, now_us: int) -> Observed:
        """Add the live count's instance-microseconds up to `now_us`, bucket by bucket, and
        drop the buckets the window has left behind."""
        bucket_us = self.settings.bucket_s * US
        at_us = seen.last_us if seen.last_us else now_us
        cutoff = now_us - self.settings.observation_window_s * US - bucket_us
        count = len(seen.live)
        buckets = seen.buckets
        if (at_us >= now_us or not count) and (not buckets or buckets[0][0] > cutoff):
            if now_us <= seen.last_us:
                return seen
            return replace(seen, last_us=now_us)  # nothing accrues, nothing leaves the window
        grown = list(buckets)
        inst_us = seen.inst_us
        while at_us < now_us and count:
            start = at_us - at_us % bucket_us
            until = min(now_us, start + bucket_us)
            _bump(grown, start, 0, count * (until - at_us))
            inst_us += count * (until - at_us)
            at_us = until
        reclaims = seen.reclaims
        first = 0
        while first < len(grown) and grown[first][0] <= cutoff:
            reclaims -= grown[first][1]
            inst_us -= grown[first][2]
            first += 1
        return replace(
            seen,
            last_us=max(seen.last_us, now_us),
            buckets=tuple(grown[first:]),
            reclaims=reclaims,
            inst_us=inst_us,
        )

    def _count_reclaim(self, seen: Observed, now_us: int) -> Observed:
        buckets = list(seen.buckets)
        bucket_us = self.settings.bucket_s * US
        _bump(buckets, now_us - now_us % bucket_us, 1, 0)
        return replace(seen, buckets=tuple(buckets), reclaims=seen.reclaims + 1)

    # -- decide ------------------------------------------------------------------------------

    def decide(self, state: ScorerState, event: Input, view: RegionView) -> list[Envelope]:
        if not isinstance(event, Tick) or state.last_input is None or not state.pools:
            return []
        round_us = self._round_at(event.now_us)
        ranking_id = derived_event_id(f"{state.region}/{round_us}", "ranking", NAME)
        scored = sorted(
            ((self.score_inputs(state, pool_id, round_us), pool_id) for pool_id in state.pools),
            key=lambda item: (-item[0][0], item[1]),
        )
        window_s = self.settings.observation_window_s
        out: list[Envelope] = []
        for rank, ((score, available, observed, price, ids), pool_id) in enumerate(scored, 1):
            payload = PoolRanked(
                ranking_id=ranking_id,
                pool_id=pool_id,
                rank=rank,
                pool_count=len(scored),
                score=score,
                available_vcpu=available,
                observed_interruption_per_h=observed,
                price_per_vcpu_h_eur_micros=price,
                correlation_group=state.pools[pool_id].correlation_group,
                window_s=window_s,
                input_event_ids=ids,
                guaranteed_price_per_vcpu_h_eur_micros=(
                    state.guaranteed.get(pool_id, 0) if pool_id in state.prices else None
                ),
            )
            out.append(
                decision(
                    payload,
                    cause=state.last_input,
                    at_us=round_us,
                    decider=NAME,
                    discriminator=f"{round_us}/{pool_id}",
                )
            )
        return out

    def score_inputs(
        self, state: ScorerState, pool_id: str, round_us: int
    ) -> tuple[float, int, float, int, tuple[str, ...]]:
        """(score, forward vCPU, observed rate, price, input event ids) of a pool at a round."""
        s = self.settings
        forward = state.forward.get(pool_id)
        price = state.prices.get(pool_id)
        available = forward.value if forward else 0
        price_micros = price.value if price else 0
        observed = self.observed_rate(state, pool_id, round_us)
        guaranteed = state.guaranteed.get(pool_id, 0)
        saving_micros = max(0, guaranteed - price_micros) if price else 0
        score = (
            math.log10(1 + available)
            - s.interruption_weight * observed
            - s.price_weight * price_micros / 1_000_000
            + s.saving_weight * saving_micros / 1_000_000
        )
        ids = tuple(i.event_id for i in (price, forward) if i is not None)
        return score, available, observed, price_micros, ids

    def observed_rate(self, state: ScorerState, pool_id: str, round_us: int) -> float:
        """Reclamations per instance-hour over the window before `round_us` (else the record).

        The window is the buckets starting in [round - window, round): the pool's running sums
        less the buckets before the window, plus what the live instances accrued since the
        pool's last event (all of it inside the window, but for a pool quiet since before)."""
        s = self.settings
        seen = state.observed.get(pool_id)
        reclaims = inst_us = 0
        if seen is not None:
            start = round_us - s.observation_window_s * US
            reclaims, inst_us = seen.reclaims, seen.inst_us
            for bucket_start, bucket_reclaims, bucket_inst_us in seen.buckets:
                if bucket_start >= start:
                    break
                reclaims -= bucket_reclaims
                inst_us -= bucket_inst_us
            if seen.last_us and seen.last_us < round_us:
                inst_us += len(seen.live) * (round_us - max(seen.last_us, start))
        exposure_h = inst_us / US_PER_H
        if exposure_h < s.min_exposure_instance_h:
            facts = state.pools.get(pool_id)
            return (facts.expected_per_h or 0.0) if facts else 0.0
        return reclaims / exposure_h


def _bump(buckets: list[tuple[int, int, int]], start: int, reclaims: int, inst_us: int) -> None:
    if buckets and buckets[-1][0] == start:
        _, r, e = buckets[-1]
        buckets[-1] = (start, r + reclaims, e + inst_us)
    else:
        buckets.append((start, reclaims, inst_us))
