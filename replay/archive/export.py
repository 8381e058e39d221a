"""`spotcap archive export`: one month of a region's history, made verifiable and locked.

The month's events (in history order) and their cost lines go to Parquet; the manifest records
each file's SHA-256, size, rows and schema fingerprint, the time range, the Merkle tree head
over the events (RFC 9162), and the chain: the tree over every archived event of the region so
far, with a consistency proof from the previous month's tree and the SHA-256 of the previous
manifest. The manifest's bytes are signed (Ed25519: a key file or OpenBao transit). Months are
archived in order; a month is written once (with Object Lock it could not be replaced).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from contracts.signing import Signer
from projections.eventtime import iso
from projections.ledger.store import LedgerStore
from projections.ledger.writer import LEDGER_TOPICS, LINES_SCHEMA, envelope_head
from projections.stores import Stores
from replay.archive import layout
from replay.archive.audit import audit_lines, read_audit
from replay.archive.columns import MonthEvents, MonthReading, Opener
from replay.archive.history import ArchiveRecord, merged_records
from replay.archive.history import payload_text as _json_text
from replay.archive.merkle import chained, leaf_hash, root_of
from replay.archive.storage import ArchiveError, ArchiveStorage
from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope
from streams.log import EventLog

BATCH_ROWS = 50_000
Positioned = tuple[Origin, Envelope]


@dataclass(frozen=True, slots=True)
class Exported:
    region: str
    month: str
    events: int
    cost_lines: int
    root: str
    chain_size: int
    manifest_sha256: str
    seconds: float
    completed_head: bool = False
    """True when the month was archived already and only its head was written now (an export
    that stopped between the month's manifest and its head)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "month": self.month,
            "events": self.events,
            "cost_lines": self.cost_lines,
            "merkle_root": self.root,
            "chain_size": self.chain_size,
            "manifest_sha256": self.manifest_sha256,
            "seconds": round(self.seconds, 3),
            "completed_head": self.completed_head,
        }

    def describe(self, archive: str, signed_by: str, *, locked: bool) -> str:
        """What was archived where, for people: the archive (`storage.describe()`), the Object
        Lock date when the storage enforces retention (`locked`), and the signing key's id."""
        until = " with Object Lock until " + layout.retain_until(self.month).strftime("%Y-%m-%d")
        if self.completed_head:
            return (
                f"{self.month} of region {self.region} was archived to {archive} by an export "
                f"that stopped before writing the archive's signed head; the head now names "
                f"{self.month} ({self.events:,} events, chain of {self.chain_size:,}), signed "
                f"by {signed_by}"
            )
        return (
            f"archived {self.month} of region {self.region} to {archive}"
            f"{until if locked else ''}: {self.events:,} events and "
            f"{self.cost_lines:,} cost lines in {self.seconds:,.1f} s; tree head "
            f"{self.root[:16]}... signed by {signed_by}, chain of {self.chain_size:,} events"
        )


def archived_months(storage: ArchiveStorage, region: str) -> list[str]:
    """The months of `region` that have a manifest and its signature, in order. A manifest
    without its signature is an export cut short between the two (the signature is written
    last): that month is not archived, and an export of it writes it (verify finds it)."""
    names: dict[str, set[str]] = {}
    for k in storage.keys(f"{region}/"):
        parts = k.split("/")
        if len(parts) == 3:
            names.setdefault(parts[1], set()).add(parts[2])
    return sorted(m for m, n in names.items() if {layout.MANIFEST, layout.SIGNATURE} <= n)


def payload_json(e: Envelope) -> str:
    """The payload as JSON, as the ledger stores it (sorted keys; bytes as hex)."""
    return _json_text(e.payload.to_avro())


_head_of_record = itemgetter(*Envelope.HEAD)


