"""Pricing (pure): the ledger lines an event causes under an accounting rule.

- usage_interval: the interval is cut into pieces by what was useful (`demand.Demand.useful`:
  the instance's vCPU up to what the workload's open claims ask for, oldest launch first), by
  rate card and by UTC day. On each piece the useful vCPU-hours are the counterfactual (at the
  guaranteed rate) and the spend of the purchase model (reclaimable, floor on committed,
  fallback on guaranteed) at the card's price; the rest is **surplus**, at the card's price,
  naming the decision that launched the instance. Capacity paid for but not used is headroom;
  the agent's CPU on the instance and the control plane's share are footprint. On committed
  capacity the instance's whole capacity also comes off the platform's **idle floor** (it is
  not idle: the workload pays for it).
- work_wasted: the wasted vCPU-hours leave the counterfactual (they were not useful work: the
  work is done again) and move from the spend line to the wasted-work line, at the rate card in
  force at the loss.
- checkpoint_written: the bytes, stored for the rule's retention, as checkpoint storage.
- reservation_committed: its cost accrues, day by day as event time passes, on the platform's
  idle floor (`accrue_reservation`); what runs on it comes off as said above.

Each line carries the event that caused it and is charged to that event's workload (ADR-26);
idle floor lines are the platform's. Amounts are exact integer micro-euros: quantities are first
rounded to the rule's quantum, the sum per line is exact (integer numerators over one
denominator per event: the same rationals Python's `Fraction` would give), and each line is
rounded once (half to even).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from projections.ledger.demand import Piece, all_useful
from projections.ledger.rates import RateBook
from projections.ledger.rule import (
    ASKED_FOR,
    CHECKPOINT_STORAGE,
    COUNTERFACTUAL,
    FOOTPRINT,
    HEADROOM,
    IDLE_FLOOR,
    PLATFORM,
    SURPLUS,
    WASTED_WORK,
    AccountingRule,
)
from schemas.events import (
    CheckpointWritten,
    Envelope,
    ReservationCommitted,
    UsageInterval,
    WorkWasted,
)
from schemas.ids import derived_event_id

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
    decided_by: str = ""  # the decision that launched the instance; a reservation's id


def round_half_even(numerator: int, denominator: int) -> int:
    """numerator / denominator (denominator > 0) to the nearest integer, ties to even: what
    `round(Fraction(numerator, denominator))` gives, in integers."""
    q, r = divmod(numerator, denominator)
    twice = 2 * r
    if twice > denominator or (twice == denominator and q % 2 == 1):
        q += 1
    return q


class _Lines:
    """Exact sums per (workload, day, cause) for one event, rounded once into lines. Amounts
    are integer numerators over `denominator` (micro-euros); quantities are floats (not
    money)."""

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
        decided_by: str = "",
    ) -> None:
        self.e, self.rule = e, rule
        self.workload_id, self.instance_id = workload_id, instance_id
        self.pool_id, self.purchase_model = pool_id, purchase_model
        self.decided_by = decided_by
        self.denominator = denominator
        self.amount: dict[tuple[str, int, str], int] = {}
        self.quantity: dict[tuple[str, int, str], float] = {}  # not money: floats do
        self.unit: dict[str, str] = {}

    def add(
        self,
        day: int,
        cause: str,
        quantity: float,
        amount: int,
        unit: str,
        *,
        workload_id: str | None = None,
    ) -> None:
        """Add `quantity` and `amount` / denominator micro-euros to the line (day, cause) of
        the event's workload (or of `workload_id`)."""
        key = (workload_id or self.workload_id, day, cause)
        self.amount[key] = self.amount.get(key, 0) + amount
        self.quantity[key] = self.quantity.get(key, 0.0) + quantity
        self.unit[cause] = unit

    def exact(self) -> dict[tuple[str, int, str], int]:
        """The lines' amounts before rounding, as numerators over `denominator`."""
        return self.amount

    def lines(self) -> list[LedgerLine]:
        e, denominator = self.e, self.denominator
        # The columns after unit are the event's and the rule's, the same on every line.
        tail = (self.pool_id, self.purchase_model, self.instance_id, e.event_type,
                e.occurred_at, self.rule.name, self.decided_by)  # fmt: skip
        make, out = LedgerLine._make, []
        for key, amount in sorted(self.amount.items()):
            quantity = self.quantity[key]
            micros = round_half_even(amount, denominator)
            if micros == 0 and quantity == 0:
                continue
            workload_id, day, cause = key
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


