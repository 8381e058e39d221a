"""The ledger writer: events, rankings, rate cards and priced lines, one insert per table per batch.

ClickHouse has no transactions across tables, so the ledger is at-least-once and idempotent on
the event id: a batch re-inserted after a crash collapses onto the rows already there (every
table is a ReplacingMergeTree keyed by event id; reads go through FINAL). The offsets are
inserted last; a restart resumes from them (`stored_offsets`, to seek on assignment) and
re-prices the batch from the same rate cards, so the lines are the same.

Pricing needs the rate cards in force: they are held in a `RateBook`, reloaded from the
`rate_cards` table at start (the last `RATE_HORIZON_US` before the newest stored event, plus
the card in force then) and fetched from it for older intervals.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import pyarrow as pa

from projections.ledger.pricing import PRICERS, LedgerLine
from projections.ledger.rates import Card, RateBook, Unpriced
from projections.ledger.rule import RECORDED, AccountingRule
from projections.ledger.store import LedgerStore
from schemas.errors import Origin
from schemas.events import Envelope, PoolRanked, RateCard

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
    for name in ("net_saving", "ledger_by_cause"):
        store.command(f"DROP VIEW IF EXISTS {name}")
    for name in ("events", "rankings", "rate_cards", "ledger_lines", "consumed_offsets"):
        store.command(f"DROP TABLE IF EXISTS {name}")


@dataclass(slots=True)
class _Columns:
    """Rows of one table (tuples in the schema's column order), turned into an Arrow table."""

    schema: pa.Schema
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def add(self, **row: Any) -> None:
        self.rows.append(tuple(row[name] for name in self.schema.names))

    def table(self) -> pa.Table:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(self.schema)
        return pa.table(
            [pa.array(col, type=f.type) for col, f in zip(columns, self.schema, strict=True)],
            schema=self.schema,
        )


EVENTS_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("event_type", pa.string()),
        ("occurred_at", _UTC_US),
        ("recorded_at", _UTC_US),
        ("region", pa.string()),
        ("key", pa.string()),
        ("causation_id", pa.string()),
        ("correlation_id", pa.string()),
        ("producer", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.uint32()),
        ("offset", pa.uint64()),
        ("payload", pa.string()),
    ]
)
RANKINGS_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("ranking_id", pa.string()),
        ("pool_id", pa.string()),
        ("rank", pa.uint32()),
        ("pool_count", pa.uint32()),
        ("score", pa.float64()),
        ("available_vcpu", pa.int64()),
        ("observed_interruption_per_h", pa.float64()),
        ("price_per_vcpu_h_eur_micros", pa.int64()),
        ("correlation_group", pa.string()),
        ("window_s", pa.uint32()),
        ("input_event_ids", pa.list_(pa.string())),
        ("occurred_at", _UTC_US),
    ]
)
RATE_CARDS_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("pool_id", pa.string()),
        ("purchase_model", pa.string()),
        ("price_per_vcpu_h_eur_micros", pa.int64()),
        ("guaranteed_price_per_vcpu_h_eur_micros", pa.int64()),
        ("valid_from", _UTC_US),
        ("valid_until", _UTC_US),
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


def _bytes_hex(value: object) -> str:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot put {type(value).__name__} in JSON")


# One encoder for every payload (json.dumps with options builds one per call).
_PAYLOAD_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_bytes_hex)