class _EventsFile:
    """Writes events.parquet in row groups and the Merkle leaves as it goes: from envelopes
    (`add`, encoded here) or from records as the log holds them (`add_record`: the bytes kept,
    the fields read from the Avro record; the same rows)."""

    def __init__(self, path: Path, codec: Codec) -> None:
        self.path = path
        self.codec = codec
        self.writer = pq.ParquetWriter(path, layout.EVENTS_SCHEMA, compression="zstd")
        self.rows: list[tuple[Any, ...]] = []
        self.leaves: list[bytes] = []
        self.read_rows = 0  # rows of `add_read`, whose leaves a worker hashes
        self.headers: set[bytes] = set()
        self.topics: set[str] = set()
        self.first_us: int | None = None
        self.last_us: int | None = None

    @property
    def count(self) -> int:
        """The rows written."""
        return len(self.leaves) + self.read_rows

    @property
    def fingerprints(self) -> list[str]:
        """The events' Avro headers (C3 01 and the writer schema's fingerprint), sorted."""
        return sorted(h.hex() for h in self.headers)

    def add(self, origin: Origin, e: Envelope) -> None:
        data = self.codec.encode(e)
        row = (*envelope_head(e), origin.topic, origin.partition, origin.offset, payload_json(e))
        self._add(e.event_id, e.occurred_at, origin.topic, data, row)

    def add_record(self, record: ArchiveRecord) -> None:
        occurred_at, topic, partition, offset, data, fields = record
        row = (*_head_of_record(fields), topic, partition, offset, _json_text(fields["payload"][1]))
        self._add(fields["event_id"], occurred_at, topic, data, row)

    def _add(
        self, event_id: str, occurred_at: int, topic: str, data: bytes, row: tuple[Any, ...]
    ) -> None:
        self.leaves.append(leaf_hash(layout.leaf_data(event_id, data)))
        self.headers.add(data[:10])
        self.topics.add(topic)
        if self.first_us is None:
            self.first_us = occurred_at
        self.last_us = occurred_at
        self.rows.append((*row, data))
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def add_read(self, read: MonthEvents) -> None:
        """The month as `replay.archive.columns` read and merged it, in the row groups
        `add_record` would write (a batch at a time); its leaves are hashed elsewhere
        (`MonthReading.trees`)."""
        self.headers.update(read.headers)
        self.read_rows += len(read)
        for batch in read.batches(layout.EVENTS_SCHEMA.names, BATCH_ROWS):
            self.writer.write_table(batch)
            self.topics.update(pc.unique(batch.column("topic")).to_pylist())
            at = batch.column("occurred_at").cast(pa.int64())
            if self.first_us is None:
                self.first_us = at[0].as_py()
            self.last_us = at[-1].as_py()

    def flush(self) -> None:
        if not self.rows:
            return
        columns = zip(*self.rows, strict=True)
        table = pa.table(
            [pa.array(c, type=f.type) for c, f in zip(columns, layout.EVENTS_SCHEMA, strict=True)],
            schema=layout.EVENTS_SCHEMA,
        )
        self.writer.write_table(table)
        self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()


def month_cost_lines(store: LedgerStore, month: str) -> pa.Table:
    """The ledger's lines of the events that occurred in `month` (in a stable order)."""
    start_us, end_us = layout.month_bounds_us(month)
    found = store.query_table(
        "SELECT toString(workload_id) AS workload_id, day, toString(cause) AS cause,"
        " toString(event_id) AS event_id, amount_eur_micros, quantity, toString(unit) AS unit,"
        " toString(pool_id) AS pool_id, toString(purchase_model) AS purchase_model, instance_id,"
        " toString(event_type) AS event_type, occurred_at, toString(rule) AS rule, decided_by"
        " FROM ledger_lines FINAL WHERE occurred_at >= fromUnixTimestamp64Micro({s:Int64}, 'UTC')"
        " AND occurred_at < fromUnixTimestamp64Micro({e:Int64}, 'UTC')"
        " ORDER BY occurred_at, event_id, day, cause",
        {"s": start_us, "e": end_us},
    )
    # As Arrow, cast to the file's schema: the same table as from the rows, without making a
    # Python value of each cell (most of the export's time after the events).
    return LINES_SCHEMA.empty_table() if found is None else found.cast(LINES_SCHEMA)


