"""The ledger writer: events, rankings, rate cards and priced lines, in a few inserts per batch.

A batch is one insert into `events`, whose materialized views (ddl/0002_from_events.sql) derive
the rankings and the rate cards from the payloads in the same insert; then the priced lines,
what was priced from the rate cards (`priced_facts`, for late facts to re-price), the facts
refused past the allowed lateness (`late_facts`), and last the offsets. A restart resumes from
the offsets (`stored_offsets`, to seek on assignment).

ClickHouse has no transactions across tables, so a writer killed between two inserts of a
batch leaves part of it stored without its offsets. The next writer makes the ledger as the
last stored offsets left it before it prices anything (issue 27): each batch has a number and
records it, with the offsets it starts from, in `ledger_batches` before its rows; its lines and
priced facts carry the number. A writer that finds the last recorded batch starting from the
stored offsets (it never stored its own) deletes that batch's lines and priced facts, and
prices the batch again from there. Events, rankings and rate cards need no deleting: a batch
priced again inserts the same rows again (every table is a ReplacingMergeTree keyed by event
id; reads go through FINAL), and what pricing reads of them is read as of the stored offsets.

**Each event once.** A record the log holds twice under one id (a batch the broker did not
acknowledge, written again after later records) is priced, and stored, by its first copy only:
a copy of an event stored and committed before (or in the batch still being stored, or earlier
in the same batch) is left out of the batch. Its first position stays the event's, so what the
ledger holds as of the stored offsets never loses a committed event to a copy of it.

Pricing is `pricer.Pricer`'s: the rate cards in force (a `RateBook`), each workload's claims
and instances (what was useful), the reservations (the idle floor), in event time whatever the
order of arrival. At a start all of it is read back from the store as of the stored offsets,
so a batch priced again after a crash gives the same lines, corrections included, and the
ledger adds up to the same figures whatever was killed when.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from operator import attrgetter
from typing import Any

import pyarrow as pa

from projections.ledger.demand import Piece
from projections.ledger.pricer import (
    DEMAND_HORIZON_US,
    FACT_TYPES,
    Priced,
    Pricer,
    Refusal,
    Reservation,
    replace_in,
    usage_of,
)
from projections.ledger.pricing import LedgerLine
from projections.ledger.rates import Card, RateBook
from projections.ledger.rule import RECORDED, AccountingRule
from projections.ledger.store import LedgerStore
from schemas.catalogue import catalogue, non_null
from schemas.errors import Origin
from schemas.events import (
    PAYLOAD_TYPES,
    Envelope,
    Payload,
    RateCard,
    ReservationCommitted,
    UsageInterval,
    WorkWasted,
)

LEDGER_PROJECTION = "ledger"
LEDGER_TOPICS = ("lifecycle", "market", "demand", "decisions", "usage")
RATE_HORIZON_US = 8 * 3_600_000_000
"""Rate cards held in memory behind the newest fact: a usage interval spans at most 6 h and a
card is late at most the allowed hour, so what is priced on time finds its cards in memory; an
older one is read back from the store (`_backfill`). Two days held 80,000 cards (about 40 MiB of
a 7-day demo's projections; issue 26)."""
MEMORY_HORIZON_US = RATE_HORIZON_US  # what was priced, held in memory behind the newest fact
COPY_SPREAD_US = 3_600_000_000
"""How far apart in event time copies of one event (one id) are recognised as copies: the
agent's notice and the provider's of the same notice were 0.1-0.5 s apart in the fault runs;
an answer a restarted actuator writes again carries the time it wrote it. Copies further
apart would be stored as two rows of the id (the events table's key holds the time)."""

TopicPartition = tuple[str, int]
StepHook = Callable[[str], None]

_AS_IT_STANDS = "ORDER BY batch DESC LIMIT 1 BY event_id"
"""Of the rows of `priced_facts` selected, each item's as its last batch left it."""

_UTC_US = pa.timestamp("us", tz="UTC")


_UPGRADES = (
    ("ledger_lines", "ALTER TABLE ledger_lines ADD COLUMN IF NOT EXISTS batch UInt64"),
    ("priced_facts", "ALTER TABLE priced_facts ADD COLUMN IF NOT EXISTS batch UInt64,"
                     " MODIFY ORDER BY (pool_id, to_us, event_id, batch)"),
)  # fmt: skip
"""The `batch` column of a ledger made before it (ddl/0004_batches.sql), table by table."""


def apply_ddl(store: LedgerStore) -> None:
    """Create the ledger's tables and views (idempotent: IF NOT EXISTS), and add the columns
    a ledger made by an earlier version lacks."""
    folder = resources.files("projections.ledger") / "ddl"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        text = "\n".join(
            line for line in entry.read_text(encoding="utf-8").splitlines()
            if not line.lstrip().startswith("--")
        )  # fmt: skip
        for statement in text.split(";"):
            if statement.strip():
                store.command(statement)
    batched = "SELECT table FROM system.columns WHERE database = currentDatabase() AND name='batch'"
    have = {str(r["table"]) for r in store.query(batched)}
    for table, alter in _UPGRADES:
        if table not in have:
            store.command(alter)


LEDGER_TABLES = (
    "events", "rankings", "rate_cards", "ledger_lines", "priced_facts", "late_facts",
    "consumed_offsets", "consumed_topics", "ledger_batches",
)  # fmt: skip


def drop_all(store: LedgerStore) -> None:
    """Drop every ledger table and view (for rebuilds)."""
    for name in ("net_saving", "ledger_by_cause", "rankings_from_events", "rate_cards_from_events"):
        store.command(f"DROP VIEW IF EXISTS {name}")
    for name in LEDGER_TABLES:
        store.command(f"DROP TABLE IF EXISTS {name}")


def _arrow_type(name: str, avro_type: Any) -> pa.DataType:
    """The column type of an envelope field: a timestamp for timestamp-micros, text for the
    strings and uuids (nullable or not)."""
    inner = non_null(avro_type)
    if isinstance(inner, dict) and inner.get("logicalType") == "timestamp-micros":
        return _UTC_US
    if inner == "string" or (isinstance(inner, dict) and inner.get("type") == "string"):
        return pa.string()
    raise TypeError(f"the envelope's field {name} ({avro_type}) has no column type here")


ENVELOPE_COLUMNS: tuple[tuple[str, pa.DataType], ...] = tuple(
    (f["name"], _arrow_type(f["name"], f["type"]))
    for f in catalogue().raw_envelope["fields"]
    if f["name"] in Envelope.HEAD
)
"""The envelope's fields but the payload, as columns, in `Envelope.HEAD`'s order (the ledger's
events table and the archive's events file begin with them)."""
envelope_head = attrgetter(*Envelope.HEAD)
"""An envelope's values of `ENVELOPE_COLUMNS`, as a tuple."""
EVENTS_SCHEMA = pa.schema(
    [
        *ENVELOPE_COLUMNS,
        ("topic", pa.string()),
        ("partition", pa.uint32()),
        ("offset", pa.uint64()),
        ("payload", pa.string()),
    ]
)
LINES_SCHEMA = pa.schema(
    [
        ("workload_id", pa.string()),
        ("day", pa.date32()),
        ("cause", pa.string()),
        ("event_id", pa.string()),
        ("amount_eur_micros", pa.int64()),
        ("quantity", pa.float64()),
        ("unit", pa.string()),
        ("pool_id", pa.string()),
        ("purchase_model", pa.string()),
        ("instance_id", pa.string()),
        ("event_type", pa.string()),
        ("occurred_at", _UTC_US),
        ("rule", pa.string()),
        ("decided_by", pa.string()),
    ]
)
LINES_INSERT_SCHEMA = LINES_SCHEMA.append(pa.field("batch", pa.uint64()))
"""The lines as inserted: with the number of the batch that wrote them (LINES_SCHEMA is the
archive's file of them)."""
PIECES_TYPE = pa.list_(pa.struct([("1", pa.int64()), ("2", pa.int64()), ("3", pa.int64())]))
PRICED_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("event_type", pa.string()),
        ("occurred_at", _UTC_US),
        ("pool_id", pa.string()),
        ("from_us", pa.int64()),
        ("to_us", pa.int64()),
        ("record", pa.string()),
        ("payload", pa.string()),
        ("pieces", PIECES_TYPE),
        ("decided_by", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.uint32()),
        ("offset", pa.uint64()),
        ("batch", pa.uint64()),
    ]
)
LATE_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("event_type", pa.string()),
        ("key", pa.string()),
        ("occurred_at", _UTC_US),
        ("applies_from", _UTC_US),
        ("lateness_s", pa.float64()),
        ("allowed_s", pa.int64()),
        ("reason", pa.string()),
    ]
)
BATCHES_SCHEMA = pa.schema(
    [("projection_name", pa.string()), ("batch", pa.uint64()), ("starts", pa.string())]
)
OFFSETS_SCHEMA = pa.schema(
    [
        ("projection_name", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.uint32()),
        ("next_offset", pa.uint64()),
    ]
)


