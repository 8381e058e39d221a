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

**Late demand facts** (issue 27). What part of a usage interval was useful depends on the
workload's claims and instances (`demand.Demand`). A claim, launch, loss or deletion that
arrives after usage of its workload ending later was priced (the actuator writes launches and
deletions, the region's tap the usage: a paused or restarted broker, or a paused actuator,
lets one topic fall behind another, and a resent batch lands after later records) re-prices
that usage: for each interval whose useful pieces it changes, the lines with the new pieces
less the lines with the old, summed per workload, day and cause into correction lines that
name the late fact (their event id is its). A usage interval or wasted work seen again (a
record the log holds twice under one id) is priced once. So the lines of a history add up to
what its events give in event-time order, whatever order they came in and however often.
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
FACTS = (RateCard, UsageInterval, WorkWasted, CheckpointWritten, InstanceLaunched, InstanceLost,
         InstanceDeleted, CapacityClaimOpened, CapacityReleased, ReservationCommitted)  # fmt: skip
"""The events the ledger prices or prices by. Its horizons (what it forgets of the demand, and
the writer of the rate cards and priced items it holds in memory) are measured from the newest
of these (`Pricer.facts_until_us`), not from every event: an event stamped by another clock
(the live region's actuator stamps its throttled calls with the wall clock, a month ahead of
the simulated region's time, issue 27) made the ledger forget what later facts needed."""
FACT_TYPES = tuple(f.EVENT_TYPE for f in FACTS)


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
    """What was priced before, by pool and time: the events a late card may re-price; by
    workload: the usage a late demand fact may re-price."""

    def add(self, item: Priced) -> None: ...

    def seen(self, event_id: str) -> bool:
        """Whether an item of this event id was priced already (a record delivered twice)."""
        ...

    def overlapping(self, pool_id: str, from_us: int, to_us: int) -> Iterable[Priced]:
        """Items of `pool_id` whose span meets [from, to), each once, in any order."""
        ...

    def usage_of(self, workload_id: str, after_us: int) -> Iterable[Priced]:
        """The usage intervals of `workload_id` ending after `after_us`, each once."""
        ...

    def replace(self, item: Priced) -> None:
        """Hold `item` instead of the item of the same event id (re-priced pieces)."""
        ...


@dataclass(slots=True)
class MemorySource:
    """Every item priced, in memory (a history priced whole: the simulator's, the tests')."""

    by_pool: dict[str, list[Priced]] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)

    def add(self, item: Priced) -> None:
        self.by_pool.setdefault(item.pool_id, []).append(item)
        self.ids.add(item.envelope.event_id)

    def seen(self, event_id: str) -> bool:
        return event_id in self.ids

    def overlapping(self, pool_id: str, from_us: int, to_us: int) -> Iterator[Priced]:
        return (i for i in self.by_pool.get(pool_id, ()) if i.to_us > from_us and i.from_us < to_us)

    def prune(self, before_us: int) -> None:
        """Forget the items that end before `before_us` (nothing priced later reaches them),
        and their ids: a run's summary held one id per usage interval for the whole run."""
        ids = self.ids
        for pool_id, items in self.by_pool.items():
            kept = []
            for i in items:
                if i.to_us >= before_us:
                    kept.append(i)
                else:
                    ids.discard(i.envelope.event_id)
            self.by_pool[pool_id] = kept

    def usage_of(self, workload_id: str, after_us: int) -> Iterator[Priced]:
        return usage_of(self.by_pool, workload_id, after_us)

    def replace(self, item: Priced) -> None:
        replace_in(self.by_pool, item)


def usage_of(by_pool: dict[str, list[Priced]], workload_id: str, after_us: int) -> Iterator[Priced]:
    """The usage intervals of `workload_id` in `by_pool` ending after `after_us`."""
    for items in by_pool.values():
        for i in items:
            p = i.envelope.payload
            if i.to_us > after_us and isinstance(p, UsageInterval) and p.workload_id == workload_id:
                yield i


