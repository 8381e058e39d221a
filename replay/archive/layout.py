"""The archive's layout and formats, in one place (docs/accounting.md tells auditors the same).

Per region and month, under ``REGION/YYYY-MM/``:

- ``events.parquet``: the month's events in history order (by event time, then topic,
  partition and offset), with the envelope's fields, the payload as JSON and ``avro``, the
  event's bytes (Avro single-object encoding: ``C3 01``, the writer schema's CRC-64-AVRO
  fingerprint, the body);
- ``cost_lines.parquet``: the ledger lines of those events;
- ``rate_cards.parquet``, ``usage.parquet``, ``checkpoints.parquet`` (since format 2): the
  month's rate cards, usage intervals and checkpoints written again, as typed columns (the
  payload's fields), the cards sorted by pool, start and event id: what a replay prices,
  readable without parsing JSON;
- ``priced_events.parquet`` (since format 2): the month's other events a replay prices (lost
  instances, wasted work, contracts) with the columns of events.parquet a replay reads (ids,
  type, time, causation, payload, position): a small file, so that a replay need not read
  events.parquet at all;
- ``envelope.avsc``: the writer schema, to decode ``avro`` with any Avro library;
- ``manifest.json``: each file's SHA-256, size, rows and schema fingerprint, the time range,
  the Merkle tree head over the events, the chain to the previous month, the retention;
- ``manifest.sig``: the Ed25519 signature of the exact bytes of ``manifest.json``.

A Merkle leaf is ``event id (16 bytes) || event bytes``, hashed as RFC 9162 says.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from projections.ledger.writer import EVENTS_SCHEMA as LEDGER_EVENTS_SCHEMA

FORMAT = "spotcap-archive/4"
"""Format 2 added the typed files (rate_cards, usage and checkpoints .parquet); a month of
format 1 has none, and is read (and verified) as it was written. Format 3 added to
rate_cards.parquet the running integrals of each pool's prices (`CARD_INTEGRALS`); a month of
format 2 has the file without them. Format 4 (issue 22: useful work is what was asked for,
rate cards by event time) puts in priced_events.parquet the claims, launches, deletions and
reservations a replay prices from too, orders rate_cards.parquet by publication among cards
starting together (the one published last is in force) and marks the cards published past the
allowed lateness (`REFUSED_LATE`: not in force, in no integral)."""
FORMAT_1 = "spotcap-archive/1"
FORMAT_2 = "spotcap-archive/2"
FORMAT_3 = "spotcap-archive/3"
PROOF_FORMAT = "spotcap-inclusion-proof/1"
HEAD_FORMAT = "spotcap-archive-head/1"
HEAD = "head.json"
"""The archive's signed head, ``REGION/head.json`` (with ``head.sig``): the newest month, its
manifest's SHA-256 and the chain's size and root, rewritten at each export (on S3, a new
version of the same key, each locked): without it the newest month could be deleted unseen."""
HEAD_SIGNATURE = "head.sig"
EVENTS = "events.parquet"
COST_LINES = "cost_lines.parquet"
SCHEMA = "envelope.avsc"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
RATE_CARDS = "rate_cards.parquet"
USAGE = "usage.parquet"
CHECKPOINTS = "checkpoints.parquet"
PRICED = "priced_events.parquet"
PRICED_TYPES_3 = ("instance_lost", "work_wasted", "contract_published")
PRICED_TYPES = (
    *PRICED_TYPES_3,
    "instance_launched",
    "instance_deleted",
    "capacity_claim_opened",
    "capacity_released",
    "reservation_committed",
)
AUDIT = "audit.jsonl"
"""The month's capacity actions, once each, with who caused them (ADR-25; optional: listed in
the manifest when exported)."""
DATA_FILES = (EVENTS, COST_LINES, RATE_CARDS, USAGE, CHECKPOINTS, PRICED, SCHEMA)
DATA_FILES_1 = (EVENTS, COST_LINES, SCHEMA)
# The typed files, each with the event type it holds.
TYPED_FILES = {RATE_CARDS: "rate_card", USAGE: "usage_interval", CHECKPOINTS: "checkpoint_written"}
RETENTION_YEARS = 7  # cost history is kept 7 years (DESIGN.md §8)
LEAF = "SHA-256(0x00 || event id as 16 bytes || event bytes as in the avro column)"

_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")

# The ledger's events table's columns (the envelope's fields first), and each event's encoded
# bytes, which the Merkle tree's leaves hash.
EVENTS_SCHEMA = LEDGER_EVENTS_SCHEMA.append(pa.field("avro", pa.binary()))


# The typed files: the event's id and time, then the payload's fields under their own names.
RATE_CARDS_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("occurred_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("pool_id", pa.string(), nullable=False),
        pa.field("purchase_model", pa.string(), nullable=False),
        pa.field("price_per_vcpu_h_eur_micros", pa.int64(), nullable=False),
        pa.field("guaranteed_price_per_vcpu_h_eur_micros", pa.int64(), nullable=False),
        pa.field("valid_from_at", pa.int64(), nullable=False),
        pa.field("valid_until_at", pa.int64(), nullable=False),
    ]
)
# Since format 3, derived from the rows above (`card_integrals`): whether the card is in force
# (no later card of the pool in the file, by event id, starts at the same moment), and the
# integrals of its price and guaranteed price over time from the pool's first card in the file
# up to the card's start (micro-euros per vCPU-hour times microseconds, exact: Decimal128).
IN_FORCE = "in_force"
REFUSED_LATE = "refused_late"  # since format 4: published past the allowed lateness, not in force
ARCHIVE_LATENESS_S = 3600  # the lateness format 4's in_force and integrals are computed with
PRICE_INTEGRAL = "price_integral_to_start"
GUARANTEED_INTEGRAL = "guaranteed_integral_to_start"
INTEGRAL_TYPE = pa.decimal128(38, 0)
CARD_INTEGRALS = pa.schema(
    [
        pa.field(IN_FORCE, pa.bool_(), nullable=False),
        pa.field(PRICE_INTEGRAL, INTEGRAL_TYPE, nullable=False),
        pa.field(GUARANTEED_INTEGRAL, INTEGRAL_TYPE, nullable=False),
    ]
)
RATE_CARDS_SCHEMA_2 = RATE_CARDS_SCHEMA
RATE_CARDS_SCHEMA_3 = pa.schema([*RATE_CARDS_SCHEMA_2, *CARD_INTEGRALS])
RATE_CARDS_SCHEMA = pa.schema(
    [*RATE_CARDS_SCHEMA_2, pa.field(REFUSED_LATE, pa.bool_(), nullable=False), *CARD_INTEGRALS]
)
RATE_CARDS_ORDER_3 = [("pool_id", "ascending"), ("valid_from_at", "ascending"),
                      ("event_id", "ascending")]  # fmt: skip
RATE_CARDS_ORDER = [("pool_id", "ascending"), ("valid_from_at", "ascending"),
                    ("occurred_at", "ascending"), ("event_id", "ascending")]  # fmt: skip

USAGE_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("occurred_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("workload_id", pa.string(), nullable=False),
        pa.field("instance_id", pa.string(), nullable=False),
        pa.field("pool_id", pa.string(), nullable=False),
        pa.field("purchase_model", pa.string(), nullable=False),
        pa.field("start_at", pa.int64(), nullable=False),
        pa.field("end_at", pa.int64(), nullable=False),
        pa.field("vcpu", pa.int64(), nullable=False),
        pa.field("used_vcpu_h", pa.float64(), nullable=False),
    ]
)
CHECKPOINTS_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("occurred_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("instance_id", pa.string(), nullable=False),
        pa.field("workload_id", pa.string(), nullable=False),
        pa.field("generation", pa.int64(), nullable=False),
        pa.field("written_bytes", pa.int64(), nullable=False),
        pa.field("duration_s", pa.float64(), nullable=False),
        pa.field("final", pa.bool_(), nullable=False),
    ]
)
TYPED_SCHEMAS = {
    RATE_CARDS: RATE_CARDS_SCHEMA,
    USAGE: USAGE_SCHEMA,
    CHECKPOINTS: CHECKPOINTS_SCHEMA,
}


# What a replay reads of an event (its bytes, for the Merkle tree, are in events.parquet).
PRICED_COLUMNS = ("event_id", "event_type", "occurred_at", "causation_id", "payload", "topic",
                  "partition", "offset")  # fmt: skip
PRICED_SCHEMA = pa.schema([f for f in EVENTS_SCHEMA if f.name in PRICED_COLUMNS])
DERIVED_FILES = (RATE_CARDS, USAGE, CHECKPOINTS, PRICED)  # derived from events.parquet
DERIVED_SCHEMAS = {**TYPED_SCHEMAS, PRICED: PRICED_SCHEMA}


def card_integrals(
    pools: list[str],
    starts: list[int],
    prices: list[int],
    guaranteed: list[int],
    refused: list[bool] | None = None,
) -> tuple[list[bool], list[int], list[int]]:
    """The `CARD_INTEGRALS` columns of rate cards sorted by pool, start, publication and event
    id (format 3: pool, start and event id): of cards of a pool starting at the same moment the
    last is in force, a card `refused` past the allowed lateness never; each card's integrals
    are those of the cards in force before it, each priced from its start to the next one's, so
    that a replay reads the price's integral up to any moment from one card (the card in force
    then, plus its price times the time since its start) without sorting the month."""
    n = len(pools)
    out = refused or [False] * n
    in_force = [False] * n
    kept: dict[tuple[str, int], int] = {}  # (pool, start) -> its last card not refused
    for i in range(n):
        if not out[i]:
            kept[(pools[i], starts[i])] = i
    for i in kept.values():
        in_force[i] = True
    ip, ig = [0] * n, [0] * n
    base_p = base_g = 0
    last: int | None = None  # the index of the pool's last card in force so far
    for i in range(n):
        if i == 0 or pools[i] != pools[i - 1]:
            base_p = base_g = 0
            last = None
        if last is not None:
            ip[i] = base_p + (starts[i] - starts[last]) * prices[last]
            ig[i] = base_g + (starts[i] - starts[last]) * guaranteed[last]
        if in_force[i]:
            base_p, base_g, last = ip[i], ig[i], i
    return in_force, ip, ig


def refused_late(valid_from: list[int], published: list[int]) -> list[bool]:
    """Whether each card was published past the archive's allowed lateness."""
    late_us = ARCHIVE_LATENESS_S * 1_000_000
    return [p - f > late_us for f, p in zip(valid_from, published, strict=True)]


