"""The checkpoint client: save a generation, restore the newest complete one, list, prune
(ADR-18, ADR-19).

One client checkpoints one unit of one workload into the workload's bucket:

    units/<unit>/generations/<generation>/<part>   sealed parts, written first
    units/<unit>/manifests/<generation>.json       the manifest, written last

A generation exists for readers once its manifest does, so a save killed at any point leaves
either the previous generations only or the new one whole. Each generation is sealed under a
data key of its own from the workload's key (`checkpoint.keys`); the manifest is authenticated
under it, each part is checked against the manifest's SHA-256 and opened chunk by chunk, and a
generation that fails any check is refused and the next older one tried. Every published
generation is reported to the node's agent (`Reporter`), which records ``checkpoint_written``.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from checkpoint.keys import KeyAccessError, KeyService
from checkpoint.manifest import (
    Manifest,
    ManifestError,
    PartEntry,
    check_name,
    manifest_mac,
    sign_manifest,
)
from checkpoint.retention import Retention, generations_to_prune, orphans
from checkpoint.sealing import SealError, seal, unseal
from checkpoint.store import Bucket
from schemas.checkpoints import Failed, Quarantined, Written

__all__ = [
    "CheckpointClient",
    "Generation",
    "NoValidGenerationError",
    "PartSource",
    "PruneReport",
    "Reporter",
    "Restored",
]

log = logging.getLogger(__name__)

PartSource = bytes | Path | BinaryIO
"""A part to save: its bytes, a file, or an open binary stream."""


class Reporter(Protocol):
    """Where published generations are told (the node's agent, `checkpoint.channel`)."""

    def report(self, message: Written | Failed | Quarantined) -> None: ...


class NoValidGenerationError(Exception):
    """Generations exist but none passed the checks; `refused` says why for each."""

    def __init__(self, unit_id: str, refused: list[tuple[int, str]]) -> None:
        why = "; ".join(f"generation {g}: {reason}" for g, reason in refused)
        super().__init__(f"unit {unit_id}: no generation can be restored ({why})")
        self.refused = refused


@dataclass(frozen=True, slots=True)
class Generation:
    """A published generation, as its manifest names it."""

    generation: int
    step: int
    created_at_us: int
    final: bool
    written_bytes: int
    """Stored bytes (sealed parts and the manifest): what the bucket holds for it."""
    duration_s: float | None = None
    """Seconds the save took, manifest included (known to the client that saved it)."""


@dataclass(frozen=True, slots=True)
class Restored:
    generation: int
    step: int
    manifest: Manifest
    parts: Mapping[str, bytes] = field(default_factory=dict)
    """The parts' bytes (restored without `into`)."""
    files: Mapping[str, Path] = field(default_factory=dict)
    """Where each part was written (restored `into` a folder)."""
    refused: tuple[tuple[int, str], ...] = ()
    """Newer generations that were refused, and why."""


@dataclass(frozen=True, slots=True)
class PruneReport:
    pruned: tuple[int, ...]
    orphans: tuple[int, ...]
    aborted_uploads: int
    kept: tuple[int, ...]


class _RefusedError(Exception):
    pass


class CheckpointClient:
    """Checkpoints of one unit of one workload."""

    def __init__(
        self,
        workload_id: str,
        unit_id: str,
        bucket: Bucket,
        keys: KeyService,
        *,
        retention: Retention | None = None,
        reporter: Reporter | None = None,
        now_us: Callable[[], int] = lambda: time.time_ns() // 1000,
    ) -> None:
        self.workload_id = check_name("workload", workload_id)
        self.unit_id = check_name("unit", unit_id)
        self.bucket = bucket
        self.keys = keys
        self.retention = retention or Retention()
        self.reporter = reporter
        self._now_us = now_us
        self._prefix = f"units/{unit_id}/"

    def __repr__(self) -> str:
        return f"CheckpointClient({self.workload_id}/{self.unit_id} in {self.bucket.name})"

    # -- keys in the bucket -----------------------------------------------------------------

    def _part_key(self, generation: int, name: str) -> str:
        return f"{self._prefix}generations/{generation:012d}/{name}"

    def _manifest_key(self, generation: int) -> str:
        return f"{self._prefix}manifests/{generation:012d}.json"

    def _context(self, generation: int, name: str) -> bytes:
        return f"{self.workload_id}/{self.unit_id}/{generation}/{name}".encode()

    def _generation_of(self, part_key: str) -> int:
        head = part_key[len(self._prefix) + len("generations/") :].split("/", 1)[0]
        return int(head) if head.isdigit() else -1

    def _scan(self) -> tuple[dict[int, int], set[int]]:
        """(published generation -> manifest size, generations that have parts)."""
        published: dict[int, int] = {}
        with_parts: set[int] = set()
        for item in self.bucket.objects(self._prefix):
            rest = item.key[len(self._prefix) :]
            kind, _, tail = rest.partition("/")
            head = tail.split("/", 1)[0].removesuffix(".json")
            if not head.isdigit():
                continue
            if kind == "manifests" and tail.endswith(".json"):
                published[int(head)] = item.size
            elif kind == "generations":
                with_parts.add(int(head))
        return published, with_parts

    # -- save -------------------------------------------------------------------------------

    def save(
        self,
        parts: Mapping[str, PartSource],
        *,
        step: int,
        final: bool = False,
        cause_event_id: str | None = None,
        prune: bool = True,
    ) -> Generation:
        """Publish a new generation of `parts` at `step`: every part, then the manifest."""
        if not parts:
            raise ValueError("a generation has at least one part")
        for name in parts:
            check_name("part", name)
        started = time.monotonic()
        published, with_parts = self._scan()
        generation = max(published.keys() | with_parts, default=0) + 1
        data_key = self.keys.new_data_key()
        entries = []
        for name, source in parts.items():
            key = self._part_key(generation, name)
            with tempfile.TemporaryFile() as sealed_file, _reader(source) as reader:
                sealed = seal(
                    data_key.plaintext, self._context(generation, name), reader, sealed_file
                )
                sealed_file.seek(0)
                self.bucket.put(key, sealed_file)
            entries.append(
                PartEntry(name, key, sealed.plain_bytes, sealed.stored_bytes, sealed.sha256)
            )
        manifest = sign_manifest(
            Manifest(
                workload_id=self.workload_id,
                unit_id=self.unit_id,
                generation=generation,
                step=step,
                created_at_us=self._now_us(),
                final=final,
                parts=tuple(entries),
                key_ref=self.keys.key_ref,
                wrapped_key=data_key.wrapped,
            ),
            data_key.plaintext,
        )
        body = manifest.to_json()
        self.bucket.put_bytes(self._manifest_key(generation), body)
        duration_s = time.monotonic() - started
        written = Generation(
            generation,
            step,
            manifest.created_at_us,
            final,
            manifest.stored_bytes + len(body),
            round(duration_s, 6),
        )
        if self.reporter is not None:
            self.reporter.report(
                Written(
                    unit_id=self.unit_id,
                    generation=generation,
                    step=step,
                    written_bytes=written.written_bytes,
                    duration_s=written.duration_s or 0.0,
                    final=final,
                    cause_event_id=cause_event_id,
                )
            )
        if prune and not final:  # a final checkpoint races the deadline: prune next time
            self.prune()
        return written

    # -- read -------------------------------------------------------------------------------

    def generations(self) -> list[Generation]:
        """The published generations, oldest first, from their manifests (not verified:
        `restore` verifies)."""
        published, _ = self._scan()
        found = []
        for generation in sorted(published):
            raw = self.bucket.get_bytes(self._manifest_key(generation))
            if raw is None:
                continue
            try:
                manifest = Manifest.from_json(raw)
            except ManifestError:
                continue
            found.append(
                Generation(
                    generation,
                    manifest.step,
                    manifest.created_at_us,
                    manifest.final,
                    manifest.stored_bytes + len(raw),
                )
            )
        return found

    def restore(self, into: Path | None = None) -> Restored | None:
        """The newest generation that passes every check (its parts' bytes, or files written
        into the folder `into`); None when the unit has none. Refused generations are logged
        and named in `Restored.refused`; `NoValidGenerationError` when none passes."""
        published, _ = self._scan()
        refused: list[tuple[int, str]] = []
        for generation in sorted(published, reverse=True):
            try:
                restored = self._restore(generation, into)
            except _RefusedError as why:
                log.warning("unit %s: refusing generation %d: %s", self.unit_id, generation, why)
                refused.append((generation, str(why)))
                continue
            if restored is None:
                continue  # pruned meanwhile
            return Restored(
                restored.generation,
                restored.step,
                restored.manifest,
                restored.parts,
                restored.files,
                tuple(refused),
            )
        if refused:
            raise NoValidGenerationError(self.unit_id, refused)
        return None

    def _restore(self, generation: int, into: Path | None) -> Restored | None:
        raw = self.bucket.get_bytes(self._manifest_key(generation))
        if raw is None:
            return None
        try:
            manifest = Manifest.from_json(raw)
        except ManifestError as error:
            raise _RefusedError(str(error)) from None
        expected = (self.workload_id, self.unit_id, generation)
        if (manifest.workload_id, manifest.unit_id, manifest.generation) != expected:
            raise _RefusedError(
                f"the manifest names {manifest.workload_id}/{manifest.unit_id} generation "
                f"{manifest.generation}"
            )
        try:
            data_key = self.keys.unwrap(manifest.wrapped_key)
        except KeyAccessError as error:
            if error.status == 400:  # not a key this workload's key wrapped
                raise _RefusedError(f"its data key does not unwrap: {error}") from None
            raise
        if not hmac.compare_digest(manifest.mac, manifest_mac(manifest, data_key)):
            raise _RefusedError("the manifest does not authenticate: it was changed after writing")
        parts: dict[str, bytes] = {}
        files: dict[str, Path] = {}
        for entry in manifest.parts:
            if entry.key != self._part_key(generation, entry.name):
                raise _RefusedError(f"part {entry.name} points elsewhere ({entry.key})")
            with tempfile.TemporaryFile() as stored:
                self.bucket.get(entry.key, stored)
                size = stored.seek(0, os.SEEK_END)
                stored.seek(0)
                digest = _sha256(stored)
                if size != entry.stored_bytes or digest != entry.sha256:
                    raise _RefusedError(
                        f"part {entry.name}: {size} bytes with SHA-256 {digest[:12]}..., the "
                        f"manifest says {entry.stored_bytes} bytes, {entry.sha256[:12]}..."
                    )
                stored.seek(0)
                context = self._context(generation, entry.name)
                try:
                    if into is None:
                        sink = io.BytesIO()
                        unseal(data_key, context, stored, sink)
                        parts[entry.name] = sink.getvalue()
                    else:
                        files[entry.name] = _unseal_into(data_key, context, stored, into, entry)
                except SealError as error:
                    raise _RefusedError(f"part {entry.name}: {error}") from None
        return Restored(generation, manifest.step, manifest, parts, files)

    # -- prune ------------------------------------------------------------------------------

    def prune(self) -> PruneReport:
        """Remove what the retention does not keep, interrupted saves' parts, and incomplete
        uploads older than the newest generation. The manifest goes first, so a generation
        disappears whole for readers before its parts do."""
        published, with_parts = self._scan()
        created: list[tuple[int, int]] = []
        for generation in published:
            raw = self.bucket.get_bytes(self._manifest_key(generation))
            try:
                at_us = Manifest.from_json(raw).created_at_us if raw else 0
            except ManifestError:
                at_us = 0  # unreadable: oldest
            created.append((generation, at_us))
        doomed = generations_to_prune(created, self.retention, self._now_us())
        lost = orphans(with_parts, published)
        self.bucket.delete(self._manifest_key(g) for g in doomed)
        gone = set(doomed) | set(lost)
        keys = [
            item.key
            for item in self.bucket.objects(f"{self._prefix}generations/")
            if self._generation_of(item.key) in gone
        ]
        self.bucket.delete(keys)
        aborted = 0
        if published:
            newest = max(published)
            for key, upload_id in self.bucket.uploads(f"{self._prefix}generations/"):
                if self._generation_of(key) < newest:
                    self.bucket.abort_upload(key, upload_id)
                    aborted += 1
        kept = tuple(sorted(set(published) - set(doomed)))
        return PruneReport(tuple(doomed), tuple(lost), aborted, kept)


@contextmanager
def _reader(source: PartSource) -> Iterator[BinaryIO]:
    if isinstance(source, bytes):
        yield io.BytesIO(source)
    elif isinstance(source, Path):
        with source.open("rb") as f:
            yield f
    else:
        yield source


def _sha256(stream: BinaryIO) -> str:
    digest = hashlib.sha256()
    for chunk in iter(lambda: stream.read(1 << 20), b""):
        digest.update(chunk)
    return digest.hexdigest()


def _unseal_into(
    key: bytes, context: bytes, stored: BinaryIO, into: Path, entry: PartEntry
) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    target = into / entry.name
    partial = into / f".{entry.name}.partial"
    try:
        with partial.open("wb") as sink:
            unseal(key, context, stored, sink)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target
