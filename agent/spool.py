"""The spool: every step the agent takes, as one fsync'd JSON line, shipped when anyone listens.

A line is the event's Avro JSON form with the fingerprint of the schema it was written with, and
beside it what a shipper needs without parsing the event: the log topic, the key, the event id
and type, and the single-object binary record in base64 (what Vector puts on Kafka as is)::

    {"fingerprint":"9f0c...","topic":"eu-west-1.lifecycle","key":"i-0412",
     "event_id":"...","event_type":"drain_started","event":{...},"avro":"wwHx..."}

Files are segments ``spool-<seq>.ndjson`` appended in order and rotated at ``segment_bytes``.
A line counts as written only once ``fsync`` returned; a crash can leave the tail of the last
segment torn, which opening the spool cuts off (a torn line was never acknowledged) and readers
skip. The total is bounded by ``max_bytes``: segments a shipper has fully shipped go first, then
the oldest usage samples are dropped and counted; notice, drain, checkpoint and loss events are
never dropped, so in the worst case the bound is exceeded and said so. Vector's file source and
the embedded shipper read the same files (DESIGN.md §6).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import functools
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.avro_json import AvroJsonForm
from schemas.codec import Codec
from schemas.events import Envelope
from schemas.topics import topic_name

log = logging.getLogger(__name__)

SEGMENT = re.compile(r"^spool-(\d{8})\.ndjson$")
SHIPPED_FILE = "shipped.json"
DROPPABLE = frozenset({"usage_interval"})
"""Event types the bound may drop (oldest first); everything else is kept whatever it costs."""


def segment_name(seq: int) -> str:
    return f"spool-{seq:08d}.ndjson"


def segments(directory: Path) -> list[tuple[int, Path]]:
    """The spool's segments, oldest first."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            match = SEGMENT.match(entry.name)
            if match:
                found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


def spool_status(directory: Path) -> dict[str, Any]:
    """The spool's segments (name, bytes), their total and how far the embedded shipper got
    (`ShippedPosition`, None before its first batch): what `spotcap agent spool` shows."""
    found = [(path.name, path.stat().st_size) for _, path in segments(directory)]
    shipped = ShippedPosition.load(directory)
    return {
        "dir": str(directory),
        "segments": [{"name": name, "bytes": size} for name, size in found],
        "total_bytes": sum(size for _, size in found),
        "shipped": dataclasses.asdict(shipped) if shipped else None,
    }


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SpoolFullError(OSError):
    """The disk refused a line (ENOSPC or a short write); nothing of it was kept."""


@functools.cache
def _shared_form_and_codec() -> tuple[AvroJsonForm, Codec]:
    # Both are immutable once built and costly to build (schema parsing): one per process.
    return AvroJsonForm(), Codec(known_schemas=())


