"""The ledger writer: events, rankings, rate cards and priced lines, three inserts per batch.

A batch is one insert into `events`, whose materialized views (ddl/0002_from_events.sql) derive
the rankings and the rate cards from the payloads in the same insert; then one insert of the
priced lines; then one of the offsets. ClickHouse has no transactions across tables, so the
ledger is at-least-once and idempotent on the event id: a batch re-inserted after a crash
collapses onto the rows already there (every table is a ReplacingMergeTree keyed by event id;
reads go through FINAL). The offsets are inserted last, after every other row of the batch is
written; a restart resumes from them (`stored_offsets`, to seek on assignment) and re-prices the
batch from the same rate cards, so the lines are the same.

Pricing needs the rate cards in force: they are held in a `RateBook`, reloaded from the
`rate_cards` table at start (the last `RATE_HORIZON_US` before the newest stored event, plus
the card in force then) and fetched from it for older intervals.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from operator import attrgetter
from typing import Any

import pyarrow as pa

from projections.ledger.pricing import PRICERS, LedgerLine
from projections.ledger.rates import Card, RateBook, Unpriced
from projections.ledger.rule import RECORDED, AccountingRule
from projections.ledger.store import LedgerStore
from schemas.catalogue import catalogue, non_null
from schemas.errors import Origin
from schemas.events import Envelope, Payload, RateCard

LEDGER_PROJECTION = "ledger"
LEDGER_TOPICS = ("lifecycle", "market", "demand", "decisions", "usage")
RATE_HORIZON_US = 2 * 86_400_000_000  # rate cards held in memory behind the newest event

TopicPartition = tuple[str, int]
StepHook = Callable[[str], None]

_UTC_US = pa.timestamp("us", tz="UTC")


def apply_ddl(store: LedgerStore) -> None:
    """Create the ledger's tables and views (idempotent: IF NOT EXISTS)."""
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


