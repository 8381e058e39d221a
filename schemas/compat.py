"""Schema evolution under full compatibility (DESIGN.md §3).

A change from the last released envelope schema (N) to the working one (N+1) is accepted when
a reader of N+1 reads records written with N (backward) and a reader of N reads records
written with N+1 (forward), by the Avro specification's resolution rules, checked with the
Avro project's own checker (``avro.compatibility``).

One exception, on purpose: appending a new event type to the payload union. An older reader
cannot resolve a branch it has never seen, so strict forward compatibility would forbid ever
adding an event. The check therefore requires forward compatibility for every event type the
older reader knows, and an older reader that meets a new event type reports it as
``unknown_schema`` and dead-letters it (nothing is lost; it is replayed after the upgrade).
Removing or renaming an event type stays refused (a reader of N+1 could not read N).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from schemas.codec import RELEASED_DIR, schema_fingerprint


@dataclass(frozen=True, slots=True)
class Incompatibility:
    direction: str  # "backward" (new reads old) or "forward" (old reads new)
    kind: str
    location: str
    detail: str

    def __str__(self) -> str:
        reader, writer = ("N+1", "N") if self.direction == "backward" else ("N", "N+1")
        return (
            f"{self.direction}: a reader of {reader} cannot read {writer} at {self.location}: "
            f"{self.kind.replace('_', ' ')} ({self.detail})"
        )


EVOLVE_FIX = (
    "give new fields a default, keep removed fields' defaults, never change a field's type or "
    "remove an event type, rename by expand/contract; see docs/events.md#evolution"
)
"""How to make an incompatible change compatible."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    released_version: int | None
    changed: bool
    added_event_types: tuple[str, ...]
    problems: tuple[Incompatibility, ...]

    @property
    def compatible(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """What a compatible result means, in a sentence (after "ok: " once a version is
        released)."""
        if self.released_version is None:
            return "No released schema yet: run `spotcap schemas release`."
        if not self.changed:
            return f"the schemas match released version {self.released_version}."
        added = ", ".join(self.added_event_types) or "none"
        return (
            f"fully compatible with released version {self.released_version} (new event "
            f"types: {added}). Record it with `spotcap schemas release`."
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "compatible": self.compatible,
            "released_version": self.released_version,
            "changed": self.changed,
            "added_event_types": list(self.added_event_types),
            "problems": [str(p) for p in self.problems],
        }


def _payload_branches(schema: Mapping[str, Any]) -> list[Any]:
    for field in schema["fields"]:
        if field["name"] == "payload":
            branches: list[Any] = field["type"]
            return branches
    raise ValueError("the envelope schema has no payload field")


def _branch_name(branch: Any) -> str:
    if isinstance(branch, str):
        return branch
    name = str(branch["name"])
    namespace = branch.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _without_branches(schema: Mapping[str, Any], names: set[str]) -> dict[str, Any]:
    """`schema` with the named payload-union branches removed.

    Named types are defined at their first use and new event types are appended last, so a
    type an older branch uses is never defined inside a removed (newer) branch.
    """
    trimmed = copy.deepcopy(dict(schema))
    branches = _payload_branches(trimmed)
    branches[:] = [b for b in branches if _branch_name(b) not in names]
    return trimmed


def _check(direction: str, reader: Mapping[str, Any], writer: Mapping[str, Any]) -> list[Any]:
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(
        avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer))
    )
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = [getattr(k, "value", str(k)) for k in result.incompatibilities]
    locations = sorted(result.locations) or ["/"]
    messages = sorted(str(m) for m in result.messages) or [""]
    return [
        Incompatibility(direction, kind, ", ".join(locations), "; ".join(messages))
        for kind in dict.fromkeys(kinds)
    ]


def check_compatible(old: Mapping[str, Any], new: Mapping[str, Any]) -> CheckResult:
    """Whether envelope schema `new` may follow `old` (see the module docstring)."""
    old_names = {_branch_name(b) for b in _payload_branches(old)}
    new_names = [_branch_name(b) for b in _payload_branches(new)]
    added = tuple(n for n in new_names if n not in old_names)
    problems = _check("backward", new, old)
    problems += _check("forward", old, _without_branches(new, set(added)) if added else new)
    return CheckResult(
        released_version=None,
        changed=schema_fingerprint(old) != schema_fingerprint(new),
        added_event_types=added,
        problems=tuple(problems),
    )


def released_versions(released_dir: Path = RELEASED_DIR) -> list[tuple[int, Path]]:
    """(version, path) of every released envelope schema, oldest first."""
    found = []
    for path in released_dir.glob("envelope-v*.avsc"):
        found.append((int(path.stem.removeprefix("envelope-v")), path))
    return sorted(found)


def check_against_released(
    new: Mapping[str, Any], released_dir: Path = RELEASED_DIR
) -> CheckResult:
    """Check the working schema against the newest released one (nothing released: all new)."""
    versions = released_versions(released_dir)
    if not versions:
        return CheckResult(None, True, tuple(_branch_name(b) for b in _payload_branches(new)), ())
    version, path = versions[-1]
    result = check_compatible(json.loads(path.read_text()), new)
    return CheckResult(version, result.changed, result.added_event_types, result.problems)


def release(new: Mapping[str, Any], released_dir: Path = RELEASED_DIR) -> tuple[int, Path]:
    """Record `new` as the next released version; refuses an incompatible one."""
    result = check_against_released(new, released_dir)
    if not result.compatible:
        raise ValueError(
            "refusing to release an incompatible schema:\n"
            + "\n".join(f"  {p}" for p in result.problems)
        )
    versions = released_versions(released_dir)
    if versions and not result.changed:
        return versions[-1]
    version = versions[-1][0] + 1 if versions else 1
    path = released_dir / f"envelope-v{version:04d}.avsc"
    released_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(new, indent=2) + "\n")
    return version, path


def release_report(new: Mapping[str, Any], released_dir: Path = RELEASED_DIR) -> dict[str, Any]:
    """`release`, and what `spotcap schemas release --json` says of it: the version, its file,
    and whether this call released it (``new``; an unchanged schema is not released again)."""
    before = released_versions(released_dir)
    version, path = release(new, released_dir)
    fresh = not before or version != before[-1][0]
    return {"ok": True, "version": version, "path": str(path), "new": fresh}
