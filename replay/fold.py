"""The Python engine: a fold over the merged history that prices every event under one or more
accounting rules (pure: events in, ledger amounts out).

It follows the ledger's own pricing (`projections.ledger.pricer`, `pricing`) step for step,
generalised by the rule: the same rate book (rate cards as a step function, a card published
past the allowed lateness refused), the same demand (what each workload's open claims asked
for, which makes the useful part of each usage interval), the same quanta, the same split of
usage at useful pieces and UTC midnights, every line summed exactly and rounded once to whole
micro-euros (half to even), then scaled. A rate card that arrives after events it prices
re-prices them: each rule's lines of those events with the card less their lines without
(the corrections the ledger writes); so does a claim, launch or end that arrives after usage
of its workload ending later (it changes what was useful), and a usage interval, wasted work
or checkpoint read twice (a record the log holds twice under one id) is priced once. The
reservations' cost accrues to the idle floor up to the last whole hour of the history's
latest event. Where the ledger charges every line to its workload, a rule may charge it to
the platform or share the day's total of that line over the workloads by their used
vCPU-hours (largest remainder, so the shares add up to the total exactly).

It holds what it priced, and the rate cards, for `HORIZON_US` behind the newest fact it read
(of the types the ledger prices by, `projections.ledger.pricer.FACTS`):
a record more than that out of event-time order in its partition is beyond it.

All arithmetic is on integers: a line is a numerator over a denominator until it is rounded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from projections.ledger.demand import Demand, Piece, all_useful
from projections.ledger.pricer import FACTS
from projections.ledger.pricing import accrual_end, reserved_micros_exact, split_by_day
from projections.ledger.rates import Card, RateBook, Unpriced, refused
from projections.ledger.rule import (
    ASKED_FOR,
    CHECKPOINT_STORAGE,
    COUNTERFACTUAL,
    FOOTPRINT,
    HEADROOM,
    IDLE_FLOOR,
    SURPLUS,
    WASTED_WORK,
)
from replay.rule import PLATFORM, SPEND_CAUSE, Charge, Rate, Rule
from schemas.events import (
    CapacityClaimOpened,
    CapacityReleased,
    CheckpointWritten,
    ContractPublished,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    RateCard,
    ReservationCommitted,
    UsageInterval,
    WorkWasted,
)

HOUR_US = 3_600_000_000
DAY_US = 86_400_000_000
BYTES_PER_GB = 1_000_000_000
HORIZON_US = 7 * DAY_US  # rate cards, demand and what was priced, kept behind the newest fact
CARD_HORIZON_US = HORIZON_US

LineKey = tuple[str, int, str]  # workload, UTC day (days since the epoch), cause
# One line of an item under a rule, before it is charged: (workload, day, cause, micros, charge)
Part = tuple[str, int, str, int, Charge]


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

    def scale(self, cause: str, micros: int) -> int:
        return scaled(micros, self._scales[cause])

    def add_scaled(self, workload: str, day: int, cause: str, micros: int, charge: Charge) -> None:
        if charge == "workload":
            self.amounts[(workload, day, cause)] += micros
        elif charge == "platform":
            self.amounts[(PLATFORM, day, cause)] += micros
        else:
            self.shared[(day, cause)] += micros

    def add(self, workload: str, day: int, cause: str, micros: int, charge: Charge) -> None:
        self.add_scaled(workload, day, cause, self.scale(cause, micros), charge)

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


@dataclass(frozen=True, slots=True)
class Item:
    """A usage interval or wasted work, with what its price depends on besides the cards."""

    e: Envelope
    pool_id: str
    from_us: int
    to_us: int
    pieces: tuple[Piece, ...] = ()  # usage: what was useful
    tier: str | None = None
    notice: bool = False  # waste: the loss came with a notice


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
        self.demand: dict[str, Demand] = {}
        self.reservations: dict[str, Envelope] = {}
        self.items: dict[str, list[Item]] = {}  # pool -> what was priced on it
        self.priced_ids: dict[str, int] = {}  # ids of the items (and checkpoints), their ends
        self.usage_until: dict[str, int] = {}  # workload -> the end of its usage priced
        self.priced_until: dict[str, int] = {}
        self.watermark_us: int | None = None
        self.facts_until_us: int | None = None  # the newest of the ledger's facts
        self.events = 0
        self.unpriced: list[str] = []
        self.refused: list[str] = []  # facts past the allowed lateness
        self._pruned_day = -1
        lateness = {r.allowed_lateness_s for r in rules}
        if len(lateness) > 1:
            raise ValueError("the rules of one pass must share their allowed lateness")
        self.allowed_lateness_s = lateness.pop() if lateness else 3600
        self._need_tiers = any(r.uses_tiers for r in rules)
        self._need_losses = any(
            r.wasted_work_charge.with_notice != r.wasted_work_charge.without_notice for r in rules
        )
        self._asked_for = any(r.useful_work == ASKED_FOR for r in rules)
        # Once: `Rule.shares` looks at every line's charge, and usage is a tenth of the history.
        self._shares = any(r.shares for r in rules)

    def _in_range(self, day: int) -> bool:
        return (self.first_day is None or day >= self.first_day) and (
            self.last_day is None or day <= self.last_day
        )

    def feed_all(self, events: Iterable[Envelope]) -> None:
        for e in events:
            self.feed(e)

    def feed(self, e: Envelope) -> None:
        self.events += 1
        at = e.occurred_at
        if self.watermark_us is None or at > self.watermark_us:
            self.watermark_us = at
        p = e.payload
        # Once a day of the facts' time (as the ledger's, `pricer.FACTS`): forget what is long
        # behind. Not of every event's: one stamped by another clock is no reason to forget.
        if isinstance(p, FACTS) and (self.facts_until_us is None or at > self.facts_until_us):
            self.facts_until_us = at
            if at // DAY_US > self._pruned_day:
                self._pruned_day = at // DAY_US
                self._prune(at - HORIZON_US)
        if isinstance(p, RateCard):
            self._card(e, p)
        elif isinstance(p, UsageInterval):
            self._usage(e, p)
        elif isinstance(p, WorkWasted):
            self._waste(e, p)
        elif isinstance(p, CheckpointWritten):
            self._checkpoint(e, p)
        elif isinstance(p, InstanceLaunched):
            if self._demand(p.workload_id).launch(p.instance_id, at, p.vcpu, e.causation_id or ""):
                self._late_demand(p.workload_id, at)
        elif isinstance(p, InstanceLost):
            if self._demand(p.workload_id).end(p.instance_id, at):
                self._late_demand(p.workload_id, at)
            if self._need_losses:
                self.with_notice[e.event_id] = p.with_notice
        elif isinstance(p, InstanceDeleted):
            if self._demand(p.workload_id).end(p.instance_id, at):
                self._late_demand(p.workload_id, at)
        elif isinstance(p, CapacityClaimOpened):
            if self._demand(p.workload_id).open_claim(p.claim_id, at, p.requested_vcpu):
                self._late_demand(p.workload_id, at)
        elif isinstance(p, CapacityReleased):
            if self._demand(p.workload_id).release_claim(p.claim_id, at):
                self._late_demand(p.workload_id, at)
        elif isinstance(p, ReservationCommitted):
            if refused(p.start_at, at, self.allowed_lateness_s):
                self.refused.append(f"reservation_committed {e.event_id}: past the lateness")
            else:
                self.reservations.setdefault(e.event_id, e)
        elif isinstance(p, ContractPublished) and self._need_tiers:
            self.tiers[p.workload_id] = p.tier

    def results(self) -> list[dict[LineKey, int]]:
        self._idle_floor()
        return [ledger.finish() for ledger in self.ledgers]

    # -- state ------------------------------------------------------------------------------

    def _demand(self, workload_id: str) -> Demand:
        demand = self.demand.get(workload_id)
        if demand is None:
            demand = self.demand[workload_id] = Demand()
        return demand

    def _prune(self, before_us: int) -> None:
        self.book.prune(before_us)
        for demand in self.demand.values():
            demand.prune(before_us)
        for pool_id, items in self.items.items():
            self.items[pool_id] = [i for i in items if i.to_us >= before_us]
        self.priced_ids = {i: t for i, t in self.priced_ids.items() if t >= before_us}

    def _late_demand(self, workload_id: str, at: int) -> None:
        """A claim, launch or end that changed the workload's demand after usage of it ending
        later was priced: each rule's lines of that usage with its new pieces less its lines
        with the old (the corrections the ledger writes)."""
        if not self._asked_for or self.usage_until.get(workload_id, at) <= at:
            return
        demand = self.demand[workload_id]
        for items in self.items.values():
            for n, item in enumerate(items):
                u = item.e.payload
                if item.to_us <= at or not isinstance(u, UsageInterval):
                    continue
                if u.workload_id != workload_id:
                    continue
                pieces = tuple(demand.useful(u.instance_id, u.vcpu, u.start_at, u.end_at))
                if pieces == item.pieces:
                    continue
                new = items[n] = replace(item, pieces=pieces)
                for ledger in self.ledgers:
                    for sign, lines in (
                        (-1, self._parts(item, ledger)),
                        (1, self._parts(new, ledger)),
                    ):
                        for workload, day, cause, micros, charge in lines:
                            ledger.add_scaled(workload, day, cause, sign * micros, charge)

    def _card(self, e: Envelope, p: RateCard) -> None:
        if refused(p.valid_from_at, e.occurred_at, self.allowed_lateness_s):
            self.refused.append(f"rate_card {e.event_id}: past the lateness")
            return
        row = (p.valid_from_at, e.occurred_at, e.event_id, p.valid_until_at,
               p.price_per_vcpu_h_eur_micros, p.guaranteed_price_per_vcpu_h_eur_micros,
               p.purchase_model)  # fmt: skip
        book = self.book
        if book.contains(p.pool_id, row):
            return
        until = self.priced_until.get(p.pool_id)
        first_start = book.first_start(p.pool_id)
        # On time: nothing priced yet from its start on, and not a new first card (the
        # moments before a pool's first card are priced at that card), nor one starting with
        # the first (which of the cards starting then prices those moments may change).
        on_time = (
            first_start is not None
            and p.valid_from_at > first_start
            and p.valid_from_at >= (until or 0)
        )
        if until is None or on_time:
            book.add(p.pool_id, row)
            return
        # A card for moments already priced: re-price what it touches (see the docstring).
        first = first_start is None or p.valid_from_at <= first_start
        book.add(p.pool_id, row)
        nxt = book.next_start(p.pool_id, p.valid_from_at)
        to_us = nxt if nxt is not None else 1 << 62
        from_us = -(1 << 62) if first else p.valid_from_at
        touched = [
            i for i in self.items.get(p.pool_id, ()) if i.to_us > from_us and i.from_us < to_us
        ]
        if not touched:
            return
        book.remove(p.pool_id, row)
        before = [[self._parts(i, ledger) for i in touched] for ledger in self.ledgers]
        book.add(p.pool_id, row)
        for ledger, old in zip(self.ledgers, before, strict=True):
            for item, parts in zip(touched, old, strict=True):
                for sign, lines in ((-1, parts), (1, self._parts(item, ledger))):
                    for workload, day, cause, micros, charge in lines:
                        ledger.add_scaled(workload, day, cause, sign * micros, charge)

    # -- pricing --------------------------------------------------------------------------

    def _usage(self, e: Envelope, u: UsageInterval) -> None:
        if u.end_at <= u.start_at or e.event_id in self.priced_ids:
            return
        if u.end_at > self.usage_until.get(u.workload_id, u.end_at - 1):
            self.usage_until[u.workload_id] = u.end_at
        demand = self.demand.get(u.workload_id)
        if demand is None or not self._asked_for:
            pieces: tuple[Piece, ...] = ((u.start_at, u.end_at, 0),)
        else:
            pieces = tuple(demand.useful(u.instance_id, u.vcpu, u.start_at, u.end_at))
        item = Item(e, u.pool_id, u.start_at, u.end_at, pieces, self.tiers.get(u.workload_id))
        self._priced(item)

    def _waste(self, e: Envelope, w: WorkWasted) -> None:
        if e.event_id in self.priced_ids:
            return
        notice = self.with_notice.get(e.causation_id or "", False)
        t = e.occurred_at
        item = Item(e, w.pool_id, t, t + 1, (), self.tiers.get(w.workload_id), notice)
        self._priced(item)

    def _priced(self, item: Item) -> None:
        self.items.setdefault(item.pool_id, []).append(item)
        self.priced_ids[item.e.event_id] = item.to_us
        until = self.priced_until.get(item.pool_id)
        if until is None or item.to_us > until:
            self.priced_until[item.pool_id] = item.to_us
        for ledger in self.ledgers:
            for workload, day, cause, micros, charge in self._parts(item, ledger):
                ledger.add_scaled(workload, day, cause, micros, charge)
        if self._shares and isinstance(item.e.payload, UsageInterval):
            self._weigh(item)

    def _parts(self, item: Item, ledger: RuleLedger) -> list[Part]:
        """The item's lines under the ledger's rule, each rounded and scaled (nothing if its
        pool has no card: it is reported once, when first priced)."""
        try:
            if isinstance(item.e.payload, UsageInterval):
                return self._usage_parts(item, item.e.payload, ledger)
            assert isinstance(item.e.payload, WorkWasted)
            return self._waste_parts(item, item.e.payload, ledger)
        except Unpriced as error:
            message = f"{item.e.event_type} {item.e.event_id}: {error}"
            if not self.unpriced or self.unpriced[-1] != message:
                self.unpriced.append(message)
            return []

    def _weigh(self, item: Item) -> None:
        u = item.e.payload
        assert isinstance(u, UsageInterval)
        span_us = u.end_at - u.start_at
        for ledger in self.ledgers:
            if not ledger.rule.shares:
                continue
            used_q = round(u.used_vcpu_h * ledger.rule.usage_quanta_per_vcpu_h)
            for day, a, b in _days(u.start_at, u.end_at):
                if self._in_range(day):
                    by_workload = ledger.weights.setdefault(day, {})
                    by_workload[u.workload_id] = (
                        by_workload.get(u.workload_id, 0) + used_q * (b - a) // span_us
                    )

    def _usage_parts(self, item: Item, u: UsageInterval, ledger: RuleLedger) -> list[Part]:
        rule = ledger.rule
        span_us = u.end_at - u.start_at
        vcpu = max(u.vcpu, 1)
        pieces = (
            item.pieces if rule.useful_work == ASKED_FOR else all_useful(u.start_at, u.end_at, vcpu)
        )
        days = [pc for pc in split_by_day(pieces) if self._in_range(pc[0])]
        if not days:
            return []
        ends = {x: self.book.integral(u.pool_id, x) for _, a, b, _ in days for x in (a, b)}
        tier = item.tier
        q = rule.usage_quanta_per_vcpu_h
        used_q = round(u.used_vcpu_h * q)
        capacity_q = round_half_even(u.vcpu * span_us * q, HOUR_US)
        idle_q = max(capacity_q - used_q, 0)
        share = q * span_us
        spend_cause = SPEND_CAUSE[u.purchase_model]
        spend = rule.spend[spend_cause]
        fp = rule.footprint
        agent_den = 1000 * HOUR_US
        cf = rule.counterfactual
        idle_floor = rule.idle_floor.count and u.purchase_model == "committed"
        # Per day, exact numerators: (useful x rate integral), (surplus x ...), over share x vcpu.
        sums: dict[tuple[int, str], int] = defaultdict(int)
        for day, a, b, useful in days:
            (pa, ga), (pb, gb) = ends[a], ends[b]
            d, d_price, d_g = b - a, pb - pa, gb - ga

            def over(rate: Rate, d: int = d, d_price: int = d_price, d_g: int = d_g) -> int:
                return _integral(rate, d, d_price, d_g, tier)

            sums[(day, COUNTERFACTUAL)] += used_q * useful * over(cf.rate)
            sums[(day, spend_cause)] += used_q * useful * over(spend.rate)
            sums[(day, SURPLUS)] += used_q * (vcpu - useful) * over(rule.surplus.rate)
            sums[(day, HEADROOM)] += idle_q * vcpu * over(rule.headroom.rate)
            sums[(day, FOOTPRINT)] += vcpu * (
                fp.agent_millicpu_per_instance * over(fp.agent_rate) * share
                + used_q * d * fp.control_plane_eur_micros_per_vcpu_h * agent_den
            )
            if idle_floor:
                sums[(day, IDLE_FLOOR)] -= capacity_q * vcpu * d_price
        den = share * vcpu
        charges: dict[str, Charge] = {
            COUNTERFACTUAL: cf.charge_to,
            spend_cause: spend.charge_to,
            SURPLUS: rule.surplus.charge_to,
            HEADROOM: rule.headroom.charge_to,
            FOOTPRINT: fp.charge_to,
            IDLE_FLOOR: rule.idle_floor.charge_to,
        }
        out: list[Part] = []
        w = u.workload_id
        for (day, cause), numerator in sums.items():
            micros = round_half_even(numerator, den * agent_den if cause == FOOTPRINT else den)
            charge = charges[cause]
            owner = PLATFORM if cause == IDLE_FLOOR and charge == "workload" else w
            out.append((owner, day, cause, ledger.scale(cause, micros), charge))
        return out

    def _waste_parts(self, item: Item, w: WorkWasted, ledger: RuleLedger) -> list[Part]:
        day = item.e.occurred_at // DAY_US
        if not self._in_range(day):
            return []
        card = self.book.at(w.pool_id, item.e.occurred_at)
        rule = ledger.rule
        tier = item.tier
        spend_cause = SPEND_CAUSE[card.purchase_model]
        qs = rule.waste_quanta_per_vcpu_s
        wasted_q, den = round(w.wasted_vcpu_s * qs), qs * 3600
        cf, spend = rule.counterfactual, rule.spend[spend_cause]
        charge = rule.wasted_work_charge
        lines = (
            (COUNTERFACTUAL, -wasted_q * _at(cf.rate, card, tier), cf.charge_to),
            (
                WASTED_WORK,
                wasted_q * _at(rule.wasted_work_rate, card, tier),
                charge.with_notice if item.notice else charge.without_notice,
            ),
            (spend_cause, -wasted_q * _at(spend.rate, card, tier), spend.charge_to),
        )
        return [
            (w.workload_id, day, cause, ledger.scale(cause, round_half_even(n, den)), c)
            for cause, n, c in lines
        ]

    def _checkpoint(self, e: Envelope, c: CheckpointWritten) -> None:
        if e.event_id in self.priced_ids:
            return
        self.priced_ids[e.event_id] = e.occurred_at
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

    def _idle_floor(self) -> None:
        """Each reservation's cost per UTC day, up to the last whole hour of the newest event,
        rounded once per day (what the ledger's hourly lines add up to)."""
        if self.watermark_us is None:
            return
        until = accrual_end(self.watermark_us)
        for e in self.reservations.values():
            r = e.payload
            assert isinstance(r, ReservationCommitted)
            hi = min(until, r.end_at)
            if hi <= r.start_at:
                continue
            for day in range(r.start_at // DAY_US, (hi - 1) // DAY_US + 1):
                if not self._in_range(day):
                    continue
                exact, _ = reserved_micros_exact(r, day, until)
                micros = round_half_even(exact, HOUR_US)
                for ledger in self.ledgers:
                    rule = ledger.rule
                    if rule.idle_floor.count:
                        charge = rule.idle_floor.charge_to
                        ledger.add(PLATFORM, day, IDLE_FLOOR, micros, charge)


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