def priced_types(manifest: dict[str, Any]) -> tuple[str, ...]:
    """The event types a month's priced_events.parquet holds, by its format."""
    if manifest.get("format") in (FORMAT_1, FORMAT_2, FORMAT_3):
        return PRICED_TYPES_3
    return PRICED_TYPES


def data_files(manifest: dict[str, Any]) -> tuple[str, ...]:
    """The data files a month's manifest must list, by the format it was written in."""
    return DATA_FILES_1 if manifest.get("format") == FORMAT_1 else DATA_FILES


def check_month(month: str) -> str:
    if not _MONTH.match(month):
        raise ValueError(f"{month!r} is not a month: write YYYY-MM, e.g. 2026-11")
    return month


def month_bounds_us(month: str) -> tuple[int, int]:
    """[start, end) of the month in microseconds since the epoch, UTC."""
    year, number = (int(x) for x in check_month(month).split("-"))
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC)
    return _us(start), _us(end)


def month_of_us(t_us: int) -> str:
    moment = datetime.fromtimestamp(t_us / 1e6, tz=UTC)
    return f"{moment.year:04d}-{moment.month:02d}"


def previous_month(month: str) -> str:
    year, number = (int(x) for x in check_month(month).split("-"))
    return f"{year - 1:04d}-12" if number == 1 else f"{year:04d}-{number - 1:02d}"


