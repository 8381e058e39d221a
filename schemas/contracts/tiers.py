"""The five contract tiers (ADR-02) as data: the defaults a workload inherits field by field.

A contract names a tier and overrides any default it needs to; a field it does not write takes
the tier's value. ``tier: bespoke`` has no defaults: every field is written and reviewed.
docs/contracts.md prints this table; a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from schemas.events import RestartSemantics

CheckpointMethod = Literal["none", "application", "spark", "pytorch", "slurm-requeue"]
CHECKPOINT_METHODS: tuple[CheckpointMethod, ...] = (
    "none",
    "application",
    "spark",
    "pytorch",
    "slurm-requeue",
)
TierName = Literal["t1", "t2", "t3", "t4", "t5"]


@dataclass(frozen=True, slots=True)
class TierDefaults:
    """The defaults of one tier. The floor is a share of target_vcpu, rounded up."""

    tier: TierName
    title: str
    drain_budget_s: int
    checkpoint_method: CheckpointMethod
    periodic_interval_s: int | None
    restart_semantics: RestartSemantics
    effects_on_completion_only: bool
    tolerated_interruptions_per_h: float
    floor_percent: int
    priority: int
    proactive_drain_on_advisory: bool
    spend_cap_per_day_eur_micros: int = 0

    def floor_vcpu(self, target_vcpu: int) -> int:
        return -(-target_vcpu * self.floor_percent // 100)


HOUR_S = 3600

TIERS: Mapping[str, TierDefaults] = MappingProxyType(
    {
        "t1": TierDefaults(
            tier="t1",
            title="latency-sensitive stateless services, with a guaranteed floor",
            drain_budget_s=30,
            checkpoint_method="none",
            periodic_interval_s=None,
            restart_semantics="requeue",  # a lost replica is started afresh elsewhere
            effects_on_completion_only=False,
            tolerated_interruptions_per_h=0.02,
            floor_percent=30,  # the design's floor target: >= 30% of tier-1 target
            priority=0,
            proactive_drain_on_advisory=True,
        ),
        "t2": TierDefaults(
            tier="t2",
            title="resumable training with checkpoints",
            drain_budget_s=90,
            checkpoint_method="pytorch",
            periodic_interval_s=HOUR_S,  # the 60-minute periodic insurance (ADR-20)
            restart_semantics="resume",
            effects_on_completion_only=True,
            tolerated_interruptions_per_h=0.05,
            floor_percent=10,
            priority=1,
            proactive_drain_on_advisory=True,
        ),
        "t3": TierDefaults(
            tier="t3",
            title="batch and Spark pipelines",
            drain_budget_s=90,  # Spark executor decommissioning within 90 s
            checkpoint_method="spark",
            periodic_interval_s=HOUR_S,
            restart_semantics="resume",
            effects_on_completion_only=True,
            tolerated_interruptions_per_h=0.1,
            floor_percent=0,
            priority=2,
            proactive_drain_on_advisory=False,
        ),
        "t4": TierDefaults(
            tier="t4",
            title="CI runners: the interrupted job is requeued",
            drain_budget_s=30,
            checkpoint_method="none",
            periodic_interval_s=None,
            restart_semantics="requeue",
            effects_on_completion_only=True,
            tolerated_interruptions_per_h=0.5,
            floor_percent=0,
            priority=3,
            proactive_drain_on_advisory=False,
        ),
        "t5": TierDefaults(
            tier="t5",
            title="best-effort work with no floor",
            drain_budget_s=10,
            checkpoint_method="none",
            periodic_interval_s=None,
            restart_semantics="restart",
            effects_on_completion_only=False,
            tolerated_interruptions_per_h=2.0,
            floor_percent=0,
            priority=4,
            proactive_drain_on_advisory=False,
        ),
    }
)

TIER_NAMES: tuple[str, ...] = (*TIERS, "bespoke")
