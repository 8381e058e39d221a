"""Where the archive lives: a local directory (the embedded default) or S3-compatible storage
with Object Lock (`replay.archive.s3`). Both hold the same objects under the same keys,
``REGION/YYYY-MM/NAME``."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol


class ArchiveError(RuntimeError):
    """The archive cannot do what was asked; the message says why and how to fix it."""


@dataclass(frozen=True, slots=True)
class Retention:
    mode: str  # "COMPLIANCE", "GOVERNANCE"
    retain_until: datetime


class ArchiveStorage(Protocol):
    def put(self, key: str, source: Path, retain_until: datetime) -> None:
        """Store the file `source` under `key`, locked until `retain_until` where supported."""

    def fetch(self, key: str, target: Path) -> Path:
        """Copy the object to `target` (a local archive may return its own path instead)."""
        ...

    def read(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`, sorted."""
        ...

    def retention(self, key: str) -> Retention | None:
        """The object's lock; None where the storage has no Object Lock (a directory)."""
        ...

    @property
    def enforces_retention(self) -> bool: ...

    def describe(self) -> str: ...


class LocalStorage:
    """A directory: the embedded default. Nothing stops a change: verify finds it."""

    enforces_retention = False

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key

    def put(self, key: str, source: Path, retain_until: datetime) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        shutil.copyfile(source, tmp)
        tmp.replace(target)

    def fetch(self, key: str, target: Path) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise ArchiveError(f"{path} is missing from the archive")
        return path

    def read(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except OSError as error:
            raise ArchiveError(f"cannot read {path}: {error.strerror or error}") from error

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            str(p.relative_to(self.root))
            for p in base.rglob("*")
            if p.is_file() and not p.name.endswith(".part")
        )

    def retention(self, key: str) -> Retention | None:
        return None

    def describe(self) -> str:
        return f"the local archive at {self.root}"


def open_storage(where: str, *, create: bool = False) -> ArchiveStorage:
    """The archive at `where`: ``s3://BUCKET/PREFIX`` (with Object Lock; the bucket made when
    `create` and it is missing) or a local directory."""
    if where.startswith("s3://"):
        from replay.archive.s3 import S3Storage  # boto3 loads slowly; a local archive needs none

        return S3Storage(where, create=create)
    return LocalStorage(Path(where))