def retain_until(month: str) -> datetime:
    """The end of the month plus seven years: the ledger's cost retention, from the data's date."""
    _, end_us = month_bounds_us(month)
    end = datetime.fromtimestamp(end_us / 1e6, tz=UTC)
    return end.replace(year=end.year + RETENTION_YEARS)


def _us(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000


def key(region: str, month: str, name: str) -> str:
    return f"{region}/{month}/{name}"


def head_key(region: str, name: str = HEAD) -> str:
    """The key of the region's head (`HEAD`) or of its signature (`HEAD_SIGNATURE`)."""
    return f"{region}/{name}"


_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def leaf_data(event_id: str, event_bytes: bytes) -> bytes:
    # An id in the canonical form (all of ours) straight from its hex: a third of the time of
    # parsing it as a UUID, once per event at export and at verify.
    if _CANONICAL_ID.fullmatch(event_id):
        return bytes.fromhex(event_id.replace("-", "")) + event_bytes
    return uuid.UUID(event_id).bytes + event_bytes


def canonical_json(data: Any) -> bytes:
    """The manifest's bytes: sorted keys, two-space indent, a final newline (deterministic)."""
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def schema_fingerprint(schema: pa.Schema) -> str:
    """SHA-256 of the Parquet file's column names and types (metadata left out)."""
    text = "\n".join(f"{f.name}:{f.type}:{'null' if f.nullable else 'required'}" for f in schema)
    return sha256_hex(text.encode())


def head_of(region: str, month: str, manifest: bytes) -> bytes:
    """The signed head's bytes naming `month`, whose manifest is `manifest` (what an export
    writes after the month, and what a repair or verify rebuilds to compare)."""
    chain = json.loads(manifest)["chain"]
    return canonical_json(
        {"format": HEAD_FORMAT, "region": region, "month": month,
         "manifest_sha256": sha256_hex(manifest),
         "chain": {"size": chain["size"], "root": chain["root"]}}
    )  # fmt: skip