def split_by_day(pieces: Sequence[Piece]) -> list[tuple[int, int, int, int]]:
    """Useful pieces cut at UTC midnights: (day, from, to, useful vCPU)."""
    return [(day, x, y, u) for a, b, u in pieces for day, x, y in _days(a, b)]


def price_usage(
    e: Envelope,
    book: RateBook,
    rule: AccountingRule,
    pieces: Sequence[Piece] | None = None,
    decided_by: str = "",
) -> list[LedgerLine]:
    """The lines of a usage interval; `pieces` say what was useful (`Demand.useful`), every
    vCPU when None (or when the rule counts every used vCPU-hour as useful)."""
    u = e.payload
    assert isinstance(u, UsageInterval)
    span_us = u.end_at - u.start_at
    if span_us <= 0:
        return []
    vcpu = max(u.vcpu, 1)
    if pieces is None or rule.useful_work != ASKED_FOR:
        pieces = all_useful(u.start_at, u.end_at, vcpu)
    spend_cause = rule.spend_cause[u.purchase_model]
    q = rule.vcpu_h_quantum
    used_q = round(u.used_vcpu_h * q)  # used vCPU-hours, in quanta
    # Capacity paid for, to the same quantum: idle only where the usage says so.
    capacity_q = round_half_even(u.vcpu * span_us * q, HOUR_US)
    idle_q = max(capacity_q - used_q, 0)
    share = q * span_us  # a piece's share of the quantities is d / span, in quanta of q
    agent = rule.agent_millicpu_per_instance
    milli_h = 1000 * HOUR_US  # the agent's millicores x microseconds per core-hour
    # Every amount over share x vcpu x milli_h: an amount n / (share x vcpu) is n x milli_h
    # over it; the useful part of a piece is u / vcpu of it.
    out = _Lines(
        e, rule, share * vcpu * milli_h, workload_id=u.workload_id, instance_id=u.instance_id,
        pool_id=u.pool_id, purchase_model=u.purchase_model, decided_by=decided_by,
    )  # fmt: skip
    control_plane = rule.control_plane_eur_micros_per_vcpu_h
    idle_floor = rule.idle_floor and u.purchase_model == "committed"
    integral = book.integral
    ends = {x: integral(u.pool_id, x) for _, a, b, _ in split_by_day(pieces) for x in (a, b)}
    for day, x, y, useful in split_by_day(pieces):
        (px, gx), (py, gy) = ends[x], ends[y]
        d, d_price, d_guaranteed = y - x, py - px, gy - gx
        whole = used_q * d / share  # used vCPU-hours of the piece
        out.add(day, COUNTERFACTUAL, whole * useful / vcpu,
                used_q * useful * d_guaranteed * milli_h, "vcpu_h")  # fmt: skip
        out.add(day, spend_cause, whole * useful / vcpu,
                used_q * useful * d_price * milli_h, "vcpu_h")  # fmt: skip
        if useful < vcpu:
            out.add(day, SURPLUS, whole * (vcpu - useful) / vcpu,
                    used_q * (vcpu - useful) * d_price * milli_h, "vcpu_h")  # fmt: skip
        out.add(day, HEADROOM, idle_q * d / share, idle_q * vcpu * d_price * milli_h, "vcpu_h")
        # agent x d_price / milli_h + used_q x d x control_plane / share
        footprint = (agent * d_price * share + used_q * d * control_plane * milli_h) * vcpu
        out.add(day, FOOTPRINT, agent * d / milli_h, footprint, "vcpu_h")
        if idle_floor:
            idle = -capacity_q * vcpu * d_price * milli_h
            out.add(day, IDLE_FLOOR, -capacity_q * d / share, idle, "vcpu_h", workload_id=PLATFORM)
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


