"""Check every byte of the embedded log (`spotcap log verify`) and move damaged parts aside
(`spotcap log repair`), saying what was done.

Verify reads every block of every segment and checks every record; it changes nothing. Repair
runs only when a person asks: it rewrites each damaged segment without its damaged parts (the
records around them keep their offsets; a block with some bad records keeps its good ones),
moves the parts it took out to ``<log>/_quarantine/repair-<time>/`` with a README line each
saying what and why, and, if the damage was at the end of a partition, starts an empty segment
past every offset the damaged bytes can have held, so no acknowledged offset is reused; the
partition's acknowledged end is then written again to match the rewritten segments (its offset
kept: the damaged records are lost, their offsets stay reserved).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams import acknowledged
from streams.acknowledged import Acknowledged
from streams.damage import Damage
from streams.embedded import CANNOT_WRITE, EmbeddedLog
from streams.log import CORRUPT_HEADER, LogError, Record
from streams.partition import FRAME, Extent, Partition, SegmentView, quarantine
from streams.segment import encode_block, fsync_dir, header_bytes, new_segment


@dataclass(slots=True)
class Checked:
    """What `verify` read, and the damage it found."""

    segments: int = 0
    blocks: int = 0
    records: int = 0
    bytes: int = 0
    damage: list[Damage] = field(default_factory=list)
    writer_active: bool = False  # another process was appending: its newest bytes not judged

    def as_json(self) -> dict[str, Any]:
        return {
            "segments": self.segments,
            "blocks": self.blocks,
            "records": self.records,
            "bytes": self.bytes,
            "writer_active": self.writer_active,
            "damage": [d.as_json() for d in self.damage],
        }

    def summary(self, root: Path, seconds: float) -> str:
        """What was checked under `root`, in words (`spotcap log verify`)."""
        said = (
            f"checked {self.segments:,} segments, {self.blocks:,} blocks, {self.records:,} "
            f"records ({self.bytes / 2**20:,.1f} MiB) under {root} in {seconds:,.1f} s"
        )
        if self.writer_active:
            said += "; another process is writing: the newest bytes of each partition not judged"
        return said


@dataclass(frozen=True, slots=True)
class Repaired:
    """One thing `repair` did (or, dry, would do) to one segment."""

    path: Path
    start: int
    end: int
    offsets: str
    what: str
    moved_to: Path | None  # where the bytes went (None: nothing moved, e.g. a new segment)

    def as_json(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "start_byte": self.start,
            "end_byte": self.end,
            "offsets": self.offsets,
            "what": self.what,
            "moved_to": str(self.moved_to) if self.moved_to else None,
        }

    def describe(self, root: Path) -> str:
        """One line (two when bytes were moved) of `spotcap log repair`, paths under `root`."""
        span = (
            f"bytes {self.start:,}-{max(self.start, self.end - 1):,}"
            if self.end > self.start
            else "new"
        )
        moved = f"\n      -> {self.moved_to.relative_to(root)}" if self.moved_to else ""
        return (
            f"  {self.path.relative_to(root)}: {span}, offsets {self.offsets}: {self.what}{moved}"
        )


def partitions(log: EmbeddedLog, topics: list[str] | None) -> Iterator[Partition]:
    for topic in topics if topics is not None else log.topics():
        for number in range(log.partitions_for(topic)):
            yield log.partition(topic, number)


@contextmanager
def _writer_if_free(log: EmbeddedLog) -> Iterator[bool]:
    """Hold the writer lock while checking if no one else does, so the newest bytes of each
    partition are final; yields whether it is held."""
    try:
        log.acquire_writer()
    except LogError:
        yield False
        return
    except OSError as error:
        if error.errno not in CANNOT_WRITE:
            raise
        # On a read-only file system nothing can append: every byte is final. Files this
        # process may not write may still be appended to by their owner.
        yield error.errno == errno.EROFS
        return
    try:
        yield True
    finally:
        log.close()


def verify(
    log: EmbeddedLog, topics: list[str] | None = None, on_bytes: Callable[[int], None] | None = None
) -> Checked:
    """Read every record of every segment (of `topics`, default all); change nothing."""
    checked = Checked()
    with _writer_if_free(log) as settled:
        checked.writer_active = not settled
        for partition in partitions(log, topics):
            checked.damage += partition.check(on_bytes, settled=settled)
            for view in partition.segments():
                checked.segments += 1
                checked.bytes += _size(view.path)
                frames = [e for e in view.extents if e.kind == FRAME]
                checked.blocks += len(frames)
                checked.records += sum(e.count for e in frames)
    return checked


def total_bytes(log: EmbeddedLog, topics: list[str] | None = None) -> int:
    """How many bytes of segments `verify` will read."""
    names = topics if topics is not None else log.topics()
    return sum(_size(p) for name in names for p in (log.root / name).glob("*/*.avro"))


def repair(
    log: EmbeddedLog, topics: list[str] | None = None, *, dry_run: bool = False
) -> list[Repaired]:
    """Move every damaged part of the log aside (of `topics`, default all); returns what was
    done (with `dry_run`, what would be, changing nothing). Needs the writer lock."""
    log.acquire_writer()
    try:
        run = time.strftime("repair-%Y%m%dT%H%M%SZ", time.gmtime())
        done: list[Repaired] = []
        for partition in partitions(log, topics):
            done += _repair_partition(log, partition, run, dry_run=dry_run)
        return done
    finally:
        log.close()


def repair_readme(done: list[Repaired], root: Path) -> Path | None:
    """The README saying what `repair` moved aside from the log at `root`, and why (None:
    nothing was moved)."""
    first = next((r.moved_to for r in done if r.moved_to), None)
    if first is None:
        return None
    quarantine = root / "_quarantine"
    return quarantine / first.relative_to(quarantine).parts[0] / "README"


def _repair_partition(
    log: EmbeddedLog, partition: Partition, run: str, *, dry_run: bool
) -> list[Repaired]:
    damage = partition.check(settled=True)
    if not damage:
        return []
    before = partition.next_offset()
    done: list[Repaired] = []
    damaged_paths = {d.path for d in damage}
    for view in partition.segments():
        if view.path in damaged_paths:
            done += _rewrite(log.root, partition, view, run, dry_run=dry_run)
    if dry_run:
        return done
    fresh = Partition(
        partition.topic,
        partition.number,
        partition.directory,
        segment_bytes=partition.segment_bytes,
    )
    if fresh.next_offset() < before:
        path = partition.directory / f"{before:020d}.avro"
        new_segment(path)
        done.append(
            Repaired(
                path,
                0,
                0,
                f"{before:,} on",
                "a new empty segment: new records start past every offset the damaged bytes "
                "can have held, so none is reused",
                None,
            )
        )
    # What is left of the newest segment is whole blocks: all of it acknowledged, and every
    # offset below `before` kept from reuse (a torn tail moved aside is past it, never was).
    bases = [int(p.stem) for p in partition.directory.glob("*.avro") if p.stem.isdigit()]
    if bases:
        size = _size(partition.directory / f"{max(bases):020d}.avro")
        newest = Acknowledged(max(bases), size, before, size, before, acknowledged=True)
        acknowledged.write(partition.directory, newest)
    return done


def _rewrite(
    root: Path, partition: Partition, view: SegmentView, run: str, *, dry_run: bool
) -> list[Repaired]:
    """Rewrite one segment without its damaged parts."""
    done: list[Repaired] = []
    pieces: list[bytes] = []

    def move(start: int, end: int, offsets: str, what: str) -> None:
        data = _pread(view.path, start, end)
        target = None
        if not dry_run:
            why = f"{what}; offsets {offsets}"
            target = quarantine(root, run, view.path, position=start, data=data, why=why)
        done.append(Repaired(view.path, start, end, offsets, what, target))

    start = view.header.start
    if view.header_damage is not None:
        move(0, start, "none", f"damaged header ({view.header_damage}); rewritten")
        pieces.append(header_bytes(view.path))
    else:
        pieces.append(_pread(view.path, 0, start))
    for extent in view.extents:
        if extent.kind != FRAME:
            move(extent.position, extent.end, _offsets(extent), "bytes that are not a whole block")
            continue
        decoded = partition.decode_extent(view, extent)
        if decoded is not None and not decoded.problems:
            pieces.append(_pread(view.path, extent.position, extent.end))
            continue
        good = [r for r in decoded.records if not _corrupt(r)] if decoded else []
        if not view.header.checked:
            good = []  # the earlier format has no checksum to re-encode with: move it whole
        problems = "; ".join(p.what for p in decoded.problems) if decoded else "unreadable"
        kept = f"{len(good):,} good records kept" if good else "no record kept"
        move(extent.position, extent.end, _offsets(extent), f"a damaged block ({problems}); {kept}")
        for records in _runs(good):
            pieces.append(encode_block(records, view.header.sync))
    if view.tail is not None:
        move(view.tail.position, view.tail.end, "none acknowledged", view.tail.what)
    if not dry_run:
        tmp = view.path.with_suffix(".repair")
        with open(tmp, "wb") as handle:
            for piece in pieces:
                handle.write(piece)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, view.path)
        fsync_dir(view.path.parent)
    return done


def _runs(records: list[Record]) -> Iterator[list[Record]]:
    """Records with consecutive offsets, in blocks (a block's offsets are consecutive)."""
    run: list[Record] = []
    for record in records:
        if run and record.offset != run[-1].offset + 1:
            yield run
            run = []
        run.append(record)
    if run:
        yield run


def _offsets(extent: Extent) -> str:
    end = extent.hi if extent.hi is not None else extent.lo + max(extent.count, 1)
    return f"{extent.lo:,}" if end <= extent.lo + 1 else f"{extent.lo:,}-{end - 1:,}"


def _corrupt(record: Record) -> bool:
    return any(k == CORRUPT_HEADER for k, _ in record.headers)


def _pread(path: Path, start: int, end: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(start)
        return handle.read(end - start)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
