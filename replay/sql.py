"""The ClickHouse engine: SQL generated from an accounting rule, run over the ledger's tables
(or over an archive's Parquet files), giving the same amounts as the Python fold to the
micro-euro.

The statements follow `replay.fold` line by line, in integer arithmetic (Int128; a line is a
numerator over a denominator until it is rounded half to even):

1. the rate cards as a step function per pool, with the integral of each price from the
   pool's first card up to each card's start: a cumulative sum over each pool's sorted cards,
   or, over archive months of format 3, the integrals their rate_cards.parquet holds, offset
   month by month; and a sentinel card per pool before its first, so that every moment has a
   card in force;
   A card published past the rule's allowed lateness is left out; of cards starting at the
   same moment the one published last is in force;
2. each workload's instances (launch, end, vCPU) and claims (opened, released, vCPU), and the
   usage intervals cut into pieces by what was useful: at every moment an instance is useful up
   to what the workload's open claims ask for less the vCPU of the instances launched before
   it (`projections.ledger.demand`, the same rule in arrays), then at UTC midnights;
3. the ledger lines of usage (the integral of each price over a piece: the difference of the
   integrals at its two ends, each from the card in force there by an ASOF join; each event's
   pieces of a day summed exactly, then rounded once), wasted work, checkpoints and the
   reservations' cost up to the last whole hour of the history (the idle floor) under the rule,
   unpivoted into (workload, day, cause, amount, charge), and the shared lines shared out by
   the day's used vCPU-hours with the largest remainder.

Steps 1 and 2 are written to scratch tables (Memory engine, dropped after), so that each is
computed once. What the Python fold learns in history order (the contracts in force, whether a
loss had a notice, the claims and launches before a usage interval), the SQL reads from whole
tables: the two agree when a contract, a claim and a launch come before the events they price,
as the writers append them. Rate cards may come in any order: both take them by event time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pyarrow.parquet as pq

from projections.ledger.demand import NEVER
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
from projections.ledger.store import LedgerStore
from replay.archive import layout
from replay.fold import BYTES_PER_GB, DAY_US, HOUR_US, LineKey
from replay.rule import PLATFORM, SPEND_CAUSE, TIERS, Rate, Rule

Step = Callable[[str], None]
EARLIEST = -(2**62)
"""The start of each pool's sentinel card (`SqlReplay._cards_sql`): before any event, and far
enough from the epoch that a moment's distance from it still fits in an Int64."""


@dataclass(frozen=True, slots=True)
class Relations:
    """Where the history is, as SQL: `events` yields (event_id String, event_type String,
    t Int64 microseconds, causation String, payload String JSON, topic String, partition
    UInt32, offset UInt64); `cards` yields (pool String, eid String, vf Int64, price Int64,
    g Int64, model String); `usage` and `checkpoints`, if given, yield the usage intervals
    (event_id String, t Int64, w String, pool String, model String, s Int64, e Int64,
    vcpu Int64, used_h Float64) and checkpoints (w String, t Int64, written_bytes Int64) as
    typed columns, and `events` then holds only those they do not (none unless
    `untyped_in_events`)."""

    events: str
    cards: str
    latest: str = ""
    """SQL giving the newest event time of the whole history as `t` (the idle floor accrues up
    to its last whole hour); default: that of `events`."""
    read_once: bool = False
    """Read the events the lines are priced from (every type but rate cards) once, into a
    scratch table, rather than once per kind of line: for Parquet files, where each read
    decodes the whole payload column whatever the filter keeps."""
    usage: str | None = None
    checkpoints: str | None = None
    untyped_in_events: bool = True
    counted: str | None = None
    """SQL giving the history's number of events as `n` (default: those of `events`)."""
    integrated_cards: bool = False
    """`cards` also yields, per month of the archive's format 3, the month's number `k` and
    the file's `in_force`, `cp` and `cg` (`replay.archive.layout.CARD_INTEGRALS`): the engine
    then takes the integrals from there rather than sorting every pool's cards."""


# The event types the lines are priced from, besides the rate cards.
PRICED_TYPES = (
    "usage_interval",
    "work_wasted",
    "checkpoint_written",
    "instance_lost",
    "contract_published",
    "instance_launched",
    "instance_deleted",
    "capacity_claim_opened",
    "capacity_released",
    "reservation_committed",
)


LEDGER_RELATIONS = Relations(
    events=(
        "SELECT toString(event_id) AS event_id, toString(event_type) AS event_type,"
        " toUnixTimestamp64Micro(occurred_at) AS t, ifNull(toString(causation_id), '') AS"
        " causation, payload, toString(topic) AS topic, partition, offset FROM events FINAL"
    ),
    cards=(
        "SELECT toString(pool_id) AS pool, toString(event_id) AS eid,"
        " toUnixTimestamp64Micro(valid_from) AS vf, price_per_vcpu_h_eur_micros AS price,"
        " guaranteed_price_per_vcpu_h_eur_micros AS g, toString(purchase_model) AS model,"
        " toUnixTimestamp64Micro(published_at) AS pub"
        " FROM rate_cards"  # no FINAL: a card inserted twice collapses with its copies below
    ),
    latest="SELECT max(toUnixTimestamp64Micro(occurred_at)) AS t FROM events",
)


@dataclass(frozen=True, slots=True)
class ParquetMonth:
    """A month of the archive as local files: its events.parquet and, from format 2 on, its
    typed files (`replay.archive.layout`; a month has all of them or none)."""

    events: str
    rate_cards: str | None = None
    usage: str | None = None
    checkpoints: str | None = None
    priced: str | None = None
    """priced_events.parquet: the month's other priced events, read instead of events.parquet."""