@dataclass(frozen=True, slots=True)
class LedgerWriteResult:
    events: int
    lines: int
    unpriced: list[tuple[Origin, str]]  # events that cost something but could not be priced
    refused: list[tuple[Origin, str]] = field(default_factory=list)  # past the allowed lateness
    corrections: int = 0  # correction lines late rate cards made


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A batch priced and turned into the tables `LedgerWriter.store_batch` inserts."""

    number: int  # the batch's number (its lines and priced facts carry it)
    begun: pa.Table  # its row of `ledger_batches`: its number and the offsets it starts from
    events: pa.Table
    lines: pa.Table
    priced: pa.Table
    late: pa.Table
    offsets: pa.Table
    positions: Mapping[TopicPartition, int]
    result: LedgerWriteResult


def _bytes_hex(value: object) -> str:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot put {type(value).__name__} in JSON")


def _payload_encoder() -> Callable[[Payload], str]:
    """A payload's JSON (sorted keys, no spaces, bytes as hex), as
    `json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=...).encode` writes it.
    That `encode` makes a C encoder (and a dict to detect cycles) on every call; a payload's
    `to_avro()` has no cycles, so here the C encoder is made once: the same text, for about a
    quarter less of the JSON's CPU."""
    encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_bytes_hex)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator in this Python: the encoder itself
        return lambda p: encoder.encode(p.to_avro())
    one_shot = make(None, _bytes_hex, json.encoder.encode_basestring_ascii, None, ":", ",",
                    True, False, True)  # fmt: skip
    return lambda p: "".join(one_shot(p.to_avro(), 0))