class LineEncoder:
    """Envelopes to spool lines (bytes ending in a newline)."""

    def __init__(self) -> None:
        self._form, self._codec = _shared_form_and_codec()
        self._fingerprint = f"{self._form.fingerprint:016x}"

    def line(self, envelope: Envelope) -> bytes:
        record = {
            "fingerprint": self._fingerprint,
            "topic": topic_name(envelope.region, type(envelope.payload).TOPIC),
            "key": envelope.key,
            "event_id": envelope.event_id,
            "event_type": envelope.event_type,
            "event": self._form.encode(envelope),
            "avro": base64.b64encode(self._codec.encode(envelope)).decode("ascii"),
        }
        return json.dumps(record, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


@dataclass(frozen=True, slots=True)
class SpoolLine:
    """One line read back: where it ends (the position after it) and its parsed object."""

    segment: int
    end_offset: int
    record: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ShippedPosition:
    """How far a shipper got: the next byte to read in segment `segment` (file `inode`)."""

    segment: int
    offset: int
    inode: int

    @classmethod
    def load(cls, directory: Path) -> ShippedPosition | None:
        try:
            data = json.loads((directory / SHIPPED_FILE).read_text())
            return cls(int(data["segment"]), int(data["offset"]), int(data["inode"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, directory: Path) -> None:
        """Atomically and durably (write, fsync, rename, fsync the folder)."""
        tmp = directory / f".{SHIPPED_FILE}.tmp"
        with tmp.open("w") as f:
            json.dump({"segment": self.segment, "offset": self.offset, "inode": self.inode}, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(directory / SHIPPED_FILE)
        _fsync_dir(directory)


class Spool:
    """Appends lines durably to the segments of one folder; bounded as the module says."""

    def __init__(self, directory: Path, *, segment_bytes: int, max_bytes: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        self.dropped_samples = 0
        self.over_bound = False
        self.torn_bytes_repaired = 0
        existing = segments(self.directory)
        self._sizes: dict[int, int] = {}
        for seq, path in existing:
            self._sizes[seq] = path.stat().st_size
        self._seq = existing[-1][0] if existing else 1
        if existing:
            self._repair_tail(existing[-1][1])
        self._fd = -1
        self._open(self._seq)

    # -- writing ----------------------------------------------------------------------------

    @property
    def total_bytes(self) -> int:
        return sum(self._sizes.values())

    def append(self, lines: list[tuple[bytes, bool]]) -> None:
        """Write `lines` (bytes, droppable) and fsync; raises OSError if they are not all kept.

        On failure the segment is cut back to where it was: a line is in the spool whole and
        durable, or not at all.
        """
        if not lines:
            return
        data = b"".join(line for line, _ in lines)
        self._reopen_if_removed()
        if self._sizes[self._seq] and self._sizes[self._seq] + len(data) > self.segment_bytes:
            self._rotate()
        before = self._sizes[self._seq]
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise SpoolFullError(errno.ENOSPC, f"short write ({written} of {len(data)} bytes)")
            os.fsync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, before)
            raise
        self._sizes[self._seq] = before + len(data)
        if self.total_bytes > self.max_bytes:
            self._enforce_bound()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- segments ---------------------------------------------------------------------------

    def _open(self, seq: int) -> None:
        path = self.directory / segment_name(seq)
        created = not path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        self._seq = seq
        self._sizes[seq] = os.fstat(self._fd).st_size
        if created:
            _fsync_dir(self.directory)

    def _rotate(self) -> None:
        self.close()
        self._open(self._seq + 1)

    def _reopen_if_removed(self) -> None:
        # A shipper (Vector's remove_after_secs) may delete a segment it has read to the end.
        if os.fstat(self._fd).st_nlink == 0:
            self._sizes.pop(self._seq, None)
            self.close()
            self._open(self._seq + 1)

    def _repair_tail(self, path: Path) -> None:
        """Cut a torn last line (a crash during an append: never acknowledged)."""
        size = path.stat().st_size
        if size == 0:
            return
        with path.open("rb+") as f:
            f.seek(max(0, size - 65536))
            tail = f.read()
            if tail.endswith(b"\n"):
                return
            cut = tail.rfind(b"\n")
            keep = size - len(tail) + cut + 1 if cut >= 0 else 0
            if cut < 0 and size > len(tail):
                keep = size - len(tail)  # a line longer than the window: keep what precedes
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
        self.torn_bytes_repaired += size - keep
        self._sizes[int(SEGMENT.match(path.name).group(1))] = keep  # type: ignore[union-attr]
        log.warning("spool %s: cut a torn last line of %d bytes", path.name, size - keep)

    def _enforce_bound(self) -> None:
        shipped = ShippedPosition.load(self.directory)
        for seq in sorted(self._sizes):
            if self.total_bytes <= self.max_bytes:
                return
            if shipped is not None and seq < shipped.segment and seq != self._seq:
                (self.directory / segment_name(seq)).unlink(missing_ok=True)
                del self._sizes[seq]
        if self.total_bytes > self.max_bytes and self._sizes.get(self._seq, 0):
            self._rotate()  # so that every segment with samples can be rewritten
        for seq in sorted(self._sizes):
            if self.total_bytes <= self.max_bytes:
                break
            if seq != self._seq:
                self._drop_samples(seq)
        over = self.total_bytes > self.max_bytes
        if over and not self.over_bound:
            log.warning(
                "spool holds %d bytes of events that are never dropped, over its bound of %d",
                self.total_bytes,
                self.max_bytes,
            )
        self.over_bound = over

    def _drop_samples(self, seq: int) -> None:
        path = self.directory / segment_name(seq)
        kept: list[bytes] = []
        dropped = 0
        with path.open("rb") as f:
            for line in f:
                if line.endswith(b"\n") and _event_type(line) in DROPPABLE:
                    dropped += 1
                else:
                    kept.append(line)
        if not dropped:
            return
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("wb") as f:
            f.writelines(kept)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        _fsync_dir(self.directory)
        self._sizes[seq] = sum(len(line) for line in kept)
        self.dropped_samples += dropped


def _event_type(line: bytes) -> str | None:
    try:
        value = json.loads(line).get("event_type")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def read_lines(
    directory: Path, start: ShippedPosition | None = None
) -> Iterator[tuple[SpoolLine, int]]:
    """Every whole line from `start` on, with the inode of its segment, oldest first.

    A segment rewritten since `start` was taken (another inode) is read again from its start:
    at-least-once, the consumer de-duplicates by event id. A torn or unreadable line is skipped
    and logged, never fatal.
    """
    for seq, path in segments(directory):
        if start is not None and seq < start.segment:
            continue
        try:
            f = path.open("rb")
        except FileNotFoundError:
            continue
        with f:
            inode = os.fstat(f.fileno()).st_ino
            offset = 0
            if start is not None and seq == start.segment and inode == start.inode:
                offset = start.offset
                f.seek(offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # being written, or torn by a crash
                offset += len(raw)
                try:
                    record = json.loads(raw)
                except ValueError:
                    log.warning("spool %s: skipping an unreadable line ending at %d", path, offset)
                    continue
                if isinstance(record, dict):
                    yield SpoolLine(seq, offset, record), inode