# The events priced on their own, from the rate cards alone (usage needs what was useful too).
PRICERS: dict[str, Callable[[Envelope, RateBook, AccountingRule], list[LedgerLine]]] = {
    "usage_interval": price_usage,
    "work_wasted": price_waste,
    "checkpoint_written": price_checkpoint,
}


def price(e: Envelope, book: RateBook, rule: AccountingRule) -> list[LedgerLine]:
    """The lines `e` causes on its own (none for events that cost nothing by themselves); a
    usage interval as if all of it were useful (`price_usage` takes what was)."""
    pricer = PRICERS.get(e.event_type)
    return [] if pricer is None else pricer(e, book, rule)


# -- the reservations' cost (the idle floor) ---------------------------------------------------


def reserved_micros_exact(r: ReservationCommitted, day: int, until_us: int) -> tuple[int, int]:
    """What reservation `r` costs on UTC `day` from its start up to `until_us`, exactly: a
    numerator over HOUR_US (micro-euros), and the reserved vCPU x microseconds."""
    a = max(r.start_at, day * DAY_US)
    b = min(r.end_at, (day + 1) * DAY_US, until_us)
    if b <= a:
        return 0, 0
    vcpu_us = r.reserved_vcpu * (b - a)
    return vcpu_us * r.price_per_vcpu_h_eur_micros, vcpu_us


def accrual_end(watermark_us: int) -> int:
    """How far the reservations' cost has accrued when event time has reached `watermark_us`:
    the last whole hour (so the lines do not depend on how a history was cut into batches)."""
    return watermark_us - watermark_us % HOUR_US


def accrue_reservation(
    e: Envelope, rule: AccountingRule, from_us: int, to_us: int
) -> list[LedgerLine]:
    """The idle floor's lines for reservation `e` as event time moves from `from_us` to
    `to_us` (a whole hour, `accrual_end`, for lines that do not depend on how a history was
    cut into batches): one line per hour of the reservation in between,
    what its cost on that hour's UTC day up to the hour's end rounds to less what it rounded to
    up to the hour's start, so that a day's lines add up to its cost rounded once. Each line is
    the platform's, names the reservation (`decided_by`) and has an id of its own (the
    reservation and the hour)."""
    r = e.payload
    assert isinstance(r, ReservationCommitted)
    if not rule.idle_floor:
        return []
    lo, hi = max(from_us, r.start_at), min(to_us, r.end_at + HOUR_US - 1)
    out = []
    step = lo - lo % HOUR_US  # each step ends at the next whole hour (or at `to_us`)
    while step < hi:
        start, hour = max(step, lo), min(step + HOUR_US, to_us)
        step += HOUR_US
        day = (hour - 1) // DAY_US
        now, now_vcpu_us = reserved_micros_exact(r, day, hour)
        before, before_vcpu_us = reserved_micros_exact(r, day, start)
        micros = round_half_even(now, HOUR_US) - round_half_even(before, HOUR_US)
        quantity = (now_vcpu_us - before_vcpu_us) / HOUR_US
        if micros or quantity:
            line_id = derived_event_id(e.event_id, "idle_floor", str(hour))
            out.append(LedgerLine(PLATFORM, day, IDLE_FLOOR, line_id, micros, quantity,
                                  "vcpu_h", r.pool_id, "committed", "", e.event_type, hour,
                                  rule.name, e.event_id))  # fmt: skip
    return out