def parquet_relations(files: Sequence[str | ParquetMonth]) -> Relations:
    """The history in archive Parquet files, month by month: the rate cards, usage intervals
    and checkpoints from the typed files where a month has them, else from its events'
    payloads."""
    months = [ParquetMonth(f) if isinstance(f, str) else f for f in files]
    # Parquet columns read as Nullable; the engine's joins want plain values (none is null
    # but causation_id, which the ledger's table also gives as '').
    columns = (
        "SELECT assumeNotNull(event_id) AS event_id, assumeNotNull(event_type) AS event_type,"
        " toUnixTimestamp64Micro(assumeNotNull(occurred_at)) AS t,"
        " ifNull(causation_id, '') AS causation, assumeNotNull(payload) AS payload,"
        " assumeNotNull(topic) AS topic, assumeNotNull(partition) AS partition,"
        " assumeNotNull(offset) AS offset"
    )
    # A month of format 2 has the events priced from, other than those typed, in a small
    # file of their own: events.parquet, whose payload column a read decodes whole whatever
    # the filter keeps, is not read at all.
    # Before format 4 it held only losses, waste and contracts: the claims, launches,
    # deletions and reservations of such a month come from its events file.
    demand = ", ".join(f"'{t}'" for t in layout.PRICED_TYPES if t not in layout.PRICED_TYPES_3)
    events = " UNION ALL ".join(
        f"{columns} FROM file({_quote(m.priced)}, Parquet)"
        + (
            ""
            if _holds_demand(m.priced)
            else f" UNION ALL {columns} FROM file({_quote(m.events)}, Parquet)"
            f" WHERE event_type IN ({demand})"
        )
        if m.priced is not None
        else f"{columns} FROM file({_quote(m.events)}, Parquet)"
        + (
            ""
            if m.usage is None
            else " WHERE event_type NOT IN ('rate_card', 'usage_interval', 'checkpoint_written')"
        )
        for m in months
    )
    # Rate cards are over half of a month's events, and parsing them was the largest cost of a
    # long replay (docs/performance.md): a month of format 2 has them typed. In an older month
    # they are read from the payload: flat (scalars only) and written compact with sorted keys
    # (`replay.archive.export.payload_json`), the form the simpleJSON functions read: they
    # find `"key":` and read the value after it, without parsing the document.
    integrated = all(m.rate_cards is not None and _has_integrals(m.rate_cards) for m in months)
    card_columns = (
        "SELECT pool_id AS pool, event_id AS eid, valid_from_at AS vf,"
        " price_per_vcpu_h_eur_micros AS price, guaranteed_price_per_vcpu_h_eur_micros AS g,"
        " purchase_model AS model, toUnixTimestamp64Micro(occurred_at) AS pub"
    )
    cards = " UNION ALL ".join(
        f"{card_columns}, {k} AS k, {layout.IN_FORCE} AS in_force,"
        f" toInt128({layout.PRICE_INTEGRAL}) AS cp, toInt128({layout.GUARANTEED_INTEGRAL}) AS cg"
        f" FROM file({_quote(m.rate_cards)}, Parquet)"
        if integrated and m.rate_cards is not None
        else f"{card_columns} FROM file({_quote(m.rate_cards)}, Parquet)"
        if m.rate_cards is not None
        else "SELECT simpleJSONExtractString(payload, 'pool_id') AS pool,"
        " event_id AS eid, simpleJSONExtractInt(payload, 'valid_from_at') AS vf,"
        " simpleJSONExtractInt(payload, 'price_per_vcpu_h_eur_micros') AS price,"
        " simpleJSONExtractInt(payload, 'guaranteed_price_per_vcpu_h_eur_micros') AS g,"
        " simpleJSONExtractString(payload, 'purchase_model') AS model, t AS pub"
        f" FROM ({columns} FROM file({_quote(m.events)}, Parquet)) WHERE event_type = 'rate_card'"
        for k, m in enumerate(months)
    )
    typed_usage = [
        "SELECT event_id, toUnixTimestamp64Micro(occurred_at) AS t, workload_id AS w,"
        " instance_id AS i, pool_id AS pool, purchase_model AS model, start_at AS s,"
        f" end_at AS e, vcpu, used_vcpu_h AS used_h FROM file({_quote(m.usage)}, Parquet)"
        for m in months
        if m.usage is not None
    ]
    typed_checkpoints = [
        "SELECT workload_id AS w, toUnixTimestamp64Micro(occurred_at) AS t, written_bytes"
        f" FROM file({_quote(m.checkpoints)}, Parquet)"
        for m in months
        if m.checkpoints is not None
    ]
    # The count from the files' metadata (ClickHouse reads no column for it).
    counted = " UNION ALL ".join(
        f"SELECT count() AS n FROM file({_quote(m.events)}, Parquet)" for m in months
    )
    latest = " UNION ALL ".join(
        "SELECT max(toUnixTimestamp64Micro(assumeNotNull(occurred_at))) AS t"
        f" FROM file({_quote(m.events)}, Parquet)"
        for m in months
    )
    return Relations(
        events,
        cards,
        latest=f"SELECT max(t) AS t FROM ({latest})",
        read_once=True,
        counted=f"SELECT sum(n) AS n FROM ({counted})",
        usage=" UNION ALL ".join(typed_usage) if typed_usage else None,
        checkpoints=" UNION ALL ".join(typed_checkpoints) if typed_checkpoints else None,
        untyped_in_events=any(m.usage is None for m in months),
        integrated_cards=integrated,
    )