def replace_in(by_pool: dict[str, list[Priced]], item: Priced) -> None:
    """Put `item` in place of the item of its event id in `by_pool` (or add it)."""
    items = by_pool.setdefault(item.pool_id, [])
    event_id = item.envelope.event_id
    for n, held in enumerate(items):
        if held.envelope.event_id == event_id:
            items[n] = item
            return
    items.append(item)


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
        self.watermark_us: int | None = None  # the newest event time seen
        self.facts_until_us: int | None = None  # the newest of the `FACTS` seen
        self.priced_until: dict[str, int] = {}  # pool -> the end of what was priced on it
        self.usage_until: dict[str, int] = {}  # workload -> the end of its usage priced
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
        if not isinstance(p, FACTS):
            return []  # most events (rankings, orders): one check instead of the chain below
        if self.facts_until_us is None or at > self.facts_until_us:
            self.facts_until_us = at
        if isinstance(p, RateCard):
            return self._card(e, p)
        if isinstance(p, UsageInterval):
            if self.source.seen(e.event_id):
                return []  # delivered twice: priced once
            if p.end_at > self.usage_until.get(p.workload_id, p.end_at - 1):
                self.usage_until[p.workload_id] = p.end_at
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
            return [] if self.source.seen(e.event_id) else self._priced(priced_item(e))
        if isinstance(p, CheckpointWritten):
            return price_checkpoint(e, self.book, self.rule)
        if isinstance(p, InstanceLaunched):
            changed = self._demand(p.workload_id).launch(p.instance_id, at, p.vcpu,
                                                         e.causation_id or "")  # fmt: skip
            return self._late_demand(e, p.workload_id) if changed else []
        if isinstance(p, InstanceLost | InstanceDeleted):
            changed = self._demand(p.workload_id).end(p.instance_id, at)
            return self._late_demand(e, p.workload_id) if changed else []
        if isinstance(p, CapacityClaimOpened):
            changed = self._demand(p.workload_id).open_claim(p.claim_id, at, p.requested_vcpu)
            return self._late_demand(e, p.workload_id) if changed else []
        if isinstance(p, CapacityReleased):
            changed = self._demand(p.workload_id).release_claim(p.claim_id, at)
            return self._late_demand(e, p.workload_id) if changed else []
        if isinstance(p, ReservationCommitted):
            self._reservation(e, p)
        return []

    def advance(self) -> list[LedgerLine]:
        """The idle floor's lines up to the last whole hour of the latest event time seen
        (call after each batch, and at the end of a history); the demand's horizon moved on
        with the facts' time (`FACTS`)."""
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
        # Once a day of the facts' time: forget what no interval can reach back to.
        facts_us = self.facts_until_us
        if facts_us is not None and facts_us // DAY_US > self._pruned_day:
            self._pruned_day = facts_us // DAY_US
            for demand in self.demand.values():
                demand.prune(facts_us - DEMAND_HORIZON_US)
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
        return self._corrections(e, c.pool_id, zip(before, after, strict=True))

    def _late_demand(self, e: Envelope, workload_id: str) -> list[LedgerLine]:
        """A claim, launch or end that changed the workload's demand: if usage of the
        workload ending after it was priced already, the corrections of what it changes."""
        if self.usage_until.get(workload_id, e.occurred_at) <= e.occurred_at:
            return []  # on time: no usage priced yet that it reaches
        demand, book, rule = self.demand[workload_id], self.book, self.rule
        changes = []
        for item in list(self.source.usage_of(workload_id, e.occurred_at)):
            u = item.envelope.payload
            assert isinstance(u, UsageInterval)
            pieces = tuple(demand.useful(u.instance_id, u.vcpu, u.start_at, u.end_at))
            decided_by = demand.decided_by(u.instance_id)
            if pieces == item.pieces and decided_by == item.decided_by:
                continue
            new = item._replace(pieces=pieces, decided_by=decided_by)
            changes.append((_lines_or_none(item, book, rule), _lines_or_none(new, book, rule)))
            self.source.replace(new)
        return self._corrections(e, "", changes)

    def _corrections(
        self,
        e: Envelope,
        pool_id: str,
        changes: Iterable[tuple[list[LedgerLine] | None, list[LedgerLine] | None]],
    ) -> list[LedgerLine]:
        """The correction lines of `e` (a late card or demand fact): for each event it
        re-prices, its lines after less its lines before, summed per workload, day and cause."""
        amounts: dict[tuple[str, int, str], int] = {}
        quantities: dict[tuple[str, int, str], float] = {}
        models: dict[tuple[str, int, str], str] = {}
        pools: dict[tuple[str, int, str], set[str]] = {}
        for old, new in changes:
            for sign, lines in ((-1, old), (1, new)):
                for line in lines or ():
                    key = (line.workload_id, line.day, line.cause)
                    amounts[key] = amounts.get(key, 0) + sign * line.amount_eur_micros
                    quantities[key] = quantities.get(key, 0.0) + sign * line.quantity
                    models[key] = line.purchase_model
                    pools.setdefault(key, set()).add(line.pool_id)
        out = []
        for key, amount in sorted(amounts.items()):
            quantity = quantities[key]
            if amount == 0 and abs(quantity) < 1e-9:
                continue
            workload_id, day, cause = key
            pool = pool_id or (next(iter(pools[key])) if len(pools[key]) == 1 else "")
            out.append(LedgerLine(workload_id, day, cause, e.event_id, amount, quantity,
                                  "vcpu_h", pool, models[key], "", e.event_type,
                                  e.occurred_at, self.rule.name))  # fmt: skip
        self.corrections += len(out)
        return out


def _lines_or_none(item: Priced, book: RateBook, rule: AccountingRule) -> list[LedgerLine] | None:
    try:
        return item.lines(book, rule)
    except Unpriced:
        return None