_payload_json = _payload_encoder()


def _envelope(
    event_id: str, occurred_at: int, record: str, payload: str, causation: str | None = None
) -> Envelope:
    """An event rebuilt from a stored payload (what pricing reads of it: id, time, payload)."""
    body = PAYLOAD_TYPES[record].from_avro(json.loads(payload))
    return Envelope(event_id, body.EVENT_TYPE, occurred_at, occurred_at, "", "", causation, None,
                    "", body)  # fmt: skip


class _StoredSource:
    """What was priced: this run's items in memory (for `MEMORY_HORIZON_US` of event time), the
    rest read from `priced_facts` (each item as its last batch left it). Each item once, by
    event id."""

    def __init__(self, writer: LedgerWriter) -> None:
        self._writer = writer
        self.by_pool: dict[str, list[Priced]] = {}
        self.batch: list[tuple[Priced, Origin]] = []  # priced in the batch being prepared
        self.origin: Origin | None = None  # the position of the event being priced
        # Where each item held was in the log, and each item read back for the batch being
        # prepared (a re-priced item is stored again, at its own position, in a row of the
        # batch that re-priced it).
        self.origins: dict[str, Origin] = {}
        self.read: dict[str, Origin] = {}

    def begin(self) -> None:
        """A new batch."""
        self.batch, self.read = [], {}

    def add(self, item: Priced) -> None:
        self.by_pool.setdefault(item.pool_id, []).append(item)
        assert self.origin is not None
        self.origins[item.envelope.event_id] = self.origin
        self.batch.append((item, self.origin))

    def seen(self, event_id: str) -> bool:
        # Copies of events priced by earlier runs never reach the pricer (`LedgerWriter._firsts`).
        return event_id in self.origins

    def usage_of(self, workload_id: str, after_us: int) -> Iterator[Priced]:
        seen: set[str] = set()
        for item in usage_of(self.by_pool, workload_id, after_us):
            seen.add(item.envelope.event_id)
            yield item
        for item, origin in self._writer.stored_usage(workload_id, after_us):
            if item.envelope.event_id not in seen:
                seen.add(item.envelope.event_id)
                self.read[item.envelope.event_id] = origin
                yield item

    def replace(self, item: Priced) -> None:
        event_id = item.envelope.event_id
        origin = self.origins.get(event_id) or self.read[event_id]
        replace_in(self.by_pool, item)  # held from now on (a stored one too)
        self.origins[event_id] = origin
        self.batch.append((item, origin))

    def overlapping(self, pool_id: str, from_us: int, to_us: int) -> Iterator[Priced]:
        seen: set[str] = set()
        for item in self.by_pool.get(pool_id, ()):
            if item.to_us > from_us and item.from_us < to_us:
                seen.add(item.envelope.event_id)
                yield item
        for item in self._writer.stored_priced(pool_id, from_us, to_us):
            if item.envelope.event_id not in seen:
                seen.add(item.envelope.event_id)
                yield item

    def prune(self, before_us: int) -> None:
        for pool_id, items in self.by_pool.items():
            kept = []
            for i in items:
                if i.to_us >= before_us:
                    kept.append(i)
                else:  # read back from the store from now on (committed by then)
                    self.origins.pop(i.envelope.event_id, None)
            self.by_pool[pool_id] = kept


