"""The month's events read from the log in worker processes, as columns, merged in history order.

An export's time is mostly each record's decode (fastavro), its payload as JSON and its Merkle
leaf: work that is the same for every record and independent of the others. Here the region's
partitions are shared among worker processes (spawned, each opening the log through an
`Opener`), each reading its partitions as `replay.archive.history` reads them (the same fast
path and the same fallback for older or damaged records) and handing back the month's rows as
an Arrow table (with each row's leaf hash) in a file of the work folder. The parent puts the
rows in `MergedHistory`'s order: when every partition's events are in event-time order (what
the log's writers give), a stable sort by (occurred_at, topic, partition, offset), which is
what merging the partitions gives; otherwise `heapq.merge` over every record's key, exactly
as `merged_records` merges. The same log gives the same events.parquet, byte for byte, and the
same leaves in the same order as the one-process export (tests/test_archive_records.py).

Who calls it: `replay.archive.export.export_from_log` (and the bench), which start the reading
first and query the ledger's cost lines while the workers read.
"""

from __future__ import annotations

import heapq
import multiprocessing
import os
import tempfile
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from projections.ledger.writer import LEDGER_TOPICS
from replay.archive import layout
from replay.archive.history import partition_records, payload_text
from replay.archive.merkle import Chained, Hash, chained, leaf_hash, root_of
from schemas.codec import Codec
from schemas.events import Envelope
from streams.children import pool_initializer
from streams.log import EventLog
from streams.topics import topic_name

R = TypeVar("R")
Opener = Callable[[], tuple[EventLog, Codec]]
"""Opens the log and makes the codec in a worker: picklable (a module-level function or a
`functools.partial` of one), as `sim.materialise.Opener`."""

Part = tuple[str, int, int]
"""A partition to read: topic, partition, end offset (exclusive)."""

Keys = dict[tuple[str, int], tuple[bytes, bytes, int]]
"""Per partition, the occurred_at and offset of every record read (int64 arrays as bytes) and
how many of them are the month's (its rows in the worker's file)."""
BATCH_ROWS = 50_000
"""Rows per batch: of a worker's file, and of the merged rows (events.parquet's row groups)."""

_SCHEMA = layout.EVENTS_SCHEMA.append(pa.field("leaf", pa.binary(32)))
_head_of_record = itemgetter(*Envelope.HEAD)


def read_parts(
    log: EventLog, codec: Codec, parts: Sequence[Part], month: str, path: Path
) -> tuple[list[bytes], Keys]:
    """Read `parts`, write their records of `month` to `path` (Arrow IPC, `_SCHEMA`, each
    partition's rows in its order, one partition after the other, in batches of `BATCH_ROWS`:
    a worker holds one batch); the Avro headers seen, and every record's key by partition."""
    start_us, end_us = layout.month_bounds_us(month)
    rows: list[tuple[Any, ...]] = []
    headers: set[bytes] = set()
    keys: Keys = {}
    leaf_data = layout.leaf_data
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as writer:
        for topic, partition, end in parts:
            occurred, offsets = array("q"), array("q")
            kept = 0
            for record in partition_records(log, codec, topic, partition, end):
                at, _, _, offset, data, fields = record
                occurred.append(at)
                offsets.append(offset)
                if start_us <= at < end_us:
                    kept += 1
                    headers.add(data[:10])
                    event_id = fields["event_id"]
                    rows.append((*_head_of_record(fields), topic, partition, offset,
                                 payload_text(fields["payload"][1]), data,
                                 leaf_hash(leaf_data(event_id, data))))  # fmt: skip
                    if len(rows) >= BATCH_ROWS:
                        writer.write_table(_table(rows))
                        rows = []
            keys[(topic, partition)] = (occurred.tobytes(), offsets.tobytes(), kept)
        if rows:
            writer.write_table(_table(rows))
    return sorted(headers), keys


def _table(rows: list[tuple[Any, ...]]) -> pa.Table:
    columns = zip(*rows, strict=True)
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, _SCHEMA, strict=True)], schema=_SCHEMA
    )


def _read_in_worker(
    opener: Opener, parts: Sequence[Part], month: str, path: Path
) -> tuple[list[bytes], Keys]:
    log, codec = opener()
    try:
        return read_parts(log, codec, parts, month, path)
    finally:
        log.close()


