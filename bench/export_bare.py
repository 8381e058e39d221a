"""The bare reference of `bench/export.py`: a month's archive written with the libraries alone.

The partitions are shared among worker processes (as the project's export shares them): each
reads the embedded log's container files with fastavro (the same records) and each event's
Avro record, writes the payload as JSON, hashes the Merkle leaf and hands back an Arrow file;
meanwhile chdb gives the month's cost lines. One sort puts the rows in history order; pyarrow
writes the same Parquet files (the same columns, zstd, row groups of `BATCH_ROWS`): this
process events.parquet, a worker at the same time the typed and priced files from the same
Arrow files and order, as the project's export does; hashlib builds the same tree (in the other
worker); cryptography signs the manifest and the head. No module of the project
is imported: what the files must hold (the Parquet schemas, the Avro schema, the priced event
types) is handed in as data by the bench."""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import shutil
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

BATCH_ROWS = 50_000
HEAD_FIELDS = ("event_id", "event_type", "occurred_at", "recorded_at", "region", "key",
               "causation_id", "correlation_id", "producer")  # fmt: skip
TYPED = {"rate_cards.parquet": "rate_card", "usage.parquet": "usage_interval",
         "checkpoints.parquet": "checkpoint_written"}  # fmt: skip
LATENESS_US = 3600 * 1_000_000


@dataclass(frozen=True)
class Shapes:
    """What the files hold, as data: the Parquet schemas by file name, the envelope's Avro
    schema (logical types stripped, as the events hold them), the priced event types, the
    writer schema as envelope.avsc holds it."""

    schemas: dict[str, pa.Schema]
    avro_schema: dict[str, Any]
    priced_types: tuple[str, ...]
    avsc: dict[str, Any]


def _read(
    folders: list[tuple[str, int, str]],
    avro_schema: dict[str, Any],
    events_schema: pa.Schema,
    month: tuple[int, int],
    path: str,
) -> None:
    """In a worker: the partitions' records of the month, with each one's leaf, to an Arrow
    file at `path` (each partition's in offset order)."""
    schema = fastavro.parse_schema(avro_schema, _force=True)
    start, end = month
    encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=bytes.hex).encode
    rows = []
    for topic, number, folder in folders:
        for segment in sorted(Path(folder).glob("*.avro")):
            with segment.open("rb") as f:
                for r in fastavro.reader(f):
                    assert isinstance(r, dict)
                    data = r["value"]
                    e: Any = fastavro.schemaless_reader(
                        io.BytesIO(data[10:]), schema, None, return_record_name=True
                    )
                    if start <= e["occurred_at"] < end:
                        head = [e[f] for f in HEAD_FIELDS]
                        text = encode(e["payload"][1])
                        leaf = _leaf(e["event_id"], data)
                        rows.append((*head, topic, number, r["offset"], text, data, leaf))
    full = events_schema.append(pa.field("leaf", pa.binary(32)))
    table = pa.table(list(zip(*rows, strict=True)), schema=full) if rows else full.empty_table()
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, full) as writer:
        writer.write_table(table)


