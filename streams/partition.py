"""One partition of the embedded log: an index of its blocks, and records read on demand.

The index keeps a few numbers per block (first offset, file position, end, record count),
never the records: a reader reads a block's bytes when it reaches it and keeps only the last
block it decoded, so reading a log of any length takes the same memory.

Damage at rest (Kafka's log recovery is the model) costs only what is damaged and is never
silent. A reader that meets bytes that do not read reports them (`Damage`: file, byte range,
the offsets they should have held; a logged warning), hands the consumer one record carrying
`CORRUPT_HEADER` for them (the decoding reader dead-letters it), and goes on at the next whole
block, so every intact record after the damage comes with its own offset. A writer, on its
first append to the partition, cuts back only a torn tail of the partition's newest segment
(a write that a crash cut short, never acknowledged), keeps the bytes it cut and says so, and
starts a new segment after damage it cannot cut, at an offset past anything the damaged bytes
can have held, so an acknowledged offset is never reused. What was acknowledged is known apart
from the segment's bytes (`streams.acknowledged`, fsynced with each append): a tail that begins
before the acknowledged end is damage, never a torn write, and no offset below that end is
written again. The names of the segment files (their base offsets) are the floor of every
offset: damage inside a file cannot lower them.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from streams import acknowledged
from streams.acknowledged import Acknowledged, UnreadableError
from streams.damage import ACKNOWLEDGED, FRAMING, HEADER, RECORDS, TORN, Damage
from streams.log import CORRUPT_HEADER, Record
from streams.segment import (
    MAX_DAMAGED_VALUE_BYTES,
    MIN_RECORD_BYTES,
    Columns,
    DecodedBlock,
    Header,
    SegmentHeaderError,
    assumed_header,
    corrupt_record,
    decode_block,
    first_record_holds,
    frame_rows,
    header_bytes,
    new_segment,
    read_header,
)
from streams.segment_scan import Frame, Gap, Tail, scan

_LOG = logging.getLogger("spotcap.log.embedded")
FRAME, GAP = 0, 1
# A torn-looking tail that has not changed for this long is not a write in progress.
STALE_TAIL_S = 5.0
QUARANTINE = "_quarantine"


@dataclass(slots=True)
class Extent:
    """One entry of a segment's index, as `spotcap log verify` and repair see it."""

    kind: int  # FRAME or GAP
    lo: int  # the first offset it holds (or should have held)
    hi: int | None  # the next extent's first offset (None: the newest bytes of the partition)
    position: int
    end: int
    count: int


@dataclass(frozen=True, slots=True)
class SegmentView:
    """One segment as `spotcap log repair` sees it."""

    path: Path
    base: int
    header: Header
    header_damage: str | None  # what is wrong with the header on disk (None: it reads)
    tail: Tail | None  # an incomplete block at its end (a write in progress or torn)
    extents: list[Extent]


@dataclass(slots=True)
class _Segment:
    base: int
    path: Path
    header: Header | None = None
    header_damage: str | None = None
    inode: int = 0
    scanned: int = 0  # file position up to which the bytes are indexed
    size: int = -1  # the file's size when last scanned
    expected: int = 0  # the offset the next block should start at
    floor: int = 0  # a trusted block's first offset must be at least this
    los: array[int] = field(default_factory=lambda: array("q"))
    positions: array[int] = field(default_factory=lambda: array("q"))
    ends: array[int] = field(default_factory=lambda: array("q"))
    counts: array[int] = field(default_factory=lambda: array("q"))
    kinds: bytearray = field(default_factory=bytearray)
    whats: dict[int, str] = field(default_factory=dict)  # gap index -> what is wrong
    tail: Tail | None = None
    tail_seen: tuple[int, float] = (0, 0.0)  # (size, when first seen) of the current tail
    sealed: bool = False

    def __len__(self) -> int:
        return len(self.los)

    def reset(self) -> None:
        """Forget the index (the file was replaced): it is read again from its start."""
        fresh = _Segment(self.base, self.path)
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(fresh, name))