def _payload_json(e: Envelope) -> str:
    return _PAYLOAD_JSON.encode(e.payload.to_avro())


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
        rows = self.store.query(
            "SELECT pool_id, toString(event_id) AS event_id, purchase_model,"
            " price_per_vcpu_h_eur_micros AS price, guaranteed_price_per_vcpu_h_eur_micros AS g,"
            " toUnixTimestamp64Micro(valid_from) AS f, toUnixTimestamp64Micro(valid_until) AS u"
            f" FROM rate_cards FINAL WHERE {where} ORDER BY pool_id, f, event_id",
            params,
        )
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
        """Insert a batch, then its offsets. (`timeout_s`: chdb runs in this process and has no
        per-insert deadline; a server store bounds each request by its client's timeouts.)"""
        ev, ranks = _Columns(EVENTS_SCHEMA), _Columns(RANKINGS_SCHEMA)
        cards, lines = _Columns(RATE_CARDS_SCHEMA), _Columns(LINES_SCHEMA)
        unpriced: list[tuple[Origin, str]] = []
        n_lines = 0
        if events:
            newest = max(e.occurred_at for _, e in events)
            self._watermark_us = max(self._watermark_us or newest, newest)
        # Rows as tuples in their schema's column order (no dict or keywords per row: this
        # loop is the ledger's own share of a batch).
        ev_rows, rank_rows, card_rows = ev.rows, ranks.rows, cards.rows
        book_add = self.book.add
        for origin, e in events:
            ev_rows.append(
                (e.event_id, e.event_type, e.occurred_at, e.recorded_at, e.region, e.key,
                 e.causation_id, e.correlation_id, e.producer, origin.topic, origin.partition,
                 origin.offset, _payload_json(e))
            )  # fmt: skip
            p = e.payload
            if isinstance(p, RateCard):
                book_add(p.pool_id, Card(p.valid_from_at, e.event_id, p.valid_until_at,
                                         p.price_per_vcpu_h_eur_micros,
                                         p.guaranteed_price_per_vcpu_h_eur_micros,
                                         p.purchase_model))  # fmt: skip
                # RATE_CARDS_SCHEMA's order.
                card_rows.append(
                    (e.event_id, p.pool_id, p.purchase_model, p.price_per_vcpu_h_eur_micros,
                     p.guaranteed_price_per_vcpu_h_eur_micros, p.valid_from_at, p.valid_until_at)
                )  # fmt: skip
            elif isinstance(p, PoolRanked):
                # RANKINGS_SCHEMA's order.
                rank_rows.append(
                    (e.event_id, p.ranking_id, p.pool_id, p.rank, p.pool_count, p.score,
                     p.available_vcpu, p.observed_interruption_per_h,
                     p.price_per_vcpu_h_eur_micros, p.correlation_group, p.window_s,
                     list(p.input_event_ids), e.occurred_at)
                )  # fmt: skip
            pricer = PRICERS.get(e.event_type)  # `price`, without its call for free events
            if pricer is None:
                continue
            try:
                priced = pricer(e, self.book, self.rule)
            except Unpriced as error:
                unpriced.append((origin, f"{e.event_type} {e.event_id}: {error}"))
                continue
            for line in priced:
                _add_line(lines, line)
            n_lines += len(priced)
        for name, columns in (("events", ev), ("rankings", ranks), ("rate_cards", cards)):
            self.store.insert(name, columns.table())
            self._step(name)
        self.store.insert("ledger_lines", lines.table())
        self._step("ledger_lines")
        self._store_offsets(positions)
        self._step("offsets")
        if self._watermark_us is not None:
            self.book.prune(self._watermark_us - RATE_HORIZON_US)
        return LedgerWriteResult(len(events), n_lines, unpriced)

    def _store_offsets(self, positions: Mapping[TopicPartition, int]) -> None:
        offsets = _Columns(OFFSETS_SCHEMA)
        for (topic, partition), next_offset in sorted(positions.items()):
            offsets.add(
                projection_name=self.projection,
                topic=topic,
                partition=partition,
                next_offset=next_offset,
            )
        self.store.insert("consumed_offsets", offsets.table())


def _add_line(lines: _Columns, line: LedgerLine) -> None:
    lines.rows.append(
        (line.workload_id, line.day, line.cause, line.event_id, line.amount_eur_micros,
         line.quantity, line.unit, line.pool_id, line.purchase_model, line.instance_id,
         line.event_type, line.occurred_at_us, line.rule)
    )  # fmt: skip
