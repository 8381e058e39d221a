"""Rate cards as a step function of time, per pool (pure; the store is reached through a
callback only for cards older than what is held in memory).

The card in effect at time t is the latest card of the pool whose validity starts at or before
t (ties: the one published last, then the greater event id, so a correction published with the
same start replaces the card it corrects); it holds until the next one starts, even past its own
`valid_until` (a card that expires leaves the previous price in force). The moments of an
interval before the pool's first card are priced at that first card.

A card published more than the rule's allowed lateness after its validity starts is refused
(`refused`): it never enters a book (docs/accounting.md, "Late facts").
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Final, NamedTuple, cast


class Card(NamedTuple):
    """A rate card. Cards order by (start, publication, event id, ...), as tuples."""

    valid_from_us: int
    published_us: int  # the card event's occurred_at
    event_id: str
    valid_until_us: int
    price_eur_micros: int  # per vCPU-hour
    guaranteed_eur_micros: int  # per vCPU-hour, the counterfactual rate (ADR-26)
    purchase_model: str


# The book holds each card as a plain tuple of Card's fields (a `Row`), read by position. A day
# of a region adds tens of thousands of cards, and they stay for two days: Python's collector
# stops tracking a plain tuple of ints and strings at its first collection, where it would go
# on tracking a NamedTuple's instances (a subclass) through every full collection.
Row = tuple[int, int, str, int, int, int, str]
_FROM: Final = 0
_PRICE: Final = 4
_GUARANTEED: Final = 5
_valid_from = itemgetter(_FROM)
_LAST = (1 << 62, "\uffff")  # after any (publication, event id) of a card starting at a moment


def lateness_us(valid_from_us: int, published_us: int) -> int:
    """How long after the moment a price starts to apply it was published (never negative)."""
    return max(0, published_us - valid_from_us)


def refused(valid_from_us: int, published_us: int, allowed_lateness_s: int) -> bool:
    """Whether a fact setting a price from `valid_from_us`, published at `published_us`, is
    later than the allowed lateness (it is then refused: reported, never priced)."""
    return lateness_us(valid_from_us, published_us) > allowed_lateness_s * 1_000_000


class Unpriced(ValueError):  # noqa: N818 - reads as what the event is
    """An event the ledger cannot price (no rate card for its pool); the message says which."""


# pool, from_us, to_us -> the stored cards of `pool` that the book may lack for [from, to)
Backfill = Callable[[str, int, int], list[Card]]


class RateBook:
    def __init__(self, backfill: Backfill | None = None) -> None:
        self._cards: dict[str, list[Row]] = {}
        # Per pool, the integral of price and of guaranteed price (micro-euros x microseconds
        # per vCPU-hour) from the first card up to each card's start: valid up to _clean[pool].
        self._starts: dict[str, list[int]] = {}
        self._cum: dict[str, list[tuple[int, int]]] = {}
        self._clean: dict[str, int] = {}
        # For t >= floor[pool], the cards in memory are all there are; below, ask the store.
        self._floor: dict[str, int] = {}
        self._default_floor: int | None = None  # None: complete since ever (a new ledger)
        self._backfill = backfill

    def add(self, pool_id: str, card: Row) -> None:
        """Hold `card` (a `Card`, or a plain tuple of its fields in order)."""
        if type(card) is not tuple:  # a Card: held as a plain tuple (see `Row`)
            card = cast(Row, tuple(card))
        cards = self._cards.setdefault(pool_id, [])
        if not cards or cards[-1] < card:  # cards come in time order: append
            cards.append(card)
            return
        i = bisect.bisect_left(cards, card)
        if i < len(cards) and cards[i] == card:
            return
        cards.insert(i, card)
        self._clean[pool_id] = min(self._clean.get(pool_id, i), i)

    def contains(self, pool_id: str, card: Row) -> bool:
        cards = self._cards.get(pool_id, [])
        i = bisect.bisect_left(cards, card)
        return i < len(cards) and cards[i] == card

    def remove(self, pool_id: str, card: Row) -> None:
        """Take `card` out again (a late card's corrections price without it, then with it)."""
        cards = self._cards.get(pool_id, [])
        i = bisect.bisect_left(cards, card)
        if i < len(cards) and cards[i] == card:
            del cards[i]
            self._clean[pool_id] = min(self._clean.get(pool_id, i), i)

    def first_start(self, pool_id: str) -> int | None:
        """The start of the pool's first card held (None: it has none)."""
        cards = self._cards.get(pool_id)
        return cards[0][_FROM] if cards else None

    def next_start(self, pool_id: str, after_us: int) -> int | None:
        """The start of the first card held that starts after `after_us` (None: none does)."""
        cards = self._cards.get(pool_id, [])
        i = bisect.bisect_right(cards, (after_us, *_LAST))
        return cards[i][_FROM] if i < len(cards) else None

    def set_complete_from(self, floor_us: int) -> None:
        """After a reload: memory is complete only from `floor_us` on, for every pool."""
        self._default_floor = floor_us
        self._floor.clear()

    def _ensure(self, pool_id: str, from_us: int) -> None:
        floor = self._floor.get(pool_id, self._default_floor)
        if floor is None or from_us >= floor or self._backfill is None:
            return
        for card in self._backfill(pool_id, from_us, floor):
            self.add(pool_id, card)
        self._floor[pool_id] = from_us

    def purchase_model(self, pool_id: str, at_us: int) -> str:
        return self.at(pool_id, at_us).purchase_model

    def at(self, pool_id: str, at_us: int) -> Card:
        self._ensure(pool_id, at_us)
        cards = self._cards.get(pool_id)
        if not cards:
            raise Unpriced(f"no rate card for pool {pool_id!r}")
        i = bisect.bisect_right(cards, (at_us, *_LAST))
        return Card._make(cards[max(i - 1, 0)])

    def segments(self, pool_id: str, start_us: int, end_us: int) -> Iterator[tuple[int, int, Card]]:
        """The pieces [a, b) of [start, end) with the card in effect on each."""
        self._ensure(pool_id, start_us)
        cards = self._cards.get(pool_id)
        if not cards:
            raise Unpriced(f"no rate card for pool {pool_id!r}")
        i = max(bisect.bisect_right(cards, (start_us, *_LAST)) - 1, 0)
        a = start_us
        while a < end_us:
            nxt = i + 1
            # Skip cards that start at the same moment: the last of them is in force.
            while nxt < len(cards) and cards[nxt][_FROM] <= a:
                i, nxt = nxt, nxt + 1
            b = min(end_us, cards[nxt][_FROM]) if nxt < len(cards) else end_us
            yield a, b, Card._make(cards[i])
            a, i = b, nxt

    def _prefix(self, pool_id: str) -> tuple[list[Row], list[int], list[tuple[int, int]]]:
        cards = self._cards[pool_id]
        starts = self._starts.setdefault(pool_id, [])
        cum = self._cum.setdefault(pool_id, [])
        clean = self._clean.get(pool_id, 0)
        if clean < len(cards) or len(starts) != len(cards):
            del starts[clean:], cum[clean:]
            for j in range(len(starts), len(cards)):
                c = cards[j]
                if j == 0:
                    cum.append((0, 0))
                else:
                    p, d = cards[j - 1], c[_FROM] - cards[j - 1][_FROM]
                    before = cum[j - 1]
                    cum.append((before[0] + d * p[_PRICE], before[1] + d * p[_GUARANTEED]))
                starts.append(c[_FROM])
            self._clean[pool_id] = len(cards)
        return cards, starts, cum

    def integral(self, pool_id: str, at_us: int) -> tuple[int, int]:
        """The integral of (price, guaranteed price) over time up to `at_us` from an origin of
        the pool's (the first card held when its integrals were last computed from scratch),
        in micro-euros x microseconds per vCPU-hour. Only differences are meaningful: for a
        piece [a, b), the difference of two integrals is the sum of duration x price over its
        cards (the origin does not move between the calls that price one event)."""
        self._ensure(pool_id, at_us)
        if not self._cards.get(pool_id):
            raise Unpriced(f"no rate card for pool {pool_id!r}")
        cards, starts, cum = self._prefix(pool_id)
        # The card in force: the last starting at or before t (of equal starts, the last).
        i = max(bisect.bisect_right(starts, at_us) - 1, 0)
        c, base = cards[i], cum[i]
        d = at_us - c[_FROM]
        return base[0] + d * c[_PRICE], base[1] + d * c[_GUARANTEED]

    def prune(self, before_us: int) -> None:
        """Forget cards superseded before `before_us` (keeping the one in force then)."""
        for pool_id, cards in self._cards.items():
            i = bisect.bisect_right(cards, before_us, key=_valid_from) - 1
            if i > 0:
                del cards[:i]
                # The integrals held for the cards kept stay valid: they are measured from an
                # origin that does not move (only their differences are read), so the prefix
                # is cut, not recomputed (recomputing it after every batch's prune was
                # quadratic in the cards held: a minute of a 30-day rebuild's CPU).
                starts, cum = self._starts.get(pool_id, []), self._cum.get(pool_id, [])
                valid = min(self._clean.get(pool_id, 0), len(starts))
                if valid > i:
                    del starts[:i], cum[:i]
                    self._clean[pool_id] = valid - i
                else:
                    starts.clear()
                    cum.clear()
                    self._clean[pool_id] = 0
                known = self._floor.get(pool_id, self._default_floor)
                first = cards[0][_FROM]
                self._floor[pool_id] = first if known is None else max(known, first)

    def __len__(self) -> int:
        return sum(len(c) for c in self._cards.values())
