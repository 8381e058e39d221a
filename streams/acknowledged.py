"""A partition's acknowledged end, kept beside its segments and fsynced with every append.

With each block it appends, a writer records in the file ``<topic>/<partition>/acknowledged``
the segment the block goes to and where the block begins and ends (bytes and offsets), and
fsyncs it together with the segment (in a thread kept for it, so the two device flushes
overlap and an append costs about what it did without the record) before `flush` returns. Everything
before the block's beginning was acknowledged; the block itself was if the segment holds all of
its bytes (a write that a crash cut short never reached its end, and was never acknowledged),
or if the record says so: once the block is acknowledged the writer marks it (without an
fsync of its own: a power loss within the kernel's writeback delay can lose the mark, and then
only the newest block, cut short on disk as well, would be taken for a torn write).

Recovery goes by this record, not by the segment's bytes: a torn write can only lie past the
acknowledged end, so bytes before it that do not read are damage to acknowledged records,
reported and never cut, and no offset below it is written again, whatever damage at rest did
to the segment's framing and sync markers.

One fixed-size record, overwritten in place (the file's size and block do not change, so an
`fdatasync` is a data write and no journal commit), with a CRC-32 so a changed byte is found.
"""

from __future__ import annotations

import os
import queue
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from streams.segment import fsync_dir

NAME = "acknowledged"
_MAGIC = b"SCA1"
# magic, segment base, the newest block's first byte and offset, its end byte and end offset,
# whether it was acknowledged
_FIELDS = struct.Struct("<4sqqqqq?")
_CRC = struct.Struct("<I")
SIZE = _FIELDS.size + _CRC.size


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """The newest block appended to the partition: bytes [start, position) of the segment whose
    base offset is `base`, offsets [start_offset, end_offset). Everything before it was
    acknowledged; it was too if the segment holds all of its bytes."""

    base: int
    start: int
    start_offset: int
    position: int
    end_offset: int
    acknowledged: bool = False

    def end(self, size: int) -> tuple[int, int]:
        """(byte, offset) of the acknowledged end, for the segment at `size` bytes: offsets
        below it are never written again, bytes before it are never cut."""
        if self.acknowledged or size >= self.position:
            return self.position, self.end_offset
        return self.start, self.start_offset


class UnreadableError(ValueError):
    """The record is there but does not read: changed on disk. The message says how."""


def path_of(directory: Path) -> Path:
    return directory / NAME


def read(directory: Path) -> Acknowledged | None:
    """The partition's newest block as recorded (None: no record, as in a log written before it
    was kept, or a partition never appended to). Raises UnreadableError when it is damaged."""
    try:
        data = path_of(directory).read_bytes()
    except FileNotFoundError:
        return None
    if not data:  # made by a first append that a crash cut short: it acknowledged nothing
        return None
    if len(data) != SIZE:
        raise UnreadableError(f"{len(data)} bytes where the record has {SIZE}")
    (crc,) = _CRC.unpack_from(data, _FIELDS.size)
    if zlib.crc32(data[: _FIELDS.size]) != crc:
        raise UnreadableError("checksum mismatch")
    magic, *fields = _FIELDS.unpack_from(data)
    if magic != _MAGIC:
        raise UnreadableError(f"starts {magic!r}, not {_MAGIC!r}")
    return Acknowledged(*fields)


def write(directory: Path, newest: Acknowledged, *, durably: bool = True) -> None:
    """Record the newest block (`durably`: returns after the fsync)."""
    fields = _FIELDS.pack(
        _MAGIC,
        newest.base,
        newest.start,
        newest.start_offset,
        newest.position,
        newest.end_offset,
        newest.acknowledged,
    )
    data = fields + _CRC.pack(zlib.crc32(fields))
    fd = os.open(path_of(directory), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        made = os.fstat(fd).st_size == 0
        os.pwrite(fd, data, 0)
        if durably:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    if made and durably:  # the file's name must survive a power loss too
        fsync_dir(directory)


class Recording:
    """`write` in the process's recording thread, while the caller writes and fsyncs the
    block (a thread kept for it: starting one per append cost more CPU than the write)."""

    def __init__(self, directory: Path, newest: Acknowledged) -> None:
        self.error: OSError | None = None
        self.done = threading.Event()
        _worker().put((directory, newest, self))

    def wait(self) -> OSError | None:
        """Returns once the record is durable; the error writing it raised, if it did."""
        self.done.wait()
        return self.error


_Job = tuple[Path, Acknowledged, Recording]
_jobs: queue.SimpleQueue[_Job] | None = None
_starting = threading.Lock()


def _worker() -> queue.SimpleQueue[_Job]:
    global _jobs  # noqa: PLW0603 (one recording thread per process, started on first use)
    with _starting:
        if _jobs is None:
            _jobs = queue.SimpleQueue()
            threading.Thread(
                target=_record, args=(_jobs,), name="spotcap-log-acknowledged", daemon=True
            ).start()
        return _jobs


def _record(jobs: queue.SimpleQueue[_Job]) -> None:
    while True:
        directory, newest, recording = jobs.get()
        try:
            write(directory, newest)
        except OSError as error:
            recording.error = error
        recording.done.set()


def _forget_worker() -> None:
    """A forked child has no recording thread: it starts its own."""
    global _jobs, _starting
    _jobs, _starting = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_worker)