def share(parts: Sequence[Part], workers: int) -> list[list[Part]]:
    """`parts` among `workers`, each partition to the one with the fewest records so far
    (largest first), none empty."""
    loads: list[tuple[int, int, list[Part]]] = [(0, w, []) for w in range(workers)]
    for part in sorted(parts, key=lambda p: (-p[2], p[0], p[1])):
        load, w, mine = heapq.heappop(loads)
        mine.append(part)
        heapq.heappush(loads, (load + part[2], w, mine))
    return [mine for _, _, mine in sorted(loads, key=itemgetter(1)) if mine]


@dataclass(frozen=True)
class Where:
    """Where the month's rows are, picklable for a worker: each worker's file with the row
    counts of its partitions (in the file's order), and the partition (index among them all)
    of each row in history order."""

    files: list[tuple[str, list[int]]]
    order: pa.Array

    def open(self) -> MonthEvents:
        """The rows, memory-mapped (the page cache shares them between processes)."""
        parts: list[pa.Table] = []
        for path, counts in self.files:
            table = pa.ipc.open_file(pa.memory_map(path)).read_all()
            start = 0
            for rows in counts:
                parts.append(table.slice(start, rows))
                start += rows
        return MonthEvents(parts, self.order)


@dataclass
class MonthEvents:
    """The month's rows by partition (`layout.EVENTS_SCHEMA` and `leaf`, memory-mapped from
    the workers' files), the partition of each row in history order, and the Avro headers."""

    parts: list[pa.Table]
    order: pa.Array
    headers: set[bytes] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.order)

    def batches(self, names: Sequence[str], size: int = BATCH_ROWS) -> Iterator[pa.Table]:
        """The rows' columns `names` in history order, `size` rows at a time (each partition's
        rows come in its own order, so a batch takes a contiguous slice of each: memory for
        one batch, not the month)."""
        cursor = [0] * len(self.parts)
        for start in range(0, len(self.order), size):
            pids = self.order.slice(start, size)
            grouped = pc.sort_indices(pids)  # stable: by partition, each in its order
            slices = []
            for count in sorted(pids.value_counts().to_pylist(), key=itemgetter("values")):
                p, n = count["values"], count["counts"]
                slices.append(self.parts[p].select(names).slice(cursor[p], n))
                cursor[p] += n
            # Row q of the slices is row grouped[q] of the batch: take by the inverse.
            yield pa.concat_tables(slices).take(pc.sort_indices(grouped))

    def table(self, names: Sequence[str]) -> pa.Table:
        """The columns `names` of every row in history order, one chunk per `BATCH_ROWS`
        rows: the chunks of the same columns read back from events.parquet (one per row
        group), so that files derived from either are the same, byte for byte."""
        chunks = [b.combine_chunks() for b in self.batches(names)]
        return pa.concat_tables(chunks) if chunks else _SCHEMA.empty_table().select(names)

    @cached_property
    def leaves(self) -> list[bytes]:
        """Each row's Merkle leaf hash, in order."""
        return [h for t in self.batches(["leaf"]) for h in t.column("leaf").to_pylist()]


def _trees_of(where: Where, old_size: int, old_frontier: list[Hash]) -> tuple[Hash, Chained]:
    """In a worker: the month's tree head and the chain extended by its leaves."""
    leaves = where.open().leaves
    chain = chained(old_size, old_frontier, leaves)
    # A first month: the chain is the month's tree (RFC 9162 MTH), hashed once.
    return (chain[1] if old_size == 0 else root_of(leaves)), chain


