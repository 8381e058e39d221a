"""The Python engine: a fold over the merged history that prices every event under one or more
accounting rules (pure: events in, ledger amounts out).

It follows the ledger's own pricing (`projections.ledger.pricing`) step for step, generalised
by the rule: the same rate book (rate cards as a step function, read from the history as it
goes), the same quanta, the same split of usage at UTC midnights, every line summed exactly
and rounded once to whole micro-euros (half to even), then scaled. Where the ledger charges
every line to its workload, a rule may charge it to the platform or share the day's total of
that line over the workloads by their used vCPU-hours (largest remainder, so the shares add
up to the total exactly).

All arithmetic is on integers: a line is a numerator over a denominator until it is rounded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from projections.ledger.rates import Card, RateBook, Unpriced
from projections.ledger.rule import (
    CHECKPOINT_STORAGE,
    COUNTERFACTUAL,
    FOOTPRINT,
    HEADROOM,
    WASTED_WORK,
)
from replay.rule import PLATFORM, SPEND_CAUSE, Charge, Rate, Rule
from schemas.events import (
    CheckpointWritten,
    ContractPublished,
    Envelope,
    InstanceLost,
    RateCard,
    UsageInterval,
    WorkWasted,
)

HOUR_US = 3_600_000_000
DAY_US = 86_400_000_000
BYTES_PER_GB = 1_000_000_000
CARD_HORIZON_US = 7 * DAY_US  # rate cards kept behind the newest event (bounded memory)

LineKey = tuple[str, int, str]  # workload, UTC day (days since the epoch), cause


def round_half_even(numerator: int, denominator: int) -> int:
    """numerator / denominator (denominator > 0) to the nearest integer, ties to even."""
    q, r = divmod(numerator, denominator)
    twice = 2 * r
    if twice > denominator or (twice == denominator and q % 2 == 1):
        q += 1
    return q


def scaled(micros: int, scale: Fraction) -> int:
    return micros if scale == 1 else round_half_even(micros * scale.numerator, scale.denominator)


def share_out(total: int, weights: dict[str, int]) -> dict[str, int]:
    """`total` split in proportion to `weights` (all > 0), exactly: each gets the floor of its
    share, and the micro-euros left go one each to the largest remainders (ties: by name)."""
    whole = sum(weights.values())
    shares: dict[str, int] = {}
    remainders: list[tuple[int, str]] = []
    for name, weight in weights.items():
        base, rest = divmod(total * weight, whole)
        shares[name] = base
        remainders.append((-rest, name))
    left = total - sum(shares.values())
    for _, name in sorted(remainders)[:left]:
        shares[name] += 1
    return shares


@dataclass(slots=True)
class RuleLedger:
    """What one rule makes of the history: amounts per workload, day and cause."""

    rule: Rule
    amounts: dict[LineKey, int] = field(default_factory=lambda: defaultdict(int))
    shared: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    weights: dict[int, dict[str, int]] = field(default_factory=dict)  # day -> workload -> vCPU-h
    _scales: dict[str, Fraction] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._scales = self.rule.line_scales()

    def add(self, workload: str, day: int, cause: str, micros: int, charge: Charge) -> None:
        micros = scaled(micros, self._scales[cause])
        if charge == "workload":
            self.amounts[(workload, day, cause)] += micros
        elif charge == "platform":
            self.amounts[(PLATFORM, day, cause)] += micros
        else:
            self.shared[(day, cause)] += micros

    def finish(self) -> dict[LineKey, int]:
        """The amounts with the shared lines shared out (a day nobody used: the platform's)."""
        out = dict(self.amounts)
        for (day, cause), total in sorted(self.shared.items()):
            weights = {w: v for w, v in self.weights.get(day, {}).items() if v > 0}
            if not weights:
                out[(PLATFORM, day, cause)] = out.get((PLATFORM, day, cause), 0) + total
                continue
            for workload, micros in share_out(total, weights).items():
                key = (workload, day, cause)
                out[key] = out.get(key, 0) + micros
        return {k: v for k, v in out.items() if v != 0}


def _days(a: int, b: int) -> list[tuple[int, int, int]]:
    """[a, b) split at UTC midnights: (day, from, to)."""
    pieces = []
    while a < b:
        day = a // DAY_US
        end = min(b, (day + 1) * DAY_US)
        pieces.append((day, a, end))
        a = end
    return pieces


class Fold:
    """Prices events in history order under each rule; `feed` them, then `results`."""

    def __init__(
        self, rules: Sequence[Rule], first_day: int | None = None, last_day: int | None = None
    ) -> None:
        self.ledgers = [RuleLedger(r) for r in rules]
        self.first_day = first_day
        self.last_day = last_day
        self.book = RateBook()
        self.tiers: dict[str, str] = {}  # workload -> tier of the latest contract
        self.with_notice: dict[str, bool] = {}  # loss event id -> came with a notice
        self.events = 0
        self.unpriced: list[str] = []
        self._pruned_day = -1
        self._need_tiers = any(r.uses_tiers for r in rules)
        self._need_losses = any(
            r.wasted_work_charge.with_notice != r.wasted_work_charge.without_notice for r in rules
        )

    def _in_range(self, day: int) -> bool:
        return (self.first_day is None or day >= self.first_day) and (
            self.last_day is None or day <= self.last_day
        )

    def feed_all(self, events: Iterable[Envelope]) -> None:
        for e in events:
            self.feed(e)

    def feed(self, e: Envelope) -> None:
        self.events += 1
        p = e.payload
        if isinstance(p, RateCard):
            # A plain tuple of `Card`'s fields: what the book holds (`rates.Row`).
            card = (
                p.valid_from_at,
                e.event_id,
                p.valid_until_at,
                p.price_per_vcpu_h_eur_micros,
                p.guaranteed_price_per_vcpu_h_eur_micros,
                p.purchase_model,
            )
            self.book.add(p.pool_id, card)
            day = e.occurred_at // DAY_US
            if day > self._pruned_day:  # once a day: forget cards long superseded
                self._pruned_day = day
                self.book.prune(e.occurred_at - CARD_HORIZON_US)
        elif isinstance(p, UsageInterval):
            self._usage(e, p)
        elif isinstance(p, WorkWasted):
            self._waste(e, p)
        elif isinstance(p, CheckpointWritten):
            self._checkpoint(e, p)
        elif isinstance(p, InstanceLost):
            if self._need_losses:
                self.with_notice[e.event_id] = p.with_notice
        elif isinstance(p, ContractPublished) and self._need_tiers:
            self.tiers[p.workload_id] = p.tier

    def results(self) -> list[dict[LineKey, int]]:
        return [ledger.finish() for ledger in self.ledgers]

    # -- pricing --------------------------------------------------------------------------

    def _usage(self, e: Envelope, u: UsageInterval) -> None:
        span_us = u.end_at - u.start_at
        if span_us <= 0:
            return
        pieces = [pc for pc in _days(u.start_at, u.end_at) if self._in_range(pc[0])]
        if not pieces:
            return
        try:
            ends = {x: self.book.integral(u.pool_id, x) for _, a, b in pieces for x in (a, b)}
        except Unpriced as error:
            self.unpriced.append(f"usage_interval {e.event_id}: {error}")
            return
        tier = self.tiers.get(u.workload_id)
        for ledger in self.ledgers:
            rule = ledger.rule
            q = rule.usage_quanta_per_vcpu_h
            used_q = round(u.used_vcpu_h * q)
            capacity_q = round_half_even(u.vcpu * span_us * q, HOUR_US)
            idle_q = max(capacity_q - used_q, 0)
            share = q * span_us
            spend_cause = SPEND_CAUSE[u.purchase_model]
            spend = rule.spend[spend_cause]
            fp = rule.footprint
            agent_den = 1000 * HOUR_US
            for day, a, b in pieces:
                (pa, ga), (pb, gb) = ends[a], ends[b]
                d, d_price, d_g = b - a, pb - pa, gb - ga

                def over(rate: Rate, d: int = d, d_price: int = d_price, d_g: int = d_g) -> int:
                    return _integral(rate, d, d_price, d_g, tier)

                w = u.workload_id
                cf = rule.counterfactual
                ledger.add(
                    w,
                    day,
                    COUNTERFACTUAL,
                    round_half_even(used_q * over(cf.rate), share),
                    cf.charge_to,
                )
                ledger.add(
                    w,
                    day,
                    spend_cause,
                    round_half_even(used_q * over(spend.rate), share),
                    spend.charge_to,
                )
                ledger.add(
                    w,
                    day,
                    HEADROOM,
                    round_half_even(idle_q * over(rule.headroom.rate), share),
                    rule.headroom.charge_to,
                )
                footprint = round_half_even(
                    fp.agent_millicpu_per_instance * over(fp.agent_rate) * share
                    + used_q * d * fp.control_plane_eur_micros_per_vcpu_h * agent_den,
                    agent_den * share,
                )
                ledger.add(w, day, FOOTPRINT, footprint, fp.charge_to)
                if rule.shares:
                    by_workload = ledger.weights.setdefault(day, {})
                    by_workload[w] = by_workload.get(w, 0) + used_q * d // span_us

    def _waste(self, e: Envelope, w: WorkWasted) -> None:
        day = e.occurred_at // DAY_US
        if not self._in_range(day):
            return
        try:
            card = self.book.at(w.pool_id, e.occurred_at)
        except Unpriced as error:
            self.unpriced.append(f"work_wasted {e.event_id}: {error}")
            return
        tier = self.tiers.get(w.workload_id)
        notice = self.with_notice.get(e.causation_id or "", False)
        spend_cause = SPEND_CAUSE[card.purchase_model]
        for ledger in self.ledgers:
            rule = ledger.rule
            qs = rule.waste_quanta_per_vcpu_s
            wasted_q, den = round(w.wasted_vcpu_s * qs), qs * 3600
            cf, spend = rule.counterfactual, rule.spend[spend_cause]
            charge = rule.wasted_work_charge
            ledger.add(
                w.workload_id,
                day,
                COUNTERFACTUAL,
                round_half_even(-wasted_q * _at(cf.rate, card, tier), den),
                cf.charge_to,
            )
            ledger.add(
                w.workload_id,
                day,
                WASTED_WORK,
                round_half_even(wasted_q * _at(rule.wasted_work_rate, card, tier), den),
                charge.with_notice if notice else charge.without_notice,
            )
            ledger.add(
                w.workload_id,
                day,
                spend_cause,
                round_half_even(-wasted_q * _at(spend.rate, card, tier), den),
                spend.charge_to,
            )

    def _checkpoint(self, e: Envelope, c: CheckpointWritten) -> None:
        day = e.occurred_at // DAY_US
        if not self._in_range(day):
            return
        for ledger in self.ledgers:
            cp = ledger.rule.checkpoint_storage
            amount = round_half_even(
                c.written_bytes * cp.retention_days * cp.eur_micros_per_gb_month,
                BYTES_PER_GB * 30,
            )
            ledger.add(c.workload_id, day, CHECKPOINT_STORAGE, amount, cp.charge_to)


def _integral(rate: Rate, d: int, d_price: int, d_guaranteed: int, tier: str | None) -> int:
    """The rate's integral over a piece of `d` microseconds (micro-euros x us per vCPU-h)."""
    if rate.source == "card":
        return d_price
    if rate.source == "guaranteed":
        return d_guaranteed
    if rate.source == "flat":
        return d * rate.eur_micros
    return d * rate.tier_price(tier)


def _at(rate: Rate, card: Card, tier: str | None) -> int:
    """The rate at a moment (micro-euros per vCPU-hour)."""
    if rate.source == "card":
        return card.price_eur_micros
    if rate.source == "guaranteed":
        return card.guaranteed_eur_micros
    if rate.source == "flat":
        return rate.eur_micros
    return rate.tier_price(tier)