class Partition:
    """One partition's segments, indexed incrementally as they grow."""

    def __init__(
        self, topic: str, number: int, directory: Path, *, segment_bytes: int = 64 << 20
    ) -> None:
        self.topic = topic
        self.number = number
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._segments: list[_Segment] = []
        self._bases: list[int] = []
        self._reported: dict[tuple[str, int, int, str], Damage] = {}
        self._decoded: tuple[tuple[int, int, int], DecodedBlock] | None = None
        self._writer_ready = False
        self._roll = False
        self._next = 0
        self.refresh()

    @property
    def damage(self) -> list[Damage]:
        """Every damage this partition's reader has met so far, in the order met."""
        return list(self._reported.values())

    def _path(self, base: int) -> Path:
        return self.directory / f"{base:020d}.avro"

    # -- the index ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """Pick up new segments and new whole blocks written since the last look."""
        # `os.listdir`, not `Path.glob`: a reader at a partition's end looks again at every
        # poll, and pathlib's glob made a third of a small poll's cost (a `Path` a name).
        try:
            names = [n[:-5] for n in os.listdir(self.directory) if n.endswith(".avro")]
        except OSError:
            names = []
        bases = sorted(int(n) for n in names if n.isdigit())
        if bases != self._bases:
            known = {s.base: s for s in self._segments}
            self._segments = [known.get(b) or _Segment(b, self._path(b)) for b in bases]
            self._bases = bases
        for i, segment in enumerate(self._segments):
            if not segment.sealed:
                self._scan(segment, sealed=i + 1 < len(self._segments))

    def _scan(self, segment: _Segment, *, sealed: bool) -> None:
        """Index the bytes appended to a segment since the last scan (only those)."""
        try:
            seen = segment.path.stat()
            if (seen.st_ino, seen.st_size, sealed) == (segment.inode, segment.size, segment.sealed):
                # Nothing new: the common case of a reader that has caught up.
                self._note_stale_tail(segment)
                return
            handle = open(segment.path, "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            return
        with handle:
            stat = os.fstat(handle.fileno())
            if segment.inode and stat.st_ino != segment.inode:
                segment.reset()  # replaced by `spotcap log repair`: index it anew
                self._decoded = None
            segment.inode = stat.st_ino
            size = stat.st_size
            if segment.header is None:
                self._read_header(segment, handle.read(64 * 1024))
            if size == segment.size and sealed == segment.sealed:
                self._note_stale_tail(segment)
                return
            assert segment.header is not None
            found, resume, tail = scan(
                handle, start=segment.scanned, size=size, header=segment.header
            )
        for item in found:
            self._add(segment, item)
        segment.scanned = resume
        if tail is not None and (sealed or not tail.torn or segment.header_damage is not None):
            # Not a write in progress (nor one a writer will cut back): damage.
            self._tail_is_damage(segment, tail, tail.what)
            tail = None
        if tail is not None and (below := self._below_acknowledged(segment, tail, size)):
            self._tail_is_damage(segment, tail, below)
            tail = None
        if tail is not None and (segment.tail is None or segment.tail.end != tail.end):
            segment.tail_seen = (size, time.monotonic())
        segment.tail = tail
        segment.size = size
        segment.sealed = sealed

    def _tail_is_damage(self, segment: _Segment, tail: Tail, what: str) -> None:
        self._add(segment, Gap(tail.position, tail.end, what))
        segment.scanned = tail.end

    def _below_acknowledged(self, segment: _Segment, tail: Tail, size: int) -> str | None:
        """What is wrong with a torn-looking tail of the newest segment (scanned up to `size`)
        that begins before the partition's acknowledged end: acknowledged bytes damaged at
        rest, not a torn write (None: it may be one)."""
        try:
            known = acknowledged.read(self.directory)
        except UnreadableError:
            return None  # (a writer may be rewriting it right now; the writer decides)
        if known is None or known.base != segment.base:
            return None
        byte, offset = known.end(size)
        if tail.position >= byte:
            return None
        if byte > size:
            # Acknowledged after this scan took the size (a writer is appending), unless the
            # file is now shorter than what was acknowledged: cut on disk.
            try:
                now = segment.path.stat()
            except FileNotFoundError:
                return None
            if now.st_ino != segment.inode or now.st_size >= byte:
                return None
        return (
            "bytes that are not whole blocks before the partition's acknowledged end (byte "
            f"{byte:,}, offset {offset:,}): acknowledged records damaged on disk, not a torn "
            "write"
        )

    def _floor(self, known: Acknowledged | None) -> int:
        """The offset below which every offset was acknowledged (never written again)."""
        if known is None:
            return 0
        try:
            size = self._path(known.base).stat().st_size
        except FileNotFoundError:  # the segment is gone: everything it can have held counts
            return known.end_offset
        return known.end(size)[1]

    def _read_header(self, segment: _Segment, data: bytes) -> None:
        try:
            segment.header = read_header(data, segment.path)
        except SegmentHeaderError as error:
            segment.header = assumed_header(segment.path)
            segment.header_damage = str(error)
            what = f"unreadable header: {error}"
            self._report(
                segment,
                start=0,
                end=segment.header.start,
                first=None,
                end_offset=None,
                kind=HEADER,
                what=what,
            )
        segment.scanned = segment.header.start
        segment.expected = segment.floor = segment.base

    def _add(self, segment: _Segment, item: Frame | Gap) -> None:
        n = len(segment)
        if isinstance(item, Gap):
            lo = segment.expected
            segment.whats[n] = item.what
            self._append_extent(segment, GAP, lo, item)
            segment.expected = lo + 1  # it held one record at least (or the next says none)
            return
        lo = item.first
        if item.first != segment.expected:
            trusted = item.first >= segment.floor and self._first_record_holds(segment, item)
            if not trusted:
                lo = segment.expected
                if item.first < segment.floor and self._first_record_holds(segment, item):
                    what = (
                        f"a block of offsets from {item.first:,}, before offsets already in "
                        "the segment"
                    )
                    segment.whats[n] = what
                    self._append_extent(segment, GAP, lo, item)
                    segment.expected = lo + 1
                    return
        if n and lo < segment.los[n - 1]:
            # A gap before it said it held a record; this block, whose first record passed its
            # checksum, says it did not.
            segment.los[n - 1] = lo
        self._append_extent(segment, FRAME, lo, item)
        segment.expected = lo + item.count
        segment.floor = lo + 1

    @staticmethod
    def _append_extent(segment: _Segment, kind: int, lo: int, item: Frame | Gap) -> None:
        segment.los.append(lo)
        segment.positions.append(item.position)
        segment.ends.append(item.end)
        segment.counts.append(item.count if isinstance(item, Frame) else 0)
        segment.kinds.append(kind)

    def _first_record_holds(self, segment: _Segment, frame: Frame) -> bool:
        """Whether a block's first record passes its checksum (so its first offset is true)."""
        assert segment.header is not None
        data = _pread(segment.path, frame.position, min(frame.end, frame.position + (1 << 20)))
        return data is not None and first_record_holds(data, segment.header)

    def _report(
        self,
        segment: _Segment,
        *,
        start: int,
        end: int,
        first: int | None,
        end_offset: int | None,
        kind: str,
        what: str,
    ) -> Damage:
        key = (str(segment.path), start, end, what)
        found = self._reported.get(key)
        if found is None:
            found = Damage(
                self.topic, self.number, segment.path, start, end, first, end_offset, kind, what
            )
            self._reported[key] = found
            _LOG.warning("damaged embedded log segment: %s", found.describe())
        return found

    def _note_stale_tail(self, segment: _Segment) -> None:
        tail = segment.tail
        if tail is None or time.monotonic() - segment.tail_seen[1] < STALE_TAIL_S:
            return
        first = segment.expected if tail.first is None else tail.first
        what = f"{tail.what}, unchanged for {STALE_TAIL_S:g} s; the next writer cuts it back"
        self._report(
            segment,
            start=tail.position,
            end=tail.end,
            first=first,
            end_offset=None,
            kind=TORN,
            what=what,
        )

    # -- reading -----------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The offset after the newest record indexed (after damage at the end, a writer goes
        on further: `next_offset`)."""
        if not self._segments:
            return 0
        segment = self._segments[-1]
        n = len(segment)
        if not n:
            return segment.base
        lo = segment.los[n - 1]
        return lo + (segment.counts[n - 1] if segment.kinds[n - 1] == FRAME else 1)

    def read(self, offset: int, max_records: int) -> list[Record]:
        """Up to `max_records` records from `offset` on (as far as has been indexed)."""
        try:
            return self._read(offset, max_records)
        except _ReplacedError as replaced:
            index = self._segments.index(replaced.segment)
            replaced.segment.reset()
            self._decoded = None
            self._scan(replaced.segment, sealed=index + 1 < len(self._segments))
            return self._read(offset, max_records)

    def _read(self, offset: int, max_records: int) -> list[Record]:
        out: list[Record] = []
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for s in range(i, len(self._segments)):
            segment = self._segments[s]
            next_base = self._bases[s + 1] if s + 1 < len(self._bases) else None
            n = len(segment)
            k = max(0, bisect.bisect_right(segment.los, offset) - 1)
            while k < n:
                lo = segment.los[k]
                hi = segment.los[k + 1] if k + 1 < n else next_base
                if segment.kinds[k] == GAP:
                    if offset <= lo:  # the reader meets it
                        record = self._meet_gap(segment, k, hi)
                        if record is not None:
                            out.append(record)
                            if len(out) >= max_records:
                                return out
                elif offset < (lo + segment.counts[k] if hi is None else hi):
                    decoded = self._decode(segment, k, lo, hi)
                    if decoded is None:
                        raise _ReplacedError(segment)
                    records = decoded.records
                    at = bisect.bisect_left(records, offset, key=_offset_of)
                    out.extend(records[at : at + max_records - len(out)])
                    if len(out) >= max_records:
                        return out
                k += 1
        return out

    def _decode(self, segment: _Segment, k: int, lo: int, hi: int | None) -> DecodedBlock | None:
        key = (segment.base, k, segment.inode)
        if self._decoded is not None and self._decoded[0] == key:
            return self._decoded[1]
        data = _pread(segment.path, segment.positions[k], segment.ends[k], segment.inode)
        if data is None:
            return None
        assert segment.header is not None
        decoded = decode_block(
            data,
            position=segment.positions[k],
            first=lo,
            limit=hi,
            count=segment.counts[k],
            topic=self.topic,
            partition=self.number,
            header=segment.header,
        )
        for problem in decoded.problems:
            self._report(
                segment,
                start=problem.start,
                end=problem.end,
                first=problem.first_offset,
                end_offset=problem.end_offset if problem.end_offset is not None else hi,
                kind=RECORDS,
                what=problem.what,
            )
        if decoded.records and hi is None:
            # What the body holds decides where the partition ends, not a damaged count.
            segment.counts[k] = decoded.records[-1].offset + 1 - lo
        self._decoded = (key, decoded)
        return decoded

    def _meet_gap(self, segment: _Segment, k: int, hi: int | None) -> Record | None:
        """Report a gap; the record that stands for the offsets it held (None if it held none
        as far as the blocks around it tell)."""
        lo, position, end = segment.los[k], segment.positions[k], segment.ends[k]
        what = segment.whats.get(k, "damaged")
        self._report(
            segment, start=position, end=end, first=lo, end_offset=hi, kind=FRAMING, what=what
        )
        if hi is not None and hi <= lo:
            return None
        offsets = f"offset {lo:,} on" if hi is None else f"offsets {lo:,}-{hi - 1:,}"
        if hi == lo + 1:
            offsets = f"offset {lo:,}"
        why = (
            f"bytes {position:,}-{end - 1:,} of {segment.path} are not a whole block ({what}); "
            f"{offsets} could not be read"
        )
        value = _pread(segment.path, position, min(end, position + MAX_DAMAGED_VALUE_BYTES))
        return corrupt_record(self.topic, self.number, lo, value, why)

    # -- checking every block (`spotcap log verify`) -------------------------------------------

    def segments(self) -> list[SegmentView]:
        """The index as it stands: each segment with its blocks and gaps, in offset order."""
        out = []
        for s, segment in enumerate(self._segments):
            next_base = self._bases[s + 1] if s + 1 < len(self._bases) else None
            n = len(segment)
            extents = [
                Extent(
                    segment.kinds[k],
                    segment.los[k],
                    segment.los[k + 1] if k + 1 < n else next_base,
                    segment.positions[k],
                    segment.ends[k],
                    segment.counts[k],
                )
                for k in range(n)
            ]
            assert segment.header is not None
            out.append(
                SegmentView(
                    segment.path,
                    segment.base,
                    segment.header,
                    segment.header_damage,
                    segment.tail,
                    extents,
                )
            )
        return out

    def extents(self) -> list[tuple[Path, Extent]]:
        """Every block and gap of the partition with the segment it is in, in offset order."""
        return [(view.path, extent) for view in self.segments() for extent in view.extents]

    def decode_extent(self, view: SegmentView, extent: Extent) -> DecodedBlock | None:
        """The records of a block (not kept); None if its file was replaced since indexed."""
        data = _pread(view.path, extent.position, extent.end)
        if data is None or extent.kind != FRAME:
            return None
        return decode_block(
            data,
            position=extent.position,
            first=extent.lo,
            limit=extent.hi,
            count=extent.count,
            topic=self.topic,
            partition=self.number,
            header=view.header,
        )

    def check(
        self, on_bytes: Callable[[int], None] | None = None, *, settled: bool
    ) -> list[Damage]:
        """Read every block of the partition, checking every record; returns all damage found.

        `settled`: no writer is appending (the caller holds the writer lock), so an incomplete
        tail is a torn write, reported as damage, not a write in progress.
        """
        self.refresh()
        if settled:
            self._settle_tail()
        for s, segment in enumerate(self._segments):
            next_base = self._bases[s + 1] if s + 1 < len(self._bases) else None
            n = len(segment)
            for k in range(n):
                hi = segment.los[k + 1] if k + 1 < n else next_base
                if segment.kinds[k] == FRAME:
                    if self._decode(segment, k, segment.los[k], hi) is None:
                        raise _ReplacedError(segment)
                else:
                    self._meet_gap(segment, k, hi)
                if on_bytes is not None:
                    on_bytes(segment.ends[k] - segment.positions[k])
            tail = segment.tail
            if tail is not None and settled:
                first = segment.expected if tail.first is None else tail.first
                what = f"{tail.what}; the next writer cuts it back"
                self._report(
                    segment,
                    start=tail.position,
                    end=tail.end,
                    first=first,
                    end_offset=None,
                    kind=TORN,
                    what=what,
                )
        self._decoded = None
        return self.damage

    # -- writing (only under the writer lock) --------------------------------------------------

    def _prepare_to_write(self) -> None:
        """Before the first append: cut a torn tail, and find the next offset, past anything
        the newest segment holds or can have held."""
        self.refresh()
        self._writer_ready = True
        floor = self._floor(self._settle_tail())
        if not self._segments:
            self._next, self._roll = floor, True
            return
        segment = self._segments[-1]
        if segment.tail is not None and segment.tail.torn:
            self._cut_torn_tail(segment)
        self._next, clean_position = self._continue_from(segment)
        self._next = max(self._next, floor)
        after = segment.scanned - clean_position
        self._roll = segment.header_damage is not None or after > 0
        if after > 0:
            _LOG.warning(
                "%s[%d]: the newest segment %s holds damaged bytes after byte %s; new records go "
                "to a new segment from offset %s, so no offset they held is reused "
                "(see `spotcap log verify`)",
                self.topic,
                self.number,
                segment.path,
                f"{clean_position:,}",
                f"{self._next:,}",
            )

    def _settle_tail(self) -> Acknowledged | None:
        """The partition's acknowledged end, read where no write is under way (the writer
        lock is held), and the newest segment's torn-looking tail judged by it: one that
        begins before it is damage. A damaged record is reported, and then no tail is taken
        for a torn write (it may hold acknowledged records): the safe side."""
        why: str | None = None
        try:
            known = acknowledged.read(self.directory)
        except UnreadableError as error:
            known, why = None, str(error)
        segment = self._segments[-1] if self._segments else None
        tail = segment.tail if segment is not None else None
        if why is not None:
            path = acknowledged.path_of(self.directory)
            what = (
                f"the partition's record of its acknowledged end does not read ({why}); "
                "the next append writes it again"
            )
            key = (str(path), 0, acknowledged.SIZE, what)
            if key not in self._reported:
                found = Damage(
                    self.topic, self.number, path, 0, acknowledged.SIZE, None, None,
                    ACKNOWLEDGED, what,
                )  # fmt: skip
                self._reported[key] = found
                _LOG.warning("damaged embedded log: %s", found.describe())
        if segment is None or tail is None or not tail.torn:
            return known
        if why is not None:
            what = (
                "bytes that are not whole blocks at the end of the newest segment, kept: the "
                "partition's acknowledged end does not read, so they may hold acknowledged "
                "records"
            )
        else:
            what = self._below_acknowledged(segment, tail, segment.size) or ""
        if what:
            self._tail_is_damage(segment, tail, what)
            segment.tail = None
        return known

    def forget_writing(self) -> None:
        """Another writer may have appended since: look again before the next append."""
        self._writer_ready = False

    def next_offset(self) -> int:
        """The offset a writer appends at next: past every record the partition holds or its
        damaged bytes can have held (a torn tail, never acknowledged, does not count)."""
        self.refresh()
        try:
            floor = self._floor(acknowledged.read(self.directory))
        except UnreadableError:
            floor = 0
        if not self._segments:
            return floor
        return max(self._continue_from(self._segments[-1])[0], floor)

    def _continue_from(self, segment: _Segment) -> tuple[int, int]:
        """(the next offset, the end of the newest block that reads whole) of the newest
        segment, indexed up to `scanned`."""
        # The newest block that reads whole: every record passes its checksum and offsets run
        # from its first, so its end is an offset really held.
        clean_end = segment.base
        clean_position = segment.header.start if segment.header else 0
        seen = segment.base  # past the highest offset of any record that passed its checksum
        n = len(segment)
        for k in range(n - 1, -1, -1):
            if segment.kinds[k] != FRAME:
                continue
            lo = segment.los[k]
            decoded = self._decode(segment, k, lo, segment.los[k + 1] if k + 1 < n else None)
            good = [r for r in decoded.records if not _is_corrupt(r)] if decoded else []
            if good:
                seen = max(seen, good[-1].offset + 1)
            if decoded is not None and good and not decoded.problems and good[0].offset == lo:
                clean_end, clean_position = good[-1].offset + 1, segment.ends[k]
                break
        # Whatever the bytes after it held, they held no more records than they can encode.
        after = segment.scanned - clean_position
        return max(clean_end + -(-after // MIN_RECORD_BYTES), seen), clean_position

    def _cut_torn_tail(self, segment: _Segment) -> None:
        tail = segment.tail
        assert tail is not None
        data = _pread(segment.path, tail.position, tail.end) or b""
        kept = quarantine(
            self.directory.parent.parent,
            "torn",
            segment.path,
            position=tail.position,
            data=data,
            why=f"a torn write cut back by the writer ({tail.what})",
        )
        with open(segment.path, "r+b") as handle:
            handle.truncate(tail.position)
            handle.flush()
            os.fsync(handle.fileno())
        first = segment.expected
        offsets = f"offsets from {first:,}"
        if tail.first is not None and tail.count is not None:
            offsets = f"offsets {tail.first:,}-{tail.first + tail.count - 1:,}"
        _LOG.warning(
            "%s[%d]: cut %s bytes of a torn write off %s (%s, never acknowledged); the bytes "
            "are kept in %s",
            self.topic,
            self.number,
            f"{len(data):,}",
            segment.path,
            offsets,
            kept,
        )
        segment.tail = None
        segment.scanned = segment.size = tail.position

    def append(self, rows: Columns) -> list[Record]:
        """Write records (as columns: keys, values, headers, timestamps) as one block, fsync,
        and return them with their offsets."""
        if not self._writer_ready:
            self._prepare_to_write()
        segment = self._segments[-1] if self._segments else None
        first = self._next
        if (
            segment is None
            or self._roll
            or segment.scanned >= self.segment_bytes
            or segment.header is None
            or not segment.header.checked  # the earlier format: start anew
        ):
            # A new segment, made with this block in it (one fsync of the file, not two).
            path = self._path(first)
            header = read_header(header_bytes(path), path)
            base, start, segment = first, header.start, None
        else:
            assert segment.header is not None
            header, base, start = segment.header, segment.base, segment.scanned
        data, written = frame_rows(self.topic, self.number, first, rows, header.sync)
        end = start + len(data)
        # The block is recorded as the partition's newest while it is written (the two fsyncs
        # overlap): recovery never cuts what it finds whole in the segment, nor before it. (A
        # record of a segment not yet made, if that write fails or a crash comes first, leaves
        # its offsets taken: `_floor`.)
        newest = Acknowledged(base, start, first, end, first + len(written))
        recording = acknowledged.Recording(self.directory, newest)
        try:
            if segment is None:
                segment = self._new_segment(base, header, data)
                self._roll = False
            else:
                with open(segment.path, "ab") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
        except OSError:
            self.forget_writing()  # what the file holds now is read again before the next
            raise
        finally:
            failed = recording.wait()
        if failed is not None:
            self.forget_writing()
            raise failed
        acknowledged.write(self.directory, replace(newest, acknowledged=True), durably=False)
        # What was just written, indexed without reading it back.
        self._add(segment, Frame(start, end, first, len(written)))
        segment.scanned = segment.size = end
        self._next = first + len(written)
        return written

    def _new_segment(self, base: int, header: Header, first_block: bytes) -> _Segment:
        """Make the segment of offsets from `base`, holding `first_block`, and index its
        header (the caller indexes the block)."""
        path = self._path(base)
        new_segment(path, first_block)
        if self._segments:
            self._segments[-1].sealed = True
        segment = _Segment(base, path, inode=path.stat().st_ino, header=header)
        segment.scanned = header.start
        segment.expected = segment.floor = base
        self._segments.append(segment)
        self._bases.append(base)
        return segment


def quarantine(
    root: Path, run: str, segment: Path, *, position: int, data: bytes, why: str
) -> Path:
    """Keep `data` (bytes from `position` of `segment`) under ``<root>/_quarantine/<run>/``,
    durably, with a line in that folder's README saying what and why; returns the file."""
    relative = segment.relative_to(root)
    folder = root / QUARANTINE / run / relative.parent
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{segment.name}.{position}-{position + len(data)}.bin"
    with open(target, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    readme = root / QUARANTINE / run / "README"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(readme, "a") as handle:
        handle.write(
            f"{stamp} {target.relative_to(root / QUARANTINE / run)}: bytes {position:,}-"
            f"{position + len(data) - 1:,} of {relative}: {why}\n"
        )
        handle.flush()
        os.fsync(handle.fileno())
    return target


def _pread(path: Path, start: int, end: int, inode: int | None = None) -> bytes | None:
    """Bytes [start, end) of a file; None if it is gone or (given `inode`) was replaced."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if inode is not None and os.fstat(fd).st_ino != inode:
            return None
        return os.pread(fd, end - start, start)
    finally:
        os.close(fd)


def _offset_of(record: Record) -> int:
    return record.offset


def _is_corrupt(record: Record) -> bool:
    return any(k == CORRUPT_HEADER for k, _ in record.headers)


class _ReplacedError(Exception):
    """A segment file was replaced (by `spotcap log repair`) since it was indexed."""

    def __init__(self, segment: _Segment) -> None:
        super().__init__(str(segment.path))
        self.segment = segment


@contextmanager
def quiet_damage_warnings() -> Iterator[None]:
    """Hold back the readers' warnings about damage while a caller reports it itself (`spotcap
    log verify`, `repair`, `cat`): errors still show."""
    level = _LOG.level
    _LOG.setLevel(logging.ERROR)
    try:
        yield
    finally:
        _LOG.setLevel(level)