def _holds_demand(priced: str) -> bool:
    """Whether a month's priced_events.parquet holds the claims and launches (format 4)."""
    types = set(pq.read_table(priced, columns=["event_type"]).column(0).to_pylist())
    return bool(types - set(layout.PRICED_TYPES_3))


def _has_integrals(rate_cards: str) -> bool:
    """Whether a month's rate_cards.parquet has the integrals of the cards in force by event
    time (format 4: a card published past the allowed lateness is not in force, and of cards
    starting together the one published last is), from its schema. Format 3's integrals
    follow the rule before, and its months are sorted whole."""
    names = pq.read_schema(rate_cards).names
    return layout.IN_FORCE in names and layout.REFUSED_LATE in names


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- integer helpers as SQL ---------------------------------------------------------------


def rhe(n: str, d: str) -> str:
    """round_half_even(n / d) for Int128 expressions (d > 0). One division (Int128 division is
    the costly part of a line): intDiv truncates towards zero, so m = n - t * d has the sign
    of n, and the floor is t - 1 where m < 0 (ClickHouse computes a repeated subexpression
    once)."""
    t = f"intDiv({n}, {d})"
    m = f"(({n}) - {t} * ({d}))"
    q = f"({t} - if({m} < 0, 1, 0))"
    r = f"({m} + if({m} < 0, {d}, 0))"
    return f"({q} + if(2 * {r} > ({d}) OR (2 * {r} = ({d}) AND {q} % 2 != 0), 1, 0))"


def scaled(amount: str, scale: Fraction) -> str:
    if scale == 1:
        return amount
    return rhe(f"toInt128({amount}) * {scale.numerator}", str(scale.denominator))


def i128(value: int | str) -> str:
    return f"toInt128({value})"


def tier_price(rate: Rate, tier: str) -> str:
    """The tier price of `rate` for the tier column `tier` (the default for others)."""
    cases = ", ".join(
        f"{tier} = '{t}', {rate.tier_eur_micros[t]}" for t in TIERS if t in rate.tier_eur_micros
    )
    default = rate.default_eur_micros or 0
    return f"multiIf({cases}, {default})" if cases else str(default)


def over_piece(rate: Rate) -> str:
    """The rate's integral over a usage piece (columns d, dp, dg, tier)."""
    if rate.source == "card":
        return "dp"
    if rate.source == "guaranteed":
        return "dg"
    if rate.source == "flat":
        return f"toInt128(d) * {rate.eur_micros}"
    return f"toInt128(d) * {tier_price(rate, 'tier')}"


def at_point(rate: Rate) -> str:
    """The rate at the loss (columns price, g, tier)."""
    if rate.source == "card":
        return "toInt128(price)"
    if rate.source == "guaranteed":
        return "toInt128(g)"
    if rate.source == "flat":
        return i128(rate.eur_micros)
    return i128(tier_price(rate, "tier"))


def _charge(value: str) -> str:
    return f"'{value}'"


# -- the engine ---------------------------------------------------------------------------


