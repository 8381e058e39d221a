"""Find a segment's blocks by their framing, and the bytes between them that are not blocks.

A block is whole when its record count and byte size read, the body is all there and the
segment's sync marker follows it. Scanning reads only each block's first bytes and its sync
marker (never the bodies), so an index of a large log is cheap in time and memory. Where the
framing does not hold, the scanner looks for the next sync marker that a whole block follows
(as Kafka's log recovery and Avro readers resynchronise) and reports the bytes in between as a
gap; every whole block after the damage is still found. What follows the last whole block
without a sync marker is a tail: a write in progress, a write torn by a crash, or (when its
framing claims exactly the bytes that are there) a last block whose sync marker is damaged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from streams.segment import SYNC_SIZE, Header, first_record_holds, read_long

_CHUNK_BYTES = 64 * 1024
_SEARCH_BYTES = 1024 * 1024
# Damaged bytes up to this long are searched byte by byte for a whole block that ends at the
# sync marker closing them (when the damage took a block's size and its sync marker both);
# longer ones come from large blocks, which one damage cannot cross.
_BLOCK_SEARCH_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Frame:
    """A block whose framing is whole: bytes [position, end), records from `first` on."""

    position: int
    end: int
    first: int  # the first record's offset, as the body's first bytes say
    count: int  # the record count the framing says


@dataclass(frozen=True, slots=True)
class Gap:
    """Bytes [position, end) between whole blocks (or before the end of a finished segment)
    that are not a whole block: damaged framing."""

    position: int
    end: int
    what: str


@dataclass(frozen=True, slots=True)
class Tail:
    """Bytes [position, end) after the last whole block, not ended by a sync marker.

    `torn`: a prefix of a block (a write in progress, or one a crash cut short: the bytes
    were never acknowledged). Otherwise the framing claims exactly these bytes and only the
    sync marker is wrong: a last block damaged at rest.
    """

    position: int
    end: int
    torn: bool
    what: str
    first: int | None  # the offsets its framing names, when it reads that far
    count: int | None


class _Window:
    """Reads of a file through a buffer, so that scanning small blocks is not a read each."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self._handle = handle
        self.size = size
        self._start = 0
        self._buffer = b""

    def read(self, pos: int, n: int) -> bytes:
        """Up to `n` bytes at `pos` (fewer at the end of the file).

        Never past `size`, the size the scan began with: a writer may be appending, and a
        block must not be judged by bytes that arrived after the file's size was taken.
        """
        n = max(0, min(n, self.size - pos))
        offset = pos - self._start
        if offset >= 0 and offset + n <= len(self._buffer):
            return self._buffer[offset : offset + n]
        self._handle.seek(pos)
        if n > _CHUNK_BYTES:
            return self._handle.read(n)[:n]
        self._start = pos
        self._buffer = self._handle.read(min(_CHUNK_BYTES, self.size - pos))
        return self._buffer[:n]


@dataclass(frozen=True, slots=True)
class _Bad:
    what: str
    incomplete: bool  # the bytes end before the block they begin would
    claimed_end: int | None  # where the framing says the block ends
    first: int | None
    count: int | None


def _frame_at(window: _Window, pos: int, sync: bytes) -> Frame | _Bad:
    head = window.read(pos, 20)
    try:
        count, at = read_long(head, 0)
        size, at = read_long(head, at)
    except IndexError:
        return _Bad("the block's framing is cut short", True, None, None, None)
    except ValueError:
        return _Bad("the block's framing does not read", False, None, None, None)
    if count <= 0 or size < count:
        return _Bad(
            f"impossible framing ({count:,} records in {size:,} bytes)", False, None, None, None
        )
    body_at = pos + at
    end = body_at + size + SYNC_SIZE
    try:
        first, _ = read_long(window.read(body_at, 10), 0)
    except (IndexError, ValueError):
        first = None
    if end > window.size:
        return _Bad("the block is cut short", True, end, first, count)
    if window.read(end - SYNC_SIZE, SYNC_SIZE) != sync:
        return _Bad(
            "no sync marker where the block's framing says it ends", False, end, first, count
        )
    if first is None:
        return _Bad("the block's first offset does not read", False, end, first, count)
    return Frame(pos, end, first, count)