def _call_with(where: Where, work: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return work(where.open(), *args)


def _in_order(occurred: bytes) -> bool:
    """Whether the int64 values in `occurred` never decrease."""
    values = pa.Array.from_buffers(pa.int64(), len(occurred) // 8, [None, pa.py_buffer(occurred)])
    return len(values) < 2 or bool(pc.all(pc.greater_equal(values[1:], values[:-1])).as_py())


def _merged_order(
    parts: list[pa.Table], names: list[tuple[str, int]], keys: Keys, month: str
) -> pa.Array:
    """The partition (its index in `parts`) of each of the month's rows, in `MergedHistory`'s
    order."""
    if all(_in_order(occurred) for occurred, _, _ in keys.values()):
        # Sorted partitions merge as one sort does (no two rows share a key).
        columns = ("occurred_at", "topic", "partition", "offset")
        # The parts' chunks as they are (a list of chunked arrays would go through Python).
        chunked = {
            c: pa.chunked_array(
                [a for t in parts for a in t.column(c).chunks], _SCHEMA.field(c).type
            )
            for c in columns
        }
        part = [pa.repeat(pa.scalar(i, pa.int32()), t.num_rows) for i, t in enumerate(parts)]
        table = pa.table({**chunked, "part": pa.chunked_array(part, pa.int32())})
        order = pc.sort_indices(table, [(c, "ascending") for c in columns])
        return table.column("part").combine_chunks().take(order)
    # A partition out of event-time order: merge every record's key as `merged_records` does
    # (heapq.merge of the partitions' heads), and keep the month's rows in that order.
    start_us, end_us = layout.month_bounds_us(month)
    streams = []
    for i, name in enumerate(names):
        occurred, offsets, _ = keys[name]
        pairs = zip(array("q", occurred), array("q", offsets), strict=True)
        streams.append([(at, *name, offset, i) for at, offset in pairs])
    merged = [k[4] for k in heapq.merge(*streams) if start_us <= k[0] < end_us]
    return pa.array(merged, pa.int32())


class MonthReading:
    """The month's events of `region` being read by `workers` processes (started at once);
    `events()` waits for them and merges. Use as a context manager (the pool and the work
    folder go with it)."""

    def __init__(
        self,
        opener: Opener,
        log: EventLog,
        region: str,
        month: str,
        *,
        topics: Sequence[str] = LEDGER_TOPICS,
        workers: int | None = None,
    ) -> None:
        layout.check_month(month)
        self.month = month
        parts = [
            (name, n, end)
            for name in (topic_name(region, t) for t in topics)
            for n, end in sorted(log.end_offsets(name).items())
            if end > 0
        ]
        shares = share(parts, max(1, workers or os.cpu_count() or 1))
        self.workers = len(shares)
        self._folder = tempfile.TemporaryDirectory(prefix="spotcap-export-read-")
        self._paths = [Path(self._folder.name) / f"{w}.arrow" for w in range(len(shares))]
        self._pool = ProcessPoolExecutor(  # workers that end with this process, even killed
            max(1, len(shares)), mp_context=multiprocessing.get_context("spawn"),
            initializer=pool_initializer, initargs=(os.getpid(),),
        )  # fmt: skip
        self._futures: list[Future[tuple[list[bytes], Keys]]] = [
            self._pool.submit(_read_in_worker, opener, mine, month, path)
            for mine, path in zip(shares, self._paths, strict=True)
        ]

    def events(self) -> MonthEvents:
        """Wait for the workers; the month's rows, memory-mapped, and their merged order."""
        headers: set[bytes] = set()
        keys: Keys = {}
        names: list[tuple[str, int]] = []
        files: list[tuple[str, list[int]]] = []
        for future, path in zip(self._futures, self._paths, strict=True):
            seen, theirs = future.result()
            headers.update(seen)
            keys.update(theirs)
            names.extend(theirs)
            files.append((str(path), [rows for _, _, rows in theirs.values()]))
        read = Where(files, pa.array([], pa.int32())).open()
        order = _merged_order(read.parts, names, keys, self.month)
        self._where = Where(files, order)
        return MonthEvents(read.parts, order, headers)

    def trees(
        self, old_size: int, old_frontier: Sequence[Hash]
    ) -> Callable[[], tuple[Hash, Chained]]:
        """The month's tree head and the chain extended by its leaves (in history order),
        hashed by a worker while this process writes the files; call the result for them.
        After `events()`."""
        done = self._pool.submit(_trees_of, self._where, old_size, list(old_frontier))
        return done.result

    def in_worker(self, work: Callable[..., R], *args: Any) -> Future[R]:
        """`work(events, *args)` in a worker, `events` the month's rows as `events()` gives
        them (without the headers): for what can be done beside this process's writing.
        `work` must be picklable (a module-level function). After `events()`."""
        return self._pool.submit(_call_with, self._where, work, args)

    def close(self) -> None:
        for future in self._futures:
            future.cancel()
        self._pool.shutdown(wait=True)
        self._folder.cleanup()

    def __enter__(self) -> MonthReading:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