def _leaf(event_id: str, data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + bytes.fromhex(event_id.replace("-", "")) + data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _root(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    level = leaves
    while len(level) > 1:
        paired = [_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def _frontier_of(joined: bytes) -> list[bytes]:
    return _frontier([joined[i : i + 32] for i in range(0, len(joined), 32)])


def _frontier(leaves: list[bytes]) -> list[bytes]:
    out, start = [], 0
    for bit in reversed(range(len(leaves).bit_length())):
        if len(leaves) & (1 << bit):
            out.append(_root(leaves[start : start + (1 << bit)]))
            start += 1 << bit
    return out


def _cards(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rate cards sorted, with refused_late, in_force and the running integrals."""
    rows = rows.sort_by([("pool_id", "ascending"), ("valid_from_at", "ascending"),
                         ("occurred_at", "ascending"), ("event_id", "ascending")])  # fmt: skip
    pools = rows.column("pool_id").to_pylist()
    starts = rows.column("valid_from_at").to_pylist()
    published = rows.column("occurred_at").cast(pa.int64()).to_pylist()
    prices = rows.column("price_per_vcpu_h_eur_micros").to_pylist()
    guaranteed = rows.column("guaranteed_price_per_vcpu_h_eur_micros").to_pylist()
    n = len(pools)
    refused = [p - s > LATENESS_US for s, p in zip(starts, published, strict=True)]
    in_force = [False] * n
    kept = {(pools[i], starts[i]): i for i in range(n) if not refused[i]}
    for i in kept.values():
        in_force[i] = True
    ip, ig = [0] * n, [0] * n
    base_p = base_g = 0
    last: int | None = None
    for i in range(n):
        if i == 0 or pools[i] != pools[i - 1]:
            base_p = base_g = 0
            last = None
        if last is not None:
            ip[i] = base_p + (starts[i] - starts[last]) * prices[last]
            ig[i] = base_g + (starts[i] - starts[last]) * guaranteed[last]
        if in_force[i]:
            base_p, base_g, last = ip[i], ig[i], i
    extra = [pa.array(refused), pa.array(in_force), pa.array(ip, pa.decimal128(38, 0)),
             pa.array(ig, pa.decimal128(38, 0))]  # fmt: skip
    names = schema.names
    return pa.Table.from_arrays([*rows.select(names[: -len(extra)]).columns, *extra], schema=schema)


def _derived(paths: list[str], order: pa.Array, shapes: Shapes, workdir: str) -> None:
    """In a worker: the typed and priced files from the workers' files in history order
    (`order`), in the row groups of events.parquet."""
    priced_schema = shapes.schemas["priced_events.parquet"]
    read = pa.concat_tables(pa.ipc.open_file(pa.memory_map(p)).read_all() for p in paths)
    read = read.select(priced_schema.names).take(order)
    groups = [read.slice(i, BATCH_ROWS) for i in range(0, read.num_rows, BATCH_ROWS)]
    events = pa.concat_tables(groups) if groups else read
    for name, kind in TYPED.items():
        target = shapes.schemas[name]
        rows = events.filter(pc.equal(events.column("event_type"), kind))
        payloads = json.loads("[" + ",".join(rows.column("payload").to_pylist()) + "]")
        fields = [f for f in target if f.name not in ("refused_late", "in_force")]
        fields = [f for f in fields if not f.name.endswith("_integral_to_start")]
        columns: list[Any] = [rows.column("event_id"), rows.column("occurred_at")]
        columns += [pa.array([p[f.name] for p in payloads], f.type) for f in fields[2:]]
        table = pa.Table.from_arrays(
            [c.cast(f.type) for c, f in zip(columns, fields, strict=True)],
            schema=pa.schema(fields),
        )
        if name == "rate_cards.parquet":
            table = _cards(table, target)
        pq.write_table(table, Path(workdir) / name, compression="zstd")
    kept = pc.is_in(events.column("event_type"), value_set=pa.array(shapes.priced_types))
    priced = events.filter(kept).cast(priced_schema)
    pq.write_table(priced, Path(workdir) / "priced_events.parquet", compression="zstd")


def _canonical(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def export(  # noqa: PLR0915 (one pass, as a script would write it)
    log: Path,
    *,
    topics: list[str],
    ledger: Path,
    cost_sql: str,
    month: tuple[int, int],
    shapes: Shapes,
    key_pem: bytes,
    workdir: Path,
    where: Path,
    workers: int,
) -> int:
    """The month [month[0], month[1]) (microseconds) of the log's `topics` into `where`."""
    folders = [(topic, int(folder.name), str(folder)) for topic in topics
               for folder in sorted((log / topic).iterdir()) if folder.is_dir()]  # fmt: skip
    shares: list[list[tuple[str, int, str]]] = [[] for _ in range(workers)]
    sizes = [0] * workers
    size = {f: sum(p.stat().st_size for p in Path(f[2]).iterdir()) for f in folders}
    for item in sorted(folders, key=lambda f: -size[f]):  # each to the least loaded worker
        w = sizes.index(min(sizes))
        shares[w].append(item)
        sizes[w] += size[item]
    events_schema = shapes.schemas["events.parquet"]
    start, end = month
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    paths = [str(workdir / f"part-{w}.arrow") for w in range(workers)]
    futures = [pool.submit(_read, mine, shapes.avro_schema, events_schema, month, path)
               for mine, path in zip(shares, paths, strict=True)]  # fmt: skip
    import chdb.session  # the cost lines while the workers read

    session: Any = chdb.session.Session(str(ledger))  # type: ignore[no-untyped-call]
    try:
        got = session.query(cost_sql.format(s=start, e=end), "ArrowStream").bytes()
    finally:
        session.close()
    lines = pa.ipc.open_stream(got).read_all().cast(shapes.schemas["cost_lines.parquet"])
    for future in futures:
        future.result()
    read = pa.concat_tables(pa.ipc.open_file(pa.memory_map(p)).read_all() for p in paths)
    order = pc.sort_indices(read, [(c, "ascending") for c in
                                   ("occurred_at", "topic", "partition", "offset")])  # fmt: skip
    # The typed and priced files written by a worker while this process writes events.parquet
    # (from the same files and order), the tree hashed by the other.
    derived = pool.submit(_derived, paths, order, shapes, str(workdir))
    read = read.take(order)
    leaves = read.column("leaf").to_pylist()
    hashed = pool.submit(_frontier_of, b"".join(leaves))
    events = read.select(events_schema.names)
    writer = pq.ParquetWriter(workdir / "events.parquet", events_schema, compression="zstd")
    for i in range(0, events.num_rows, BATCH_ROWS):
        writer.write_table(events.slice(i, BATCH_ROWS))
    writer.close()
    pq.write_table(lines, workdir / "cost_lines.parquet", compression="zstd")
    (workdir / "envelope.avsc").write_bytes(_canonical(shapes.avsc))
    derived.result()
    for p in paths:
        Path(p).unlink()

    frontier = hashed.result()
    pool.shutdown()
    root = frontier[-1] if frontier else hashlib.sha256(b"").digest()
    for h in reversed(frontier[:-1]):
        root = _node(h, root)
    files = {}
    for path in sorted(workdir.iterdir()):
        data = path.read_bytes()
        files[path.name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    began = datetime.fromtimestamp(start / 1e6, UTC).isoformat()
    manifest = _canonical({"files": files, "merkle": {"root": root.hex(), "size": len(leaves)},
                           "frontier": [h.hex() for h in frontier], "month": began})  # fmt: skip
    key = load_pem_private_key(key_pem, None)
    assert isinstance(key, Ed25519PrivateKey)
    (workdir / "manifest.json").write_bytes(manifest)
    (workdir / "manifest.sig").write_bytes(key.sign(manifest))
    where.mkdir(parents=True, exist_ok=True)
    for path in sorted(workdir.iterdir()):
        shutil.copyfile(path, where / path.name)
    digest = hashlib.sha256(manifest).hexdigest()
    signed_head = _canonical({"manifest_sha256": digest, "root": root.hex()})
    (where / "head.sig").write_bytes(key.sign(signed_head))
    (where / "head.json").write_bytes(signed_head)
    kept = pq.read_metadata(where / "events.parquet").num_rows
    assert kept == len(leaves)
    return len(leaves)