class LedgerWriter:
    def __init__(
        self,
        store: LedgerStore,
        rule: AccountingRule = RECORDED,
        projection: str = LEDGER_PROJECTION,
        *,
        on_step: StepHook | None = None,
    ) -> None:
        self.store = store
        # The inserts of a batch and the queries of what is stored, one at a time: a
        # write-behind caller stores a batch on one thread while it prepares the next on
        # another, whose pricing may ask the store for old rate cards or priced events.
        self._storing = threading.Lock()
        self.rule = rule
        self.projection = projection
        self._on_step = on_step
        apply_ddl(store)
        self._committed = self.stored_offsets()
        self._next_batch = self._undo_unfinished_batch()
        # Where the next batch prepared starts (the offsets after every batch prepared), and
        # the ids of the events of batches prepared but not yet stored (one is stored while
        # the next is prepared): a copy of one of them in the next batch is left out.
        self._prepared_to = dict(self._committed)
        self._unstored: dict[int, set[str]] = {}
        # The events this writer prepared, each with its type and time, from
        # `_known_from` of event time on (None: not known, the store is asked). A writer that
        # starts with no offsets stored has no committed event before its own, so it knows
        # every committed event from there on and need not ask the store which of a batch's
        # events are copies of one stored (`_firsts`; a chdb query a batch, 8% of a rebuild's
        # ledger CPU, and while the write-behind thread inserts, a wait for its lock).
        self._known: dict[str, tuple[str, int]] = {}
        self._known_from: int | None = None if self._committed else -(1 << 62)
        # Per batch prepared but not yet stored, the earliest moment it holds a card from or an
        # item priced to: memory forgets nothing from there on until the batch is stored (the
        # store would not yet answer for it).
        self._unstored_from: dict[int, int] = {}
        self._unstored_lock = threading.Lock()  # not `_storing`: held through a batch's inserts
        self.book = RateBook(self._backfill)
        self.source = _StoredSource(self)
        self.pricer = Pricer(rule, self.book, self.source)
        self._reload()

    def _step(self, name: str) -> None:
        if self._on_step is not None:
            self._on_step(name)

    # -- a batch killed before its offsets ----------------------------------------------------

    def _undo_unfinished_batch(self) -> int:
        """Delete the lines and priced facts of the last batch begun if it never stored its
        offsets (it starts from the stored ones); the number of the next batch."""
        rows = self.store.query(
            "SELECT batch, starts FROM ledger_batches FINAL WHERE projection_name = {p:String}",
            {"p": self.projection},
        )
        if not rows:
            return 1
        last = int(rows[0]["batch"])
        if str(rows[0]["starts"]) == _positions_key(self._committed):
            for table in ("ledger_lines", "priced_facts"):
                self.store.command(
                    f"DELETE FROM {table} WHERE batch = {{b:UInt64}}",
                    {"b": last},
                )
        return last + 1

    def _firsts(self, events: Sequence[tuple[Origin, Envelope]]) -> list[tuple[Origin, Envelope]]:
        """The batch's events but copies: of an event stored and committed before, of one in
        a batch prepared but not yet stored, or of one earlier in the batch (a record the log
        holds twice under one id is the first copy's). A stored copy is looked for within
        `COPY_SPREAD_US` of the batch's times of its type: copies of one event need not share
        its time (the agent's notice and the provider's of the same notice)."""
        times: dict[str, list[int]] = {}
        for _, e in events:
            times.setdefault(e.event_type, []).append(e.occurred_at)
        if not times:
            return []
        windows = {
            event_type: (min(at) - COPY_SPREAD_US, max(at) + COPY_SPREAD_US)
            for event_type, at in sorted(times.items())
        }
        known_from = self._known_from
        if known_from is not None and min(lo for lo, _ in windows.values()) >= known_from:
            seen = self._known_copies(events, windows)
        else:
            seen = self._stored_copies(windows)
        ids = [e.event_id for _, e in events]
        if seen.isdisjoint(ids) and len(set(ids)) == len(ids):  # no copy: the batch as it is
            return list(events)
        firsts = []
        for origin, e in events:
            if e.event_id not in seen:
                seen.add(e.event_id)
                firsts.append((origin, e))
        return firsts

    def _stored_copies(self, windows: Mapping[str, tuple[int, int]]) -> set[str]:
        """The ids of the events prepared and not yet stored, and of those stored and
        committed in the windows (per type: from, to), asked of the store."""
        where, params = [], {}
        for n, (event_type, (lo, hi)) in enumerate(windows.items()):
            where.append(
                f"(event_type = {{t{n}:String}} AND occurred_at BETWEEN fromUnixTimestamp64Micro("
                f"{{f{n}:Int64}}, 'UTC') AND fromUnixTimestamp64Micro({{u{n}:Int64}}, 'UTC'))"
            )
            params.update({f"t{n}": event_type, f"f{n}": lo, f"u{n}": hi})
        with self._storing:  # what is stored, and what is not yet, at one moment
            seen = set().union(*self._unstored.values())
            stored = self.store.query_table(
                "SELECT toString(event_id) AS event_id FROM (SELECT event_id, topic, partition,"
                f" offset FROM events WHERE {' OR '.join(where)}) AS e"
                f"{self._committed_join('e')}",
                {"proj": self.projection, **params},
            )
        if stored is not None:
            seen.update(stored.column("event_id").to_pylist())
        return seen

    def _known_copies(
        self, events: Sequence[tuple[Origin, Envelope]], windows: Mapping[str, tuple[int, int]]
    ) -> set[str]:
        """What `_stored_copies` gives, of the batch's ids, from what this writer prepared
        (every committed event from `_known_from` on, the windows all after it): an id of a
        batch not yet stored, or of one stored in its type's window."""
        # (A list of the sets first: the write-behind thread may drop one meanwhile.)
        seen: set[str] = set().union(*list(self._unstored.values()))
        known = self._known
        for _, e in events:
            held = known.get(e.event_id)
            if held is not None:
                event_type, at = held
                window = windows.get(event_type)
                if window is not None and window[0] <= at <= window[1]:
                    seen.add(e.event_id)
        return seen

    def _remember(self, firsts: Sequence[tuple[Origin, Envelope]]) -> None:
        """Hold the batch's events (`_known`), and forget those the next batches' windows
        cannot reach (two copy spreads behind the newest fact; `_known_from` moves there)."""
        if self._known_from is None:
            return
        known = self._known
        for _, e in firsts:
            known[e.event_id] = (e.event_type, e.occurred_at)
        facts_until = self.pricer.facts_until_us
        if facts_until is None or facts_until - 2 * COPY_SPREAD_US <= self._known_from:
            return
        horizon = self._known_from = facts_until - 2 * COPY_SPREAD_US
        self._known = {i: held for i, held in known.items() if held[1] >= horizon}

    # -- what is stored, as of the stored offsets ----------------------------------------------

    def _committed_join(self, alias: str) -> str:
        """A join keeping the rows of `alias` (with topic, partition, offset) that are before
        the stored offsets (the rows of a batch whose offsets were never stored are not)."""
        return (
            " INNER JOIN (SELECT topic AS c_topic, partition AS c_partition, next_offset AS c_next"
            " FROM consumed_offsets FINAL WHERE projection_name = {proj:String}) AS c"
            f" ON c.c_topic = {alias}.topic AND c.c_partition = {alias}.partition"
            f" WHERE {alias}.offset < c.c_next"
        )

    def _query(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        with self._storing:
            return self.store.query(sql, {"proj": self.projection, **params})

    def _cards(self, where: str, params: Mapping[str, Any]) -> list[tuple[str, Card]]:
        late = self.rule.allowed_lateness_s * 1_000_000
        sql = (
            "SELECT pool_id, toString(event_id) AS event_id, purchase_model,"
            " price_per_vcpu_h_eur_micros AS price, guaranteed_price_per_vcpu_h_eur_micros AS g,"
            " toUnixTimestamp64Micro(valid_from) AS f, toUnixTimestamp64Micro(valid_until) AS u,"
            " toUnixTimestamp64Micro(published_at) AS pub"
            f" FROM (SELECT * FROM rate_cards FINAL) AS r{self._committed_join('r')}"
            f" AND toUnixTimestamp64Micro(published_at) - toUnixTimestamp64Micro(valid_from)"
            f" <= {late} AND ({where}) ORDER BY pool_id, f, pub, event_id"
        )
        rows = self._query(sql, params)
        return [
            (str(r["pool_id"]), Card(int(r["f"]), int(r["pub"]), str(r["event_id"]), int(r["u"]),
                                     int(r["price"]), int(r["g"]), str(r["purchase_model"])))
            for r in rows
        ]  # fmt: skip

    def _backfill(self, pool_id: str, from_us: int, to_us: int) -> list[Card]:
        where = (
            "pool_id = {p:String} AND valid_from < fromUnixTimestamp64Micro({t:Int64}, 'UTC') AND"
            " valid_from >= (SELECT max(valid_from) FROM rate_cards FINAL WHERE pool_id ="
            " {p:String} AND valid_from <= fromUnixTimestamp64Micro({f:Int64}, 'UTC'))"
        )
        return [c for _, c in self._cards(where, {"p": pool_id, "f": from_us, "t": to_us})]

    def stored_priced(self, pool_id: str, from_us: int, to_us: int) -> list[Priced]:
        """The usage and waste of `pool_id` priced by earlier batches, meeting [from, to)."""
        rows = self._query(
            "SELECT toString(event_id) AS event_id, toUnixTimestamp64Micro(occurred_at) AS t,"
            " record, payload, pieces, decided_by FROM priced_facts WHERE pool_id = {p:String}"
            f" AND to_us > {{f:Int64}} AND from_us < {{t:Int64}} {_AS_IT_STANDS}",
            {"p": pool_id, "f": from_us, "t": to_us},
        )
        out = []
        for r in rows:
            e = _envelope(str(r["event_id"]), int(r["t"]), str(r["record"]), str(r["payload"]))
            pieces = tuple(_piece(p) for p in r["pieces"])
            if isinstance(e.payload, UsageInterval):
                u = e.payload
                out.append(Priced(e, u.pool_id, u.start_at, u.end_at, pieces, str(r["decided_by"])))
            else:
                assert isinstance(e.payload, WorkWasted)
                out.append(Priced(e, e.payload.pool_id, e.occurred_at, e.occurred_at + 1))
        return out

    def stored_usage(self, workload_id: str, after_us: int) -> list[tuple[Priced, Origin]]:
        """The usage intervals of `workload_id` ending after `after_us` priced by earlier
        batches (within the demand's horizon), with their positions."""
        rows = self._query(
            "SELECT toString(event_id) AS event_id, toUnixTimestamp64Micro(occurred_at) AS t,"
            " record, payload, pieces, decided_by, topic, partition, offset FROM priced_facts"
            " WHERE event_type = 'usage_interval' AND to_us > {a:Int64} AND"
            f" JSONExtractString(payload, 'workload_id') = {{w:String}} {_AS_IT_STANDS}",
            {"w": workload_id, "a": after_us},
        )
        out = []
        for r in rows:
            e = _envelope(str(r["event_id"]), int(r["t"]), str(r["record"]), str(r["payload"]))
            u = e.payload
            assert isinstance(u, UsageInterval)
            pieces = tuple(_piece(p) for p in r["pieces"])
            item = Priced(e, u.pool_id, u.start_at, u.end_at, pieces, str(r["decided_by"]))
            origin = Origin(str(r["topic"]), int(r["partition"]), int(r["offset"]))
            out.append((item, origin))
        return out

    def _events_of(
        self, types: Sequence[str], where: str, params: Mapping[str, Any]
    ) -> list[Envelope]:
        names = ", ".join(f"'{t}'" for t in types)
        rows = self._query(
            "SELECT toString(event_id) AS event_id, toUnixTimestamp64Micro(occurred_at) AS t,"
            " ifNull(toString(causation_id), '') AS causation, event_type, payload"
            f" FROM (SELECT * FROM events FINAL WHERE event_type IN ({names}) AND ({where})) AS e"
            f"{self._committed_join('e')} ORDER BY t, event_id",
            params,
        )
        record = {cls.EVENT_TYPE: name for name, cls in PAYLOAD_TYPES.items()}
        return [
            _envelope(str(r["event_id"]), int(r["t"]), record[str(r["event_type"])],
                      str(r["payload"]), str(r["causation"]) or None)
            for r in rows
        ]  # fmt: skip

    def _reload(self) -> None:
        """Hold what pricing needs as of the stored offsets: the rate cards near the newest
        fact (`pricer.FACTS`), each workload's open claims and live instances (and what ended
        lately), the reservations and how far their cost has accrued, and how far each pool
        was priced."""
        facts = ", ".join(f"'{t}'" for t in FACT_TYPES)
        rows = self._query(
            "SELECT toUnixTimestamp64Micro(max(e.occurred_at)) AS t, toUnixTimestamp64Micro("
            f"maxIf(e.occurred_at, e.event_type IN ({facts}))) AS f, countIf(e.event_type IN"
            f" ({facts})) AS n FROM (SELECT event_type, occurred_at, topic, partition, offset"
            f" FROM events) AS e{self._committed_join('e')}",
            {},
        )
        if not rows or not rows[0]["n"]:
            return
        # The horizons are measured from the newest fact priced (`pricer.FACTS`), the idle
        # floor's accrual from the newest event.
        newest, facts_until = int(rows[0]["t"]), int(rows[0]["f"])
        pricer = self.pricer
        pricer.watermark_us = newest
        pricer.facts_until_us = facts_until
        horizon = facts_until - RATE_HORIZON_US
        in_force = (
            "(pool_id, valid_from) IN (SELECT pool_id, max(valid_from) FROM rate_cards FINAL"
            " WHERE valid_from <= fromUnixTimestamp64Micro({h:Int64}, 'UTC') GROUP BY pool_id)"
        )
        where = f"valid_from > fromUnixTimestamp64Micro({{h:Int64}}, 'UTC') OR {in_force}"
        for pool_id, card in self._cards(where, {"h": horizon}):
            self.book.add(pool_id, card)
        self.book.set_complete_from(horizon)
        # Demand: what happened within the horizon, and before it what is still open.
        since = facts_until - DEMAND_HORIZON_US
        recent = "occurred_at >= fromUnixTimestamp64Micro({s:Int64}, 'UTC')"
        ends = (
            "SELECT JSONExtractString(payload, 'instance_id') FROM events FINAL WHERE event_type"
            " IN ('instance_lost', 'instance_deleted')"
        )
        released = (
            "SELECT JSONExtractString(payload, 'claim_id') FROM events FINAL WHERE event_type ="
            " 'capacity_released'"
        )
        older_open = (
            f"NOT {recent} AND ((event_type = 'instance_launched' AND"
            f" JSONExtractString(payload, 'instance_id') NOT IN ({ends})) OR (event_type ="
            f" 'capacity_claim_opened' AND JSONExtractString(payload, 'claim_id') NOT IN"
            f" ({released})))"
        )
        types = ("instance_launched", "instance_lost", "instance_deleted",
                 "capacity_claim_opened", "capacity_released")  # fmt: skip
        for e in self._events_of(types, f"({recent}) OR ({older_open})", {"s": since}):
            pricer.feed(e)
        for e in self._events_of(("reservation_committed",), "1", {}):
            reservation = e.payload
            assert isinstance(reservation, ReservationCommitted)
            if pricer.late(e, reservation.start_at) is None:
                pricer.reservations[e.event_id] = Reservation(e, reservation.start_at)
        for r in self._query(
            "SELECT decided_by, toUnixTimestamp64Micro(max(occurred_at)) AS t FROM ledger_lines"
            " FINAL WHERE cause = 'idle_floor' AND event_type = 'reservation_committed'"
            " GROUP BY decided_by",
            {},
        ):
            held = pricer.reservations.get(str(r["decided_by"]))
            if held is not None:
                held.accrued_to_us = max(held.accrued_to_us, int(r["t"]))
        priced = "SELECT pool_id, max(to_us) AS t FROM priced_facts GROUP BY pool_id"
        for r in self._query(priced, {}):
            pricer.priced_until[str(r["pool_id"])] = int(r["t"])
        # How far each workload's usage was priced (within the demand's horizon): a claim,
        # launch or end before it re-prices what it changes.
        for r in self._query(
            "SELECT JSONExtractString(payload, 'workload_id') AS w, max(to_us) AS t FROM"
            " priced_facts WHERE event_type = 'usage_interval' AND to_us >= {s:Int64} GROUP BY w",
            {"s": since},
        ):
            pricer.usage_until[str(r["w"])] = int(r["t"])
        pricer.watermark_us, pricer.facts_until_us = newest, facts_until

    # -- offsets ------------------------------------------------------------------------------

    def stored_offsets(self) -> dict[TopicPartition, int]:
        rows = self.store.query(
            "SELECT topic, partition, next_offset FROM consumed_offsets FINAL"
            " WHERE projection_name = {p:String}",
            {"p": self.projection},
        )
        return {(str(r["topic"]), int(r["partition"])): int(r["next_offset"]) for r in rows}

    # -- the batch ----------------------------------------------------------------------------

    def write(
        self,
        events: Sequence[tuple[Origin, Envelope]],
        positions: Mapping[TopicPartition, int],
        timeout_s: float | None = None,
    ) -> LedgerWriteResult:
        """Insert a batch's events (their views derive the rankings and rate cards), its priced
        lines and what they were priced from, then its offsets: `store_batch(prepare(...))`.
        (`timeout_s`: chdb runs in this process and has no per-insert deadline; a server
        store bounds each request by its client's timeouts.)"""
        return self.store_batch(self.prepare(events, positions), timeout_s)

    def prepare(
        self, events: Sequence[tuple[Origin, Envelope]], positions: Mapping[TopicPartition, int]
    ) -> PreparedBatch:
        """The batch's rows, priced, as the Arrow tables `store_batch` inserts; nothing is
        written. Python only: a write-behind caller prepares each batch on its own thread and
        leaves only the inserts (chdb's, which let go of the GIL) to the writer thread. Batches
        are prepared in order, each before the next (what one holds prices the ones after)."""
        pricer, source = self.pricer, self.source
        refused_before, unpriced_before = len(pricer.refused), len(pricer.unpriced)
        corrections_before = pricer.corrections
        priced: list[LedgerLine] = []
        origins: dict[str, Origin] = {}
        number, self._next_batch = self._next_batch, self._next_batch + 1
        firsts = self._firsts(events)
        self._unstored[number] = {e.event_id for _, e in firsts}
        self._remember(firsts)
        source.begin()
        feed = pricer.feed
        for origin, e in firsts:
            source.origin = origin
            priced += feed(e)
            origins[e.event_id] = origin
        priced += pricer.advance()
        held_from = min(
            [e.payload.valid_from_at for _, e in firsts if isinstance(e.payload, RateCard)]
            + [item.to_us for item, _ in source.batch],
            default=1 << 62,
        )
        with self._unstored_lock:
            self._unstored_from[number] = held_from
            kept = min(self._unstored_from.values())
        if pricer.facts_until_us is not None:  # the horizons follow the facts' time
            self.book.prune(min(pricer.facts_until_us - RATE_HORIZON_US, kept))
            source.prune(min(pricer.facts_until_us - MEMORY_HORIZON_US, kept))
        refused = pricer.refused[refused_before:]
        unpriced = [
            (origins[e.event_id], reason)
            for e, reason in pricer.unpriced[unpriced_before:]
            if e.event_id in origins
        ]
        result = LedgerWriteResult(
            len(events),
            len(priced),
            unpriced,
            [(origins[r.envelope.event_id], r.reason) for r in refused],
            pricer.corrections - corrections_before,
        )
        starts = _positions_key(self._prepared_to)
        for tp, offset in positions.items():
            self._prepared_to[tp] = max(self._prepared_to.get(tp, 0), offset)
        begun = pa.Table.from_pylist(
            [{"projection_name": self.projection, "batch": number, "starts": starts}],
            schema=BATCHES_SCHEMA,
        )
        return PreparedBatch(
            number,
            begun,
            _events_table(firsts),
            _lines_table(priced, number),
            _priced_table(source.batch, number),
            _late_table(refused, self.rule.allowed_lateness_s),
            self._offsets_table(positions),
            dict(positions),
            result,
        )

    def store_batch(
        self, batch: PreparedBatch, timeout_s: float | None = None
    ) -> LedgerWriteResult:
        """Insert a prepared batch: its number, its events (and through their views the
        rankings and rate cards), its lines, what was priced and refused, then its offsets,
        last, so that a restart after a crash anywhere deletes what the batch stored of its
        lines and priced facts, resumes before the batch and prices it again."""
        with self._storing:
            self.store.insert("ledger_batches", batch.begun)
            self._step("batch")
            self.store.insert("events", batch.events)
            self._step("events")  # the rankings and rate cards with them (views on `events`)
            self.store.insert("ledger_lines", batch.lines)
            self._step("ledger_lines")
            if batch.priced.num_rows:
                self.store.insert("priced_facts", batch.priced)
            if batch.late.num_rows:
                self.store.insert("late_facts", batch.late)
            self._step("priced_facts")
            self.store.insert("consumed_offsets", batch.offsets)
            self._step("offsets")
            self._committed.update(batch.positions)
            self._unstored.pop(batch.number, None)
            with self._unstored_lock:
                self._unstored_from.pop(batch.number, None)
        return batch.result

    def _offsets_table(self, positions: Mapping[TopicPartition, int]) -> pa.Table:
        keys = sorted(positions)
        return pa.Table.from_arrays(
            [
                pa.array([self.projection] * len(keys), pa.string()),
                pa.array([topic for topic, _ in keys], pa.string()),
                pa.array([partition for _, partition in keys], pa.uint32()),
                pa.array([positions[k] for k in keys], pa.uint64()),
            ],
            schema=OFFSETS_SCHEMA,
        )


def _events_table(events: Sequence[tuple[Origin, Envelope]]) -> pa.Table:
    """The batch's `events` rows, built column by column (no row objects)."""
    envs = [e for _, e in events]
    origins = [o for o, _ in events]
    payload = _payload_json
    heads = zip(*map(envelope_head, envs), strict=True) if envs else [()] * len(Envelope.HEAD)
    columns = (
        *heads,
        [o.topic for o in origins],
        [o.partition for o in origins],
        [o.offset for o in origins],
        [payload(e.payload) for e in envs],
    )
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, EVENTS_SCHEMA, strict=True)],
        schema=EVENTS_SCHEMA,
    )


