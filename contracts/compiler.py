"""The contract compiler (ADR-03): contract files in, accepted contracts and located errors out.

`compile_contracts` is pure: it reads the files' bytes it is given and the pools in the
`FeasibilityEnv`, never the disk or the clock (the caller passes ``published_at_us``). For each
file it parses the YAML with line marks, validates the document, resolves it against its tier,
checks consistency and feasibility, refuses workload ids declared in more than one file, then
hands committed capacity to the floors of what is left (rule (c)). Every accepted contract comes
with its unsigned `Bundle`, the bundle's SHA-256 and its ``contract_published`` event.
Signing and writing happen at the edge (`output.write_outputs`).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from contracts.approvals import ChangeControl, check_change, published_signatures
from contracts.bundles import Bundle, bundle_for, bundle_sha256
from contracts.diagnose import describe_validation_error, locate, locate_finding
from contracts.event import Publication, contract_published
from contracts.feasibility import (
    RULES,
    RULES_NEEDING_POOLS,
    FeasibilityEnv,
    check_contract,
    check_floors,
)
from contracts.source import LoadedYaml, YamlSourceError, decode_utf8, load_yaml_with_lines
from schemas.contracts.errors import ContractError, ContractFindingsError
from schemas.contracts.model import Contract, ContractDocument
from schemas.contracts.resolve import resolve
from schemas.contracts.units import format_eur
from schemas.events import ContractPublished, Envelope
from schemas.ids import derived_event_id

PRODUCER = "contracts/compiler"


@dataclass(frozen=True, slots=True)
class CompiledContract:
    """An accepted contract, its bundle (unsigned) and its ``contract_published`` event."""

    path: Path
    contract: Contract
    source_sha256: str
    bundle: Bundle
    bundle_sha256: str
    event: Envelope


@dataclass(frozen=True, slots=True)
class CompileResult:
    """What the compiler accepted and refused; a file is accepted only with no error."""

    accepted: tuple[CompiledContract, ...]
    errors: tuple[ContractError, ...]
    refused: tuple[Path, ...]
    unchecked_rules: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def events(self) -> tuple[Envelope, ...]:
        return tuple(c.event for c in self.accepted)

    @property
    def unchecked_warnings(self) -> tuple[str, ...]:
        """A sentence per rule that --unchecked (no pool catalogue) left unchecked."""
        return tuple(
            f"rule {rule} was not checked ({RULES[rule]}): --unchecked without --pools; "
            "published-contracts.json records it"
            for rule in self.unchecked_rules
        )

    @property
    def notes(self) -> tuple[str, ...]:
        """What accepted contracts mean that their authors may not expect: a contract that
        names no approver can never spend beyond its cap (ADR-23, ADR-30)."""
        out = []
        for c in self.accepted:
            fallback = c.contract.fallback
            if not fallback.approver:
                cap = format_eur(fallback.spend_cap_per_day_eur_micros)
                out.append(
                    f"{c.contract.workload}: no fallback.approver, so no guaranteed capacity is "
                    f"bought beyond the daily cap of {cap}: work that finds no reclaimable room "
                    f"waits for it, unspent, and the owner {c.contract.owner} is told "
                    "(fallback_withheld); name an approver to allow it"
                )
        return tuple(out)

    def errors_for(self, path: Path) -> tuple[ContractError, ...]:
        return tuple(e for e in self.errors if e.file == path)

    def rows(self) -> list[tuple[str, str, str, str, int | None]]:
        """Per contract file, by path: file, workload, tier, scheduler, and None when accepted
        or the number of its errors when refused."""
        accepted = {c.path: c.contract for c in self.accepted}
        rows: list[tuple[str, str, str, str, int | None]] = []
        for path in sorted({*accepted, *self.refused}):
            c = accepted.get(path)
            if c is not None:
                rows.append((path.as_posix(), c.workload, c.tier, c.scheduler, None))
            else:
                rows.append((path.as_posix(), "", "", "", len(self.errors_for(path))))
        return rows

    def as_json(self, written: Sequence[Path] = (), published: int | None = None) -> dict[str, Any]:
        """What was accepted and refused, the errors, and what was `written` and `published`
        (the number of events; None when nothing was published)."""
        return {
            "ok": self.ok,
            "accepted": [
                {
                    "file": c.path.as_posix(),
                    "workload_id": c.contract.workload,
                    "contract_version": c.contract.version,
                    "tier": c.contract.tier,
                    "scheduler": c.contract.scheduler,
                    "contract_sha256": c.bundle_sha256,
                    "event_id": c.event.event_id,
                }
                for c in self.accepted
            ],
            "refused": [p.as_posix() for p in self.refused],
            "errors": [e.to_json() for e in self.errors],
            "unchecked_rules": list(self.unchecked_rules),
            "notes": list(self.notes),
            "written": [p.as_posix() for p in written],
            "published": published,
        }


CONTRACT_SUFFIXES = (".yaml", ".yml")


class ContractFileError(ValueError):
    """A contract file that does not compile; the message lists its errors."""


def contract_of(path: Path, data: bytes) -> tuple[Contract, str]:
    """The resolved contract of one contract file that resolves, and the SHA-256 of its
    bytes."""
    item = _read(path, data)
    if item.contract is None or item.errors:
        raise ContractFileError("; ".join(str(e) for e in item.errors) or f"{path}: no contract")
    return item.contract, item.source_sha256


def contract_files(directory: Path) -> dict[Path, bytes]:
    """Every ``*.yaml``/``*.yml`` under `directory` (hidden folders skipped), path -> bytes.

    Bytes, not text: the compiler hashes the file exactly as written (``source_sha256``) and
    reports a file that is not UTF-8 at its line.
    """
    files: dict[Path, bytes] = {}
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.is_file() and path.suffix in CONTRACT_SUFFIXES:
            files[path] = path.read_bytes()
    return files


@dataclass(slots=True)
class _File:
    path: Path
    source_sha256: str
    loaded: LoadedYaml | None = None
    contract: Contract | None = None
    errors: list[ContractError] = field(default_factory=list)

    @property
    def workload(self) -> str | None:
        data = self.loaded.data if self.loaded is not None else None
        value = data.get("workload") if isinstance(data, dict) else None
        return value if isinstance(value, str) else None


def _decode(path: Path, data: bytes) -> str | ContractError:
    """The UTF-8 text of `data`, or an error at the line of the first byte that is not UTF-8."""
    try:
        return decode_utf8(data)
    except YamlSourceError as error:
        return ContractError(path, error.line, error.field, error.message, error.fix, "yaml")


def _read(path: Path, source: str | bytes) -> _File:
    # The hash is of the file's bytes exactly as written (CRLF, BOM and all); a text given as a
    # str stands for its UTF-8 encoding.
    data = source.encode("utf-8") if isinstance(source, str) else source
    parsed = _File(path, hashlib.sha256(data).hexdigest())
    text = _decode(path, data)
    if isinstance(text, ContractError):
        parsed.errors.append(text)
        return parsed
    try:
        loaded = load_yaml_with_lines(text)
    except YamlSourceError as problem:
        parsed.errors.append(
            ContractError(path, problem.line, problem.field, problem.message, problem.fix, "yaml")
        )
        return parsed
    parsed.loaded = loaded
    if not isinstance(loaded.data, dict):
        parsed.errors.append(
            locate(
                path,
                loaded,
                (),
                message="is not a contract: the file must be one YAML mapping",
                fix="start the file with apiVersion: spotcap/v1 and kind: InterruptionContract",
                rule="schema",
            )
        )
        return parsed
    try:
        document = ContractDocument.model_validate(loaded.data)
    except ValidationError as error:
        for detail in error.errors():
            key_path, message, fix = describe_validation_error(detail)
            parsed.errors.append(
                locate(path, loaded, key_path, message=message, fix=fix, rule="schema")
            )
        return parsed
    try:
        parsed.contract = resolve(document)
    except ContractFindingsError as problems:
        parsed.errors.extend(locate_finding(path, loaded, f) for f in problems.findings)
    return parsed


def _refuse_duplicates(files: list[_File]) -> None:
    by_workload: dict[str, list[_File]] = defaultdict(list)
    for parsed in files:
        if parsed.workload is not None:
            by_workload[parsed.workload].append(parsed)
    for workload, declared in by_workload.items():
        if len(declared) < 2:
            continue
        for parsed in declared:
            assert parsed.loaded is not None
            others = ", ".join(
                f"{o.path.as_posix()}:{o.loaded.line_of(('workload',)) if o.loaded else 1}"
                for o in declared
                if o is not parsed
            )
            parsed.errors.append(
                locate(
                    parsed.path,
                    parsed.loaded,
                    ("workload",),
                    message=f"workload {workload!r} is also declared in {others}",
                    fix="keep one contract file per workload: merge the files, or rename one "
                    "of the workloads",
                    rule="duplicate",
                )
            )


def _event(
    compiled_path: Path,
    contract: Contract,
    source_sha256: str,
    sha: str,
    *,
    published_at_us: int,
    region: str,
    source_commit: str | None,
    signatures: Mapping[str, str],
) -> Envelope:
    payload = contract_published(
        Publication(
            contract=contract,
            contract_sha256=sha,
            source_path=compiled_path.as_posix(),
            source_sha256=source_sha256,
            source_commit=source_commit,
            signatures=signatures,
        )
    )
    return Envelope(
        # Same bundle, region and publish time: same id, so re-running one publication is a
        # no-op; publishing the same bundle again later (a revert) is a new event.
        event_id=derived_event_id(
            f"{region}/{sha}@{published_at_us}", ContractPublished.EVENT_TYPE
        ),
        event_type=ContractPublished.EVENT_TYPE,
        occurred_at=published_at_us,
        recorded_at=published_at_us,
        region=region,
        key=contract.workload,
        causation_id=None,
        correlation_id=None,
        producer=PRODUCER,
        payload=payload,
    )


def compile_contracts(
    files: Mapping[Path, str | bytes],
    env: FeasibilityEnv,
    *,
    published_at_us: int,
    region: str = "dev",
    source_commit: str | None = None,
    change_control: ChangeControl | None = None,
) -> CompileResult:
    """Check every contract file in `files` (path -> its bytes, or its text) and build what is
    accepted. Bytes are hashed as they are (``source_sha256``) and must be UTF-8.

    ``published_at_us`` becomes the events' ``occurred_at``: the compiler never reads the clock.
    With `change_control`, a change of authority (floor or cap raised, fallback approver
    changed) is refused without the owner's and a higher authority's signatures (ADR-30), and
    the signatures of an accepted file travel in its event, for the deciders to check again.
    """
    parsed = [_read(path, files[path]) for path in sorted(files)]
    _refuse_duplicates(parsed)
    for item in parsed:
        if item.contract is not None and item.loaded is not None and not item.errors:
            item.errors.extend(
                locate_finding(item.path, item.loaded, finding)
                for finding in check_contract(item.contract, env)
            )
    floor_findings = check_floors(
        [p.contract for p in parsed if p.contract is not None and not p.errors], env
    )
    accepted: list[CompiledContract] = []
    for item in parsed:
        contract = item.contract
        if contract is not None and contract.workload in floor_findings and not item.errors:
            assert item.loaded is not None
            item.errors.append(
                locate_finding(item.path, item.loaded, floor_findings[contract.workload])
            )
        if contract is not None and change_control is not None and not item.errors:
            assert item.loaded is not None
            unsigned = check_change(change_control, item.path, contract, item.source_sha256)
            if unsigned is not None:
                item.errors.append(locate_finding(item.path, item.loaded, unsigned))
        if contract is None or item.errors:
            continue
        bundle = bundle_for(contract, item.source_sha256)
        sha = bundle_sha256(bundle)
        event = _event(
            item.path,
            contract,
            item.source_sha256,
            sha,
            published_at_us=published_at_us,
            region=region,
            source_commit=source_commit,
            signatures=published_signatures(
                change_control.signatures.get(item.path) if change_control else None
            ),
        )
        accepted.append(
            CompiledContract(item.path, contract, item.source_sha256, bundle, sha, event)
        )
    errors = tuple(e for item in parsed for e in sorted(item.errors, key=lambda e: e.line))
    return CompileResult(
        accepted=tuple(accepted),
        errors=errors,
        refused=tuple(item.path for item in parsed if item.errors),
        unchecked_rules=() if env.checks_pools else RULES_NEEDING_POOLS,
    )