class SqlReplay:
    """Runs one rule as SQL on a ledger store; `run` returns the amounts per line key."""

    def __init__(self, store: LedgerStore, relations: Relations = LEDGER_RELATIONS) -> None:
        self.store = store
        self.relations = relations
        self._events = relations.events  # where the lines' events are read from in a run
        self.cards_from_integrals = False
        """Whether the last run took the cards' integrals from the archive's files (format 3)
        rather than sorting the cards."""

    def run(
        self,
        rule: Rule,
        first_day: int | None = None,
        last_day: int | None = None,
        on_step: Step | None = None,
    ) -> dict[LineKey, int]:
        tag = uuid.uuid4().hex[:12]
        cards, pieces = f"replay_cards_{tag}", f"replay_pieces_{tag}"
        facts = f"replay_events_{tag}"
        instances, claims = f"replay_instances_{tag}", f"replay_claims_{tag}"
        step = on_step or (lambda _: None)
        try:
            if self.relations.read_once:
                step("events")
                types = ", ".join(f"'{t}'" for t in PRICED_TYPES)
                self.store.command(
                    f"CREATE TABLE {facts} ENGINE = Memory AS SELECT * FROM"
                    f" ({self.relations.events}) WHERE event_type IN ({types})"
                )
                self._events = f"SELECT * FROM {facts}"
            step("rate cards")
            self.cards_from_integrals = (
                self.relations.integrated_cards
                and rule.allowed_lateness_s == layout.ARCHIVE_LATENESS_S
                and self._integrated_cards(cards)
            )
            if not self.cards_from_integrals:
                self.store.command(
                    f"CREATE TABLE {cards} ENGINE = Memory AS {self._cards_sql(rule)}"
                )
            step("claims and instances")
            self.store.command(
                f"CREATE TABLE {instances} ENGINE = Memory AS {self._instances_sql()}"
            )
            self.store.command(f"CREATE TABLE {claims} ENGINE = Memory AS {self._claims_sql()}")
            step("usage pieces")
            made = self._pieces_sql(
                rule, cards, instances, claims, first_day=first_day, last_day=last_day
            )
            self.store.command(f"CREATE TABLE {pieces} ENGINE = Memory AS {made}")
            step("ledger lines")
            rows = self.store.query(
                self._lines_sql(rule, cards, pieces, first_day=first_day, last_day=last_day)
            )
        finally:
            self._events = self.relations.events
            for name in (pieces, cards, facts, instances, claims):
                self.store.command(f"DROP TABLE IF EXISTS {name}")
        return {(str(r["w"]), int(r["day"]), str(r["cause"])): int(r["a"]) for r in rows}

    # -- 1: cards --------------------------------------------------------------------------

    def _integrated_cards(self, cards: str) -> bool:
        """The cards table from the integrals the archive's files hold (format 3): each month's
        integrals start from the pool's first card in that month, so each month's are offset
        by the integral up to its first card, the sum over the pool's earlier months of what
        each adds (computed here from each month's first and last card in force, a few
        thousand rows). Only where each pool's months follow one another (every card of a
        month starts after every card of the month before): otherwise, False, and the cards
        are sorted whole as for other months."""
        rows = self.store.query(
            "SELECT k, pool, min(vf) AS first, argMin(price, vf) AS fp, argMin(g, vf) AS fg,"
            " argMin(model, vf) AS fm, max(vf) AS last, argMax(price, vf) AS lp,"
            " argMax(g, vf) AS lg, toString(argMax(cp, vf)) AS lcp,"
            f" toString(argMax(cg, vf)) AS lcg FROM ({self.relations.cards}) WHERE in_force"
            " GROUP BY k, pool ORDER BY pool, k"
        )
        offsets, sentinels = [], []
        previous: dict[str, Any] | None = None
        for r in rows:
            if previous is None or previous["pool"] != r["pool"]:
                op = og = 0
                first = f"toInt128({EARLIEST}) - {r['first']}"
                sentinels.append(
                    f"({_quote(r['pool'])}, {EARLIEST}, {r['fp']}, {r['fg']}, {_quote(r['fm'])},"
                    f" ({first}) * {r['fp']}, ({first}) * {r['fg']})"
                )
            else:
                if r["first"] <= previous["last"]:
                    return False
                op += int(previous["lcp"]) + (r["first"] - previous["last"]) * previous["lp"]
                og += int(previous["lcg"]) + (r["first"] - previous["last"]) * previous["lg"]
            offsets.append(f"({r['k']}, {_quote(r['pool'])}, {op}, {og})")
            previous = r
        if not rows:
            return False
        offset_table = f"{cards}_offsets"
        try:
            self.store.command(
                f"CREATE TABLE {offset_table} (k UInt32, pool String, op Int128, og Int128)"
                " ENGINE = Memory"
            )
            self.store.command(f"INSERT INTO {offset_table} VALUES {', '.join(offsets)}")
            self.store.command(
                f"CREATE TABLE {cards} ENGINE = Memory AS SELECT c.pool AS pool, c.vf AS vf,"
                " c.price AS price, c.g AS g, c.model AS model, o.op + c.cp AS cp,"
                f" o.og + c.cg AS cg FROM ({self.relations.cards}) AS c INNER JOIN"
                f" {offset_table} AS o ON o.k = c.k AND o.pool = c.pool WHERE c.in_force"
            )
            self.store.command(f"INSERT INTO {cards} VALUES {', '.join(sentinels)}")
        finally:
            self.store.command(f"DROP TABLE IF EXISTS {offset_table}")
        return True

    def _cards_sql(self, rule: Rule) -> str:
        # Per pool, the cards sorted by (start, publication, event id); of cards starting at
        # the same moment the last (the one published last) is in force, and a card published
        # past the allowed lateness is not there at all. The integral up to a card's start is
        # the sum over the earlier cards of duration x price: a cumulative sum over the pool's
        # array (array functions run columnar; a window over the rows took four times longer).
        # Before its first card a pool is priced at that card (the fold's rule): a sentinel
        # card at EARLIEST with the first card's prices, and the integral that makes
        # cp + (x - vf) x price the first card's price times (x - its start), so that every
        # point has a card in force and the joins on the cards need no second look-up.
        first = f"(toInt128({EARLIEST}) - cs[1].1)"
        late_us = rule.allowed_lateness_s * 1_000_000
        return f"""
SELECT pool, c.1 AS vf, c.2 AS price, c.3 AS g, c.4 AS model, c.5 AS cp, c.6 AS cg
FROM (
    SELECT pool,
        arrayMap(x -> (x.1, x.4, x.5, x.6),
                 arrayFilter((x, i) -> i = length(sorted) OR sorted[i + 1].1 != x.1, sorted,
                             arrayEnumerate(sorted))) AS cs,
        arrayMap(i -> if(i < length(cs), cs[i + 1].1 - cs[i].1, 0), arrayEnumerate(cs)) AS d,
        arrayCumSum(arrayMap((x, dd) -> toInt128(dd) * x.2, cs, d)) AS sp,
        arrayCumSum(arrayMap((x, dd) -> toInt128(dd) * x.3, cs, d)) AS sg,
        arrayPushFront(
            arrayMap((x, i) -> (x.1, x.2, x.3, x.4, sp[i] - toInt128(d[i]) * x.2,
                                sg[i] - toInt128(d[i]) * x.3), cs, arrayEnumerate(cs)),
            (toInt64({EARLIEST}), cs[1].2, cs[1].3, cs[1].4, {first} * cs[1].2, {first} * cs[1].3)
        ) AS rows
    FROM (
        SELECT pool, arraySort(groupArray((vf, pub, eid, price, g, model))) AS sorted
        FROM (SELECT DISTINCT pool, vf, pub, eid, price, g, model FROM ({self.relations.cards}))
        WHERE greatest(pub - vf, 0) <= {late_us}
        GROUP BY pool
    )
)
ARRAY JOIN rows AS c
"""

    # -- 2: claims, instances and the useful pieces of usage -------------------------------

    def _instances_sql(self) -> str:
        """Per workload and instance: its first launch (time, vCPU) and its end (NEVER if
        none), as `projections.ledger.demand.Demand` keeps them."""
        return f"""
SELECT l.w AS w, l.i AS i, l.t0 AS t0, l.vcpu AS vcpu, if(en.ei = '', {NEVER}, en.t1) AS t1
FROM (
    SELECT JSONExtractString(payload, 'workload_id') AS w,
           JSONExtractString(payload, 'instance_id') AS i,
           min(t) AS t0, argMin(JSONExtractInt(payload, 'vcpu'), t) AS vcpu
    FROM ({self._events}) WHERE event_type = 'instance_launched' GROUP BY w, i
) AS l
LEFT JOIN (
    SELECT JSONExtractString(payload, 'workload_id') AS ew,
           JSONExtractString(payload, 'instance_id') AS ei, min(t) AS t1
    FROM ({self._events}) WHERE event_type IN ('instance_lost', 'instance_deleted')
    GROUP BY ew, ei
) AS en ON en.ew = l.w AND en.ei = l.i
"""

    def _claims_sql(self) -> str:
        """Per workload and claim: its first opening (time, vCPU) and its release (NEVER if
        none); a release without an opening asks for nothing and is left out."""
        return f"""
SELECT o.w AS w, o.ta AS ta, o.vcpu AS vcpu, if(r.rc = '', {NEVER}, r.tb) AS tb
FROM (
    SELECT JSONExtractString(payload, 'workload_id') AS w,
           JSONExtractString(payload, 'claim_id') AS c,
           min(t) AS ta, argMin(JSONExtractInt(payload, 'requested_vcpu'), t) AS vcpu
    FROM ({self._events}) WHERE event_type = 'capacity_claim_opened' GROUP BY w, c
) AS o
LEFT JOIN (
    SELECT JSONExtractString(payload, 'workload_id') AS rw,
           JSONExtractString(payload, 'claim_id') AS rc, min(t) AS tb
    FROM ({self._events}) WHERE event_type = 'capacity_released' GROUP BY rw, rc
) AS r ON r.rw = o.w AND r.rc = o.c
"""

    # -- 2: usage pieces ------------------------------------------------------------------

    def _day_filter(self, column: str, first_day: int | None, last_day: int | None) -> str:
        conditions = ["1"]
        if first_day is not None:
            conditions.append(f"{column} >= {first_day}")
        if last_day is not None:
            conditions.append(f"{column} <= {last_day}")
        return " AND ".join(conditions)

    def _tiers_sql(self) -> str:
        return (
            "SELECT JSONExtractString(payload, 'workload_id') AS cw, t AS ct,"
            " argMax(JSONExtractString(payload, 'tier'), offset) AS tier"
            f" FROM ({self._events}) WHERE event_type = 'contract_published'"
            " GROUP BY cw, ct"
        )

    def _pieces_sql(
        self,
        rule: Rule,
        cards: str,
        instances: str,
        claims: str,
        *,
        first_day: int | None,
        last_day: int | None,
    ) -> str:
        day_ok = self._day_filter("day", first_day, last_day)
        lo = "" if first_day is None else f" AND e > {first_day * DAY_US}"
        hi = "" if last_day is None else f" AND s < {(last_day + 1) * DAY_US}"
        tier_join = (
            f" ASOF LEFT JOIN ({self._tiers_sql()}) AS k ON k.cw = uu.w AND uu.t >= k.ct"
            if rule.uses_tiers
            else ""
        )
        tier_col = "k.tier" if rule.uses_tiers else "''"
        # The useful vCPU of each segment between the moments anything the instance's share
        # depends on changes: a claim opening or released, an instance launched before it
        # starting or ending (`projections.ledger.demand`). An instance not shown launched is
        # surplus throughout. A rule that counts every used vCPU-hour: all of it useful.
        if rule.useful_work == ASKED_FOR:
            segments = """
        if(me.ii = '', [(uu.s, uu.e, toInt64(0))],
           arrayMap(n -> (pts[n], pts[n + 1], least(uu.vcpu, greatest(toInt64(0),
                    arraySum(arrayMap(c -> if(c.1 <= pts[n] AND pts[n] < c.2, c.3, 0), cl))
                    - arraySum(arrayMap(x -> if(x.1 <= pts[n] AND pts[n] < x.3, x.4, 0), bef))))),
                    range(1, length(pts))))"""
        else:
            segments = "[(uu.s, uu.e, uu.vcpu)]"
        return f"""
SELECT event_id, w, pool, model, s, e, vcpu, used_h, tier, seg.1 AS day, seg.2 AS a, seg.3 AS b,
       seg.4 AS useful
FROM (
    SELECT uu.event_id AS event_id, uu.w AS w, uu.pool AS pool, uu.model AS model, uu.s AS s,
           uu.e AS e, uu.vcpu AS vcpu, uu.used_h AS used_h, {tier_col} AS tier,
           arrayFilter(x -> (x.1, x.2) < (me.t0, uu.i) AND x.3 > uu.s AND x.1 < uu.e, wi.insts)
               AS bef,
           arrayFilter(c -> c.1 < uu.e AND c.2 > uu.s, wc.cls) AS cl,
           arraySort(arrayDistinct(arrayConcat([uu.s, uu.e], arrayFilter(x -> x > uu.s AND x < uu.e,
               arrayConcat(arrayMap(x -> x.1, bef), arrayMap(x -> x.3, bef),
                           arrayMap(c -> c.1, cl), arrayMap(c -> c.2, cl)))))) AS pts,
           {segments} AS segs
    FROM (
        SELECT event_id, t, w, i, pool, model, s, e, vcpu, used_h
        FROM ({self._usage_sql()})
        WHERE e > s{lo}{hi} AND pool IN (SELECT pool FROM {cards} WHERE vf = {EARLIEST})
    ) AS uu
    LEFT JOIN (SELECT w AS iw, i AS ii, t0 FROM {instances}) AS me ON me.iw = uu.w AND me.ii = uu.i
    LEFT JOIN (SELECT w AS bw, groupArray((t0, i, t1, vcpu)) AS insts FROM {instances} GROUP BY w)
        AS wi ON wi.bw = uu.w
    LEFT JOIN (SELECT w AS cw, groupArray((ta, tb, vcpu)) AS cls FROM {claims} GROUP BY w)
        AS wc ON wc.cw = uu.w{tier_join}
)
ARRAY JOIN arrayFlatten(arrayMap(g -> arrayMap(
           day -> (day, greatest(g.1, toInt64(day) * {DAY_US}),
                   least(g.2, (toInt64(day) + 1) * {DAY_US}), g.3),
           range(toUInt64(intDiv(g.1, {DAY_US})), toUInt64(intDiv(g.2 - 1, {DAY_US})) + 1)),
       segs)) AS seg
WHERE {day_ok}
"""

    def _usage_sql(self) -> str:
        """The usage intervals: typed where the relations have them, else from the payloads."""
        usage_type = (
            "Tuple(workload_id String, pool_id String, purchase_model String, start_at Int64,"
            " end_at Int64, vcpu Int64, used_vcpu_h Float64, instance_id String)"
        )
        parts = [] if self.relations.usage is None else [self.relations.usage]
        if self.relations.untyped_in_events:
            parts.append(
                "SELECT event_id, t, u.1 AS w, u.8 AS i, u.2 AS pool, u.3 AS model, u.4 AS s,"
                " u.5 AS e, u.6 AS vcpu, u.7 AS used_h FROM ("
                f"SELECT event_id, t, JSONExtract(payload, '{usage_type}') AS u"
                f" FROM ({self._events}) WHERE event_type = 'usage_interval')"
            )
        return " UNION ALL ".join(parts)

    # -- 3: lines -------------------------------------------------------------------------

    def _lines_sql(
        self,
        rule: Rule,
        cards: str,
        pieces: str,
        *,
        first_day: int | None,
        last_day: int | None,
    ) -> str:
        q = rule.usage_quanta_per_vcpu_h
        fp = rule.footprint
        agent_den = 1000 * HOUR_US
        cf = rule.counterfactual

        def line(cause: str, amount: str, charge: str) -> str:
            return f"('{cause}', {piece(cause, amount)}, {charge})"

        def piece(cause: str, amount: str) -> str:
            return f"toInt64({scaled(amount, rule.scale_of(cause))})"

        spend_amounts, spend_lines = [], []
        for model, cause in SPEND_CAUSE.items():
            spend = rule.spend[cause]
            amount = f"used_q * useful * {over_piece(spend.rate)}"
            spend_amounts.append(f"model = '{model}', {amount}")
            spend_lines.append(
                f"model = '{model}', ('{cause}', spend, {_charge(spend.charge_to)}, ww)"
            )
        footprint = (
            f"vcpu_d * ({fp.agent_millicpu_per_instance} * {over_piece(fp.agent_rate)} * share"
            f" + used_q * d * {fp.control_plane_eur_micros_per_vcpu_h} * {agent_den})"
        )
        idle_charge = rule.idle_floor.charge_to
        idle_floor = (
            "if(model = 'committed', -capacity_q * vcpu_d * dp, toInt128(0))"
            if rule.idle_floor.count
            else "toInt128(0)"
        )
        # Each segment's numerators (over share x vCPU), summed per event and day and rounded
        # once (as the ledger's lines of an event are), then summed per workload, day and
        # purchase model before they are unpivoted into lines. The price's integral at both
        # ends of a segment comes from the card in force there (ASOF: the latest card that
        # started at or before it; every pool has its sentinel first).
        usage = f"""
SELECT line.4 AS w, day, line.1 AS cause, line.2 AS amount, line.3 AS charge
FROM (
    SELECT w AS ww, day, model, sum(cf) AS cf, sum(spend) AS spend, sum(surplus) AS surplus,
           sum(headroom) AS headroom, sum(footprint) AS footprint, sum(idle) AS idle
    FROM (
        SELECT w, day, model,
               {piece(COUNTERFACTUAL, rhe("sum(n_cf)", "any(den)"))} AS cf,
               toInt64(multiIf({
            ", ".join(
                f"model = '{m}', {piece(c, rhe('sum(n_spend)', 'any(den)'))}"
                for m, c in SPEND_CAUSE.items()
            )
        }, 0)) AS spend,
               {piece(SURPLUS, rhe("sum(n_surplus)", "any(den)"))} AS surplus,
               {piece(HEADROOM, rhe("sum(n_headroom)", "any(den)"))} AS headroom,
               {piece(FOOTPRINT, rhe("sum(n_footprint)", f"any(den) * {agent_den}"))} AS footprint,
               {piece(IDLE_FLOOR, rhe("sum(n_idle)", "any(den)"))} AS idle
        FROM (
            SELECT event_id, w, day, model,
                   used_q * useful * {over_piece(cf.rate)} AS n_cf,
                   multiIf({", ".join(spend_amounts)}, toInt128(0)) AS n_spend,
                   used_q * (vcpu_d - useful) * {over_piece(rule.surplus.rate)} AS n_surplus,
                   idle_q * vcpu_d * {over_piece(rule.headroom.rate)} AS n_headroom,
                   {footprint} AS n_footprint,
                   {idle_floor} AS n_idle,
                   share * vcpu_d AS den
            FROM (
                SELECT pc.event_id AS event_id, pc.w AS w, pc.day AS day, pc.model AS model,
                       pc.tier AS tier, toInt128(pc.useful) AS useful,
                       toInt128(greatest(pc.vcpu, 1)) AS vcpu_d,
                       toInt128(pc.b - pc.a) AS d,
                       cb.cp + toInt128(pc.b - cb.vf) * cb.price - ca.cp
                           - toInt128(pc.a - ca.vf) * ca.price AS dp,
                       cb.cg + toInt128(pc.b - cb.vf) * cb.g - ca.cg
                           - toInt128(pc.a - ca.vf) * ca.g AS dg,
                       toInt128(toInt64(roundBankers(pc.used_h * {q}))) AS used_q,
                       {rhe(f"toInt128(pc.vcpu) * (pc.e - pc.s) * {q}", str(HOUR_US))}
                           AS capacity_q,
                       greatest(capacity_q - used_q, 0) AS idle_q,
                       toInt128({q}) * (pc.e - pc.s) AS share
                FROM {pieces} AS pc
                ASOF INNER JOIN {cards} AS ca ON ca.pool = pc.pool AND pc.a >= ca.vf
                ASOF INNER JOIN {cards} AS cb ON cb.pool = pc.pool AND pc.b >= cb.vf
            )
        )
        GROUP BY event_id, w, day, model
    )
    GROUP BY ww, day, model
)
ARRAY JOIN [
    ('{COUNTERFACTUAL}', cf, {_charge(cf.charge_to)}, ww),
    multiIf({", ".join(spend_lines)}, ('', toInt64(0), '', ww)),
    ('{SURPLUS}', surplus, {_charge(rule.surplus.charge_to)}, ww),
    ('{HEADROOM}', headroom, {_charge(rule.headroom.charge_to)}, ww),
    ('{FOOTPRINT}', footprint, {_charge(fp.charge_to)}, ww),
    ('{IDLE_FLOOR}', idle, {_charge(idle_charge)}, '{PLATFORM}')
] AS line
"""
        reservations = self._reservations_sql(rule, first_day, last_day)
        waste = self._waste_sql(rule, cards, first_day, last_day, line)
        checkpoint = self._checkpoint_sql(rule, first_day, last_day)
        return self._allocate_sql((usage, waste, checkpoint, reservations), pieces, rule)

    def _reservations_sql(self, rule: Rule, first_day: int | None, last_day: int | None) -> str:
        """The idle floor's share of each reservation: its cost per UTC day up to the last
        whole hour of the history's newest event, rounded once per day (the platform's)."""
        if not rule.idle_floor.count:
            return ""
        late_us = rule.allowed_lateness_s * 1_000_000
        latest = self.relations.latest or f"SELECT max(t) AS t FROM ({self._events})"
        day_ok = self._day_filter("day", first_day, last_day)
        amount = rhe(f"toInt128(vcpu) * price * (least(e, toInt64(day + 1) * {DAY_US}, until)"
                     f" - greatest(s, toInt64(day) * {DAY_US}))", str(HOUR_US))  # fmt: skip
        return f"""
SELECT '{PLATFORM}' AS w, day, '{IDLE_FLOOR}' AS cause,
       toInt64({scaled(amount, rule.idle_floor.scale)}) AS amount,
       '{rule.idle_floor.charge_to}' AS charge
FROM (
    SELECT event_id, any(JSONExtractInt(payload, 'reserved_vcpu')) AS vcpu,
           any(JSONExtractInt(payload, 'price_per_vcpu_h_eur_micros')) AS price,
           any(JSONExtractInt(payload, 'start_at')) AS s,
           any(JSONExtractInt(payload, 'end_at')) AS e,
           any(t) AS published
    FROM ({self._events}) WHERE event_type = 'reservation_committed' GROUP BY event_id
) AS r
CROSS JOIN (SELECT t - t % {HOUR_US} AS until FROM ({latest})) AS h
ARRAY JOIN range(toUInt64(intDiv(s, {DAY_US})),
                 toUInt64(intDiv(greatest(least(e, until), s + 1) - 1, {DAY_US})) + 1) AS day
WHERE greatest(published - s, 0) <= {late_us} AND least(e, until) > s AND {day_ok}
"""

    def _waste_sql(
        self,
        rule: Rule,
        cards: str,
        first_day: int | None,
        last_day: int | None,
        line: Callable[[str, str, str], str],
    ) -> str:
        qs = rule.waste_quanta_per_vcpu_s
        den = str(qs * 3600)
        cf = rule.counterfactual
        charge = rule.wasted_work_charge
        waste_charge = (
            f"if(notice, '{charge.with_notice}', '{charge.without_notice}')"
            if charge.with_notice != charge.without_notice
            else _charge(charge.with_notice)
        )
        spend_lines = []
        for model, cause in SPEND_CAUSE.items():
            spend = rule.spend[cause]
            spend_lines.append(
                f"model = '{model}', "
                + line(
                    cause, rhe(f"-wasted_q * {at_point(spend.rate)}", den), _charge(spend.charge_to)
                )
            )
        tier_join = (
            f" ASOF LEFT JOIN ({self._tiers_sql()}) AS k ON k.cw = ww.w AND ww.t >= k.ct"
            if rule.uses_tiers
            else ""
        )
        tier_col = "k.tier" if rule.uses_tiers else "''"
        notice_join = (
            " LEFT JOIN (SELECT event_id AS lid, JSONExtractBool(payload, 'with_notice') AS"
            f" ln FROM ({self._events}) WHERE event_type = 'instance_lost') AS l"
            " ON l.lid = ww.causation"
            if charge.with_notice != charge.without_notice
            else ""
        )
        notice_col = "ifNull(l.ln, false)" if notice_join else "false"
        day_ok = self._day_filter("day", first_day, last_day)
        return f"""
SELECT w, day, line.1 AS cause, line.2 AS amount, line.3 AS charge
FROM (
    SELECT w, day, {tier_col} AS tier, {notice_col} AS notice, c.price AS price, c.g AS g,
           c.model AS model, toInt128(toInt64(roundBankers(wasted_s * {qs}))) AS wasted_q
    FROM (
        SELECT t, causation, JSONExtractString(payload, 'workload_id') AS w,
               JSONExtractString(payload, 'pool_id') AS pool,
               JSONExtractFloat(payload, 'wasted_vcpu_s') AS wasted_s,
               intDiv(t, {DAY_US}) AS day
        FROM ({self._events}) WHERE event_type = 'work_wasted'
    ) AS ww
    ASOF INNER JOIN {cards} AS c ON c.pool = ww.pool AND ww.t >= c.vf{tier_join}{notice_join}
    WHERE {day_ok}
)
ARRAY JOIN [
    {line(COUNTERFACTUAL, rhe(f"-wasted_q * {at_point(cf.rate)}", den), _charge(cf.charge_to))},
    {line(WASTED_WORK, rhe(f"wasted_q * {at_point(rule.wasted_work_rate)}", den), waste_charge)},
    multiIf({", ".join(spend_lines)}, ('', toInt64(0), ''))
] AS line
"""

    def _checkpoint_sql(self, rule: Rule, first_day: int | None, last_day: int | None) -> str:
        cp = rule.checkpoint_storage
        amount = rhe(
            f"toInt128(written_bytes) * {cp.retention_days} * {cp.eur_micros_per_gb_month}",
            str(BYTES_PER_GB * 30),
        )
        day_ok = self._day_filter("day", first_day, last_day)
        # Each checkpoint's line rounded on its own, summed per workload and day here: the
        # lines are a fifth of the events, and the groupings that follow then see one row each.
        return f"""
SELECT w, day, '{CHECKPOINT_STORAGE}' AS cause,
       sum(toInt64({scaled(amount, rule.scale_of(CHECKPOINT_STORAGE))})) AS amount,
       '{cp.charge_to}' AS charge
FROM (SELECT w, intDiv(t, {DAY_US}) AS day, written_bytes FROM ({self._checkpoints_sql()}))
WHERE {day_ok}
GROUP BY w, day
"""

    def _checkpoints_sql(self) -> str:
        """The checkpoints: typed where the relations have them, else from the payloads."""
        parts = [] if self.relations.checkpoints is None else [self.relations.checkpoints]
        if self.relations.untyped_in_events:
            parts.append(
                "SELECT JSONExtractString(payload, 'workload_id') AS w, t,"
                " JSONExtractInt(payload, 'written_bytes') AS written_bytes"
                f" FROM ({self._events}) WHERE event_type = 'checkpoint_written'"
            )
        return " UNION ALL ".join(parts)

    def _allocate_sql(self, parts: Sequence[str], pieces: str, rule: Rule) -> str:
        lines = "\nUNION ALL\n".join(part for part in parts if part)
        direct = f"""
SELECT if(charge = 'platform', '{PLATFORM}', w) AS w, toUInt32(day) AS day, cause,
       sum(amount) AS a
FROM ({lines}) WHERE charge IN ('workload', 'platform') AND cause != ''
GROUP BY w, day, cause
"""
        if not rule.shares:
            return f"SELECT w, day, cause, a FROM ({direct}) WHERE a != 0"
        # Shared lines: each day's total, in proportion to the workloads' used vCPU-hours of
        # that day (floors, then one micro-euro each to the largest remainders; ties by name).
        q = rule.usage_quanta_per_vcpu_h
        weights = f"""
SELECT w AS sw, toUInt32(day) AS sday,
       sum(intDiv(toInt128(toInt64(roundBankers(used_h * {q}))) * dsum, e - s)) AS weight
FROM (SELECT event_id, w, day, any(used_h) AS used_h, any(s) AS s, any(e) AS e,
             sum(b - a) AS dsum FROM {pieces} GROUP BY event_id, w, day)
GROUP BY sw, sday HAVING weight > 0
"""
        pooled = f"""
SELECT toUInt32(day) AS pday, cause AS pcause, toInt128(sum(amount)) AS total
FROM ({lines}) WHERE charge = 'shared_by_vcpu_h' AND cause != '' GROUP BY pday, pcause
"""
        shared = f"""
SELECT sw AS w, pday AS day, pcause AS cause,
       toInt64(base + if(rank <= total - sum(base) OVER per_line, 1, 0)) AS a
FROM (
    SELECT sw, pday, pcause, total, whole,
           intDiv(total * weight, whole) - if((total * weight) % whole < 0, 1, 0) AS base,
           total * weight - base * whole AS rest,
           row_number() OVER (PARTITION BY pday, pcause ORDER BY rest DESC, sw ASC) AS rank
    FROM ({pooled}) AS p
    INNER JOIN (SELECT sw, sday, weight, sum(weight) OVER (PARTITION BY sday) AS whole
                FROM ({weights})) AS ws ON ws.sday = p.pday
)
WINDOW per_line AS (PARTITION BY pday, pcause)
UNION ALL
SELECT '{PLATFORM}' AS w, pday AS day, pcause AS cause, toInt64(total) AS a
FROM ({pooled}) WHERE pday NOT IN (SELECT sday FROM ({weights}))
"""
        return f"""
SELECT w, day, cause, sum(a) AS a FROM (
    SELECT w, day, cause, a FROM ({direct})
    UNION ALL
    SELECT w, day, cause, a FROM ({shared})
) GROUP BY w, day, cause HAVING a != 0
"""
