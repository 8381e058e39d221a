"""Which pools a workload may be placed on now, best first, and why the others may not.

A reclaimable pool is **eligible** for a workload when it is not excluded (ADR-07), has room
for at least one instance (forward capacity less what the orchestrator launched since), is of a
SKU family and instance size the work can use (when the claim says), and its record is no more
interrupted than the contract tolerates. Eligible pools come in the scorer's order (ADR-07:
depth first, then observed interruption, then price); pools the latest round did not rank
follow, deepest first. Nothing in here names a SKU: the catalogue's attributes decide.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from streams.deciders.region import RegionView
from streams.deciders.waterfill import Candidate


@dataclass(frozen=True, slots=True)
class Needs:
    """What the work can run on (empty: anything) and what interruption it tolerates."""

    families: frozenset[str] = frozenset()
    sizes_vcpu: frozenset[int] = frozenset()
    tolerated_per_h: float = 0.0  # 0: the contract did not say; no pool is refused for it


@dataclass(frozen=True, slots=True)
class Eligible:
    """Eligible reclaimable pools, best first, and counts of the others by reason."""

    candidates: tuple[Candidate, ...]
    refused: Mapping[str, int] = field(default_factory=dict)

    def explain(self) -> str:
        if not self.refused:
            return "no other reclaimable pools"
        parts = [f"{n} {why}" for why, n in sorted(self.refused.items())]
        return "ineligible: " + ", ".join(parts)


def reclaimable(
    view: RegionView,
    needs: Needs,
    *,
    unrecorded_per_h: float,
    exclude_pools: Collection[str] = (),
) -> Eligible:
    """The reclaimable pools eligible for work with `needs`, best first."""
    refused: dict[str, int] = {}
    eligible: list[tuple[float, int, str, Candidate]] = []
    for pool_id, facts in view.pools.items():
        if facts.purchase_model != "reclaimable":
            continue
        why = None
        room = view.room_vcpu(pool_id)
        if pool_id in view.excluded or pool_id in exclude_pools:
            why = "excluded"
        elif needs.families and facts.sku_family not in needs.families:
            why = "of another SKU family"
        elif needs.sizes_vcpu and facts.instance_vcpu not in needs.sizes_vcpu:
            why = "of another instance size"
        elif (
            needs.tolerated_per_h > 0
            and view.expected_per_h(pool_id, unrecorded_per_h) > needs.tolerated_per_h
        ):
            why = "more interrupted than the contract tolerates"
        elif room < facts.instance_vcpu:
            why = "without room"
        if why is not None:
            refused[why] = refused.get(why, 0) + 1
            continue
        candidate = Candidate(
            pool_id, facts.correlation_group, facts.hall, facts.instance_vcpu, room
        )
        eligible.append((-view.score(pool_id), -room, pool_id, candidate))
    eligible.sort(key=lambda item: item[:3])
    return Eligible(tuple(item[3] for item in eligible), refused)


def with_room(
    view: RegionView,
    model: str,
    *,
    halls: Collection[str] = (),
    families: Collection[str] = (),
    reserve_share: float = 0.0,
) -> list[Candidate]:
    """Pools of a purchase model (committed, guaranteed) with room, optionally in `halls`, of
    a SKU family the work can run on (`families`; empty: any), less `reserve_share` of each
    pool's capacity kept for others (the floors)."""
    out = []
    for pool_id, facts in sorted(view.pools.items()):
        if facts.purchase_model != model or (halls and facts.hall not in halls):
            continue
        if families and facts.sku_family not in families:
            continue
        room = view.room_vcpu(pool_id) - int(reserve_share * facts.capacity_vcpu)
        if room >= facts.instance_vcpu:
            out.append(
                Candidate(pool_id, facts.correlation_group, facts.hall, facts.instance_vcpu, room)
            )
    return out


def group_of(view: RegionView) -> dict[str, str]:
    """Every known pool's correlation group."""
    return {pool_id: facts.correlation_group for pool_id, facts in view.pools.items()}
