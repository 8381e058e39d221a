"""A partition's acknowledged end, kept beside its segments and fsynced with every append.

A writer acknowledges a block only once its bytes are fsynced; then it records, in the file
``<topic>/<partition>/acknowledged``, the segment the block went to, the offset after it and the
byte it ends at, and fsyncs that too before `flush` returns. Recovery goes by this record, not
by the segment's bytes: a torn write can only lie past it (it is the last, unacknowledged
write), so bytes before it that do not read are damage to acknowledged records, reported and
never cut, and no offset below it is written again, whatever damage at rest did to the
segment's framing and sync markers.

One fixed-size record, overwritten in place (the file's size and block do not change, so an
`fdatasync` is a data write and no journal commit), with a CRC-32 so a changed byte is found.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from streams.segment import fsync_dir

NAME = "acknowledged"
_MAGIC = b"SCA1"
_FIELDS = struct.Struct("<4sqqq")  # magic, segment base, end offset, end byte
_CRC = struct.Struct("<I")
SIZE = _FIELDS.size + _CRC.size


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """Every offset below `end_offset` was acknowledged to a writer (or is kept from reuse
    after damage); the newest acknowledged block ends at byte `position` of the segment
    whose base offset is `base`."""

    base: int
    end_offset: int
    position: int


class UnreadableError(ValueError):
    """The record is there but does not read: changed on disk. The message says how."""


def path_of(directory: Path) -> Path:
    return directory / NAME


def read(directory: Path) -> Acknowledged | None:
    """The partition's acknowledged end (None: no record, as in a log written before it was
    kept, or a partition never appended to). Raises UnreadableError when it is damaged."""
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
    magic, base, end_offset, position = _FIELDS.unpack_from(data)
    if magic != _MAGIC:
        raise UnreadableError(f"starts {magic!r}, not {_MAGIC!r}")
    return Acknowledged(base, end_offset, position)


def write(directory: Path, acknowledged: Acknowledged) -> None:
    """Record the acknowledged end durably (returns after the fsync)."""
    fields = _FIELDS.pack(_MAGIC, acknowledged.base, acknowledged.end_offset, acknowledged.position)
    data = fields + _CRC.pack(zlib.crc32(fields))
    fd = os.open(path_of(directory), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        made = os.fstat(fd).st_size == 0
        os.pwrite(fd, data, 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if made:  # the file's name must survive a power loss too
        fsync_dir(directory)