def drop_all(store: LedgerStore) -> None:
    """Drop every ledger table and view (for rebuilds)."""
    for name in ("net_saving", "ledger_by_cause", "rankings_from_events", "rate_cards_from_events"):
        store.command(f"DROP VIEW IF EXISTS {name}")
    for name in (
        "events",
        "rankings",
        "rate_cards",
        "ledger_lines",
        "consumed_offsets",
        "consumed_topics",
    ):
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
    ]
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


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A batch priced and turned into the tables `LedgerWriter.store_batch` inserts."""

    events: pa.Table
    lines: pa.Table
    offsets: pa.Table
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
        # The inserts of a batch and the queries for rate cards, one at a time: a write-behind
        # caller stores a batch on one thread while it prepares the next on another, whose
        # pricing may ask the store for old rate cards.
        self._storing = threading.Lock()
        self.rule = rule
        self.projection = projection
        self._on_step = on_step
        apply_ddl(store)
        self.book = RateBook(self._backfill)
        self._watermark_us = self._reload()

    def _step(self, name: str) -> None:
        if self._on_step is not None:
            self._on_step(name)

    # -- rate cards ---------------------------------------------------------------------------

    def _cards(self, where: str, params: Mapping[str, Any]) -> list[tuple[str, Card]]:
        sql = (
            "SELECT pool_id, toString(event_id) AS event_id, purchase_model,"
            " price_per_vcpu_h_eur_micros AS price, guaranteed_price_per_vcpu_h_eur_micros AS g,"
            " toUnixTimestamp64Micro(valid_from) AS f, toUnixTimestamp64Micro(valid_until) AS u"
            f" FROM rate_cards FINAL WHERE {where} ORDER BY pool_id, f, event_id"
        )
        with self._storing:
            rows = self.store.query(sql, params)
        return [
            (str(r["pool_id"]), Card(int(r["f"]), str(r["event_id"]), int(r["u"]), int(r["price"]),
                                     int(r["g"]), str(r["purchase_model"])))
            for r in rows
        ]  # fmt: skip

    def _reload(self) -> int | None:
        """Hold the stored cards near the newest stored event; return that event's time."""
        rows = self.store.query(
            "SELECT toUnixTimestamp64Micro(max(occurred_at)) AS t, count() AS n FROM events"
        )
        if not rows or not rows[0]["n"]:
            return None
        newest = int(rows[0]["t"])
        horizon = newest - RATE_HORIZON_US
        in_force = (
            "(pool_id, valid_from) IN (SELECT pool_id, max(valid_from) FROM rate_cards FINAL"
            " WHERE valid_from <= fromUnixTimestamp64Micro({h:Int64}, 'UTC') GROUP BY pool_id)"
        )
        where = f"valid_from > fromUnixTimestamp64Micro({{h:Int64}}, 'UTC') OR {in_force}"
        for pool_id, card in self._cards(where, {"h": horizon}):
            self.book.add(pool_id, card)
        self.book.set_complete_from(horizon)
        return newest

    def _backfill(self, pool_id: str, from_us: int, to_us: int) -> list[Card]:
        where = (
            "pool_id = {p:String} AND valid_from < fromUnixTimestamp64Micro({t:Int64}, 'UTC') AND"
            " valid_from >= (SELECT max(valid_from) FROM rate_cards FINAL WHERE pool_id ="
            " {p:String} AND valid_from <= fromUnixTimestamp64Micro({f:Int64}, 'UTC'))"
        )
        return [c for _, c in self._cards(where, {"p": pool_id, "f": from_us, "t": to_us})]

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
        lines, then its offsets: `store_batch(prepare(...))`. (`timeout_s`: chdb runs in this
        process and has no per-insert deadline; a server store bounds each request by its
        client's timeouts.)"""
        return self.store_batch(self.prepare(events, positions), timeout_s)

    def prepare(
        self, events: Sequence[tuple[Origin, Envelope]], positions: Mapping[TopicPartition, int]
    ) -> PreparedBatch:
        """The batch's rows, priced, as the Arrow tables `store_batch` inserts; nothing is
        written. Python only: a write-behind caller prepares each batch on its own thread and
        leaves only the inserts (chdb's, which let go of the GIL) to the writer thread. Batches
        are prepared in order, each before the next (the rate cards of one are in the book for
        the ones after it)."""
        unpriced: list[tuple[Origin, str]] = []
        priced: list[LedgerLine] = []
        if events:
            newest = max(e.occurred_at for _, e in events)
            self._watermark_us = max(self._watermark_us or newest, newest)
        # In the batch's order: a rate card is in the book for the events after it. Only the
        # rate cards and the event types that cost something are looked at here.
        book, rule, book_add, pricers = self.book, self.rule, self.book.add, PRICERS
        for origin, e in events:
            p = e.payload
            if isinstance(p, RateCard):
                book_add(p.pool_id, (p.valid_from_at, e.event_id, p.valid_until_at,
                                     p.price_per_vcpu_h_eur_micros,
                                     p.guaranteed_price_per_vcpu_h_eur_micros,
                                     p.purchase_model))  # fmt: skip
                continue
            pricer = pricers.get(e.event_type)  # `price`, without its call for free events
            if pricer is None:
                continue
            try:
                priced += pricer(e, book, rule)
            except Unpriced as error:
                unpriced.append((origin, f"{e.event_type} {e.event_id}: {error}"))
        if self._watermark_us is not None:
            self.book.prune(self._watermark_us - RATE_HORIZON_US)
        return PreparedBatch(
            _events_table(events),
            _lines_table(priced),
            self._offsets_table(positions),
            LedgerWriteResult(len(events), len(priced), unpriced),
        )

    def store_batch(
        self, batch: PreparedBatch, timeout_s: float | None = None
    ) -> LedgerWriteResult:
        """Insert a prepared batch: its events (and through their views the rankings and rate
        cards), its lines, then its offsets, last, so that a restart after a crash anywhere
        resumes before the batch and re-inserts it (rows the sorting keys collapse)."""
        with self._storing:
            self.store.insert("events", batch.events)
            self._step("events")  # the rankings and rate cards with them (views on `events`)
            self.store.insert("ledger_lines", batch.lines)
            self._step("ledger_lines")
            self.store.insert("consumed_offsets", batch.offsets)
            self._step("offsets")
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


def _lines_table(lines: Sequence[LedgerLine]) -> pa.Table:
    """The priced lines' rows (LINES_SCHEMA's columns are LedgerLine's fields, in order)."""
    columns = list(zip(*lines, strict=True)) if lines else [()] * len(LINES_SCHEMA)
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, LINES_SCHEMA, strict=True)],
        schema=LINES_SCHEMA,
    )