def write_events_file(path: Path, history: Iterable[Positioned], *, typed: bool = False) -> int:
    """`history` as an events.parquet of the archive's format, without a manifest: the SQL
    engine's input for a history that has no ledger (tests, benchmarks). With `typed`, the
    typed files beside it (rate_cards.parquet, usage.parquet). Returns the rows."""
    events = _EventsFile(path, Codec())
    try:
        for origin, e in history:
            events.add(origin, e)
    finally:
        events.close()
    if typed:
        write_typed_files(path, path.parent)
    return events.count


def typed_tables(events_path: Path, table: pa.Table | None = None) -> dict[str, pa.Table]:
    """The typed files of a month (`layout.TYPED_FILES`), derived from its events.parquet: the
    rows of each event type with the payload's fields as columns, in the file's order (rate
    cards sorted by pool, start and event id). Derived from the file rather than from the
    events as they are written, so that any events.parquet (an older month's, a benchmark's)
    gives the same typed files as an export would. `table`: the file's columns, if read."""
    if table is None:
        table = pq.read_table(events_path, columns=["event_id", "event_type", "occurred_at",
                                                    "payload"])  # fmt: skip
    out = {}
    for name, event_type in layout.TYPED_FILES.items():
        schema = layout.TYPED_SCHEMAS[name]
        rows = table.filter(pc.equal(table.column("event_type"), event_type))
        # One parse of them all as a JSON array: the same values, without a call per row.
        payloads = json.loads("[" + ",".join(rows.column("payload").to_pylist()) + "]")
        columns: list[Any] = [rows.column("event_id"), rows.column("occurred_at")]
        if name == layout.RATE_CARDS:  # the integrals are added once the cards are sorted
            schema = layout.RATE_CARDS_SCHEMA_2
        for field in list(schema)[2:]:
            columns.append(pa.array([p[field.name] for p in payloads], type=field.type))
        typed = pa.Table.from_arrays(
            [c.cast(f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
        )
        if name == layout.RATE_CARDS:
            typed = with_card_integrals(typed.sort_by(layout.RATE_CARDS_ORDER))
        out[name] = typed
    return out


def with_card_integrals(cards: pa.Table) -> pa.Table:
    """Rate cards of `layout.RATE_CARDS_SCHEMA_2`, sorted, with whether each was refused past
    the allowed lateness and `layout.CARD_INTEGRALS` added (format 4)."""
    starts = cards.column("valid_from_at").to_pylist()
    published = cards.column("occurred_at").cast(pa.int64()).to_pylist()
    refused = layout.refused_late(starts, published)
    in_force, ip, ig = layout.card_integrals(
        cards.column("pool_id").to_pylist(),
        starts,
        cards.column("price_per_vcpu_h_eur_micros").to_pylist(),
        cards.column("guaranteed_price_per_vcpu_h_eur_micros").to_pylist(),
        refused,
    )
    columns = [pa.array(refused, pa.bool_()), pa.array(in_force, pa.bool_()),
               pa.array(ip, layout.INTEGRAL_TYPE), pa.array(ig, layout.INTEGRAL_TYPE)]  # fmt: skip
    return pa.Table.from_arrays(
        [*cards.select(layout.RATE_CARDS_SCHEMA_2.names).columns, *columns],
        schema=layout.RATE_CARDS_SCHEMA,
    )


def priced_table(events_path: Path, table: pa.Table | None = None) -> pa.Table:
    """The month's events of `layout.PRICED_TYPES`, in history order, without `avro`.
    `table`: the file's columns of `layout.PRICED_SCHEMA`, if read."""
    if table is None:
        table = pq.read_table(events_path, columns=layout.PRICED_SCHEMA.names)
    kept = pc.is_in(table.column("event_type"), value_set=pa.array(layout.PRICED_TYPES))
    return table.filter(kept).cast(layout.PRICED_SCHEMA)


def write_typed_files(
    events_path: Path, folder: Path, *, typed: bool = True, table: pa.Table | None = None
) -> dict[str, int]:
    """Write the files derived from `events_path` (`layout.DERIVED_FILES`) into `folder`; with
    `typed` false, only priced_events.parquet. `table`: the file's rows, if in memory. Returns
    their rows by name."""
    if table is None:
        read = pq.read_table(events_path, columns=layout.PRICED_SCHEMA.names)  # once, for all
    else:
        read = table.select(layout.PRICED_SCHEMA.names)
    tables = typed_tables(events_path, read) if typed else {}
    tables[layout.PRICED] = priced_table(events_path, read)
    rows = {}
    for name, derived in tables.items():
        pq.write_table(derived, folder / name, compression="zstd")
        rows[name] = derived.num_rows
    return rows


def _derived_files(read: MonthEvents, folder: str) -> dict[str, int]:
    """In a worker: `write_typed_files` from the month's rows as read (the columns
    events.parquet holds, in its order and row groups: the same files, byte for byte)."""
    table = read.table(layout.PRICED_SCHEMA.names)
    return write_typed_files(Path(folder) / layout.EVENTS, Path(folder), table=table)


def _file_entry(path: Path, rows: int | None, schema: pa.Schema | None) -> dict[str, Any]:
    data = path.read_bytes()
    entry: dict[str, Any] = {"sha256": layout.sha256_hex(data), "bytes": len(data)}
    if rows is not None:
        entry["rows"] = rows
    if schema is not None:
        entry["schema_sha256"] = layout.schema_fingerprint(schema)
    return entry


def check_over(month: str, now_us: int) -> None:
    """Refuse `month` unless it has ended by `now_us` (the wall clock, in microseconds): a
    month is written once, so an export before its end would seal it without the events still
    to come, and a later full export could never join the chain."""
    layout.check_month(month)
    _, end_us = layout.month_bounds_us(month)
    if now_us < end_us:
        raise ArchiveError(
            f"{month} is not over: it ends {iso(end_us)[:16].replace('T', ' ')} UTC, and a month "
            "is archived once, with all its events: export it once it has ended"
        )


def _month_events(
    path: Path,
    codec: Codec,
    month: str,
    *,
    history: Iterable[Positioned],
    records: Iterable[ArchiveRecord],
    read: MonthEvents | None,
    on_event: Callable[[int], None] | None,
) -> _EventsFile:
    """events.parquet of the events of `month` in `history`, `records` (in their order) or
    `read` (by worker processes, merged)."""
    start_us, end_us = layout.month_bounds_us(month)
    events = _EventsFile(path, codec)
    try:
        if read is not None:
            events.add_read(read)
            if on_event is not None:
                on_event(events.count)
        for origin, e in history:
            if start_us <= e.occurred_at < end_us:
                events.add(origin, e)
                if on_event is not None and events.count % 10_000 == 0:
                    on_event(events.count)
        add = events.add_record
        for record in records:
            if start_us <= record[0] < end_us:
                add(record)
                if on_event is not None and events.count % 10_000 == 0:
                    on_event(events.count)
    finally:
        events.close()
    return events


def export_month(
    storage: ArchiveStorage,
    signer: Signer,
    *,
    region: str,
    month: str,
    history: Iterable[Positioned] = (),
    records: Iterable[ArchiveRecord] = (),
    reading: MonthReading | None = None,
    cost_lines: pa.Table,
    workdir: Path,
    now_us: int,
    on_event: Callable[[int], None] | None = None,
    audit: bytes | None = None,
) -> Exported:
    """Write `month` of `region` to the archive: `records` is the region's history in order
    as the log holds it (`merged_records`), or `history` the same as envelopes, or `reading`
    the month read by worker processes (one of the three; events of other months are skipped
    or not read), `cost_lines` the ledger's lines of the month,
    `audit` the month's capacity actions (`replay.archive.audit.audit_lines`; None: none
    exported, as before ADR-25's audit record); the month must be over by `now_us`
    (`check_over`)."""
    started = time.monotonic()
    check_over(month, now_us)
    months = archived_months(storage, region)
    if month in months:
        completed = complete_head(storage, signer, region, month)
        if completed is not None:
            return completed
        raise ArchiveError(
            f"{month} of region {region} is already archived in {storage.describe()}; a month is "
            f"written once: check it with `spotcap archive verify --month {month}`"
        )
    later = [m for m in months if m > month]
    if later:
        raise ArchiveError(
            f"the archive of region {region} already goes on to {later[-1]}; months are archived "
            f"in order, so {month} can no longer join the chain"
        )
    previous = months[-1] if months else None
    if previous is not None and previous != layout.previous_month(month):
        raise ArchiveError(
            f"the archive of region {region} ends at {previous}: archive "
            f"{layout.previous_month(month)} first (months are chained in order)"
        )
    chain_before: dict[str, Any] = {"size": 0, "root": None, "frontier": []}
    previous_sha: str | None = None
    if previous is not None:
        previous_bytes = storage.read(layout.key(region, previous, layout.MANIFEST))
        previous_sha = layout.sha256_hex(previous_bytes)
        chain_before = json.loads(previous_bytes)["chain"]

    start_us, end_us = layout.month_bounds_us(month)
    workdir.mkdir(parents=True, exist_ok=True)
    codec = Codec()
    old_size = int(chain_before["size"])
    old_frontier = [bytes.fromhex(h) for h in chain_before["frontier"]]
    read = trees = derived = None
    if reading is not None:
        # While this process writes events.parquet, one worker writes the files derived from
        # it (from the same rows in the same order) and another hashes the trees.
        read = reading.events()
        derived = reading.in_worker(_derived_files, str(workdir))
        trees = reading.trees(old_size, old_frontier)
    events = _month_events(workdir / layout.EVENTS, codec, month, history=history,
                           records=records, read=read, on_event=on_event)  # fmt: skip
    pq.write_table(cost_lines, workdir / layout.COST_LINES, compression="zstd")
    typed_rows = (
        write_typed_files(workdir / layout.EVENTS, workdir) if derived is None else derived.result()
    )
    (workdir / layout.SCHEMA).write_bytes(layout.canonical_json(codec.schema))
    audit_files: dict[str, Any] = {}
    if audit is not None:
        (workdir / layout.AUDIT).write_bytes(audit)
        audit_files[layout.AUDIT] = _file_entry(workdir / layout.AUDIT, audit.count(b"\n"), None)

    if trees is None:
        root, (chain_size, chain_root, proof, frontier) = (
            root_of(events.leaves),
            chained(old_size, old_frontier, events.leaves),
        )
    else:
        root, (chain_size, chain_root, proof, frontier) = trees()
    manifest: dict[str, Any] = {
        "format": layout.FORMAT,
        "region": region,
        "month": month,
        "time_range": {
            "from": iso(start_us),
            "to": iso(end_us),
            "first_event_at": iso(events.first_us) if events.first_us is not None else None,
            "last_event_at": iso(events.last_us) if events.last_us is not None else None,
        },
        "files": {
            layout.EVENTS: _file_entry(workdir / layout.EVENTS, events.count, layout.EVENTS_SCHEMA),
            layout.COST_LINES: _file_entry(
                workdir / layout.COST_LINES, cost_lines.num_rows, cost_lines.schema
            ),
            **{
                name: _file_entry(workdir / name, rows, layout.DERIVED_SCHEMAS[name])
                for name, rows in typed_rows.items()
            },
            layout.SCHEMA: _file_entry(workdir / layout.SCHEMA, None, None),
            **audit_files,
        },
        "events": {
            "count": events.count,
            "topics": sorted(events.topics),
            "avro_headers": events.fingerprints,  # C3 01 + writer schema fingerprint
        },
        "merkle": {"leaf": layout.LEAF, "size": events.count, "root": root.hex()},
        "chain": {
            "previous_month": previous,
            "previous_manifest_sha256": previous_sha,
            "previous_size": int(chain_before["size"]),
            "previous_root": chain_before["root"],
            "size": chain_size,
            "root": chain_root.hex(),
            "consistency_proof": [h.hex() for h in proof],
            "frontier": [h.hex() for h in frontier],
        },
        "retention": {
            "mode": "COMPLIANCE",
            "retain_until": iso(int(layout.retain_until(month).timestamp()) * 1_000_000),
        },
        "signing": {"algorithm": "ed25519", "key_id": signer.key_id},
    }
    manifest_bytes = layout.canonical_json(manifest)
    (workdir / layout.MANIFEST).write_bytes(manifest_bytes)
    (workdir / layout.SIGNATURE).write_bytes(signer.sign(manifest_bytes))
    # The manifest and its signature last: a month without them is not archived (a retry
    # after a crash finds the month absent and writes it again).
    _put_month(storage, region, month, (*layout.DATA_FILES, *audit_files), workdir=workdir)
    # Then the head names this month as the newest (its signature first: a head is read with
    # its signature, and a head newer than its signature fails verify rather than passing).
    _put_head(storage, signer, region, month, manifest_bytes, workdir=workdir)
    return Exported(
        region,
        month,
        events.count,
        cost_lines.num_rows,
        root.hex(),
        chain_size,
        layout.sha256_hex(manifest_bytes),
        time.monotonic() - started,
    )


def _put_month(
    storage: ArchiveStorage, region: str, month: str, names: tuple[str, ...], *, workdir: Path
) -> None:
    """Store the month's files `names`, then its manifest and signature (last: a month without
    them is not archived, and an export run again writes it)."""
    until = layout.retain_until(month)
    try:
        for name in (*names, layout.MANIFEST, layout.SIGNATURE):
            storage.put(layout.key(region, month, name), workdir / name, until)
    except ArchiveError as error:
        raise ArchiveError(
            f"{error}; {month} is not archived (its signed manifest is written last): run "
            f"`spotcap archive export --month {month}` again once the archive answers, and it "
            "writes the month (what this run stored is not stored twice)"
        ) from error


def _put_head(
    storage: ArchiveStorage,
    signer: Signer,
    region: str,
    month: str,
    manifest: bytes,
    *,
    workdir: Path,
) -> None:
    """Write the head naming `month` (its signature first: a head is read with its signature,
    and a head newer than its signature fails verify rather than passing)."""
    head = layout.head_of(region, month, manifest)
    (workdir / layout.HEAD).write_bytes(head)
    (workdir / layout.HEAD_SIGNATURE).write_bytes(signer.sign(head))
    until = layout.retain_until(month)
    try:
        for name in (layout.HEAD_SIGNATURE, layout.HEAD):
            storage.put(layout.head_key(region, name), workdir / name, until)
    except ArchiveError as error:
        raise ArchiveError(
            f"{error}; {month} is archived but the archive's signed head does not name it yet: "
            f"run `spotcap archive export --month {month}` again once the archive answers, and "
            "it writes the head"
        ) from error


def head_left_behind(
    storage: ArchiveStorage, public_key: Any, region: str, month: str
) -> bytes | None:
    """`month`'s manifest when an export of it stopped after the manifest and before the head
    was complete: `month` is the newest archived month, its manifest signed by `public_key`,
    and either it is the first month and no head was written (or only the head's signature,
    for this month), or the head is, byte for byte,
    the one naming the month the manifest links back to, signed by that key for it (stopped
    before the head) or for `month` (stopped between the head's signature and the head).
    None otherwise: a complete head, or one changed (verify says so)."""
    months = archived_months(storage, region)
    if not months or months[-1] != month:
        return None
    try:
        manifest = storage.read(layout.key(region, month, layout.MANIFEST))
        signature = storage.read(layout.key(region, month, layout.SIGNATURE))
        previous = json.loads(manifest)["chain"]["previous_month"]
    except (ArchiveError, ValueError, KeyError, TypeError):
        return None
    if not _verifies(public_key, signature, manifest):
        return None
    if previous is None:  # a first month: its export stopped before the head was written
        if not storage.exists(layout.head_key(region, layout.HEAD_SIGNATURE)):
            return manifest
        if storage.exists(layout.head_key(region)):
            return None  # complete, or changed: verify says which
        try:  # stopped between the head's signature and the head
            head_signature = storage.read(layout.head_key(region, layout.HEAD_SIGNATURE))
        except ArchiveError:
            return None
        wanted = layout.head_of(region, month, manifest)
        return manifest if _verifies(public_key, head_signature, wanted) else None
    try:
        before = layout.head_of(
            region, previous, storage.read(layout.key(region, previous, layout.MANIFEST))
        )
        head = storage.read(layout.head_key(region))
        head_signature = storage.read(layout.head_key(region, layout.HEAD_SIGNATURE))
    except (ArchiveError, ValueError, KeyError, TypeError):
        return None
    if head != before:  # complete, or changed: not what a stopped export leaves
        return None
    wanted = layout.head_of(region, month, manifest)
    # Stopped before the head (the month before's, with its signature), or between the head's
    # signature (this month's already) and the head.
    if _verifies(public_key, head_signature, before) or _verifies(
        public_key, head_signature, wanted
    ):
        return manifest
    return None


def _verifies(public_key: Any, signature: bytes, data: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        public_key.verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def complete_head(
    storage: ArchiveStorage, signer: Signer, region: str, month: str
) -> Exported | None:
    """Write the head an export of `month` stopped before (`head_left_behind`); what that
    export archived (`Exported.completed_head`), or None when there is nothing to complete."""
    manifest = head_left_behind(storage, signer.public_key(), region, month)
    if manifest is None:
        return None
    with tempfile.TemporaryDirectory(prefix="spotcap-head-") as tmp:
        _put_head(storage, signer, region, month, manifest, workdir=Path(tmp))
    document = json.loads(manifest)
    files = document["files"]
    return Exported(
        region, month, int(document["events"]["count"]),
        int(files[layout.COST_LINES].get("rows", 0)), str(document["merkle"]["root"]),
        int(document["chain"]["size"]), layout.sha256_hex(manifest), 0.0, completed_head=True,
    )  # fmt: skip


def export_from_log(
    storage: ArchiveStorage,
    signer: Signer,
    *,
    log: EventLog,
    codec: Codec,
    region: str,
    stores: Stores,
    month: str,
    on_step: Callable[[str], None] | None = None,
    now_us: int | None = None,
    opener: Opener | None = None,
    workers: int | None = None,
) -> Exported:
    """`export_month` of `region`'s `month` from the log: the ledger is brought up to date
    first (so the month's cost lines are complete), then the history is read in its merged
    order. With `opener` (the log and codec for a child process), the history is read by
    `workers` processes (default: one per core, `replay.archive.columns`) while this one
    queries the cost lines. `on_step` hears what is being done, in words. The month must be
    over by `now_us` (default: the wall clock now)."""
    from projections.catchup import catch_up, open_writer  # the catch-up's libraries

    now_us = int(time.time() * 1_000_000) if now_us is None else now_us
    check_over(month, now_us)  # before the catch-up, which may take minutes
    completed = complete_head(storage, signer, region, month)  # nothing to read for that
    if completed is not None:
        return completed
    say = on_step or (lambda _: None)
    say("bringing the ledger up to date")
    catch_up(log, codec, region, open_writer(stores, "ledger"))
    with ExitStack() as stack:
        reading = None
        if opener is not None:
            reading = stack.enter_context(
                MonthReading(opener, log, region, month, topics=LEDGER_TOPICS, workers=workers)
            )
            say(f"reading the history for {month} in {reading.workers} processes")
        lines = month_cost_lines(stores.open_ledger(), month)
        say(f"reading the capacity actions of {month} from the audit topic")
        audit = audit_lines(read_audit(log, region), month)
        say(f"reading the history for {month}")
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="spotcap-export-"))
        return export_month(
            storage,
            signer,
            region=region,
            month=month,
            records=merged_records(log, codec, region, LEDGER_TOPICS) if reading is None else (),
            reading=reading,
            cost_lines=lines,
            workdir=Path(tmp),
            now_us=now_us,
            on_event=lambda n: say(f"archiving {month}: {n:,} events"),
            audit=audit,
        )