def _next_sync(window: _Window, pos: int, sync: bytes) -> int | None:
    """The position just past the first sync marker at or after `pos`, or None."""
    while pos < window.size:
        chunk = window.read(pos, _SEARCH_BYTES)
        found = chunk.find(sync)
        if found >= 0:
            return pos + found + SYNC_SIZE
        if pos + len(chunk) >= window.size:
            return None
        pos += len(chunk) - SYNC_SIZE + 1
    return None


def scan(
    handle: BinaryIO, *, start: int, size: int, header: Header
) -> tuple[list[Frame | Gap], int, Tail | None]:
    """The blocks and gaps of the segment bytes [start, size), the position scanned to (where
    a later scan resumes), and the tail after the last of them (None: the bytes end there).
    """
    window = _Window(handle, size)
    sync = header.sync
    found: list[Frame | Gap] = []
    pos = start
    while pos < size:
        frame = _frame_at(window, pos, sync)
        if isinstance(frame, Frame):
            found.append(frame)
            pos = frame.end
            continue
        resume = _resynchronise(window, pos, frame, header)
        if resume is None:
            return found, pos, _tail(window, pos, frame)
        found.append(Gap(pos, resume, frame.what))
        pos = resume
    return found, pos, None


def _resynchronise(window: _Window, pos: int, bad: _Bad, header: Header) -> int | None:
    """Where the next whole block starts after damaged framing at `pos` (None: none follows).

    Every block ends with the sync marker, so the damaged bytes end at the next one at the
    latest (a torn write, a prefix of one block, never holds one). If the damage hit only the
    sync marker, the next block starts where the framing says; if it hit the size and the
    sync marker both, a whole block may still end at the next sync marker, found by trying
    each byte as its start.
    """
    sync = header.sync
    after = _next_sync(window, pos, sync)
    claimed = bad.claimed_end
    if (
        claimed is not None
        and pos < claimed < (after or window.size)
        and isinstance(_frame_at(window, claimed, sync), Frame)
    ):
        return claimed
    if after is None or claimed == after or after - pos > _BLOCK_SEARCH_BYTES:
        return after
    return _block_ending_at(window, pos, after, header) or after


def _block_ending_at(window: _Window, pos: int, end: int, header: Header) -> int | None:
    """The first position in (pos, end) where a whole block starts that ends at `end` and
    whose first record passes its checksum."""
    data = window.read(pos, end - pos)
    for q in range(1, len(data) - SYNC_SIZE - 2):
        try:
            count, at = read_long(data, q)
            size, at = read_long(data, at)
        except (IndexError, ValueError):
            continue
        whole = 0 < count <= size and at + size + SYNC_SIZE == len(data)
        if whole and first_record_holds(data[q:], header):
            return pos + q
    return None


def _tail(window: _Window, pos: int, bad: _Bad) -> Tail:
    """The bytes after the last whole block: torn if they begin a block that the file ends
    before (or are all zero, as a crash can leave them); else whole blocks whose framing
    and sync markers are damaged."""
    size = window.size
    if bad.incomplete or _all_zero(window, pos):
        what = "an incomplete block after the last whole one (a write in progress or torn)"
        return Tail(pos, size, True, what, bad.first, bad.count)
    what = f"damaged last block ({bad.what})"
    return Tail(pos, size, False, what, bad.first, bad.count)


def _all_zero(window: _Window, pos: int) -> bool:
    while pos < window.size:
        chunk = window.read(pos, _SEARCH_BYTES)
        if chunk.strip(b"\0"):
            return False
        pos += len(chunk)
    return True
