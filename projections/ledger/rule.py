"""The accounting rule the ledger records with ("recorded"), as data (ADR-26, ADR-27).

Every figure and choice the pricing uses lives here and nowhere else; `pricing.py` reads it. A
later issue loads such rules from files (replay/rules/recorded.yaml) for what-if replays; this
one is the rule that produced the recorded ledger. docs/accounting.md explains it in words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

COUNTERFACTUAL = "counterfactual"
RECLAIMABLE_SPEND = "reclaimable_spend"
FLOOR_SPEND = "floor_spend"
FALLBACK_SPEND = "fallback_spend"
SURPLUS = "surplus"
WASTED_WORK = "wasted_work"
HEADROOM = "headroom"
CHECKPOINT_STORAGE = "checkpoint_storage"
FOOTPRINT = "footprint"
IDLE_FLOOR = "idle_floor"

COST_CAUSES = (
    RECLAIMABLE_SPEND,
    FLOOR_SPEND,
    FALLBACK_SPEND,
    SURPLUS,
    WASTED_WORK,
    HEADROOM,
    CHECKPOINT_STORAGE,
    FOOTPRINT,
    IDLE_FLOOR,
)
CAUSES = (COUNTERFACTUAL, *COST_CAUSES)

PLATFORM = "(platform)"  # the ledger's name for costs charged to no workload

# What the counterfactual counts as useful work (docs/accounting.md, "Useful work"):
ASKED_FOR = "asked_for"  # per workload and moment, the vCPU running up to what its open claims ask
USED = "used"  # every used vCPU-hour (the rule before issue 22: surplus counted as useful)
USEFUL_WORK = (ASKED_FOR, USED)
HOUR_S = 3600


@dataclass(frozen=True, slots=True)
class AccountingRule:
    name: str
    # The cost line that usage on each purchase model is spend of.
    spend_cause: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType(
            {
                "reclaimable": RECLAIMABLE_SPEND,
                "committed": FLOOR_SPEND,  # the floor on Blazar reservations (ADR-22)
                "guaranteed": FALLBACK_SPEND,  # floor beyond the reservations, and fallback
            }
        )
    )
    # Checkpoint storage (Ceph RGW): each checkpoint is charged, when written, for the
    # retention it will be kept (ADR-19: three generations or seven days).
    checkpoint_eur_micros_per_gb_month: int = 20_000  # €0.02 per GB-month (decimal GB)
    checkpoint_retention_days: int = 7
    # The orchestrator's own footprint: the node agent's CPU on every instance, at that
    # instance's rate, and the control plane's share per vCPU-hour of useful work.
    agent_millicpu_per_instance: int = 20
    control_plane_eur_micros_per_vcpu_h: int = 200  # €0.0002 per used vCPU-hour
    # Quantities are rounded before pricing, so that pricing is exact integer arithmetic.
    vcpu_h_quantum: int = 1_000_000  # used vCPU-hours to the micro vCPU-hour
    vcpu_s_quantum: int = 1_000  # wasted vCPU-seconds to the milli vCPU-second
    # Useful work is what was asked for: running beyond the open claims is surplus, a cost
    # line priced at the spend rate and naming the decision that launched the instance.
    useful_work: str = ASKED_FOR
    # The reservations' cost that the workloads' lines on committed capacity do not account
    # for (capacity paid for and not running anything) is the platform's `idle_floor` line.
    idle_floor: bool = True
    # A fact that sets a price (a rate card, a reservation) published this long after the
    # moment it starts to apply re-prices what it touches; later than that it is refused.
    allowed_lateness_s: int = HOUR_S


RECORDED = AccountingRule(name="recorded")
