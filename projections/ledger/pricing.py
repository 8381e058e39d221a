"""Pricing (pure): the ledger lines an event causes under an accounting rule.

- usage_interval: the used vCPU-hours at the pool's rate cards of the interval, as the spend of
  its purchase model (reclaimable, floor on committed, fallback on guaranteed); the same hours
  at the guaranteed rate as the counterfactual; capacity paid for but not used as headroom;
  the agent's CPU on the instance and the control plane's share as footprint. Split by rate
  card and by UTC day.
- work_wasted: the wasted vCPU-hours leave the counterfactual (they were not useful work) and
  move from the spend line to the wasted-work line, at the rate card in force at the loss.
- checkpoint_written: the bytes, stored for the rule's retention, as checkpoint storage.

Each line carries the event that caused it and is charged to that event's workload (ADR-26).
Amounts are exact integer micro-euros: quantities are first rounded to the rule's quantum, the
sum per line is exact (integer numerators over one denominator per event: the same rationals
Python's `Fraction` would give, at a fraction of its cost), and each line is rounded once (half
to even).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from projections.ledger.rates import RateBook
from projections.ledger.rule import (
    CHECKPOINT_STORAGE,
    COUNTERFACTUAL,
    FOOTPRINT,
    HEADROOM,
    WASTED_WORK,
    AccountingRule,
)
from schemas.events import CheckpointWritten, Envelope, UsageInterval, WorkWasted

HOUR_US = 3_600_000_000
DAY_US = 86_400_000_000
BYTES_PER_GB = 1_000_000_000


class LedgerLine(NamedTuple):
    """One row of `ledger_lines`, its columns in their order (a tuple: the writer turns a
    batch's lines into columns in one `zip`, and tens of thousands are made per batch)."""

    workload_id: str
    day: int  # UTC days since the epoch
    cause: str
    event_id: str
    amount_eur_micros: int
    quantity: float
    unit: str  # "vcpu_h" | "gb_month"
    pool_id: str
    purchase_model: str
    instance_id: str
    event_type: str
    occurred_at_us: int
    rule: str


def round_half_even(numerator: int, denominator: int) -> int:
    """numerator / denominator (denominator > 0) to the nearest integer, ties to even: what
    `round(Fraction(numerator, denominator))` gives, in integers."""
    q, r = divmod(numerator, denominator)
    twice = 2 * r
    if twice > denominator or (twice == denominator and q % 2 == 1):
        q += 1
    return q


class _Lines:
    """Exact sums per (day, cause) for one event, rounded once into lines. Amounts are integer
    numerators over `denominator` (micro-euros); quantities are floats (not money)."""

    def __init__(
        self,
        e: Envelope,
        rule: AccountingRule,
        denominator: int,
        *,
        workload_id: str,
        instance_id: str,
        pool_id: str,
        purchase_model: str,
    ) -> None:
        self.e, self.rule = e, rule
        self.workload_id, self.instance_id = workload_id, instance_id
        self.pool_id, self.purchase_model = pool_id, purchase_model
        self.denominator = denominator
        self.amount: dict[tuple[int, str], int] = {}
        self.quantity: dict[tuple[int, str], float] = {}  # a quantity, not money: floats do
        self.unit: dict[str, str] = {}

    def add(self, day: int, cause: str, quantity: float, amount: int, unit: str) -> None:
        """Add `quantity` and `amount` / denominator micro-euros to the line (day, cause). A
        quantity is the float of its exact ratio (int / int is correctly rounded, as is the
        float of a Fraction)."""
        key = (day, cause)
        self.amount[key] = self.amount.get(key, 0) + amount
        self.quantity[key] = self.quantity.get(key, 0.0) + quantity
        self.unit[cause] = unit

    def lines(self) -> list[LedgerLine]:
        e, workload_id, denominator = self.e, self.workload_id, self.denominator
        # The columns after unit are the event's and the rule's, the same on every line.
        tail = (self.pool_id, self.purchase_model, self.instance_id, e.event_type,
                e.occurred_at, self.rule.name)  # fmt: skip
        make, out = LedgerLine._make, []
        for key, amount in sorted(self.amount.items()):
            quantity = self.quantity[key]
            micros = round_half_even(amount, denominator)
            if micros == 0 and quantity == 0:
                continue
            day, cause = key
            out.append(make((workload_id, day, cause, e.event_id, micros, quantity,
                             self.unit[cause], *tail)))  # fmt: skip
        return out


def _days(a: int, b: int) -> list[tuple[int, int, int]]:
    """[a, b) split at UTC midnights: (day, from, to)."""
    pieces = []
    while a < b:
        day = a // DAY_US
        end = min(b, (day + 1) * DAY_US)
        pieces.append((day, a, end))
        a = end
    return pieces


def price_usage(e: Envelope, book: RateBook, rule: AccountingRule) -> list[LedgerLine]:
    u = e.payload
    assert isinstance(u, UsageInterval)
    span_us = u.end_at - u.start_at
    if span_us <= 0:
        return []
    spend_cause = rule.spend_cause[u.purchase_model]
    q = rule.vcpu_h_quantum
    used_q = round(u.used_vcpu_h * q)  # used vCPU-hours, in quanta
    # Capacity paid for, to the same quantum: idle only where the usage says so.
    capacity_q = round_half_even(u.vcpu * span_us * q, HOUR_US)
    idle_q = max(capacity_q - used_q, 0)
    # Per day, integer sums over the pieces: duration, duration x price, duration x guaranteed
    # (the differences of the rate cards' integrals, so the cost does not grow with the cards).
    sums: dict[int, list[int]] = {}
    ensure = book.integral(u.pool_id, u.start_at)  # raises Unpriced for a pool without cards
    for day, x, y in _days(u.start_at, u.end_at):
        px, gx = ensure if x == u.start_at else book.integral(u.pool_id, x)
        py, gy = book.integral(u.pool_id, y)
        sums[day] = [y - x, py - px, gy - gx]
    share = q * span_us  # a piece's share of the quantities is d / span, in quanta of q
    agent = rule.agent_millicpu_per_instance
    milli_h = 1000 * HOUR_US  # the agent's millicores x microseconds per core-hour
    # Every amount over share x milli_h: a share-based amount n / share is n x milli_h over it.
    out = _Lines(
        e, rule, share * milli_h, workload_id=u.workload_id, instance_id=u.instance_id,
        pool_id=u.pool_id, purchase_model=u.purchase_model,
    )  # fmt: skip
    control_plane = rule.control_plane_eur_micros_per_vcpu_h
    for day, (d, d_price, d_guaranteed) in sums.items():
        used = used_q * d / share
        idle = idle_q * d / share
        out.add(day, COUNTERFACTUAL, used, used_q * d_guaranteed * milli_h, "vcpu_h")
        out.add(day, spend_cause, used, used_q * d_price * milli_h, "vcpu_h")
        out.add(day, HEADROOM, idle, idle_q * d_price * milli_h, "vcpu_h")
        # agent x d_price / milli_h + used_q x d x control_plane / share
        footprint = agent * d_price * share + used_q * d * control_plane * milli_h
        out.add(day, FOOTPRINT, agent * d / milli_h, footprint, "vcpu_h")
    return out.lines()


def price_waste(e: Envelope, book: RateBook, rule: AccountingRule) -> list[LedgerLine]:
    w = e.payload
    assert isinstance(w, WorkWasted)
    card = book.at(w.pool_id, e.occurred_at)
    # The wasted vCPU-hours are n / per_h: n quanta of vCPU-seconds.
    n = round(w.wasted_vcpu_s * rule.vcpu_s_quantum)
    per_h = rule.vcpu_s_quantum * 3600
    day = e.occurred_at // DAY_US
    out = _Lines(
        e, rule, per_h, workload_id=w.workload_id, instance_id=w.instance_id, pool_id=w.pool_id,
        purchase_model=card.purchase_model,
    )  # fmt: skip
    out.add(day, COUNTERFACTUAL, -n / per_h, -n * card.guaranteed_eur_micros, "vcpu_h")
    out.add(day, WASTED_WORK, n / per_h, n * card.price_eur_micros, "vcpu_h")
    spend_cause = rule.spend_cause[card.purchase_model]
    out.add(day, spend_cause, -n / per_h, -n * card.price_eur_micros, "vcpu_h")
    return out.lines()


def price_checkpoint(e: Envelope, book: RateBook, rule: AccountingRule) -> list[LedgerLine]:
    c = e.payload
    assert isinstance(c, CheckpointWritten)
    # GB-months: bytes x retention days / (bytes per GB x 30 days). One line, made directly
    # (what `_Lines` makes of one amount on one day: a region writes tens of thousands).
    gb_months = c.written_bytes * rule.checkpoint_retention_days
    per_gb_month = BYTES_PER_GB * 30
    micros = round_half_even(gb_months * rule.checkpoint_eur_micros_per_gb_month, per_gb_month)
    quantity = gb_months / per_gb_month
    if micros == 0 and quantity == 0:
        return []
    return [LedgerLine(c.workload_id, e.occurred_at // DAY_US, CHECKPOINT_STORAGE, e.event_id,
                       micros, quantity, "gb_month", "", "", c.instance_id, e.event_type,
                       e.occurred_at, rule.name)]  # fmt: skip


PRICERS: dict[str, Callable[[Envelope, RateBook, AccountingRule], list[LedgerLine]]] = {
    "usage_interval": price_usage,
    "work_wasted": price_waste,
    "checkpoint_written": price_checkpoint,
}


def price(e: Envelope, book: RateBook, rule: AccountingRule) -> list[LedgerLine]:
    """The ledger lines `e` causes (none for events that cost nothing by themselves)."""
    pricer = PRICERS.get(e.event_type)
    return [] if pricer is None else pricer(e, book, rule)
