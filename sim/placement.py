"""The simulation's stand-in placement policy, behind a small interface.

The real planner (ADR-08: floor first on committed capacity, depth-first water-filling over at
least 8 pools with pool and correlation-group caps, excluded pools never chosen) is a decider
that comes later and replaces `SpreadPolicy` through `PlacementPolicy`.

`SpreadPolicy` water-fills by vCPU: each next instance goes to the eligible pool (the
workload's SKU families and sizes, expected to interrupt no more often than its contract
tolerates) holding the least of the workload so far (ties: cheaper list price, then pool id),
among pools with room, avoiding the given correlation groups while any other pool has room.
`CheapestPolicy` is the price-first plan the stand-in compares itself with: the same eligible
pools, cheapest current price first, each filled to its room.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from schemas.events import PurchaseModel
from schemas.pools import Pool, PoolCatalogue


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """Place `vcpu` more of a workload under `purchase_model`."""

    workload_id: str
    purchase_model: PurchaseModel
    vcpu: int
    families: tuple[str, ...]
    sizes_vcpu: tuple[int, ...] | None  # None: any size (floors take the committed sizes)
    # The contract's tolerated rate: pools expected to interrupt more often are not used.
    max_interruptions_per_h: float | None = None
    placed_vcpu_by_pool: Mapping[str, int] = field(default_factory=dict)
    avoid_groups: frozenset[str] = frozenset()


class PoolView(Protocol):
    """What a policy may ask about the region now."""

    def room_vcpu(self, pool_id: str) -> int: ...


class Fitting:
    """The pools of a catalogue a request may use by its shape: its purchase model, SKU
    families and sizes, and the interruption rate it tolerates. Worked out once per shape;
    room is what changes from one request to the next."""

    def __init__(self, catalogue: PoolCatalogue) -> None:
        self.catalogue = catalogue
        self._by_shape: dict[tuple[object, ...], list[Pool]] = {}

    def pools(self, request: PlacementRequest) -> list[Pool]:
        shape = (
            request.purchase_model,
            request.families,
            request.sizes_vcpu,
            request.max_interruptions_per_h,
        )
        fitting = self._by_shape.get(shape)
        if fitting is None:
            models = self.catalogue.pools(request.purchase_model)
            fitting = self._by_shape[shape] = [p for p in models if _fits(p, request)]
        return fitting


class PlacementPolicy(Protocol):
    def plan(self, request: PlacementRequest, fitting: Fitting, view: PoolView) -> list[str]:
        """Pool ids to launch one instance in each, in order; may cover less than asked."""
        ...


class PlannedView:
    """The room of a view less what a plan in progress has already taken (nothing launched)."""

    def __init__(self, view: PoolView) -> None:
        self._view = view
        self.taken_vcpu: dict[str, int] = {}

    def room_vcpu(self, pool_id: str) -> int:
        return self._view.room_vcpu(pool_id) - self.taken_vcpu.get(pool_id, 0)

    def take(self, pool_id: str, vcpu: int) -> None:
        self.taken_vcpu[pool_id] = self.taken_vcpu.get(pool_id, 0) + vcpu


class SpreadPolicy:
    def plan(self, request: PlacementRequest, fitting: Fitting, view: PoolView) -> list[str]:
        candidates, room = _candidates(request, fitting, view)
        placed = {p.pool_id: request.placed_vcpu_by_pool.get(p.pool_id, 0) for p in candidates}
        plan: list[str] = []
        remaining = request.vcpu
        while remaining > 0 and candidates:
            best = min(
                candidates,
                key=lambda p: (placed[p.pool_id], p.price_per_vcpu_h_eur_micros, p.pool_id),
            )
            plan.append(best.pool_id)
            placed[best.pool_id] += best.size_vcpu
            room[best.pool_id] -= best.size_vcpu
            remaining -= best.size_vcpu
            if room[best.pool_id] < best.size_vcpu:
                candidates = [p for p in candidates if p.pool_id != best.pool_id]
        return plan


class CheapestPolicy:
    """Price-first: the cheapest eligible pool (at `prices`, per vCPU-hour) until it is full,
    then the next; the baseline's premium is measured against this plan."""

    def __init__(self, prices: Mapping[str, int]) -> None:
        self._prices = prices

    def plan(self, request: PlacementRequest, fitting: Fitting, view: PoolView) -> list[str]:
        candidates, room = _candidates(request, fitting, view)
        prices = self._prices
        candidates.sort(
            key=lambda p: (prices.get(p.pool_id, p.price_per_vcpu_h_eur_micros), p.pool_id)
        )
        plan: list[str] = []
        remaining = request.vcpu
        for pool in candidates:
            while remaining > 0 and room[pool.pool_id] >= pool.size_vcpu:
                plan.append(pool.pool_id)
                room[pool.pool_id] -= pool.size_vcpu
                remaining -= pool.size_vcpu
        return plan


def eligible_pools(request: PlacementRequest, fitting: Fitting, view: PoolView) -> list[Pool]:
    """The pools of the request's purchase model it may use that have room for one instance."""
    return _eligible(request, fitting, view)[0]


def _eligible(
    request: PlacementRequest, fitting: Fitting, view: PoolView
) -> tuple[list[Pool], dict[str, int]]:
    fits = fitting.pools(request)
    room = {p.pool_id: view.room_vcpu(p.pool_id) for p in fits}
    return [p for p in fits if room[p.pool_id] >= p.size_vcpu], room


def _candidates(
    request: PlacementRequest, fitting: Fitting, view: PoolView
) -> tuple[list[Pool], dict[str, int]]:
    """The eligible pools with room for one more instance (outside the avoided correlation
    groups while any such pool has room), and the room of each."""
    eligible, room = _eligible(request, fitting, view)
    preferred = [p for p in eligible if p.correlation_group not in request.avoid_groups]
    return preferred or eligible, room


def _fits(pool: Pool, request: PlacementRequest) -> bool:
    if pool.sku_family not in request.families:
        return False
    tolerated = request.max_interruptions_per_h
    if tolerated is not None and pool.expected_interruptions_per_h > tolerated:
        return False
    return request.sizes_vcpu is None or pool.size_vcpu in request.sizes_vcpu
