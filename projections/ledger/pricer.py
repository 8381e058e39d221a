"""The recorded rule over a history, event by event, in event time whatever the order of arrival
(pure: the store, when there is one, is reached through `PricedSource`).

`Pricer.feed` takes the history's events in the order they arrive and returns the ledger lines
each causes; `Pricer.advance` the idle floor's lines as event time moves on. What it holds:

* the **rate book** (`rates.RateBook`), with every card accepted so far;
* per workload, its **demand** (`demand.Demand`: open claims, instances and their launches),
  which says what part of each usage interval was useful;
* the **reservations**, whose cost accrues to the platform's idle floor up to the latest event
  time seen (`pricing.accrue_reservation`);
* what it priced from the rate cards (usage, waste), in a `PricedSource`, so that a card that
  arrives after events it prices can re-price them.

**Late facts** (docs/accounting.md). A rate card or a reservation published more than the rule's
allowed lateness after the moment it starts to apply is refused: never priced, reported
(`refused`; the ledger writer dead-letters it). A card within the allowed lateness that arrives
after events it prices (published late, or arriving late) re-prices them: for each such event,
its lines with the card less its lines without, rounded as the event's own lines are, summed
per workload, day and cause into **correction lines** that name the card (their event id is the
card's). The ledger stays append-only and every total is the sum of its lines; and the lines of
a history add up to what its events give priced all at once, whatever order they came in.

Demand and lifecycle facts are taken in the order they come: each partition of those topics is
written in event-time order, and the merged history reads them so (a usage interval comes after
every claim and launch before its end).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from projections.ledger.demand import Demand, Piece
from projections.ledger.pricing import (
    DAY_US,
    LedgerLine,
    accrual_end,
    accrue_reservation,
    price_checkpoint,
    price_usage,
    price_waste,
)
from projections.ledger.rates import RateBook, Unpriced, lateness_us, refused
from projections.ledger.rule import AccountingRule
from schemas.events import (
    CapacityClaimOpened,
    CapacityReleased,
    CheckpointWritten,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    RateCard,
    ReservationCommitted,
    UsageInterval,
    WorkWasted,
)

DEMAND_HORIZON_US = 7 * DAY_US  # claims released and instances ended kept this long


class Priced(NamedTuple):
    """An event priced from the rate cards, with what its price depends on besides them."""

    envelope: Envelope  # a usage interval or wasted work
    pool_id: str
    from_us: int  # usage: its start; waste: the loss
    to_us: int  # usage: its end; waste: the loss + 1 us
    pieces: tuple[Piece, ...] = ()  # usage: what was useful
    decided_by: str = ""

    def lines(self, book: RateBook, rule: AccountingRule) -> list[LedgerLine]:
        if isinstance(self.envelope.payload, UsageInterval):
            return price_usage(self.envelope, book, rule, self.pieces, self.decided_by)
        return price_waste(self.envelope, book, rule)


def priced_item(e: Envelope, pieces: tuple[Piece, ...] = (), decided_by: str = "") -> Priced:
    p = e.payload
    if isinstance(p, UsageInterval):
        return Priced(e, p.pool_id, p.start_at, p.end_at, pieces, decided_by)
    assert isinstance(p, WorkWasted)
    return Priced(e, p.pool_id, e.occurred_at, e.occurred_at + 1)


class PricedSource(Protocol):
    """What was priced before, by pool and time: the events a late card may re-price."""

    def add(self, item: Priced) -> None: ...

    def overlapping(self, pool_id: str, from_us: int, to_us: int) -> Iterable[Priced]:
        """Items of `pool_id` whose span meets [from, to), each once, in any order."""
        ...


@dataclass(slots=True)
class MemorySource:
    """Every item priced, in memory (a history priced whole: the simulator's, the tests')."""

    by_pool: dict[str, list[Priced]] = field(default_factory=dict)

    def add(self, item: Priced) -> None:
        self.by_pool.setdefault(item.pool_id, []).append(item)

    def overlapping(self, pool_id: str, from_us: int, to_us: int) -> Iterator[Priced]:
        return (i for i in self.by_pool.get(pool_id, ()) if i.to_us > from_us and i.from_us < to_us)

    def prune(self, before_us: int) -> None:
        """Forget the items that end before `before_us` (nothing priced later reaches them)."""
        for pool_id, items in self.by_pool.items():
            self.by_pool[pool_id] = [i for i in items if i.to_us >= before_us]


class Refusal(NamedTuple):
    """A fact past the allowed lateness: why it is not priced."""

    envelope: Envelope
    applies_from_us: int
    lateness_us: int
    reason: str


@dataclass(slots=True)
class Reservation:
    envelope: Envelope
    accrued_to_us: int  # its cost is on the idle floor up to here


class Pricer:
    """The recorded rule's lines of a history (see the module's docstring)."""

    def __init__(
        self,
        rule: AccountingRule,
        book: RateBook | None = None,
        source: PricedSource | None = None,
    ) -> None:
        self.rule = rule
        self.book = book if book is not None else RateBook()
        self.source: PricedSource = source if source is not None else MemorySource()
        self.demand: dict[str, Demand] = {}
        self.reservations: dict[str, Reservation] = {}
        self.watermark_us: int | None = None
        self.priced_until: dict[str, int] = {}  # pool -> the end of what was priced on it
        self.refused: list[Refusal] = []
        self.unpriced: list[tuple[Envelope, str]] = []
        self.corrections = 0  # correction lines made
        self._pruned_day = -1

    # -- one event ----------------------------------------------------------------------------

    def feed(self, e: Envelope) -> list[LedgerLine]:
        """The lines `e` causes now (its own, or the corrections a late card makes)."""
        at = e.occurred_at
        if self.watermark_us is None or at > self.watermark_us:
            self.watermark_us = at
        p = e.payload
        if isinstance(p, RateCard):
            return self._card(e, p)
        if isinstance(p, UsageInterval):
            demand = self.demand.get(p.workload_id)
            if demand is None:
                pieces: tuple[Piece, ...] = (
                    ((p.start_at, p.end_at, 0),) if p.end_at > p.start_at else ()
                )
                decided_by = ""
            else:
                pieces = tuple(demand.useful(p.instance_id, p.vcpu, p.start_at, p.end_at))
                decided_by = demand.decided_by(p.instance_id)
            return self._priced(priced_item(e, pieces, decided_by))
        if isinstance(p, WorkWasted):
            return self._priced(priced_item(e))
        if isinstance(p, CheckpointWritten):
            return price_checkpoint(e, self.book, self.rule)
        if isinstance(p, InstanceLaunched):
            self._demand(p.workload_id).launch(p.instance_id, at, p.vcpu, e.causation_id or "")
        elif isinstance(p, InstanceLost | InstanceDeleted):
            self._demand(p.workload_id).end(p.instance_id, at)
        elif isinstance(p, CapacityClaimOpened):
            self._demand(p.workload_id).open_claim(p.claim_id, at, p.requested_vcpu)
        elif isinstance(p, CapacityReleased):
            self._demand(p.workload_id).release_claim(p.claim_id, at)
        elif isinstance(p, ReservationCommitted):
            self._reservation(e, p)
        return []

    def advance(self) -> list[LedgerLine]:
        """The idle floor's lines up to the last whole hour of the latest event time seen
        (call after each batch, and at the end of a history)."""
        if self.watermark_us is None:
            return []
        to = accrual_end(self.watermark_us)
        out: list[LedgerLine] = []
        for reservation in self.reservations.values():
            if to > reservation.accrued_to_us:
                out += accrue_reservation(
                    reservation.envelope, self.rule, reservation.accrued_to_us, to
                )
                reservation.accrued_to_us = to
        day = self.watermark_us // DAY_US
        if day > self._pruned_day:  # once a day: forget what no interval can reach back to
            self._pruned_day = day
            for demand in self.demand.values():
                demand.prune(self.watermark_us - DEMAND_HORIZON_US)
        return out

    # -- the parts ----------------------------------------------------------------------------

    def _demand(self, workload_id: str) -> Demand:
        demand = self.demand.get(workload_id)
        if demand is None:
            demand = self.demand[workload_id] = Demand()
        return demand

    def _priced(self, item: Priced) -> list[LedgerLine]:
        self.source.add(item)
        until = self.priced_until.get(item.pool_id)
        if until is None or item.to_us > until:
            self.priced_until[item.pool_id] = item.to_us
        try:
            return item.lines(self.book, self.rule)
        except Unpriced as error:
            e = item.envelope
            self.unpriced.append((e, f"{e.event_type} {e.event_id}: {error}"))
            return []

    def late(self, e: Envelope, applies_from_us: int) -> Refusal | None:
        """The refusal of a fact published past the allowed lateness, or None."""
        allowed = self.rule.allowed_lateness_s
        if not refused(applies_from_us, e.occurred_at, allowed):
            return None
        late_us = lateness_us(applies_from_us, e.occurred_at)
        reason = (
            f"{e.event_type} published {late_us / 3.6e9:.2f} h after the moment it applies "
            f"from, beyond the ledger's allowed lateness of {allowed / 3600:g} h: not priced"
        )
        return Refusal(e, applies_from_us, late_us, reason)

    def _reservation(self, e: Envelope, r: ReservationCommitted) -> None:
        refusal = self.late(e, r.start_at)
        if refusal is not None:
            self.refused.append(refusal)
            return
        if e.event_id not in self.reservations:
            self.reservations[e.event_id] = Reservation(e, r.start_at)

    def _card(self, e: Envelope, c: RateCard) -> list[LedgerLine]:
        refusal = self.late(e, c.valid_from_at)
        if refusal is not None:
            self.refused.append(refusal)
            return []
        row = (c.valid_from_at, e.occurred_at, e.event_id, c.valid_until_at,
               c.price_per_vcpu_h_eur_micros, c.guaranteed_price_per_vcpu_h_eur_micros,
               c.purchase_model)  # fmt: skip
        if self.book.contains(c.pool_id, row):
            return []  # the same card again (a batch read twice): nothing changes
        until = self.priced_until.get(c.pool_id)
        first_start = self.book.first_start(c.pool_id)
        # On time: nothing priced yet from its start on, and not a new first card (the
        # moments before a pool's first card are priced at that card), nor one starting with
        # the first (which of the cards starting then prices those moments may change).
        on_time = (
            first_start is not None
            and c.valid_from_at > first_start
            and c.valid_from_at >= (until or 0)
        )
        if until is None or on_time:
            self.book.add(c.pool_id, row)  # nothing priced yet that it prices: on time
            return []
        return self._reprice(e, c, row)

    def _reprice(
        self, e: Envelope, c: RateCard, row: tuple[int, int, str, int, int, int, str]
    ) -> list[LedgerLine]:
        """Add a card that prices events already priced; their corrections."""
        book, rule = self.book, self.rule
        first_start = book.first_start(c.pool_id)
        first = first_start is None or c.valid_from_at <= first_start
        book.add(c.pool_id, row)
        # Where the card changes a price: from its start (from the beginning, when it is or
        # starts with the pool's first card: the moments before are priced at the first row)
        # to the next card's start.
        nxt = book.next_start(c.pool_id, c.valid_from_at)
        to_us = nxt if nxt is not None else 1 << 62
        from_us = -(1 << 62) if first else c.valid_from_at
        touched = list(self.source.overlapping(c.pool_id, from_us, to_us))
        if not touched:
            return []
        book.remove(c.pool_id, row)
        before = [_lines_or_none(item, book, rule) for item in touched]
        book.add(c.pool_id, row)
        after = [_lines_or_none(item, book, rule) for item in touched]
        amounts: dict[tuple[str, int, str], int] = {}
        quantities: dict[tuple[str, int, str], float] = {}
        models: dict[tuple[str, int, str], str] = {}
        for old, new in zip(before, after, strict=True):
            for sign, lines in ((-1, old), (1, new)):
                for line in lines or ():
                    key = (line.workload_id, line.day, line.cause)
                    amounts[key] = amounts.get(key, 0) + sign * line.amount_eur_micros
                    quantities[key] = quantities.get(key, 0.0) + sign * line.quantity
                    models[key] = line.purchase_model
        out = []
        for key, amount in sorted(amounts.items()):
            quantity = quantities[key]
            if amount == 0 and abs(quantity) < 1e-9:
                continue
            workload_id, day, cause = key
            out.append(LedgerLine(workload_id, day, cause, e.event_id, amount, quantity,
                                  "vcpu_h", c.pool_id, models[key], "", e.event_type,
                                  e.occurred_at, rule.name))  # fmt: skip
        self.corrections += len(out)
        return out


def _lines_or_none(item: Priced, book: RateBook, rule: AccountingRule) -> list[LedgerLine] | None:
    try:
        return item.lines(book, rule)
    except Unpriced:
        return None
