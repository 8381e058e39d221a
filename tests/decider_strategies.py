"""Hypothesis strategies for the deciders: generated fleets, contracts, claims and sequences.

A `Fleet` is a region's pools (reclaimable pools in correlation groups over halls, committed
and guaranteed pools per hall), which of them are excluded, and how much room each has; its
`events` register it the way the market topic would.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from schemas.events import Envelope, PoolExcluded, PurchaseModel
from tests.decider_events import GUARANTEED_PRICE, MIN, Events, PoolSpec, S
from tests.factories import T0_US

SIZES = (2, 4, 8, 16, 32)
FAMILIES = ("c7", "c8", "m6", "g5")


@dataclass(frozen=True)
class Fleet:
    specs: tuple[PoolSpec, ...]
    room: dict[str, int]  # forward capacity per non-committed pool
    excluded: frozenset[str]

    def reclaimable(self) -> list[PoolSpec]:
        return [s for s in self.specs if s.model == "reclaimable"]

    def of(self, pool_id: str) -> PoolSpec:
        return next(s for s in self.specs if s.pool_id == pool_id)

    def events(self, events: Events, at_us: int = T0_US) -> list[Envelope]:
        out: list[Envelope] = []
        for spec in self.specs:
            out += [events.pool(spec, at_us), events.rate_card(spec, at_us)]
            if spec.model == "committed":
                out.append(events.reservation(spec, at_us))
            else:
                out.append(events.forward(spec, at_us, self.room[spec.pool_id]))
        for pool_id in sorted(self.excluded):
            out.append(excluded_event(events, pool_id, at_us))
        return out


def excluded_event(events: Events, pool_id: str, at_us: int) -> Envelope:
    """A `pool_excluded` decision as the watcher would have made it (for the view)."""
    return events.env(
        PoolExcluded(
            pool_id=pool_id,
            reason="burst",
            observed_interruption_per_h=1.0,
            expected_interruption_per_h=0.01,
            reclaimed_instances=3,
            window_start_at=at_us - 60 * S,
            window_end_at=at_us,
            evidence_event_ids=(),
        ),
        at_us,
        producer="deciders/exclusion",
    )


@st.composite
def fleets(draw: st.DrawFn, min_reclaimable: int = 1, max_halls: int = 5) -> Fleet:
    halls = [f"hall-{chr(ord('a') + i)}" for i in range(draw(st.integers(1, max_halls)))]
    specs: list[PoolSpec] = []
    room: dict[str, int] = {}
    seen: set[str] = set()
    shapes = st.tuples(st.sampled_from(FAMILIES), st.sampled_from(SIZES))
    for hall in halls:
        for family, size in draw(st.lists(shapes, min_size=0, max_size=8)):
            spec = PoolSpec(
                family,
                size,
                hall,
                "reclaimable",
                size * draw(st.integers(1, 64)),
                expected_per_h=draw(st.sampled_from((0.002, 0.01, 0.03))),
                price=draw(st.integers(3_000, 30_000)),
                aggregate=f"{family}-{draw(st.sampled_from(('a', 'b')))}",
            )
            if spec.pool_id in seen:
                continue
            seen.add(spec.pool_id)
            specs.append(spec)
            room[spec.pool_id] = spec.size_vcpu * draw(st.integers(0, 64))
        for model in ("committed", "guaranteed"):
            if draw(st.booleans()):
                model_: PurchaseModel = model
                price = 22_000 if model == "committed" else GUARANTEED_PRICE
                capacity = 16 * draw(st.integers(1, 32))
                spec = PoolSpec("c7", 16, hall, model_, capacity, 0.0, price)
                specs.append(spec)
                if model == "guaranteed":
                    room[spec.pool_id] = capacity
    spare = (s for s in _spare_shapes(halls[0]) if s.pool_id not in seen)
    while sum(1 for s in specs if s.model == "reclaimable") < min_reclaimable:
        spec = next(spare)
        specs.append(spec)
        room[spec.pool_id] = spec.capacity_vcpu
    reclaimable = [s.pool_id for s in specs if s.model == "reclaimable"]
    most = len(reclaimable) // 4
    excluded = draw(st.sets(st.sampled_from(reclaimable), max_size=most)) if most else set()
    return Fleet(tuple(specs), room, frozenset(excluded))


@st.composite
def claims(draw: st.DrawFn) -> list[tuple[int, int]]:
    """(vCPU, minutes after the previous claim) of a workload's claims."""
    return draw(
        st.lists(st.tuples(st.integers(1, 512), st.integers(0, 30)), min_size=1, max_size=6)
    )


def _spare_shapes(hall: str) -> list[PoolSpec]:
    """Reclaimable pools to top a drawn fleet up with, each in its own group."""
    return [
        PoolSpec(family, size, hall, "reclaimable", size * 32, aggregate=f"{family}-spare-{size}")
        for family in FAMILIES
        for size in SIZES
    ]


def minutes(n: int) -> int:
    return n * MIN
