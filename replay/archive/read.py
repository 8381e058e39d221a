"""Reading the archive back as history, for replay: each month's events file (and typed files,
from format 2 on), checked against the SHA-256 its manifest records, in month order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from replay.archive import layout
from replay.archive.export import archived_months
from replay.archive.storage import ArchiveError, ArchiveStorage
from schemas.codec import Codec
from schemas.events import Envelope

# Events a replay needs from before its first day: what sets the state later events are priced
# with (rate cards, contracts, losses).
STATE_TYPES = ("rate_card", "contract_published", "instance_lost")


@dataclass(frozen=True, slots=True)
class ArchivedMonth:
    """A month's local files: events.parquet, and its typed files if its format has them."""

    month: str
    events: Path
    rate_cards: Path | None = None
    usage: Path | None = None
    checkpoints: Path | None = None
    priced: Path | None = None


def archive_events_files(
    storage: ArchiveStorage, region: str, workdir: Path, last_month: str | None = None
) -> list[ArchivedMonth]:
    """The files of every archived month up to `last_month`, each checked against its
    manifest's SHA-256 (a changed file is refused: run `archive verify`)."""
    months = [m for m in archived_months(storage, region) if last_month is None or m <= last_month]
    if not months:
        raise ArchiveError(
            f"{storage.describe()} holds no month of region {region}: export one with "
            "`spotcap archive export --month YYYY-MM`"
        )
    out = []
    for month in months:
        manifest = json.loads(storage.read(layout.key(region, month, layout.MANIFEST)))
        paths = {}
        for name in (layout.EVENTS, *layout.DERIVED_FILES):
            if name not in manifest["files"]:
                continue  # a month of format 1
            path = storage.fetch(layout.key(region, month, name), workdir / month / name)
            digest = layout.sha256_hex(path.read_bytes())
            if digest != manifest["files"][name]["sha256"]:
                raise ArchiveError(
                    f"{month}/{name} does not match its manifest (SHA-256 {digest}); run "
                    f"`spotcap archive verify --month {month}` to see what changed"
                )
            paths[name] = path
        out.append(
            ArchivedMonth(
                month,
                paths[layout.EVENTS],
                paths.get(layout.RATE_CARDS),
                paths.get(layout.USAGE),
                paths.get(layout.CHECKPOINTS),
                paths.get(layout.PRICED),
            )
        )
    return out


def archive_history(
    files: list[tuple[str, Path]], first_month: str | None = None, batch_rows: int = 20_000
) -> Iterator[Envelope]:
    """The archived events in history order, decoded from their bytes; of months before
    `first_month`, only the events that set state (rate cards, contracts, losses)."""
    codec = Codec()
    for month, path in files:
        parquet = pq.ParquetFile(path)
        early = first_month is not None and month < first_month
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=["event_type", "avro"]):
            types = batch.column(0).to_pylist()
            for event_type, data in zip(types, batch.column(1).to_pylist(), strict=True):
                if early and event_type not in STATE_TYPES:
                    continue
                yield codec.decode(data)