def _lines_table(lines: Sequence[LedgerLine], batch: int) -> pa.Table:
    """The priced lines' rows (LINES_SCHEMA's columns are LedgerLine's fields, in order), with
    the batch's number."""
    columns = list(zip(*lines, strict=True)) if lines else [()] * len(LINES_SCHEMA)
    arrays = [pa.array(c, f.type) for c, f in zip(columns, LINES_SCHEMA, strict=True)]
    arrays.append(pa.array([batch] * len(lines), pa.uint64()))
    return pa.Table.from_arrays(arrays, schema=LINES_INSERT_SCHEMA)


def _positions_key(positions: Mapping[TopicPartition, int]) -> str:
    """Offsets as one short text (a batch's start, to tell whether it stored its own)."""
    text = json.dumps(sorted([t, p, o] for (t, p), o in positions.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _piece(value: Any) -> Piece:
    """A stored piece (a ClickHouse tuple: read back as a dict of its positions, or a list)."""
    a, b, u = value.values() if isinstance(value, dict) else value
    return int(a), int(b), int(u)


def _pieces(pieces: Sequence[Piece]) -> list[dict[str, int]]:
    return [{"1": a, "2": b, "3": u} for a, b, u in pieces]


def _priced_table(items: Sequence[tuple[Priced, Origin]], batch: int) -> pa.Table:
    # An item re-priced in the batch that priced it: its last pieces only.
    items = list({i.envelope.event_id: (i, o) for i, o in items}.values())
    rows = [
        (
            i.envelope.event_id,
            i.envelope.event_type,
            i.envelope.occurred_at,
            i.pool_id,
            i.from_us,
            i.to_us,
            i.envelope.payload.RECORD_NAME,
            _payload_json(i.envelope.payload),
            _pieces(i.pieces),
            i.decided_by,
            o.topic,
            o.partition,
            o.offset,
            batch,
        )
        for i, o in items
    ]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(PRICED_SCHEMA)
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, PRICED_SCHEMA, strict=True)],
        schema=PRICED_SCHEMA,
    )


def _late_table(refused: Sequence[Refusal], allowed_s: int) -> pa.Table:
    rows = [
        (
            r.envelope.event_id,
            r.envelope.event_type,
            r.envelope.key,
            r.envelope.occurred_at,
            r.applies_from_us,
            r.lateness_us / 1e6,
            allowed_s,
            r.reason,
        )
        for r in refused
    ]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(LATE_SCHEMA)
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, LATE_SCHEMA, strict=True)],
        schema=LATE_SCHEMA,
    )
