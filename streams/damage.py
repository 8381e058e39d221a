"""What is wrong in the embedded log's files, said precisely: file, bytes, offsets, what."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Kinds of damage, as `spotcap log verify` names them.
HEADER = "header"  # a segment header that is not one this log wrote
FRAMING = "framing"  # bytes between whole blocks that are not a block
RECORDS = "records"  # records inside a whole block that fail their checksum or do not decode
TORN = "torn tail"  # an incomplete block at the end of a partition (a write cut short)
ACKNOWLEDGED = "acknowledged end"  # the partition's record of its acknowledged end


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes [start, end) of a segment that do not read, and the offsets they should have held:
    [first_offset, end_offset), `end_offset` None when nothing after them says where they end,
    `first_offset` None when they held no record (a header)."""

    topic: str
    partition: int
    path: Path
    start: int
    end: int
    first_offset: int | None
    end_offset: int | None
    kind: str
    what: str

    @property
    def offsets(self) -> str:
        """The offsets as a person reads them: "1,200-1,299", "1,200 on", "none"."""
        first, end = self.first_offset, self.end_offset
        if first is None or (end is not None and end <= first):
            return "none"
        if end is None:
            return f"{first:,} on"
        return f"{first:,}" if end == first + 1 else f"{first:,}-{end - 1:,}"

    def describe(self) -> str:
        return (
            f"{self.topic}[{self.partition}]: {self.path}: bytes {self.start:,}-"
            f"{max(self.start, self.end - 1):,} ({self.kind}): {self.what}; offsets {self.offsets}"
        )

    def lines(self, root: Path) -> str:
        """Two lines of `spotcap log verify`: where (the file under `root`), then what."""
        return (
            f"  {self.topic}[{self.partition}] {self.path.relative_to(root)}\n"
            f"      bytes {self.start:,}-{max(self.start, self.end - 1):,}, offsets "
            f"{self.offsets} ({self.kind}): {self.what}"
        )

    def as_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "file": str(self.path),
            "start_byte": self.start,
            "end_byte": self.end,
            "first_offset": self.first_offset,
            "end_offset": self.end_offset,
            "kind": self.kind,
            "what": self.what,
        }
