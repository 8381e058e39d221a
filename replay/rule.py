"""Accounting rules as data: how each cost line is priced and to whom it is charged (ADR-26,
ADR-27). `replay.rule_file` reads them from YAML; both replay engines apply them.

A rule names, for every line of the ledger, the **rate** its vCPU-hours are priced at (the
rate card of the hour, the guaranteed rate of the same cards, a flat rate, or a price per
declared contract tier), an optional **scale** applied to each line once it is priced, and
whom the line is **charged to** (the workload whose event caused it, the platform, or every
workload of the day in proportion to its used vCPU-hours). docs/accounting.md explains each
choice; `replay/rules/recorded.yaml` is the rule that produced the recorded ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Literal

from projections.ledger.rule import (
    ASKED_FOR,
    CHECKPOINT_STORAGE,
    COUNTERFACTUAL,
    FALLBACK_SPEND,
    FLOOR_SPEND,
    FOOTPRINT,
    HEADROOM,
    HOUR_S,
    IDLE_FLOOR,
    RECLAIMABLE_SPEND,
    SURPLUS,
    WASTED_WORK,
    AccountingRule,
)
from projections.ledger.rule import PLATFORM as LEDGER_PLATFORM

RateSource = Literal["card", "guaranteed", "flat", "tier"]
Charge = Literal["workload", "platform", "shared_by_vcpu_h"]
CHARGES: tuple[Charge, ...] = ("workload", "platform", "shared_by_vcpu_h")
TIERS = ("t1", "t2", "t3", "t4", "t5", "bespoke")
# The spend line of each purchase model (fixed: it is what the purchase model means).
SPEND_CAUSE: Mapping[str, str] = MappingProxyType(
    {"reclaimable": RECLAIMABLE_SPEND, "committed": FLOOR_SPEND, "guaranteed": FALLBACK_SPEND}
)
SPEND_CAUSES = (RECLAIMABLE_SPEND, FLOOR_SPEND, FALLBACK_SPEND)
PLATFORM = LEDGER_PLATFORM  # the ledger's name for costs charged to no workload


@dataclass(frozen=True, slots=True)
class Rate:
    """Where the price of a vCPU-hour comes from."""

    source: RateSource
    eur_micros: int = 0  # flat: per vCPU-hour
    tier_eur_micros: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    default_eur_micros: int | None = None  # tier: for a workload without a priced tier

    def tier_price(self, tier: str | None) -> int:
        price = self.tier_eur_micros.get(tier) if tier is not None else None
        if price is not None:
            return price
        assert self.default_eur_micros is not None, "the rule file check requires a default"
        return self.default_eur_micros

    @property
    def uses_cards(self) -> bool:
        return self.source in ("card", "guaranteed")


CARD = Rate("card")
GUARANTEED = Rate("guaranteed")


@dataclass(frozen=True, slots=True)
class WasteCharge:
    """Whom wasted work is charged to, by whether the loss came with a notice."""

    with_notice: Charge
    without_notice: Charge


@dataclass(frozen=True, slots=True)
class LineRule:
    rate: Rate = CARD
    charge_to: Charge = "workload"
    scale: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class CheckpointRule:
    eur_micros_per_gb_month: int = 20_000
    retention_days: int = 7
    charge_to: Charge = "workload"
    scale: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class FootprintRule:
    agent_millicpu_per_instance: int = 20
    agent_rate: Rate = CARD
    control_plane_eur_micros_per_vcpu_h: int = 200
    charge_to: Charge = "workload"
    scale: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class IdleFloorRule:
    """The reservations' cost nothing ran on: counted (the platform's, by default) or not."""

    count: bool = True
    charge_to: Charge = "platform"
    scale: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class Rule:
    """One accounting rule; the defaults are the recorded rule's choices."""

    name: str
    description: str = ""
    counterfactual: LineRule = LineRule(rate=GUARANTEED)
    useful_work: str = ASKED_FOR  # asked_for | used (every used vCPU-hour, the old rule)
    spend: Mapping[str, LineRule] = field(  # by spend cause
        default_factory=lambda: MappingProxyType(dict.fromkeys(SPEND_CAUSES, LineRule()))
    )
    surplus: LineRule = LineRule()
    idle_floor: IdleFloorRule = IdleFloorRule()
    allowed_lateness_s: int = HOUR_S
    headroom: LineRule = LineRule()
    wasted_work_rate: Rate = CARD
    wasted_work_charge: WasteCharge = WasteCharge("workload", "workload")
    wasted_work_scale: Fraction = Fraction(1)
    checkpoint_storage: CheckpointRule = CheckpointRule()
    footprint: FootprintRule = FootprintRule()
    usage_quanta_per_vcpu_h: int = 1_000_000
    waste_quanta_per_vcpu_s: int = 1_000
    source: str = ""  # the file it was read from, for messages

    def scale_of(self, cause: str) -> Fraction:
        return self.line_scales()[cause]

    def charge_of(self, cause: str) -> Charge:
        """The charge of a cause (wasted work: with a notice; see `wasted_work_charge`)."""
        charges: dict[str, Charge] = {
            COUNTERFACTUAL: self.counterfactual.charge_to,
            SURPLUS: self.surplus.charge_to,
            IDLE_FLOOR: self.idle_floor.charge_to,
            HEADROOM: self.headroom.charge_to,
            WASTED_WORK: self.wasted_work_charge.with_notice,
            CHECKPOINT_STORAGE: self.checkpoint_storage.charge_to,
            FOOTPRINT: self.footprint.charge_to,
        }
        charges.update({c: line.charge_to for c, line in self.spend.items()})
        return charges[cause]

    def line_scales(self) -> dict[str, Fraction]:
        scales = {
            COUNTERFACTUAL: self.counterfactual.scale,
            SURPLUS: self.surplus.scale,
            IDLE_FLOOR: self.idle_floor.scale,
            HEADROOM: self.headroom.scale,
            WASTED_WORK: self.wasted_work_scale,
            CHECKPOINT_STORAGE: self.checkpoint_storage.scale,
            FOOTPRINT: self.footprint.scale,
        }
        scales.update({c: line.scale for c, line in self.spend.items()})
        return scales

    def rates(self) -> list[Rate]:
        return [
            self.counterfactual.rate,
            *(line.rate for line in self.spend.values()),
            self.surplus.rate,
            self.headroom.rate,
            self.wasted_work_rate,
            self.footprint.agent_rate,
        ]

    @property
    def uses_tiers(self) -> bool:
        return any(r.source == "tier" for r in self.rates())

    @property
    def shares(self) -> bool:
        charges = [
            self.charge_of(c)
            for c in (
                COUNTERFACTUAL, SURPLUS, IDLE_FLOOR, HEADROOM, CHECKPOINT_STORAGE, FOOTPRINT,
                *SPEND_CAUSES,
            )
        ]  # fmt: skip
        charges += [self.wasted_work_charge.with_notice, self.wasted_work_charge.without_notice]
        return "shared_by_vcpu_h" in charges

    def as_accounting_rule(self) -> AccountingRule:
        """The ledger's own form of this rule, when it has one: the ledger prices with rate
        cards and charges every line to its workload, so only such rules translate."""
        plain = (
            self.counterfactual == LineRule(rate=GUARANTEED)
            and all(line == LineRule() for line in self.spend.values())
            and self.surplus == LineRule()
            and self.idle_floor in (IdleFloorRule(), IdleFloorRule(count=False))
            and self.headroom == LineRule()
            and self.wasted_work_rate == CARD
            and self.wasted_work_charge == WasteCharge("workload", "workload")
            and self.wasted_work_scale == 1
            and self.checkpoint_storage.charge_to == "workload"
            and self.checkpoint_storage.scale == 1
            and self.footprint.agent_rate == CARD
            and self.footprint.charge_to == "workload"
            and self.footprint.scale == 1
        )
        if not plain:
            raise ValueError(
                f"rule {self.name!r} is a what-if rule: the ledger records only with rate cards "
                "and every line charged to its workload"
            )
        return AccountingRule(
            name=self.name,
            spend_cause=SPEND_CAUSE,
            checkpoint_eur_micros_per_gb_month=self.checkpoint_storage.eur_micros_per_gb_month,
            checkpoint_retention_days=self.checkpoint_storage.retention_days,
            agent_millicpu_per_instance=self.footprint.agent_millicpu_per_instance,
            control_plane_eur_micros_per_vcpu_h=self.footprint.control_plane_eur_micros_per_vcpu_h,
            vcpu_h_quantum=self.usage_quanta_per_vcpu_h,
            vcpu_s_quantum=self.waste_quanta_per_vcpu_s,
            useful_work=self.useful_work,
            idle_floor=self.idle_floor.count,
            allowed_lateness_s=self.allowed_lateness_s,
        )
